// Greedy decoding on the device: the argmax of one f32 logits row, so a greedy step downloads 8 bytes instead of the
// whole row (1 MB for a 262k vocabulary). Tie and validity rules are the sampler's (src/engine/sampler.cpp): the
// lowest index among equal maxima (+0 == -0); NaN or +inf anywhere, or nothing but -inf, makes the row invalid (the
// host then downloads it and lets the sampler throw its message). It also reports whether the maximum repeats
// (top_k = 1 sampling keeps ties, so the host falls back to the sampler then).
//
// One launch: each block reduces a slice (16-byte loads, 4 in flight per thread) to (max, first index, count,
// bad) in `part`; the last block to arrive (atomic counter, reset by that block, as in gemv.cu) merges the
// partials and writes the result, so the launch is graph-replayable.
#include "engine/cuda/common.cuh"

#include <algorithm>
#include <climits>

namespace flashkit::engine::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;

struct Best {
  float v;
  int32_t i;    // lowest index holding v
  int32_t c;    // how many elements hold v (+0 and -0 count as one value)
  int32_t bad;  // saw a NaN or +inf
};
static_assert(sizeof(Best) == 16, "one 16-byte load per partial");

__device__ __forceinline__ Best empty_best() { return Best{-INFINITY, INT_MAX, 0, 0}; }

__device__ __forceinline__ void take(Best& b, float v, int32_t i) {
  b.bad |= int32_t(isnan(v) || v == INFINITY);
  if (v > b.v) {
    b.v = v, b.i = i, b.c = 1;
  } else if (v == b.v) {  // false for NaN
    b.c += 1;
    b.i = min(b.i, i);
  }
}

__device__ __forceinline__ Best merge(const Best& a, const Best& b) {
  Best r;
  r.bad = a.bad | b.bad;
  if (a.v > b.v) {
    r.v = a.v, r.i = a.i, r.c = a.c;
  } else if (b.v > a.v) {
    r.v = b.v, r.i = b.i, r.c = b.c;
  } else {
    r.v = a.v, r.i = min(a.i, b.i), r.c = a.c + b.c;
  }
  return r;
}

__device__ __forceinline__ Best warp_merge(Best b) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Best t;
    t.v = __shfl_xor_sync(0xffffffffu, b.v, o);
    t.i = __shfl_xor_sync(0xffffffffu, b.i, o);
    t.c = __shfl_xor_sync(0xffffffffu, b.c, o);
    t.bad = __shfl_xor_sync(0xffffffffu, b.bad, o);
    b = merge(b, t);
  }
  return b;
}

// Every thread of the block gets the merged value. `red` holds kThreads / 32 entries.
__device__ __forceinline__ Best block_merge(Best b, Best* red) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  b = warp_merge(b);
  __syncthreads();  // red may still be read by a previous call
  if (lane == 0) red[w] = b;
  __syncthreads();
  b = lane < kThreads / 32 ? red[lane] : empty_best();
  return warp_merge(b);
}

