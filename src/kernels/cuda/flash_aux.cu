// Small memory-bound kernels around the flash kernels: the split-KV combine (flash-decoding), the backward
// preprocess (rowsum(dO * O)) and postprocess (dQ f32 accumulator -> dtype), and strided repacking.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "core/cuda_check.hpp"
#include "core/pdl.cuh"
#include "flashkit/error.hpp"
#include "kernels/cuda/flash_api.hpp"
#include "kernels/cuda/flash_common.cuh"
#include "kernels/cuda/launch.hpp"

namespace flashkit::cuda {

namespace {
void check_launch(const char* what) { check_cuda(cudaGetLastError(), what); }

template <typename T>
__device__ __forceinline__ float ld(const T* p) {
  return MmaOp<T>::to_f32(*p);
}

unsigned blocks_for(int64_t n, int per) { return unsigned((n + per - 1) / per); }

// One 256-thread block per (row of the [batch_slot, heads, seqlen_q] layout, 64 columns). Warp w sums splits w,
// w+8, ... with lane l covering columns 2l, 2l+1 (one coalesced 256-byte read per split and warp, all of them
// independent: a serial walk over the splits is latency-bound, ~80 us for 128 splits), then the 8 partial sums
// meet in shared memory. Spreading a row's columns over blocks matters when rows are few: one KV head at batch 1
// is 8 rows x ~130 splits x 256 columns (1 MB of partials) that one block per row read with only 8 SMs.
constexpr int kCombineCols = 64;
template <typename T>
__global__ void __launch_bounds__(256) split_combine_kernel(const FwdParams p, int dpad) {
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
  float m = -INFINITY;
  for (int s = tid; s < S; s += 256) m = fmaxf(m, p.lse_part[int64_t(s) * p.num_rows + ridx]);
#pragma unroll
  for (int w = 16; w > 0; w >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, w));
  if (lane == 0) stat[wid] = m;
  __syncthreads();
  m = stat[0];
#pragma unroll
  for (int w = 1; w < 8; ++w) m = fmaxf(m, stat[w]);
  T* o = static_cast<T*>(a.o.data) + ri.bslot * a.o.stride_b + ri.row * a.o.stride_s + ri.h * a.o.stride_h;
  if (m == -INFINITY) {  // uniform across the block
    if (tid < kCombineCols && c0 + tid < hd) o[c0 + tid] = MmaOp<T>::from_f32(0.f);
    if (blockIdx.y == 0 && tid == 0) a.lse[ridx] = -INFINITY;
    return;
  }
  __syncthreads();  // every thread has read stat[] before it is reused for the weight sum
  float ws = 0.f;
  for (int s = tid; s < S; s += 256) {
    const float w = __expf(p.lse_part[int64_t(s) * p.num_rows + ridx] - m);
    wsh[s] = w;
    ws += w;
  }
#pragma unroll
  for (int w = 16; w > 0; w >>= 1) ws += __shfl_xor_sync(0xffffffffu, ws, w);
  if (lane == 0) stat[wid] = ws;
  __syncthreads();
  float wsum = 0.f;
#pragma unroll
  for (int w = 0; w < 8; ++w) wsum += stat[w];
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
    o[c0 + tid] = MmaOp<T>::from_f32(v / wsum);
  }
  if (blockIdx.y == 0 && tid == 0) a.lse[ridx] = m + __logf(wsum);
}

template <typename T>
__global__ void bwd_preprocess_kernel(const BwdParams p) {
  const int64_t ridx = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (ridx >= p.num_rows) return;
  const auto& a = p.g.fwd;
  const RowIndex ri = split_row_index(ridx, a.shape.heads, a.shape.seqlen_q);
  const T* o = static_cast<const T*>(a.o.data) + ri.bslot * a.o.stride_b + ri.row * a.o.stride_s + ri.h * a.o.stride_h;
  const T* d = static_cast<const T*>(p.g.dout.data) + ri.bslot * p.g.dout.stride_b + ri.row * p.g.dout.stride_s +
               ri.h * p.g.dout.stride_h;
  float acc = 0.f;
  for (int c = lane; c < a.shape.head_dim; c += 32) acc += ld(o + c) * ld(d + c);
#pragma unroll
  for (int w = 16; w > 0; w >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, w);
  if (lane == 0) p.dsum[ridx] = acc;
}

