// The eval loop (runner.hpp).
#include "eval/runner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "engine/paged.hpp"
#include "eval/scoring.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
#include "flashkit/serve.hpp"
#include "flashkit/tokenizer.hpp"

namespace flashkit::eval {

namespace {

[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, m); }

int32_t argmax(std::span<const float> row) {
  return int32_t(std::max_element(row.begin(), row.end()) - row.begin());  // the first of equal maxima
}

bool has_text_after_newline(const std::string& s) {
  const size_t nl = s.find('\n');
  if (nl == std::string::npos) return false;
  return s.find_first_not_of(" \t\r\n") < nl;  // a line with content has ended
}

// The answer is one line: generation stops once a line with content has ended.
bool answer_ended(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  return has_text_after_newline(tokenizer.decode(ids, /*skip_special=*/true));
}

void finish_text(const Tokenizer& tokenizer, const Sample& sample, const std::vector<int32_t>& ids,
                 SampleOutcome& out) {
  out.generated_tokens = int64_t(ids.size());
  out.generation = tokenizer.decode(ids, /*skip_special=*/true);
  out.score = score_text(sample, out.generation);
}

}  // namespace

void validate(const EvalConfig& c, int64_t context, bool has_tokenizer) {
  if (c.tasks.empty()) bad("--task: no task given (expected one or more of passkey, niah_single, ...)");
  for (const auto& t : c.tasks) {
    if (!is_task(t)) {
      std::string names;
      for (const auto& n : task_names()) names += (names.empty() ? "" : ", ") + n;
      bad("--task: unknown task \"" + t + "\" (expected one of " + names + ")");
    }
    if (!has_tokenizer && t != "mqar")
      bad("--task: " + t + " is a text task and the model has no tokenizer.json (only mqar runs on token ids)");
  }
  if (c.samples < 1) bad("--samples: must be at least 1, got " + std::to_string(c.samples));
  if (c.lengths.empty()) bad("--lengths: no length given");
  for (int64_t l : c.lengths) {
    if (l < 1) bad("--lengths: a length must be at least 1 token, got " + std::to_string(l));
    if (l > context)
      bad("--lengths: " + std::to_string(l) + " tokens exceeds the model's context of " + std::to_string(context) +
          " tokens");
  }
  if (c.depths.empty()) bad("--depths: no depth given");
  for (double d : c.depths)
    if (!(d >= 0 && d <= 1)) bad("--depths: a depth must be in [0, 1], got " + std::to_string(d));
  if (c.batch < 0 || c.batch > 4096)
    bad("--batch: must be in [1, 4096] (or 0: by backend), got " + std::to_string(c.batch));
}

SampleOutcome run_sample(Model& model, const Tokenizer* tokenizer, const Sample& sample) {
  auto session = model.new_session();
  SampleOutcome out;
  out.prompt_tokens = int64_t(sample.ids.size());
  if (!sample.query_positions.empty()) {  // id mqar: every query's value, teacher-forced in one pass
    session->prefill(sample.ids, /*all_logits=*/true);
    const auto& all = session->all_logits();
    const size_t vocab = all.size() / sample.ids.size();
    std::vector<int32_t> predicted;
    for (int64_t p : sample.query_positions)
      predicted.push_back(argmax(std::span<const float>(all.data() + size_t(p) * vocab, vocab)));
    out.score = score_ids(sample, predicted);
    return out;
  }
  if (!tokenizer) bad("eval: a text task needs the model's tokenizer");
  GenerateOptions g;
  g.max_new_tokens = sample.max_new_tokens;
  g.temperature = 0;
  std::vector<int32_t> ids;
  generate(*session, sample.ids, g, [&](int32_t id) {
    ids.push_back(id);
    return !answer_ended(*tokenizer, ids);
  });
  finish_text(*tokenizer, sample, ids, out);
  return out;
}

std::vector<SampleOutcome> run_text_samples(serve::Engine& engine, const Tokenizer& tokenizer,
                                            const std::vector<Sample>& samples) {
  if (engine.options().background)
    bad("eval: run_text_samples needs an engine created with background = false (it steps the engine itself)");
  std::vector<SampleOutcome> out(samples.size());
  std::vector<std::vector<int32_t>> ids(samples.size());
  std::vector<std::string> errors(samples.size());
  std::vector<bool> done(samples.size(), false);
  auto submit = [&](size_t i) {
    serve::Request r;
    r.prompt = samples[i].ids;
    r.max_tokens = samples[i].max_new_tokens;
    r.sampling.temperature = 0;
    r.on_token = [&, i](int32_t id) {
      ids[i].push_back(id);
      return !answer_ended(tokenizer, ids[i]);
    };
    r.on_done = [&, i](const serve::RequestResult& res) {
      if (res.finish_reason == "error" || res.finish_reason == "cancelled")
        errors[i] = res.finish_reason + (res.error.empty() ? "" : ": " + res.error);
      out[i].cached_tokens = res.cached_tokens;
      done[i] = true;
    };
    engine.submit(std::move(r));
  };
  if (samples.empty()) return out;
  // The first sample alone until its prompt is computed: the prefix cache only holds computed blocks, so the others
  // (the same filler up to their needle) find it there instead of all computing it side by side.
  submit(0);
  while (ids[0].empty() && !done[0] && engine.step()) {
  }
  for (size_t i = 1; i < samples.size(); ++i) submit(i);
  while (engine.step()) {
  }
  for (size_t i = 0; i < samples.size(); ++i) {
    if (!errors[i].empty())
      fail(Status::internal, "eval: " + samples[i].task + " sample " + std::to_string(i) + " at length " +
                                      std::to_string(samples[i].length) + " failed in the serving engine (" +
                                      errors[i] + ")");
    out[i].prompt_tokens = int64_t(samples[i].ids.size());
    finish_text(tokenizer, samples[i], ids[i], out[i]);
  }
  return out;
}

