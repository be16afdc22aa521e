// flashkit generate | chat: text generation with the model engine (include/flashkit/engine.hpp).
//   flashkit generate -m DIR -p TEXT [-n N] [--temp T --top-k K --top-p P --min-p P --seed S] [--device cpu|cuda]
//   flashkit generate -m DIR --prompt-ids 1,2,3 --ids       (models without tokenizer files: ids in, ids out)
//   flashkit generate -m models/configs/gemma-3-270m.json --random-weights --prompt-ids ... --profile
//   flashkit chat -m DIR [--system TEXT]                     (one user message per stdin line; /reset, /exit)
// Tokens stream to stdout (or -o FILE) as they are generated; the end-of-run report (time to first token, prefill
// and decode tokens/s, and with --profile the time per op kind) goes to stderr. Errors are flashkit::Error
// (main.cpp prints one line and exits non-zero).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_checks.hpp"
#include "commands.hpp"
#include "chat/chat_template.hpp"
#include "core/limits.hpp"
#include "engine/sampler.hpp"
#include "engine/stop.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
#include "flashkit/tokenizer.hpp"
#include "spec_cli.hpp"
#include "tp_launch.hpp"

namespace flashkit::cli {

namespace {

namespace fs = std::filesystem;

[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, m); }

struct GenArgs {
  std::string model;
  std::string prompt, prompt_ids, prompt_file, system;
  int64_t n = 128;
  float temp = 0.8f, top_p = 0.95f, min_p = 0.0f, repeat_penalty = 1.0f;
  int top_k = 40;
  uint64_t seed = 0;
  std::string device, dtype = "auto";  // device "": cpu unless --n-gpu-layers says otherwise
  int64_t gpu_layers = -1;             // --n-gpu-layers / -ngl; -1: not given
  int threads = 0, tp = 1;
  int64_t ctx = 0, chunk = 512;
  bool ids = false, profile = false, random_weights = false, conversation = false, no_bos = false, ignore_eos = false, quiet = false;
  std::vector<std::string> stop;
  std::string output, stats_json, trace;
  OffloadArgs offload;
  SpecArgs spec;  // generate only: speculative decoding (cmd_spec.cpp)
};

// Defaults live in GenArgs only: every option shows the value it starts with (capture_default_str), so the help
// cannot drift from the code. Names follow llama.cpp where it has one (-n/--n-predict, -c/--ctx-size, -t/--threads,
// --temp, --top-k, --top-p, --seed, -ngl via llama_aliases.cpp).
void add_common(CLI::App* c, GenArgs* a) {
  c->add_option("-m,--model", a->model, "Model directory (config.json + *.safetensors [+ tokenizer.json]) or .gguf")
      ->required();
  c->add_option("-n,--max-tokens,--n-predict", a->n, "Tokens to generate (per turn in chat)")
      ->check(int_range(1, limits::kMaxNewTokens))->capture_default_str();
  c->add_option("--temp", a->temp, "Sampling temperature (0 = greedy)")->check(real_range(0, 1000))
      ->capture_default_str();
  c->add_option("--top-k", a->top_k, "Keep the k most likely tokens (0 = off)")
      ->check(int_range(0, int64_t(1) << 30))->capture_default_str();
  c->add_option("--top-p", a->top_p, "Nucleus sampling mass (1 = off)")->check(real_range(0, 1, true))
      ->capture_default_str();
  c->add_option("--min-p", a->min_p, "Drop tokens below min_p * p(max) (0 = off)")->check(real_range(0, 1))
      ->capture_default_str();
  c->add_option("--repeat-penalty", a->repeat_penalty, "Repetition penalty (1 = off)")
      ->check(real_range(0, 1000, true))->capture_default_str();
  c->add_option("--seed", a->seed, "Sampler seed (runs are reproducible)")->check(uint64_value())
      ->capture_default_str();
  c->add_option("--device", a->device, "cpu | cuda | cuda:N (default cpu)");
  c->add_option("--n-gpu-layers", a->gpu_layers,
                "llama.cpp's -ngl: flashkit runs a model wholly on one device, so 0 = CPU and any N > 0 = every layer "
                "on the GPU (--device cuda)")
      ->check(int_range(0, int64_t(1) << 30));
  c->add_option("--dtype", a->dtype,
                "Weight storage: auto | f32 | bf16 | f16 | q8_0 (auto: as the checkpoint; Q8_0 GGUFs stay Q8_0 on "
                "the CPU)")
      ->capture_default_str();
  c->add_option("-t,--threads", a->threads, "CPU threads (0: flashkit's default)")->check(thread_count())
      ->capture_default_str();
  // Checked by the engine (one line naming --tp and the config field that does not divide).
  c->add_option("--tp", a->tp, "Tensor-parallel ranks: heads and MLP columns split (one process per GPU over NCCL with --device cuda and enough GPUs, threads of this process otherwise; FLASHKIT_TP_BACKEND)")
      ->capture_default_str();
  c->add_option("-c,--ctx-size,--ctx", a->ctx, "Context (KV cache) length in tokens (0: min(model max, 4096))")
      ->check(int_range(0, limits::kMaxContext))->capture_default_str();
  c->add_option("--prefill-chunk", a->chunk, "Prompt tokens per forward pass")
      ->check(int_range(1, limits::kMaxPrefillChunk))->capture_default_str();
  c->add_option("--stop", a->stop, "Stop string (repeatable)");
  c->add_flag("--ignore-eos", a->ignore_eos, "Do not stop at the end-of-sequence token");
  c->add_flag("--profile", a->profile, "Time every op kind and print the split at the end");
  c->add_option("--stats-json", a->stats_json, "Write the timing report as JSON to FILE");
  c->add_option("--trace", a->trace,
                "With --profile: write every op as a Chrome/Perfetto trace to FILE (open in ui.perfetto.dev)");
  c->add_flag("--random-weights", a->random_weights,
              "Ignore the checkpoint: random weights for the config (benchmarks; -m may be a config.json)");
  c->add_flag("-q,--quiet", a->quiet, "No report on stderr");
  add_offload_options(c, &a->offload);
}

// The device after --n-gpu-layers (llama.cpp's -ngl): 0 means the CPU, N > 0 the GPU; a contradicting --device is
// refused rather than silently overridden.
std::string resolve_device(const GenArgs& a) {
  if (a.gpu_layers < 0) return a.device.empty() ? "cpu" : a.device;
  const bool gpu = a.gpu_layers > 0;
  if (a.device.empty()) return gpu ? "cuda" : "cpu";
  if (gpu != (a.device.rfind("cuda", 0) == 0))
    bad("-ngl/--n-gpu-layers " + std::to_string(a.gpu_layers) + " contradicts --device " + a.device +
        " (flashkit does not split a model between devices: -ngl 0 = CPU, -ngl N > 0 = GPU)");
  return a.device;
}

void validate_common(const GenArgs& a) {
  engine::SamplerParams sp;
  sp.temperature = a.temp;
  sp.top_k = a.top_k;
  sp.top_p = a.top_p;
  sp.min_p = a.min_p;
  sp.repetition_penalty = a.repeat_penalty;
  engine::validate(sp);
  // The numeric ranges are checked by CLI11 (add_common); this only catches what spans several options.
  resolve_device(a);
  if (!a.trace.empty() && !a.profile) bad("--trace needs --profile (the trace records the profiled ops)");
  for (auto& s : a.stop)
    if (s.empty()) bad("--stop: empty stop string");
  std::error_code ec;
  if (!fs::exists(a.model, ec)) bad("--model: " + a.model + ": no such file or directory");
}

// Opens an output stream early so that an unwritable path fails before the model loads.
std::unique_ptr<std::ofstream> open_output(const std::string& path, const char* flag) {
  if (path.empty() || path == "-") return nullptr;
  auto f = std::make_unique<std::ofstream>(path, std::ios::binary | std::ios::trunc);
  if (!*f) bad(std::string(flag) + ": cannot write " + path + ": " + std::strerror(errno));
  return f;
}

LoadOptions load_options(const GenArgs& a) {
  LoadOptions o;
  o.device = resolve_device(a);
  o.dtype = a.dtype;
  o.threads = a.threads;
  o.tp = a.tp;
  o.max_context = a.ctx;
  o.prefill_chunk = a.chunk;
  o.profile = a.profile;
  o.random_weights = a.random_weights;
  apply_offload_options(a.offload, o);
  return o;
}

GenerateOptions gen_options(const GenArgs& a) {
  GenerateOptions g;
  g.max_new_tokens = a.n;
  g.temperature = a.temp;
  g.top_k = a.top_k;
  g.top_p = a.top_p;
  g.min_p = a.min_p;
  g.repetition_penalty = a.repeat_penalty;
  g.seed = a.seed;
  g.stop_at_eos = !a.ignore_eos;
  return g;
}

std::optional<Tokenizer> load_tokenizer(const std::string& model) {
  fs::path d = model;
  std::error_code ec;
  if (!fs::is_directory(d, ec)) d = d.parent_path();
  // A .gguf file carries its own tokenizer (tokenizer.ggml.*); a tokenizer.json beside it takes precedence.
  if (!fs::exists(d / "tokenizer.json", ec) && fs::path(model).extension() == ".gguf" &&
      fs::is_regular_file(model, ec) && Tokenizer::gguf_has_tokenizer(model))
    return Tokenizer::from_gguf(model);
  if (!fs::exists(d / "tokenizer.json", ec)) return std::nullopt;
  return Tokenizer::from_dir(d);
}

// "1,2,3", or "@FILE": the ids in FILE, separated by commas or white space (long prompts: a command-line argument
// holds at most 128 KiB on Linux, ~30k ids).
std::vector<int32_t> parse_ids(const std::string& arg) {
  std::string s = arg;
  if (!s.empty() && s[0] == '@') {
    if (s.size() == 1) bad("--prompt-ids: @ needs a file name (@FILE, or @- for standard input)");
    s = read_text_file(s.substr(1), "--prompt-ids");
    for (char& ch : s)
      if (ch == '\n' || ch == '\r' || ch == ' ' || ch == '\t') ch = ',';
  }
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) continue;
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used != item.size() || v < 0 || v > INT32_MAX)
      bad("--prompt-ids: \"" + item + "\" is not a token id (expected comma-separated non-negative integers)");
    ids.push_back(int32_t(v));
  }
  if (ids.empty()) bad("--prompt-ids: no ids given");
  return ids;
}

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

