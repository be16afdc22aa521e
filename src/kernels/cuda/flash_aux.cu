// Small memory-bound kernels around the flash kernels: the backward preprocess (rowsum(dO * O)) and postprocess
// (dQ f32 accumulator -> dtype), and strided repacking. (The decode family's split combine: decode/combine.cu.)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "core/cuda_check.hpp"
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
