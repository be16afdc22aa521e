// Elementwise ops over n elements: scale, casts, in-place adds. One grid-stride kernel per op; each thread moves
// 8 elements per step with 16-byte loads when every pointer is 16-byte aligned (the tail and misaligned
// pointers take the one-element path). Floor: the bytes read + written per element (worklog).
#include "train/cuda/common.cuh"

namespace flashkit::train::cuda {

namespace {

constexpr int kThreads = 256;

template <typename Y>
struct ScaleOp {
  Y* y;
  float s;
  __device__ void one(int64_t i) const { st1(y, i, ld1(y, i) * s); }
  __device__ void vec(int64_t i) const {
    float f[8];
    ld8(y, i, f);
#pragma unroll
    for (int k = 0; k < 8; ++k) f[k] *= s;
    st8(y, i, f);
  }
};
template <typename S, typename D>
struct CastOp {
  const S* src;
  D* dst;
  __device__ void one(int64_t i) const { st1(dst, i, ld1(src, i)); }
  __device__ void vec(int64_t i) const {
    float f[8];
    ld8(src, i, f);
    st8(dst, i, f);
  }
};
template <typename Y, typename X>
struct AddOp {
  Y* y;
  const X* x;
  __device__ void one(int64_t i) const { st1(y, i, ld1(y, i) + ld1(x, i)); }
  __device__ void vec(int64_t i) const {
    float a[8], b[8];
    ld8(y, i, a);
    ld8(x, i, b);
#pragma unroll
    for (int k = 0; k < 8; ++k) a[k] += b[k];
    st8(y, i, a);
  }
};

template <bool VEC, typename Op>
__global__ void elementwise_kernel(Op op, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x, i0 = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  int64_t done = 0;
  if constexpr (VEC) {
    const int64_t nv = n / 8;
    for (int64_t v = i0; v < nv; v += stride) op.vec(v * 8);
    done = nv * 8;
  }
  for (int64_t i = done + i0; i < n; i += stride) op.one(i);
}

template <typename Op>
void run(const char* name, const Op& op, int64_t n, bool vec, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned grid = grid_for(vec ? (n + 7) / 8 : n, kThreads);
  if (vec) elementwise_kernel<true><<<grid, kThreads, 0, stream>>>(op, n);
  else elementwise_kernel<false><<<grid, kThreads, 0, stream>>>(op, n);
  check_launch(name);
}

void check(const char* fn, int64_t n, const void* a, const char* an, const void* b = nullptr, const char* bn = nullptr) {
  need_size(n, fn, "n", std::numeric_limits<int64_t>::max() / 8);
  if (n == 0) return;
  need_ptr(a, fn, an);
  if (bn) need_ptr(b, fn, bn);
}

}  // namespace

void scale_inplace(float* x, int64_t n, float s, cudaStream_t stream) {
  check("scale_inplace", n, x, "x");
  run("scale_inplace", ScaleOp<float>{x, s}, n, aligned16(x), stream);
}
void scale_inplace(bf16* x, int64_t n, float s, cudaStream_t stream) {
  check("scale_inplace", n, x, "x");
  run("scale_inplace", ScaleOp<uint16_t>{bits(x), s}, n, aligned16(x), stream);
}
void cast_f32_to_bf16(const float* src, bf16* dst, int64_t n, cudaStream_t stream) {
  check("cast_f32_to_bf16", n, src, "src", dst, "dst");
  run("cast_f32_to_bf16", CastOp<float, uint16_t>{src, bits(dst)}, n, aligned16(src) && aligned16(dst), stream);
}
void cast_bf16_to_f32(const bf16* src, float* dst, int64_t n, cudaStream_t stream) {
  check("cast_bf16_to_f32", n, src, "src", dst, "dst");
  run("cast_bf16_to_f32", CastOp<uint16_t, float>{bits(src), dst}, n, aligned16(src) && aligned16(dst), stream);
}
void add_inplace(bf16* y, const bf16* x, int64_t n, cudaStream_t stream) {
  check("add_inplace", n, y, "y", x, "x");
  run("add_inplace", AddOp<uint16_t, uint16_t>{bits(y), bits(x)}, n, aligned16(y) && aligned16(x), stream);
}
void add_inplace(float* y, const float* x, int64_t n, cudaStream_t stream) {
  check("add_inplace", n, y, "y", x, "x");
  run("add_inplace", AddOp<float, float>{y, x}, n, aligned16(y) && aligned16(x), stream);
}
void add_inplace(float* y, const bf16* x, int64_t n, cudaStream_t stream) {
  check("add_inplace", n, y, "y", x, "x");
  run("add_inplace", AddOp<float, uint16_t>{y, bits(x)}, n, aligned16(y) && aligned16(x), stream);
}

}  // namespace flashkit::train::cuda