struct Totals {
  OpTimes prefill_ops;  // op times up to the first token of each turn (the rest is decode)
  int64_t prompt = 0, generated = 0, decode_steps = 0;
  double ttft = 0, prefill_s = 0, decode_s = 0;
  std::string stop;
  void add(const GenerationResult& r) {
    prompt += r.prompt_tokens;
    generated += int64_t(r.tokens.size());
    decode_steps += r.decode_steps;
    prefill_s += r.prefill_s;
    decode_s += r.decode_s;
    ttft = r.time_to_first_token_s;  // the last turn's
    stop = r.stop_reason;
  }
};

// The profiled ops as a Chrome trace (the format the analysis profiler writes): one complete event per op.
void write_trace(const std::string& path, Model& m) {
  const OpTimes& ot = m.op_times();
  nlohmann::json ev = nlohmann::json::array();
  for (const auto& e : ot.events)
    ev.push_back({{"name", e.name}, {"cat", "op"}, {"ph", "X"}, {"pid", 0}, {"tid", 0}, {"ts", e.start_s * 1e6},
                  {"dur", e.dur_s * 1e6}});
  const nlohmann::json trace = {{"traceEvents", ev},
                                {"displayTimeUnit", "ms"},
                                {"otherData", {{"backend", m.info().backend},
                                               {"architecture", m.info().architecture},
                                               {"events_dropped", ot.dropped}}}};
  std::ofstream f(path);
  if (!f) bad("--trace: cannot write " + path + ": " + std::strerror(errno));
  f << trace.dump() << "\n";
  f.close();
  if (!f) bad("--trace: writing " + path + " failed (disk full?)");
}

