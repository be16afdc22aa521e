// Kernel-level benchmark of the CUDA engine's decode kernels (asserts nothing about speed). tools/gpu/engine.sh
// kbench runs it on the GPU machine:
//   FLASHKIT_KBENCH_OUT=out.json build-gpu/bench/engine/flashkit_kernel_bench
// Every kernel is timed the way the engine runs it: many launches captured in one CUDA graph (PDL on), replayed,
// timed with CUDA events, median of the replays. GEMV weights rotate over enough copies that every launch reads
// HBM (> 2x the 60 MB L2), and cuBLAS's GEMV (cublasGemmEx, n = 1, bf16 in, f32 out) is timed beside it on the same
// weights. Shapes: the decode GEMVs of gemma-3-270m and Llama-3.2-1B with the prologue/epilogue fusions the engine
// uses, and the decode attention of both at several context lengths. Exit status: 0 done, 1 no CUDA device or an
// error (a failed CUDA call, allocation or output file).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/cuda/kernels.hpp"
#include "flashkit/runtime.hpp"

namespace kc = flashkit::engine::cuda;

namespace {

// A failed CUDA call ends the benchmark (main reports it): its numbers would be meaningless.
#define CK(x)                                                                                     \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) throw std::runtime_error(std::string(#x) + ": " + cudaGetErrorString(e_)); \
  } while (0)

