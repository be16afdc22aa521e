// Stands in for src/engine/cuda/common.cuh when an engine kernel runs on the CPU emulation (cuda_runtime.h here;
// tools/cuda_emu/run_mamba_step.sh): the helpers the kernel uses, with the launch through emu_launch. Never part of
// the library.
#pragma once
#define cudaStream_t emu_stream_t  // kernels.hpp declares the real type; the emulation's is a void*
#include "cuda_runtime.h"
#undef cudaStream_t
#include "engine/cuda/kernels.hpp"
#include "flashkit/dtype.hpp"
#include "flashkit/error.hpp"

struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
using std::max;
using std::min;
inline uint4 __ldcs(const uint4* p) { return *p; }
inline void __threadfence() {}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  const unsigned old = __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
  return old;
}
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr, int) { *v = 232448; return cudaSuccess; }
template <class F>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F, int, size_t) { *n = 2; return cudaSuccess; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint4 __ldg(const uint4* p) { return *p; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
#define __noinline__
inline void __trap() { std::abort(); }

namespace flashkit::engine::cuda {
using flashkit::fail;
using flashkit::Status;
inline float bf2f(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }
inline uint16_t f2bf(float f) { return flashkit::f32_to_bf16(f); }
inline void pdl_trigger() {}
inline void pdl_wait() {}
inline void unpack8(const uint4& u, float* f) {
  f[0] = __uint_as_float(u.x << 16), f[1] = __uint_as_float(u.x & 0xffff0000u);
  f[2] = __uint_as_float(u.y << 16), f[3] = __uint_as_float(u.y & 0xffff0000u);
  f[4] = __uint_as_float(u.z << 16), f[5] = __uint_as_float(u.z & 0xffff0000u);
  f[6] = __uint_as_float(u.w << 16), f[7] = __uint_as_float(u.w & 0xffff0000u);
}
inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
inline float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) red[w] = v;
  __syncthreads();
  float t = lane < nw ? red[lane] : 0.0f;
  return warp_sum(t);
}
inline float act_fn(Act a, float g) {
  if (a == Act::silu) return g / (1.0f + std::exp(-g));
  const float u = 0.7978845608028654f * (g + 0.044715f * g * g * g);
  return 0.5f * g * (1.0f + std::tanh(u));
}
inline void prefetch_l2(const void*, uint32_t) {}
// The launch settings the GEMV reads (device.cpp on the GPU): a small machine, so grids are a few blocks.
inline int sm_count() { return 3; }
inline bool gemv_prefetch_enabled() { return false; }
inline bool gemv_streaming_loads() { return true; }
inline void check_cuda(cudaError_t, const char*) {}
template <class K, class... A>
void launch(const char*, K kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t, A... args) {
  emu_launch(grid, block, smem, [&] { kernel(args...); });
}
template <class K, class... A>
void launch_clustered(const char*, unsigned cluster, K kernel, dim3 grid, dim3 block, size_t, cudaStream_t, A... args) {
  emu_launch_clusters(grid, block, cluster, [&] { kernel(args...); });
}
}  // namespace flashkit::engine::cuda