void report(const GenArgs& a, Model& m, const Totals& t, const nlohmann::json* spec = nullptr) {
  const double pf = t.prefill_s > 0 ? t.prompt / t.prefill_s : 0;
  const double dc = t.decode_s > 0 ? t.decode_steps / t.decode_s : 0;
  if (!a.quiet) {
    std::cerr << "\n--- " << m.info().architecture << " " << m.info().weight_dtype << " on " << m.info().backend << "\n"
              << "prompt " << t.prompt << " tokens, generated " << t.generated << " (stop: " << t.stop << ")\n"
              << "time to first token " << fmt("%.1f ms", t.ttft * 1e3) << " | prefill " << fmt("%.1f tok/s", pf)
              << " | decode " << fmt("%.1f tok/s", dc) << "\n";
    if (const std::string off = offload_summary(m.info()); !off.empty()) std::cerr << off << "\n";
  }
  const OpTimes& all = m.op_times();
  OpTimes dec;  // all - prefill
  for (auto& [k, v] : all.seconds) {
    auto it = t.prefill_ops.seconds.find(k);
    dec.seconds[k] = v - (it == t.prefill_ops.seconds.end() ? 0 : it->second);
    auto ic = t.prefill_ops.calls.find(k);
    dec.calls[k] = all.calls.at(k) - (ic == t.prefill_ops.calls.end() ? 0 : ic->second);
  }
  nlohmann::json ops = nlohmann::json::object(), ops_prefill = nlohmann::json::object(),
                 ops_decode = nlohmann::json::object();
  auto table = [&](const OpTimes& ot, const char* title, nlohmann::json& js, int64_t per) {
    double total = 0;
    for (auto& [k, v] : ot.seconds) total += v;
    std::vector<std::pair<std::string, double>> rows(ot.seconds.begin(), ot.seconds.end());
    std::sort(rows.begin(), rows.end(), [](auto& x, auto& y) { return x.second > y.second; });
    if (!a.quiet) std::fprintf(stderr, "%s: %.2f ms in ops (%.3f ms per token)\n", title, total * 1e3,
                               per > 0 ? total * 1e3 / double(per) : 0.0);
    for (auto& [k, v] : rows) {
      const int64_t calls = ot.calls.count(k) ? ot.calls.at(k) : 0;
      if (calls == 0) continue;
      if (!a.quiet)
        std::fprintf(stderr, "  %-18s %9.2f ms %6.1f%% %8lld calls\n", k.c_str(), v * 1e3,
                     total > 0 ? 100 * v / total : 0, (long long)calls);
      js[k] = {{"seconds", v}, {"calls", calls}};
    }
  };
  if (a.profile) {
    if (!a.quiet) std::cerr << "op split (each op synchronized and timed):\n";
    table(t.prefill_ops, "prefill", ops_prefill, t.prompt);
    table(dec, "decode", ops_decode, t.decode_steps);
    for (auto& [k, v] : all.seconds) ops[k] = {{"seconds", v}, {"calls", all.calls.at(k)}};
  }
  if (!a.trace.empty()) write_trace(a.trace, m);
  if (!a.stats_json.empty()) {
    nlohmann::json j = {{"model", a.model},
                        {"architecture", m.info().architecture},
                        {"weight_dtype", m.info().weight_dtype},
                        {"backend", m.info().backend},
                        {"parameters", m.info().parameters},
                        {"prompt_tokens", t.prompt},
                        {"generated_tokens", t.generated},
                        {"decode_steps", t.decode_steps},
                        {"stop_reason", t.stop},
                        {"time_to_first_token_s", t.ttft},
                        {"prefill_s", t.prefill_s},
                        {"decode_s", t.decode_s},
                        {"prefill_tokens_per_s", pf},
                        {"decode_tokens_per_s", dc},
                        {"device_weight_bytes", m.info().device_weight_bytes},
                        {"offloaded_layers", m.info().offloaded_layers},
                        {"host_pinned_bytes", m.info().host_pinned_bytes},
                        {"ops", ops},
                        {"ops_prefill", ops_prefill},
                        {"ops_decode", ops_decode}};
    if (spec) j["speculative"] = *spec;
    std::ofstream f(a.stats_json);
    if (!f) bad("--stats-json: cannot write " + a.stats_json + ": " + std::strerror(errno));
    f << j.dump(1) << "\n";
    f.close();
    if (!f) bad("--stats-json: writing " + a.stats_json + " failed (disk full?)");
  }
}

