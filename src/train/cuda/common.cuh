// Helpers shared by the training kernels (src/train/cuda/*.cu): argument checks, launch checks, bf16 packing,
// 16-byte vector loads and stores, warp/block sums. Plain launches (<<<>>>): training steps are long, so the
// programmatic dependent launch the engine's decode path uses would buy nothing here.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "core/cuda_check.hpp"
#include "flashkit/error.hpp"
#include "train/cuda/kernels.hpp"

namespace flashkit::train::cuda {

using flashkit::check_cuda;

// ---------------------------------------------------------------- host side: checks
[[noreturn]] inline void bad_arg(const char* fn, const std::string& what) {
  fail(Status::invalid_argument, std::string(fn) + ": " + what);
}
inline void need(bool ok, const char* fn, const std::string& what) {
  if (!ok) bad_arg(fn, what);
}
// A size argument: >= 0 (and <= max).
inline void need_size(int64_t v, const char* fn, const char* name,
                      int64_t max = std::numeric_limits<int32_t>::max()) {
  if (v < 0 || v > max)
    bad_arg(fn, std::string(name) + " must be in [0, " + std::to_string(max) + "], got " + std::to_string(v));
}
// A pointer that must be set because its tensor is not empty.
inline void need_ptr(const void* p, const char* fn, const char* name) {
  if (!p) bad_arg(fn, std::string(name) + " is null");
}
inline void check_launch(const char* name) { check_cuda(cudaGetLastError(), name); }
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
inline unsigned grid_for(int64_t work, int threads, int64_t cap = 4096) {
  return unsigned(std::clamp<int64_t>((work + threads - 1) / threads, 1, cap));
}

// Bits of bf16 (the kernels move raw uint16_t and convert in registers).
inline const uint16_t* bits(const bf16* p) { return reinterpret_cast<const uint16_t*>(p); }
inline uint16_t* bits(bf16* p) { return reinterpret_cast<uint16_t*>(p); }

// ---------------------------------------------------------------- device side
__device__ __forceinline__ float bf2f(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }
__device__ __forceinline__ uint16_t f2bf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

// Element loads/stores of either storage type, converted to/from f32.
__device__ __forceinline__ float ld1(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld1(const uint16_t* p, int64_t i) { return bf2f(p[i]); }
__device__ __forceinline__ void st1(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st1(uint16_t* p, int64_t i, float v) { p[i] = f2bf(v); }

// 8 consecutive elements starting at p + i (16-byte aligned for bf16, 32-byte for f32: i a multiple of 8 and p
// 16-byte aligned suffices, as two float4 cover the f32 case).
__device__ __forceinline__ void ld8(const uint16_t* p, int64_t i, float* f) {
  const uint4 u = *reinterpret_cast<const uint4*>(p + i);
  f[0] = __uint_as_float(u.x << 16), f[1] = __uint_as_float(u.x & 0xffff0000u);
  f[2] = __uint_as_float(u.y << 16), f[3] = __uint_as_float(u.y & 0xffff0000u);
  f[4] = __uint_as_float(u.z << 16), f[5] = __uint_as_float(u.z & 0xffff0000u);
  f[6] = __uint_as_float(u.w << 16), f[7] = __uint_as_float(u.w & 0xffff0000u);
}
__device__ __forceinline__ void ld8(const float* p, int64_t i, float* f) {
  const float4 a = *reinterpret_cast<const float4*>(p + i), b = *reinterpret_cast<const float4*>(p + i + 4);
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
__device__ __forceinline__ uint32_t pack2(float a, float b) { return uint32_t(f2bf(a)) | (uint32_t(f2bf(b)) << 16); }
__device__ __forceinline__ void st8(uint16_t* p, int64_t i, const float* f) {
  *reinterpret_cast<uint4*>(p + i) = make_uint4(pack2(f[0], f[1]), pack2(f[2], f[3]), pack2(f[4], f[5]), pack2(f[6], f[7]));
}
__device__ __forceinline__ void st8(float* p, int64_t i, const float* f) {
  *reinterpret_cast<float4*>(p + i) = make_float4(f[0], f[1], f[2], f[3]);
  *reinterpret_cast<float4*>(p + i + 4) = make_float4(f[4], f[5], f[6], f[7]);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Sum over the block (blockDim.x a multiple of 32, <= 1024); `red` holds >= 32 floats; every thread gets the
// result. The tree is fixed, so the result is deterministic.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // red may still be read by a previous call
  if (lane == 0) red[w] = v;
  __syncthreads();
  return warp_sum(lane < nw ? red[lane] : 0.0f);
}

}  // namespace flashkit::train::cuda
