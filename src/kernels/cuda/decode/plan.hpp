// The decode-attention family (this folder) and its one host-side planner.
//
// Members, all split-KV (flash-decoding): the keys a query tile sees are cut into `splits` parts, one CTA each,
// whose partial results (natural-log LSE + normalized O per row) are merged by merge.cuh:
//   mma            flash_decode.cuh: the library op's kernel (seqlen_q <= 16, GQA group packed into an m16 tile,
//                  8-warp CTAs with per-warp cp.async pipelines, mma.sync); KV length from the host.
//   one_warp       the sm_80 forward kernel (flash_fwd.cuh) with one warp per CTA, for devices whose shared memory
//                  cannot hold the mma kernel's 130-200 KB CTA (A100 at d128/d256, sm_86/89 everywhere).
//   fused_prologue fused_prologue.cu: the engine's T = 1 kernel; fuses the q/k RMSNorm, RoPE and the KV append,
//                  reads the KV length (position) from device memory so a captured CUDA graph replays it, and picks
//                  at run time how many of the grid's splits the context needs.
//   paged          paged.cu: the serving step's kernel (paged.hpp). Every query row has its own sequence (a block
//                  table) and position; one CTA per (split, row, KV head, group of <= kPagedHeadsPerCta q heads), the
//                  GQA group's heads together so each K/V row is read once per query row. Splits and the visible-key
//                  count are decided per row in the kernel from the row's position (at most the plan's splits).
// Merges: none (one split), combine (a second, PDL-launched kernel over f32 partials in HBM; the library),
// cluster (the splits of a tile form one thread-block cluster and merge through distributed shared memory, sm_90),
// counter (the last CTA of a tile to arrive merges the HBM partials: one launch fewer, which the engine's graphs
// measured worth it, engine-cuda.md v6; the library's mma member on request, FLASHKIT_DECODE_COMBINE=last, v31: its
// v10 version lost to the combine launch, before PDL and the L2 prefetch that a one-launch call allows).
//
// plan_decode is pure (no CUDA call): the dispatch passes what it queried (DeviceInfo, the kernel's cluster
// residency), so the choice is unit-tested in the CPU-only build.
#pragma once
#include <cstdint>
#include <string>

#include "core/cuda_device.hpp"
#include "flashkit/tuning.hpp"