// Streams generated tokens as text (tokenizer + stop strings) or as ids.
class Printer {
 public:
  Printer(std::ostream& out, const Tokenizer* tok, bool ids, const std::vector<std::string>& stop_strings,
          std::vector<int32_t> stop_ids)
      : out_(out), tok_(tok), ids_(ids || !tok), stop_(stop_strings, std::move(stop_ids)) {
    if (!ids_) dec_.emplace(tok_->stream_decoder(true));
  }
  // false: a stop string matched, generation must end.
  bool push(int32_t id) {
    if (ids_) {
      out_ << (first_ ? "" : " ") << id << std::flush;
      first_ = false;
      return true;
    }
    const std::string piece = dec_->push(id);
    engine::StopStep st = stop_.push(id, piece);
    out_ << st.text << std::flush;
    return !st.stop;
  }
  void finish() {
    if (ids_) {
      out_ << "\n" << std::flush;
      return;
    }
    if (!stop_.stopped()) {
      engine::StopStep st = stop_.push_text(dec_->flush());
      out_ << st.text;
      if (!st.stop) out_ << stop_.flush();
    }
    out_ << "\n" << std::flush;
  }
  const std::string& text() const { return stop_.emitted(); }
  // Why the printer ended generation ("" when it did not): generate() only sees a callback returning false.
  std::string stop_reason() const {
    if (!stop_.stopped()) return "";
    if (stop_.matched_token()) return "eos";
    return "stop string";
  }

