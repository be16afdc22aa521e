// Tile shapes of every CUDA attention kernel configuration, in one place: the launchers instantiate their kernels
// from these constants and the pure choice functions (src/ops/attention_choice.cpp, decode/plan.cpp) read the same
// ones, so the FLOP count, the split planner and the kernels cannot drift apart. Plain C++ (no CUDA header): the
// CPU-only build compiles it for the choice tests. Measurements behind each shape: docs/worklog/attention-cuda.md.
#pragma once
#include <cstddef>
#include <cstdint>

namespace flashkit::cuda {

// The head dims the kernels are instantiated for; others (multiples of 8) are padded up to the next one.
constexpr int padded_head_dim(int64_t d) { return d <= 64 ? 64 : (d <= 128 ? 128 : 256); }

// ---- sm_80 forward, mma.sync (flash_fwd.cuh): NW warps of MT m16 tiles each, BN keys per stage, two cp.async
// stages; Q fragments in registers when QREG (one m-tile per warp only).
struct Sm80FwdTile {
  int bn, warps, mt;
  bool qreg;
  constexpr int bm() const { return 16 * warps * mt; }
};
constexpr Sm80FwdTile sm80_fwd_tile(int dpad) {  // prefill (v2: two m-tiles per warp at d64/d128)
  return dpad == 256 ? Sm80FwdTile{32, 4, 1, false} : Sm80FwdTile{64, 4, 2, false};
}
// The same kernel with one warp per CTA as the decode path of devices whose shared memory cannot hold the decode
// kernel's CTA (DecodeCfg below: 130-200 KB; sm_80's opt-in limit is 163 KB, sm_86/89's 99 KB).
constexpr Sm80FwdTile sm80_decode_tile(int dpad) {
  return dpad == 64 ? Sm80FwdTile{64, 1, 1, true} : dpad == 128 ? Sm80FwdTile{32, 1, 1, true} : Sm80FwdTile{32, 1, 1, false};
}
constexpr int kSm80FwdStages = 2;
// CTAs of the one-warp decode tile one SM holds (its shared memory), for the split planner.
constexpr int sm80_decode_ctas_per_sm(int dpad) { return dpad == 256 ? 3 : 6; }

// ---- sm_90a forward on wgmma (flash_fwd_sm90.cuh), configurations 1 and 2: NWG warpgroups of 64 rows, BN keys per
// stage, STAGES cp.async stages, MINB CTAs per SM (launch bound).
struct Sm90FwdTile {
  int bn, warpgroups, stages, min_blocks;
  constexpr int bm() const { return 64 * warpgroups; }
};
constexpr Sm90FwdTile sm90_fwd_tile(int dpad, int config) {
  return dpad == 64 ? (config == 2 ? Sm90FwdTile{64, 1, 2, 4} : Sm90FwdTile{128, 2, 2, 2})
                    : (config == 2 ? Sm90FwdTile{128, 2, 2, 1} : Sm90FwdTile{64, 2, 2, 2});
}
// ---- the warp-specialized TMA forward (flash_fwd_sm90_ws.cuh): one producer warpgroup, two consumer warpgroups of
// 64 rows, BN 128, 3 stages at d64 (112 KB) and 2 at d128 (160 KB); d256: BN 80, 2 stages (Q 64 KB + K/V 160 KB; a
// warpgroup's O is 128 f32 registers per thread, S 40 and P 20 beside it): one CTA per SM.
struct Sm90WsTile {
  int bm, bn, stages;
};
constexpr Sm90WsTile sm90_ws_tile(int dpad) {
  return dpad == 256 ? Sm90WsTile{128, 80, 2} : Sm90WsTile{128, 128, dpad == 64 ? 3 : 2};
}
// d128's wide key tile (FA3's non-causal d128 tile): S 88 + P 44 + O 64 accumulator registers per consumer thread,
// Q 32 KB + 2 stages x K, V 44 KB = 208 KB of shared memory. It pays from 8k keys (run s13-2, bf16, TFLOP/s against
// BN 128: non-causal 591 / 577 at 8k, 606 / 587 at 16k; causal 556 / 538, 581 / 567) and loses below (512 keys:
// 293 / 340, 141 / 168): fewer, longer key tiles per CTA amortize the per-tile softmax and barrier cost only when
// a CTA walks many of them. bn_asked: Tuning::sm90_ws_bn (0 automatic, 128 or 176 forced).
// d64's (v18b): BN 192, 3 stages (Q 16 KB + 3 x 2 x 24 KB = 160 KB; S 96 + P 48 + O 32 registers); also from 8k
// keys (run s13-6, TFLOP/s against BN 128: non-causal 437 / 419 at 8k, 457 / 430 at 16k; causal 398 / 382, 440 / 416;
// below 4k it loses, 166 / 210 at 512).
// sm90_ws_wide_tile(dpad): the wide tile of a head dim ({0, 0, 0}: none); sm90_ws_wide(dpad, seqlen_k, bn_asked):
// whether a call takes it. bn_asked: Tuning::sm90_ws_bn (0 automatic, else the key tile asked for).
constexpr Sm90WsTile kSm90WsTileWide128{128, 176, 2};
constexpr Sm90WsTile kSm90WsTileWide64{128, 192, 3};
constexpr Sm90WsTile sm90_ws_wide_tile(int dpad) {
  return dpad == 128 ? kSm90WsTileWide128 : dpad == 64 ? kSm90WsTileWide64 : Sm90WsTile{0, 0, 0};
}
constexpr bool sm90_ws_wide(int dpad, int64_t seqlen_k, int bn_asked) {
  const Sm90WsTile w = sm90_ws_wide_tile(dpad);
  if (w.bn == 0) return false;
  return bn_asked == 0 ? seqlen_k >= 8192 : bn_asked == w.bn;
}

// ---- backward. sm_80 (flash_bwd.cuh): NW warps of 16 keys (DSPLIT warps share a key row block at d256), BM query
// rows per step, STAGES buffers of Q/dO.
struct Sm80BwdTile {
  int warps, dsplit, bm, stages;
  constexpr int bn() const { return 16 * warps / dsplit; }
};
constexpr Sm80BwdTile sm80_bwd_tile(int dpad) {  // 8 warps: v3's 4-warp CTA measured slower (rejected)
  return dpad == 256 ? Sm80BwdTile{8, 2, 32, 2} : Sm80BwdTile{8, 1, 64, 2};
}
// sm_90a (flash_bwd_sm90.cuh): BN = 64 * NWG keys, BM query rows per step.
struct Sm90BwdTile {
  int bm, warpgroups;
  constexpr int bn() const { return 64 * warpgroups; }
};
// d64: BM 128 (dQ split by rows, as FA3 does), BM 64 with softcap (BM 128 spills) or when asked (config 1).
constexpr Sm90BwdTile sm90_bwd_tile(int dpad, int config, bool softcap) {
  return dpad == 64 && config != 1 && !softcap ? Sm90BwdTile{128, 2} : Sm90BwdTile{64, 2};
}
// The warp-specialized backward (flash_bwd_sm90_ws.cuh, v22): v6's default tiles (BN 128 keys), no softcap.
constexpr Sm90BwdTile sm90_bwd_ws_tile(int dpad) { return sm90_bwd_tile(dpad, 0, false); }
// d256 (flash_bwd_sm90_d256.cuh): both warpgroups share BN = 64 keys; S^T/dP^T split by query columns, dK/dV/dQ
// by head-dim halves (64 keys x 256 columns of dK and dV would not fit one warpgroup's registers).
struct Sm90BwdD256Tile {
  int bm, bn, warpgroups;
};
constexpr Sm90BwdD256Tile sm90_bwd_d256_tile() { return Sm90BwdD256Tile{64, 64, 2}; }

// ---- decode (decode/flash_decode.cuh): one CTA of kWarps warps per (split, m16 tile of packed query rows, KV head,
// sequence), each warp with kStages cp.async stages of 16 keys of K and V; dynamic shared memory = the Q tile and
// every warp's stages.
template <int D>
struct DecodeCfg {
  static constexpr int kWarps = D == 256 ? 4 : 8;
  // The narrow CTA (DecodePlan::narrow, head_dim <= 128): the same warps' pipelines in CTAs of 4 warps, so that 2
  // (d128) or 3 (d64) share an SM and a batch-1 grid can fill every SM (8 KV heads: 33 splits x 8 = 264 CTAs on
  // 132 SMs, where 16 splits of the wide CTA leave 4 SMs idle).
  static constexpr int kNarrowWarps = 4;
  static constexpr int kStages = D == 64 ? 4 : 3;
  static constexpr size_t smem(int warps) { return size_t(16 * D * 2) * size_t(1 + 2 * warps * kStages); }
  static constexpr size_t kSmem = smem(kWarps);
};
constexpr size_t decode_smem_bytes(int dpad, bool narrow = false) {
  if (narrow && dpad <= 128)
    return dpad == 64 ? DecodeCfg<64>::smem(DecodeCfg<64>::kNarrowWarps) : DecodeCfg<128>::smem(DecodeCfg<128>::kNarrowWarps);
  return dpad == 64 ? DecodeCfg<64>::kSmem : (dpad == 128 ? DecodeCfg<128>::kSmem : DecodeCfg<256>::kSmem);
}
// Most split-KV splits any library decode launch uses: the split combine keeps one weight per split in shared
// memory.
constexpr int kMaxDecodeSplits = 512;
// Largest thread-block cluster of a cluster merge (sm_90's non-portable limit; 8 is the portable one).
constexpr int kMaxDecodeCluster = 16;

// ---- the engine's fused-prologue decode (decode/fused_prologue.cu): 256 threads per (split, head); at most 64
// splits (its last-block merge keeps one weight per split in shared memory).
constexpr int kFusedDecodeThreads = 256;
constexpr int kFusedDecodeMaxSplits = 64;

}  // namespace flashkit::cuda
