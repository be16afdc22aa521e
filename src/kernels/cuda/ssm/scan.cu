// The fused selective scan (include/flashkit/ssm.hpp) for CUDA. One pass over time per (batch, channel):
//   * a block owns 128 / SPLIT channels of one sequence; SPLIT adjacent threads share a channel, each carrying
//     NPT of its d_state states in registers (SPLIT > 1 multiplies the threads in flight, which a scan that walks
//     time sequentially needs to keep enough loads outstanding for HBM); y is the shuffle-sum of their partials;
//   * time advances in chunks of TC steps: the chunk's B and C rows (shared by every channel of the block) go to
//     shared memory once, each thread loads its u, delta, z for the whole chunk up front (independent loads,
//     issued together), then runs the recurrence from registers;
//   * u, delta, z, B, C are read once, y written once, the state read/written once (when given): the expanded
//     state [seqlen, d_inner, d_state] never exists in HBM.
// The decode step is the same kernel at seqlen 1 with SPLIT = 16 (one or a few states per thread: the step is a
// pass over the state, so it wants every thread it can get).
// v2 (scan_v2_kernel, d_state <= 16; docs/worklog/ssm-scan.md): v1 ran at 8% of HBM, latency-bound: every time step
// was its own basic block (guards per state, the tail break, the store), so the softplus, the two shuffles and the
// gate of one step could not overlap those of the next. v2 keeps v1's ownership but computes the per-step channel
// terms (dt, the gate) for the whole chunk first, runs a branch-free recurrence (the tail and states beyond d_state
// become dt = 0, u = 0, B = C = 0: h unchanged, no contribution), then reduces and writes the chunk's outputs, each
// of the SPLIT threads storing TC / SPLIT of them. v3: scan_v3.cu; v4: scan_v4.cu (generation 13: scan_v4_pipe.cu;
// the retired v5 and generation 12 are in dev/cuda/ssm/). Kernel choice: src/kernels/ssm_choice.hpp.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/cuda_check.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/cuda/ssm/ssm_cuda.hpp"
#include "kernels/ssm_choice.hpp"