 private:
  std::ostream& out_;
  const Tokenizer* tok_;
  bool ids_;
  bool first_ = true;
  std::optional<Tokenizer::StreamDecoder> dec_;
  engine::StopMatcher stop_;
};

// One line of standard input without its newline; false at the end of input. A line longer than the text limit is
// consumed and reported through *too_long instead of growing without bound (stdin may be /dev/zero).
bool read_chat_line(std::istream& in, std::string& line, bool* too_long) {
  line.clear();
  *too_long = false;
  std::streambuf* sb = in.rdbuf();
  bool any = false;
  for (int c = sb->sbumpc(); c != std::char_traits<char>::eof(); c = sb->sbumpc()) {
    any = true;
    if (c == '\n') return true;
    if (int64_t(line.size()) >= limits::kMaxTextBytes) *too_long = true;
    if (!*too_long) line.push_back(char(c));
  }
  if (*too_long) line.clear();
  return any;
}

std::vector<int32_t> stop_ids_for(const Model& m, const Tokenizer* tok, bool ignore_eos) {
  std::vector<int32_t> ids;
  if (ignore_eos) return ids;
  ids = m.info().eos_ids;
  if (tok)
    for (int32_t e : tok->eos_ids()) ids.push_back(e);
  return ids;
}

void run_generate(const GenArgs& a, TpJob& job) {
  validate_common(a);
  if (job.follower()) return job.follow(a.model, load_options(a));  // before anything reads stdin or opens files
  validate_spec_args(a.spec);
  const int given = int(!a.prompt.empty()) + int(!a.prompt_ids.empty()) + int(!a.prompt_file.empty());
  if (given != 1) bad("give exactly one prompt: -p TEXT, --prompt-file FILE or --prompt-ids 1,2,3");
  std::string text = a.prompt;
  if (!a.prompt_file.empty()) {
    text = read_text_file(a.prompt_file, "--prompt-file");
    if (text.empty()) bad("--prompt-file: " + a.prompt_file + " is empty");
  }
  if (int64_t(a.prompt.size()) > limits::kMaxTextBytes) bad("-p/--prompt: more than 64 MiB of text");
  auto outf = open_output(a.output, "-o/--output");
  open_output(a.stats_json, "--stats-json");
  open_output(a.trace, "--trace");  // fail before the work, not after it
  std::optional<Tokenizer> tok;
  if (a.prompt_ids.empty() || !a.ids) tok = load_tokenizer(a.model);
  std::vector<int32_t> prompt;
  if (!a.prompt_ids.empty()) {
    prompt = parse_ids(a.prompt_ids);
  } else {
    if (!tok)
      bad(a.model + " has no tokenizer.json: pass the prompt as token ids with --prompt-ids 1,2,3 (and --ids)");
    prompt = tok->encode(text, !a.no_bos);
    if (prompt.empty()) bad("the prompt encodes to no tokens");
  }

  auto model = job.load(a.model, load_options(a));
  if (tok && tok->vocab_size() > model->info().vocab_size)
    std::cerr << "flashkit: warning: the tokenizer has " << tok->vocab_size() << " tokens, the model "
              << model->info().vocab_size << "\n";
  auto session = model->new_session();
  std::ostream& out = outf ? *outf : std::cout;
  Printer pr(out, tok ? &*tok : nullptr, a.ids, a.stop, stop_ids_for(*model, tok ? &*tok : nullptr, a.ignore_eos));
  GenerateOptions g = gen_options(a);
  if (tok && !a.ignore_eos)
    for (int32_t e : tok->eos_ids()) g.stop_ids.push_back(e);
  const SpecSetup spec(a.spec, a.model, load_options(a), *model);
  spec.apply(g);
  Totals t;
  bool first = true;
  GenerationResult r = generate(*session, prompt, g, [&](int32_t id) {
    if (first) t.prefill_ops = model->op_times(), first = false;  // the prompt's share of the op times
    return pr.push(id);
  });
  pr.finish();
  if (outf) {
    outf->close();
    if (!*outf) bad("-o/--output: writing " + a.output + " failed (disk full?)");
  } else {
    check_written(std::cout, "the generated text to standard output");
  }
  t.add(r);
  if (!pr.stop_reason().empty()) t.stop = pr.stop_reason();
  if (!a.spec.active()) {
    report(a, *model, t);
    return;
  }
  // --spec-compare: the same generation without speculation (greedy outputs must match).
  double base_tps = 0;
  int same = -1;
  if (a.spec.compare) {
    auto s0 = model->new_session();
    GenerateOptions g0 = g;
    g0.speculative = {};
    const GenerationResult b = generate(*s0, prompt, g0);
    base_tps = b.decode_tokens_per_s();
    if (g.temperature == 0) {
      const bool prefix = r.tokens.size() <= b.tokens.size() && std::equal(r.tokens.begin(), r.tokens.end(), b.tokens.begin());
      same = (r.stop_reason == "callback" ? prefix : r.tokens == b.tokens) ? 1 : 0;
    }
  }
  const nlohmann::json sj = spec_report(a.spec, r, base_tps, same, true);
  report(a, *model, t, &sj);
  spec_report(a.spec, r, base_tps, same, a.quiet);
}

