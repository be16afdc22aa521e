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
#include "core/device_math.cuh"
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

using flashkit::bf2f;
using flashkit::block_sum;
using flashkit::f2bf;
using flashkit::ld_any;
using flashkit::pack2;
using flashkit::unpack8;
using flashkit::warp_max;
using flashkit::warp_sum;

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
__device__ __forceinline__ float act_fn(Act a, float g) {
  if (a == Act::silu) return g / (1.0f + __expf(-g));
  // gelu_pytorch_tanh: 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))
  const float u = 0.7978845608028654f * (g + 0.044715f * g * g * g);
  return 0.5f * g * (1.0f + tanhf(u));
}

}  // namespace flashkit::engine::cuda
