// Validated arguments of the fp8 attention forward (include/flashkit/attention_fp8.hpp): what src/ops hands to the
// fp8 kernels. q, k, v are e4m3 (fwd.dtype == DType::e4m3), o is bf16; no window, softcap or varlen (rejected).
#pragma once
#include "flashkit/attention.hpp"
#include "kernels/attention_args.hpp"

namespace flashkit::kernels {

struct AttentionFp8Args {
  AttentionFwdArgs fwd;
  float q_descale = 1.f, k_descale = 1.f, v_descale = 1.f;
};

// The f64 oracle on the dequantized inputs; round_p: P rounded to e4m3 (against the row max) before P V, as the
// contract says; without it, plain attention of the dequantized inputs (the accuracy statement's second reference).
void attention_forward_fp8_reference(const AttentionFp8Args& a, bool round_p);
// The CPU path: f32 arithmetic, P rounded to e4m3 against the row max.
void attention_forward_fp8_cpu(const AttentionFp8Args& a);
// FLOPs (2 per MAC of QK^T and P V over the visible pairs) and bytes (q, k, v read once, o and lse written once).
OpCost attention_forward_fp8_cost(const AttentionFp8Args& a, const char* kernel);

}  // namespace flashkit::kernels