void run_chat(const GenArgs& a, TpJob& job) {
  validate_common(a);
  if (job.follower()) return job.follow(a.model, load_options(a));  // rank 0 alone reads standard input
  auto tok = load_tokenizer(a.model);
  if (!tok) bad(a.model + " has no tokenizer.json (chat needs the model's tokenizer and chat template)");
  const std::string tmpl = tok->chat_template();
  if (tmpl.empty()) bad(a.model + ": tokenizer_config.json has no chat_template (use flashkit generate)");
  // The template is tried once on a one-message conversation before the session starts: an error there is the
  // template's, it would fail every turn, so it ends the command (exit 2); later per-line errors skip that line.
  {
    std::vector<chat::ChatMessage> probe;
    if (!a.system.empty()) probe.push_back({"system", a.system});
    probe.push_back({"user", "hello"});
    chat::render_chat_template(tmpl, probe, true, tok->bos_token(), tok->eos_token());
  }
  auto outf = open_output(a.output, "-o/--output");
  open_output(a.stats_json, "--stats-json");
  open_output(a.trace, "--trace");
  auto model = job.load(a.model, load_options(a));
  auto session = model->new_session();
  std::ostream& out = outf ? *outf : std::cout;
  std::vector<chat::ChatMessage> msgs;
  if (!a.system.empty()) msgs.push_back({"system", a.system});
  std::vector<int32_t> cached;  // the ids in the session's cache, in order
  GenerateOptions g = gen_options(a);
  if (!a.ignore_eos)
    for (int32_t e : tok->eos_ids()) g.stop_ids.push_back(e);
  Totals t;
  const bool tty = isatty(0);
  std::string line;
  uint64_t turn = 0;
  int64_t line_no = 0;
  while (true) {
    if (tty) std::cerr << "> " << std::flush;
    bool too_long = false;
    if (!read_chat_line(std::cin, line, &too_long)) break;
    ++line_no;
    if (too_long) {  // not fatal: say so, the session goes on
      std::cerr << "flashkit: line " << line_no << ": longer than " << (limits::kMaxTextBytes >> 20)
                << " MiB; skipped\n";
      continue;
    }
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      msgs.resize(a.system.empty() ? 0 : 1);
      session->reset();
      cached.clear();
      continue;
    }
    if (line.empty()) continue;
    msgs.push_back({"user", line});
    std::vector<int32_t> ids;
    try {  // a line the tokenizer or the template rejects (e.g. invalid UTF-8) ends that turn, not the session
      const std::string text =
          chat::render_chat_template(tmpl, msgs, true, tok->bos_token(), tok->eos_token());
      ids = tok->encode(text, false);
    } catch (const Error& e) {
      if (e.status() != Status::invalid_argument) throw;
      std::cerr << "flashkit: line " << line_no << ": " << e.what() << "; skipped\n";
      msgs.pop_back();
      continue;
    }
    // Reuse the cache when it holds a prefix of the new conversation; otherwise start over.
    size_t common = 0;
    while (common < cached.size() && common < ids.size() && cached[common] == ids[common]) ++common;
    if (common < cached.size() || common == ids.size()) {
      session->reset();
      cached.clear();
      common = 0;
    }
    std::vector<int32_t> fresh(ids.begin() + int64_t(common), ids.end());
    if (session->position() + int64_t(fresh.size()) >= session->max_context()) {
      // Not fatal in an interactive session: say so and let the user /reset (or quit).
      std::cerr << "flashkit: the conversation (" << ids.size() << " tokens) no longer fits the context of "
                << session->max_context() << " tokens; type /reset to start over (or use --ctx)\n";
      msgs.pop_back();
      continue;
    }
    Printer pr(out, &*tok, false, a.stop, stop_ids_for(*model, &*tok, a.ignore_eos));
    g.seed = a.seed + turn++;
    bool first = true;
    const OpTimes before = model->op_times();
    GenerationResult r = generate(*session, fresh, g, [&](int32_t id) {
      if (first) {  // add this turn's prefill share
        for (auto& [k, v] : model->op_times().seconds) {
          t.prefill_ops.seconds[k] += v - (before.seconds.count(k) ? before.seconds.at(k) : 0);
          t.prefill_ops.calls[k] += model->op_times().calls.at(k) - (before.calls.count(k) ? before.calls.at(k) : 0);
        }
        first = false;
      }
      return pr.push(id);
    });
    pr.finish();
    cached.insert(cached.end(), fresh.begin(), fresh.end());
    // Every generated token except the last was fed back into the cache.
    cached.insert(cached.end(), r.tokens.begin(), r.tokens.end() - (r.tokens.empty() ? 0 : 1));
    if (int64_t(cached.size()) != session->position()) {  // defensive: keep the bookkeeping exact
      session->reset();
      cached.clear();
    }
    msgs.push_back({"assistant", pr.text()});
    t.add(r);
    if (!pr.stop_reason().empty()) t.stop = pr.stop_reason();
    if (!a.quiet)
      std::cerr << fmt("[ttft %.1f ms, ", r.time_to_first_token_s * 1e3) << fmt("prefill %.1f tok/s, ", r.prefill_tokens_per_s())
                << fmt("decode %.1f tok/s]", r.decode_tokens_per_s()) << "\n";
  }
  if (outf) {
    outf->close();
    if (!*outf) bad("-o/--output: writing " + a.output + " failed (disk full?)");
  }
  if (turn > 0) report(a, *model, t);
}

}  // namespace

