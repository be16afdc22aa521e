// The decode family's split combine as a launch of its own (the library's merge placement, attention-cuda.md v4 and
// v10): the f32 partials of flash_decode.cuh ([split, row, Dpad] and [split, row]) merged by merge.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda_check.hpp"
#include "core/pdl.cuh"
#include "flashkit/error.hpp"
#include "kernels/cuda/decode/merge.cuh"
#include "kernels/cuda/flash_api.hpp"
#include "kernels/cuda/flash_common.cuh"
#include "kernels/cuda/launch.hpp"

namespace flashkit::cuda {

namespace {

// One 256-thread block per (row of the [batch_slot, heads, seqlen_q] layout, 64 columns). Warp w sums splits w,
// w+8, ... with lane l covering columns 2l, 2l+1 (one coalesced 256-byte read per split and warp, all of them
// independent: a serial walk over the splits is latency-bound, ~80 us for 128 splits), then the 8 partial sums
// meet in shared memory. Spreading a row's columns over blocks matters when rows are few: one KV head at batch 1
// is 8 rows x ~130 splits x 256 columns (1 MB of partials) that one block per row read with only 8 SMs.
constexpr int kCombineCols = 64, kCombineThreads = 256;
template <typename T>
__global__ void __launch_bounds__(kCombineThreads) split_combine_kernel(const FwdParams p, int dpad) {
  __shared__ float wsh[kMaxDecodeSplits];
  __shared__ float red[8][kCombineCols];
  __shared__ float stat[8];
  const int tid = threadIdx.x, wid = tid >> 5, lane = tid & 31;
  const int64_t ridx = blockIdx.x;
  const int c0 = int(blockIdx.y) * kCombineCols;
  const auto& a = p.a;
  const int S = p.num_splits, hd = int(a.shape.head_dim);
  const RowIndex ri = split_row_index(ridx, a.shape.heads, a.shape.seqlen_q);
  pdl_wait();  // launched with PDL after the decode kernel (p.pdl): its partials are complete past this point
  pdl_trigger();
  const float2 m_sum = merge::split_weights<kCombineThreads, false>(p.lse_part + ridx, p.num_rows, S, wsh, stat);
  T* o = static_cast<T*>(a.o.data) + ri.bslot * a.o.stride_b + ri.row * a.o.stride_s + ri.h * a.o.stride_h;
  if (m_sum.x == -INFINITY && m_sum.y == 0.f) {  // uniform across the block: every split empty
    if (tid < kCombineCols && c0 + tid < hd) o[c0 + tid] = MmaOp<T>::from_f32(0.f);
    if (blockIdx.y == 0 && tid == 0) a.lse[ridx] = -INFINITY;
    return;
  }
  const int col = c0 + 2 * lane;  // head_dim is a multiple of 8: col < hd implies col + 1 < hd
  const bool ok = col < hd;
  float2 acc = make_float2(0.f, 0.f);
  const float* part = p.o_part + ridx * dpad + col;
  const int64_t sstride = p.num_rows * int64_t(dpad);
  if (ok) {
    // 16 independent loads in flight per lane (128 splits: one round trip instead of four)
#pragma unroll 16
    for (int s = wid; s < S; s += 8) {
      const float w = wsh[s];
      const float2 x = *reinterpret_cast<const float2*>(part + s * sstride);
      acc.x += w * x.x;
      acc.y += w * x.y;
    }
  }
  red[wid][2 * lane] = acc.x;
  red[wid][2 * lane + 1] = acc.y;
  __syncthreads();
  if (tid < kCombineCols && c0 + tid < hd) {
    float v = 0.f;
#pragma unroll
    for (int w = 0; w < 8; ++w) v += red[w][tid];
    o[c0 + tid] = MmaOp<T>::from_f32(v / m_sum.y);  // a NaN sum (a NaN split) makes the row NaN
  }
  if (blockIdx.y == 0 && tid == 0) a.lse[ridx] = merge::merged_lse(m_sum);
}

}  // namespace

void launch_split_combine(const FwdParams& p, int dpad, cudaStream_t stream) {
  if (p.num_rows == 0) return;
  if (p.num_splits > kMaxDecodeSplits) fail(Status::internal, "split-KV combine: too many splits");
  const dim3 grid(unsigned(p.num_rows), unsigned((p.a.shape.head_dim + kCombineCols - 1) / kCombineCols));
  auto kern = p.a.dtype == DType::bf16 ? split_combine_kernel<__nv_bfloat16> : split_combine_kernel<__half>;
  check_cuda(launch_ex(kern, grid, dim3(kCombineThreads), 0, stream, p.pdl, 1u, p, dpad), "split-KV combine launch");
}

}  // namespace flashkit::cuda
