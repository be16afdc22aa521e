// Validated arguments of the fp8 attention forward (include/flashkit/attention_fp8.hpp): what src/ops hands to the
// fp8 kernels. q, k, v are e4m3 (fwd.dtype == DType::e4m3), o is bf16; no window, softcap or varlen (rejected).
#pragma once
#include "flashkit/attention.hpp"
#include "kernels/attention_args.hpp"

namespace flashkit::kernels {

struct AttentionFp8Args {
  AttentionFwdArgs fwd;
  float q_descale = 1.f, k_descale = 1.f, v_descale = 1.f;
  int64_t p_tile = 128;  // the reference's tile_max rounding: keys per tile (the CUDA kernel's key tile)
};

// Where P is rounded to e4m3 before P V (attention_fp8.hpp): not at all (plain attention of the dequantized inputs),
// against the row max (the CPU path), or against the running max at the end of each p_tile-key tile, tiles aligned
// at key 0 (the CUDA kernel's online softmax).
enum class Fp8PRounding { none, row_max, tile_max };

// The f64 oracle on the dequantized inputs.
void attention_forward_fp8_reference(const AttentionFp8Args& a, Fp8PRounding rounding);
// The CPU path: f32 arithmetic, P rounded to e4m3 against the row max.
void attention_forward_fp8_cpu(const AttentionFp8Args& a);
// FLOPs (2 per MAC of QK^T and P V over the visible pairs) and bytes (q, k, v read once, o and lse written once).
OpCost attention_forward_fp8_cost(const AttentionFp8Args& a, const char* kernel);

}  // namespace flashkit::kernels
