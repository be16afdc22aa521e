// The split merge of the decode family (plan.hpp), shared by the library's kernel and combine launch and the
// engine's fused-prologue kernel.
//
// A split's partial result for one query row is (lse, O): the natural-log log-sum-exp of its scores and its output
// normalized by its own softmax sum; a split that saw no key has lse = -inf and O = 0. The merge of S partials:
//   M = max_s lse_s,  w_s = e^(lse_s - M),  O = sum_s w_s O_s / sum_s w_s,  lse = M + log(sum_s w_s);
// every split empty (M = -inf): O = 0, lse = -inf; a split whose lse is NaN (it saw a NaN score, attention.hpp)
// makes the row NaN, never empty. Three placements use it:
//   - in registers (cluster merges: the S partials were loaded from the cluster's distributed shared memory),
//   - over f32 partials in global memory (split_weights for the weights, then the caller's weighted sum over its
//     own layout of rows and columns): the library's combine launch and the engine's last-CTA (counter) merge,
//   - the arrival counter that elects the last CTA of a tile (arrive_last).
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace flashkit::cuda::merge {

__device__ __forceinline__ void axpy(float w, float x, float& acc) { acc = fmaf(w, x, acc); }
__device__ __forceinline__ void axpy(float w, const float4& x, float4& acc) {
  acc.x += w * x.x, acc.y += w * x.y, acc.z += w * x.z, acc.w += w * x.w;
}
__device__ __forceinline__ void zero(float& v) { v = 0.f; }
__device__ __forceinline__ void zero(float4& v) { v = make_float4(0.f, 0.f, 0.f, 0.f); }
__device__ __forceinline__ void scale(float& v, float s) { v *= s; }
__device__ __forceinline__ void scale(float4& v, float s) { v.x *= s, v.y *= s, v.z *= s, v.w *= s; }

// The merge of the first S (<= MAXS) partials held in registers, in split order. Writes the merged O to `out` and
// returns the merged lse.
template <int MAXS, typename V>
__device__ __forceinline__ float merge_in_registers(const float (&lse)[MAXS], const V (&o)[MAXS], int S, V& out) {
  float mx = -INFINITY;
  bool nan = false;
#pragma unroll
  for (int s = 0; s < MAXS; ++s)
    if (s < S) mx = fmaxf(mx, lse[s]), nan = nan || isnan(lse[s]);
  float sum = 0.f;
  zero(out);
  if (mx != -INFINITY) {
#pragma unroll
    for (int s = 0; s < MAXS; ++s)
      if (s < S) {  // an empty split (lse -inf, O 0) weighs 0
        const float w = __expf(lse[s] - mx);
        sum += w;
        axpy(w, o[s], out);
      }
  }
  if (nan) sum = __builtin_nanf("");
  scale(out, sum > 0.f ? 1.f / sum : sum == 0.f ? 0.f : __builtin_nanf(""));
  return sum > 0.f ? mx + __logf(sum) : sum == 0.f ? -INFINITY : __builtin_nanf("");
}

// The weights of one row's S partials in global memory (lse of split s at lse[s * stride]), computed by all NT
// threads of the block: w[s] = e^(lse_s - M) in shared memory (S floats), `red` NT/32 floats of scratch. Returns
// (M, sum of the weights); M = -inf (and every weight 0) when every split is empty. Ends with a barrier: w is
// visible to the whole block. kSameGrid: the partials come from other CTAs of this grid, so the loads bypass L1
// (__ldcg); a merge in a launch of its own uses plain loads, measured 0.27 us faster per call than __ldcg at batch 1,
// 16 splits (H200, dev/cuda/combine_variants.cu: 1.89 against 2.16 us; the pre-refactor kernel took 2.03).
template <int NT, bool kSameGrid>
__device__ __forceinline__ float2 split_weights(const float* lse, int64_t stride, int S, float* w, float* red) {
  constexpr int NWARP = NT / 32;
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
  float m = -INFINITY;
  for (int s = tid; s < S; s += NT) {
    const float x = kSameGrid ? __ldcg(lse + s * stride) : lse[s * stride];
    w[s] = x;
    m = fmaxf(m, x);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0) red[wid] = m;
  __syncthreads();
  m = red[0];
#pragma unroll
  for (int i = 1; i < NWARP; ++i) m = fmaxf(m, red[i]);
  __syncthreads();  // red is reused for the sum
  float sum = 0.f;
  for (int s = tid; s < S; s += NT) {  // the same thread wrote w[s] above; a NaN lse stays NaN (merged_lse)
    const float e = m == -INFINITY ? (isnan(w[s]) ? w[s] : 0.f) : __expf(w[s] - m);
    w[s] = e;
    sum += e;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) red[wid] = sum;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int i = 0; i < NWARP; ++i) total += red[i];
  __syncthreads();  // every thread has read red (and w is visible) before the caller reuses either
  return make_float2(m, total);
}

// The merged lse of split_weights' result: NaN when a split's lse was NaN (the weights' sum is then NaN).
__device__ __forceinline__ float merged_lse(float2 m_sum) {
  return m_sum.y > 0.f ? m_sum.x + __logf(m_sum.y) : m_sum.y == 0.f ? -INFINITY : __builtin_nanf("");
}

// Called by every thread of a CTA once its partial is written: counts its arrival on the tile's counter and
// returns true in the CTA that arrived last of `splits` (which puts the counter back to 0, so the launch stays
// graph-replayable). The partial is made visible device-wide before the arrival (threadfence reduction).
__device__ __forceinline__ bool arrive_last(unsigned int* counter, int splits) {
  __shared__ int s_last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned int prev = atomicAdd(counter, 1u);
    s_last = prev == unsigned(splits - 1);
    if (s_last) *counter = 0u;  // every split has arrived: reset for the next launch (stream-ordered after this one)
  }
  __syncthreads();
  const bool last = s_last;
  if (last) __threadfence();  // the other CTAs' partials are read after their arrivals
  return last;
}

// Distributed shared memory (sm_90), 32-bit addresses: the shared::cluster address of this CTA's shared-memory
// address `a` in the CTA of cluster rank `rank`, and loads from such addresses.
__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t dsmem_map(uint32_t a, int rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
  return r;
}
__device__ __forceinline__ void dsmem_ld(uint32_t a, float& v) {
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(a) : "memory");
}
__device__ __forceinline__ void dsmem_ld(uint32_t a, float4& v) {
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(a)
               : "memory");
}

// The cluster merge of one item (a row's lse and V-sized slice of O) over ranks 0..S-1: `lse_addr` / `o_addr`
// are this CTA's shared-memory addresses of the item, which every rank holds at the same offsets. All 2S remote
// loads are issued before any is used (one round trip, not S). Returns the merged lse; `out` the merged O.
template <int MAXS, typename V>
__device__ __forceinline__ float merge_cluster_item(uint32_t lse_addr, uint32_t o_addr, int S, V& out) {
  float ls[MAXS];
  V xs[MAXS];
#pragma unroll
  for (int s = 0; s < MAXS; ++s)
    if (s < S) {
      dsmem_ld(dsmem_map(lse_addr, s), ls[s]);
      dsmem_ld(dsmem_map(o_addr, s), xs[s]);
    }
  return merge_in_registers<MAXS>(ls, xs, S, out);
}
#endif

}  // namespace flashkit::cuda::merge
