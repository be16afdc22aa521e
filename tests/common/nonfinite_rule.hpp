// Contract B of include/flashkit/attention.hpp ("Non-finite input") computed from the inputs alone: the class of
// answer each query row must get, for the non-finite tests of the CPU (tests/attention/test_attention_nonfinite.cpp)
// and CUDA (test_attention_cuda.cpp) implementations. Tensors are [1, tokens, heads, head_dim] (one sequence, or a
// varlen batch packed in one slot).
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "attention_fixture.hpp"

namespace fk_test {

enum class RowClass { empty, nan, all_neg_inf, finite };

inline const char* class_name(RowClass c) {
  switch (c) {
    case RowClass::empty: return "no visible key (o 0, lse -inf)";
    case RowClass::nan: return "NaN row (o NaN, lse NaN)";
    case RowClass::all_neg_inf: return "every score -inf (o 0, lse -inf)";
    default: return "finite lse";
  }
}

struct MaskSpec {
  bool causal = false;
  int64_t wl = -1, wr = -1;
  // Bottom-right aligned, as attention.hpp.
  bool visible(int64_t i, int64_t j, int64_t nq, int64_t nk) const {
    const int64_t d = i + (nk - nq);
    if (causal && j > d) return false;
    if (wl >= 0 && j < d - wl) return false;
    if (wr >= 0 && j > d + wr) return false;
    return true;
  }
};

struct SeqSpan {
  int64_t q0, k0, nq, nk;
};

struct RowRule {
  RowClass cls = RowClass::empty;
  std::vector<char> bad_col;     // a visible key's v holds NaN/+-inf in this column
  std::vector<char> masked_col;  // a key of the sequence the row does not see holds NaN/+-inf v in this column
};

// A score as contract B defines it: scale q.k in f64, beyond the f32 range +-inf, then the cap.
inline double contract_score(double s, double cap) {
  constexpr double kMax = std::numeric_limits<float>::max();
  if (s > kMax) s = std::numeric_limits<double>::infinity();
  if (s < -kMax) s = -std::numeric_limits<double>::infinity();
  return cap > 0 ? cap * std::tanh(s / cap) : s;
}

// Row i of query head h in sequence `sq`.
inline RowRule row_rule(const HostTensor& q, const HostTensor& k, const HostTensor& v, int64_t H, int64_t Hkv,
                        int64_t D, const SeqSpan& sq, int64_t h, int64_t i, const MaskSpec& mask, double scale,
                        double cap) {
  RowRule r;
  r.bad_col.assign(size_t(D), 0);
  r.masked_col.assign(size_t(D), 0);
  const int64_t hk = h / (H / Hkv);
  bool any = false, nan = false;
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < sq.nk; ++j) {
    const bool vis = mask.visible(i, j, sq.nq, sq.nk);
    const int64_t kv = ((sq.k0 + j) * Hkv + hk) * D;
    for (int64_t c = 0; c < D; ++c)
      if (!std::isfinite(v.get(kv + c))) (vis ? r.bad_col : r.masked_col)[size_t(c)] = 1;
    if (!vis) continue;
    any = true;
    double dot = 0;
    for (int64_t c = 0; c < D; ++c) dot += q.get(((sq.q0 + i) * H + h) * D + c) * k.get(kv + c);
    const double s = contract_score(scale * dot, cap);
    nan = nan || std::isnan(s) || s == std::numeric_limits<double>::infinity();
    if (!std::isnan(s) && s > m) m = s;
  }
  r.cls = !any ? RowClass::empty : nan ? RowClass::nan : m == -std::numeric_limits<double>::infinity()
                                                              ? RowClass::all_neg_inf
                                                              : RowClass::finite;
  return r;
}

// "" when the row's o (D values) and lse follow the rule; otherwise what differs. `cuda`: the latitude attention.hpp
// gives the CUDA kernels (a masked key's non-finite v may reach o; 0 * inf in an all -inf row).
inline std::string check_row(const RowRule& r, const double* o, double lse, int64_t D, bool cuda) {
  std::ostringstream err;
  auto fail = [&](const std::string& what) {
    if (err.tellp() == 0) err << "expected " << class_name(r.cls) << ", got " << what;
  };
  const double ninf = -std::numeric_limits<double>::infinity();
  switch (r.cls) {
    case RowClass::nan:
      if (!std::isnan(lse)) fail("lse " + std::to_string(lse));
      for (int64_t c = 0; c < D; ++c)
        if (!std::isnan(o[c])) fail("o[" + std::to_string(c) + "] = " + std::to_string(o[c]));
      break;
    case RowClass::empty:
    case RowClass::all_neg_inf:
      if (lse != ninf) fail("lse " + std::to_string(lse));
      for (int64_t c = 0; c < D; ++c) {
        const bool loose = cuda && (r.masked_col[size_t(c)] || (r.cls == RowClass::all_neg_inf && r.bad_col[size_t(c)]));
        if (o[c] != 0.0 && !(loose && !std::isfinite(o[c]))) fail("o[" + std::to_string(c) + "] = " + std::to_string(o[c]));
      }
      break;
    case RowClass::finite:
      if (!std::isfinite(lse)) fail("lse " + std::to_string(lse));
      for (int64_t c = 0; c < D; ++c) {
        const bool want_bad = r.bad_col[size_t(c)], may_bad = want_bad || (cuda && r.masked_col[size_t(c)]);
        const bool fin = std::isfinite(o[c]);
        if ((want_bad && fin) || (!may_bad && !fin))
          fail("o[" + std::to_string(c) + "] = " + std::to_string(o[c]) + (want_bad ? " (column of a non-finite v)" : ""));
      }
      break;
  }
  return err.str();
}

}  // namespace fk_test
