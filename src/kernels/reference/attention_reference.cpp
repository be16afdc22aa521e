// Reference attention: the plainest possible loops, f64 accumulation. Every other implementation is
// tested against this file, so it favours obviousness over speed (it still parallelizes over heads so
// the test suite runs quickly on long sequences).
#include <cmath>
#include <limits>
#include <vector>

#include "core/convert.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/reference/attention_row.hpp"
#include "kernels/registry.hpp"

namespace flashkit::kernels {

namespace {

// Copies one [n, d] slice of an operand (rows r0.., head h) into f64.
std::vector<double> load_rows(const AttnOperand& t, DType dt, int64_t b, int64_t r0, int64_t n, int64_t h, int64_t d) {
  std::vector<double> out(size_t(n * d));
  for (int64_t i = 0; i < n; ++i) {
    const char* base = static_cast<const char*>(t.data) + (b * t.stride_b + (r0 + i) * t.stride_s + h * t.stride_h) * dtype_size(dt);
    for (int64_t c = 0; c < d; ++c) out[size_t(i * d + c)] = load_as_f64(base, dt, c);
  }
  return out;
}

void store_rows(const AttnOperand& t, DType dt, int64_t b, int64_t r0, int64_t n, int64_t h, int64_t d,
                const std::vector<double>& src) {
  for (int64_t i = 0; i < n; ++i) {
    char* base = static_cast<char*>(t.data) + (b * t.stride_b + (r0 + i) * t.stride_s + h * t.stride_h) * dtype_size(dt);
    for (int64_t c = 0; c < d; ++c) store_from_f64(base, dt, c, src[size_t(i * d + c)]);
  }
}

struct Scores {
  // raw = scale * q.k ; s = softcap ? cap * tanh(raw / cap) : raw
  double scale, cap;
  double operator()(double raw_dot, double* dsdraw) const {
    double r = scale * raw_dot;
    if (cap > 0) {
      double t = std::tanh(r / cap);
      if (dsdraw) *dsdraw = scale * (1 - t * t);
      return cap * t;
    }
    if (dsdraw) *dsdraw = scale;
    return r;
  }
};

double dot(const double* a, const double* b, int64_t d) {
  double s = 0;
  for (int64_t c = 0; c < d; ++c) s += a[c] * b[c];
  return s;
}

}  // namespace

void attention_forward_reference(const AttentionFwdArgs& a) {
  const AttentionShape& s = a.shape;
  const int64_t d = s.head_dim, G = s.group();
#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(num_threads())
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      SeqRange r = seq_range(s, b);
      if (r.nq == 0) continue;
      auto q = load_rows(a.q, a.dtype, r.bslot, r.q0, r.nq, h, d);
      auto k = load_rows(a.k, a.dtype, r.bslot, r.k0, r.nk, h / G, d);
      auto v = load_rows(a.v, a.dtype, r.bslot, r.k0, r.nk, h / G, d);
      std::vector<double> o(size_t(r.nq * d), 0.0), sc(size_t(r.nk));
      for (int64_t i = 0; i < r.nq; ++i) {
        const int64_t lo = a.mask.lo(i, r.nq, r.nk), hi = a.mask.hi(i, r.nq, r.nk);
        a.lse[a.lse_index(r, h, i)] = float(attention_row_f64(&q[size_t(i * d)], k.data(), v.data(), d, lo, hi, a.scale,
                                                              a.softcap, &o[size_t(i * d)], sc));
      }
      store_rows(a.o, a.dtype, r.bslot, r.q0, r.nq, h, d, o);
    }
  }
}

