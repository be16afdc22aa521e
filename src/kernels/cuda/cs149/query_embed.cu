// The occupancy decoder's query input layer (in_dim <= 16 -> width) and its SiLU as one elementwise kernel: each
// thread computes outputs of one row from the row's few coordinates and the weight row (both cached), so the
// Linear's [rows, width] output is written once, already activated (the two torch ops write it twice and read it
// once: 3 x 384 MB at the course shape instead of 384 MB).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "core/cuda_check.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/cuda/cs149/launch.hpp"

namespace flashkit::cs149::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float load(const float* p, int64_t i) { return __ldg(p + i); }
__device__ __forceinline__ float load(const __half* p, int64_t i) { return __half2float(__ldg(p + i)); }
__device__ __forceinline__ float round_to(float v, const float*) { return v; }
__device__ __forceinline__ float round_to(float v, const __half*) { return __half2float(__float2half_rn(v)); }
__device__ __forceinline__ void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }

// Grid: x over width in blocks of kThreads columns, y over rows in chunks; a thread keeps its column's weights
// and bias in registers and walks the chunk's rows (consecutive threads write consecutive columns).
template <typename T>
__global__ void __launch_bounds__(kThreads) query_embed_kernel(const T* __restrict__ q, const T* __restrict__ w,
                                                               const T* __restrict__ b, int64_t rows, int in_dim,
                                                               int width, int64_t rows_per_block,
                                                               T* __restrict__ h) {
  const int j = blockIdx.x * kThreads + threadIdx.x;
  if (j >= width) return;
  float wj[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) wj[i] = i < in_dim ? load(w, int64_t(j) * in_dim + i) : 0.f;
  const float bj = load(b, j);
  const int64_t r0 = int64_t(blockIdx.y) * rows_per_block;
  const int64_t r1 = r0 + rows_per_block < rows ? r0 + rows_per_block : rows;
  for (int64_t r = r0; r < r1; ++r) {
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < 16; ++i)
      if (i < in_dim) acc += load(q, r * in_dim + i) * wj[i];
    const float x = round_to(acc + bj, q);
    store(h, r * width + j, x / (1.f + __expf(-x)));
  }
}

template <typename T>
void launch(const QueryEmbedArgs& a, cudaStream_t stream) {
  const int64_t chunks = (a.rows + 63) / 64 < 65535 ? (a.rows + 63) / 64 : 65535;
  const int64_t rows_per_block = (a.rows + chunks - 1) / chunks;
  const dim3 grid(unsigned((a.width + kThreads - 1) / kThreads),
                  unsigned((a.rows + rows_per_block - 1) / rows_per_block));
  query_embed_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(a.q), static_cast<const T*>(a.w),
                                                        static_cast<const T*>(a.b), a.rows, int(a.in_dim),
                                                        int(a.width), rows_per_block, static_cast<T*>(a.h));
}

}  // namespace

void query_embed(const QueryEmbedArgs& a) {
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream());
  if (a.dtype == DType::f32) launch<float>(a, stream);
  else launch<__half>(a, stream);
  check_cuda(cudaGetLastError(), "cs149::query_embed: launch");
}

}  // namespace flashkit::cs149::cuda
