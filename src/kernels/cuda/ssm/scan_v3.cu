// v3 of the fused selective scan forward (d_state <= 16; docs/worklog/ssm-scan.md "v3"): the same bytes as v1/v2
// (u, delta, z, B, C read once, y written once, the state never in HBM), laid out for warps in flight rather than
// registers per thread. v2 measured 11% of the copy ceiling, latency-bound at 12 warps per SM (93 channels per SM at
// batch 8, d_inner 1536, 4 threads per channel, 128 registers each). v3:
//   * one state per thread: a block of 256 threads owns 16 channels x 16 states (4x v2's threads per channel), ~40
//     registers, so every block of the grid is resident at once (batch 8: 768 blocks = 5.8 per SM = 46 warps);
//   * the chunk's u, delta, z (a [TC][16 channels] tile: 64-byte rows) and B, C rows are loaded cooperatively, one
//     or two values per thread, into registers for the NEXT chunk while the current one computes (software
//     pipelining: the loads are in flight during the recurrence, where v2's block waited for them);
//   * dt (bias, softplus) and the gate silu(z) are computed once per (step, channel) by one thread, into shared
//     memory (v1/v2 computed them 4x per channel);
//   * the recurrence h = exp2(dt A log2e) h + dt u B is one FMA chain per thread; C h goes to shared memory and the
//     16 states of a (step, channel) are summed by one thread after the chunk (no shuffles), which also applies D
//     and the gate and stores y (coalesced 64-byte rows).
// Chosen by choose_scan_kernel's generation 2 (TC 16) and 3 (TC 32) only until the H200 numbers say otherwise.
#include <cuda_runtime.h>

#include "core/cuda_check.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/cuda/ssm/ssm_cuda.hpp"

namespace flashkit::kernels {
namespace {

constexpr int kThreads = 256, kStates = 16, kChannels = kThreads / kStates;
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float softplus_f(float x) { return x > 20.f ? x : log1pf(__expf(x)); }

// The values one thread loads for a chunk: element e = tid + j * kThreads of the [TC][16] tiles (j < TC / 16).
template <int TC>
struct ChunkRegs {
  static constexpr int kPer = TC * kChannels / kThreads;  // == TC * kStates / kThreads
  float u[kPer], dl[kPer], z[kPer], B[kPer], C[kPer];
};

template <int TC>
__device__ __forceinline__ void load_chunk(const ScanArgs& a, int64_t b, int64_t c0, int64_t t0, ChunkRegs<TC>& r) {
  const int N = int(a.d_state);
#pragma unroll
  for (int j = 0; j < ChunkRegs<TC>::kPer; ++j) {
    const int e = threadIdx.x + j * kThreads, tt = e / kChannels, col = e % kChannels;
    const int64_t t = t0 + tt, c = c0 + col;
    const bool on = t < a.seqlen && c < a.d_inner;
    r.u[j] = on ? a.u[b * a.u_b + t * a.u_t + c] : 0.f;
    r.dl[j] = on ? a.delta[b * a.dl_b + t * a.dl_t + c] : 0.f;
    r.z[j] = on && a.z ? a.z[b * a.z_b + t * a.z_t + c] : 0.f;
    const bool st = t < a.seqlen && col < N;  // col is the state index for B and C
    r.B[j] = st ? a.B[b * a.B_b + t * a.B_t + col] : 0.f;
    r.C[j] = st ? a.C[b * a.C_b + t * a.C_t + col] : 0.f;
  }
}

template <int TC>
__global__ void __launch_bounds__(kThreads, TC == 16 ? 6 : 4) scan_v3_kernel(ScanArgs a) {
  static_assert(TC % 16 == 0, "a chunk is whole [16][16] tiles");
  __shared__ float sB[TC][kStates], sC[TC][kStates];
  __shared__ float sU[TC][kChannels], sDt[TC][kChannels], sG[TC][kChannels];
  __shared__ float sY[TC][kChannels][kStates + 1];  // C h per state; +1: the per-output sums read without conflicts
  const int N = int(a.d_state);
  const int64_t b = blockIdx.y, c0 = int64_t(blockIdx.x) * kChannels;
  const int tid = threadIdx.x;
  // The recurrence: channel rc, state n.
  const int rc = tid / kStates, n = tid % kStates;
  const bool rlive = c0 + rc < a.d_inner && n < N;
  const float A2 = rlive ? a.A[(c0 + rc) * N + n] * kLog2e : 0.f;
  float h = rlive && a.state ? a.state[(b * a.d_inner + c0 + rc) * N + n] : 0.f;
  // The per-(step, channel) work: channel column tid % 16 (the same for every element a thread owns).
  const int col = tid % kChannels;
  const bool clive = c0 + col < a.d_inner;
  const float bias = clive && a.delta_bias ? a.delta_bias[c0 + col] : 0.f;
  const float Dc = clive && a.D ? a.D[c0 + col] : 0.f;

  ChunkRegs<TC> r;
  load_chunk<TC>(a, b, c0, 0, r);
  for (int64_t t0 = 0; t0 < a.seqlen; t0 += TC) {
    __syncthreads();  // the previous chunk's shared tiles are consumed
#pragma unroll
    for (int j = 0; j < ChunkRegs<TC>::kPer; ++j) {
      const int e = tid + j * kThreads, tt = e / kChannels;
      const bool on = clive && t0 + tt < a.seqlen;
      float dt = r.dl[j] + bias;
      if (a.softplus) dt = softplus_f(dt);
      sDt[tt][col] = on ? dt : 0.f;  // 0 past the end: h unchanged
      sU[tt][col] = r.u[j];
      sG[tt][col] = a.z ? r.z[j] / (1.f + __expf(-r.z[j])) : 1.f;
      sB[tt][col] = r.B[j];
      sC[tt][col] = r.C[j];
    }
    __syncthreads();
    if (t0 + TC < a.seqlen) load_chunk<TC>(a, b, c0, t0 + TC, r);  // in flight during the recurrence
#pragma unroll
    for (int tt = 0; tt < TC; ++tt) {
      const float dt = sDt[tt][rc];
      h = exp2f(dt * A2) * h + dt * sU[tt][rc] * sB[tt][n];
      sY[tt][rc][n] = sC[tt][n] * h;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < ChunkRegs<TC>::kPer; ++j) {
      const int e = tid + j * kThreads, tt = e / kChannels;
      float y = 0.f;
#pragma unroll
      for (int q = 0; q < kStates; ++q) y += sY[tt][col][q];
      y = (y + Dc * sU[tt][col]) * sG[tt][col];
      const int64_t t = t0 + tt;
      if (clive && t < a.seqlen) a.y[b * a.y_b + t * a.y_t + c0 + col] = y;
    }
  }
  if (a.state && rlive) a.state[(b * a.d_inner + c0 + rc) * N + n] = h;
}

}  // namespace

void launch_scan_v3(const ScanArgs& a, void* stream, int chunk) {
  const dim3 grid(unsigned((a.d_inner + kChannels - 1) / kChannels), unsigned(a.batch));
  const cudaStream_t s = static_cast<cudaStream_t>(stream ? stream : cuda_stream());
  if (chunk == 32) scan_v3_kernel<32><<<grid, kThreads, 0, s>>>(a);
  else scan_v3_kernel<16><<<grid, kThreads, 0, s>>>(a);
  check_cuda(cudaGetLastError(), "selective scan v3 kernel launch");
}

}  // namespace flashkit::kernels
