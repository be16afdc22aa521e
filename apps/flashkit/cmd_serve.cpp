// flashkit serve | bench serve: the OpenAI-compatible server (src/serve, docs/serving.md) and its load generator.
//   flashkit serve -m DIR [--host 127.0.0.1] [--port 8080] [--kv-memory 512M] [--max-running 32] ...
//   flashkit bench serve -m DIR [--concurrency 1,2,4,8] [--requests 16] [--prompt-tokens 64] [--max-tokens 32]
//                        [--shared-prefix 48] [-o results.json]         (or --url http://127.0.0.1:PORT)
// serve runs until SIGTERM / SIGINT: it then stops accepting connections, finishes the requests in flight and exits 0.
// bench serve drives a server on the loopback interface only (its own, in this process, unless --url names one),
// bounded in requests and time, and reports throughput, time to first token and inter-token latency percentiles per
// concurrency, with and without a shared prompt prefix, as JSON (bench/serve/plot_serve.py draws it).
#if defined(FLASHKIT_WITH_HTTP)
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <tuple>
#include <utility>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cli_checks.hpp"
#include "commands.hpp"
#include "core/limits.hpp"
#include "engine/offload_plan.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
#include "flashkit/serve.hpp"
#include "flashkit/tokenizer.hpp"
#include "serve/http/server.hpp"
#include "tp_launch.hpp"

namespace flashkit::cli {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, m); }

struct ServeArgs {
  std::string model, host = "127.0.0.1", model_id, device = "cpu", dtype = "auto", kv_memory = "0";
  int port = 8080, threads = 0, max_connections = 64, tp = 1;
  int64_t ctx = 0, block_size = 16, max_step_tokens = 256, max_running = 32, max_tokens_limit = 4096, max_pending = 256;
  int64_t max_body = 1 << 20;
  bool no_prefix_cache = false, quiet = false, random_weights = false;
  std::string tokenizer;
  OffloadArgs offload;
  // n-gram speculative decoding (generate's flag names; serve::EngineOptions::spec_*)
  int lookup = 0, max_draft_tokens = 8;
  int64_t spec_max_batch = 0;  // 0: by backend
  std::string draft_tokens = "4";  // K or "auto"
};

// "1073741824", "512M", "2G", "64K" (binary units); -1 when s is none of these: the engine's one byte-count parser.
int64_t bytes_of(const std::string& s) { return engine::parse_byte_count(s); }

CLI::Validator byte_count() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        return bytes_of(s) < 0 ? "expected a byte count in [0, 9e18] (e.g. 1073741824, 512M, 2G), got '" + s + "'"
                               : std::string();
      },
      "BYTES");
}

