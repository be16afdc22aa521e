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
#include <cuda_runtime.h>

#include <algorithm>

#include "core/cuda_check.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/cuda/ssm/ssm_cuda.hpp"

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

cudaStream_t pick(void* stream) { return static_cast<cudaStream_t>(stream ? stream : cuda_stream()); }

template <int NPT, int SPLIT, int TC>
void launch(const ScanArgs& a, void* stream) {
  constexpr int kChannels = kThreads / SPLIT;
  const dim3 grid(unsigned((a.d_inner + kChannels - 1) / kChannels), unsigned(a.batch));
  const size_t smem = size_t(2) * TC * size_t(a.d_state) * sizeof(float);
  scan_kernel<NPT, SPLIT, TC><<<grid, kThreads, smem, pick(stream)>>>(a);
  check_cuda(cudaGetLastError(), "selective scan kernel launch");
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

std::string selective_scan_cuda(const ScanArgs& a, void* stream) {
  if (a.batch == 0 || a.d_inner == 0 || a.seqlen == 0) return "cuda.scan.empty";
  if (a.d_state <= 16) {
    launch<4, 4, 16>(a, stream);
    return "cuda.scan.n16.split4";
  }
  launch<16, 4, 16>(a, stream);
  return "cuda.scan.n64.split4";
}

std::string selective_scan_step_cuda(const ScanArgs& a, void* stream) {
  if (a.batch == 0 || a.d_inner == 0) return "cuda.scan_step.empty";
  if (a.d_state <= 16) {
    launch<1, 16, 1>(a, stream);
    return "cuda.scan_step.n16.split16";
  }
  launch<4, 16, 1>(a, stream);
  return "cuda.scan_step.n64.split16";
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
