// FP8 (e4m3) attention forward, and the per-tensor quantizer that makes its inputs.
//
// attention_forward_fp8(q, k, v, o, lse, scales, opts):
//   q, k, v : DType::e4m3 (OCP E4M3FN, include/flashkit/e4m3.hpp), the layouts of attention.hpp
//             (q [batch, seqlen_q, heads, head_dim], k/v [batch, seqlen_k, kv_heads, head_dim], head_dim contiguous,
//             other strides free); GQA/MQA as in attention.hpp (kv_heads divides heads).
//   o       : bf16 [batch, seqlen_q, heads, head_dim];  lse: f32 [batch, heads, seqlen_q] contiguous.
//   scales  : per-tensor descales; the real inputs are q * q_descale, k * k_descale, v * v_descale (each finite
//             and > 0; quantize_e4m3 returns them).
//   opts    : scale (0: 1/sqrt(head_dim)), causal (bottom-right aligned, as attention.hpp), impl (automatic or
//             flash: the fast path of the tensors' device; reference: the f64 oracle, CPU tensors only),
//             check_finite (CPU: rejects NaN in q/k/v; e4m3 has no infinities), threads, tuning.
//             Not in this first version, rejected with invalid_argument naming the option: sliding windows
//             (window_left / window_right), softcap, variable-length batches (cu_seqlens), impl=standard.
//
// Semantics. The result is attention of the dequantized inputs with the probabilities rounded to e4m3 before the
// P V product, as FlashAttention-3's FP8 forward does:
//   s_ij = scale * (q_descale * k_descale) * (q_i . k_j)       (exact products of e4m3 values, f32 accumulation)
//   m_i  = max_j s_ij over the row's visible keys,  p_ij = exp(s_ij - m_i),  l_i = sum_j p_ij  (from the unrounded p)
//   o_i  = v_descale * sum_j r_ij v_j / l_i  (rounded to bf16),   lse_i = m_i + log(l_i)
// where r_ij is p_ij with its rounding to e4m3 taken against a running max M_ij <= m_i, as an online softmax does:
//   r_ij = e4m3(exp(s_ij - M_ij)) * exp(M_ij - m_i)
//   CPU:  M_ij = m_i (the row max);
//   CUDA: M_ij = the max of the row's visible scores over keys < 128 (floor(j / 128) + 1) (the kernel's key tiles).
// A row with no visible key (causal with seqlen_q > seqlen_k) gets o = 0 and lse = -inf.
// Accuracy (tests/attention/test_attention_fp8*.cpp, random N(0,1) inputs with q 3x and v 0.25x, per-tensor scales):
//   against the f64 attention of the dequantized inputs with P rounded as above: relative RMS error <= 1% (the bound
//   the tests use for every backend; the CPU path measures ~3e-5: bf16 output and f32 sums); the P rounding itself
//   moves o by ~1% relative RMS (~2.5% with unscaled N(0,1) q: flatter rows), and the choice of M by as much;
//   against attention of the unquantized inputs (q, k, v and P all quantized): ~8% relative RMS at d = 128, inputs
//   as above, ~5% with N(0,1) q, k, v (a numpy model of the CUDA rounding); measured on the H200 against flashkit's
//   bf16 forward of the same N(0,1) inputs: 4.6-5.5% relative RMS at d128 and d256 (docs/worklog/attention-fp8-cuda.md).
//
// Backends: CPU (any head_dim the bf16 contract takes: f32 arithmetic, e4m3 rounding of P against the row max) and
// CUDA on sm_90a GPUs (Hopper; head_dim 128 or 256; other GPUs or head dims: Status::unsupported with the reason;
// q, k, v need 16-byte aligned bases and strides there).
#pragma once
#include "flashkit/attention.hpp"
#include "flashkit/tensor.hpp"

namespace flashkit {

struct AttentionFp8Scales {
  float q_descale = 1.0f;
  float k_descale = 1.0f;
  float v_descale = 1.0f;
};

void attention_forward_fp8(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                           const TensorView& lse, const AttentionFp8Scales& scales, const AttentionOptions& opts,
                           OpCost* cost = nullptr);

// Per-tensor quantization: *descale = amax(|src|) / 448 (1 when src is all zeros) and dst = e4m3(src / *descale),
// rounded to nearest even. src: f32, bf16 or f16, dst: e4m3, the same shape, both contiguous and on the same device
// (CPU or CUDA; on CUDA the call waits for the amax to reach the host). Non-finite src is rejected (CPU) or gives
// *descale = NaN/inf (CUDA, which does not scan on the host), which attention_forward_fp8 then rejects.
void quantize_e4m3(const TensorView& src, const TensorView& dst, float* descale);

}  // namespace flashkit
