// Validated arguments of the fp8 attention forward (include/flashkit/attention_fp8.hpp): what src/ops hands to the
// fp8 kernels. q, k, v are e4m3 (fwd.dtype == DType::e4m3), o is bf16; no window, softcap or varlen (rejected).
#pragma once
#include "flashkit/attention.hpp"
#include "kernels/attention_args.hpp"

namespace flashkit::kernels {

// The CUDA fp8 forward's lazy rescale (RESCALE = 2, docs/worklog/attention-fp8-cuda.md v4): a row's running max
// moves only when a key tile's max exceeds it by more than this, in log2 units, so P = 2^(s - m) <= 2^8 = 256 stays
// below e4m3's 448.
inline constexpr int kFp8LazyRescaleTau = 8;

struct AttentionFp8Args {
  AttentionFwdArgs fwd;
  float q_descale = 1.f, k_descale = 1.f, v_descale = 1.f;
  int64_t p_tile = 128;  // the reference's tile_max rounding: keys per tile (the CUDA kernel's key tile)
  double lazy_tau = kFp8LazyRescaleTau;  // tile_max_lazy: the threshold in log2 units (may be 0 or +inf)
};

// Where P is rounded to e4m3 before P V (attention_fp8.hpp): not at all (plain attention of the dequantized inputs),
// against the row max (the CPU path), against the running max at the end of each p_tile-key tile, tiles aligned at
// key 0 (the CUDA kernel's online softmax), or against the lazy running max of those tiles (the CUDA kernel's
// RESCALE = 2): per row, a tile whose max exceeds the running max by more than lazy_tau (log2 units) replaces it,
// otherwise it stays (the row's first visible tile always sets it). lazy_tau = 0 is tile_max; +inf keeps the first
// tile's max forever.
enum class Fp8PRounding { none, row_max, tile_max, tile_max_lazy };

// The f64 oracle on the dequantized inputs.
void attention_forward_fp8_reference(const AttentionFp8Args& a, Fp8PRounding rounding);
// The CPU path: f32 arithmetic, P rounded to e4m3 against the row max.
void attention_forward_fp8_cpu(const AttentionFp8Args& a);
// FLOPs (2 per MAC of QK^T and P V over the visible pairs) and bytes (q, k, v read once, o and lse written once).
OpCost attention_forward_fp8_cost(const AttentionFp8Args& a, const char* kernel);

}  // namespace flashkit::kernels