namespace flashkit::cuda {

enum class DecodeKernel : int32_t { mma = 0, one_warp = 1, fused_prologue = 2, paged = 3 };
enum class DecodeMergeKind : int32_t { none = 0, combine = 1, cluster = 2, counter = 3 };

// The mma member's merges and CTAs, automatic (Tuning::decode_combine = auto, decode_narrow = -1), from runs s17-2
// and s17-3 (H200, batch 1, 32/8 heads, variants alternated in CUDA graphs; attention-cuda.md v28, v29):
//  - the cluster merge (the splits of a tile, <= 16, one cluster merging through DSMEM: one launch a call) where every
//    CTA reads at most kDecodeClusterAutoBytesPerCta of K and V: d128 -11% / -7% at 256 / 1k keys (32 KiB a CTA) and
//    d64 -10% at 256 to 4k keys (<= 64 KiB) against the narrow combine; at 128 KiB a CTA it loses (d128 4k +3%; 32k
//    +32%: 128 CTAs of 16 splits, two an SM, read with half the SMs). The wide CTA's clusters by the same rule lost
//    (d256, 8/1 heads: +11% at 256 and 1k keys, run s17-5): opt-in only;
//  - else the narrow CTA with a grid of one full wave and the combine launch: d128 3-7% faster than the wide CTA from
//    256 to 4k keys and level at 32k; d64 4-11% faster at 256 and 1k keys, level to 2% slower at 4k and 32k, so at
//    d64 only up to 2k keys or where its clusters take the call (8 MiB of K and V at 8 KV heads);
//  - but at batch 1 up to 32k keys, where no cluster takes a d128 call and past the narrow CTA's range at d64: the
//    wide CTA with the counter merge (runs s20-2..4, attention-cuda.md v31: d128 4k-32k -1 to -3% against the
//    narrow CTA and its combine, d64 8k-32k -1 to -9% against the combine).
// (dpad: the padded head dim; keys: the longest sequence's; kv_bytes: the call's K and V.)
inline constexpr int64_t kDecodeClusterAutoBytesPerCta = int64_t(64) << 10;
inline constexpr int64_t kDecodeNarrowD64Bytes = int64_t(8) << 20;
// The mma member's counter merge: the last CTA of a tile reads every split's partial, so at most this many (d128,
// 4 rows: 64 x 2 KB).
inline constexpr int kDecodeCounterMaxSplits = 64;
constexpr bool decode_narrow_auto(int dpad, int64_t keys, int64_t kv_bytes) {
  return dpad == 128 || (dpad == 64 && (keys <= 2048 || kv_bytes <= kDecodeNarrowD64Bytes));
}
// Whether the residency the dispatch passes plan_decode is the narrow kernel's (head_dim <= 128, the narrow CTA not
// turned off, a merge other than FLASHKIT_DECODE_COMBINE=kernel): then the wide kernel's cluster merge is not
// considered. FLASHKIT_DECODE_NARROW=0 keeps the wide kernel's clusters.
constexpr bool decode_residency_is_narrow(int dpad, const Tuning& t) {
  return dpad <= 128 && t.decode_narrow != 0 && t.decode_combine != DecodeCombine::kernel;
}

struct DecodeShape {
  int64_t batch = 1;  // sequences
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  int64_t max_seqlen_q = 1;  // query rows per sequence (<= 16); the fused-prologue kernel takes 1
  // Keys: the longest sequence's, or for a KV length read on the device (kv_len_on_device), the most a launch site
  // can ever see (the cache capacity or the sliding window).
  int64_t max_seqlen_k = 0;
  int64_t window_left = -1, window_right = -1;  // the mask's window (-1: unbounded)
  bool kv_len_on_device = false;  // the engine's graph-captured kernel (the fused_prologue member)
  int fixed_splits = 0;           // fused_prologue: the launch site's grid splits when already fixed (0: plan them)
  // The paged member: `batch` query rows, each of its own sequence through a block table, max_seqlen_q = 1 per
  // row (chunk rows of one sequence are separate rows); max_seqlen_k the most keys a row of the step sees.
  bool paged = false;
  bool varlen = false;  // sequence offsets read from device memory (cu_seqlens)
};

// The paged member's constants (paged.cu and its planner): a split takes at least kPagedMinKeys keys (fewer keys
// are not worth a partial and a merge), at most kPagedMaxSplits splits per row, kPagedHeadsPerCta q heads of one KV
// head per CTA (more heads of a group take more CTAs along y).
constexpr int kPagedMinKeys = 64;
constexpr int kPagedMaxSplits = 64;
constexpr int kPagedHeadsPerCta = 8;
// How many of a plan's `splits` a row with n visible keys uses (the kernel and its merge compute the same).
constexpr int paged_row_splits(int splits, int64_t n) {
  const int64_t by_keys = (n + kPagedMinKeys - 1) / kPagedMinKeys;
  return int(by_keys < 1 ? 1 : by_keys < splits ? by_keys : splits);
}

// Whether a merge reads f32 partials from HBM (o_part / lse_part): the combine launch and the counter merge.
constexpr bool decode_merge_uses_hbm_partials(DecodeMergeKind m) {
  return m == DecodeMergeKind::combine || m == DecodeMergeKind::counter;
}

struct DecodePlan {
  DecodeKernel kernel = DecodeKernel::mma;
  int splits = 1;   // grid splits (fused_prologue: the most a launch uses; the kernel uses fewer at short contexts)
  int cluster = 0;  // > 1: CTAs per cluster along the splits (mma: == splits; fused_prologue: a power of two)
  DecodeMergeKind merge = DecodeMergeKind::none;  // fused_prologue: the merge at full context
  bool pdl = false;     // programmatic dependent launch (sm_90)
  bool narrow = false;  // mma: the narrow CTA (tiles.hpp DecodeCfg::kNarrowWarps), several an SM, one full wave
  // mma with PDL, fixed-length batches, no combine launch (Tuning::decode_prefetch): each warp asks its first blocks
  // of K and V into L2 before waiting for the previous grid (flash_decode.cuh)
  bool prefetch = false;
  int tile_m = 16;      // packed query rows per CTA
  int tile_n = 16;      // keys per pipeline block
  int64_t mtiles = 0;   // (m-tile, KV head, sequence) tiles the splits multiply
};

// residency: cluster residency of the kernel the plan is for (mma: flash_decode_kernel of this dtype and head dim;
// fused_prologue: its kernel for this head dim); only read when a cluster merge is considered, so callers may pass
// zeros when tuning and kernel rule clusters out.
DecodePlan plan_decode(const DecodeShape& shape, const DeviceInfo& dev, const Tuning& tuning,
                       const ClusterResidency& residency);

// Whether plan_decode would read the residency (to skip the occupancy queries otherwise).
bool decode_plan_needs_residency(const DecodeShape& shape, const DeviceInfo& dev, const Tuning& tuning);

// "mma.splits16.combine", "one_warp", "fused_prologue.splits64.cluster16", "paged.splits8.combine", ...
std::string decode_plan_name(const DecodePlan& plan);

}  // namespace flashkit::cuda