void add_serve_options(CLI::App* c, ServeArgs* a, bool model_required) {
  auto* m = c->add_option("-m,--model", a->model, "Model directory (config.json, *.safetensors, tokenizer.json) or .gguf");
  if (model_required) m->required();
  c->add_option("--device", a->device, "cpu | cuda (the paged KV cache runs on both backends)");
  c->add_option("--dtype", a->dtype, "Weight storage: auto | f32 | bf16 | f16 | q8_0");
  c->add_option("-t,--threads", a->threads, "CPU threads (default: flashkit's)")->check(thread_count());
  c->add_option("--tp", a->tp, "Tensor-parallel ranks: heads and MLP columns split (one process per GPU over NCCL with --device cuda and enough GPUs, threads otherwise; FLASHKIT_TP_BACKEND)");
  c->add_option("-c,--ctx-size,--ctx", a->ctx, "Context length per sequence (default min(model max, 4096))")
      ->check(int_range(0, limits::kMaxContext));
  c->add_option("--kv-memory", a->kv_memory,
                "Bytes of the KV block pool, e.g. 512M (default 0: a quarter of the available memory, capped at "
                "max-running full contexts)")
      ->check(byte_count());
  c->add_option("--block-size", a->block_size, "Positions per KV block (default 16)")
      ->check(int_range(1, limits::kMaxServeBlockSize));
  c->add_option("--max-step-tokens", a->max_step_tokens, "Token budget of one batched step (default 256)")
      ->check(int_range(1, limits::kMaxServeStepTokens));
  c->add_option("--max-running", a->max_running, "Sequences decoding together (default 32)")
      ->check(int_range(1, limits::kMaxServeRunning));
  c->add_flag("--no-prefix-cache", a->no_prefix_cache, "Do not reuse KV blocks of earlier requests");
  c->add_option("--max-tokens-limit", a->max_tokens_limit, "Largest max_tokens a request may ask for (default 4096)")
      ->check(int_range(1, limits::kMaxContext));
  c->add_option("--max-body-bytes", a->max_body, "Largest request body (default 1 MiB)")
      ->check(int_range(256, limits::kMaxServeBodyBytes));
  c->add_option("--max-connections", a->max_connections, "Connections served at once (default 64)")
      ->check(int_range(1, limits::kMaxServeConnections));
  c->add_option("--max-pending", a->max_pending, "Requests queued or running before new ones get 503 (default 256)")
      ->check(int_range(1, limits::kMaxServePending));
  c->add_flag("-q,--quiet", a->quiet, "No log on stderr");
  c->add_flag("--random-weights", a->random_weights,
              "Ignore the checkpoint: seeded random weights for the config (benchmarks; -m may be a config.json)");
  c->add_option("--tokenizer", a->tokenizer, "Directory with tokenizer.json, or a tokenizer.json file (default: the model directory)");
  add_offload_options(c, &a->offload);
  c->add_option("--lookup", a->lookup,
                "Speculative decoding by n-gram prompt lookup: match the last N..1 tokens of each request's prompt + "
                "output (0 = off, the default)")
      ->check(int_range(0, limits::kMaxSpecTokens));
  c->add_option("--draft-tokens", a->draft_tokens,
                "Tokens proposed per sequence and step with --lookup: K in [1, 64], or auto (per sequence, from its "
                "acceptance rate and the step times; default 4)")
      ->check(int_range_or(1, limits::kMaxSpecTokens, "auto"));
  c->add_option("--max-draft-tokens", a->max_draft_tokens, "Upper bound of --draft-tokens auto (default 8)")
      ->check(int_range(1, limits::kMaxSpecTokens));
  c->add_option("--spec-max-batch", a->spec_max_batch,
                "Speculate only while at most this many sequences decode (default 0: 1 on the CPU, 8 on CUDA; a "
                "fuller batch is not weight-bound, so extra rows cost about as much as real ones)")
      ->check(int_range(0, 4096));
}

// The numeric ranges are checked by CLI11 (add_serve_options); this checks what they cannot.
void validate(const ServeArgs& a) {
  std::error_code ec;
  if (!fs::exists(a.model, ec)) bad("--model: " + a.model + ": no such file or directory");
  if (a.host.empty()) bad("--host: empty address (default 127.0.0.1, the loopback interface)");
}

// Speculation options given without --lookup would silently do nothing.
void validate_spec(const ServeArgs& a, const CLI::App* c) {
  if (a.lookup > 0) return;
  for (const char* opt : {"--draft-tokens", "--max-draft-tokens", "--spec-max-batch"})
    if (c->count(opt) > 0) bad(std::string(opt) + " sets up speculative decoding; it needs --lookup N (N >= 1)");
}

// A model, its engine, tokenizer and HTTP server, ready to run.
struct Stack {
  std::shared_ptr<Model> model;
  std::unique_ptr<serve::Engine> engine;
  std::shared_ptr<const Tokenizer> tok;
  std::unique_ptr<serve::HttpServer> server;
  int port = 0;
};

LoadOptions serve_load_options(const ServeArgs& a) {
  LoadOptions lo;
  lo.device = a.device;
  lo.dtype = a.dtype;
  lo.threads = a.threads;
  lo.tp = a.tp;
  lo.max_context = a.ctx;
  lo.random_weights = a.random_weights;
  apply_offload_options(a.offload, lo);
  return lo;
}

