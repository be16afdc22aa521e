// Host-side interface of the CUDA attention kernels: the parameter blocks and the launchers. The dispatch
// (src/ops/attention_cuda.cpp) calls the dtype-erased launchers at the end of this file (launch_table.cpp), each
// with the configuration a pure choice function picked (src/ops/attention_choice.cpp); the templates are
// instantiated one per file (flash_*_{bf16,f16}_d{64,128,256}.cu) so builds parallelize. Tile shapes: tiles.hpp.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_device.hpp"
#include "flashkit/dtype.hpp"
#include "kernels/attention_args.hpp"
#include "kernels/cuda/decode/plan.hpp"
#include "kernels/cuda/tiles.hpp"
#include "kernels/cuda/ws_schedule.hpp"

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
  // Decode only (the plan of decode/plan.hpp): which member runs, and on sm_90 as clusters (> 1: the splits of each
  // (m-tile, KV head, sequence) are one thread-block cluster of this many CTAs, == num_splits <= kMaxDecodeCluster,
  // merging through distributed shared memory: no o_part/lse_part, no combine launch; 0: no clusters). pdl: the
  // decode kernel and the split combine are launched with programmatic dependent launch, so each grid's launch
  // overlaps the tail of the one before it in the stream.
  DecodeKernel decode_kernel = DecodeKernel::mma;
  bool decode_narrow = false;  // mma: the narrow CTA (DecodeCfg::kNarrowWarps warps; head_dim <= 128)
  bool decode_prefetch = false;  // mma: K/V's first blocks into L2 before the PDL wait (DecodePlan::prefetch)
  // mma with the counter merge (DecodeMergeKind::counter): one arrival counter per (m-tile, KV head, sequence) tile,
  // [batch][kv_heads][m-tiles], 0 before the launch and put back to 0 by it; the last CTA of a tile merges the
  // o_part/lse_part partials in the kernel (no combine launch). nullptr: the combine launch merges.
  unsigned int* decode_counters = nullptr;
  int cluster = 0;
  bool pdl = false;
  // The warp-specialized Hopper forward only: > 0 launches its persistent grid of this many CTAs (FwdChoice's
  // persist_ctas); 0 one CTA per work tile.
  int ws_persist_ctas = 0;
  // ... and its epilogue overlapping the next work tile's first product (FwdChoice's overlap_epilogue; v23).
  bool ws_overlap_epilogue = false;
  // ... with that epilogue's O written by TMA stores where a warpgroup's rows allow (FwdChoice's tma_store_o; v23b).
  bool ws_tma_store_o = false;
  // ... as its DENSE variant (FwdChoice's dense, ws_dense_fwd; v27): the tile bookkeeping of a fixed-length call
  // without window, softcap, packed group or padded head dim in 32-bit arithmetic; ws_dense_geom is filled by the
  // launcher (it knows the tiles).
  bool ws_dense = false;
  WsDenseGeom ws_dense_geom;
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
// The mma decode kernel's cluster residency on the current device (decode/flash_decode.cuh), wide (NW = kWarps) or
// narrow (kNarrowWarps). Cached per device; safe to call first inside a graph capture.
template <typename T, int D, int NW = DecodeCfg<D>::kWarps>
ClusterResidency decode_cluster_residency();

// Hopper forward (flash_fwd_sm90.cuh), head_dim 64 and 128, num_splits == 1, configuration 1 or 2 (tiles.hpp).
// Returns false when this build or device cannot run it (no sm_90a code for the device).
template <typename T, int D>
bool launch_flash_fwd_sm90(const FwdParams& p, int config, cudaStream_t stream);
// The warp-specialized Hopper forward (flash_fwd_sm90_ws.cuh: TMA producer warp, ping-pong consumer warpgroups);
// same contract. Also false when TMA cannot describe K/V (unaligned base or strides) or K is empty. bn: the key
// tile, sm90_ws_tile(D)'s or sm90_ws_wide_tile(D)'s.
template <typename T, int D>
bool launch_flash_fwd_sm90_ws(const FwdParams& p, int bn, bool pingpong, cudaStream_t stream);
template <typename T, int D>
void launch_flash_bwd(const BwdParams& p, cudaStream_t stream);
// Hopper backward (flash_bwd_sm90.cuh), head_dim 64 and 128, the tile of sm90_bwd_tile(D, config, softcap).
// Returns false when this build or device cannot run it.
template <typename T, int D>
bool launch_flash_bwd_sm90(const BwdParams& p, int config, cudaStream_t stream);
// The warp-specialized Hopper backward (flash_bwd_sm90_ws.cuh), head_dim 64 and 128, no softcap, the tile of
// sm90_bwd_ws_tile(D). Also false when TMA cannot describe Q/dO/K/V or the register budget is not the kernel's.
template <typename T, int D>
bool launch_flash_bwd_sm90_ws(const BwdParams& p, cudaStream_t stream);
// Hopper backward at head_dim 256 (flash_bwd_sm90_d256.cuh), the tile of sm90_bwd_d256_tile(); false as above.
template <typename T>
bool launch_flash_bwd_sm90_d256(const BwdParams& p, cudaStream_t stream);
// The warp-specialized Hopper backward at head_dim 256 (flash_bwd_sm90_ws_d256.cuh), no softcap, the same tile;
// also false when TMA cannot describe Q/dO/K/V or the register budget is not the kernel's.
template <typename T>
bool launch_flash_bwd_sm90_ws_d256(const BwdParams& p, cudaStream_t stream);

// dtype-generic helpers: the decode family's split combine (decode/combine.cu), the backward's pre/postprocess and
// strided repacking (flash_aux.cu)
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

// ---- launchers by dtype (bf16 / f16) and padded head dim (64 / 128 / 256), for the dispatch (launch_table.cpp).
// The bool ones return false when the kernel declined (see the templates above); nothing was launched then.
void launch_fwd_sm80(DType dt, int dpad, const FwdParams& p, cudaStream_t stream);
bool launch_fwd_sm90(DType dt, int dpad, int config, const FwdParams& p, cudaStream_t stream);
bool launch_fwd_sm90_ws(DType dt, int dpad, int bn, bool pingpong, const FwdParams& p, cudaStream_t stream);
void launch_decode(DType dt, int dpad, const FwdParams& p, cudaStream_t stream);
// narrow: the narrow CTA's residency (plan.hpp decode_residency_is_narrow), at head_dim <= 128.
ClusterResidency decode_cluster_residency(DType dt, int dpad, bool narrow);
void launch_bwd_sm80(DType dt, int dpad, const BwdParams& p, cudaStream_t stream);
bool launch_bwd_sm90(DType dt, int dpad, int config, const BwdParams& p, cudaStream_t stream);
bool launch_bwd_sm90_ws(DType dt, int dpad, const BwdParams& p, cudaStream_t stream);

}  // namespace flashkit::cuda
