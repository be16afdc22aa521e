// The decode family's split combine in isolation (issue 13's batch-1 regression: ncu put +0.43 us per call on the
// combine kernel after the decode family refactor, the decode kernel unchanged). Variants of the one kernel on the
// batch-1 shape (32 rows = 32/8 heads, S splits, d128), each checked against a host f64 merge and timed in a CUDA graph
// of back-to-back PDL launches (5 interleaved rounds of 20 replays x 200 launches; median per launch).
//   nvcc -O3 -arch=sm_90a -std=c++20 dev/cuda/combine_variants.cu -o /tmp/cv && /tmp/cv [S=16]
// (Do not run it under ncu: it would profile every graph node.)
// Measured (H200, 2026-12-01, us per launch, S = 16 / 64): before 2.03 / 3.29, after 2.16 / 3.10, after_ld 1.89 /
// 3.09, after_reg 2.09 / 3.04. The library's combine now uses plain loads (after_ld); see attention-cuda.md v11.
// Variants:
//   0 before: the pre-refactor kernel (two passes over the lse partials from global memory, early exit after pass 1)
//   1 after:  the refactor's kernel (merge.cuh split_weights: lse through shared memory, __ldcg, one more barrier)
//   2 after, plain loads instead of __ldcg
//   3 after, pass 1 keeps x in a register (one split per thread when S <= 256), no shared round trip
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                 \
  do {                                                                        \
    cudaError_t e_ = (x);                                                     \
    if (e_ != cudaSuccess) {                                                  \
      std::printf("%s: %s\n", #x, cudaGetErrorString(e_));                    \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

constexpr int kMaxSplits = 256, kCols = 64, kThreads = 256;
struct P {
  const float* lse_part;
  const float* o_part;
  __nv_bfloat16* o;
  float* lse;
  long num_rows;
  int S, hd, dpad;
};

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

template <int V>
__global__ void __launch_bounds__(kThreads) combine(const P p) {
  __shared__ float wsh[kMaxSplits];
  __shared__ float red[8][kCols];
  __shared__ float stat[8];
  const int tid = threadIdx.x, wid = tid >> 5, lane = tid & 31;
  const long ridx = blockIdx.x;
  const int c0 = int(blockIdx.y) * kCols;
  const int S = p.S, hd = p.hd;
  pdl_wait();
  pdl_trigger();
  float m = -INFINITY, wsum = 0.f;
  if (V == 0) {
    for (int s = tid; s < S; s += kThreads) m = fmaxf(m, p.lse_part[long(s) * p.num_rows + ridx]);
    for (int w = 16; w > 0; w >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, w));
    if (lane == 0) stat[wid] = m;
    __syncthreads();
    m = stat[0];
    for (int w = 1; w < 8; ++w) m = fmaxf(m, stat[w]);
    if (m == -INFINITY) {
      if (tid < kCols && c0 + tid < hd) p.o[ridx * hd + c0 + tid] = __float2bfloat16(0.f);
      if (blockIdx.y == 0 && tid == 0) p.lse[ridx] = -INFINITY;
      return;
    }
    __syncthreads();
    float ws = 0.f;
    for (int s = tid; s < S; s += kThreads) {
      const float w = __expf(p.lse_part[long(s) * p.num_rows + ridx] - m);
      wsh[s] = w;
      ws += w;
    }
    for (int w = 16; w > 0; w >>= 1) ws += __shfl_xor_sync(0xffffffffu, ws, w);
    if (lane == 0) stat[wid] = ws;
    __syncthreads();
    for (int w = 0; w < 8; ++w) wsum += stat[w];
  } else {
    const float* lse = p.lse_part + ridx;
    float xr = -INFINITY;
    for (int s = tid; s < S; s += kThreads) {
      const float x = V == 2 ? lse[long(s) * p.num_rows] : __ldcg(lse + long(s) * p.num_rows);
      if (V == 3) xr = x; else wsh[s] = x;
      m = fmaxf(m, x);
    }
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) stat[wid] = m;
    __syncthreads();
    m = stat[0];
    for (int i = 1; i < 8; ++i) m = fmaxf(m, stat[i]);
    __syncthreads();
    float sum = 0.f;
    for (int s = tid; s < S; s += kThreads) {
      const float x = V == 3 ? xr : wsh[s];
      const float e = m == -INFINITY ? (isnan(x) ? x : 0.f) : __expf(x - m);
      wsh[s] = e;
      sum += e;
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) stat[wid] = sum;
    __syncthreads();
    for (int i = 0; i < 8; ++i) wsum += stat[i];
    __syncthreads();
    if (m == -INFINITY && wsum == 0.f) {
      if (tid < kCols && c0 + tid < hd) p.o[ridx * hd + c0 + tid] = __float2bfloat16(0.f);
      if (blockIdx.y == 0 && tid == 0) p.lse[ridx] = -INFINITY;
      return;
    }
  }
  const int col = c0 + 2 * lane;
  float2 acc = make_float2(0.f, 0.f);
  const float* part = p.o_part + ridx * p.dpad + col;
  const long sstride = p.num_rows * long(p.dpad);
  if (col < hd) {
#pragma unroll 16
    for (int s = wid; s < S; s += 8) {
      const float w = wsh[s];
      const float2 x = *reinterpret_cast<const float2*>(part + s * sstride);
      acc.x += w * x.x;
      acc.y += w * x.y;
    }
  }
  red[wid][2 * lane] = acc.x;
  red[wid][2 * lane + 1] = acc.y;
  __syncthreads();
  if (tid < kCols && c0 + tid < hd) {
    float v = 0.f;
    for (int w = 0; w < 8; ++w) v += red[w][tid];
    p.o[ridx * hd + c0 + tid] = __float2bfloat16(v / wsum);
  }
  if (blockIdx.y == 0 && tid == 0) p.lse[ridx] = m + __logf(wsum);
}

using Kern = void (*)(const P);
static void launch(Kern k, const P& p, cudaStream_t st, bool pdl) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(p.num_rows), unsigned((p.hd + kCols - 1) / kCols));
  cfg.blockDim = dim3(kThreads);
  cfg.stream = st;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, k, p));
}

