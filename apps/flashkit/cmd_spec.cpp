// Speculative decoding in the CLI: generate's options and report (spec_cli.hpp), and `flashkit bench spec`, which
// sweeps K (1..8 and auto), the proposer (draft model, n-gram lookup, n-gram tree) and two prompt regimes -- free
// generation (a story to continue) and input-grounded generation (a passage to summarize / extract from) -- against
// plain decoding of the same prompt, prints a table and writes JSON (tools/plot_spec.py plots it).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <sstream>

#include "cli_checks.hpp"
#include "commands.hpp"
#include "core/limits.hpp"
#include "flashkit/error.hpp"
#include "flashkit/tokenizer.hpp"
#include "spec_cli.hpp"

namespace flashkit::cli {

namespace {

namespace fs = std::filesystem;
[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, m); }

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

// "auto" -> 0, else an integer in [1, 64].
int parse_draft_tokens(const std::string& s) {
  if (s == "auto") return 0;
  size_t used = 0;
  long v = -1;
  try {
    v = std::stol(s, &used);
  } catch (...) {
    used = 0;
  }
  if (used != s.size() || v < 1 || v > 64)
    bad("--draft-tokens: expected an integer in [1, 64] or auto, got \"" + s + "\"");
  return int(v);
}

fs::path model_dir(const std::string& p) {
  std::error_code ec;
  return fs::is_directory(p, ec) ? fs::path(p) : fs::path(p).parent_path();
}

// Draft and target must tokenize alike: when both directories have a tokenizer.json that differ as files, their
// vocabularies and the encoding of a probe text must agree.
void check_tokenizers(const std::string& target, const std::string& draft) {
  const fs::path tj = model_dir(target) / "tokenizer.json", dj = model_dir(draft) / "tokenizer.json";
  std::error_code ec;
  if (!fs::exists(tj, ec) || !fs::exists(dj, ec)) return;
  auto slurp = [](const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  if (slurp(tj) == slurp(dj)) return;
  const Tokenizer a = Tokenizer::from_dir(model_dir(target)), b = Tokenizer::from_dir(model_dir(draft));
  const std::string probe = "The quick brown fox jumps over the lazy dog. 1234 \xC3\xA9t\xC3\xA9 <b>x</b>\n\tend";
  if (a.vocab_size() != b.vocab_size() || a.encode(probe, true) != b.encode(probe, true))
    bad("--draft: " + draft + " does not share the target's tokenizer (" + std::to_string(b.vocab_size()) + " vs " +
        std::to_string(a.vocab_size()) + " tokens, or a probe text encodes differently)");
}

}  // namespace

// ---------------------------------------------------------------------------------------------- generate's options
void add_spec_options(CLI::App* c, SpecArgs* a) {
  c->add_option("--draft", a->draft, "Speculative decoding with this draft model (same tokenizer as -m)");
  c->add_option("--draft-tokens", a->draft_tokens,
                "Tokens proposed per step: K in [1, 64], or auto (acceptance rate and step times pick K; default 4)")
      ->check(int_range_or(1, limits::kMaxSpecTokens, "auto"));
  c->add_option("--max-draft-tokens", a->max_draft_tokens, "Upper bound of --draft-tokens auto (default 8)")
      ->check(int_range(1, limits::kMaxSpecTokens));
  c->add_option("--lookup", a->lookup,
                "Speculative decoding by n-gram prompt lookup: match the last N..1 tokens of prompt + output (0 = off)")
      ->check(int_range(0, limits::kMaxSpecTokens));
  c->add_option("--spec-tree", a->tree,
                "Verify up to W n-gram continuations at once as a token tree (with --lookup; CPU; default 1)")
      ->check(int_range(1, limits::kMaxSpecTokens));
  c->add_flag("--spec-compare", a->compare,
              "Also run plain decoding: report the measured speed-up and whether the outputs match");
}

// The numeric ranges are checked by CLI11 (add_spec_options); this checks what spans several options.
void validate_spec_args(const SpecArgs& a) {
  if (a.tree > 1 && a.lookup == 0) bad("--spec-tree verifies several n-gram continuations; it needs --lookup N");
  if (a.compare && !a.active()) bad("--spec-compare needs speculative decoding (--draft DIR or --lookup N)");
  std::error_code ec;
  if (!a.draft.empty() && !fs::exists(a.draft, ec)) bad("--draft: " + a.draft + ": no such file or directory");
}

SpecSetup::SpecSetup(const SpecArgs& a, const std::string& target_dir, const LoadOptions& target_load,
                     const Model& target)
    : a_(a) {
  if (a.draft.empty()) return;
  check_tokenizers(target_dir, a.draft);
  LoadOptions o = target_load;
  o.random_seed = target_load.random_seed + 1;  // a random-weight draft is another model
  o.max_context = target.info().max_context;
  o.tp = 1;  // the draft is small: one rank (its head count need not split like the target's)
  draft_model_ = Model::load(a.draft, o);
  if (draft_model_->info().vocab_size > target.info().vocab_size)
    bad("--draft: the draft model's vocabulary (" + std::to_string(draft_model_->info().vocab_size) +
        ") is larger than the target's (" + std::to_string(target.info().vocab_size) + ")");
  draft_session_ = draft_model_->new_session();
}

void SpecSetup::apply(GenerateOptions& g) const {
  if (!a_.active()) return;
  g.speculative.draft = draft_session_.get();
  g.speculative.draft_tokens = parse_draft_tokens(a_.draft_tokens);
  g.speculative.max_draft_tokens = a_.max_draft_tokens;
  g.speculative.lookup = a_.lookup;
  g.speculative.tree_width = a_.tree;
  if (g.speculative.draft) {  // a fresh generation: the draft starts empty like the target
    draft_session_->reset();
  }
}

nlohmann::json spec_report(const SpecArgs& a, const GenerationResult& r, double baseline_tps, int same_output,
                           bool quiet) {
  const SpecStats& s = r.spec;
  const double tps = r.decode_tokens_per_s();
  const double speedup = baseline_tps > 0 ? tps / baseline_tps : 0;
  if (!quiet) {
    std::cerr << "speculative (" << s.proposer << ", K " << (a.draft_tokens == "auto" ? "auto" : a.draft_tokens)
              << "): " << s.steps << " steps, acceptance " << fmt("%.1f%%", 100 * s.acceptance_rate()) << " ("
              << s.accepted << "/" << s.proposed << " proposed), " << fmt("%.2f", s.mean_accepted_length())
              << " tokens/step | proposer " << fmt("%.3f", 1e3 * s.proposer_s_per_step()) << " ms/step, verifier "
              << fmt("%.3f", 1e3 * s.verifier_s_per_step()) << " ms/step\n";
    if (baseline_tps > 0)
      std::cerr << "plain decoding " << fmt("%.1f tok/s", baseline_tps) << " -> speed-up " << fmt("%.2fx", speedup)
                << (same_output == 1 ? " (outputs identical)" : same_output == 0 ? " (outputs differ)" : "") << "\n";
    else if (s.speedup_estimate > 0)
      std::cerr << "speed-up over plain decoding (estimated from the step-time fit; --spec-compare measures it) "
                << fmt("%.2fx", s.speedup_estimate) << "\n";
    else
      std::cerr << "speed-up: --spec-compare measures it (one step size only: no estimate)\n";
  }
  nlohmann::json j = {{"proposer", s.proposer},
                      {"draft", a.draft},
                      {"draft_tokens", a.draft_tokens},
                      {"lookup", a.lookup},
                      {"tree_width", a.tree},
                      {"steps", s.steps},
                      {"proposed", s.proposed},
                      {"accepted", s.accepted},
                      {"emitted", s.emitted},
                      {"acceptance_rate", s.acceptance_rate()},
                      {"mean_accepted_length", s.mean_accepted_length()},
                      {"proposer_s", s.proposer_s},
                      {"verifier_s", s.verifier_s},
                      {"sampling_s", s.sampling_s},
                      {"proposer_s_per_step", s.proposer_s_per_step()},
                      {"verifier_s_per_step", s.verifier_s_per_step()},
                      {"k_histogram", s.k_histogram},
                      {"speedup_estimate", s.speedup_estimate}};
  if (baseline_tps > 0) {
    j["baseline_decode_tokens_per_s"] = baseline_tps;
    j["speedup"] = speedup;
    if (same_output >= 0) j["identical_output"] = same_output == 1;
  }
  return j;
}

// ---------------------------------------------------------------------------------------------- bench spec
namespace {

struct BenchSpecArgs {
  std::string model, draft, device = "cpu", dtype = "auto", json_path, prompt_free, prompt_grounded;
  std::vector<int> ks = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<std::string> proposers = {"draft", "ngram", "tree"}, regimes = {"free", "grounded"};
  int64_t n = 64, ctx = 0;
  int threads = 0, lookup = 3, tree_width = 4, repeats = 1;
  float temp = 0.0f;
  bool random_weights = false, no_auto = false;
};

const char* kStory =
    "Once upon a time, in a small village at the edge of a great forest, there lived an old clockmaker and his "
    "granddaughter. Every morning she opened the shop, wound the clocks and listened to their ticking. One winter "
    "night, a stranger knocked at the door with a broken pocket watch and a strange request.";
const char* kPassage =
    "The Rhine rises in the Swiss Alps, flows north through Lake Constance and then west along the German-Swiss "
    "border to Basel. From Basel it turns north, forming part of the border between France and Germany, passes "
    "Mannheim, Mainz and Cologne, and crosses the Netherlands before it reaches the North Sea near Rotterdam. The "
    "river is about 1,230 kilometres long and has been one of Europe's most important shipping routes since Roman "
    "times; today barges carry coal, grain and containers between Basel and Rotterdam.\n\n";
const char* kGroundedTask =
    "Question: Which cities does the Rhine pass, and where does it reach the sea? Answer using the passage's own "
    "words.\nAnswer: The Rhine";

struct Row {
  std::string regime, proposer, k;
  double tps = 0, speedup = 0, acceptance = 0, mean_len = 0, prop_ms = 0, ver_ms = 0;
  int64_t steps = 0;
  bool identical = true;
  Model::GraphCounts graphs;  // the target's graph-eligible steps of this row's runs (all repeats)
};

std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) bad("cannot read " + p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void run_bench_spec(const BenchSpecArgs& a) {
  // The numeric ranges are checked by CLI11 (add_spec_bench_command).
  if (a.ks.empty()) bad("--k: no values given");
  for (const auto& p : a.proposers)
    if (p != "draft" && p != "ngram" && p != "tree") bad("--proposers: unknown proposer \"" + p + "\" (draft, ngram, tree)");
  for (const auto& r : a.regimes)
    if (r != "free" && r != "grounded") bad("--regimes: unknown regime \"" + r + "\" (free, grounded)");
  const bool want_draft = std::find(a.proposers.begin(), a.proposers.end(), "draft") != a.proposers.end();
  if (want_draft && a.draft.empty() && a.proposers.size() == 1) bad("--proposers draft needs --draft DIR");
  std::error_code ec;
  if (!fs::exists(a.model, ec)) bad("-m/--model: " + a.model + ": no such file or directory");
  if (!a.draft.empty()) {
    if (!fs::exists(a.draft, ec)) bad("--draft: " + a.draft + ": no such file or directory");
    check_tokenizers(a.model, a.draft);
  }
  std::unique_ptr<std::ofstream> jf;
  if (!a.json_path.empty()) {
    jf = std::make_unique<std::ofstream>(a.json_path);
    if (!*jf) bad("--json: cannot write " + a.json_path);
  }

  LoadOptions lo;
  lo.device = a.device, lo.dtype = a.dtype, lo.threads = a.threads, lo.max_context = a.ctx;
  lo.random_weights = a.random_weights;
  auto target = Model::load(a.model, lo);
  std::shared_ptr<Model> draft;
  if (!a.draft.empty()) {
    LoadOptions d = lo;
    d.random_seed = lo.random_seed + 1;
    d.max_context = target->info().max_context;
    draft = Model::load(a.draft, d);
  }
  const int64_t V = target->info().vocab_size;

  // Prompts: the texts above through the tokenizer, or (no tokenizer, e.g. random weights) synthetic ids: a random
  // opening for free generation, a random passage whose output would quote it for the grounded regime.
  std::optional<Tokenizer> tok;
  if (fs::exists(model_dir(a.model) / "tokenizer.json", ec)) tok = Tokenizer::from_dir(model_dir(a.model));
  std::map<std::string, std::vector<int32_t>> prompts;
  std::mt19937 g(1234);
  std::uniform_int_distribution<int32_t> rid(3, int32_t(std::min<int64_t>(V, 1 << 20) - 1));
  for (const auto& r : a.regimes) {
    std::string text = r == "free" ? kStory : std::string(kPassage) + kGroundedTask;
    if (r == "free" && !a.prompt_free.empty()) text = read_file(a.prompt_free);
    if (r == "grounded" && !a.prompt_grounded.empty()) text = read_file(a.prompt_grounded);
    if (tok) {
      prompts[r] = tok->encode(text, true);
    } else {
      std::vector<int32_t> ids(r == "free" ? 48 : 160);
      for (auto& x : ids) x = rid(g);
      if (r == "grounded")  // the question quotes the passage, as the text prompt does
        ids.insert(ids.end(), ids.begin() + 20, ids.begin() + 40);
      prompts[r] = ids;
    }
  }

  GenerateOptions base;
  base.max_new_tokens = a.n;
  base.temperature = a.temp;
  base.top_k = a.temp > 0 ? 40 : 0;
  base.top_p = a.temp > 0 ? 0.95f : 1.0f;
  base.stop_at_eos = false;

  auto run = [&](const std::vector<int32_t>& prompt, const GenerateOptions& go, bool use_draft) {
    GenerationResult best;
    for (int rep = 0; rep < a.repeats; ++rep) {
      auto s = target->new_session();
      std::unique_ptr<Session> ds;
      GenerateOptions o = go;
      if (use_draft) ds = draft->new_session(), o.speculative.draft = ds.get();
      GenerationResult r = generate(*s, prompt, o);
      if (rep == 0 || r.decode_s < best.decode_s) best = std::move(r);
    }
    return best;
  };
  {  // warm-up (thread pools, caches, CUDA graphs)
    GenerateOptions w = base;
    w.max_new_tokens = 4;
    run(prompts.begin()->second, w, false);
  }

  std::vector<Row> rows;
  nlohmann::json jreg = nlohmann::json::object();
  std::cerr << "bench spec: " << target->info().architecture << " " << target->info().weight_dtype << " on "
            << target->info().backend << (draft ? ", draft " + a.draft : std::string()) << ", " << a.n
            << " tokens, temperature " << a.temp << "\n";
  for (const auto& regime : a.regimes) {
    const auto& prompt = prompts[regime];
    const GenerationResult b = run(prompt, base, false);
    const double btps = b.decode_tokens_per_s();
    jreg[regime] = {{"prompt_tokens", prompt.size()}, {"baseline_decode_tokens_per_s", btps},
                    {"baseline_tokens", b.tokens}};
    for (const auto& prop : a.proposers) {
      if (prop == "draft" && !draft) continue;
      std::vector<int> ks = a.ks;
      if (!a.no_auto) ks.push_back(0);
      for (int k : ks) {
        GenerateOptions go = base;
        go.speculative.draft_tokens = k;
        go.speculative.max_draft_tokens = *std::max_element(a.ks.begin(), a.ks.end());
        if (prop != "draft") go.speculative.lookup = a.lookup;
        if (prop == "tree") go.speculative.tree_width = a.tree_width;
        const Model::GraphCounts g0 = target->graph_counts();
        const GenerationResult r = run(prompt, go, prop == "draft");
        const Model::GraphCounts g1 = target->graph_counts();
        Row row;
        row.graphs = {g1.captured - g0.captured, g1.replayed - g0.replayed, g1.eager - g0.eager};
        row.regime = regime, row.proposer = prop, row.k = k ? std::to_string(k) : "auto";
        row.tps = r.decode_tokens_per_s();
        row.speedup = btps > 0 ? row.tps / btps : 0;
        row.acceptance = r.spec.acceptance_rate();
        row.mean_len = r.spec.mean_accepted_length();
        row.prop_ms = 1e3 * r.spec.proposer_s_per_step();
        row.ver_ms = 1e3 * r.spec.verifier_s_per_step();
        row.steps = r.spec.steps;
        row.identical = r.tokens == b.tokens;
        rows.push_back(row);
      }
    }
  }
  std::printf("%-9s %-6s %4s %9s %8s %7s %8s %8s %8s %6s\n", "regime", "prop", "K", "tok/s", "speedup", "accept",
              "tok/step", "prop ms", "ver ms", "exact");
  for (const auto& r : rows)
    std::printf("%-9s %-6s %4s %9.1f %7.2fx %6.1f%% %8.2f %8.3f %8.3f %6s\n", r.regime.c_str(), r.proposer.c_str(),
                r.k.c_str(), r.tps, r.speedup, 100 * r.acceptance, r.mean_len, r.prop_ms, r.ver_ms,
                a.temp > 0 ? "-" : (r.identical ? "yes" : "NO"));
  for (const auto& regime : a.regimes)
    std::printf("baseline %-9s %9.1f tok/s (plain decoding, %zu prompt tokens)\n", regime.c_str(),
                jreg[regime]["baseline_decode_tokens_per_s"].get<double>(), prompts[regime].size());
  // Whether the target's steps ran as CUDA graphs (verification steps included); not in the table, whose layout
  // scripts parse.
  Model::GraphCounts gt;
  for (const auto& r : rows) {
    gt.captured += r.graphs.captured, gt.replayed += r.graphs.replayed;
    gt.eager += r.graphs.eager;
  }
  std::cerr << "target graph steps (speculative runs): " << gt.captured << " captured, " << gt.replayed
            << " replayed, " << gt.eager << " eager\n";
  if (jf) {
    nlohmann::json jr = nlohmann::json::array();
    for (const auto& r : rows)
      jr.push_back({{"regime", r.regime}, {"proposer", r.proposer}, {"k", r.k}, {"decode_tokens_per_s", r.tps},
                    {"speedup", r.speedup}, {"acceptance_rate", r.acceptance}, {"mean_accepted_length", r.mean_len},
                    {"proposer_ms_per_step", r.prop_ms}, {"verifier_ms_per_step", r.ver_ms}, {"steps", r.steps},
                    {"identical_to_plain", r.identical},
                    {"target_graph_steps",
                     {{"captured", r.graphs.captured}, {"replayed", r.graphs.replayed}, {"eager", r.graphs.eager}}}});
    for (auto& [k, v] : jreg.items()) v.erase("baseline_tokens");
    const nlohmann::json j = {{"target", a.model},
                              {"draft", a.draft},
                              {"backend", target->info().backend},
                              {"architecture", target->info().architecture},
                              {"weight_dtype", target->info().weight_dtype},
                              {"max_new_tokens", a.n},
                              {"temperature", a.temp},
                              {"lookup", a.lookup},
                              {"tree_width", a.tree_width},
                              {"regimes", jreg},
                              {"rows", jr}};
    *jf << j.dump(1) << "\n";
    if (!jf->good()) bad("--json: writing " + a.json_path + " failed");
  }
}

}  // namespace

void add_spec_bench_command(CLI::App& app) {
  CLI::App* bench = app.get_subcommand("bench");
  auto a = std::make_shared<BenchSpecArgs>();
  auto* c = bench->add_subcommand("spec",
                                  "Speculative decoding: sweep K, the proposer (draft, ngram, tree) and free vs "
                                  "input-grounded prompts against plain decoding");
  c->add_option("-m,--model", a->model, "Target model directory (or config.json with --random-weights)")->required();
  c->add_option("--draft", a->draft, "Draft model directory (same tokenizer); without it the draft rows are skipped");
  c->add_option("--k", a->ks, "Draft tokens per step to sweep (comma list; default 1..8)")
      ->delimiter(',')
      ->check(int_range(1, limits::kMaxSpecTokens));
  c->add_flag("--no-auto", a->no_auto, "Skip the adaptive-K rows");
  c->add_option("--proposers", a->proposers, "Comma list of draft, ngram, tree (default all)")->delimiter(',');
  c->add_option("--regimes", a->regimes, "Comma list of free, grounded (default both)")->delimiter(',');
  c->add_option("--prompt-free", a->prompt_free, "Text file for the free-generation prompt");
  c->add_option("--prompt-grounded", a->prompt_grounded, "Text file for the input-grounded prompt");
  c->add_option("-n,--max-tokens,--n-predict", a->n, "Tokens generated per run (default 64)")
      ->check(int_range(2, limits::kMaxNewTokens));
  c->add_option("--lookup", a->lookup, "n-gram length for ngram / tree (default 3)")
      ->check(int_range(1, limits::kMaxSpecTokens));
  c->add_option("--tree-width", a->tree_width, "Continuations per tree (default 4)")
      ->check(int_range(2, limits::kMaxSpecTokens));
  c->add_option("--temp", a->temp, "Sampling temperature (default 0: greedy, outputs checked against plain decoding)")
      ->check(real_range(0, 1000));
  c->add_option("--repeats", a->repeats, "Runs per row, the fastest kept (default 1)")->check(int_range(1, 100));
  c->add_option("--device", a->device, "cpu | cuda | cuda:N (default cpu)");
  c->add_option("--dtype", a->dtype, "Weight storage (default auto)");
  c->add_option("-t,--threads", a->threads, "CPU threads (0: flashkit's default)")->check(thread_count());
  c->add_option("-c,--ctx-size,--ctx", a->ctx, "Context length (0: the default)")->check(int_range(0, limits::kMaxContext));
  c->add_flag("--random-weights", a->random_weights, "Random weights for the configs (-m and --draft may be config.json)");
  c->add_option("--json", a->json_path, "Write the rows as JSON to FILE (tools/plot_spec.py plots it)");
  c->callback([a] { run_bench_spec(*a); });
}

}  // namespace flashkit::cli