template <typename T>
__global__ void bwd_postprocess_kernel(const BwdParams p, int dpad) {
  const auto& a = p.g.fwd;
  const int64_t dreal = a.shape.head_dim;
  const int64_t n = p.num_rows * dreal;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ridx = e / dreal, c = e % dreal;
    const RowIndex ri = split_row_index(ridx, a.shape.heads, a.shape.seqlen_q);
    T* dq = static_cast<T*>(p.g.dq.data) + ri.bslot * p.g.dq.stride_b + ri.row * p.g.dq.stride_s + ri.h * p.g.dq.stride_h;
    dq[c] = MmaOp<T>::from_f32(p.dq_accum[ridx * dpad + c] * a.scale);
  }
}

__global__ void copy_strided_kernel(uint16_t* dst, kernels::AttnOperand ds, const uint16_t* src,
                                    kernels::AttnOperand ss, int64_t S, int64_t H, int64_t D, int64_t n) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t d = e % D, h = (e / D) % H, s = (e / (D * H)) % S, b = e / (D * H * S);
    dst[b * ds.stride_b + s * ds.stride_s + h * ds.stride_h + d] = src[b * ss.stride_b + s * ss.stride_s + h * ss.stride_h + d];
  }
}
}  // namespace

void launch_split_combine(const FwdParams& p, int dpad, cudaStream_t stream) {
  if (p.num_rows == 0) return;
  if (p.num_splits > kMaxDecodeSplits) fail(Status::internal, "split-KV combine: too many splits");
  const dim3 grid(unsigned(p.num_rows), unsigned((p.a.shape.head_dim + kCombineCols - 1) / kCombineCols));
  auto kern = p.a.dtype == DType::bf16 ? split_combine_kernel<__nv_bfloat16> : split_combine_kernel<__half>;
  check_cuda(launch_ex(kern, grid, dim3(256), 0, stream, p.pdl, 1u, p, dpad), "split-KV combine launch");
}

void launch_bwd_preprocess(const BwdParams& p, cudaStream_t stream) {
  if (p.num_rows == 0) return;
  if (p.g.fwd.dtype == DType::bf16)
    bwd_preprocess_kernel<__nv_bfloat16><<<blocks_for(p.num_rows, 8), 256, 0, stream>>>(p);
  else
    bwd_preprocess_kernel<__half><<<blocks_for(p.num_rows, 8), 256, 0, stream>>>(p);
  check_launch("backward preprocess launch");
}

void launch_bwd_postprocess(const BwdParams& p, int dpad, cudaStream_t stream) {
  const int64_t n = p.num_rows * p.g.fwd.shape.head_dim;
  if (n == 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>((n + 255) / 256, 132 * 16));
  if (p.g.fwd.dtype == DType::bf16)
    bwd_postprocess_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(p, dpad);
  else
    bwd_postprocess_kernel<__half><<<blocks, 256, 0, stream>>>(p, dpad);
  check_launch("backward postprocess launch");
}

// Copies a 16-bit [B, S, H, D] operand between two stride sets.
void copy_operand16(void* dst, const kernels::AttnOperand& ds, const void* src, const kernels::AttnOperand& ss,
                    int64_t B, int64_t S, int64_t H, int64_t D, cudaStream_t stream) {
  const int64_t n = B * S * H * D;
  if (n == 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>((n + 255) / 256, 132 * 32));
  copy_strided_kernel<<<blocks, 256, 0, stream>>>(static_cast<uint16_t*>(dst), ds, static_cast<const uint16_t*>(src),
                                                  ss, S, H, D, n);
  check_launch("strided copy launch");
}

}  // namespace flashkit::cuda
