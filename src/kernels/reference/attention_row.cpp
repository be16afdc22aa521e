// The contract's answer for one attention row in f64 (attention_row.hpp): contract B of attention.hpp.
#include "kernels/reference/attention_row.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/convert.hpp"

namespace flashkit::kernels {

double attention_row_f64(const double* q, const double* k, const double* v, int64_t d, int64_t lo, int64_t hi,
                         double scale, double cap, double* o, std::vector<double>& sc) {
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < d; ++c) o[c] = 0.0;
  if (hi <= lo) return kNegInf;
  if (int64_t(sc.size()) < hi) sc.resize(size_t(hi));
  double m = kNegInf;
  bool nan_row = false;  // a NaN or +inf score (contract B: the row is NaN)
  for (int64_t j = lo; j < hi; ++j) {
    double dot = 0;
    for (int64_t c = 0; c < d; ++c) dot += q[c] * k[j * d + c];
    sc[size_t(j)] = f32_score(scale * dot, cap);
    nan_row = nan_row || std::isnan(sc[size_t(j)]) || sc[size_t(j)] == -kNegInf;
    m = std::max(m, sc[size_t(j)]);
  }
  if (nan_row) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (int64_t c = 0; c < d; ++c) o[c] = nan;
    return nan;
  }
  if (m == kNegInf) return kNegInf;  // every visible score -inf: the answer of a row with no visible key
  double l = 0;
  for (int64_t j = lo; j < hi; ++j) l += std::exp(sc[size_t(j)] - m);
  for (int64_t j = lo; j < hi; ++j) {  // IEEE: a NaN/inf v reaches o, also through p = 0 (0 x inf is NaN)
    const double p = std::exp(sc[size_t(j)] - m) / l;
    for (int64_t c = 0; c < d; ++c) o[c] += p * v[j * d + c];
  }
  return m + std::log(l);
}

double f32_score(double s, double cap) {
  // The kernels compute scores in f32: beyond its range a score is +-inf (NaN stays NaN), then the cap saturates.
  constexpr double kMax = std::numeric_limits<float>::max();
  if (s > kMax) s = std::numeric_limits<double>::infinity();
  if (s < -kMax) s = -std::numeric_limits<double>::infinity();
  return cap > 0 ? cap * std::tanh(s / cap) : s;
}

void attention_fix_row(const AttentionFwdArgs& a, const SeqRange& r, int64_t h, int64_t i) {
  const int64_t d = a.shape.head_dim, hk = h / a.shape.group();
  const int64_t lo = a.mask.lo(i, r.nq, r.nk), hi = a.mask.hi(i, r.nq, r.nk);
  const int64_t es = dtype_size(a.dtype);
  auto row = [&](const AttnOperand& t, int64_t s, int64_t head) {
    return static_cast<const char*>(t.data) + (r.bslot * t.stride_b + s * t.stride_s + head * t.stride_h) * es;
  };
  const size_t nd = static_cast<size_t>(d), nkd = static_cast<size_t>(std::max<int64_t>(hi, 0) * d);
  std::vector<double> q(nd), k(nkd), v(nkd), o(nd), sc;
  for (int64_t c = 0; c < d; ++c) q[size_t(c)] = load_as_f64(row(a.q, r.q0 + i, h), a.dtype, c);
  for (int64_t j = lo; j < hi; ++j)
    for (int64_t c = 0; c < d; ++c) {
      k[size_t(j * d + c)] = load_as_f64(row(a.k, r.k0 + j, hk), a.dtype, c);
      v[size_t(j * d + c)] = load_as_f64(row(a.v, r.k0 + j, hk), a.dtype, c);
    }
  const double lse =
      attention_row_f64(q.data(), k.data(), v.data(), d, lo, hi, a.scale, a.softcap, o.data(), sc);
  char* orow = static_cast<char*>(a.o.data) + (r.bslot * a.o.stride_b + (r.q0 + i) * a.o.stride_s + h * a.o.stride_h) * es;
  for (int64_t c = 0; c < d; ++c) store_from_f64(orow, a.dtype, c, o[size_t(c)]);
  a.lse[a.lse_index(r, h, i)] = float(lse);
}

bool attention_row_suspect(float score_sum, float lse, const float* o, int64_t d) {
  bool ok = std::isfinite(score_sum) && std::isfinite(lse);
  for (int64_t c = 0; c < d; ++c) ok = ok && std::isfinite(o[c]);
  return !ok;
}

}  // namespace flashkit::kernels