// job: flashkit serve's --tp placement (ranks in processes: this is rank 0); nullptr: thread ranks only.
std::unique_ptr<Stack> build_stack(const ServeArgs& a, bool log, TpJob* job = nullptr) {
  validate(a);
  auto s = std::make_unique<Stack>();
  fs::path d = a.tokenizer.empty() ? fs::path(a.model) : fs::path(tokenizer_dir(a.tokenizer, "--tokenizer"));
  std::error_code ec;
  const fs::path given = d;
  if (!fs::is_directory(d, ec)) d = d.parent_path();
  if (!fs::exists(d / "tokenizer.json", ec) && given.extension() == ".gguf" && fs::is_regular_file(given, ec) &&
      Tokenizer::gguf_has_tokenizer(given))
    s->tok = std::make_shared<const Tokenizer>(Tokenizer::from_gguf(given));  // the tokenizer the file carries
  else if (!fs::exists(d / "tokenizer.json", ec))
    bad(d.string() + " has no tokenizer.json: flashkit serve needs the model's tokenizer (text in, text out; "
                     "--tokenizer DIR names another directory)");
  else
    s->tok = std::make_shared<const Tokenizer>(Tokenizer::from_dir(d));
  s->model = job ? job->load(a.model, serve_load_options(a)) : Model::load(a.model, serve_load_options(a));
  serve::EngineOptions eo;
  eo.block_size = a.block_size;
  eo.kv_memory = bytes_of(a.kv_memory);
  eo.max_step_tokens = a.max_step_tokens;
  eo.max_running = a.max_running;
  eo.prefix_caching = !a.no_prefix_cache;
  eo.spec_lookup = a.lookup;
  eo.spec_tokens = a.draft_tokens == "auto" ? 0 : std::stoi(a.draft_tokens);  // checked by CLI11
  eo.spec_max_tokens = a.max_draft_tokens;
  eo.spec_max_batch = a.spec_max_batch;
  s->engine = serve::Engine::create(s->model, eo);
  serve::ServerOptions so;
  so.host = a.host;
  so.port = a.port;
  so.model_id = a.model_id.empty() ? fs::path(a.model).filename().string() : a.model_id;
  if (so.model_id.empty()) so.model_id = fs::path(a.model).parent_path().filename().string();
  so.max_body_bytes = size_t(a.max_body);
  so.max_tokens_limit = a.max_tokens_limit;
  so.max_connections = a.max_connections;
  so.max_pending = a.max_pending;
  s->server = std::make_unique<serve::HttpServer>(*s->engine, s->tok, so);
  s->port = s->server->bind();
  if (log) {
    const ModelInfo& mi = s->model->info();
    const serve::EngineStats st = s->engine->stats();
    const serve::EngineOptions& o = s->engine->options();
    // A model without a KV cache (Mamba) runs one session per request: there is no block pool to describe.
    char kv[192];
    if (o.kv_memory > 0)
      std::snprintf(kv, sizeof kv, "KV cache: %lld blocks of %lld positions = %.1f MiB (%lld full-context sequences)",
                    (long long)st.kv_blocks_total, (long long)st.block_size, double(st.kv_bytes) / (1 << 20),
                    (long long)(st.kv_blocks_total * st.block_size / std::max<int64_t>(1, mi.max_context)));
    else
      std::snprintf(kv, sizeof kv, "no KV cache: one session (recurrent state) per running request");
    char batch[96];
    if (o.kv_memory > 0)
      std::snprintf(batch, sizeof batch, "batch: %lld sequences, %lld tokens per step", (long long)o.max_running,
                    (long long)o.max_step_tokens);
    else
      std::snprintf(batch, sizeof batch, "up to %lld sessions, one token each per step", (long long)o.max_running);
    std::fprintf(stderr,
                 "flashkit serve: %s (%s, %s weights) on %s, context %lld\n"
                 "  %s; %s; prefix cache %s\n"
                 "  listening on http://%s:%d (model id \"%s\")\n",
                 a.model.c_str(), mi.architecture.c_str(), mi.weight_dtype.c_str(), mi.backend.c_str(),
                 (long long)mi.max_context, kv, batch, o.prefix_caching ? "on" : "off",
                 a.host.c_str(), s->port, so.model_id.c_str());
    if (const std::string off = offload_summary(mi); !off.empty()) std::fprintf(stderr, "  %s\n", off.c_str());
    if (o.spec_lookup > 0)
      std::fprintf(stderr, "  speculative decoding: n-gram lookup N=%d, K=%s, while <= %lld sequences decode\n",
                   o.spec_lookup, o.spec_tokens > 0 ? std::to_string(o.spec_tokens).c_str()
                                                    : ("auto (<= " + std::to_string(o.spec_max_tokens) + ")").c_str(),
                   (long long)o.spec_max_batch);
  }
  return s;
}

// SIGTERM / SIGINT -> one byte on a pipe (all a handler may safely do); a watcher thread then stops the server.
int g_signal_pipe[2] = {-1, -1};
extern "C" void on_stop_signal(int) {
  const char c = 1;
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &c, 1);
}

