// Host-side interface between the CUDA dispatch (cuda_runtime.cu) and the kernel instantiations
// (flash_*_{bf16,f16}_d{64,128,256}.cu, one per file so builds parallelize).
#pragma once
#include <cuda_runtime.h>

#include <array>
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
  // Decode only. decode_version: 2 = flash_decode.cuh (default), 1 = the forward kernel with one warp per CTA
  // (FLASHKIT_DECODE_KERNEL=v1). counters (v2, num_splits > 1): one arrival counter per (m-tile, KV head,
  // sequence), zeroed on the stream before the kernel (the call's own workspace); the last CTA of a tile merges
  // the splits in the kernel. nullptr: launch_split_combine runs after the kernel instead.
  int decode_version = 2;
  unsigned int* counters = nullptr;
  // Decode v2 on sm_90 (FLASHKIT_DECODE_COMBINE=cluster): > 1 launches the splits of each (m-tile, KV head,
  // sequence) as one thread-block cluster of this many CTAs (== num_splits <= kMaxDecodeCluster) that merges
  // through distributed shared memory: no o_part/lse_part, no counters, no combine launch. 0: no clusters.
  int cluster = 0;
  // Decode v2 and the split combine on sm_90: launched with programmatic dependent launch (FLASHKIT_DECODE_PDL,
  // default on), so each grid's launch overlaps the tail of the one before it in the stream.
  bool pdl = false;
};

// Most split-KV splits any decode launch uses: the combine kernel and decode v2's in-kernel merge keep one weight
// per split in shared memory.
constexpr int kMaxDecodeSplits = 512;
// Largest cluster of decode v2's cluster merge (sm_90's non-portable limit; 8 is the portable one).
constexpr int kMaxDecodeCluster = 16;

// Launch shape of decode v2 (flash_decode.cuh), shared with the split heuristic in cuda_runtime.cu: warps per
// CTA, cp.async stages per warp (16 keys of K and V each) and dynamic shared memory (Q tile + all stages).
template <int D>
struct DecodeCfg {
  static constexpr int kWarps = D == 256 ? 4 : 8;
  static constexpr int kStages = D == 64 ? 4 : 3;
  static constexpr size_t kSmem = size_t(16 * D * 2) * size_t(1 + 2 * kWarps * kStages);
};
inline size_t decode_smem_bytes(int dpad) {
  return dpad == 64 ? DecodeCfg<64>::kSmem : (dpad == 128 ? DecodeCfg<128>::kSmem : DecodeCfg<256>::kSmem);
}

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
// Decode v2's cluster merge: entry c (2..kMaxDecodeCluster) is how many clusters of c CTAs of the decode kernel
// can be resident at once on the current device; all 0 where the cluster merge cannot run (before sm_90, or no
// sm_90 code loaded). Cached per device; safe to call first inside a graph capture (flash_decode.cuh).
template <typename T, int D>
std::array<int, kMaxDecodeCluster + 1> decode_cluster_residency();
// Query rows x keys of the tile a launch used (for the FLOP count of what the kernel computed).
struct TileShape {
  int bm = 0, bn = 0;
};

// Hopper forward (flash_fwd_sm90.cuh), head_dim 64 and 128, num_splits == 1; *tile gets the tile it used. Returns false when this build or
// device cannot run it (no sm_90a code, or FLASHKIT_SM90=0 handled by the caller); the caller then uses
// launch_flash_fwd.
template <typename T, int D>
bool launch_flash_fwd_sm90(const FwdParams& p, cudaStream_t stream, TileShape* tile);
// The warp-specialized Hopper forward (flash_fwd_sm90_ws.cuh: TMA producer warp, ping-pong consumer warpgroups);
// same contract. Also false when TMA cannot describe K/V (unaligned base or strides).
template <typename T, int D>
bool launch_flash_fwd_sm90_ws(const FwdParams& p, cudaStream_t stream, TileShape* tile);
template <typename T, int D>
void launch_flash_bwd(const BwdParams& p, cudaStream_t stream);
// Hopper backward (flash_bwd_sm90.cuh), head_dim 64 and 128. Returns false when this build or device cannot run
// it; the caller then uses launch_flash_bwd.
template <typename T, int D>
bool launch_flash_bwd_sm90(const BwdParams& p, cudaStream_t stream);

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
