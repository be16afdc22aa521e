// CPU offload of weights on the CUDA backend (docs/serving.md "CPU offload", docs/worklog/offload-cuda.md): asserts
// nothing about speed. tools/gpu/offload.sh runs it on the GPU machine:
//   FLASHKIT_OFFLOAD_CONFIG=models/configs/llama-3.2-1b.json FLASHKIT_OFFLOAD_OUT=out.json flashkit_offload_bench
// Measures, on random bf16 weights of the config:
//   * the roofline: host -> device copy bandwidth from pinned memory (and from pageable memory, for scale), 256 MiB
//     copies, best of 5;
//   * for 0, 25, 50, 75 and 100% of the layers offloaded: greedy decode tok/s (FLASHKIT_OFFLOAD_NEW = 64 tokens after
//     a 128-token prompt, CUDA graphs on, best of 2) and prefill tok/s (FLASHKIT_OFFLOAD_PREFILL = 2048 tokens in one
//     chunk, best of 2); the bytes streamed per pass and the floor they set (bytes / pinned bandwidth); whether the
//     greedy tokens equal those of the resident model (they must: the kernels read the same bytes);
//   * the CPU backend's decode tok/s on the same machine (FLASHKIT_OFFLOAD_CPU_NEW = 16 tokens after 32) and the
//     offloaded fraction where the offloaded GPU decode would fall to it (linear in the streamed bytes: the measured
//     resident step time plus the fraction's bytes / bandwidth).
// Exit status: 0 done, 1 no CUDA device or an error.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
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
std::string env_str(const char* name, const char* def) {
  const char* e = std::getenv(name);
  return e && *e ? e : def;
}
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Host -> device GB/s (1e9 bytes/s), best of 5 copies of `bytes`.
double h2d_gbps(size_t bytes, bool pinned) {
  void* host = nullptr;
  void* dev = nullptr;
  if (pinned) ck(cudaMallocHost(&host, bytes), "cudaMallocHost");
  else host = std::malloc(bytes);
  std::fill_n(static_cast<char*>(host), bytes, char(1));
  ck(cudaMalloc(&dev, bytes), "cudaMalloc");
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  float best = 1e30f;
  for (int i = 0; i < 6; ++i) {
    cudaEventRecord(a);
    ck(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpyAsync");
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (i > 0) best = std::min(best, ms);  // the first warms the path up
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaFree(dev);
  if (pinned) cudaFreeHost(host);
  else std::free(host);
  return double(bytes) / (double(best) * 1e-3) / 1e9;
}

std::vector<int32_t> ids(int64_t n, int64_t vocab, uint32_t seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  uint32_t x = seed;
  for (auto& t : v) x = x * 1664525u + 1013904223u, t = int32_t((x >> 8) % uint32_t(vocab - 2)) + 1;
  return v;
}

struct Decode {
  double tok_s = 0;
  std::vector<int32_t> tokens;
};

Decode decode(flashkit::Model& m, int64_t prompt, int64_t n, int reps) {
  Decode d;
  for (int r = 0; r < reps; ++r) {
    auto s = m.new_session();
    flashkit::GenerateOptions g;
    g.max_new_tokens = n;
    g.temperature = 0;
    g.stop_at_eos = false;
    const auto res = flashkit::generate(*s, ids(prompt, m.info().vocab_size, 1), g);
    d.tok_s = std::max(d.tok_s, res.decode_tokens_per_s());
    d.tokens = res.tokens;
  }
  return d;
}

double prefill(flashkit::Model& m, int64_t n, int reps) {
  double best = 0;
  const auto p = ids(n, m.info().vocab_size, 2);
  for (int r = 0; r < reps; ++r) {
    auto s = m.new_session();
    const double t0 = now();
    s->prefill(p);
    (void)s->logits();
    best = std::max(best, double(n) / (now() - t0));
  }
  return best;
}

}  // namespace

int main() {
  try {
    if (flashkit::cuda_device_count() <= 0) {
      std::fprintf(stderr, "flashkit_offload_bench: no CUDA device\n");
      return 1;
    }
    const std::string config = env_str("FLASHKIT_OFFLOAD_CONFIG", "models/configs/llama-3.2-1b.json");
    const std::string out = env_str("FLASHKIT_OFFLOAD_OUT", "offload_bench.json");
    const int64_t new_tokens = env_int("FLASHKIT_OFFLOAD_NEW", 64), prefill_tokens = env_int("FLASHKIT_OFFLOAD_PREFILL", 2048);
    const int64_t cpu_new = env_int("FLASHKIT_OFFLOAD_CPU_NEW", 16);
    nlohmann::json j;
    j["config"] = config;
    const size_t copy_bytes = size_t(256) << 20;
    const double pinned = h2d_gbps(copy_bytes, true), pageable = h2d_gbps(copy_bytes, false);
    j["h2d_pinned_gbps"] = pinned;
    j["h2d_pageable_gbps"] = pageable;
    std::printf("RESULT h2d pinned %.1f GB/s, pageable %.1f GB/s (256 MiB copies)\n", pinned, pageable);

    flashkit::LoadOptions base;
    base.device = "cuda";
    base.dtype = "bf16";
    base.random_weights = true;
    base.max_context = std::max<int64_t>(4096, prefill_tokens + 8);
    base.prefill_chunk = prefill_tokens;
    base.check_weights = false;
    std::vector<int32_t> ref_tokens;
    double resident_step_s = 0, layer_bytes = 0;
    int64_t layers = 0;
    nlohmann::json runs = nlohmann::json::array();
    for (int pct : {0, 25, 50, 75, 100}) {
      flashkit::LoadOptions o = base;
      std::shared_ptr<flashkit::Model> probe;
      if (layers == 0) {
        probe = flashkit::Model::load(config, o);
        layers = probe->info().num_layers;
      }
      o.offload_layers = (layers * pct + 50) / 100;
      auto m = o.offload_layers == 0 && probe ? probe : flashkit::Model::load(config, o);
      probe.reset();
      const Decode d = decode(*m, 128, new_tokens, 2);
      const double pf = prefill(*m, prefill_tokens, 2);
      const flashkit::ModelInfo& mi = m->info();
      if (o.offload_layers == 0) {
        ref_tokens = d.tokens;
        resident_step_s = 1.0 / std::max(d.tok_s, 1e-9);
      } else if (layer_bytes == 0) {
        layer_bytes = double(mi.host_pinned_bytes) / double(mi.offloaded_layers);
      }
      const double streamed = double(mi.host_pinned_bytes);  // bytes copied per pass (>= 2 slots' worth refilled)
      const double floor_ms = streamed / (pinned * 1e9) * 1e3;
      nlohmann::json r = {{"offload_percent", pct},
                          {"offloaded_layers", mi.offloaded_layers},
                          {"layers", layers},
                          {"host_pinned_bytes", mi.host_pinned_bytes},
                          {"device_weight_bytes", mi.device_weight_bytes},
                          {"decode_tok_s", d.tok_s},
                          {"prefill_tok_s", pf},
                          {"stream_floor_ms_per_pass", floor_ms},
                          {"decode_roofline_tok_s", streamed > 0 ? 1e3 / floor_ms : 0.0},
                          {"prefill_roofline_tok_s", streamed > 0 ? double(prefill_tokens) * 1e3 / floor_ms : 0.0},
                          {"tokens_match_resident", d.tokens == ref_tokens}};
      runs.push_back(r);
      std::printf("RESULT offload %3d%% (%2lld/%lld layers, %.2f GB pinned): decode %8.1f tok/s (stream floor %6.2f ms "
                  "= %7.1f tok/s) | prefill %8.0f tok/s | device weights %.2f GB | tokens %s\n",
                  pct, (long long)mi.offloaded_layers, (long long)layers, double(mi.host_pinned_bytes) / 1e9, d.tok_s,
                  floor_ms, streamed > 0 ? 1e3 / floor_ms : 0.0, pf, double(mi.device_weight_bytes) / 1e9,
                  d.tokens == ref_tokens ? "match" : "DIFFER");
      std::fflush(stdout);
    }
    j["runs"] = runs;

    flashkit::LoadOptions c = base;
    c.device = "cpu";
    c.prefill_chunk = 512;
    auto cpu = flashkit::Model::load(config, c);
    const Decode cd = decode(*cpu, 32, cpu_new, 1);
    j["cpu_backend"] = cpu->info().backend;
    j["cpu_decode_tok_s"] = cd.tok_s;
    // Offloaded GPU step time modelled as resident step + f * L * layer_bytes / bandwidth; where it reaches the CPU's.
    double crossover = -1;
    if (cd.tok_s > 0 && layer_bytes > 0) {
      const double t_cpu = 1.0 / cd.tok_s, all_bytes = layer_bytes * double(layers);
      crossover = (t_cpu - resident_step_s) * pinned * 1e9 / all_bytes;
    }
    j["crossover_offload_fraction"] = crossover;
    std::printf("RESULT cpu backend (%s): decode %.1f tok/s; modelled crossover at %.0f%% offloaded%s\n",
                cpu->info().backend.c_str(), cd.tok_s, crossover * 100,
                crossover > 1 ? " (beyond 100%: the offloaded GPU decodes faster than the CPU at every fraction)" : "");
    std::ofstream(out) << j.dump(1) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashkit_offload_bench: %s\n", e.what());
    return 1;
  }
}
