// Deterministic sums over an f32 vector (the gradient norm for clipping, a chunk's losses, a count of non-finite
// values): pass 1 runs a grid
// whose size depends only on n, each block summing a fixed grid-stride slice into one partial; pass 2 is one block
// adding the partials with a fixed tree. Floor: 4 bytes per element (one read).
#include "train/cuda/common.cuh"

namespace flashkit::train::cuda {

namespace {

constexpr int kThreads = 512;
constexpr int kMaxPartials = 1024;  // = the pass-2 block size, one partial per thread

// At least 16 elements per thread before another block is added (the grid depends on n only).
int partial_blocks(int64_t n) {
  return int(std::clamp<int64_t>((n + int64_t(kThreads) * 16 - 1) / (int64_t(kThreads) * 16), 1, kMaxPartials));
}

enum Mode : int { kSum = 0, kSquares = 1, kNonFinite = 2 };

template <int MODE>
__device__ __forceinline__ float term(float v) {
  if constexpr (MODE == kSquares) return v * v;
  else if constexpr (MODE == kNonFinite) return isfinite(v) ? 0.0f : 1.0f;
  else return v;
}

template <int MODE, bool VEC>
__global__ void partial_sum_kernel(const float* x, int64_t n, float* partials) {
  __shared__ float red[32];
  const int64_t stride = int64_t(gridDim.x) * blockDim.x, i0 = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  float acc = 0.0f;
  int64_t done = 0;
  if constexpr (VEC) {
    const int64_t nv = n / 4;
    for (int64_t v = i0; v < nv; v += stride) {
      const float4 a = reinterpret_cast<const float4*>(x)[v];
      acc += (term<MODE>(a.x) + term<MODE>(a.y)) + (term<MODE>(a.z) + term<MODE>(a.w));
    }
    done = nv * 4;
  }
  for (int64_t i = done + i0; i < n; i += stride) acc += term<MODE>(x[i]);
  acc = block_sum(acc, red);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void final_sum_kernel(const float* partials, int nparts, float* out, bool accumulate) {
  __shared__ float red[32];
  const float v = block_sum(int(threadIdx.x) < nparts ? partials[threadIdx.x] : 0.0f, red);
  if (threadIdx.x == 0) out[0] = accumulate ? out[0] + v : v;
}

void reduce(const char* fn, int mode, const float* x, int64_t n, float* out, bool accumulate, float* scratch,
            cudaStream_t stream) {
  need_size(n, fn, "n", std::numeric_limits<int64_t>::max() / 8);
  need_ptr(out, fn, "out");
  if (n == 0) {
    if (!accumulate) check_cuda(cudaMemsetAsync(out, 0, sizeof(float), stream), fn);
    return;
  }
  need_ptr(x, fn, "x");
  need_ptr(scratch, fn, "scratch");
  const int blocks = partial_blocks(n);
  const bool vec = aligned16(x);
  auto kern = mode == kSquares   ? (vec ? partial_sum_kernel<kSquares, true> : partial_sum_kernel<kSquares, false>)
              : mode == kNonFinite ? (vec ? partial_sum_kernel<kNonFinite, true> : partial_sum_kernel<kNonFinite, false>)
                                   : (vec ? partial_sum_kernel<kSum, true> : partial_sum_kernel<kSum, false>);
  kern<<<blocks, kThreads, 0, stream>>>(x, n, scratch);
  check_launch(fn);
  final_sum_kernel<<<1, kMaxPartials, 0, stream>>>(scratch, blocks, out, accumulate);
  check_launch(fn);
}

}  // namespace

int64_t reduce_scratch_floats() { return kMaxPartials; }

void global_norm_sq(const float* x, int64_t n, float* out, bool accumulate, float* scratch, cudaStream_t stream) {
  reduce("global_norm_sq", kSquares, x, n, out, accumulate, scratch, stream);
}
void sum_f32(const float* x, int64_t n, float* out, bool accumulate, float* scratch, cudaStream_t stream) {
  reduce("sum_f32", kSum, x, n, out, accumulate, scratch, stream);
}
void count_nonfinite(const float* x, int64_t n, float* out, bool accumulate, float* scratch, cudaStream_t stream) {
  reduce("count_nonfinite", kNonFinite, x, n, out, accumulate, scratch, stream);
}

}  // namespace flashkit::train::cuda