void run_serve_stack(const ServeArgs& a, TpJob& job) {
  std::signal(SIGPIPE, SIG_IGN);  // a vanished client must not kill the server
  auto s = build_stack(a, !a.quiet, &job);
  if (pipe(g_signal_pipe) != 0) bad(std::string("serve: pipe: ") + std::strerror(errno));
  struct sigaction sa{};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  std::thread watcher([&] {
    char c;
    while (read(g_signal_pipe[0], &c, 1) < 0 && errno == EINTR) {
    }
    if (c == 1 && !a.quiet) std::fprintf(stderr, "flashkit serve: stopping (finishing the requests in flight)\n");
    s->server->stop();
  });
  s->server->run();
  const char quit = 2;  // wake the watcher if run() ended without a signal
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &quit, 1);
  watcher.join();
  s->engine->wait_idle();
  if (!a.quiet) {
    const serve::EngineStats st = s->engine->stats();
    std::fprintf(stderr, "flashkit serve: stopped after %lld requests (%lld prompt, %lld generated tokens)\n",
                 (long long)(st.requests_finished + st.requests_cancelled), (long long)st.prompt_tokens,
                 (long long)st.generation_tokens);
  }
}

// --tp in processes (tp_launch.hpp): rank 0 serves; the other ranks replay its steps until its model is gone.
void run_serve(const ServeArgs& a) {
  TpJob job(a.tp, a.device.empty() ? "cpu" : a.device);
  if (job.follower()) {
    validate(a);
    return job.follow(a.model, serve_load_options(a));
  }
  run_serve_stack(a, job);
  job.finish();
}

// ---------------------------------------------------------------- bench serve

struct BenchArgs {
  ServeArgs serve;
  std::string url, output, prompt_file;
  std::vector<int> concurrency = {1, 2, 4, 8};
  int64_t requests = 16, prompt_tokens = 64, max_tokens = 32, shared_prefix = 48;
  double time_limit = 300;
  uint64_t seed = 1;
};

struct Percentiles {
  static json of(std::vector<double> v) {
    if (v.empty()) return json{{"n", 0}};
    std::sort(v.begin(), v.end());
    auto q = [&](double p) { return v[std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5))]; };
    double sum = 0;
    for (double x : v) sum += x;
    return {{"n", v.size()}, {"mean", sum / double(v.size())}, {"p50", q(0.5)}, {"p90", q(0.9)}, {"p99", q(0.99)},
            {"max", v.back()}};
  }
};

struct OneResult {
  bool ok = false;
  std::string error;
  double ttft_ms = 0;
  std::vector<double> itl_ms;
  int64_t tokens = 0;
};

// One streamed completion; times the arrival of every token-carrying event.
// prompt: token ids, or a text.
OneResult one_request(const std::string& host, int port, const json& prompt, int64_t max_tokens) {
  OneResult r;
  httplib::Client cli(host, port);
  cli.set_read_timeout(120);
  cli.set_connection_timeout(10);
  const json body = {{"prompt", prompt},      {"max_tokens", max_tokens}, {"temperature", 0},
                     {"stream", true},        {"ignore_eos", true},       {"return_token_ids", true}};
  const auto t0 = Clock::now();
  auto last = t0;
  std::string buf;
  int status = 0;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}};
  req.body = body.dump();
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buf.append(data, n);
    size_t pos;
    while ((pos = buf.find("\n\n")) != std::string::npos) {
      const std::string ev = buf.substr(0, pos);
      buf.erase(0, pos + 2);
      if (ev.rfind("data: ", 0) != 0 || ev == "data: [DONE]") continue;
      const json j = json::parse(ev.substr(6), nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("error")) {
        r.error = j["error"].value("message", "error");
        continue;
      }
      int64_t k = 0;
      if (j.contains("choices") && !j["choices"].empty() && j["choices"][0].contains("token_ids"))
        k = int64_t(j["choices"][0]["token_ids"].size());
      if (k == 0) continue;
      const auto now = Clock::now();
      if (r.tokens == 0) r.ttft_ms = std::chrono::duration<double, std::milli>(now - t0).count();
      else r.itl_ms.push_back(std::chrono::duration<double, std::milli>(now - last).count() / double(k));
      last = now;
      r.tokens += k;
    }
    return true;
  };
  auto res = cli.send(req);
  if (!res) {
    r.error = "connection failed: " + httplib::to_string(res.error());
    return r;
  }
  if (status != 200) {
    r.error = "HTTP " + std::to_string(status);
    return r;
  }
  r.ok = r.error.empty() && r.tokens > 0;
  return r;
}

