// Every kernel entry point, by (device, algorithm). Only src/ops calls these, after validation.
#pragma once
#include "flashkit/attention.hpp"
#include "kernels/attention_args.hpp"

namespace flashkit::kernels {

// reference: f64 accumulation, single-threaded per (batch, head). The oracle.
void attention_forward_reference(const AttentionFwdArgs& a);
void attention_backward_reference(const AttentionBwdArgs& a);
OpCost attention_forward_reference_cost(const AttentionFwdArgs& a);
OpCost attention_backward_reference_cost(const AttentionBwdArgs& a);

// CPU standard: materialized scores/probabilities, BLAS GEMMs.
void attention_forward_cpu_standard(const AttentionFwdArgs& a);
void attention_backward_cpu_standard(const AttentionBwdArgs& a);
OpCost attention_forward_cpu_standard_cost(const AttentionFwdArgs& a);   // includes workspace_bytes
OpCost attention_backward_cpu_standard_cost(const AttentionBwdArgs& a);

// CPU flash: tiled, online softmax, SIMD with run-time ISA dispatch: the widest level the CPU supports up to `isa`
// (the call's Tuning::cpu_isa).
void attention_forward_cpu_flash(const AttentionFwdArgs& a, CpuIsaCap isa);
void attention_backward_cpu_flash(const AttentionBwdArgs& a, CpuIsaCap isa);
OpCost attention_forward_cpu_flash_cost(const AttentionFwdArgs& a, CpuIsaCap isa);
OpCost attention_backward_cpu_flash_cost(const AttentionBwdArgs& a, CpuIsaCap isa);

// Sum of elementwise MACs shared by cost models: number of (query, key) pairs each kernel visits.
// visible: pairs inside the mask; tiled: pairs in tiles of (bq x bk) that are not fully masked.
double attention_visible_pairs(const AttentionShape& s, const AttentionMask& m);
double attention_tiled_pairs(const AttentionShape& s, const AttentionMask& m, int64_t bq, int64_t bk);

}  // namespace flashkit::kernels
