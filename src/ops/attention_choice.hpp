// Which CUDA kernel runs an attention call: pure functions of (shape, device, tuning), one per op, in the manner of
// FlashAttention's hopper/heuristics.h and ggml-cuda's best-kernel function. They make no CUDA call, so the
// CPU-only build compiles them and tests/attention/test_cuda_choice.cpp pins their answers for H200 and A100 shapes.
// src/ops/attention_cuda.cpp launches what they choose.
#pragma once
#include <string>

#include "core/cuda_device.hpp"
#include "flashkit/dtype.hpp"
#include "flashkit/tuning.hpp"
#include "kernels/attention_args.hpp"
#include "kernels/cuda/decode/plan.hpp"

namespace flashkit {

enum class CudaKernel : int32_t {
  fwd_sm80 = 0,     // flash_fwd.cuh: mma.sync, any sm_80+ device
  fwd_sm90 = 1,     // flash_fwd_sm90.cuh: wgmma + cp.async, configuration 1 or 2
  fwd_sm90_ws = 2,  // flash_fwd_sm90_ws.cuh: warp-specialized, TMA producer, ping-pong consumers
  decode = 3,       // the decode family (kernels/cuda/decode/): FwdChoice::decode says which member
  bwd_sm80 = 4,     // flash_bwd.cuh
  bwd_sm90 = 5,     // flash_bwd_sm90.cuh (d64, d128), flash_bwd_sm90_d256.cuh (d256)
  bwd_sm90_ws = 6,  // flash_bwd_sm90_ws.cuh: warp-specialized, TMA producer, dQ by bulk reduce-add (d64, d128);
                    // flash_bwd_sm90_ws_d256.cuh (d256: dQ by atomics)
};

struct FwdChoice {
  CudaKernel kernel = CudaKernel::fwd_sm80;
  int dpad = 64;      // instantiated head dim
  int config = 0;     // fwd_sm90: 1 or 2
  int tile_m = 0, tile_n = 0, stages = 0;
  int splits = 1;     // split-KV splits (decode only)
  int cluster = 0;    // CTAs per cluster of the decode merge (0: none)
  bool pingpong = false;  // fwd_sm90_ws: consumer warpgroups take turns
  int persist_ctas = 0;   // fwd_sm90_ws: > 0 a persistent grid of this many CTAs (ws_persist_ctas); 0 one per tile
  bool overlap_epilogue = false;  // persist_ctas > 0: each warpgroup's epilogue under the next tile's first QK^T
  bool tma_store_o = false;       // overlap_epilogue: O written by TMA stores where the rows allow (v23b)
  bool dense = false;             // persist_ctas > 0: the DENSE variant (ws_dense_fwd, set by the dispatch; v27)
  cuda::DecodePlan decode;  // kernel == decode
};

struct BwdChoice {
  CudaKernel kernel = CudaKernel::bwd_sm80;
  int dpad = 64;
  int config = 0;  // bwd_sm90: the Tuning's sm90_bwd_config it was chosen under
  int tile_m = 0, tile_n = 0;
  bool softcap = false;  // bwd_sm90: the softcap instantiation
};

// The forward of a validated call on a CUDA device. allow_ws = false: the choice when the warp-specialized kernel
// declined at launch (no TMA descriptor for these K/V strides, an empty K); with dev.sm90a = false: when a Hopper
// launcher declined (its sm_90a code does not run on this device).
FwdChoice choose_fwd(const kernels::AttentionShape& shape, const kernels::AttentionMask& mask, const DeviceInfo& dev,
                     const Tuning& tuning, const ClusterResidency& decode_residency = {}, bool allow_ws = true);
// allow_ws = false: the choice when the warp-specialized backward declined at launch (no TMA descriptor for these
// operands' strides, a register budget other than its own).
BwdChoice choose_bwd(const kernels::AttentionShape& shape, float softcap, const DeviceInfo& dev, const Tuning& tuning,
                     bool allow_ws = true);

// The persistent grid of the warp-specialized forward (0: one CTA per work tile): d64/d128 with ping-pong and the
// narrow key tile (tile_n) only. Automatic: d128 calls of up to 1k query rows (causal: 2k) whose one-CTA-per-tile
// grid needs more than one wave (v19); Tuning::sm90_ws_persist forces it on (at most N CTAs) or off.
int ws_persist_ctas(const kernels::AttentionShape& shape, const DeviceInfo& dev, const Tuning& tuning, int dpad,
                    bool pingpong, int tile_n, bool causal);

// A call the persistent ws forward's DENSE variant computes (v27): a fixed-length batch (no cu_seqlens), no window
// (the causal mask or none), no softcap, head_dim equal to its instantiated (padded) dim, every length and tile
// count small enough for its 32-bit bookkeeping. (The ws forward never packs the GQA group: only decode does.)
bool ws_dense_shape(const kernels::AttentionShape& shape, const kernels::AttentionMask& mask, float softcap);
// Whether the ws forward chosen in c runs as DENSE: a dense call on the persistent grid with the serial epilogue or
// the TMA-store one (the instantiated variants), where Tuning::sm90_ws_dense is 1, or -1 (auto) and kWsDenseAuto.
// Set by the dispatch (choose_fwd does not see the softcap).
// kWsDenseAuto: on since run s16-3 (H200: bit-identical to the general kernel on the CUDA grid, +5-40% at d128
// 512-4k tokens, attention-cuda.md v27).
inline constexpr bool kWsDenseAuto = true;
bool ws_dense_fwd(const kernels::AttentionShape& shape, const kernels::AttentionMask& mask, float softcap,
                  const FwdChoice& c, const Tuning& tuning);

// Whether choose_fwd would read decode_residency for this call (the dispatch skips the occupancy query otherwise).
bool fwd_needs_decode_residency(const kernels::AttentionShape& shape, const DeviceInfo& dev, const Tuning& tuning);

// Query rows at or below which the forward takes the decode family.
constexpr int64_t kDecodeMaxSeqlenQ = 16;

// OpCost::kernel for a choice: "cuda.flash.fwd.sm90ws.bf16.d128", "cuda.flash.decode.mma.bf16.d128.splits16.combine",
// "cuda.flash.bwd.sm90wgmma.f16.d64", "cuda.flash.bwd.sm90ws.bf16.d128", ...
std::string kernel_name(const FwdChoice& c, DType dtype);
std::string kernel_name(const BwdChoice& c, DType dtype);

}  // namespace flashkit
