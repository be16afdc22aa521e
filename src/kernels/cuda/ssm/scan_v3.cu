// v3 of the fused selective scan forward (d_state <= 16; docs/worklog/ssm-scan.md "v3"): the same bytes as v1/v2
// (u, delta, z, B, C read once, y written once, the state never in HBM), laid out for warps in flight rather than
// registers per thread. v2 measured 11% of the copy ceiling, latency-bound at 12 warps per SM (93 channels per SM at
// batch 8, d_inner 1536, 4 threads per channel, 128 registers each). v3:
//   * NPT states per thread (1 or 2): a block of 256 threads owns 256 / (16 / NPT) channels; at NPT 1, 40 registers,
//     so every block of the batch-8 grid is resident at once (768 blocks, 6 per SM = 48 warps);
//   * the chunk's u, delta, z ([TC][channels] tiles) and B, C rows are loaded cooperatively into registers for the
//     NEXT chunk while the current one computes (software pipelining: the loads are in flight during the
//     recurrence, where v2's block waited for them);
//   * dt (bias, softplus) and the gate silu(z) are computed once per (step, channel) by one thread, into shared
//     memory (v1/v2 computed them 4x per channel), packed so that a step of the recurrence reads one float2
//     {dt, dt u} and one float2 / float4 {B_n, C_n, ...} per thread;
//   * the recurrence h = exp2(dt A log2e) h + dt u B is one FMA chain per state; the thread's C h goes to shared
//     memory and one thread per (step, channel) sums them after the chunk (no shuffles), applies D and the gate and
//     stores y (coalesced rows).
// Chosen by choose_scan_kernel's generations 2..4 (kernels/ssm_choice.hpp) until the H200 numbers promote one.
#include <cuda_runtime.h>

#include "core/cuda_check.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/cuda/ssm/ssm_cuda.hpp"

