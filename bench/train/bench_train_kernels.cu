// Microbenchmark of the CUDA training kernels (src/train/cuda) at a GPT-2-small training shape: T = 8192 tokens,
// C = 768, 12 heads of 64, F = 3072, V = 50304 (padded GPT-2 vocabulary), a 1024-row cross-entropy chunk, 124.5M
// parameters for the optimizer. Each kernel: 5 warm-up calls, then 50 calls timed one by one with CUDA events; the
// median is reported with the bytes of its floor (docs/worklog/training-cuda.md) as GB/s and as a share of the
// H200's 4.24 TB/s (4.8 TB/s nominal; 4.24 measured by the project's roofline). Matmuls report TFLOP/s against
// 989 (dense bf16). Usage: bench_train_kernels [results.jsonl]
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "train/cuda/kernels.hpp"

namespace tc = flashkit::train::cuda;
using tc::bf16;

namespace {

constexpr double kPeakBytesPerSec = 4.24e12;
constexpr double kPeakFlops = 989e12;

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

__global__ void fill_bf16(bf16* p, int64_t n, uint32_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    p[i] = __float2bfloat16(lo + (hi - lo) * float(h & 0xffffff) / 16777216.0f);
  }
}
__global__ void fill_f32(float* p, int64_t n, uint32_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    p[i] = lo + (hi - lo) * float(h & 0xffffff) / 16777216.0f;
  }
}