__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* x, int64_t n, bool vec4, Best* part,
                                                          unsigned int* counter, int32_t* out) {
  __shared__ Best red[kThreads / 32];
  __shared__ bool s_last;
  pdl_trigger();
  pdl_wait();
  Best b = empty_best();
  const int64_t stride = int64_t(gridDim.x) * kThreads;
  const int64_t tid = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  int64_t tail = 0;
  if (vec4) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const int64_t n4 = n / 4;
    for (int64_t j = tid; j < n4; j += 4 * stride) {
      float4 q[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {  // loads first, all four in flight
        const int64_t k = j + u * stride;
        q[u] = k < n4 ? __ldg(x4 + k) : make_float4(NAN, NAN, NAN, NAN);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t k = j + u * stride;
        if (k >= n4) break;
        const int32_t i = int32_t(4 * k);
        take(b, q[u].x, i), take(b, q[u].y, i + 1), take(b, q[u].z, i + 2), take(b, q[u].w, i + 3);
      }
    }
    tail = 4 * n4;
  }
  for (int64_t j = tail + tid; j < n; j += stride) take(b, __ldg(x + j), int32_t(j));
  b = block_merge(b, red);

  if (threadIdx.x == 0) {
    part[blockIdx.x] = b;
    __threadfence();
    s_last = atomicAdd(counter, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  Best r = empty_best();
  for (int k = threadIdx.x; k < int(gridDim.x); k += kThreads) {
    const int4 raw = __ldcg(reinterpret_cast<const int4*>(part + k));  // written by other blocks: bypass L1
    r = merge(r, Best{__int_as_float(raw.x), raw.y, raw.z, raw.w});
  }
  r = block_merge(r, red);
  if (threadIdx.x == 0) {
    const bool invalid = r.bad || r.v == -INFINITY;  // also n == 0
    out[0] = invalid ? -1 : r.i;
    out[1] = (invalid ? 1 : 0) | (r.c > 1 ? 2 : 0);
    *counter = 0u;  // every block has arrived: ready for the next launch (graph replay)
  }
}

// Many rows at once (a batched serving step's greedy rows): one block per row, no partials or counter. A row of a
// 128k vocabulary is 512 KB: one block streams it in ~30 us, and the rows of a step run side by side.
__global__ void __launch_bounds__(kThreads) argmax_rows_kernel(const float* x, int64_t ld, int64_t n, bool vec4,
                                                               int32_t* out) {
  __shared__ Best red[kThreads / 32];
  pdl_trigger();
  pdl_wait();
  const int64_t row = blockIdx.x;
  const float* xr = x + row * ld;
  Best b = empty_best();
  int64_t tail = 0;
  if (vec4) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    const int64_t n4 = n / 4;
    for (int64_t j = threadIdx.x; j < n4; j += 4 * kThreads) {
      float4 q[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t k = j + u * kThreads;
        q[u] = k < n4 ? __ldg(x4 + k) : make_float4(NAN, NAN, NAN, NAN);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t k = j + u * kThreads;
        if (k >= n4) break;
        const int32_t i = int32_t(4 * k);
        take(b, q[u].x, i), take(b, q[u].y, i + 1), take(b, q[u].z, i + 2), take(b, q[u].w, i + 3);
      }
    }
    tail = 4 * n4;
  }
  for (int64_t j = tail + threadIdx.x; j < n; j += kThreads) take(b, __ldg(xr + j), int32_t(j));
  b = block_merge(b, red);
  if (threadIdx.x == 0) {
    const bool invalid = b.bad || b.v == -INFINITY;
    out[2 * row] = invalid ? -1 : b.i;
    out[2 * row + 1] = (invalid ? 1 : 0) | (b.c > 1 ? 2 : 0);
  }
}

int64_t blocks_for(int64_t n) {
  const int64_t per_block = int64_t(kThreads) * 16;  // four float4 per thread
  return std::clamp<int64_t>((n + per_block - 1) / per_block, 1, std::min<int64_t>(kMaxBlocks, 4 * sm_count()));
}

}  // namespace

int64_t argmax_part_bytes(int64_t n) { return blocks_for(n) * int64_t(sizeof(Best)); }

void argmax_rows_f32(const float* x, int64_t ld, int64_t rows, int64_t n, int32_t* out, cudaStream_t stream) {
  if (n < 0 || n > INT32_MAX || rows < 0 || rows > INT32_MAX) fail(Status::invalid_argument, "argmax_rows_f32: size out of range");
  if (rows == 0) return;
  const bool vec4 = (reinterpret_cast<uintptr_t>(x) & 15u) == 0 && ld % 4 == 0;
  launch("argmax_rows_f32", argmax_rows_kernel, dim3(unsigned(rows)), dim3(kThreads), 0, stream, x, ld, n, vec4, out);
}

void argmax_f32(const float* x, int64_t n, void* part, unsigned int* counter, int32_t* out, cudaStream_t stream) {
  if (n < 0 || n > INT32_MAX) fail(Status::invalid_argument, "argmax_f32: n out of range");
  const bool vec4 = (reinterpret_cast<uintptr_t>(x) & 15u) == 0;
  launch("argmax_f32", argmax_kernel, dim3(unsigned(blocks_for(n))), dim3(kThreads), 0, stream, x, n, vec4,
         static_cast<Best*>(part), counter, out);
}

}  // namespace flashkit::engine::cuda
