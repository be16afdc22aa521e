// One query row of the attention forward in f64, by the contract's rules for non-finite input
// (include/flashkit/attention.hpp, "Non-finite input", contract B). The reference computes every row with it; the
// fast CPU kernels compute in f32 and hand a row to attention_fix_row() when their f32 arithmetic met a non-finite
// value (a NaN/inf input, a score beyond the f32 range, or a masked key's NaN leaking through a product with 0), so
// every CPU implementation gives the reference's answer for such rows, element for element.
#pragma once
// Defined in attention_row.cpp, compiled without ISA flags: the per-ISA flash translation units call them, and an
// inline copy built with -mavx512f could be the one the linker keeps for all of them.
#include <cstdint>
#include <vector>

#include "kernels/attention_args.hpp"

namespace flashkit::kernels {

// q: [d]; k, v: rows lo..hi-1 at k + j*d, v + j*d. Writes o[0, d) and returns the lse, by contract B:
//   no visible key (hi <= lo), or every visible score -inf: o = 0, lse = -inf;
//   a NaN or +inf score: o = NaN, lse = NaN;
//   otherwise the finite log-sum-exp, and o = P V in IEEE f64 (a NaN/inf in a visible v reaches o).
// Scores are f32_score(scale q.k, cap). `sc` is scratch of at least hi entries.
double attention_row_f64(const double* q, const double* k, const double* v, int64_t d, int64_t lo, int64_t hi,
                         double scale, double cap, double* o, std::vector<double>& sc);

// A score as the kernels see it: s (= scale q.k, computed in f64) beyond the f32 range is +-inf, then the softcap
// cap * tanh(s / cap) when cap > 0.
double f32_score(double s, double cap);

// Recomputes row i of query head h in sequence r with attention_row_f64 and stores its o row and lse (the fast
// kernels' fallback; rare, so it loads what it needs element by element).
void attention_fix_row(const AttentionFwdArgs& a, const SeqRange& r, int64_t h, int64_t i);

// The fast kernels' trigger for attention_fix_row: a row with visible keys whose f32 result is not clean -- the
// sum of its visible raw scores (any NaN or +-inf score makes it non-finite; a false alarm only costs the f64
// recomputation), its lse or one of its outputs is not finite.
bool attention_row_suspect(float score_sum, float lse, const float* o, int64_t d);

}  // namespace flashkit::kernels
