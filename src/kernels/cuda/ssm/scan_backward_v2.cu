// Generation 1 of the CUDA backward's reverse pass (d_state <= 16; docs/worklog/ssm-scan.md "backward"): the layout of
// the forward's v3 (scan_v3.cu) instead of generation 0's 4 threads x 4 states per channel, whose 17 x 4 recomputed
// states, 4 x 16 per-step inputs and accumulators take 255 registers (2 blocks, 8 warps per SM). Here a block of 256
// threads owns 16 channels x 16 states, thread (channel, state) keeps only its own 17 states and 16 decays of the
// chunk (~60 registers), and everything indexed by (step, channel) or (step, state) goes through shared memory:
//   1. the chunk's u, delta, z, dout (a [16][16 channels] tile) and B, C ([16][16]) are loaded, one value each per
//      thread; dt and dt u once per (step, channel);
//   2. the chunk's states from its checkpoint: h_t = e^{dt A} h_{t-1} + dt u B, decays kept; C h per thread to shared;
//   3. one thread per (step, channel): y = sum of C h + D u, then dz and dy = dout silu(z) (the gate's gradient);
//   4. backwards through the chunk per (channel, state): g += dy C; dA += g h_{t-1} e^{dt A} dt; g *= e^{dt A}; the
//      per-state terms of ddelta and du, and of dB and dC per channel, to shared memory;
//   5. one thread per (step, channel) sums ddelta and du over the 16 states and writes them; one per (step, state)
//      sums dB and dC over the 16 channels into the block's partial (reduced over blocks in scan_backward.cu).
// Deterministic (fixed summation orders, no atomics). 77 KB of dynamic shared memory: 2 blocks = 16 warps per SM.
#include <cuda_runtime.h>

#include "core/cuda_check.hpp"
#include "kernels/cuda/ssm/scan_backward.cuh"

