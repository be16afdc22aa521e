// The eval loop (runner.hpp).
#include "eval/runner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "eval/scoring.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
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
    // The answer is one line: stop once a line with content has ended.
    return !has_text_after_newline(tokenizer->decode(ids, /*skip_special=*/true));
  });
  out.generated_tokens = int64_t(ids.size());
  out.generation = tokenizer->decode(ids, /*skip_special=*/true);
  out.score = score_text(sample, out.generation);
  return out;
}

std::vector<CellResult> run_eval(Model& model, const Tokenizer* tokenizer, const EvalConfig& c,
                                 const Progress& progress) {
  validate(c, model.info().max_context, tokenizer != nullptr);
  const Encoder encode = [tokenizer](const std::string& text) { return tokenizer->encode(text, true); };
  std::vector<CellResult> cells;
  for (const auto& t : c.tasks)
    for (int64_t l : c.lengths) {
      const std::vector<double> depths = task_has_depth(t) && tokenizer ? c.depths : std::vector<double>{-1};
      for (double d : depths) cells.push_back(CellResult{t, l, d});
    }
  auto make = [&](const SampleSpec& spec) {
    return tokenizer ? make_text_sample(spec, encode) : make_id_mqar_sample(spec, model.info().vocab_size);
  };
  for (const auto& cell : cells) make({cell.task, cell.length, cell.depth, c.seed, 0});  // template fits the length
  int64_t done = 0;
  for (auto& cell : cells) {
    for (int64_t i = 0; i < c.samples; ++i) {
      const SampleSpec spec{cell.task, cell.length, cell.depth, c.seed, i};
      const Sample s = make(spec);
      const auto t0 = std::chrono::steady_clock::now();
      const SampleOutcome o = run_sample(model, tokenizer, s);
      cell.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      cell.n += 1;
      cell.score_sum += o.score;
      cell.prompt_tokens += o.prompt_tokens;
      cell.generated_tokens += o.generated_tokens;
    }
    if (progress) progress(cell, ++done, int64_t(cells.size()));
  }
  return cells;
}

nlohmann::json results_json(const std::string& model_name, const EvalConfig& c, const std::vector<CellResult>& cells) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& cell : cells) {
    arr.push_back({{"task", cell.task},
                   {"length", cell.length},
                   {"depth", cell.depth < 0 ? nlohmann::json(nullptr) : nlohmann::json(cell.depth)},
                   {"accuracy", cell.accuracy()},
                   {"n", cell.n},
                   {"tokens_per_s", cell.tokens_per_s()},
                   {"prompt_tokens_mean", cell.n ? double(cell.prompt_tokens) / double(cell.n) : 0.0},
                   {"seconds", cell.seconds}});
  }
  return {{"model", model_name}, {"seed", c.seed}, {"samples", c.samples}, {"cells", arr}};
}

}  // namespace flashkit::eval
