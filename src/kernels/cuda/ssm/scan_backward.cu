// The backward of the fused selective scan (include/flashkit/ssm.hpp) for CUDA: the gradients the f64 reference
// defines (kernels/reference/ssm_reference.cpp), IO-aware. The expanded state [seqlen, d_inner, d_state] never
// reaches HBM; only one state per chunk of 16 steps does (1/16 of it):
//   1. checkpoint_kernel: the forward recurrence, writing the state at the start of every chunk;
//   2. reverse_kernel: chunks from last to first; per chunk the forward states of its 16 steps are recomputed from the
//      chunk's checkpoint into registers (with y, for dz), then the state gradient g runs backwards through them:
//        g += dy_t C_t;  dA += g h_{t-1} e^{dt A} dt;  ddt += g (h_{t-1} e^{dt A} A + B_t u_t);
//        dB_t += g dt u_t (summed over channels);  du += g dt B_t;  dC_t += dy_t h_t;  g *= e^{dt A}
//      du, ddelta and dz are written once per (token, channel); dB and dC are summed over the block's channels (warp
//      shuffles, then the block's warps in a fixed order) into per-block partials; dA, dD, ddelta_bias per sequence;
//   3. reduce kernels: the partials summed in a fixed order (deterministic: no atomics anywhere).
// Ownership as the forward's v1/v2: SPLIT threads per channel x 4 states each (ScanBwdPlan, kernels/ssm_choice.hpp);
// generation 1 replaces step 2 by the one-state-per-thread reverse pass of scan_backward_v2.cu.
#include <cuda_runtime.h>

#include "core/cuda_check.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/cuda/ssm/scan_backward.cuh"
#include "kernels/cuda/ssm/ssm_cuda.hpp"
#include "kernels/ssm_choice.hpp"

