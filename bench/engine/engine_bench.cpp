// Decode / prefill benchmark of the engine on the CUDA backend (asserts nothing about speed). tools/gpu/engine.sh
// (stages bench, ncu, ab, opprofile) and tools/gpu/ab.sh run it on the GPU machine:
//   FLASHKIT_BENCH_MODELS=dir1,dir2 FLASHKIT_BENCH_OUT=out.json build-gpu/bench/engine/flashkit_engine_bench
// Per model directory (a Hugging Face checkpoint; see FLASHKIT_BENCH_RANDOM below): greedy generation of FLASHKIT_BENCH_NEW (256) tokens after the
// FLASHKIT_BENCH_PROMPT (128) token prompt found in <dir>/bench_prompt.json (else ids 1..128), with CUDA graphs on
// and off (best of 3 runs each), and a FLASHKIT_BENCH_PREFILL (4096) token prefill in one chunk (best of 3).
// Writes one JSON object with the timings and the generated ids (the fidelity check compares them with
// transformers). Exit status: 0 done, 1 no CUDA device or an error, 2 FLASHKIT_BENCH_MODELS unset or empty.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashkit/engine.hpp"
#include "flashkit/runtime.hpp"

namespace {

int64_t env_int(const char* name, int64_t def) {
  const char* e = std::getenv(name);
  return e && *e ? std::atoll(e) : def;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// FLASHKIT_BENCH_RANDOM=1: the entries of FLASHKIT_BENCH_MODELS are config.json files (or directories) and the
// weights are the engine's seeded random ones (speed only; no checkpoint needed).
bool random_weights() {
  const char* e = std::getenv("FLASHKIT_BENCH_RANDOM");
  return e && *e == '1';
}

// FLASHKIT_BENCH_DTYPE: the LoadOptions::dtype of every load (default bf16; `auto` keeps a GGUF's quantized blocks).
std::string bench_dtype() {
  const char* e = std::getenv("FLASHKIT_BENCH_DTYPE");
  return e && *e ? e : "bf16";
}

// FLASHKIT_BENCH_CEILING_GBPS: the device's copy bandwidth (default 4240 GB/s, the H200's measured copy ceiling);
// decode's weight bytes per step times steps per second are reported as a fraction of it.
double ceiling_gbps() {
  const char* e = std::getenv("FLASHKIT_BENCH_CEILING_GBPS");
  return e && *e ? std::atof(e) : 4240.0;
}

nlohmann::json bench_model(const std::string& dir) {
  const int64_t n_prompt = env_int("FLASHKIT_BENCH_PROMPT", 128), n_new = env_int("FLASHKIT_BENCH_NEW", 256),
                n_prefill = env_int("FLASHKIT_BENCH_PREFILL", 4096), reps = env_int("FLASHKIT_BENCH_REPS", 3);
  std::vector<int32_t> prompt;
  {
    std::ifstream f(dir + "/bench_prompt.json");
    if (f) prompt = nlohmann::json::parse(f).get<std::vector<int32_t>>();
  }
  if (prompt.empty())
    for (int64_t i = 0; i < n_prompt; ++i) prompt.push_back(int32_t(1 + i));
  nlohmann::json j;
  j["model"] = dir;
  j["prompt_tokens"] = prompt.size();
  j["new_tokens"] = n_new;
  for (const char* graphs : {"1", "0"}) {
    flashkit::LoadOptions o;
    o.tuning = flashkit::default_tuning();  // the FLASHKIT_* switches of an A/B run (engine.sh ab) ...
    o.tuning->cuda_graphs = std::string(graphs) != "0";  // ... and graphs on, then off
    o.device = "cuda";
    o.dtype = bench_dtype();
    o.random_weights = random_weights();
    o.max_context = std::max<int64_t>(int64_t(prompt.size()) + n_new + 8, 1024);
    auto t0 = std::chrono::steady_clock::now();
    auto model = flashkit::Model::load(dir, o);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    flashkit::GenerateOptions g;
    g.max_new_tokens = n_new;
    g.temperature = 0.0f;
    g.stop_at_eos = false;
    double best = 0, best_prefill = 0;
    std::vector<int32_t> tokens;
    for (int64_t r = 0; r < reps; ++r) {
      auto s = model->new_session();
      auto res = flashkit::generate(*s, prompt, g);
      best = std::max(best, res.decode_tokens_per_s());
      best_prefill = std::max(best_prefill, res.prefill_tokens_per_s());
      tokens = res.tokens;
    }
    // Session::decode alone (device step + logits download, no sampling): separates the engine's host-side
    // sampling cost from the backend's step.
    double best_step = 0;
    for (int64_t r = 0; r < reps; ++r) {
      auto s = model->new_session();
      s->prefill(prompt);
      const auto t1 = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < n_new; ++i) s->decode(tokens[size_t(i) % tokens.size()]);
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
      best_step = std::max(best_step, double(n_new) / dt);
    }
    const std::string key = std::string("graphs_") + (graphs[0] == '1' ? "on" : "off");
    // Bytes a decode step must read at least: every weight once (the device's memory report; a tied lm_head is
    // the embedding, read once per step as the lm_head).
    const double wbytes = double(model->info().device_weight_bytes);
    const double gbps = wbytes * best_step / 1e9;
    j["dtype"] = bench_dtype();
    j["weight_dtype"] = model->info().weight_dtype;
    j["device_weight_bytes"] = model->info().device_weight_bytes;
    j["device_scratch_bytes"] = model->info().device_scratch_bytes;
    j[key] = {{"decode_tok_s", best}, {"decode_step_only_tok_s", best_step}, {"prompt_prefill_tok_s", best_prefill},
              {"load_s", load_s}, {"weight_bytes_per_token", wbytes}, {"weight_GBps", gbps},
              {"pct_of_copy_ceiling", 100.0 * gbps / ceiling_gbps()}};
    std::printf("[bench] %s %s: %s weights %.1f MB/token, %.0f GB/s = %.1f%% of %.0f GB/s\n", dir.c_str(), key.c_str(),
                model->info().weight_dtype.c_str(), wbytes / 1e6, gbps, 100.0 * gbps / ceiling_gbps(),
                ceiling_gbps());
    std::printf("[bench] %s %s: Session::decode alone %.1f steps/s\n", dir.c_str(), key.c_str(), best_step);
    j[key]["tokens"] = tokens;
    std::printf("[bench] %s %s: decode %.1f tok/s (best of %lld), %lld-token prefill %.0f tok/s\n", dir.c_str(),
                key.c_str(), best, (long long)reps, (long long)prompt.size(), best_prefill);
    std::fflush(stdout);
  }
  if (std::getenv("FLASHKIT_BENCH_PROFILE")) {  // per-op times (a device sync after every op: no fusion, no graphs)
    flashkit::LoadOptions o;
    o.device = "cuda";
    o.dtype = bench_dtype();
    o.random_weights = random_weights();
    o.profile = true;
    o.max_context = std::max<int64_t>(int64_t(prompt.size()) + n_new + 8, 1024);
    auto model = flashkit::Model::load(dir, o);
    auto s = model->new_session();
    s->prefill(prompt);
    model->op_times().clear();
    for (int64_t i = 0; i < 64; ++i) s->decode(prompt[size_t(i) % prompt.size()]);
    for (const auto& [name, sec] : model->op_times().seconds)
      std::printf("[profile] %s %-18s %8.1f us/call x %lld calls/step\n", dir.c_str(), name.c_str(),
                  1e6 * sec / double(model->op_times().calls[name]), (long long)(model->op_times().calls[name] / 64));
  }
  {  // long prefill in one chunk
    flashkit::LoadOptions o;
    o.device = "cuda";
    o.dtype = bench_dtype();
    o.random_weights = random_weights();
    o.max_context = n_prefill + 8;
    o.prefill_chunk = n_prefill;
    auto model = flashkit::Model::load(dir, o);
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < n_prefill; ++i) ids.push_back(prompt[size_t(i) % prompt.size()]);
    double best = 0;
    for (int64_t r = 0; r < reps + 1; ++r) {  // the first run warms up cuBLAS and the allocator
      auto s = model->new_session();
      const auto t0 = std::chrono::steady_clock::now();
      s->prefill(ids);
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) best = std::max(best, double(n_prefill) / dt);
    }
    j["prefill"] = {{"tokens", n_prefill}, {"tok_s", best}};
    std::printf("[bench] %s prefill %lld tokens: %.0f tok/s\n", dir.c_str(), (long long)n_prefill, best);
    std::fflush(stdout);
  }
  return j;
}

}  // namespace

int main() {
  const char* models = std::getenv("FLASHKIT_BENCH_MODELS");
  if (!models || split(models).empty()) {
    std::fprintf(stderr, "flashkit_engine_bench: set FLASHKIT_BENCH_MODELS to comma-separated model directories "
                         "(or config.json files with FLASHKIT_BENCH_RANDOM=1)\n");
    return 2;
  }
  if (flashkit::cuda_device_count() <= 0) {
    std::fprintf(stderr, "flashkit_engine_bench: no CUDA device\n");
    return 1;
  }
  try {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& dir : split(models)) all.push_back(bench_model(dir));
    const char* out = std::getenv("FLASHKIT_BENCH_OUT");
    if (out && *out) {
      std::ofstream f(out);
      f << all.dump(1) << "\n";
      if (!f) {
        std::fprintf(stderr, "flashkit_engine_bench: cannot write FLASHKIT_BENCH_OUT=%s\n", out);
        return 1;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashkit_engine_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