void add_generate_commands(CLI::App& app) {
  auto a = std::make_shared<GenArgs>();
  auto* gen = app.add_subcommand("generate", "Generate text with a Hugging Face model (gemma3_text, llama, qwen2/3)");
  add_common(gen, a.get());
  gen->add_option("-p,--prompt", a->prompt, "Prompt text (needs tokenizer.json in the model directory)");
  gen->add_option("-f,--file,--prompt-file", a->prompt_file, "Read the prompt text from FILE (\"-\": standard input)");
  gen->add_option("--prompt-ids", a->prompt_ids, "Prompt as comma-separated token ids, e.g. 2,106,1645; @FILE reads them from FILE");
  gen->add_flag("--ids", a->ids, "Print generated token ids instead of text");
  gen->add_flag("--no-bos", a->no_bos, "Do not add the tokenizer's special tokens (BOS) to -p text");
  gen->add_option("-o,--output", a->output, "Write the generated text to FILE instead of stdout");
  add_spec_options(gen, &a->spec);
  gen->callback([a] {
    TpJob job(a->tp, resolve_device(*a));
    run_generate(*a, job);
    job.finish();  // the model is gone: the other ranks (--tp in processes) have left their loop
  });

  auto c = std::make_shared<GenArgs>();
  c->temp = 0.7f;
  auto* chat = app.add_subcommand("chat", "Interactive multi-turn chat with the model's chat template (stdin lines)");
  add_common(chat, c.get());
  chat->add_option("--system,-p,--prompt", c->system, "System prompt (-p as in llama.cpp's conversation mode)");
  chat->add_flag("--conversation", c->conversation, "Accepted for llama.cpp's -cnv: chat is always a conversation");
  chat->add_option("-o,--output", c->output, "Write the replies to FILE instead of stdout");
  chat->callback([c] {
    TpJob job(c->tp, resolve_device(*c));
    run_chat(*c, job);
    job.finish();
  });
}

}  // namespace flashkit::cli