namespace flashkit::kernels {
namespace {

constexpr int kThreads = 256, kStates = 16;
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float softplus_f(float x) { return x > 20.f ? x : log1pf(__expf(x)); }

// NPT states per thread: SPLIT = 16 / NPT threads per channel, CH = 256 / SPLIT channels per block.
template <int TC, int NPT>
struct V3 {
  static constexpr int SPLIT = kStates / NPT, CH = kThreads / SPLIT;
  static constexpr int kPerU = TC * CH / kThreads;      // u, delta, z values a thread loads per chunk
  static constexpr int kPerBC = TC * kStates / kThreads;  // B, C values a thread loads per chunk
  static_assert(TC % 16 == 0 && kPerBC >= 1, "a chunk is whole [16][16] B/C tiles");
};

template <int TC, int NPT>
struct ChunkRegs {
  float u[V3<TC, NPT>::kPerU], dl[V3<TC, NPT>::kPerU], z[V3<TC, NPT>::kPerU];
  float B[V3<TC, NPT>::kPerBC], C[V3<TC, NPT>::kPerBC];
};

// Element e = tid + j * 256 of the [TC][CH] tiles (column tid % CH) and of the [TC][16] B/C tiles (state tid % 16).
template <int TC, int NPT>
__device__ __forceinline__ void load_chunk(const ScanArgs& a, int64_t b, int64_t c0, int64_t t0,
                                           ChunkRegs<TC, NPT>& r) {
  using P = V3<TC, NPT>;
  const int N = int(a.d_state);
#pragma unroll
  for (int j = 0; j < P::kPerU; ++j) {
    const int e = threadIdx.x + j * kThreads;
    const int64_t t = t0 + e / P::CH, c = c0 + e % P::CH;
    const bool on = t < a.seqlen && c < a.d_inner;
    r.u[j] = on ? a.u[b * a.u_b + t * a.u_t + c] : 0.f;
    r.dl[j] = on ? a.delta[b * a.dl_b + t * a.dl_t + c] : 0.f;
    r.z[j] = on && a.z ? a.z[b * a.z_b + t * a.z_t + c] : 0.f;
  }
#pragma unroll
  for (int j = 0; j < P::kPerBC; ++j) {
    const int e = threadIdx.x + j * kThreads, n = e % kStates;
    const int64_t t = t0 + e / kStates;
    const bool on = t < a.seqlen && n < N;
    r.B[j] = on ? a.B[b * a.B_b + t * a.B_t + n] : 0.f;
    r.C[j] = on ? a.C[b * a.C_b + t * a.C_t + n] : 0.f;
  }
}

template <int NPT> struct BCVec;
template <> struct BCVec<1> { using T = float2; };
template <> struct BCVec<2> { using T = float4; };

template <int TC, int NPT>
__global__ void __launch_bounds__(kThreads, NPT == 2 ? 3 : (TC == 16 ? 6 : 4)) scan_v3_kernel(ScanArgs a) {
  using P = V3<TC, NPT>;
  constexpr int SPLIT = P::SPLIT, CH = P::CH;
  // Packed so that the recurrence reads one vector per step for {dt, dt u} and one for its B and C: {B_n, C_n} for
  // every state n, a thread's NPT states adjacent.
  __shared__ float2 sTerm[TC][CH];                       // {dt, dt * u}; dt = 0 past the end (h unchanged)
  __shared__ float2 sUG[TC][CH];                         // {u, gate} for the epilogue
  __shared__ __align__(16) float sBC[TC][kStates][2];    // {B, C}, zero beyond d_state and past the end
  __shared__ float sY[TC][CH][SPLIT + 1];                // per thread: sum of C h over its states; +1: no conflicts
  const int N = int(a.d_state);
  const int64_t b = blockIdx.y, c0 = int64_t(blockIdx.x) * CH;
  const int tid = threadIdx.x;
  // The recurrence: channel rc, states s * NPT + i.
  const int rc = tid / SPLIT, s = tid % SPLIT;
  float A2[NPT], h[NPT];
#pragma unroll
  for (int i = 0; i < NPT; ++i) {
    const int n = s * NPT + i;
    const bool on = c0 + rc < a.d_inner && n < N;
    A2[i] = on ? a.A[(c0 + rc) * N + n] * kLog2e : 0.f;
    h[i] = on && a.state ? a.state[(b * a.d_inner + c0 + rc) * N + n] : 0.f;
  }
  // The per-(step, channel) work: channel column tid % CH for every element a thread owns.
  const int col = tid % CH;
  const bool clive = c0 + col < a.d_inner;
  const float bias = clive && a.delta_bias ? a.delta_bias[c0 + col] : 0.f;
  const float Dc = clive && a.D ? a.D[c0 + col] : 0.f;

  ChunkRegs<TC, NPT> r;
  load_chunk<TC, NPT>(a, b, c0, 0, r);
  for (int64_t t0 = 0; t0 < a.seqlen; t0 += TC) {
    __syncthreads();  // the previous chunk's shared tiles are consumed
#pragma unroll
    for (int j = 0; j < P::kPerU; ++j) {
      const int tt = (tid + j * kThreads) / CH;
      const bool on = clive && t0 + tt < a.seqlen;
      float dt = r.dl[j] + bias;
      if (a.softplus) dt = softplus_f(dt);
      dt = on ? dt : 0.f;
      sTerm[tt][col] = make_float2(dt, dt * r.u[j]);
      sUG[tt][col] = make_float2(r.u[j], a.z ? r.z[j] / (1.f + __expf(-r.z[j])) : 1.f);
    }
#pragma unroll
    for (int j = 0; j < P::kPerBC; ++j) {
      const int e = tid + j * kThreads;
      sBC[e / kStates][e % kStates][0] = r.B[j];
      sBC[e / kStates][e % kStates][1] = r.C[j];
    }
    __syncthreads();
    if (t0 + TC < a.seqlen) load_chunk<TC, NPT>(a, b, c0, t0 + TC, r);  // in flight during the recurrence
#pragma unroll
    for (int tt = 0; tt < TC; ++tt) {
      const float2 term = sTerm[tt][rc];
      const typename BCVec<NPT>::T bc = *reinterpret_cast<const typename BCVec<NPT>::T*>(&sBC[tt][s * NPT][0]);
      const float* v = reinterpret_cast<const float*>(&bc);  // B_0, C_0, B_1, C_1
      float acc = 0.f;
#pragma unroll
      for (int i = 0; i < NPT; ++i) {
        h[i] = exp2f(term.x * A2[i]) * h[i] + term.y * v[2 * i];
        acc += v[2 * i + 1] * h[i];
      }
      sY[tt][rc][s] = acc;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < P::kPerU; ++j) {
      const int tt = (tid + j * kThreads) / CH;
      float y = 0.f;
#pragma unroll
      for (int q = 0; q < SPLIT; ++q) y += sY[tt][col][q];
      const float2 ug = sUG[tt][col];
      y = (y + Dc * ug.x) * ug.y;
      const int64_t t = t0 + tt;
      if (clive && t < a.seqlen) a.y[b * a.y_b + t * a.y_t + c0 + col] = y;
    }
  }
#pragma unroll
  for (int i = 0; i < NPT; ++i) {
    const int n = s * NPT + i;
    if (a.state && c0 + rc < a.d_inner && n < N) a.state[(b * a.d_inner + c0 + rc) * N + n] = h[i];
  }
}

template <int TC, int NPT>
void launch(const ScanArgs& a, cudaStream_t s) {
  constexpr int CH = V3<TC, NPT>::CH;
  const dim3 grid(unsigned((a.d_inner + CH - 1) / CH), unsigned(a.batch));
  scan_v3_kernel<TC, NPT><<<grid, kThreads, 0, s>>>(a);
}

}  // namespace

void launch_scan_v3(const ScanArgs& a, void* stream, int chunk, int states_per_thread) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream ? stream : cuda_stream());
  if (states_per_thread == 2) launch<16, 2>(a, s);
  else if (chunk == 32) launch<32, 1>(a, s);
  else launch<16, 1>(a, s);
  check_cuda(cudaGetLastError(), "selective scan v3 kernel launch");
}

}  // namespace flashkit::kernels