json get_json(const std::string& host, int port, const char* path, bool post = false) {
  httplib::Client cli(host, port);
  auto res = post ? cli.Post(path, "", "application/json") : cli.Get(path);
  if (!res || res->status != 200) return nullptr;
  if (std::string(path) == "/metrics") {
    json m = json::object();
    std::istringstream in(res->body);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      const auto sp = line.find(' ');
      if (sp != std::string::npos) m[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
    }
    return m;
  }
  return json::parse(res->body, nullptr, false);
}

// --url: exactly http://HOST:PORT[/] with HOST one of the loopback names; anything else (another address, a name
// that merely starts like one, user info, no port, a port out of range) is refused before any connection.
std::pair<std::string, int> loopback_url(const std::string& url) {
  const std::string expected = "--url: expected http://127.0.0.1:PORT (or localhost, [::1]; PORT in [1, 65535]), got ";
  std::string u = url;
  if (u.rfind("http://", 0) != 0) bad(expected + url);
  u = u.substr(7);
  if (!u.empty() && u.back() == '/') u.pop_back();
  const auto colon = u.rfind(':');
  if (colon == std::string::npos) bad(expected + url);
  std::string host = u.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  if (host != "127.0.0.1" && host != "[::1]")
    bad("--url: bench serve only drives servers on the loopback interface (127.0.0.1, localhost, [::1]), got " + url);
  const std::string p = u.substr(colon + 1);
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) bad(expected + url);
  const int port = std::stoi(p);
  if (port < 1 || port > 65535) bad(expected + url);
  return {host == "[::1]" ? "::1" : host, port};
}