void attention_backward_reference(const AttentionBwdArgs& g) {
  const AttentionFwdArgs& a = g.fwd;
  const AttentionShape& s = a.shape;
  const int64_t d = s.head_dim, G = s.group();
  const Scores score{a.scale, a.softcap};
  // Parallel over (batch, kv head) so a GQA group's dK/dV sums stay in one thread.
#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(num_threads())
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t hk = 0; hk < s.kv_heads; ++hk) {
      SeqRange r = seq_range(s, b);
      auto k = load_rows(a.k, a.dtype, r.bslot, r.k0, r.nk, hk, d);
      auto v = load_rows(a.v, a.dtype, r.bslot, r.k0, r.nk, hk, d);
      std::vector<double> dk(size_t(r.nk * d), 0.0), dv(size_t(r.nk * d), 0.0);
      for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
        auto q = load_rows(a.q, a.dtype, r.bslot, r.q0, r.nq, h, d);
        auto dout = load_rows(g.dout, a.dtype, r.bslot, r.q0, r.nq, h, d);
        std::vector<double> dq(size_t(r.nq * d), 0.0), p(size_t(r.nk)), dsdr(size_t(r.nk));
        for (int64_t i = 0; i < r.nq; ++i) {
          int64_t lo = a.mask.lo(i, r.nq, r.nk), hi = a.mask.hi(i, r.nq, r.nk);
          if (hi <= lo) continue;
          // A row with visible keys needs a finite lse (attention.hpp, "Non-finite input"): otherwise its
          // probabilities are NaN, and so are dq_i and the dk_j, dv_j of every key it sees.
          const double lse = a.lse[a.lse_index(r, h, i)];
          if (!std::isfinite(lse)) {
            const double nan = std::numeric_limits<double>::quiet_NaN();
            for (int64_t j = lo; j < hi; ++j)
              for (int64_t c = 0; c < d; ++c) {
                dv[size_t(j * d + c)] += nan;
                dk[size_t(j * d + c)] += nan;
              }
            for (int64_t c = 0; c < d; ++c) dq[size_t(i * d + c)] = nan;
            continue;
          }
          // Otherwise recompute the probabilities from scratch (independent of the lse/o values).
          double m = -std::numeric_limits<double>::infinity();
          for (int64_t j = lo; j < hi; ++j) {
            p[size_t(j)] = score(dot(&q[size_t(i * d)], &k[size_t(j * d)], d), &dsdr[size_t(j)]);
            m = std::max(m, p[size_t(j)]);
          }
          double l = 0;
          for (int64_t j = lo; j < hi; ++j) l += (p[size_t(j)] = std::exp(p[size_t(j)] - m));
          for (int64_t j = lo; j < hi; ++j) p[size_t(j)] /= l;
          // D_i = sum_j P_ij dP_ij = dO_i . O_i
          double D = 0;
          for (int64_t j = lo; j < hi; ++j) D += p[size_t(j)] * dot(&dout[size_t(i * d)], &v[size_t(j * d)], d);
          for (int64_t j = lo; j < hi; ++j) {
            double dp = dot(&dout[size_t(i * d)], &v[size_t(j * d)], d);
            double ds = p[size_t(j)] * (dp - D) * dsdr[size_t(j)];
            for (int64_t c = 0; c < d; ++c) {
              dv[size_t(j * d + c)] += p[size_t(j)] * dout[size_t(i * d + c)];
              dq[size_t(i * d + c)] += ds * k[size_t(j * d + c)];
              dk[size_t(j * d + c)] += ds * q[size_t(i * d + c)];
            }
          }
        }
        store_rows(g.dq, a.dtype, r.bslot, r.q0, r.nq, h, d, dq);
      }
      store_rows(g.dk, a.dtype, r.bslot, r.k0, r.nk, hk, d, dk);
      store_rows(g.dv, a.dtype, r.bslot, r.k0, r.nk, hk, d, dv);
    }
  }
}

OpCost attention_forward_reference_cost(const AttentionFwdArgs& a) {
  OpCost c;
  const AttentionShape& s = a.shape;
  const double pairs = attention_visible_pairs(s, a.mask) * double(s.heads);
  const double e = double(dtype_size(a.dtype)), d = double(s.head_dim);
  c.flops = 4.0 * pairs * d;
  const double nq = s.varlen() ? double(s.seqlen_q) : double(s.batch * s.seqlen_q);
  const double nk = s.varlen() ? double(s.seqlen_k) : double(s.batch * s.seqlen_k);
  c.bytes_read = e * d * (nq * s.heads + 2 * nk * s.heads);
  c.bytes_written = e * d * nq * s.heads + 4.0 * nq * s.heads;
  c.workspace_bytes = 8.0 * d * (nq + 2 * nk) / double(s.batch) * double(num_threads());
  c.model = "reference: each operand read once into f64, scores kept per row";
  c.kernel = "reference.f64";
  return c;
}

OpCost attention_backward_reference_cost(const AttentionBwdArgs& g) {
  OpCost c = attention_forward_reference_cost(g.fwd);
  c.flops *= 2.5;
  c.bytes_read *= 2;
  c.bytes_written = c.bytes_read / 2;
  c.kernel = "reference.f64";
  return c;
}

}  // namespace flashkit::kernels