int main(int argc, char** argv) {
  const long rows = 32;
  const int S = argc > 1 ? std::atoi(argv[1]) : 16, hd = 128, dpad = 128;
  std::vector<float> lse(size_t(S) * rows), op(size_t(S) * rows * dpad);
  srand(1);
  for (auto& x : lse) x = 4.f * (rand() / float(RAND_MAX)) - 2.f;
  for (auto& x : op) x = 2.f * (rand() / float(RAND_MAX)) - 1.f;
  float *dl, *dop, *dlse;
  __nv_bfloat16* dout;
  CK(cudaMalloc(&dl, lse.size() * 4));
  CK(cudaMalloc(&dop, op.size() * 4));
  CK(cudaMalloc(&dlse, rows * 4));
  CK(cudaMalloc(&dout, rows * hd * 2));
  CK(cudaMemcpy(dl, lse.data(), lse.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dop, op.data(), op.size() * 4, cudaMemcpyHostToDevice));
  const P p{dl, dop, dout, dlse, rows, S, hd, dpad};
  Kern ks[] = {combine<0>, combine<1>, combine<2>, combine<3>};
  const char* names[] = {"before", "after", "after_ld", "after_reg"};
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  // f64 check of each variant
  for (int v = 0; v < 4; ++v) {
    CK(cudaMemset(dout, 0xff, rows * hd * 2));
    launch(ks[v], p, st, false);
    CK(cudaStreamSynchronize(st));
    std::vector<__nv_bfloat16> o(rows * hd);
    CK(cudaMemcpy(o.data(), dout, o.size() * 2, cudaMemcpyDeviceToHost));
    double err = 0;
    for (long r = 0; r < rows; ++r) {
      double m = -1e300, sum = 0;
      for (int s = 0; s < S; ++s) m = std::max(m, double(lse[s * rows + r]));
      for (int s = 0; s < S; ++s) sum += std::exp(lse[s * rows + r] - m);
      for (int c = 0; c < hd; ++c) {
        double acc = 0;
        for (int s = 0; s < S; ++s) acc += std::exp(lse[s * rows + r] - m) / sum * op[(s * rows + r) * dpad + c];
        err = std::max(err, std::fabs(acc - double(__bfloat162float(o[r * hd + c]))));
      }
    }
    std::printf("variant %d %-9s max abs err %.3g %s\n", v, names[v], err, err < 1e-2 ? "OK" : "FAILED");
  }
  // graph of 200 back-to-back launches (PDL on), 20 replays, median per launch; rounds interleaved
  const int N = 200, R = 20;
  std::vector<std::vector<float>> per(4);
  for (int round = 0; round < 5; ++round)
    for (int v = 0; v < 4; ++v) {
      cudaGraph_t g;
      cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
      for (int i = 0; i < N; ++i) launch(ks[v], p, st, true);
      CK(cudaStreamEndCapture(st, &g));
      CK(cudaGraphInstantiate(&ge, g, 0));
      cudaEvent_t a, b;
      CK(cudaEventCreate(&a));
      CK(cudaEventCreate(&b));
      CK(cudaGraphLaunch(ge, st));
      for (int r = 0; r < R; ++r) {
        CK(cudaEventRecord(a, st));
        CK(cudaGraphLaunch(ge, st));
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        per[v].push_back(ms * 1000.f / N);
      }
      CK(cudaGraphExecDestroy(ge));
      CK(cudaGraphDestroy(g));
    }
  for (int v = 0; v < 4; ++v) {
    std::sort(per[v].begin(), per[v].end());
    std::printf("variant %d %-9s graph, us per launch: median %.3f  min %.3f\n", v, names[v], per[v][per[v].size() / 2],
                per[v][0]);
  }
  return 0;
}