void run_bench_serve(BenchArgs& b) {
  const std::vector<int>& levels = b.concurrency;  // each checked by CLI11
  if (levels.empty()) bad("--concurrency: no levels given");
  std::ofstream out;
  if (!b.output.empty()) {
    out.open(b.output);
    if (!out) bad("-o/--output: cannot write " + b.output + ": " + std::strerror(errno));
  }
  std::string host = "127.0.0.1";
  int port = 0;
  std::unique_ptr<Stack> stack;
  std::thread server_thread;
  int64_t vocab = 0;
  json server_info;
  if (!b.url.empty()) {
    // Loopback only: this is a load generator for a local server, not a tool to aim at other machines.
    std::tie(host, port) = loopback_url(b.url);
    const json models = get_json(host, port, "/v1/models");
    if (!models.is_object()) bad("--url: no flashkit server answers at " + b.url);
    server_info = models;
    vocab = 256;  // token ids below every real vocabulary
  } else {
    if (b.serve.model.empty()) bad("bench serve: give -m MODEL (a server is started in this process) or --url");
    b.serve.port = 0;
    b.serve.quiet = true;
    std::signal(SIGPIPE, SIG_IGN);
    stack = build_stack(b.serve, false);
    port = stack->port;
    vocab = stack->model->info().vocab_size;
    server_thread = std::thread([&] { stack->server->run(); });
    const ModelInfo& mi = stack->model->info();
    server_info = {{"model", b.serve.model},     {"architecture", mi.architecture},
                   {"backend", mi.backend},      {"weight_dtype", mi.weight_dtype},
                   {"kv_blocks", stack->engine->stats().kv_blocks_total},
                   {"block_size", stack->engine->options().block_size},
                   {"max_running", stack->engine->options().max_running},
                   {"max_step_tokens", stack->engine->options().max_step_tokens},
                   {"prefix_caching", stack->engine->options().prefix_caching},
                   {"spec_lookup", stack->engine->options().spec_lookup},
                   {"spec_tokens", stack->engine->options().spec_tokens},
                   {"spec_max_batch", stack->engine->options().spec_max_batch}};
  }
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(b.time_limit));
  std::mt19937 rng(uint32_t(b.seed));
  const int32_t id_hi = int32_t(std::min<int64_t>(vocab, 30000));
  auto random_ids = [&](int64_t n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = int32_t(3 + rng() % uint32_t(std::max(4, id_hi - 3)));
    return v;
  };
  std::string prompt_text;
  if (!b.prompt_file.empty()) {
    std::ifstream f(b.prompt_file, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    prompt_text = ss.str();
    if (!f || prompt_text.empty()) bad("--prompt-file: cannot read " + b.prompt_file + " (or it is empty)");
    b.shared_prefix = 0;  // one series: every request sends the same text
    // Its length as the server counts it (with BOS); unknown when driving another server (--url).
    b.prompt_tokens = stack ? int64_t(stack->tok->encode(prompt_text, true).size()) : 0;
  }
  json runs = json::array();
  for (int64_t prefix : {int64_t(0), b.shared_prefix}) {
    if (prefix == 0 && !runs.empty()) continue;
    const std::vector<int32_t> shared = random_ids(std::min(prefix, b.prompt_tokens));
    for (int c : levels) {
      if (Clock::now() > deadline) break;
      get_json(host, port, "/v1/cache/reset", true);  // every run starts cold
      const json m0 = get_json(host, port, "/metrics");
      std::vector<json> prompts;
      for (int64_t i = 0; i < b.requests; ++i) {
        if (!prompt_text.empty()) {
          prompts.push_back(prompt_text);
          continue;
        }
        auto p = shared;
        auto tail = random_ids(b.prompt_tokens - int64_t(shared.size()));
        p.insert(p.end(), tail.begin(), tail.end());
        prompts.push_back(std::move(p));
      }
      std::atomic<int64_t> next{0};
      std::mutex mu;
      std::vector<OneResult> results;
      const auto t0 = Clock::now();
      std::vector<std::thread> th;
      for (int k = 0; k < c; ++k)
        th.emplace_back([&] {
          while (true) {
            const int64_t i = next++;
            if (i >= b.requests || Clock::now() > deadline) return;
            OneResult r = one_request(host, port, prompts[size_t(i)], b.max_tokens);
            std::lock_guard<std::mutex> lk(mu);
            results.push_back(std::move(r));
          }
        });
      for (auto& t : th) t.join();
      const double dur = std::chrono::duration<double>(Clock::now() - t0).count();
      const json m1 = get_json(host, port, "/metrics");
      std::vector<double> ttft, itl;
      int64_t tokens = 0, ok = 0;
      std::string first_error;
      for (auto& r : results) {
        if (!r.ok) {
          if (first_error.empty()) first_error = r.error;
          continue;
        }
        ++ok;
        tokens += r.tokens;
        ttft.push_back(r.ttft_ms);
        itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
      }
      auto delta = [&](const char* k) {
        return m0.is_object() && m1.is_object() && m0.contains(k) && m1.contains(k) ? m1[k].get<double>() - m0[k].get<double>() : 0.0;
      };
      const double hits = delta("flashkit_prefix_cache_hits_total"), misses = delta("flashkit_prefix_cache_misses_total");
      json run = {{"concurrency", c},
                  {"shared_prefix_tokens", int64_t(shared.size())},
                  {"prompt_tokens", b.prompt_tokens},
                  {"max_tokens", b.max_tokens},
                  {"requests", int64_t(results.size())},
                  {"ok", ok},
                  {"duration_s", dur},
                  {"output_tokens", tokens},
                  {"throughput_tok_s", dur > 0 ? double(tokens) / dur : 0.0},
                  {"requests_per_s", dur > 0 ? double(ok) / dur : 0.0},
                  {"ttft_ms", Percentiles::of(ttft)},
                  {"itl_ms", Percentiles::of(itl)},
                  {"prefix_cache_hit_rate", hits + misses > 0 ? hits / (hits + misses) : 0.0},
                  {"preemptions", delta("flashkit_preemptions_total")}};
      if (!prompt_text.empty()) run["prompt_file"] = b.prompt_file;
      const double proposed = delta("flashkit_spec_proposed_tokens_total");
      if (proposed > 0 || delta("flashkit_spec_verify_steps_total") > 0) {
        const double acc = delta("flashkit_spec_accepted_tokens_total"), vs = delta("flashkit_spec_verify_steps_total");
        run["speculative"] = {{"proposed", proposed},
                              {"accepted", acc},
                              {"verify_steps", vs},
                              {"acceptance_rate", proposed > 0 ? acc / proposed : 0.0}};
      }
      if (!first_error.empty()) run["first_error"] = first_error;
      std::fprintf(stderr, "concurrency %3d prefix %3lld: %6.1f tok/s, ttft p50 %7.1f ms, itl p50 %6.1f ms (%lld/%lld ok)%s\n", c,
                   (long long)shared.size(), run["throughput_tok_s"].get<double>(),
                   ttft.empty() ? 0.0 : run["ttft_ms"]["p50"].get<double>(),
                   itl.empty() ? 0.0 : run["itl_ms"]["p50"].get<double>(), (long long)ok, (long long)results.size(),
                   run.contains("speculative")
                       ? (", accepted " + std::to_string(int64_t(run["speculative"]["accepted"].get<double>())) + "/" +
                          std::to_string(int64_t(proposed)) + " proposed").c_str()
                       : "");
      runs.push_back(run);
    }
  }
  if (stack) {
    stack->server->stop();
    server_thread.join();
  }
  const json report = {{"server", server_info}, {"runs", runs}};
  if (out.is_open()) out << report.dump(1) << "\n";
  else std::cout << report.dump(1) << "\n";
}

}  // namespace

