// Retired from src/kernels/cuda/ssm/scan_v4_cpt.cu (not built): generation 12 of the scan forward
// (v4_npt4_lean_cpt2, two channels per thread). H200 run s13-4 (batch 8, d_inner 1536, d_state 16): 0.69x generation
// 11 at 1k-8k tokens, 24.4-25.0% of the copy ceiling against 34.9-36.3%: half the warps cost more than two chains per
// warp gain. docs/worklog/ssm-scan.md "generation 12" discusses it. Kept as the record of the attempt; it needs
// scan_v4_block.cuh's CPT parameter (still there), launch_scan_v4_cpt2's declaration in ssm_cuda.hpp and its
// ScanKernel entry (v4_npt4_lean_cpt2).
// Generation 12 of the scan forward (d_state <= 16; docs/worklog/ssm-scan.md "generation 12"): the lean v4 block
// (generation 11, scan_v4_block.cuh's LEAN) with CPT channels per thread in the recurrence. Generation 11 runs at
// ~36% of the copy ceiling with ~11 warps per SM, each a dependent chain per time step (shared loads -> ex2 -> h FMA
// -> C.h FMAs -> partial store) that 2-3 warps per scheduler cannot hide. The work per SM is fixed (batch x d_inner x
// d_state recurrences), so warps cannot grow; the independent chains per warp can: a thread here carries CPT
// adjacent channels x NPT states, their per-step code interleaved in one basic block, so the scheduler finds a
// second independent instruction in the same warp where generation 11 had to switch warps. What the pair shares:
// the step's {B, C} loads (one float4 each serves both channels), its {dt, dt u} of both channels in one 16-byte
// load, one 8-byte partial store, and per chunk the barriers, the cp.async wait and the loop. Everything else (ring,
// ownership of (step, 4-channel group) items, copies, prologue, epilogue) is generation 11's; with CPT = 2 a block
// of 32 channels has 64 threads and each thread owns two items (steps tt and tt + 8 of its group).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "core/cuda_check.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/cuda/ssm/scan_v4_block.cuh"
#include "kernels/cuda/ssm/ssm_cuda.hpp"

