// The decode family's split planner (plan.hpp). Pure: compiled in every build and unit-tested on the CPU
// (tests/attention/test_cuda_choice.cpp pins its answers for H200 and A100 shapes).
#include "kernels/cuda/decode/plan.hpp"

#include <algorithm>
#include <climits>

#include "kernels/cuda/tiles.hpp"

namespace flashkit::cuda {

namespace {

int64_t library_max_splits(const Tuning& t, int64_t dflt) {
  return t.decode_max_splits > 0 ? std::min<int64_t>(t.decode_max_splits, kMaxDecodeSplits) : dflt;
}

// The largest cluster size c (2 .. min(16, cap)) of which all `tiles` clusters are resident at once, and (by_bytes,
// the automatic choice) whose CTAs read at most kDecodeClusterAutoBytesPerCta of K and V each; 0 if none.
int64_t pick_cluster(const ClusterResidency& res, int64_t tiles, int64_t cap, int64_t kv_bytes, bool by_bytes) {
  for (int64_t c = std::min<int64_t>(kMaxDecodeCluster, cap); c >= 2; --c)
    if (res[c] >= tiles && (!by_bytes || kv_bytes <= kDecodeClusterAutoBytesPerCta * tiles * c)) return c;
  return 0;
}

// The engine's fused-prologue kernel: the grid's split count is fixed per launch site (graph capture) for the most
// keys the site can see; the kernel uses as many splits as the current position needs.
DecodePlan plan_fused_prologue(const DecodeShape& s, const DeviceInfo& dev, const Tuning& t, const ClusterResidency& res) {
  DecodePlan p;
  p.kernel = DecodeKernel::fused_prologue;
  p.tile_m = 1;
  p.tile_n = 0;  // keys are dealt out to lane groups, not blocks
  p.mtiles = s.heads;
  p.pdl = dev.cc_major >= 9 && t.cuda_pdl;
  // Enough blocks to cover the machine about twice, each with at least ~32 keys; at most 64 partials to merge.
  const int64_t sms = std::max(dev.sms, 1);
  const int64_t want = std::max<int64_t>(1, 2 * sms / std::max<int64_t>(s.heads, 1));
  const int64_t by_keys = std::max<int64_t>(1, (s.max_seqlen_k + 31) / 32);
  p.splits = s.fixed_splits > 0 ? s.fixed_splits
                                 : int(std::clamp<int64_t>(std::min(want, by_keys), 1, kFusedDecodeMaxSplits));
  p.cluster = 1;
  if (p.splits >= 2 && t.engine_decode_merge != EngineDecodeMerge::global) {
    const int cmax = res[16] > 0 ? 16 : res[8] > 0 ? 8 : 1;
    const int resident = cmax > 1 ? res[cmax] : 0;
    // One cluster per head merges. Clusters are placed whole inside one GPC, next to the previous kernel's blocks
    // (PDL): with many heads they queue. Measured on the H200 (engine-cuda.md v6): Llama's 32 heads in clusters of
    // 8 were 7% slower per decode step than the global merge, Gemma's 4 heads in clusters of 16 4% faster. So
    // clusters only when the heads need at most half of the resident clusters (counted for the largest size, a
    // lower bound for smaller ones).
    if (!(t.engine_decode_merge == EngineDecodeMerge::automatic && 2 * s.heads > resident)) {
      int c = 1;
      while (c < p.splits && c < cmax) c *= 2;  // a power of two; the grid is rounded up to whole clusters
      p.cluster = std::min(c, cmax);
    }
  }
  p.merge = p.splits == 1 ? DecodeMergeKind::none
            : p.cluster > 1 && p.splits <= p.cluster ? DecodeMergeKind::cluster
                                                      : DecodeMergeKind::counter;
  if (p.cluster <= 1) p.cluster = 0;
  return p;
}

// The paged member: rows x KV heads x head groups CTAs of 128 threads (several resident per SM). Splits only when
// those tiles give less than about two CTAs per SM, and never below kPagedMinKeys keys per split: at batch 64
// (Llama-3.2-1B: 64 x 8 tiles) a step runs unsplit; one 3,000-key sequence with 8 KV heads takes 33 splits.
DecodePlan plan_paged(const DecodeShape& s, const DeviceInfo& dev, const Tuning& t) {
  DecodePlan p;
  p.kernel = DecodeKernel::paged;
  p.tile_m = 1;
  p.tile_n = 0;
  const int64_t group = s.kv_heads > 0 ? std::max<int64_t>(1, s.heads / s.kv_heads) : 1;
  const int64_t hgroups = (group + kPagedHeadsPerCta - 1) / kPagedHeadsPerCta;
  p.mtiles = std::max<int64_t>(1, s.batch) * std::max<int64_t>(1, s.kv_heads) * hgroups;
  p.pdl = false;
  const int64_t want = std::max<int64_t>(1, (2 * int64_t(std::max(dev.sms, 1)) + p.mtiles - 1) / p.mtiles);
  int64_t keys = s.max_seqlen_k;
  if (s.window_left >= 0) keys = std::min<int64_t>(keys, s.window_left + 1);
  const int64_t cap = std::min<int64_t>(kPagedMaxSplits, library_max_splits(t, kPagedMaxSplits));
  p.splits = int(std::clamp<int64_t>(std::min(want, (keys + kPagedMinKeys - 1) / kPagedMinKeys), 1, cap));
  p.merge = p.splits == 1 ? DecodeMergeKind::none : DecodeMergeKind::combine;
  return p;
}

}  // namespace

bool decode_plan_needs_residency(const DecodeShape& s, const DeviceInfo& dev, const Tuning& t) {
  if (s.paged) return false;
  if (s.kv_len_on_device) return t.engine_decode_merge != EngineDecodeMerge::global;
  const int D = padded_head_dim(s.head_dim);
  return (t.decode_combine == DecodeCombine::cluster || (decode_residency_is_narrow(D, t) && dev.cc_major >= 9)) &&
         size_t(dev.smem_per_block_optin) >= decode_smem_bytes(D);
}

namespace {

// The library op's members: mma (its CTA, splits and merge) or one_warp.
DecodePlan plan_library(const DecodeShape& s, const DeviceInfo& dev, const Tuning& t, const ClusterResidency& res) {
  DecodePlan p;
  const int D = padded_head_dim(s.head_dim);
  bool counter_auto = false;  // the counter merge's automatic case (below)
  const int64_t group = s.kv_heads > 0 ? s.heads / s.kv_heads : 1;
  const int64_t mtiles = (group * s.max_seqlen_q + 15) / 16;
  const int64_t base = mtiles * s.kv_heads * s.batch;  // (m-tile, KV head, sequence) tiles
  p.mtiles = base;
  const size_t smem = decode_smem_bytes(D);
  p.kernel = size_t(dev.smem_per_block_optin) >= smem ? DecodeKernel::mma : DecodeKernel::one_warp;
  if (p.kernel == DecodeKernel::mma) {
    p.pdl = t.decode_pdl && dev.cc_major >= 9;
    // One CTA per SM (its shared memory). Splits s minimize a wave model of the time: ceil(base*s / slots) waves
    // of ceil(blocks/s) 16-key blocks per CTA plus a fixed cost c0 per CTA (prologue, merge: ~64 KB worth of
    // loads, 1024/D blocks); more splits must gain 2% (partials, merge). E.g. H200 (132 slots), 32k keys (2048
    // blocks): batch 1 and 8 KV heads -> 16 splits (128 CTAs, one wave); 1 KV head -> 128; batch 16 x 8 KV heads
    // -> 1; batch 5 x 8 KV heads -> 13 (520 CTAs, ~4 waves).
    const int64_t slots = int64_t(dev.sms) * std::max<int64_t>(1, int64_t(dev.smem_per_sm) / int64_t(smem + 1024));
    int64_t nblocks = (s.max_seqlen_k + 15) / 16;
    // A left window bounds a tile's visible keys: hi(imax) - lo(imin) <= left + seqlen_q + max(right, 0).
    if (s.window_left >= 0)
      nblocks = std::min<int64_t>(nblocks, (s.window_left + s.max_seqlen_q + std::max<int64_t>(s.window_right, 0)) / 16 + 2);
    const int64_t c0 = 1024 / D;
    const int64_t cap = std::min<int64_t>({std::max<int64_t>(1, nblocks / 2), library_max_splits(t, kMaxDecodeSplits),
                                           8 * slots / std::max<int64_t>(1, base) + 1});
    int64_t best = 1, best_t = INT64_MAX;
    for (int64_t sp = 1; sp <= cap; ++sp) {
      const int64_t tm = (base * sp + slots - 1) / slots * ((nblocks + sp - 1) / sp + c0);
      if (best_t == INT64_MAX || tm * 50 < best_t * 49) best_t = tm, best = sp;
    }
    p.splits = int(best);
    // The narrow CTA (head_dim <= 128): with the cluster merge where it applies (pick_cluster; the residency is the
    // narrow kernel's then, decode_residency_is_narrow), else as many splits as fill one wave of it exactly (v28: a
    // read kernel over a 32k-key, 8-head cache takes 32.0 us with 128 CTAs and 31.0 with 264 on the H200's 132 SMs,
    // bench/cuda/kv_read_ceiling.cu) and the combine. Automatic only where it was measured: Hopper, the wide plan
    // splits and is one wave (batch 1, a few KV heads).
    const bool wide_split_wave = dev.cc_major >= 9 && p.splits > 1 && base * p.splits <= slots;
    const int64_t kv_bytes = 4 * s.batch * s.kv_heads * s.max_seqlen_k * s.head_dim;  // K and V, 2 bytes each
    // The counter merge's automatic case (v31, runs s20-3/s20-4; batch 1, 8 KV heads): the wide CTA in one wave at
    // d64 past the narrow CTA's range (8k-32k keys: -1 to -9% against the combine launch) and at d128 where no
    // cluster takes the call (4k-32k keys: -1 to -3% against the narrow grid and its combine launch).
    counter_auto = s.batch == 1 && wide_split_wave && t.decode_combine == DecodeCombine::automatic &&
                   s.max_seqlen_k <= 32768 &&
                   ((D == 64 && !decode_narrow_auto(D, s.max_seqlen_k, kv_bytes)) || D == 128);
    const bool narrow_wanted =
        t.decode_narrow == 1 || (t.decode_narrow < 0 && wide_split_wave && decode_narrow_auto(D, s.max_seqlen_k, kv_bytes));
    if (narrow_wanted && D <= 128 && (t.decode_combine != DecodeCombine::cluster || decode_residency_is_narrow(D, t)) &&
        dev.smem_per_sm > 0) {
      const size_t nsmem = decode_smem_bytes(D, true);
      const int64_t nslots = int64_t(dev.sms) * (int64_t(dev.smem_per_sm) / int64_t(nsmem + 1024));
      const bool windowed = s.window_left >= 0;
      if (nslots >= 2 * int64_t(dev.sms) && base <= nslots && !windowed && nblocks >= 2) {
        p.narrow = true;
        const int64_t ncap = std::min<int64_t>(std::max<int64_t>(1, nblocks / 2), library_max_splits(t, kMaxDecodeSplits));
        if (t.decode_combine != DecodeCombine::kernel)
          if (const int64_t c = pick_cluster(res, base, ncap, kv_bytes,
                                             t.decode_combine == DecodeCombine::automatic ||
                                                 t.decode_combine == DecodeCombine::last)) {
            p.splits = p.cluster = int(c);  // one launch
            p.merge = DecodeMergeKind::cluster;
            return p;
          }
        if (counter_auto && t.decode_narrow < 0) {
          p.narrow = false;  // d128 past the clusters' range: the wide CTA and the counter merge (below)
        } else {
          p.splits = int(std::clamp<int64_t>(nslots / base, 1, ncap));
          const bool counter = t.decode_combine == DecodeCombine::last && p.splits <= kDecodeCounterMaxSplits;
          p.merge = p.splits == 1 ? DecodeMergeKind::none : counter ? DecodeMergeKind::counter : DecodeMergeKind::combine;
          return p;
        }
      }
    }
    // (The wide CTA's clusters by the same rule lost at d256, 8/1 heads: 256 keys 7.49 -> 8.30 us, 1k 8.32 -> 9.27;
    // run s17-5, attention-cuda.md v29. They stay opt-in: FLASHKIT_DECODE_COMBINE=cluster.)
    if (t.decode_combine == DecodeCombine::cluster && res[2] > 0 && !decode_residency_is_narrow(D, t)) {
      // Cluster merge: the splits of a tile form one cluster, so s <= 16 and a wave holds res[s] tiles (clusters
      // are placed whole inside a GPC: res[s] * s can be well below the slots, e.g. clusters of 16 on a chip whose
      // GPCs have 14-18 free SMs). Same model with that wave; taken when it is at most 1/8 above the unclustered
      // model's best (the merge round trips it removes are not in the model), else the usual path. E.g. H200
      // batch 1, 32/8 heads, 32k keys: 8 tiles x 16 = 128 CTAs, one wave if 8 clusters of 16 fit (model 136 = the
      // usual 136: clusters); if only 6 fit, 14 splits (155 > 136 * 9/8: the usual 16 splits and merge). A cluster
      // model that prefers no split at all also keeps the usual path.
      int64_t cbest = 1, cbest_t = (base + slots - 1) / slots * (nblocks + c0);
      for (int64_t sp = 2; sp <= std::min<int64_t>(cap, kMaxDecodeCluster); ++sp) {
        if (res[sp] < 1) continue;
        const int64_t tm = (base + res[sp] - 1) / res[sp] * ((nblocks + sp - 1) / sp + c0);
        if (tm * 50 < cbest_t * 49) cbest_t = tm, cbest = sp;
      }
      if (cbest > 1 && cbest_t * 8 <= best_t * 9) p.splits = p.cluster = int(cbest);
    }
  } else {
    const auto tile = sm80_decode_tile(D);
    p.tile_n = tile.bn;
    const int64_t nblocks = (s.max_seqlen_k + tile.bn - 1) / tile.bn;
    const int64_t slots = int64_t(dev.sms) * sm80_decode_ctas_per_sm(D);
    // Many (sequence, KV head) tiles: about three waves of CTAs. Few (batch 1): fill ~2/3 of one wave; more
    // splits were measured slower (per-split setup and combine; 2026-11-30, worklog v4).
    int64_t splits = base * 8 <= slots ? std::max<int64_t>(1, (2 * slots / 3) / std::max<int64_t>(1, base))
                                       : (slots * 3 + base - 1) / base;
    splits = std::min<int64_t>({splits, std::max<int64_t>(1, nblocks / 4), library_max_splits(t, 128)});
    p.splits = int(std::max<int64_t>(1, splits));
  }
  p.merge = p.splits == 1 ? DecodeMergeKind::none : p.cluster > 1 ? DecodeMergeKind::cluster : DecodeMergeKind::combine;
  // The counter merge instead of the combine launch (v31): automatic where counter_auto says; it lost with the narrow
  // CTA (d128: +2 to +6%, 33 partials for the last CTA's 128 threads) and at d256 (+3 to +9 us: 8 rows x 32-64
  // partials). FLASHKIT_DECODE_COMBINE=last takes it wherever the combine would run (up to kDecodeCounterMaxSplits
  // partials).
  if (p.kernel == DecodeKernel::mma && p.merge == DecodeMergeKind::combine && p.splits <= kDecodeCounterMaxSplits &&
      (counter_auto || t.decode_combine == DecodeCombine::last))
    p.merge = DecodeMergeKind::counter;
  return p;
}

}  // namespace

DecodePlan plan_decode(const DecodeShape& s, const DeviceInfo& dev, const Tuning& t, const ClusterResidency& res) {
  if (s.paged) return plan_paged(s, dev, t);
  if (s.kv_len_on_device) return plan_fused_prologue(s, dev, t, res);
  DecodePlan p = plan_library(s, dev, t, res);
  // The L2 prefetch before the PDL wait (v30, run s19-2): -9 to -26% a call where no combine launch sits between two
  // calls (one split, or the cluster merge), +2 to +8% behind a combine; never with varlen offsets (device memory
  // the previous grid may write). With the counter merge it lost too (v31, run s20-2: d128 4k +1.4 us, d64 32k
  // +0.2-1 us): the next call's prefetches compete with the last CTAs' merge.
  p.prefetch = p.kernel == DecodeKernel::mma && p.pdl && t.decode_prefetch && !s.varlen &&
               (p.merge == DecodeMergeKind::none || p.merge == DecodeMergeKind::cluster);
  return p;
}

std::string decode_plan_name(const DecodePlan& p) {
  std::string s = p.kernel == DecodeKernel::mma        ? "mma"
                  : p.kernel == DecodeKernel::one_warp ? "one_warp"
                  : p.kernel == DecodeKernel::paged    ? "paged"
                                                       : "fused_prologue";
  if (p.narrow) s += ".narrow";
  if (p.prefetch) s += ".prefetch";
  if (p.splits > 1) s += ".splits" + std::to_string(p.splits);
  switch (p.merge) {
    case DecodeMergeKind::combine: s += ".combine"; break;
    case DecodeMergeKind::cluster: s += ".cluster" + std::to_string(p.cluster); break;
    case DecodeMergeKind::counter: s += p.cluster > 1 ? ".counter.cluster" + std::to_string(p.cluster) : ".counter"; break;
    default: break;
  }
  return s;
}

}  // namespace flashkit::cuda
