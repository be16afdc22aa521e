// RETIRED (docs/worklog/attention-cuda.md, "v12: non-finite input on CUDA, measured"): the forward's post-pass that
// recomputed flagged rows in f64. With the flag folded into the kernels (raw score sums in the inner loops) it cost
// 7% to 3x on the prefill grid and 1.1 us per decode call on the H200 (run s8-1), so it never became the default.
// Kept here, out of the library, for the next attempt. It does not build as is (flash_api.hpp lost its declaration).
// The forward's answer for non-finite input and overflowing scores on CUDA (include/flashkit/attention.hpp).
//
// The fast kernels compute in f32 and cannot tell a NaN row from an empty one, or an overflowing score from a
// non-finite input. Each marks a row it cannot vouch for by writing lse = NaN: the flash kernels when the raw sum
// of the row's scores (every key of the tiles it visits, before masking: non-finite iff some score is, or the sum
// overflows) or of its output is not finite; the standard path's softmax when the sum of its scores is not. After
// the kernel, this launch visits every row that sees at least one key, and recomputes in f64 each one whose lse is
// not finite (or, for the standard path, whose o holds a non-finite value), as the reference does
// (kernels/reference/attention_row.cpp): NaN when q or a visible key's k or v is not finite, else the softmax. So a
// call whose input is finite and whose scores stay in range reads one float per row here and rewrites nothing.
// One warp per row; the recomputation is a warp's serial walk over the row's keys (rare rows only).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "core/cuda_check.hpp"
#include "core/cuda_launch.hpp"
#include "core/pdl.cuh"
#include "kernels/cuda/flash_api.hpp"

namespace flashkit::cuda {

namespace {

constexpr int kFixupWarps = 8;

__device__ __forceinline__ double to_f64(__nv_bfloat16 x) { return double(__bfloat162float(x)); }
__device__ __forceinline__ double to_f64(__half x) { return double(__half2float(x)); }
template <typename T>
__device__ __forceinline__ T from_f64(double x);
template <>
__device__ __forceinline__ __nv_bfloat16 from_f64<__nv_bfloat16>(double x) { return __double2bfloat16(x); }
template <>
__device__ __forceinline__ __half from_f64<__half>(double x) { return __double2half(x); }

__device__ __forceinline__ double warp_sum(double x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Row i of head h of sequence r in f64, by one warp (lane c owns columns c, c + 32, ...; head_dim <= 256).
template <typename T>
__device__ void recompute_row(const kernels::AttentionFwdArgs& a, const kernels::SeqRange& r, int64_t h, int64_t i,
                              int64_t lo, int64_t hi, int lane) {
  constexpr int kMaxCols = 256 / 32;
  const int d = int(a.shape.head_dim);
  const int64_t hk = h / a.shape.group();
  const T* q = kernels::row_ptr<const T>(a.q, r.bslot, r.q0 + i, h);
  T* o = kernels::row_ptr<T>(a.o, r.bslot, r.q0 + i, h);
  float* lse = a.lse + a.lse_index(r, h, i);
  double qc[kMaxCols];
  bool finite = true;
#pragma unroll
  for (int t = 0; t < kMaxCols; ++t) {
    const int c = lane + 32 * t;
    qc[t] = c < d ? to_f64(q[c]) : 0.0;
    finite = finite && isfinite(qc[t]);
  }
  for (int64_t j = lo; j < hi && finite; ++j) {
    const T* k = kernels::row_ptr<const T>(a.k, r.bslot, r.k0 + j, hk);
    const T* v = kernels::row_ptr<const T>(a.v, r.bslot, r.k0 + j, hk);
    for (int c = lane; c < d; c += 32) finite = finite && isfinite(to_f64(k[c])) && isfinite(to_f64(v[c]));
    finite = __all_sync(0xffffffffu, finite);
  }
  finite = __all_sync(0xffffffffu, finite);
  if (!finite) {
    for (int c = lane; c < d; c += 32) o[c] = from_f64<T>(__longlong_as_double(0x7ff8000000000000ll));
    if (lane == 0) *lse = __int_as_float(0x7fffffff);
    return;
  }
  // Online softmax in f64: finite inputs give |s| < 1e80, far inside the f64 range.
  const double scale = a.scale, cap = a.softcap;
  double m = -INFINITY, l = 0.0, acc[kMaxCols] = {};
  for (int64_t j = lo; j < hi; ++j) {
    const T* k = kernels::row_ptr<const T>(a.k, r.bslot, r.k0 + j, hk);
    const T* v = kernels::row_ptr<const T>(a.v, r.bslot, r.k0 + j, hk);
    double dot = 0.0;
#pragma unroll
    for (int t = 0; t < kMaxCols; ++t) {
      const int c = lane + 32 * t;
      if (c < d) dot += qc[t] * to_f64(k[c]);
    }
    double s = scale * warp_sum(dot);
    if (cap > 0.0) s = cap * tanh(s / cap);
    const double mn = fmax(m, s), corr = exp(m - mn), p = exp(s - mn);
    l = l * corr + p;
#pragma unroll
    for (int t = 0; t < kMaxCols; ++t) {
      const int c = lane + 32 * t;
      if (c < d) acc[t] = acc[t] * corr + p * to_f64(v[c]);
    }
    m = mn;
  }
#pragma unroll
  for (int t = 0; t < kMaxCols; ++t) {
    const int c = lane + 32 * t;
    if (c < d) o[c] = from_f64<T>(acc[t] / l);
  }
  if (lane == 0) *lse = float(m + log(l));
}

// Grid (row blocks of kFixupWarps rows, heads, sequences).
template <typename T>
__global__ void __launch_bounds__(kFixupWarps * 32) fwd_fixup_kernel(const kernels::AttentionFwdArgs a, bool check_o) {
  pdl_wait();  // launched with PDL after the forward: its o and lse are complete past this point
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const kernels::SeqRange r = kernels::seq_range(a.shape, blockIdx.z);
  const int64_t i = int64_t(blockIdx.x) * kFixupWarps + warp, h = blockIdx.y;
  if (i >= r.nq) return;
  const int64_t lo = a.mask.lo(i, r.nq, r.nk), hi = a.mask.hi(i, r.nq, r.nk);
  if (hi <= lo) return;  // no visible key: o = 0, lse = -inf, as the kernel wrote them
  bool ok = isfinite(a.lse[a.lse_index(r, h, i)]);
  if (check_o && ok) {
    const T* o = kernels::row_ptr<const T>(a.o, r.bslot, r.q0 + i, h);
    for (int c = lane; c < int(a.shape.head_dim); c += 32) ok = ok && isfinite(to_f64(o[c]));
    ok = __all_sync(0xffffffffu, ok);
  }
  if (!ok) recompute_row<T>(a, r, h, i, lo, hi, lane);
}

}  // namespace

void launch_fwd_nonfinite_fixup(const kernels::AttentionFwdArgs& a, bool check_o, bool pdl, cudaStream_t stream) {
  const auto& sh = a.shape;
  if (sh.max_seqlen_q == 0 || sh.heads == 0 || sh.batch == 0) return;
  const dim3 grid(unsigned((sh.max_seqlen_q + kFixupWarps - 1) / kFixupWarps), unsigned(sh.heads), unsigned(sh.batch));
  auto kern = a.dtype == DType::bf16 ? fwd_fixup_kernel<__nv_bfloat16> : fwd_fixup_kernel<__half>;
  check_cuda(launch_ex(kern, grid, dim3(kFixupWarps * 32), 0, stream, pdl, 1u, a, check_o),
             "attention forward non-finite fixup launch");
}

}  // namespace flashkit::cuda
