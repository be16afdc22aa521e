// Device primitives of the scan v4 (scan_v4.cu): cp.async with a source size (bytes past it are zero-filled; 0 reads
// nothing and zeroes the destination), commit / wait groups, and ex2.approx. Their own header so that the CPU
// emulation (tools/cuda_emu/) can supply deferred-copy versions under the same include path.
#pragma once
#include <cstdint>

namespace flashkit::kernels {

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
// 16 bytes, both addresses 16-byte aligned.
__device__ __forceinline__ void cp_async16(float* dst, const float* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async4(float* dst, const float* src, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Until at most N of this thread's committed groups are pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// 2^x; A is pre-scaled by log2(e), so exp(dt A) = ex2(dt A log2 e). Flushes denormal results to zero, which only
// affects decays below 1e-38 (a state already forgotten).
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace flashkit::kernels
