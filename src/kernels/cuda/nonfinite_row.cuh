// The forward's answer for a row its f32 arithmetic cannot vouch for (include/flashkit/attention.hpp, "Non-finite
// input"): the row recomputed in f64 by one warp, as kernels/reference/attention_row.cpp does on the host.
//
// The fast kernels never pay for it on finite input (docs/worklog/attention-cuda.md, v14): their epilogues flag a row
// when its softmax sum l is NaN (a NaN or +inf score), 0 although it saw keys (every score -inf in f32), or when its
// output values are not finite (a non-finite v, a masked key's NaN v times p = 0, an f32 overflow) -- the decode
// kernel by making a warp's l NaN, the others from the values they stage -- and only then does a warp run
// recompute_row_f64, out of line: a __noinline__ call (parameters __grid_constant__, passed by address: no copy) in
// the sm_80, Hopper and decode kernels and the split combine, or, in the configurations where even a call costs the
// hot loop spills (128-register sm90 configurations, the one-warp d128 sm_80 kernel), a NaN lse that the post-pass
// of nonfinite_postpass.cuh recomputes. Flagging is a superset of the rows whose f32 answer differs from the
// contract's: a false alarm costs one recomputation.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "kernels/attention_args.hpp"

namespace flashkit::cuda {

// A row the epilogue cannot vouch for: it sees keys (in the part of the key range this CTA or split covered) and
// its softmax sum is not positive (0 or NaN) or the sum of its output values is not finite.
__device__ __forceinline__ bool flagged_row(bool sees_keys, float l, float o_sum) {
  return sees_keys && !(l > 0.f && isfinite(o_sum));
}

__device__ __forceinline__ double nonfinite_to_f64(__nv_bfloat16 x) { return double(__bfloat162float(x)); }
__device__ __forceinline__ double nonfinite_to_f64(__half x) { return double(__half2float(x)); }

template <typename T>
__device__ __forceinline__ T nonfinite_from_f64(double x);
template <>
__device__ __forceinline__ __nv_bfloat16 nonfinite_from_f64<__nv_bfloat16>(double x) { return __double2bfloat16(x); }
template <>
__device__ __forceinline__ __half nonfinite_from_f64<__half>(double x) { return __double2half(x); }

__device__ __forceinline__ double warp_sum_f64(double x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// What the recomputation reads: query row q, keys lo..hi-1 at k + j * k_stride (v likewise), head dim d.
template <typename T>
struct F64Row {
  const T* q;
  const T* k;
  const T* v;
  int64_t k_stride, v_stride;
  int lo, hi, d;
  float scale, softcap;
};

// The F64Row of query i of head h in sequence sr (keys of its KV head, its mask range).
template <typename T>
__device__ __forceinline__ F64Row<T> f64_row(const kernels::AttentionFwdArgs& a, const kernels::SeqRange& sr, int64_t h,
                                             int64_t i) {
  const int64_t hk = h / (a.shape.heads / a.shape.kv_heads);
  F64Row<T> r;
  r.q = static_cast<const T*>(a.q.data) + sr.bslot * a.q.stride_b + (sr.q0 + i) * a.q.stride_s + h * a.q.stride_h;
  r.k = static_cast<const T*>(a.k.data) + sr.bslot * a.k.stride_b + sr.k0 * a.k.stride_s + hk * a.k.stride_h;
  r.v = static_cast<const T*>(a.v.data) + sr.bslot * a.v.stride_b + sr.k0 * a.v.stride_s + hk * a.v.stride_h;
  r.k_stride = a.k.stride_s;
  r.v_stride = a.v.stride_s;
  r.lo = int(a.mask.lo(i, sr.nq, sr.nk));
  r.hi = int(a.mask.hi(i, sr.nq, sr.nk));
  r.d = int(a.shape.head_dim);
  r.scale = a.scale;
  r.softcap = a.softcap;
  return r;
}

// The row by the whole warp, its sums in f64: two passes over the visible keys (the max, then the weights and the
// weighted sum of v), IEEE semantics, then any NaN/inf in o or lse makes the row NaN; no visible key gives o = 0,
// lse = -inf. What needs f64 is the range (a finite q.k reaches 1e80) and the sums; the exponentials, the log, the
// softcap's tanh and the final division act on values f32 holds (e^(s - m) with s - m <= 0, l in [1, keys]) and
// run in f32, within a few f32 ulps of the reference's f64: f64 exp/log/tanh/division are long subroutines whose
// registers would count for the kernel that calls this. Lane l computes output columns c0 + l + 32 t (t < kCols,
// those below d): the whole row with c0 = 0 and kCols = D / 32, or a slice of it; store(c, x) is called for each.
// q is re-read from memory (L1) for every key rather than held in registers. Returns the lse (every lane).
template <typename T, int kCols, typename Store>
__device__ __forceinline__ float recompute_row_f64(const F64Row<T> r, int c0, Store store) {
  const int lane = int(threadIdx.x) & 31;
  const double scale = r.scale;
  const float cap_inv = r.softcap > 0.f ? 1.f / r.softcap : 0.f;
  auto score = [&](int j) {
    const T* kr = r.k + int64_t(j) * r.k_stride;
    double dot = 0.0;
    for (int c = lane; c < r.d; c += 32) dot += nonfinite_to_f64(r.q[c]) * nonfinite_to_f64(kr[c]);
    double s = scale * warp_sum_f64(dot);
    if (r.softcap > 0.f) s = double(r.softcap) * double(tanhf(float(s * cap_inv)));  // +-inf -> +-cap, NaN stays
    return s;
  };
  const double nan = __longlong_as_double(0x7ff8000000000000ll);
  double m = -INFINITY;
  bool nan_score = false;
  for (int j = r.lo; j < r.hi; ++j) {
    const double s = score(j);
    nan_score = nan_score || isnan(s);
    m = fmax(m, s);
  }
  double acc[kCols], lse;
#pragma unroll
  for (int t = 0; t < kCols; ++t) acc[t] = 0.0;
  if (r.hi <= r.lo) {
    lse = -INFINITY;
  } else if (nan_score || !isfinite(m)) {  // a NaN or +inf score, or every score -inf: e^(s - m) is NaN somewhere
    lse = nan;
  } else {
    double l = 0.0;
    bool v_finite = true;  // a visible non-finite v makes the row NaN (0 * inf is NaN), whichever columns it is in
    for (int j = r.lo; j < r.hi; ++j) {
      const double p = double(expf(float(score(j) - m)));  // a -inf score weighs 0
      const T* vr = r.v + int64_t(j) * r.v_stride;
      l += p;
#pragma unroll
      for (int t = 0; t < kCols; ++t) {
        const int c = c0 + lane + 32 * t;
        if (c < r.d) acc[t] += p * nonfinite_to_f64(vr[c]);
      }
      for (int c = lane; c < r.d; c += 32) v_finite = v_finite && isfinite(nonfinite_to_f64(vr[c]));
    }
    lse = m + double(logf(float(l)));
    const double inv = double(1.f / float(l));
    bool finite = isfinite(lse) && v_finite;
#pragma unroll
    for (int t = 0; t < kCols; ++t) {
      acc[t] *= inv;
      finite = finite && isfinite(acc[t]);
    }
    if (!__all_sync(0xffffffffu, finite)) lse = nan;
  }
#pragma unroll
  for (int t = 0; t < kCols; ++t) {
    const int c = c0 + lane + 32 * t;
    if (c < r.d) store(c, isnan(lse) ? nan : acc[t]);
  }
  return float(lse);
}

// The whole row (head dims up to D).
template <typename T, int D, typename Store>
__device__ __forceinline__ float recompute_row_f64(const F64Row<T> r, Store store) {
  return recompute_row_f64<T, (D + 31) / 32>(r, 0, store);
}

}  // namespace flashkit::cuda