namespace flashkit::kernels {
namespace {

using namespace scan_v4_detail;

constexpr int kTC = 16, kStages = 4;

template <int CPT> struct TermVec;  // a step's {dt, dt u} of the thread's CPT adjacent channels
template <> struct TermVec<1> { using T = float2; };
template <> struct TermVec<2> { using T = float4; };
template <int CPT> struct PartialVec;  // the step's C.h partials of the thread's channels
template <> struct PartialVec<1> { using T = float; };
template <> struct PartialVec<2> { using T = float2; };

// 4 blocks per SM: the dynamic shared memory (47 KB at NPT 4) allows no more, so registers up to 255 cost nothing.
template <int NPT, int CPT>
__global__ void __launch_bounds__(V4<NPT, kTC, kStages, CPT>::kThreads, 4) scan_v4_cpt_kernel(ScanArgs a, bool vec) {
  using P = V4<NPT, kTC, kStages, CPT>;
  constexpr int TC = kTC, STAGES = kStages, SPLIT = P::SPLIT, T = P::kThreads;
  static_assert(P::kItems % T == 0, "every thread owns the same number of items");
  extern __shared__ float4 smem4[];  // float4: 16-byte aligned
  float* smem = reinterpret_cast<float*>(smem4);
  float2* sTerm = reinterpret_cast<float2*>(smem + STAGES * P::kStageFloats);  // [TC][32] {dt, dt u}
  float* sY = smem + STAGES * P::kStageFloats + 2 * TC * kCh;                    // [TC][SPLIT][kYRow]
  const int64_t b = blockIdx.y, c0 = int64_t(blockIdx.x) * kCh;
  const int tid = threadIdx.x, N = int(a.d_state);
  // The recurrence: channels c0 + CPT p .. + CPT - 1, states s NPT .. s NPT + NPT - 1.
  const int p = tid / SPLIT, s = tid % SPLIT;
  float A2[CPT][NPT], h[CPT][NPT];
#pragma unroll
  for (int k = 0; k < CPT; ++k)
#pragma unroll
    for (int i = 0; i < NPT; ++i) {
      const int64_t c = c0 + CPT * p + k;
      const int n = s * NPT + i;
      const bool on = c < a.d_inner && n < N;
      A2[k][i] = on ? a.A[c * N + n] * kLog2e : 0.f;
      h[k][i] = on && a.state ? a.state[(b * a.d_inner + c) * N + n] : 0.f;
    }
  // The items: every item of this thread is in 4-channel group q (T is a multiple of the 8 groups).
  const int q = tid % kGroups;
  float bias[4], Dc[4];
  bool dt_chan[4];  // channel c0 + 4 q + kk inside d_inner (dt past it is 0)
  const int64_t cq = c0 + 4 * q, ch_left = a.d_inner - cq;
  const int y_live = int(ch_left < 0 ? 0 : ch_left > 4 ? 4 : ch_left);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    dt_chan[kk] = kk < y_live;
    bias[kk] = dt_chan[kk] && a.delta_bias ? a.delta_bias[cq + kk] : 0.f;
    Dc[kk] = dt_chan[kk] && a.D ? a.D[cq + kk] : 0.f;
  }
  const int64_t chunks = (a.seqlen + TC - 1) / TC;
  ChunkSources<NPT, TC, STAGES, true, CPT> src;
  src.init(a, b, c0);
  float* y_out = a.y + b * a.y_b + (tid / kGroups) * a.y_t + cq;  // item 0's row piece; item j is j * y_item further
  const int64_t y_item = int64_t(T / kGroups) * a.y_t;
#pragma unroll
  for (int k = 0; k < STAGES - 1; ++k) {
    if (k < chunks) src.issue(a, vec, smem + k * P::kStageFloats);
    cp_async_commit();  // one group per chunk slot, empty ones too: the wait below counts groups
  }
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t t0 = k * TC;
    const float* st = smem + (k % STAGES) * P::kStageFloats;
    const float *su = st, *sd = st + TC * kCh, *sz = st + 2 * TC * kCh;
    const float *sB = st + 3 * TC * kCh, *sC = sB + TC * kStates;
    cp_async_wait<STAGES - 2>();  // this thread's copies of chunk k have landed (the thread reads only those next)
#pragma unroll
    for (int j = 0; j < P::kItemIters; ++j) {
      const int tt = (tid + j * T) / kGroups, o = tt * kCh + 4 * q;
      const float4 u4 = *reinterpret_cast<const float4*>(su + o), d4 = *reinterpret_cast<const float4*>(sd + o);
      const float u[4] = {u4.x, u4.y, u4.z, u4.w}, dl[4] = {d4.x, d4.y, d4.z, d4.w};
      const bool t_on = t0 + tt < a.seqlen;
      float term[8];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        float dt = dl[kk] + bias[kk];
        if (a.softplus) dt = softplus_lean(dt);
        dt = t_on && dt_chan[kk] ? dt : 0.f;  // past the end: h unchanged
        term[2 * kk] = dt;
        term[2 * kk + 1] = dt * u[kk];
      }
      float4* dst = reinterpret_cast<float4*>(sTerm + o);
      dst[0] = make_float4(term[0], term[1], term[2], term[3]);
      dst[1] = make_float4(term[4], term[5], term[6], term[7]);
    }
    __syncthreads();  // chunk k's terms and B/C (every thread waited for its copies) are visible; chunk k-1 is done
    if (k + STAGES - 1 < chunks) src.issue(a, vec, smem + ((k + STAGES - 1) % STAGES) * P::kStageFloats);
    cp_async_commit();
    // The recurrence: the CPT channels' chains interleaved state by state (independent until the partial store).
#pragma unroll
    for (int tt = 0; tt < TC; ++tt) {
      const typename TermVec<CPT>::T tv = *reinterpret_cast<const typename TermVec<CPT>::T*>(sTerm + tt * kCh + CPT * p);
      const float* tm = reinterpret_cast<const float*>(&tv);  // {dt, dt u} per channel
      const typename Vec<NPT>::T bv = *reinterpret_cast<const typename Vec<NPT>::T*>(sB + tt * kStates + s * NPT);
      const typename Vec<NPT>::T cv = *reinterpret_cast<const typename Vec<NPT>::T*>(sC + tt * kStates + s * NPT);
      const float* Bn = reinterpret_cast<const float*>(&bv);
      const float* Cn = reinterpret_cast<const float*>(&cv);
      float acc[CPT];
#pragma unroll
      for (int i = 0; i < NPT; ++i)
#pragma unroll
        for (int k = 0; k < CPT; ++k) {
          h[k][i] = ex2_approx(tm[2 * k] * A2[k][i]) * h[k][i] + tm[2 * k + 1] * Bn[i];
          acc[k] = i == 0 ? Cn[0] * h[k][0] : acc[k] + Cn[i] * h[k][i];
        }
      typename PartialVec<CPT>::T out;
      float* outf = reinterpret_cast<float*>(&out);
#pragma unroll
      for (int k = 0; k < CPT; ++k) outf[k] = acc[k];
      *reinterpret_cast<typename PartialVec<CPT>::T*>(sY + (tt * SPLIT + s) * P::kYRow + CPT * p) = out;
    }
    __syncthreads();  // the partial sums are complete
#pragma unroll
    for (int j = 0; j < P::kItemIters; ++j) {  // the outputs
      const int tt = (tid + j * T) / kGroups, o = tt * kCh + 4 * q;
      if (t0 + tt >= a.seqlen) continue;
      float4 acc = *reinterpret_cast<const float4*>(sY + tt * SPLIT * P::kYRow + 4 * q);
#pragma unroll
      for (int r = 1; r < SPLIT; ++r) {
        const float4 v = *reinterpret_cast<const float4*>(sY + (tt * SPLIT + r) * P::kYRow + 4 * q);
        acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
      }
      const float4 u4 = *reinterpret_cast<const float4*>(su + o);
      const float u[4] = {u4.x, u4.y, u4.z, u4.w};
      float y[4] = {acc.x, acc.y, acc.z, acc.w};
      float zz[4] = {0.f, 0.f, 0.f, 0.f};
      if (a.z) {
        const float4 z4 = *reinterpret_cast<const float4*>(sz + o);
        zz[0] = z4.x, zz[1] = z4.y, zz[2] = z4.z, zz[3] = z4.w;
      }
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        y[kk] += Dc[kk] * u[kk];
        if (a.z) y[kk] *= silu_lean(zz[kk]);
      }
      float* out = y_out + j * y_item;
      if (vec && y_live == 4) {
        *reinterpret_cast<float4*>(out) = make_float4(y[0], y[1], y[2], y[3]);
      } else {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          if (kk < y_live) out[kk] = y[kk];
      }
    }
    y_out += TC * a.y_t;
  }
  cp_async_wait<0>();  // no copy outlives the block (the trailing groups are empty)
  if (a.state)
