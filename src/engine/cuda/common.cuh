// Device helpers shared by the engine kernels: checked launches (with programmatic dependent launch on sm_90),
// bf16 packing, warp/block reductions.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>

#include "core/cuda_check.hpp"
#include "core/cuda_launch.hpp"
#include "core/pdl.cuh"
#include "engine/cuda/kernels.hpp"
#include "flashkit/error.hpp"

namespace flashkit::engine::cuda {

using flashkit::check_cuda;  // core/cuda_check.hpp

// Launches `kernel` with the PDL attribute when enabled and, when cluster_x > 1, as thread-block clusters of
// cluster_x blocks along x (sm_90; grid.x a multiple of cluster_x); checks the launch.
template <typename... KArgs, typename... Args>
void launch_clustered(const char* name, unsigned cluster_x, void (*kernel)(KArgs...), dim3 grid, dim3 block,
                      size_t smem, cudaStream_t stream, Args&&... args) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  check_cuda(launch_ex(kernel, grid, block, smem, stream, pdl_enabled(), cluster_x, std::forward<Args>(args)...), name);
}
// Launches `kernel` with the PDL attribute when enabled; checks the launch.
template <typename... KArgs, typename... Args>
void launch(const char* name, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            Args&&... args) {
  launch_clustered(name, 1u, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

// PDL: let the next grid start launching (it still waits for this grid in pdl_wait), and wait for the previous one.
using flashkit::pdl_trigger;
using flashkit::pdl_wait;
// Bulk prefetch of [p, p + bytes) into L2 (sm_90; a no-op elsewhere). p 16-byte aligned, bytes a multiple of 16.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (bytes >= 16) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes & ~15u) : "memory");
#endif
}

__device__ __forceinline__ float bf2f(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }
__device__ __forceinline__ uint16_t f2bf(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
// 8 bf16 (one uint4) -> 8 floats
__device__ __forceinline__ void unpack8(const uint4& u, float* f) {
  f[0] = __uint_as_float(u.x << 16), f[1] = __uint_as_float(u.x & 0xffff0000u);
  f[2] = __uint_as_float(u.y << 16), f[3] = __uint_as_float(u.y & 0xffff0000u);
  f[4] = __uint_as_float(u.z << 16), f[5] = __uint_as_float(u.z & 0xffff0000u);
  f[6] = __uint_as_float(u.w << 16), f[7] = __uint_as_float(u.w & 0xffff0000u);
}
__device__ __forceinline__ uint32_t pack2(float a, float b) {
  return uint32_t(f2bf(a)) | (uint32_t(f2bf(b)) << 16);
}

template <bool BF16>
__device__ __forceinline__ float ld_act(const void* p, int64_t i) {
  if constexpr (BF16) return bf2f(static_cast<const uint16_t*>(p)[i]);
  else return static_cast<const float*>(p)[i];
}
template <bool BF16>
__device__ __forceinline__ void st_act(void* p, int64_t i, float v) {
  if constexpr (BF16) static_cast<uint16_t*>(p)[i] = f2bf(v);
  else static_cast<float*>(p)[i] = v;
}
__device__ __forceinline__ float ld_any(const void* p, bool bf16, int64_t i) {
  return bf16 ? bf2f(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Sum over the block (blockDim.x a multiple of 32, <= 1024); `red` holds >= 32 floats; every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // red may still be read by a previous call
  if (lane == 0) red[w] = v;
  __syncthreads();
  float t = lane < nw ? red[lane] : 0.0f;
  return warp_sum(t);
}

__device__ __forceinline__ float act_fn(Act a, float g) {
  if (a == Act::silu) return g / (1.0f + __expf(-g));
  // gelu_pytorch_tanh: 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))
  const float u = 0.7978845608028654f * (g + 0.044715f * g * g * g);
  return 0.5f * g * (1.0f + tanhf(u));
}

}  // namespace flashkit::engine::cuda