template <typename T>
T* dalloc(size_t n) {
  void* p = nullptr;
  ck(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc");
  return static_cast<T*>(p);
}
bf16* rand_bf16(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  bf16* p = dalloc<bf16>(n);
  fill_bf16<<<1024, 256>>>(p, int64_t(n), seed, lo, hi);
  return p;
}
float* rand_f32(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  float* p = dalloc<float>(n);
  fill_f32<<<1024, 256>>>(p, int64_t(n), seed, lo, hi);
  return p;
}

struct Bench {
  cudaStream_t stream = nullptr;
  FILE* json = nullptr;
  cudaEvent_t e0, e1;
  Bench() {
    ck(cudaStreamCreate(&stream), "cudaStreamCreate");
    ck(cudaEventCreate(&e0), "cudaEventCreate");
    ck(cudaEventCreate(&e1), "cudaEventCreate");
  }
  double median_us(const std::function<void()>& f) {
    for (int i = 0; i < 5; ++i) f();
    ck(cudaStreamSynchronize(stream), "warm-up");
    std::vector<float> ms(50);
    for (auto& m : ms) {
      ck(cudaEventRecord(e0, stream), "cudaEventRecord");
      f();
      ck(cudaEventRecord(e1, stream), "cudaEventRecord");
      ck(cudaEventSynchronize(e1), "cudaEventSynchronize");
      ck(cudaEventElapsedTime(&m, e0, e1), "cudaEventElapsedTime");
    }
    std::sort(ms.begin(), ms.end());
    return 0.5 * double(ms[24] + ms[25]) * 1e3;
  }
  // A memory-bound kernel: `bytes` is its floor.
  void mem(const char* name, const char* shape, double bytes, const std::function<void()>& f) {
    const double us = median_us(f), gbs = bytes / (us * 1e-6) / 1e9;
    std::printf("%-28s %-26s %9.1f us %8.1f MB %8.0f GB/s %5.1f%%\n", name, shape, us, bytes / 1e6, gbs,
                100.0 * gbs * 1e9 / kPeakBytesPerSec);
    if (json)
      std::fprintf(json, "{\"kernel\":\"%s\",\"shape\":\"%s\",\"us\":%.2f,\"bytes\":%.0f,\"gbps\":%.1f,\"pct_peak\":%.2f}\n",
                   name, shape, us, bytes, gbs, 100.0 * gbs * 1e9 / kPeakBytesPerSec);
  }
  void flops(const char* name, const char* shape, double fl, const std::function<void()>& f) {
    const double us = median_us(f), tf = fl / (us * 1e-6) / 1e12;
    std::printf("%-28s %-26s %9.1f us %8.2f TFLOP/s %5.1f%%\n", name, shape, us, tf, 100.0 * tf * 1e12 / kPeakFlops);
    if (json)
      std::fprintf(json, "{\"kernel\":\"%s\",\"shape\":\"%s\",\"us\":%.2f,\"flops\":%.0f,\"tflops\":%.2f,\"pct_peak\":%.2f}\n",
                   name, shape, us, fl, tf, 100.0 * tf * 1e12 / kPeakFlops);
  }
};

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  Bench b;
  if (argc > 1 && !(b.json = std::fopen(argv[1], "w"))) {
    std::fprintf(stderr, "cannot write %s\n", argv[1]);
    return 1;
  }
  std::printf("%s: median of 50 after 5 warm-up calls; GB/s against %.2f TB/s, TFLOP/s against %.0f\n", prop.name,
              kPeakBytesPerSec / 1e12, kPeakFlops / 1e12);
  const int64_t T = 8192, C = 768, H = 12, D = 64, F = 3072, V = 50304, R = 1024, NP = 124475904;
  const double TC = double(T) * double(C), TF = double(T) * double(F);
  cudaStream_t s = b.stream;

  // Token ids (random over the vocabulary) and positions (8 sequences of 1024).
  std::vector<int32_t> hid(static_cast<size_t>(T)), hpos(static_cast<size_t>(T));
  std::mt19937 g(1);
  for (int64_t t = 0; t < T; ++t) hid[size_t(t)] = int32_t(g() % uint32_t(V)), hpos[size_t(t)] = int32_t(t % 1024);
  const double unique_ids = double(std::set<int32_t>(hid.begin(), hid.end()).size());
  int32_t* ids = dalloc<int32_t>(size_t(T));
  int32_t* pos = dalloc<int32_t>(size_t(T));
  ck(cudaMemcpy(ids, hid.data(), size_t(T) * 4, cudaMemcpyHostToDevice), "ids");
  ck(cudaMemcpy(pos, hpos.data(), size_t(T) * 4, cudaMemcpyHostToDevice), "positions");
  std::vector<float> hinv(size_t(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) hinv[size_t(i)] = float(1.0 / std::pow(10000.0, double(2 * i) / double(D)));
  float* inv = dalloc<float>(size_t(D / 2));
  ck(cudaMemcpy(inv, hinv.data(), hinv.size() * 4, cudaMemcpyHostToDevice), "inv_freq");

  bf16* table = rand_bf16(size_t(V * C), 1);
  float* dtable = rand_f32(size_t(V * C), 2);
  bf16* x = rand_bf16(size_t(T * C), 3, -2.0f, 2.0f);
  bf16* y = rand_bf16(size_t(T * C), 4);
  bf16* dy = rand_bf16(size_t(T * C), 5);
  bf16* dx = rand_bf16(size_t(T * C), 6);
  float* w = rand_f32(size_t(C), 7, 0.5f, 1.5f);
  float* dw = rand_f32(size_t(C), 8);
  float* rstd = dalloc<float>(size_t(T));
  bf16* gu = rand_bf16(size_t(T * 2 * F), 9, -3.0f, 3.0f);
  bf16* hact = rand_bf16(size_t(T * F), 10);
  bf16* dgu = rand_bf16(size_t(T * 2 * F), 11);
  float* logits = rand_f32(size_t(R * V), 12, -8.0f, 8.0f);
  bf16* dlogits = dalloc<bf16>(size_t(R * V));
  float* loss = dalloc<float>(size_t(R));
  std::vector<int32_t> htgt(hid.begin(), hid.begin() + R);
  int32_t* tgt = dalloc<int32_t>(size_t(R));
  ck(cudaMemcpy(tgt, htgt.data(), size_t(R) * 4, cudaMemcpyHostToDevice), "targets");
  ck(cudaDeviceSynchronize(), "init");

  char shape[64];
  std::snprintf(shape, sizeof shape, "T=%lld C=%lld", (long long)T, (long long)C);
  b.mem("embedding_fwd", shape, TC * 4 + T * 4.0, [&] { tc::embedding_fwd(ids, table, y, T, V, C, 1.0f, s); });
  const size_t ws_bytes = tc::embedding_bwd_workspace_bytes(T, V);
  void* ws = dalloc<uint8_t>(ws_bytes);
  b.mem("embedding_bwd", shape, TC * 2 + unique_ids * double(C) * 8,
        [&] { tc::embedding_bwd(ids, dy, dtable, T, V, C, 1.0f, ws, ws_bytes, s); });
  b.mem("rmsnorm_fwd", shape, TC * 4 + T * 4.0,
        [&] { tc::rmsnorm_fwd(x, C, w, y, C, rstd, T, 1, C, 1e-5f, false, s); });
  float* scratch = dalloc<float>(size_t(tc::rmsnorm_bwd_scratch_floats(T, 1, C)));
  b.mem("rmsnorm_bwd", shape, TC * 6 + T * 4.0,
        [&] { tc::rmsnorm_bwd(dy, C, x, C, w, rstd, dx, C, false, dw, scratch, T, 1, C, false, s); });
  b.mem("rmsnorm_bwd (dx +=)", shape, TC * 8 + T * 4.0,
        [&] { tc::rmsnorm_bwd(dy, C, x, C, w, rstd, dx, C, true, dw, scratch, T, 1, C, false, s); });
  std::snprintf(shape, sizeof shape, "T=%lld H=%lld D=%lld", (long long)T, (long long)H, (long long)D);
  b.mem("rope_fwd (in place)", shape, TC * 4, [&] { tc::rope_fwd(x, C, x, C, pos, 0, inv, T, H, D, s); });
  b.mem("rope_bwd", shape, TC * 4, [&] { tc::rope_bwd(dy, C, dx, C, pos, 0, inv, T, H, D, s); });
  bf16* cos_t = rand_bf16(size_t(1024 * D / 2), 40);
  bf16* sin_t = rand_bf16(size_t(1024 * D / 2), 41);
  b.mem("rope_fwd_table bf16 seq 1024", shape, TC * 4,
        [&] { tc::rope_fwd_table(x, C, x, C, nullptr, 1024, cos_t, sin_t, 1024, T, H, D, s); });
  std::snprintf(shape, sizeof shape, "T=%lld F=%lld", (long long)T, (long long)F);
  b.mem("gated_act_fwd silu", shape, TF * 6, [&] { tc::gated_act_fwd(gu, hact, T, F, tc::Act::silu, s); });
  b.mem("gated_act_fwd gelu_tanh", shape, TF * 6, [&] { tc::gated_act_fwd(gu, hact, T, F, tc::Act::gelu_tanh, s); });
  b.mem("gated_act_bwd silu", shape, TF * 10, [&] { tc::gated_act_bwd(hact, gu, dgu, T, F, tc::Act::silu, s); });
  b.mem("gated_act_bwd gelu_tanh", shape, TF * 10,
        [&] { tc::gated_act_bwd(hact, gu, dgu, T, F, tc::Act::gelu_tanh, s); });
  std::snprintf(shape, sizeof shape, "R=%lld V=%lld", (long long)R, (long long)V);
  const double RV = double(R) * double(V);
  // In place: each call turns the logits into small gradients, which the next call takes as logits (same work).
  b.mem("cross_entropy", shape, RV * 8, [&] { tc::cross_entropy_chunk_fwd_bwd(logits, V, tgt, loss, nullptr, R, V, 1.0f / T, 0.0f, s); });
  b.mem("cross_entropy +bf16 copy", shape, RV * 10,
        [&] { tc::cross_entropy_chunk_fwd_bwd(logits, V, tgt, loss, dlogits, R, V, 1.0f / T, 0.0f, s); });
  b.mem("cross_entropy softcap 30", shape, RV * 10,
        [&] { tc::cross_entropy_chunk_fwd_bwd(logits, V, tgt, loss, dlogits, R, V, 1.0f / T, 30.0f, s); });

  {  // optimizer and whole-arena ops over 124.5M parameters
    float* p = rand_f32(size_t(NP), 20, -0.1f, 0.1f);
    float* gr = rand_f32(size_t(NP), 21, -1e-3f, 1e-3f);
    float* m = rand_f32(size_t(NP), 22, -1e-4f, 1e-4f);
    float* v = rand_f32(size_t(NP), 23, 0.0f, 1e-6f);
    bf16* pb = dalloc<bf16>(size_t(NP));
    float* red = dalloc<float>(size_t(tc::reduce_scratch_floats()) + 1);
    ck(cudaDeviceSynchronize(), "init");
    const double n = double(NP);
    std::snprintf(shape, sizeof shape, "n=%lld", (long long)NP);
    int64_t step = 1;
    b.mem("adamw_step +bf16 copy", shape, n * 30, [&] {
      tc::adamw_step(p, gr, m, v, pb, NP, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, step++, 1.0f, s);
    });
    b.mem("adamw_step", shape, n * 28, [&] {
      tc::adamw_step(p, gr, m, v, nullptr, NP, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, step++, 1.0f, s);
    });
    b.mem("global_norm_sq", shape, n * 4, [&] { tc::global_norm_sq(gr, NP, red + tc::reduce_scratch_floats(), false, red, s); });
    b.mem("count_nonfinite", shape, n * 4, [&] { tc::count_nonfinite(gr, NP, red + tc::reduce_scratch_floats(), false, red, s); });
    b.mem("scale_inplace f32", shape, n * 8, [&] { tc::scale_inplace(gr, NP, 1.0f, s); });
    b.mem("cast_f32_to_bf16", shape, n * 6, [&] { tc::cast_f32_to_bf16(p, pb, NP, s); });
    b.mem("cast_bf16_to_f32", shape, n * 6, [&] { tc::cast_bf16_to_f32(pb, gr, NP, s); });
    b.mem("add_inplace f32", shape, n * 12, [&] { tc::add_inplace(m, v, NP, s); });
    std::snprintf(shape, sizeof shape, "n=T*C=%lld", (long long)(T * C));
    b.mem("add_inplace bf16", shape, TC * 6, [&] { tc::add_inplace(dx, dy, T * C, s); });
    cudaFree(p), cudaFree(gr), cudaFree(m), cudaFree(v), cudaFree(pb), cudaFree(red);
  }

  {  // cuBLAS: the linear layers of one block and an lm_head chunk
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "cublasCreate failed\n");
      return 1;
    }
    bf16* Wqkv = rand_bf16(size_t(3 * C * C), 30, -0.05f, 0.05f);
    bf16* Wfc = rand_bf16(size_t(2 * F * C), 31, -0.05f, 0.05f);
    bf16* Wlm = table;  // tied: [V, C]
    bf16* out = dalloc<bf16>(size_t(T * 2 * F));
    float* outf = dalloc<float>(size_t(R * V));
    float* dWfc = rand_f32(size_t(2 * F * C), 32);
    ck(cudaDeviceSynchronize(), "init");
    auto fl = [](int64_t m, int64_t n, int64_t k) { return 2.0 * double(m) * double(n) * double(k); };
    std::snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)T, (long long)(3 * C), (long long)C);
    b.flops("linear_fwd qkv", shape, fl(T, 3 * C, C), [&] { tc::linear_fwd(h, x, Wqkv, out, false, T, 3 * C, C, s); });
    std::snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)T, (long long)(2 * F), (long long)C);
    b.flops("linear_fwd gate_up", shape, fl(T, 2 * F, C), [&] { tc::linear_fwd(h, x, Wfc, out, false, T, 2 * F, C, s); });
    b.flops("linear_bwd_dx gate_up", shape, fl(T, 2 * F, C), [&] { tc::linear_bwd_dx(h, dgu, Wfc, dx, false, T, 2 * F, C, s); });
    b.flops("linear_bwd_dw gate_up", shape, fl(T, 2 * F, C), [&] { tc::linear_bwd_dw(h, dgu, x, dWfc, T, 2 * F, C, s); });
    std::snprintf(shape, sizeof shape, "%lldx%lldx%lld f32", (long long)R, (long long)V, (long long)C);
    b.flops("linear_fwd lm_head chunk", shape, fl(R, V, C), [&] { tc::linear_fwd(h, x, Wlm, outf, true, R, V, C, s); });
    cublasDestroy(h);
  }
  ck(cudaDeviceSynchronize(), "benchmark");
  if (b.json) std::fclose(b.json);
  return 0;
}
