// The non-finite fix-up as a launch of its own, for the forward configurations in which a call (or inlined code)
// for it would cost the hot loop registers or spills (docs/worklog/attention-cuda.md, v14): those kernels flag a
// row through their lse store only (lse = NaN, nonfinite_row.cuh's criteria) and this pass, launched right after
// them on the same tile grid, recomputes every row whose lse is NaN in f64 (o and lse). One thread per row reads its
// lse (4 bytes); a warp recomputes the rare flagged ones. A NaN lse the kernel computed honestly (a NaN score) is
// recomputed too, to the same NaN answer.
#pragma once
#include "core/cuda_check.hpp"
#include "core/pdl.cuh"
#include "kernels/cuda/flash_api.hpp"
#include "kernels/cuda/flash_common.cuh"
#include "kernels/cuda/launch.hpp"
#include "kernels/cuda/nonfinite_row.cuh"

namespace flashkit::cuda {

constexpr int kPostpassThreads = 128;

// Block (x, y, z) covers rows [x * BM, x * BM + BM) of the forward tile (x, y, z) (fwd_tile's mapping, BM rows).
template <typename T, int D>
__global__ void __launch_bounds__(kPostpassThreads) nonfinite_postpass_kernel(const __grid_constant__ FwdParams p, int BM) {
  pdl_wait();  // launched with PDL after the forward: its o and lse are complete past this point
  const kernels::AttentionFwdArgs& a = p.a;
  const FwdTile t = fwd_tile(a, p.pack_gqa, int(blockIdx.x), BM, 64);
  for (int r0 = 0; r0 < BM; r0 += kPostpassThreads) {
    const int64_t gr = t.m0 + r0 + int(threadIdx.x);
    bool flagged = false;
    int64_t h = 0, i = 0;
    if (r0 + int(threadIdx.x) < BM && gr < t.rows) {
      t.trows.head_query(gr, h, i);
      flagged = isnan(a.lse[a.lse_index(t.sr, h, i)]);
    }
    uint32_t warp_rows = __ballot_sync(0xffffffffu, flagged);
    while (warp_rows) {  // uniform over the warp
      const int src = __ffs(warp_rows) - 1;
      warp_rows &= warp_rows - 1;
      const int64_t hh = __shfl_sync(0xffffffffu, h, src), ii = __shfl_sync(0xffffffffu, i, src);
      T* orow = static_cast<T*>(a.o.data) + t.sr.bslot * a.o.stride_b + (t.sr.q0 + ii) * a.o.stride_s + hh * a.o.stride_h;
      const float lse = recompute_row_f64<T, D>(f64_row<T>(a, t.sr, hh, ii),
                                                [=](int c, double x) { orow[c] = nonfinite_from_f64<T>(x); });
      if ((threadIdx.x & 31) == 0) a.lse[a.lse_index(t.sr, hh, ii)] = lse;
    }
  }
}

// After a forward kernel of BM-row tiles over `grid` (x: m-blocks, one split) that flags through its lse only.
template <typename T, int D>
void launch_nonfinite_postpass(const FwdParams& p, dim3 grid, int BM, bool pdl, cudaStream_t stream) {
  check_cuda(launch_ex(nonfinite_postpass_kernel<T, D>, grid, dim3(kPostpassThreads), 0, stream, pdl, 1u, p, BM),
             "non-finite fix-up launch");
}

}  // namespace flashkit::cuda
