// flashkit eval (src/eval, docs/eval.md): RULER-style long-context tasks through the engine.
//   flashkit eval -m DIR --task passkey,niah_single,... --lengths 256,512 [--depths 0,0.5,1] [--samples N]
//                 [--seed S] [--batch N] [-o results.json] [--device D] [--dtype T] [--threads N]
// Progress on stderr (one line per cell), the results JSON on stdout or in -o.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli_checks.hpp"
#include "commands.hpp"
#include "core/json_io.hpp"
#include "core/limits.hpp"
#include "eval/runner.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
#include "flashkit/tokenizer.hpp"

namespace flashkit::cli {

namespace {

[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, m); }

// The model's context from its config.json (max_position_embeddings), checked before the model loads; 0 when the
// model is a .gguf or the field is missing (Model::load then checks).
int64_t config_context(const std::filesystem::path& dir) {
  const auto cfg = dir / "config.json";
  if (!std::filesystem::is_directory(dir) || !std::filesystem::exists(cfg)) return 0;
  const nlohmann::json j = json_io::read_json_file(cfg);
  const nlohmann::json& t = j.contains("text_config") ? j["text_config"] : j;
  return t.contains("max_position_embeddings") && t["max_position_embeddings"].is_number_integer()
             ? t["max_position_embeddings"].get<int64_t>()
             : 0;
}

void add_eval(CLI::App& app) {
  struct Args {
    std::string model, output, device = "cpu", dtype = "auto";
    std::vector<std::string> tasks;
    std::vector<int64_t> lengths;
    std::vector<double> depths = {0.0, 0.25, 0.5, 0.75, 1.0};
    int64_t samples = 4;
    uint64_t seed = 1;
    int64_t batch = 0;
    int threads = 0;
  };
  auto a = std::make_shared<Args>();
  auto* c = app.add_subcommand("eval",
                               "Long-context evaluation: RULER-style synthetic tasks, accuracy per length and depth");
  c->add_option("-m,--model", a->model, "Model directory")->required();
  c->add_option("--task", a->tasks,
                "Tasks, comma-separated: passkey, niah_single, niah_multikey, niah_multivalue, vt, cwe, mqar, or all")
      ->required()
      ->delimiter(',');
  c->add_option("--lengths", a->lengths, "Lengths in the model's tokens (prompt + answer), comma-separated")
      ->required()
      ->delimiter(',')
      ->check(int_range(1, limits::kMaxContext));
  c->add_option("--depths", a->depths, "Needle depths in [0, 1], comma-separated (default 0,0.25,0.5,0.75,1)")
      ->delimiter(',')
      ->check(real_range(0, 1));
  c->add_option("--samples", a->samples, "Samples per (task, length, depth) cell (default 4)")
      ->check(int_range(0, 1000000));
  c->add_option("--seed", a->seed, "Seed of the task generators (default 1)")->check(uint64_value());
  c->add_option("--batch", a->batch,
                "Text samples generated together through the serving engine (continuous batching, prefix cache); "
                "1: one session per sample; default: 8 for models with a KV cache, 1 for Mamba")
      ->check(int_range(0, 4096));
  c->add_option("-o,--output", a->output, "Write the results JSON here (default: standard output)");
  c->add_option("--device", a->device, "cpu | cuda | cuda:N");
  c->add_option("--dtype", a->dtype, "Weight storage (default auto)");
  c->add_option("--threads", a->threads, "CPU threads")->check(thread_count());
  c->callback([a] {
    eval::EvalConfig cfg;
    for (const auto& t : a->tasks) {
      if (t == "all") cfg.tasks.insert(cfg.tasks.end(), eval::task_names().begin(), eval::task_names().end());
      else cfg.tasks.push_back(t);
    }
    cfg.lengths = a->lengths;
    cfg.depths = a->depths;
    cfg.samples = a->samples;
    cfg.seed = a->seed;
    cfg.batch = a->batch;
    const std::filesystem::path mp(a->model);
    const std::filesystem::path dir = std::filesystem::is_directory(mp) ? mp : mp.parent_path();
    const bool has_tokenizer = std::filesystem::exists(dir / "tokenizer.json");
    // Everything that can be checked without the weights is checked first (the context from config.json).
    const int64_t context = config_context(mp);
    eval::validate(cfg, context > 0 ? context : limits::kMaxContext, has_tokenizer);
    if (!a->output.empty()) {  // an unwritable output fails before the model loads
      std::ofstream probe(a->output, std::ios::app);
      if (!probe) bad("-o/--output: cannot write " + a->output);
    }
    std::optional<Tokenizer> tok;
    if (has_tokenizer) tok.emplace(Tokenizer::from_dir(dir));
    LoadOptions lo;
    lo.device = a->device;
    lo.dtype = a->dtype;
    lo.threads = a->threads;
    lo.max_context = *std::max_element(cfg.lengths.begin(), cfg.lengths.end());
    std::shared_ptr<Model> model;
    {
      Activity act("loading the model");
      model = Model::load(a->model, lo);
    }
    Activity act("evaluating");
    std::fprintf(stderr, "eval: %s (%s, context %lld), %s tasks, %zu lengths, %lld samples per cell\n",
                 a->model.c_str(), model->info().backend.c_str(), static_cast<long long>(context),
                 has_tokenizer ? "text" : "token-id", cfg.lengths.size(), static_cast<long long>(cfg.samples));
    const auto run = eval::run_eval(*model, tok ? &*tok : nullptr, cfg, [](const eval::CellResult& r, int64_t done,
                                                                            int64_t total) {
      std::fprintf(stderr,
                   "[%lld/%lld] %-16s length %6lld depth %5s  accuracy %.3f  (n %lld, %.0f tok/s, %.0f%% cached)\n",
                   static_cast<long long>(done), static_cast<long long>(total), r.task.c_str(),
                   static_cast<long long>(r.length), r.depth < 0 ? "-" : std::to_string(r.depth).substr(0, 4).c_str(),
                   r.accuracy(), static_cast<long long>(r.n), r.tokens_per_s(),
                   r.prompt_tokens ? 100.0 * double(r.cached_tokens) / double(r.prompt_tokens) : 0.0);
    });
    int64_t prompt_tokens = 0;
    for (const auto& cell : run.cells) prompt_tokens += cell.prompt_tokens;
    if (run.batched)
      std::fprintf(stderr, "eval: text samples batched through the serving engine (batch %lld), %.0f%% of prompt "
                   "tokens from its prefix cache\n", static_cast<long long>(run.batch),
                   prompt_tokens ? 100.0 * double(run.prefix_hit_tokens) / double(prompt_tokens) : 0.0);
    const std::string doc = eval::results_json(a->model, cfg, run).dump(2) + "\n";
    if (a->output.empty()) {
      std::cout << doc;
    } else {
      std::ofstream o(a->output, std::ios::trunc);
      o << doc;
      o.flush();
      if (!o) bad("-o/--output: cannot write " + a->output);
    }
  });
}

}  // namespace

void add_eval_commands(CLI::App& app) { add_eval(app); }

}  // namespace flashkit::cli
