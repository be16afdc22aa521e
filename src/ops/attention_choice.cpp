// The CUDA kernel choice (attention_choice.hpp). Every threshold here was measured on the H200; the worklog
// entry is named next to it (docs/worklog/attention-cuda.md).
#include "ops/attention_choice.hpp"

#include "kernels/cuda/tiles.hpp"
#include "kernels/cuda/ws_schedule.hpp"

namespace flashkit {

namespace {

cuda::DecodeShape decode_shape(const kernels::AttentionShape& sh, const kernels::AttentionMask& m) {
  cuda::DecodeShape d;
  d.batch = sh.batch;
  d.heads = sh.heads;
  d.kv_heads = sh.kv_heads;
  d.head_dim = sh.head_dim;
  d.max_seqlen_q = sh.max_seqlen_q;
  d.max_seqlen_k = sh.max_seqlen_k;
  d.window_left = m.window_left;
  d.window_right = m.window_right;
  d.varlen = sh.varlen();
  return d;
}

bool is_decode(const kernels::AttentionShape& sh) { return sh.max_seqlen_q <= kDecodeMaxSeqlenQ; }

const char* dtype_tag(DType dt) { return dt == DType::bf16 ? "bf16" : "f16"; }

}  // namespace

bool fwd_needs_decode_residency(const kernels::AttentionShape& sh, const DeviceInfo& dev, const Tuning& t) {
  cuda::DecodeShape d;
  d.head_dim = sh.head_dim;
  return is_decode(sh) && cuda::decode_plan_needs_residency(d, dev, t);
}

int ws_persist_ctas(const kernels::AttentionShape& sh, const DeviceInfo& dev, const Tuning& t, int dpad,
                    bool pingpong, int tile_n, bool causal) {
  // The persistent kernel is built for the narrow key tiles only (at BN 176 O would share Q's panels).
  if ((dpad != 64 && dpad != 128) || !pingpong || t.sm90_ws_persist == 0 || tile_n != cuda::sm90_ws_tile(dpad).bn)
    return 0;
  const int bm = cuda::sm90_ws_tile(dpad).bm;
  const int64_t tiles = (sh.max_seqlen_q + bm - 1) / bm * sh.heads * sh.batch;
  if (tiles <= 0 || tiles >= cuda::kWsMaxTiles) return 0;
  if (t.sm90_ws_persist > 0) return cuda::ws_persistent_ctas(tiles, dev.sms, t.sm90_ws_persist);
  // Automatic where it won (runs s13-6 and s14-10, bench/results/attention-ws-persist-h200/): d128, non-causal up
  // to 1k query rows (+10% / +5% at 512 / 1k; -0.3% at 2k, -2.5% / -0.3% at 4k), causal up to 4k (+16% / +8% / +7%
  // at 512 / 1k / 2k; +0.7% / +6.7% at 4k; -1% at 16k), when the one-CTA-per-tile grid needs more than one wave.
  // d64's ws kernel runs from 2k (causal 4k) tokens, where the persistent grid gained under 3%.
  const bool short_grid = sh.max_seqlen_q <= (causal ? 4096 : 1024);
  return dpad == 128 && short_grid && dev.sms > 0 && tiles > dev.sms ? cuda::ws_persistent_ctas(tiles, dev.sms, 0) : 0;
}

bool ws_dense_shape(const kernels::AttentionShape& sh, const kernels::AttentionMask& m, float softcap) {
  const bool no_window = m.window_left < 0 && (m.causal ? m.window_right == 0 : m.window_right < 0);
  // int keys and rows in the kernel: i + seqlen_k - seqlen_q + 1 and the tile count must fit (ws_schedule.hpp).
  constexpr int64_t kMaxLen = int64_t(1) << 30;
  const bool lengths = sh.seqlen_q > 0 && sh.seqlen_k > 0 && sh.seqlen_q < kMaxLen && sh.seqlen_k < kMaxLen &&
                       sh.heads > 0 && sh.kv_heads > 0 && sh.heads % sh.kv_heads == 0 && sh.batch > 0 &&
                       (sh.seqlen_q + 127) / 128 * sh.heads * sh.batch < cuda::kWsMaxTiles;
  return !sh.varlen() && no_window && !(softcap > 0.f) && sh.head_dim == cuda::padded_head_dim(sh.head_dim) &&
         lengths;
}

bool ws_dense_fwd(const kernels::AttentionShape& sh, const kernels::AttentionMask& m, float softcap,
                  const FwdChoice& c, const Tuning& t) {
  const bool wanted = t.sm90_ws_dense == 1 || (t.sm90_ws_dense < 0 && kWsDenseAuto);
  return wanted && c.kernel == CudaKernel::fwd_sm90_ws && c.persist_ctas > 0 && c.pingpong &&
         (c.dpad == 64 || c.dpad == 128) && (!c.overlap_epilogue || c.tma_store_o) && ws_dense_shape(sh, m, softcap);
}

FwdChoice choose_fwd(const kernels::AttentionShape& sh, const kernels::AttentionMask& mask, const DeviceInfo& dev,
                     const Tuning& t, const ClusterResidency& decode_residency, bool allow_ws) {
  FwdChoice c;
  c.dpad = cuda::padded_head_dim(sh.head_dim);
  const int D = c.dpad;
  if (is_decode(sh)) {
    c.kernel = CudaKernel::decode;
    c.decode = cuda::plan_decode(decode_shape(sh, mask), dev, t, decode_residency);
    c.splits = c.decode.splits;
    c.cluster = c.decode.cluster;
    c.tile_m = c.decode.tile_m;
    if (c.decode.kernel == cuda::DecodeKernel::one_warp) {
      c.tile_n = cuda::sm80_decode_tile(D).bn;
      c.stages = cuda::kSm80FwdStages;
    } else {
      c.tile_n = 16;
      c.stages = D == 64 ? cuda::DecodeCfg<64>::kStages : D == 128 ? cuda::DecodeCfg<128>::kStages : cuda::DecodeCfg<256>::kStages;
    }
    return c;
  }
  const int64_t sq = sh.max_seqlen_q;
  const bool causal = mask.causal;
  // Hopper kernels where this build has sm_90a code for this device and the tuning allows (sm90 = false: A/B runs
  // and an escape hatch). d256 has only the warp-specialized kernel; when it declines, sm_80.
  if (t.sm90 && dev.sm90a && D == 256) {
    const int cfg = t.sm90_fwd_config;
    if (allow_ws && (cfg == 0 || cfg == 3)) {
      const auto w = cuda::sm90_ws_tile(D);
      c.kernel = CudaKernel::fwd_sm90_ws;
      c.tile_m = w.bm, c.tile_n = w.bn, c.stages = w.stages;
      c.pingpong = t.sm90_ws_pingpong;
      return c;
    }
  } else if (t.sm90 && dev.sm90a && (D == 64 || D == 128)) {
    const int cfg = t.sm90_fwd_config;
    // The warp-specialized TMA kernel wins at d128 everywhere measured and at d64 from 2k tokens (causal: 4k);
    // short d64 sequences keep the small multi-CTA tiles (run s5-6, v9). d128 causal at 512 tokens stays on it
    // too: configuration 1 won one run and lost the full grid (s6-5, s6-6, v10).
    const bool ws_default = D == 128 || (D == 64 && sq >= (causal ? 4096 : 2048));
    if (allow_ws && (cfg == 3 || (cfg == 0 && ws_default))) {
      const auto w = cuda::sm90_ws_wide(D, sh.max_seqlen_k, t.sm90_ws_bn) ? cuda::sm90_ws_wide_tile(D)
                                                                          : cuda::sm90_ws_tile(D);
      c.kernel = CudaKernel::fwd_sm90_ws;
      c.tile_m = w.bm, c.tile_n = w.bn, c.stages = w.stages;
      c.pingpong = t.sm90_ws_pingpong;
      c.persist_ctas = ws_persist_ctas(sh, dev, t, D, c.pingpong, c.tile_n, causal);
      // v23's epilogue order with v23b's TMA store of O: automatic up to 2k query rows, where both runs measured it
      // level or ahead (s15-5: +1-4% at d128 512-2k); from 4k it lost (-3% to -9%), so v19's order stays there.
      const bool auto_short = t.sm90_ws_overlap < 0 && sq <= 2048;
      c.overlap_epilogue = c.persist_ctas > 0 && (t.sm90_ws_overlap > 0 || auto_short);
      c.tma_store_o = c.overlap_epilogue && (t.sm90_ws_overlap == 2 || auto_short);
      return c;
    }
    // Configurations of the cp.async kernel (v5/v6): short sequences want several small CTAs per SM (their
    // prologues and epilogues overlap other CTAs' main loops), long ones the larger key tile.
    int config = cfg == 1 || cfg == 2 ? cfg : 0;
    if (config == 0) config = D == 64 ? (causal && sq <= 1024 ? 2 : 1) : (sq <= 2048 ? 1 : 2);
    const auto tile = cuda::sm90_fwd_tile(D, config);
    c.kernel = CudaKernel::fwd_sm90;
    c.config = config;
    c.tile_m = tile.bm(), c.tile_n = tile.bn, c.stages = tile.stages;
    return c;
  }
  const auto tile = cuda::sm80_fwd_tile(D);
  c.kernel = CudaKernel::fwd_sm80;
  c.tile_m = tile.bm(), c.tile_n = tile.bn, c.stages = cuda::kSm80FwdStages;
  return c;
}

BwdChoice choose_bwd(const kernels::AttentionShape& sh, float softcap, const DeviceInfo& dev, const Tuning& t,
                     bool allow_ws) {
  BwdChoice c;
  c.dpad = cuda::padded_head_dim(sh.head_dim);
  const int D = c.dpad;
  // The warp-specialized backward (v22) with v6's default tiles: every mask, GQA and varlen, no softcap (its
  // instantiation would need v6's separate softcap loop; those calls and FLASHKIT_SM90_BWD_CFG=1 stay on v6). By
  // default at d128 only: there it beat v6 by 10-32%, at d64 it lost (0.83-0.87x; run s14-3, worklog v22).
  // d256: its own warp-specialized kernel (v24, v16's tile; sm90_bwd_config does not apply there either): 1.03-1.11x
  // v16 (run s15-3); softcap stays on v16.
  const bool ws_dim = t.sm90_bwd_ws > 0 ? (D == 64 || D == 128 || D == 256)
                                        : (t.sm90_bwd_ws < 0 && (D == 128 || D == 256));
  if (t.sm90 && dev.sm90a && allow_ws && ws_dim && softcap <= 0.f && (t.sm90_bwd_config == 0 || D == 256)) {
    c.kernel = CudaKernel::bwd_sm90_ws;
    if (D == 256) {
      const auto tile = cuda::sm90_bwd_d256_tile();
      c.tile_m = tile.bm, c.tile_n = tile.bn;
    } else {
      const auto tile = cuda::sm90_bwd_ws_tile(D);
      c.tile_m = tile.bm, c.tile_n = tile.bn();
    }
    return c;
  }
  if (t.sm90 && dev.sm90a) {
    c.kernel = CudaKernel::bwd_sm90;
    c.config = t.sm90_bwd_config;
    c.softcap = softcap > 0.f;
    if (D == 256) {  // its own kernel, flash_bwd_sm90_d256.cuh (v16); sm90_bwd_config does not apply
      const auto tile = cuda::sm90_bwd_d256_tile();
      c.tile_m = tile.bm, c.tile_n = tile.bn;
    } else {
      const auto tile = cuda::sm90_bwd_tile(D, t.sm90_bwd_config, softcap > 0.f);
      c.tile_m = tile.bm, c.tile_n = tile.bn();
    }
    return c;
  }
  const auto tile = cuda::sm80_bwd_tile(D);
  c.kernel = CudaKernel::bwd_sm80;
  c.tile_m = tile.bm, c.tile_n = tile.bn();
  c.softcap = softcap > 0.f;
  return c;
}

std::string kernel_name(const FwdChoice& c, DType dt) {
  const std::string tail = std::string(".") + dtype_tag(dt) + ".d" + std::to_string(c.dpad);
  switch (c.kernel) {
    case CudaKernel::fwd_sm90: return "cuda.flash.fwd.sm90wgmma" + tail + ".cfg" + std::to_string(c.config);
    case CudaKernel::fwd_sm90_ws:
      return "cuda.flash.fwd.sm90ws" + tail +
             (c.tile_n == cuda::sm90_ws_wide_tile(c.dpad).bn ? ".bn" + std::to_string(c.tile_n) : "") +
             (c.pingpong ? "" : ".nopingpong") +
             (c.persist_ctas > 0 ? ".persistent" + std::to_string(c.persist_ctas) : "") +
             (c.persist_ctas > 0 && !c.overlap_epilogue ? ".serialepi" : "") + (c.tma_store_o ? ".tmastore" : "") +
             (c.dense ? ".dense" : "");
    case CudaKernel::decode: {
      const std::string plan = cuda::decode_plan_name(c.decode);  // "mma.splits16.combine", "one_warp", ...
      const size_t dot = plan.find('.');
      return "cuda.flash.decode." + plan.substr(0, dot) + tail + (dot == std::string::npos ? "" : plan.substr(dot));
    }
    default: return "cuda.flash.fwd.sm80mma" + tail;
  }
}

std::string kernel_name(const BwdChoice& c, DType dt) {
  const char* family = c.kernel == CudaKernel::bwd_sm90_ws ? "cuda.flash.bwd.sm90ws."
                       : c.kernel == CudaKernel::bwd_sm90  ? "cuda.flash.bwd.sm90wgmma."
                                                           : "cuda.flash.bwd.sm80mma.";
  return std::string(family) + dtype_tag(dt) + ".d" + std::to_string(c.dpad);
}

}  // namespace flashkit
