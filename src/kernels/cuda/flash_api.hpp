// Host-side interface between the CUDA dispatch (cuda_runtime.cu) and the kernel instantiations
// (flash_*_{bf16,f16}_d{64,128,256}.cu, one per file so builds parallelize).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention_args.hpp"

namespace flashkit::cuda {

// Forward parameters. num_splits > 1 (flash-decoding) writes per-split partial results to o_part/lse_part
// instead of o/lse; a combine kernel reduces them. pack_gqa puts the group's query heads of one KV head
// into one row tile (rows = group * seqlen_q), so short queries still fill a tensor-core tile.
struct FwdParams {
  kernels::AttentionFwdArgs a;
  int num_splits = 1;
  bool pack_gqa = false;
  float* o_part = nullptr;    // [num_splits, num_rows, Dpad] f32
  float* lse_part = nullptr;  // [num_splits, num_rows] f32 (natural log)
  int64_t num_rows = 0;       // rows of the lse layout: batch_slots * heads * seqlen_q
};

struct BwdParams {
  kernels::AttentionBwdArgs g;
  float* dq_accum = nullptr;  // [num_rows, Dpad] f32, zeroed before the main kernel
  float* dsum = nullptr;      // [num_rows] f32: rowsum(dO * O)
  int64_t num_rows = 0;
};

template <typename T, int D>
void launch_flash_fwd(const FwdParams& p, cudaStream_t stream);
template <typename T, int D>
void launch_flash_decode(const FwdParams& p, cudaStream_t stream);
template <typename T, int D>
void launch_flash_bwd(const BwdParams& p, cudaStream_t stream);

// dtype-generic helpers (flash_aux.cu)
void launch_split_combine(const FwdParams& p, int dpad, cudaStream_t stream);
void launch_bwd_preprocess(const BwdParams& p, cudaStream_t stream);
void launch_bwd_postprocess(const BwdParams& p, int dpad, cudaStream_t stream);
void copy_operand16(void* dst, const kernels::AttnOperand& ds, const void* src, const kernels::AttnOperand& ss,
                    int64_t B, int64_t S, int64_t H, int64_t D, cudaStream_t stream);

// The IO-unaware baseline (standard.cu): scores and probabilities in device memory, cuBLAS GEMMs.
// `host_cu` holds host copies of cu_seqlens_q then cu_seqlens_k (num_seqs+1 each) when varlen.
double standard_forward(const kernels::AttentionFwdArgs& a, const int32_t* host_cu, cudaStream_t stream);
double standard_backward(const kernels::AttentionBwdArgs& g, const int32_t* host_cu, cudaStream_t stream);
// Peak workspace bytes the standard path allocates for these shapes.
double standard_workspace_bytes(const kernels::AttentionShape& s, bool backward);

}  // namespace flashkit::cuda