namespace flashkit::kernels {
namespace {

constexpr int kThreads = 128, kWarps = kThreads / 32, kNpt = 4, kChunk = 16;
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float softplus_f(float x) { return x > 20.f ? x : log1pf(__expf(x)); }
__device__ __forceinline__ float sigmoid_f(float x) { return 1.f / (1.f + __expf(-x)); }

// The chunk's B and C rows into shared memory, zero beyond d_state and beyond the last step.
template <int NS>
__device__ __forceinline__ void load_bc(const ScanArgs& a, int64_t b, int64_t t0, int nt, float (*sB)[NS],
                                        float (*sC)[NS], bool need_c) {
  const int N = int(a.d_state);
  for (int i = threadIdx.x; i < kChunk * NS; i += kThreads) {
    const int tt = i / NS, n = i % NS;
    const bool on = tt < nt && n < N;
    sB[tt][n] = on ? a.B[b * a.B_b + (t0 + tt) * a.B_t + n] : 0.f;
    if (need_c) sC[tt][n] = on ? a.C[b * a.C_b + (t0 + tt) * a.C_t + n] : 0.f;
  }
}

// dt of the chunk's steps (bias, softplus); 0 past the end or for a dead channel (h unchanged).
__device__ __forceinline__ void chunk_dt(const ScanArgs& a, int64_t b, int64_t c, bool live, int64_t t0, int nt,
                                         float bias, float* dt) {
#pragma unroll
  for (int tt = 0; tt < kChunk; ++tt) {
    const bool on = live && tt < nt;
    const float raw = (on ? a.delta[b * a.dl_b + (t0 + tt) * a.dl_t + c] : 0.f) + bias;
    dt[tt] = on ? (a.softplus ? softplus_f(raw) : raw) : 0.f;
  }
}

template <int SPLIT>
__global__ void __launch_bounds__(kThreads) checkpoint_kernel(ScanArgs a, BwdWork w) {
  constexpr int kCh = kThreads / SPLIT, NS = kNpt * SPLIT;
  __shared__ float sB[kChunk][NS];
  const int N = int(a.d_state);
  const int64_t b = blockIdx.y, L = a.seqlen, Di = a.d_inner;
  const int s = threadIdx.x % SPLIT;
  const int64_t c = int64_t(blockIdx.x) * kCh + threadIdx.x / SPLIT;
  const bool live = c < Di;
  float h[kNpt], A2[kNpt];
#pragma unroll
  for (int i = 0; i < kNpt; ++i) {
    const int n = s * kNpt + i;
    A2[i] = live && n < N ? a.A[c * N + n] * kLog2e : 0.f;
    h[i] = 0.f;
  }
  const float bias = live && a.delta_bias ? a.delta_bias[c] : 0.f;
  for (int64_t k = 0; k < w.chunks; ++k) {
    const int64_t t0 = k * kChunk;
    const int nt = L - t0 < kChunk ? int(L - t0) : kChunk;
#pragma unroll
    for (int i = 0; i < kNpt; ++i) {
      const int n = s * kNpt + i;
      if (live && n < N) w.ck[((b * w.chunks + k) * Di + c) * N + n] = h[i];
    }
    if (k + 1 == w.chunks) break;  // the last chunk's end state is never needed
    __syncthreads();
    load_bc<NS>(a, b, t0, nt, sB, nullptr, false);
    float uu[kChunk], dt[kChunk];
#pragma unroll
    for (int tt = 0; tt < kChunk; ++tt) uu[tt] = live && tt < nt ? a.u[b * a.u_b + (t0 + tt) * a.u_t + c] : 0.f;
    chunk_dt(a, b, c, live, t0, nt, bias, dt);
    __syncthreads();
#pragma unroll
    for (int tt = 0; tt < kChunk; ++tt) {
      const float du = dt[tt] * uu[tt];
#pragma unroll
      for (int i = 0; i < kNpt; ++i) h[i] = exp2f(dt[tt] * A2[i]) * h[i] + du * sB[tt][s * kNpt + i];
    }
  }
}

template <int SPLIT>
__global__ void __launch_bounds__(kThreads) reverse_kernel(ScanArgs a, ScanGradArgs g, BwdWork w) {
  constexpr int kCh = kThreads / SPLIT, NS = kNpt * SPLIT;
  __shared__ float sB[kChunk][NS], sC[kChunk][NS];
  __shared__ float wB[kWarps][kChunk][NS], wC[kWarps][kChunk][NS];  // per warp: the sums over its channels
  const int N = int(a.d_state);
  const int64_t b = blockIdx.y, L = a.seqlen, Di = a.d_inner;
  const int tid = threadIdx.x, s = tid % SPLIT, lane = tid % 32, warp = tid / 32;
  const int64_t c = int64_t(blockIdx.x) * kCh + tid / SPLIT;
  const bool live = c < Di;
  float A[kNpt], A2[kNpt], gs[kNpt], dA[kNpt];
#pragma unroll
  for (int i = 0; i < kNpt; ++i) {
    const int n = s * kNpt + i;
    A[i] = live && n < N ? a.A[c * N + n] : 0.f;
    A2[i] = A[i] * kLog2e;
    gs[i] = 0.f;
    dA[i] = 0.f;
  }
  const float Dc = live && a.D ? a.D[c] : 0.f;
  const float bias = live && a.delta_bias ? a.delta_bias[c] : 0.f;
  float dD = 0.f, dbias = 0.f;

  for (int64_t k = w.chunks - 1; k >= 0; --k) {
    const int64_t t0 = k * kChunk;
    const int nt = L - t0 < kChunk ? int(L - t0) : kChunk;
    __syncthreads();  // the previous chunk's B, C and warp sums are consumed
    load_bc<NS>(a, b, t0, nt, sB, sC, true);
    float uu[kChunk], dt[kChunk], dy[kChunk], zz[kChunk];
#pragma unroll
    for (int tt = 0; tt < kChunk; ++tt) {
      const bool on = live && tt < nt;
      const int64_t t = t0 + tt;
      uu[tt] = on ? a.u[b * a.u_b + t * a.u_t + c] : 0.f;
      dy[tt] = on ? g.dout[b * g.dout_b + t * g.dout_t + c] : 0.f;
      zz[tt] = on && a.z ? a.z[b * a.z_b + t * a.z_t + c] : 0.f;
    }
    chunk_dt(a, b, c, live, t0, nt, bias, dt);
    float hs[kChunk + 1][kNpt];
#pragma unroll
    for (int i = 0; i < kNpt; ++i) {
      const int n = s * kNpt + i;
      hs[0][i] = live && n < N ? w.ck[((b * w.chunks + k) * Di + c) * N + n] : 0.f;
    }
    __syncthreads();
    // Forward through the chunk: its states in registers, y for the gate's gradient.
#pragma unroll
    for (int tt = 0; tt < kChunk; ++tt) {
      const float du = dt[tt] * uu[tt];
      float acc = 0.f;
#pragma unroll
      for (int i = 0; i < kNpt; ++i) {
        const int n = s * kNpt + i;
        hs[tt + 1][i] = exp2f(dt[tt] * A2[i]) * hs[tt][i] + du * sB[tt][n];
        acc += sC[tt][n] * hs[tt + 1][i];
      }
      if (a.z) {
#pragma unroll
        for (int off = SPLIT / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
        const float y = acc + Dc * uu[tt], z = zz[tt], sg = sigmoid_f(z);
        const float dz = dy[tt] * y * sg * (1.f + z * (1.f - sg));
        dy[tt] *= z * sg;
        if (live && tt < nt && s == tt % SPLIT) g.dz[(b * L + t0 + tt) * Di + c] = dz;
      }
    }
    // Backwards through the chunk.
#pragma unroll
    for (int tt = kChunk - 1; tt >= 0; --tt) {
      const float dyv = dy[tt], u = uu[tt], d = dt[tt];
      float dup = 0.f, ddt = 0.f, vb[kNpt], vc[kNpt];
#pragma unroll
      for (int i = 0; i < kNpt; ++i) {
        const int n = s * kNpt + i;
        const float Bn = sB[tt][n], decay = exp2f(d * A2[i]), hp = hs[tt][i] * decay;
        vc[i] = dyv * hs[tt + 1][i];
        gs[i] += dyv * sC[tt][n];
        dA[i] += gs[i] * hp * d;
        ddt += gs[i] * (hp * A[i] + Bn * u);
        vb[i] = gs[i] * d * u;
        dup += gs[i] * d * Bn;
        gs[i] *= decay;
      }
#pragma unroll
      for (int off = SPLIT / 2; off > 0; off /= 2) {
        dup += __shfl_xor_sync(0xffffffffu, dup, off);
        ddt += __shfl_xor_sync(0xffffffffu, ddt, off);
      }
      // d softplus(raw) / d raw = sigmoid(raw) = 1 - e^-dt (dt = log(1 + e^raw)), no register array for it; the
      // steps past the end contribute nothing.
      ddt = tt < nt ? (a.softplus ? -ddt * expm1f(-d) : ddt) : 0.f;
      dbias += ddt;
      dD += dyv * u;
      if (live && tt < nt && s == tt % SPLIT) {
        g.du[(b * L + t0 + tt) * Di + c] = dup + dyv * Dc;
        g.ddelta[(b * L + t0 + tt) * Di + c] = ddt;
      }
      // dB, dC: the sum over the warp's channels (lanes with the same s), held by lanes 0..SPLIT-1.
#pragma unroll
      for (int i = 0; i < kNpt; ++i) {
#pragma unroll
        for (int off = SPLIT; off < 32; off *= 2) {
          vb[i] += __shfl_xor_sync(0xffffffffu, vb[i], off);
          vc[i] += __shfl_xor_sync(0xffffffffu, vc[i], off);
        }
        if (lane < SPLIT) {
          wB[warp][tt][s * kNpt + i] = vb[i];
          wC[warp][tt][s * kNpt + i] = vc[i];
        }
      }
    }
    __syncthreads();
    const int64_t base = ((b * w.channel_blocks + blockIdx.x) * L + t0) * N;
    for (int i = tid; i < nt * N; i += kThreads) {
      const int tt = i / N, n = i % N;
      float sb = 0.f, sc = 0.f;
#pragma unroll
      for (int q = 0; q < kWarps; ++q) sb += wB[q][tt][n], sc += wC[q][tt][n];
      w.pB[base + i] = sb;
      w.pC[base + i] = sc;
    }
  }
  if (live && s == 0) {
    w.pD[b * Di + c] = dD;
    w.pbias[b * Di + c] = dbias;
  }
#pragma unroll
  for (int i = 0; i < kNpt; ++i) {
    const int n = s * kNpt + i;
    if (live && n < N) w.pA[(b * Di + c) * N + n] = dA[i];
  }
}

// dB[b, t, n] = sum over channel blocks of the partials, in block order.
__global__ void reduce_bc_kernel(float* dB, float* dC, BwdWork w, int64_t per_batch, int64_t total) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t b = i / per_batch, r = i % per_batch;
  float sb = 0.f, sc = 0.f;
  for (int64_t q = 0; q < w.channel_blocks; ++q) {
    const int64_t j = (b * w.channel_blocks + q) * per_batch + r;
    sb += w.pB[j];
    sc += w.pC[j];
  }
  dB[i] = sb;
  dC[i] = sc;
}

// dA [d_inner, d_state], dD and ddelta_bias [d_inner]: the per-sequence partials summed in batch order.
__global__ void reduce_channel_kernel(ScanGradArgs g, BwdWork w, int64_t batch, int64_t Di, int64_t N) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < Di * N) {
    float s = 0.f;
    for (int64_t b = 0; b < batch; ++b) s += w.pA[b * Di * N + i];
    g.dA[i] = s;
  } else if (i < Di * N + Di) {
    const int64_t c = i - Di * N;
    float sd = 0.f, sb = 0.f;
    for (int64_t b = 0; b < batch; ++b) sd += w.pD[b * Di + c], sb += w.pbias[b * Di + c];
    if (g.dD) g.dD[c] = sd;
    if (g.ddelta_bias) g.ddelta_bias[c] = sb;
  }
}

unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

template <int SPLIT>
void launch_checkpoints(const ScanArgs& a, const BwdWork& w, int64_t blocks, cudaStream_t st) {
  checkpoint_kernel<SPLIT><<<dim3(unsigned(blocks), unsigned(a.batch)), kThreads, 0, st>>>(a, w);
  check_cuda(cudaGetLastError(), "selective scan backward: checkpoint kernel launch");
}

template <int SPLIT>
void launch_reverse(const ScanArgs& a, const ScanGradArgs& g, const BwdWork& w, cudaStream_t st) {
  reverse_kernel<SPLIT><<<dim3(unsigned(w.channel_blocks), unsigned(a.batch)), kThreads, 0, st>>>(a, g, w);
  check_cuda(cudaGetLastError(), "selective scan backward: reverse kernel launch");
}

}  // namespace

std::string selective_scan_backward_cuda(const ScanArgs& a, const ScanGradArgs& g, void* stream, int generation) {
  const cudaStream_t st = static_cast<cudaStream_t>(stream ? stream : cuda_stream());
  const int64_t Bt = a.batch, L = a.seqlen, Di = a.d_inner, N = a.d_state;
  if (Bt == 0 || L == 0 || Di == 0) {  // sums over nothing are zero; the per-token gradients are empty
    auto zero = [&](float* p, int64_t n) {
      if (p && n > 0) check_cuda(cudaMemsetAsync(p, 0, size_t(n) * 4, st), "selective scan backward: zeroing");
    };
    zero(g.dA, Di * N), zero(g.dD, Di), zero(g.ddelta_bias, Di), zero(g.dB, Bt * L * N), zero(g.dC, Bt * L * N);
    return "cuda.scan_bwd.empty";
  }
  const ScanBwdPlan p = plan_scan_backward(Bt, L, Di, N, generation);
  float* ws = nullptr;
  check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&ws), size_t(p.workspace_bytes()), st),
             "cudaMallocAsync(selective scan backward workspace)");
  BwdWork w;
  w.ck = ws;
  w.pB = w.ck + p.checkpoint_floats;
  w.pC = w.pB + p.partial_bc_floats;
  w.pA = w.pC + p.partial_bc_floats;
  w.pD = w.pA + Bt * Di * N;
  w.pbias = w.pD + Bt * Di;
  w.chunks = p.chunks;
  w.channel_blocks = p.channel_blocks;
  if (p.checkpoint_split == 4) launch_checkpoints<4>(a, w, p.checkpoint_blocks, st);
  else launch_checkpoints<16>(a, w, p.checkpoint_blocks, st);
  if (p.one_state) launch_bwd_reverse_one_state(a, g, w, st);
  else if (p.split == 4) launch_reverse<4>(a, g, w, st);
  else launch_reverse<16>(a, g, w, st);
  const int64_t bc = Bt * L * N;
  reduce_bc_kernel<<<blocks_for(bc, 256), 256, 0, st>>>(g.dB, g.dC, w, L * N, bc);
  reduce_channel_kernel<<<blocks_for(Di * N + Di, 256), 256, 0, st>>>(g, w, Bt, Di, N);
  check_cuda(cudaGetLastError(), "selective scan backward: reduce kernel launch");
  check_cuda(cudaFreeAsync(ws, st), "cudaFreeAsync(selective scan backward workspace)");
  if (p.one_state) return "cuda.scan_bwd.v2.n16.split16";
  return p.split == 4 ? "cuda.scan_bwd.n16.split4" : "cuda.scan_bwd.n64.split16";
}

}  // namespace flashkit::kernels
