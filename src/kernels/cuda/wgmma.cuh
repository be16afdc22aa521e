// Hopper (sm_90a) tile primitives: warpgroup MMA (wgmma.mma_async) on shared-memory tiles in the 128-byte
// swizzled "panel" layout, plus the fences and barriers that go with it. Only the sm_90a build compiles the
// instructions; other targets get stubs that trap (the host dispatcher checks the kernel's binary version
// before choosing a Hopper kernel, so they never run).
//
// Panel layout of an R x W tile of 16-bit elements (W a multiple of 64): W/64 panels, each R rows of 128 bytes
// (64 elements), panel p holding columns [64p, 64p+64). Inside a panel, 16-byte chunk c of row r sits at
// chunk c ^ (r & 7): the hardware's 128B swizzle, which it applies to address bits [4,7) ^ [7,10), so every
// panel must start on a 1024-byte boundary. The same layout serves as
//  - a K-major operand (rows = M or N, columns = K): descriptor SBO = 1024 (8 rows), LBO unused; step K by 16
//    elements with +32 bytes inside a panel and by a whole panel every 64 elements;
//  - an MN-major operand (rows = K, columns = M or N, "transposed"): SBO = 1024 (8 K rows), LBO = the panel
//    stride R*128 (next 64 columns); step K by 16 rows with +2048 bytes.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace flashkit::cuda {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FK_SM90_ENABLED 1
#else
#define FK_SM90_ENABLED 0
#endif

// Byte offset of (row, 16-byte chunk) in an R-row panel-layout tile.
template <int R>
__device__ __forceinline__ uint32_t pswz(int row, int chunk) {
  return uint32_t((chunk >> 3) * (R * 128) + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

// Shared-memory matrix descriptor, 128B swizzle (mode 1 in bits 62-63), base offset 0 (panels are 1024-aligned).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((lbo_bytes & 0x3FFFF) >> 4) << 16) |
         (uint64_t((sbo_bytes & 0x3FFFF) >> 4) << 32) | (uint64_t(1) << 62);
}

template <typename T, int N>
struct Wgmma;

#if FK_SM90_ENABLED
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Ordinary shared-memory writes (st.shared, cp.async) made visible to the tensor cores' async proxy.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
#include "kernels/cuda/wgmma_ops.inc"
#else
__device__ __forceinline__ void wgmma_fence() { __trap(); }
__device__ __forceinline__ void wgmma_commit() { __trap(); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { __trap(); }
__device__ __forceinline__ void fence_proxy_async() { __trap(); }
template <typename T, int N>
struct Wgmma {
  template <int TransA, int TransB>
  static __device__ __forceinline__ void ss(float*, uint64_t, uint64_t, int) { __trap(); }
  template <int TransB>
  static __device__ __forceinline__ void rs(float*, const uint32_t*, uint64_t, int) { __trap(); }
};
#endif

// Barrier among `threads` threads (a multiple of 32) of the CTA, id 1..15 (0 is __syncthreads).
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Registers that accumulators must not be touched through while a wgmma is in flight: make the compiler treat
// them as read and written here (keeps it from moving accesses across wgmma_wait).
// Also used before wgmma_fence() on registers a wgmma reads (accumulators, A fragments), so that the compiler
// cannot sink their last definition past the fence (ptxas would then serialize the wgmmas, warning C7515).
template <int NR>
__device__ __forceinline__ void wgmma_fence_regs(float* d) {
#pragma unroll
  for (int i = 0; i < NR; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int NR>
__device__ __forceinline__ void wgmma_fence_regs(uint32_t* d) {
#pragma unroll
  for (int i = 0; i < NR; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

}  // namespace flashkit::cuda