void add_serve_commands(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  auto* s = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching (/v1/completions, ...)");
  add_serve_options(s, a.get(), true);
  // Only an explicit --host makes the server listen beyond the loopback interface (bench serve has no --host).
  s->add_option("--host", a->host, "Address to listen on (default 127.0.0.1: this machine only)");
  s->add_option("--port", a->port, "Port (default 8080; 0: any free port)")->check(int_range(0, 65535));
  s->add_option("--model-id", a->model_id, "Model name in the API (default: the model directory's name)");
  s->callback([a, s] {
    validate_spec(*a, s);
    run_serve(*a);
  });

  // `flashkit bench serve`: a subcommand of the existing `bench` group (cmd_bench.cpp registers it first).
  CLI::App* bench = nullptr;
  try {
    bench = app.get_subcommand("bench");
  } catch (const CLI::OptionNotFound&) {
    bench = app.add_subcommand("bench", "Benchmarks");
  }
  auto b = std::make_shared<BenchArgs>();
  auto* bs = bench->add_subcommand("serve", "Load generator for flashkit serve (loopback only): throughput, TTFT, ITL");
  add_serve_options(bs, &b->serve, false);
  bs->add_option("--url", b->url, "Drive a running server at http://127.0.0.1:PORT instead of starting one");
  bs->add_option("--concurrency", b->concurrency, "Concurrent clients per run, comma-separated (default 1,2,4,8)")
      ->delimiter(',')
      ->check(int_range(1, limits::kMaxBenchServeConcurrency));
  bs->add_option("--requests", b->requests, "Requests per run (default 16, at most 10000)")
      ->check(int_range(1, limits::kMaxBenchServeRequests));
  bs->add_option("--prompt-tokens", b->prompt_tokens, "Prompt length in tokens (default 64)")
      ->check(int_range(1, limits::kMaxContext));
  bs->add_option("--max-tokens", b->max_tokens, "Tokens generated per request (default 32)")
      ->check(int_range(1, limits::kMaxBenchServeTokens));
  bs->add_option("--shared-prefix", b->shared_prefix,
                 "Tokens of prompt prefix shared by all requests in the second series (default 48; 0: one series)")
      ->check(int_range(0, limits::kMaxContext));
  bs->add_option("--time-limit", b->time_limit, "Stop issuing requests after this many seconds (default 300)")
      ->check(real_range(0, limits::kMaxBenchSeconds, true));
  bs->add_option("--seed", b->seed, "Seed of the random prompts")->check(uint64_value());
  bs->add_option("-o,--output", b->output, "Write the JSON report to FILE (default stdout)");
  bs->add_option("--prompt-file", b->prompt_file,
                 "Send this text file as every request's prompt instead of random ids (e.g. an input-grounded "
                 "passage and a question quoting it, where --lookup has something to copy); one series, no "
                 "--shared-prefix")
      ->check(CLI::ExistingFile);
  bs->callback([b, bs] {
    validate_spec(b->serve, bs);
    run_bench_serve(*b);
  });
}

}  // namespace flashkit::cli

#else  // built without cpp-httplib (src/serve/http/CMakeLists.txt)
#include <string>

#include "commands.hpp"
#include "flashkit/error.hpp"

namespace flashkit::cli {

void add_serve_commands(CLI::App& app) {
  auto* s = app.add_subcommand("serve", "OpenAI-compatible HTTP server (not in this build: needs cpp-httplib)");
  s->allow_extras();
  s->callback([] {
    fail(Status::unsupported, "this build has no HTTP server: install libcpp-httplib-dev (tools/install-deps.sh) and "
                              "reconfigure");
  });
}

}  // namespace flashkit::cli
#endif