namespace flashkit::kernels {
namespace {

constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float softplus_f(float x) { return x > 20.f ? x : log1pf(__expf(x)); }

template <int NPT, int SPLIT, int TC>
__global__ void __launch_bounds__(kThreads) scan_kernel(ScanArgs a) {
  constexpr int kChannels = kThreads / SPLIT;
  extern __shared__ float smem[];  // B chunk [TC][N], then C chunk [TC][N]
  const int N = int(a.d_state);
  float* sB = smem;
  float* sC = smem + TC * N;
  const int64_t b = blockIdx.y;
  const int tid = threadIdx.x, s = tid % SPLIT;
  const int64_t c = int64_t(blockIdx.x) * kChannels + tid / SPLIT;
  const bool live = c < a.d_inner;

  float h[NPT], A2[NPT];
#pragma unroll
  for (int i = 0; i < NPT; ++i) {
    const int n = s * NPT + i;
    const bool on = live && n < N;
    A2[i] = on ? a.A[c * N + n] * kLog2e : 0.f;  // exp(dt * A) = exp2(dt * A * log2(e))
    h[i] = on && a.state ? a.state[(b * a.d_inner + c) * N + n] : 0.f;
  }
  const float Dc = live && a.D ? a.D[c] : 0.f;
  const float bias = live && a.delta_bias ? a.delta_bias[c] : 0.f;

  for (int64_t t0 = 0; t0 < a.seqlen; t0 += TC) {
    const int nt = a.seqlen - t0 < TC ? int(a.seqlen - t0) : TC;
    __syncthreads();  // the previous chunk's B/C are consumed
    for (int i = tid; i < nt * N; i += kThreads) {
      const int tt = i / N, n = i % N;
      sB[i] = a.B[b * a.B_b + (t0 + tt) * a.B_t + n];
      sC[i] = a.C[b * a.C_b + (t0 + tt) * a.C_t + n];
    }
    float uu[TC], dd[TC], zz[TC];
#pragma unroll
    for (int tt = 0; tt < TC; ++tt) {
      const bool on = live && tt < nt;
      const int64_t t = t0 + tt;
      uu[tt] = on ? a.u[b * a.u_b + t * a.u_t + c] : 0.f;
      dd[tt] = on ? a.delta[b * a.dl_b + t * a.dl_t + c] : 0.f;
      zz[tt] = on && a.z ? a.z[b * a.z_b + t * a.z_t + c] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int tt = 0; tt < TC; ++tt) {
      if (tt >= nt) break;  // uniform over the block
      float dt = dd[tt] + bias;
      if (a.softplus) dt = softplus_f(dt);
      const float du = dt * uu[tt];
      float y = 0.f;
#pragma unroll
      for (int i = 0; i < NPT; ++i) {
        const int n = s * NPT + i;
        if (n < N) {
          h[i] = exp2f(dt * A2[i]) * h[i] + du * sB[tt * N + n];
          y += sC[tt * N + n] * h[i];
        }
      }
#pragma unroll
      for (int off = SPLIT / 2; off > 0; off /= 2) y += __shfl_xor_sync(0xffffffffu, y, off);
      if (s == 0 && live) {
        y += Dc * uu[tt];
        if (a.z) y *= zz[tt] / (1.f + expf(-zz[tt]));
        a.y[b * a.y_b + (t0 + tt) * a.y_t + c] = y;
      }
    }
  }
  if (a.state)
#pragma unroll
    for (int i = 0; i < NPT; ++i) {
      const int n = s * NPT + i;
      if (live && n < N) a.state[(b * a.d_inner + c) * N + n] = h[i];
    }
}

template <int NPT, int SPLIT, int TC>
__global__ void __launch_bounds__(kThreads, 3) scan_v2_kernel(ScanArgs a) {
  constexpr int kChannels = kThreads / SPLIT, NS = NPT * SPLIT;
  static_assert(TC % SPLIT == 0, "each thread of a channel stores TC / SPLIT outputs");
  __shared__ float sB[TC][NS], sC[TC][NS];  // zero beyond d_state and beyond the last step
  const int N = int(a.d_state);
  const int64_t b = blockIdx.y;
  const int tid = threadIdx.x, s = tid % SPLIT;
  const int64_t c = int64_t(blockIdx.x) * kChannels + tid / SPLIT;
  const bool live = c < a.d_inner;

  float h[NPT], A2[NPT];
#pragma unroll
  for (int i = 0; i < NPT; ++i) {
    const int n = s * NPT + i;
    const bool on = live && n < N;
    A2[i] = on ? a.A[c * N + n] * kLog2e : 0.f;
    h[i] = on && a.state ? a.state[(b * a.d_inner + c) * N + n] : 0.f;
  }
  const float Dc = live && a.D ? a.D[c] : 0.f;
  const float bias = live && a.delta_bias ? a.delta_bias[c] : 0.f;

  for (int64_t t0 = 0; t0 < a.seqlen; t0 += TC) {
    const int nt = a.seqlen - t0 < TC ? int(a.seqlen - t0) : TC;
    __syncthreads();  // the previous chunk's B/C are consumed
    for (int i = tid; i < TC * NS; i += kThreads) {
      const int tt = i / NS, n = i % NS;
      const bool on = tt < nt && n < N;
      sB[tt][n] = on ? a.B[b * a.B_b + (t0 + tt) * a.B_t + n] : 0.f;
      sC[tt][n] = on ? a.C[b * a.C_b + (t0 + tt) * a.C_t + n] : 0.f;
    }
    float uu[TC], dt[TC], gate[TC];
#pragma unroll
    for (int tt = 0; tt < TC; ++tt) {
      const bool on = live && tt < nt;
      const int64_t t = t0 + tt;
      uu[tt] = on ? a.u[b * a.u_b + t * a.u_t + c] : 0.f;
      dt[tt] = on ? a.delta[b * a.dl_b + t * a.dl_t + c] : 0.f;
      gate[tt] = on && a.z ? a.z[b * a.z_b + t * a.z_t + c] : 0.f;
    }
    // The channel's per-step terms, independent across steps. Steps past the end get dt = 0 (and u = 0): exp2(0) = 1
    // and du = 0 leave h as it is.
    if (a.softplus) {
#pragma unroll
      for (int tt = 0; tt < TC; ++tt) dt[tt] = softplus_f(dt[tt] + bias);
    } else {
#pragma unroll
      for (int tt = 0; tt < TC; ++tt) dt[tt] += bias;
    }
#pragma unroll
    for (int tt = 0; tt < TC; ++tt) dt[tt] = live && tt < nt ? dt[tt] : 0.f;
    if (a.z) {
#pragma unroll
      for (int tt = 0; tt < TC; ++tt) gate[tt] = gate[tt] / (1.f + expf(-gate[tt]));
    } else {
#pragma unroll
      for (int tt = 0; tt < TC; ++tt) gate[tt] = 1.f;
    }
    __syncthreads();
    // The recurrence: the only dependence between steps is h (one FMA per step and state).
    float yp[TC];
#pragma unroll
    for (int tt = 0; tt < TC; ++tt) {
      const float du = dt[tt] * uu[tt];
      float acc = 0.f;
#pragma unroll
      for (int i = 0; i < NPT; ++i) {
        const int n = s * NPT + i;
        h[i] = exp2f(dt[tt] * A2[i]) * h[i] + du * sB[tt][n];
        acc += sC[tt][n] * h[i];
      }
      yp[tt] = acc;
    }
#pragma unroll
    for (int tt = 0; tt < TC; ++tt) {
#pragma unroll
      for (int off = SPLIT / 2; off > 0; off /= 2) yp[tt] += __shfl_xor_sync(0xffffffffu, yp[tt], off);
      yp[tt] = (yp[tt] + Dc * uu[tt]) * gate[tt];
    }
    // Every thread of the channel holds the chunk's outputs; thread s stores steps s, s + SPLIT, ...
#pragma unroll
    for (int j = 0; j < TC / SPLIT; ++j) {
      float y = yp[j * SPLIT];
#pragma unroll
      for (int q = 1; q < SPLIT; ++q) y = s == q ? yp[j * SPLIT + q] : y;
      const int tt = j * SPLIT + s;
      if (live && tt < nt) a.y[b * a.y_b + (t0 + tt) * a.y_t + c] = y;
    }
  }
  if (a.state)
#pragma unroll
    for (int i = 0; i < NPT; ++i) {
      const int n = s * NPT + i;
      if (live && n < N) a.state[(b * a.d_inner + c) * N + n] = h[i];
    }
}

cudaStream_t pick(void* stream) { return static_cast<cudaStream_t>(stream ? stream : cuda_stream()); }

template <int NPT, int SPLIT, int TC>
void launch(const ScanArgs& a, void* stream) {
  constexpr int kChannels = kThreads / SPLIT;
  const dim3 grid(unsigned((a.d_inner + kChannels - 1) / kChannels), unsigned(a.batch));
  const size_t smem = size_t(2) * TC * size_t(a.d_state) * sizeof(float);
  scan_kernel<NPT, SPLIT, TC><<<grid, kThreads, smem, pick(stream)>>>(a);
  check_cuda(cudaGetLastError(), "selective scan kernel launch");
}

template <int NPT, int SPLIT, int TC>
void launch_v2(const ScanArgs& a, void* stream) {
  constexpr int kChannels = kThreads / SPLIT;
  const dim3 grid(unsigned((a.d_inner + kChannels - 1) / kChannels), unsigned(a.batch));
  scan_v2_kernel<NPT, SPLIT, TC><<<grid, kThreads, 0, pick(stream)>>>(a);
  check_cuda(cudaGetLastError(), "selective scan kernel launch");
}

std::string run_scan(ScanKernel k, const ScanArgs& a, void* stream) {
  switch (k) {
    case ScanKernel::v1_n16: launch<4, 4, 16>(a, stream); break;
    case ScanKernel::v1_n64: launch<16, 4, 16>(a, stream); break;
    case ScanKernel::v2_n16: launch_v2<4, 4, 16>(a, stream); break;
    case ScanKernel::v3_n16: launch_scan_v3(a, stream, 16, 1); break;
    case ScanKernel::v3_n16_tc32: launch_scan_v3(a, stream, 32, 1); break;
    case ScanKernel::v3_n16_npt2: launch_scan_v3(a, stream, 16, 2); break;
    case ScanKernel::v4_npt2: launch_scan_v4(a, stream, 2); break;
    case ScanKernel::v4_npt4: launch_scan_v4(a, stream, 4); break;
    case ScanKernel::v4_npt4_fma1: launch_scan_v4(a, stream, 4, 1); break;
    case ScanKernel::v4_npt4_lean: launch_scan_v4(a, stream, 4, 0, true); break;
    case ScanKernel::v4_npt4_lean_pipe: launch_scan_v4_pipe(a, stream); break;
    case ScanKernel::step_n16: launch<1, 16, 1>(a, stream); break;
    case ScanKernel::step_n64: launch<4, 16, 1>(a, stream); break;
  }
  return scan_kernel_name(k);
}

// conv1d: one thread per (batch, channel), the last `width` inputs in registers, channels contiguous across threads.
template <int W>
__global__ void conv_kernel(ConvArgs a) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (c >= a.channels) return;
  const int width = W > 0 ? W : int(a.width);
  float hist[W > 0 ? W : 16], w[W > 0 ? W : 16];
  float* st = a.state ? a.state + (b * a.channels + c) * width : nullptr;
#pragma unroll
  for (int k = 0; k < (W > 0 ? W : 16); ++k)
    if (k < width) {
      hist[k] = st ? st[k] : 0.f;
      w[k] = a.weight[c * width + k];
    }
  const float bias = a.bias ? a.bias[c] : 0.f;
  for (int64_t t = 0; t < a.seqlen; ++t) {
#pragma unroll
    for (int k = 0; k + 1 < (W > 0 ? W : 16); ++k)
      if (k + 1 < width) hist[k] = hist[k + 1];
    hist[width - 1] = a.x[b * a.x_b + t * a.x_t + c];
    float s = bias;
#pragma unroll
    for (int k = 0; k < (W > 0 ? W : 16); ++k)
      if (k < width) s += w[k] * hist[k];
    if (a.silu) s = s / (1.f + expf(-s));
    a.out[b * a.o_b + t * a.o_t + c] = s;
  }
  if (st)
    for (int k = 0; k < width; ++k) st[k] = hist[k];
}

}  // namespace

std::string selective_scan_cuda(const ScanArgs& a, void* stream, int generation) {
  if (a.batch == 0 || a.d_inner == 0 || a.seqlen == 0) return "cuda.scan.empty";
  return run_scan(choose_scan_kernel(a.d_state, false, generation), a, stream);
}

std::string selective_scan_step_cuda(const ScanArgs& a, void* stream) {
  if (a.batch == 0 || a.d_inner == 0) return "cuda.scan_step.empty";
  return run_scan(choose_scan_kernel(a.d_state, true), a, stream);
}

void causal_conv1d_cuda(const ConvArgs& a, void* stream) {
  if (a.batch == 0 || a.channels == 0) return;
  const dim3 grid(unsigned((a.channels + 127) / 128), unsigned(a.batch));
  const cudaStream_t s = pick(stream);
  if (a.width == 4) conv_kernel<4><<<grid, 128, 0, s>>>(a);
  else conv_kernel<0><<<grid, 128, 0, s>>>(a);
  check_cuda(cudaGetLastError(), "causal conv1d kernel launch");
}

}  // namespace flashkit::kernels
