// The occupancy decoder's LayerNorm (no affine) + Linear(width -> 1) head, fused: one warp per row reads the row
// once (kept in registers for widths up to 32 x kPerLane), computes mean and biased variance in f32 (two passes
// over the registers, as LayerNorm does), rounds each normalised value to the dtype as the reference's
// `.type_as(x)` does, and reduces its dot product with w. Only one value per row is written: the reference's
// chain x.float() -> layer_norm -> .half() -> Linear moves ~11 bytes per element through HBM, this kernel 2.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "core/cuda_check.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/cuda/cs149/launch.hpp"

namespace flashkit::cs149::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kPerLane = 32;  // widths up to 1024 from registers; wider rows are re-read (L1/L2)

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float load(const float* p, int64_t i) { return __ldg(p + i); }
__device__ __forceinline__ float load(const __half* p, int64_t i) { return __half2float(__ldg(p + i)); }
__device__ __forceinline__ float round_to(float v, const float*) { return v; }
__device__ __forceinline__ float round_to(float v, const __half*) { return __half2float(__float2half_rn(v)); }
__device__ __forceinline__ void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <typename T, bool kInRegisters>
__global__ void __launch_bounds__(kWarps * 32) layernorm_head_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                                     const T* __restrict__ bias, float eps,
                                                                     int64_t rows, int width, T* __restrict__ out) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= rows) return;
  const T* xr = x + row * width;
  float v[kInRegisters ? kPerLane : 1];
  float sum = 0.f;
  if (kInRegisters) {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int j = lane + 32 * i;
      v[i] = j < width ? load(xr, j) : 0.f;
      sum += v[i];
    }
  } else {
    for (int j = lane; j < width; j += 32) sum += load(xr, j);
  }
  const float mean = warp_sum(sum) / float(width);
  float sq = 0.f;
  if (kInRegisters) {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const float d = lane + 32 * i < width ? v[i] - mean : 0.f;
      sq += d * d;
    }
  } else {
    for (int j = lane; j < width; j += 32) {
      const float d = load(xr, j) - mean;
      sq += d * d;
    }
  }
  const float rstd = rsqrtf(warp_sum(sq) / float(width) + eps);
  float dot = 0.f;
  if (kInRegisters) {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int j = lane + 32 * i;
      if (j < width) dot += round_to((v[i] - mean) * rstd, x) * load(w, j);
    }
  } else {
    for (int j = lane; j < width; j += 32) dot += round_to((load(xr, j) - mean) * rstd, x) * load(w, j);
  }
  dot = warp_sum(dot);
  if (lane == 0) store(out, row, dot + load(bias, 0));
}

// v2: ncu of v1 (run s10-1) showed 0.48 ms for a 384 MB read (floor ~0.09 ms) with DRAM 17%, L1 17%, SM 47%: a
// latency-bound kernel, each lane issuing 24 two-byte loads. Rows whose bytes are a multiple of 16 (and 16-byte
// aligned) are read as kChunks 16-byte chunks per lane instead (the course's 768 halves: 3 per lane, all in flight
// at once), w the same way; the statistics and the dot product are v1's operations over the same values, summed in
// another order (a lane's values are consecutive columns instead of every 32nd).
template <typename T>
struct Chunk {
  static constexpr int kValues = 16 / sizeof(T);
  float v[kValues];
  __device__ __forceinline__ void load(const T* p) {  // 16 bytes at p, 16-byte aligned
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
    const T* t = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kValues; ++i) v[i] = to_float(t[i]);
  }
};

template <typename T, int kChunks>
__global__ void __launch_bounds__(kWarps * 32) layernorm_head_vec_kernel(const T* __restrict__ x,
                                                                         const T* __restrict__ w,
                                                                         const T* __restrict__ bias, float eps,
                                                                         int64_t rows, int width, T* __restrict__ out) {
  constexpr int kV = Chunk<T>::kValues;
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= rows) return;
  const T* xr = x + row * width;
  const int chunks = width / kV;  // 16-byte chunks per row; lane l owns chunks l, l + 32, ...
  Chunk<T> c[kChunks];
#pragma unroll
  for (int k = 0; k < kChunks; ++k)
    if (lane + 32 * k < chunks) c[k].load(xr + (lane + 32 * k) * kV);
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kChunks; ++k)
    if (lane + 32 * k < chunks)
#pragma unroll
      for (int i = 0; i < kV; ++i) sum += c[k].v[i];
  const float mean = warp_sum(sum) / float(width);
  float sq = 0.f;
#pragma unroll
  for (int k = 0; k < kChunks; ++k)
    if (lane + 32 * k < chunks)
#pragma unroll
      for (int i = 0; i < kV; ++i) {
        const float d = c[k].v[i] - mean;
        sq += d * d;
      }
  const float rstd = rsqrtf(warp_sum(sq) / float(width) + eps);
  float dot = 0.f;
#pragma unroll
  for (int k = 0; k < kChunks; ++k)
    if (lane + 32 * k < chunks) {
      Chunk<T> wc;
      wc.load(w + (lane + 32 * k) * kV);
#pragma unroll
      for (int i = 0; i < kV; ++i) dot += round_to((c[k].v[i] - mean) * rstd, x) * wc.v[i];
    }
  dot = warp_sum(dot);
  if (lane == 0) store(out, row, dot + load(bias, 0));
}

template <typename T>
void launch(const LayerNormHeadArgs& a, cudaStream_t stream) {
  const dim3 grid(unsigned((a.rows + kWarps - 1) / kWarps));
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w);
  const T* b = static_cast<const T*>(a.bias);
  T* out = static_cast<T*>(a.out);
  // v2 when rows and w are whole 16-byte chunks, 16-byte aligned, at most 4 chunks per lane.
  constexpr int kV = Chunk<T>::kValues;
  const int64_t chunks = a.width / kV;
  const bool vec = a.width % kV == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(w) % 16 == 0 && chunks <= 4 * 32;
  if (vec && chunks <= 32)
    layernorm_head_vec_kernel<T, 1><<<grid, kWarps * 32, 0, stream>>>(x, w, b, a.eps, a.rows, int(a.width), out);
  else if (vec && chunks <= 64)
    layernorm_head_vec_kernel<T, 2><<<grid, kWarps * 32, 0, stream>>>(x, w, b, a.eps, a.rows, int(a.width), out);
  else if (vec && chunks <= 96)
    layernorm_head_vec_kernel<T, 3><<<grid, kWarps * 32, 0, stream>>>(x, w, b, a.eps, a.rows, int(a.width), out);
  else if (vec)
    layernorm_head_vec_kernel<T, 4><<<grid, kWarps * 32, 0, stream>>>(x, w, b, a.eps, a.rows, int(a.width), out);
  else if (a.width <= 32 * kPerLane)
    layernorm_head_kernel<T, true><<<grid, kWarps * 32, 0, stream>>>(x, w, b, a.eps, a.rows, int(a.width), out);
  else
    layernorm_head_kernel<T, false><<<grid, kWarps * 32, 0, stream>>>(x, w, b, a.eps, a.rows, int(a.width), out);
}

}  // namespace

void layernorm_head(const LayerNormHeadArgs& a) {
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream());
  if (a.dtype == DType::f32) launch<float>(a, stream);
  else launch<__half>(a, stream);
  check_cuda(cudaGetLastError(), "cs149::layernorm_head: launch");
}

}  // namespace flashkit::cs149::cuda
