// Small memory-bound kernels around the flash kernels: the split-KV combine (flash-decoding), the backward
// preprocess (rowsum(dO * O)) and postprocess (dQ f32 accumulator -> dtype), and strided repacking.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "flashkit/error.hpp"
#include "kernels/cuda/flash_api.hpp"
#include "kernels/cuda/flash_common.cuh"

namespace flashkit::cuda {

namespace {
void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail(Status::device_error, std::string(what) + ": " + cudaGetErrorString(e));
}

template <typename T>
__device__ __forceinline__ float ld(const T* p) {
  return MmaOp<T>::to_f32(*p);
}

unsigned blocks_for(int64_t n, int per) { return unsigned((n + per - 1) / per); }

// One warp per row of the [batch_slot, heads, seqlen_q] layout.
template <typename T>
__global__ void split_combine_kernel(const FwdParams p, int dpad) {
  const int64_t ridx = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (ridx >= p.num_rows) return;
  const auto& a = p.a;
  const RowIndex ri = split_row_index(ridx, a.shape.heads, a.shape.seqlen_q);
  float m = -INFINITY;
  for (int s = 0; s < p.num_splits; ++s) m = fmaxf(m, p.lse_part[int64_t(s) * p.num_rows + ridx]);
  T* o = static_cast<T*>(a.o.data) + ri.bslot * a.o.stride_b + ri.row * a.o.stride_s + ri.h * a.o.stride_h;
  if (m == -INFINITY) {
    for (int d = lane; d < a.shape.head_dim; d += 32) o[d] = MmaOp<T>::from_f32(0.f);
    if (lane == 0) a.lse[ridx] = -INFINITY;
    return;
  }
  float wsum = 0.f;
  for (int s = 0; s < p.num_splits; ++s) wsum += __expf(p.lse_part[int64_t(s) * p.num_rows + ridx] - m);
  const float inv = 1.f / wsum;
  for (int d = lane; d < a.shape.head_dim; d += 32) {
    float acc = 0.f;
    for (int s = 0; s < p.num_splits; ++s) {
      const float w = __expf(p.lse_part[int64_t(s) * p.num_rows + ridx] - m);
      acc += w * p.o_part[(int64_t(s) * p.num_rows + ridx) * dpad + d];
    }
    o[d] = MmaOp<T>::from_f32(acc * inv);
  }
  if (lane == 0) a.lse[ridx] = m + __logf(wsum);
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

int fwd_block_m(int /*dpad*/, bool decode) { return decode ? 16 : 64; }

void launch_split_combine(const FwdParams& p, int dpad, cudaStream_t stream) {
  if (p.num_rows == 0) return;
  if (p.a.dtype == DType::bf16)
    split_combine_kernel<__nv_bfloat16><<<blocks_for(p.num_rows, 8), 256, 0, stream>>>(p, dpad);
  else
    split_combine_kernel<__half><<<blocks_for(p.num_rows, 8), 256, 0, stream>>>(p, dpad);
  check_launch("split-KV combine launch");
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