struct DevMem {
  void* p = nullptr;
  explicit DevMem(size_t bytes) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) p = nullptr;
  }
  ~DevMem() {
    if (p) cudaFree(p);
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// Fills n floats (as f32, or as bf16 when bf16) with uniform values in [-a, a].
void fill(void* dst, size_t n, bool bf16, float a, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> d(-a, a);
  if (bf16) {
    std::vector<uint16_t> h(n);
    for (auto& x : h) {
      float f = d(g);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      x = uint16_t(u >> 16);
    }
    cudaMemcpy(dst, h.data(), n * 2, cudaMemcpyHostToDevice);
  } else {
    std::vector<float> h(n);
    for (auto& x : h) x = d(g);
    cudaMemcpy(dst, h.data(), n * 4, cudaMemcpyHostToDevice);
  }
}

// Median per-launch time (us) of `launches` calls of body(i) captured in one graph, over `reps` replays.
template <class F>
double time_graph(cudaStream_t st, int launches, int reps, F body) {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
  for (int i = 0; i < launches; ++i) body(i);
  if (cudaStreamEndCapture(st, &g) != cudaSuccess || cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) return -1;
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int w = 0; w < 3; ++w) cudaGraphLaunch(ge, st);
  std::vector<double> ts;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(a, st);
    cudaGraphLaunch(ge, st);
    cudaEventRecord(b, st);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    ts.push_back(ms * 1e3 / launches);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  if (cudaGetLastError() != cudaSuccess) return -1;
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

struct GemvCase {
  const char* model;
  const char* name;
  int64_t N, K;       // N output rows (gated: N gate rows + N up rows)
  bool gated;
  int fuse;           // 0: plain x; 1: x + d, norm, h_out (llama); 2: x + rmsnorm(d) * post_w, norm, h_out (gemma)
};

const GemvCase kGemv[] = {
    {"gemma-3-270m", "qkv", 1536, 640, false, 2},    {"gemma-3-270m", "o", 640, 1024, false, 0},
    {"gemma-3-270m", "gate_up", 2048, 640, true, 2}, {"gemma-3-270m", "down", 640, 2048, false, 0},
    {"gemma-3-270m", "lm_head", 262144, 640, false, 1}, {"llama-3.2-1b", "qkv", 3072, 2048, false, 1},
    {"llama-3.2-1b", "o", 2048, 2048, false, 0},     {"llama-3.2-1b", "gate_up", 8192, 2048, true, 1},
    {"llama-3.2-1b", "down", 2048, 8192, false, 0},  {"llama-3.2-1b", "lm_head", 128256, 2048, false, 1},
    // mamba-2.8b's layer GEMVs (docs/worklog/mamba-decode-cuda.md: ~2.3 TB/s in ncu, serialized and cold)
    {"mamba-2.8b", "in_proj", 10240, 2560, false, 1}, {"mamba-2.8b", "out_proj", 2560, 5120, false, 0},
};

std::string out_path() {
  const char* e = std::getenv("FLASHKIT_KBENCH_OUT");
  return e && *e ? e : "";
}

void run_benchmark() {
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cublasHandle_t cb;
  if (cublasCreate(&cb) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate failed");
  cublasSetStream(cb, st);
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  nlohmann::json out;
  out["device"] = prop.name;
  out["gemv"] = nlohmann::json::array();
  out["attention"] = nlohmann::json::array();

  // ---- GEMV
  DevMem counter(4), xf(8192 * 4), xb(8192 * 2), dv(8192 * 4), hv(8192 * 4), nw(8192 * 4), pw(8192 * 4),
      y(size_t(262144) * 4);
  CK(cudaMemset(counter.p, 0, 4));
  fill(xf.p, 8192, false, 1.0f, 1);
  fill(xb.p, 8192, true, 1.0f, 1);
  fill(dv.p, 8192, false, 1.0f, 2);
  fill(nw.p, 8192, false, 1.0f, 3);
  fill(pw.p, 8192, false, 1.0f, 4);
  const size_t kRotateBytes = size_t(512) << 20;  // weights rotated over >= 512 MB per graph
  for (const GemvCase& c : kGemv) {
    const int64_t rows = c.gated ? 2 * c.N : c.N;
    const size_t wbytes = size_t(rows * c.K) * 2;
    const int copies = int(std::clamp<size_t>((kRotateBytes + wbytes - 1) / wbytes, 1, 64));
    DevMem W(wbytes * copies);
    if (!W.p) throw std::runtime_error("cudaMalloc of " + std::to_string(wbytes * copies) + " bytes failed");
    fill(W.p, size_t(rows * c.K) * copies, true, 0.05f, 7);
    const int launches = std::max(copies, 8);
    auto launch = [&](int i) {
      kc::GemvIn in;
      in.x = hv.p, in.ldx = c.K;
      if (c.fuse) {
        in.d = dv.as<float>(), in.ldd = c.K;
        in.norm_w = nw.as<float>();
        in.h_out = hv.as<float>(), in.ldh = c.K;  // in place, as the residual stream
        if (c.fuse == 2) in.post_w = pw.as<float>();
      }
      kc::GemvOut o;
      o.y = y.p, o.ldy = c.N;
      if (c.gated) o.act = c.fuse == 2 ? kc::Act::gelu_tanh : kc::Act::silu;
      const uint16_t* w = reinterpret_cast<const uint16_t*>(W.as<char>() + wbytes * (i % copies));
      kc::gemv_bf16(in, w, c.N, c.K, 1, o, counter.as<unsigned>(), st);
    };
    fill(hv.p, size_t(c.K), false, 1.0f, 9);
    const double us = time_graph(st, launches, 20, launch);
    // cuBLAS on the same weights: y[N] = W[N, K] x  (column-major: W^T is K x N with ld K). Gated: one GEMV of 2N
    // rows (cuBLAS has no fused epilogue for it).
    const float alpha = 1.0f, beta = 0.0f;
    const double us_cublas = time_graph(st, launches, 20, [&](int i) {
      const void* w = W.as<char>() + wbytes * (i % copies);
      cublasGemmEx(cb, CUBLAS_OP_T, CUBLAS_OP_N, int(rows), 1, int(c.K), &alpha, w, CUDA_R_16BF, int(c.K), xb.p,
                   CUDA_R_16BF, int(c.K), &beta, y.p, CUDA_R_32F, int(rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    });
    const double gbs = us > 0 ? double(wbytes) / us / 1e3 : 0, gbs_cb = us_cublas > 0 ? double(wbytes) / us_cublas / 1e3 : 0;
    std::printf("[kbench] gemv %-13s %-8s N %6lld K %5lld %s%-7s %6.2f MB  flashkit %7.2f us %6.0f GB/s | cublas %7.2f us %6.0f GB/s\n",
                c.model, c.name, (long long)rows, (long long)c.K, c.gated ? "gated " : "", c.fuse ? "fused" : "plain",
                wbytes / 1e6, us, gbs, us_cublas, gbs_cb);
    out["gemv"].push_back({{"model", c.model}, {"op", c.name}, {"rows", rows}, {"K", c.K}, {"bytes", wbytes},
                           {"fused", c.fuse != 0}, {"us", us}, {"GBps", gbs}, {"cublas_us", us_cublas},
                           {"cublas_GBps", gbs_cb}});
  }

  // ---- decode attention (T = 1): q/k norm + RoPE + append + attention, as the engine calls it
  struct AttnCase {
    const char* model;
    int heads, kv_heads, D;
    int64_t capacity;
    bool ring;
    int64_t pos;  // position of the new token (keys visible: min(pos + 1, capacity))
    bool cache_bf16;
  };
  const AttnCase attn[] = {
      {"gemma-3-270m", 4, 1, 256, 512, true, 127, false},    {"gemma-3-270m", 4, 1, 256, 512, true, 2000, false},
      {"gemma-3-270m", 4, 1, 256, 512, true, 2000, true},    {"gemma-3-270m", 4, 1, 256, 8192, false, 383, false},
      {"gemma-3-270m", 4, 1, 256, 32768, false, 32000, true}, {"llama-3.2-1b", 32, 8, 64, 8192, false, 383, false},
      {"llama-3.2-1b", 32, 8, 64, 8192, false, 4000, false}, {"llama-3.2-1b", 32, 8, 64, 8192, false, 4000, true},
      {"llama-3.2-1b", 32, 8, 64, 32768, false, 32000, true},
  };
  for (const AttnCase& c : attn) {
    const int64_t kvd = int64_t(c.kv_heads) * c.D, es = c.cache_bf16 ? 2 : 4;
    DevMem kc_(size_t(c.capacity * kvd * es)), vc_(size_t(c.capacity * kvd * es)), q(size_t(c.heads) * c.D * 4),
        k(size_t(kvd) * 4), v(size_t(kvd) * 4), o(size_t(c.heads) * c.D * 4), qn(size_t(c.D) * 4), kn(size_t(c.D) * 4),
        inv(size_t(c.D / 2) * 4), pos(4), cnt(size_t(c.heads) * 4);
    fill(kc_.p, size_t(c.capacity * kvd), c.cache_bf16, 1.0f, 11);
    fill(vc_.p, size_t(c.capacity * kvd), c.cache_bf16, 1.0f, 12);
    fill(q.p, size_t(c.heads) * c.D, false, 1.0f, 13);
    fill(k.p, size_t(kvd), false, 1.0f, 14);
    fill(v.p, size_t(kvd), false, 1.0f, 15);
    fill(qn.p, size_t(c.D), false, 1.0f, 16);
    fill(kn.p, size_t(c.D), false, 1.0f, 17);
    fill(inv.p, size_t(c.D / 2), false, 0.01f, 18);
    const int32_t p32 = int32_t(c.pos);
    CK(cudaMemcpy(pos.p, &p32, 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(cnt.p, 0, size_t(c.heads) * 4));
    const int splits = kc::decode_attention_splits(c.heads, c.capacity);
    DevMem part(size_t(kc::decode_attention_part_floats(c.heads, c.D, splits)) * 4);
    kc::DecodeAttnArgs a;
    a.q = q.p, a.k = k.p, a.v = v.p, a.q_norm_w = qn.as<float>(), a.k_norm_w = kn.as<float>(), a.inv_freq = inv.as<float>();
    a.k_cache = kc_.p, a.v_cache = vc_.p, a.cache_bf16 = c.cache_bf16, a.capacity = c.capacity, a.ring = c.ring;
    a.window = c.ring ? c.capacity : 0, a.pos0 = pos.as<int32_t>(), a.scale = 0.0625f, a.out = o.p;
    a.heads = c.heads, a.kv_heads = c.kv_heads, a.head_dim = c.D, a.splits = splits, a.part = part.as<float>();
    a.counters = cnt.as<unsigned>();
    const double us = time_graph(st, 64, 20, [&](int) { kc::decode_attention(a, st); });
    const int64_t keys = std::min<int64_t>(c.pos + 1, c.capacity);
    const double bytes = double(keys) * kvd * es * 2;
    std::printf("[kbench] attn %-13s h %2d/%d d %3d keys %6lld cache %s splits %2d  %7.2f us  %6.0f GB/s (K+V)\n", c.model,
                c.heads, c.kv_heads, c.D, (long long)keys, c.cache_bf16 ? "bf16" : "f32 ", splits, us,
                us > 0 ? bytes / us / 1e3 : 0.0);
    out["attention"].push_back({{"model", c.model}, {"heads", c.heads}, {"kv_heads", c.kv_heads}, {"head_dim", c.D},
                                {"keys", keys}, {"cache_bf16", c.cache_bf16}, {"splits", splits}, {"us", us},
                                {"GBps", us > 0 ? bytes / us / 1e3 : 0.0}});
  }
  cublasDestroy(cb);
  cudaStreamDestroy(st);
  if (!out_path().empty()) {
    std::ofstream f(out_path());
    f << out.dump(1) << "\n";
    if (!f) throw std::runtime_error("cannot write FLASHKIT_KBENCH_OUT=" + out_path());
  }
}

}  // namespace

int main() {
  if (flashkit::cuda_device_count() <= 0) {
    std::fprintf(stderr, "flashkit_kernel_bench: no CUDA device\n");
    return 1;
  }
  try {
    run_benchmark();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashkit_kernel_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