namespace flashkit::kernels {
namespace {

constexpr int kThreads = 256, TC = 16, CH = 16, NS = 16, P = 17;  // P: padded row (odd stride: no bank conflicts)
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float softplus_f(float x) { return x > 20.f ? x : log1pf(__expf(x)); }
__device__ __forceinline__ float sigmoid_f(float x) { return 1.f / (1.f + __expf(-x)); }

// Dynamic shared memory, in floats.
constexpr int kTermOff = 0;                      // float2 [TC][CH]: {dt, dt u}
constexpr int kBCOff = kTermOff + 2 * TC * CH;    // float2 [TC][NS]: {B, C}
constexpr int kUOff = kBCOff + 2 * TC * NS;       // [TC][CH]: u
constexpr int kDyOff = kUOff + TC * CH;           // [TC][CH]: dout, then dy
constexpr int kZOff = kDyOff + TC * CH;           // [TC][CH]: z
constexpr int kP1Off = kZOff + TC * CH;           // [TC][CH][P]: C h per state, then the ddelta terms
constexpr int kP2Off = kP1Off + TC * CH * P;      // [TC][CH][P]: the du terms
constexpr int kQ1Off = kP2Off + TC * CH * P;      // [TC][NS][P]: the dB terms per channel
constexpr int kQ2Off = kQ1Off + TC * NS * P;      // [TC][NS][P]: the dC terms per channel
constexpr int kSmemFloats = kQ2Off + TC * NS * P;
constexpr size_t kSmemBytes = size_t(kSmemFloats) * sizeof(float);

__global__ void __launch_bounds__(kThreads, 2) reverse_one_state_kernel(ScanArgs a, ScanGradArgs g, BwdWork w) {
  extern __shared__ float4 smem4[];
  float* sm = reinterpret_cast<float*>(smem4);
  float2* sTerm = reinterpret_cast<float2*>(sm + kTermOff);
  float2* sBC = reinterpret_cast<float2*>(sm + kBCOff);
  float *sU = sm + kUOff, *sDy = sm + kDyOff, *sZ = sm + kZOff;
  float *sP1 = sm + kP1Off, *sP2 = sm + kP2Off, *sQ1 = sm + kQ1Off, *sQ2 = sm + kQ2Off;
  const int N = int(a.d_state);
  const int64_t b = blockIdx.y, L = a.seqlen, Di = a.d_inner, c0 = int64_t(blockIdx.x) * CH;
  const int tid = threadIdx.x;
  // Thread roles: (rc, n) in the recurrences; (tt, col) = (tid / 16, tid % 16) for per-(step, channel) work, and
  // (tt, col as the state) for per-(step, state) work.
  const int rc = tid / NS, n = tid % NS;
  const bool rlive = c0 + rc < Di && n < N;
  const float A = rlive ? a.A[(c0 + rc) * N + n] : 0.f, A2 = A * kLog2e;
  const int tt_own = tid / CH, col = tid % CH;
  const bool clive = c0 + col < Di;
  const float bias = clive && a.delta_bias ? a.delta_bias[c0 + col] : 0.f;
  const float Dc = clive && a.D ? a.D[c0 + col] : 0.f;
  float gs = 0.f, dA = 0.f, dD = 0.f, dbias = 0.f;

  for (int64_t k = w.chunks - 1; k >= 0; --k) {
    const int64_t t0 = k * TC;
    const int nt = L - t0 < TC ? int(L - t0) : TC;
    __syncthreads();  // the previous chunk's tiles are consumed
    // 1. the chunk's tiles; element (tt_own, col)
    float dsp_own;  // d dt / d (delta + bias) at (tt_own, col); 0 past the end
    {
      const int64_t t = t0 + tt_own;
      const bool on = clive && tt_own < nt;
      const float u = on ? a.u[b * a.u_b + t * a.u_t + c0 + col] : 0.f;
      const float raw = (on ? a.delta[b * a.dl_b + t * a.dl_t + c0 + col] : 0.f) + bias;
      const float dt = on ? (a.softplus ? softplus_f(raw) : raw) : 0.f;
      dsp_own = on ? (a.softplus ? (raw > 20.f ? 1.f : sigmoid_f(raw)) : 1.f) : 0.f;
      sTerm[tt_own * CH + col] = make_float2(dt, dt * u);
      sU[tt_own * CH + col] = u;
      sDy[tt_own * CH + col] = on ? g.dout[b * g.dout_b + t * g.dout_t + c0 + col] : 0.f;
      sZ[tt_own * CH + col] = on && a.z ? a.z[b * a.z_b + t * a.z_t + c0 + col] : 0.f;
      const bool son = tt_own < nt && col < N;  // col as the state index
      sBC[tt_own * NS + col] = son ? make_float2(a.B[b * a.B_b + t * a.B_t + col], a.C[b * a.C_b + t * a.C_t + col])
                                   : make_float2(0.f, 0.f);
    }
    float hs[TC + 1], dec[TC];
    hs[0] = rlive ? w.ck[((b * w.chunks + k) * Di + c0 + rc) * N + n] : 0.f;
    __syncthreads();
    // 2. the chunk's states
#pragma unroll
    for (int tt = 0; tt < TC; ++tt) {
      const float2 term = sTerm[tt * CH + rc];
      const float2 bc = sBC[tt * NS + n];
      dec[tt] = exp2f(term.x * A2);
      hs[tt + 1] = dec[tt] * hs[tt] + term.y * bc.x;
      sP1[(tt * CH + rc) * P + n] = bc.y * hs[tt + 1];
    }
    __syncthreads();
    // 3. y, dz and dy per (step, channel)
    {
      const int i = tt_own * CH + col;
      float dy = sDy[i];
      if (a.z) {
        float y = 0.f;
#pragma unroll
        for (int q = 0; q < NS; ++q) y += sP1[i * P + q];
        y += Dc * sU[i];
        const float z = sZ[i], sg = sigmoid_f(z);
        if (clive && tt_own < nt) g.dz[(b * L + t0 + tt_own) * Di + c0 + col] = dy * y * sg * (1.f + z * (1.f - sg));
        dy *= z * sg;
      }
      sDy[i] = dy;
      dD += dy * sU[i];
    }
    __syncthreads();
    // 4. backwards through the chunk
#pragma unroll
    for (int tt = TC - 1; tt >= 0; --tt) {
      const float2 term = sTerm[tt * CH + rc];
      const float2 bc = sBC[tt * NS + n];
      const float dy = sDy[tt * CH + rc], u = sU[tt * CH + rc];
      gs += dy * bc.y;
      const float hp = hs[tt] * dec[tt];
      dA += gs * hp * term.x;
      sP1[(tt * CH + rc) * P + n] = gs * (hp * A + bc.x * u);  // ddelta terms
      sP2[(tt * CH + rc) * P + n] = gs * term.x * bc.x;        // du terms
      sQ1[(tt * NS + n) * P + rc] = gs * term.y;               // dB terms: g dt u
      sQ2[(tt * NS + n) * P + rc] = dy * hs[tt + 1];           // dC terms
      gs *= dec[tt];
    }
    __syncthreads();
    // 5. the sums: over states per (step, channel), over channels per (step, state)
    {
      const int i = tt_own * CH + col;
      float ddt = 0.f, du = 0.f, dB = 0.f, dC = 0.f;
#pragma unroll
      for (int q = 0; q < NS; ++q) {
        ddt += sP1[i * P + q];
        du += sP2[i * P + q];
        dB += sQ1[i * P + q];
        dC += sQ2[i * P + q];
      }
      ddt *= dsp_own;
      dbias += ddt;
      if (clive && tt_own < nt) {
        const int64_t o = (b * L + t0 + tt_own) * Di + c0 + col;
        g.du[o] = du + sDy[i] * Dc;
        g.ddelta[o] = ddt;
      }
      if (tt_own < nt && col < N) {
        const int64_t o = ((b * w.channel_blocks + blockIdx.x) * L + t0 + tt_own) * N + col;
        w.pB[o] = dB;
        w.pC[o] = dC;
      }
    }
  }
  if (rlive) w.pA[(b * Di + c0 + rc) * N + n] = dA;
  // dD and dbias were accumulated per thread over its (tt_own, col) elements: sum the 16 threads of each column.
  __syncthreads();
  sP1[tid] = dD;
  sP2[tid] = dbias;
  __syncthreads();
  if (tid < CH && c0 + tid < Di) {
    float sd = 0.f, sb = 0.f;
#pragma unroll
    for (int q = 0; q < TC; ++q) sd += sP1[q * CH + tid], sb += sP2[q * CH + tid];
    w.pD[b * Di + c0 + tid] = sd;
    w.pbias[b * Di + c0 + tid] = sb;
  }
}

}  // namespace

void launch_bwd_reverse_one_state(const ScanArgs& a, const ScanGradArgs& g, const BwdWork& w, cudaStream_t stream) {
  // Above the 48 KB default: set on every call (cheap; per device, so no process-wide flag).
  check_cuda(cudaFuncSetAttribute(reverse_one_state_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(kSmemBytes)),
             "selective scan backward: shared memory attribute");
  const dim3 grid(unsigned(w.channel_blocks), unsigned(a.batch));
  reverse_one_state_kernel<<<grid, kThreads, kSmemBytes, stream>>>(a, g, w);
  check_cuda(cudaGetLastError(), "selective scan backward: reverse kernel launch (one state per thread)");
}

}  // namespace flashkit::kernels