int64_t default_batch(bool has_kv_cache) {
  constexpr int64_t kBatch = 8;  // 1.65x on the CPU, 1.46-1.95x on the H200 (runner.hpp)
  return has_kv_cache ? kBatch : 1;
}

EvalRun run_eval(Model& model, const Tokenizer* tokenizer, const EvalConfig& c, const Progress& progress) {
  validate(c, model.info().max_context, tokenizer != nullptr);
  const Encoder encode = [tokenizer](const std::string& text) { return tokenizer->encode(text, true); };
  EvalRun run;
  for (const auto& t : c.tasks)
    for (int64_t l : c.lengths) {
      const std::vector<double> depths = task_has_depth(t) && tokenizer ? c.depths : std::vector<double>{-1};
      for (double d : depths) run.cells.push_back(CellResult{t, l, d});
    }
  auto make = [&](const SampleSpec& spec) {
    return tokenizer ? make_text_sample(spec, encode) : make_id_mqar_sample(spec, model.info().vocab_size);
  };
  for (const auto& cell : run.cells) make({cell.task, cell.length, cell.depth, c.seed, 0});  // template fits
  // Text tasks through one caller-stepped serving engine for the whole run, so that its prefix cache carries the
  // shared filler from cell to cell. The model is borrowed: the engine ends before this function returns.
  const int64_t longest = *std::max_element(c.lengths.begin(), c.lengths.end());
  run.batch = c.batch > 0 ? c.batch : 1;
  if (c.batch == 0 && tokenizer) {  // by backend; only text samples can go through the engine
    run.batch = default_batch(engine::has_kv_cache(model));
  }
  std::unique_ptr<serve::Engine> engine;
  if (run.batch > 1 && tokenizer) {
    serve::EngineOptions eo;
    eo.max_running = run.batch;
    // A whole prompt fits one step, so prefill runs in the shapes of the Session loop's (on the CPU, 256- to
    // 2048-row chunks timed alike at 512 tokens); the rows of the others' decode steps ride along.
    eo.max_step_tokens = std::clamp<int64_t>(longest, 256, 65536);
    eo.background = false;
    try {
      engine = serve::Engine::create(std::shared_ptr<Model>(std::shared_ptr<Model>(), &model), eo);
    } catch (const Error& e) {
      if (e.status() != Status::unsupported) throw;  // a backend without paged steps: the Session loop
    }
  }
  run.batched = engine != nullptr;
  int64_t done = 0;
  // A cell's samples go in groups (16 batches through the engine, one at a time on a Session), so that a large
  // --samples never holds every prompt at once.
  const int64_t group = engine ? 16 * run.batch : 1;
  for (auto& cell : run.cells) {
    for (int64_t first = 0; first < c.samples; first += group) {
      std::vector<Sample> samples;
      for (int64_t i = first; i < std::min(c.samples, first + group); ++i)
        samples.push_back(make({cell.task, cell.length, cell.depth, c.seed, i}));
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<SampleOutcome> outcomes;
      if (engine) outcomes = run_text_samples(*engine, *tokenizer, samples);
      else outcomes.push_back(run_sample(model, tokenizer, samples[0]));
      cell.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (const auto& o : outcomes) {
        cell.n += 1;
        cell.score_sum += o.score;
        cell.prompt_tokens += o.prompt_tokens;
        cell.generated_tokens += o.generated_tokens;
        cell.cached_tokens += o.cached_tokens;
        run.prefix_hit_tokens += o.cached_tokens;
      }
    }
    if (progress) progress(cell, ++done, int64_t(run.cells.size()));
  }
  return run;
}

nlohmann::json results_json(const std::string& model_name, const EvalConfig& c, const EvalRun& run) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& cell : run.cells) {
    arr.push_back({{"task", cell.task},
                   {"length", cell.length},
                   {"depth", cell.depth < 0 ? nlohmann::json(nullptr) : nlohmann::json(cell.depth)},
                   {"accuracy", cell.accuracy()},
                   {"n", cell.n},
                   {"tokens_per_s", cell.tokens_per_s()},
                   {"prompt_tokens_mean", cell.n ? double(cell.prompt_tokens) / double(cell.n) : 0.0},
                   {"cached_tokens", cell.cached_tokens},
                   {"seconds", cell.seconds}});
  }
  return {{"model", model_name}, {"seed", c.seed},   {"samples", c.samples},
          {"batch", run.batch},  {"batched", run.batched}, {"prefix_hit_tokens", run.prefix_hit_tokens},
          {"cells", arr}};
}

}  // namespace flashkit::eval