#pragma unroll
    for (int k = 0; k < CPT; ++k)
#pragma unroll
      for (int i = 0; i < NPT; ++i) {
        const int64_t c = c0 + CPT * p + k;
        const int n = s * NPT + i;
        if (c < a.d_inner && n < N) a.state[(b * a.d_inner + c) * N + n] = h[k][i];
      }
}

template <int NPT, int CPT>
void launch(const ScanArgs& a, cudaStream_t s) {
  using P = V4<NPT, kTC, kStages, CPT>;
  void (*kernel)(ScanArgs, bool) = scan_v4_cpt_kernel<NPT, CPT>;
  // Above 48 KB of dynamic shared memory needs an opt-in, once per device (not a stream operation: allowed while a
  // CUDA graph is being captured).
  static std::atomic<uint64_t> opted_in{0};
  int dev = 0;
  check_cuda(cudaGetDevice(&dev), "selective scan v4 cpt2: cudaGetDevice");
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if (P::kSmemBytes > 48 * 1024 && !(opted_in.load() & bit)) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(P::kSmemBytes)),
               "selective scan v4 cpt2: shared memory opt-in");
    opted_in.fetch_or(bit);
  }
  const dim3 grid(unsigned((a.d_inner + kCh - 1) / kCh), unsigned(a.batch));
  kernel<<<grid, P::kThreads, P::kSmemBytes, s>>>(a, vector_ok(a));
}

}  // namespace

void launch_scan_v4_cpt2(const ScanArgs& a, void* stream) {
  launch<4, 2>(a, static_cast<cudaStream_t>(stream ? stream : cuda_stream()));
  check_cuda(cudaGetLastError(), "selective scan v4 cpt2 kernel launch");
}

}  // namespace flashkit::kernels
