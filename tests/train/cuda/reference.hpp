// Plain f64 CPU references of the CUDA training kernels (src/train/cuda/kernels.hpp states each formula). They
// read the same (bf16-rounded) inputs as the device and compute everything in double; the tests compare.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace fk_train_test::ref {

inline std::vector<double> embedding_fwd(const std::vector<int32_t>& ids, const std::vector<float>& table, int64_t V,
                                         int64_t C, double scale) {
  std::vector<double> out(ids.size() * size_t(C));
  for (size_t t = 0; t < ids.size(); ++t)
    for (int64_t c = 0; c < C; ++c)
      out[t * C + c] = (ids[t] >= 0 && ids[t] < V) ? double(table[size_t(ids[t]) * C + c]) * scale : NAN;
  return out;
}
inline std::vector<double> embedding_bwd(const std::vector<int32_t>& ids, const std::vector<float>& dout, int64_t V,
                                         int64_t C, double scale, const std::vector<float>& dtable0) {
  std::vector<double> d(dtable0.begin(), dtable0.end());
  for (size_t t = 0; t < ids.size(); ++t)
    if (ids[t] >= 0 && ids[t] < V)
      for (int64_t c = 0; c < C; ++c) d[size_t(ids[t]) * C + c] += scale * double(dout[t * C + c]);
  return d;
}

// Group (t, g) of a [T, groups * C] view with row stride ld starts at t * ld + g * C.
inline size_t at(int64_t t, int64_t g, int64_t c, int64_t groups, int64_t C, int64_t ld) {
  (void)groups;
  return size_t(t * ld + g * C + c);
}

// y (same layout as the output buffer, only the groups written) and rstd [T * groups].
inline void rmsnorm_fwd(const std::vector<float>& x, int64_t ldx, const std::vector<float>& w, int64_t T,
                        int64_t groups, int64_t C, double eps, bool plus_one, std::vector<double>& y, int64_t ldy,
                        std::vector<double>& rstd) {
  rstd.assign(size_t(T * groups), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t g = 0; g < groups; ++g) {
      double ss = 0;
      for (int64_t c = 0; c < C; ++c) ss += double(x[at(t, g, c, groups, C, ldx)]) * x[at(t, g, c, groups, C, ldx)];
      const double r = 1.0 / std::sqrt(ss / double(C) + eps);
      rstd[size_t(t * groups + g)] = r;
      for (int64_t c = 0; c < C; ++c)
        y[at(t, g, c, groups, C, ldy)] = x[at(t, g, c, groups, C, ldx)] * r * ((plus_one ? 1.0 : 0.0) + w[size_t(c)]);
    }
}
// dx (layout lddx; += onto dx's initial values when accumulate) and dw (+= onto dw).
inline void rmsnorm_bwd(const std::vector<float>& dy, int64_t lddy, const std::vector<float>& x, int64_t ldx,
                        const std::vector<float>& w, int64_t T, int64_t groups, int64_t C, double eps, bool plus_one,
                        std::vector<double>& dx, int64_t lddx, bool accumulate, std::vector<double>& dw) {
  const double off = plus_one ? 1.0 : 0.0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t g = 0; g < groups; ++g) {
      double ss = 0;
      for (int64_t c = 0; c < C; ++c) ss += double(x[at(t, g, c, groups, C, ldx)]) * x[at(t, g, c, groups, C, ldx)];
      const double r = 1.0 / std::sqrt(ss / double(C) + eps);
      double dot = 0;
      for (int64_t c = 0; c < C; ++c)
        dot += double(dy[at(t, g, c, groups, C, lddy)]) * (off + w[size_t(c)]) * x[at(t, g, c, groups, C, ldx)] * r;
      const double mean = dot / double(C);
      for (int64_t c = 0; c < C; ++c) {
        const double d = dy[at(t, g, c, groups, C, lddy)], xh = x[at(t, g, c, groups, C, ldx)] * r;
        const double v = r * (d * (off + w[size_t(c)]) - xh * mean);
        double& o = dx[at(t, g, c, groups, C, lddx)];
        o = accumulate ? o + v : v;
        dw[size_t(c)] += d * xh;
      }
    }
}

// The angle as the kernels (and HF) form it: the f32 product of the position and inv_freq.
inline double rope_angle(int64_t pos, float inv_freq) { return double(float(pos) * inv_freq); }
// Rotation of row t, pair index i by cos cs[t * D/2 + i] and sin sn[t * D/2 + i].
inline void rope(const std::vector<float>& x, int64_t ldx, std::vector<double>& out, int64_t ldo,
                 const std::vector<double>& cs, const std::vector<double>& sn, int64_t T, int64_t heads, int64_t D,
                 bool bwd) {
  const int64_t h2 = D / 2;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < h2; ++i) {
        const double c = cs[size_t(t * h2 + i)], s = sn[size_t(t * h2 + i)];
        const double x1 = x[size_t(t * ldx + h * D + i)], x2 = x[size_t(t * ldx + h * D + i + h2)];
        out[size_t(t * ldo + h * D + i)] = bwd ? x1 * c + x2 * s : x1 * c - x2 * s;
        out[size_t(t * ldo + h * D + i + h2)] = bwd ? x2 * c - x1 * s : x2 * c + x1 * s;
      }
}

inline double act(bool silu, double g) {
  if (silu) return g / (1.0 + std::exp(-g));
  return 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
}
inline double act_grad(bool silu, double g) {
  if (silu) {
    const double s = 1.0 / (1.0 + std::exp(-g));
    return s * (1.0 + g * (1.0 - s));
  }
  const double k = 0.7978845608028654, th = std::tanh(k * (g + 0.044715 * g * g * g));
  return 0.5 * (1.0 + th) + 0.5 * g * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * g * g);
}
inline std::vector<double> gated_fwd(const std::vector<float>& gu, int64_t T, int64_t F, bool silu) {
  std::vector<double> out(size_t(T * F));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t f = 0; f < F; ++f)
      out[size_t(t * F + f)] = act(silu, gu[size_t(t * 2 * F + f)]) * double(gu[size_t(t * 2 * F + F + f)]);
  return out;
}
inline std::vector<double> gated_bwd(const std::vector<float>& dout, const std::vector<float>& gu, int64_t T, int64_t F,
                                     bool silu) {
  std::vector<double> d(size_t(T * 2 * F));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t f = 0; f < F; ++f) {
      const double g = gu[size_t(t * 2 * F + f)], u = gu[size_t(t * 2 * F + F + f)], o = dout[size_t(t * F + f)];
      d[size_t(t * 2 * F + f)] = o * u * act_grad(silu, g);
      d[size_t(t * 2 * F + F + f)] = o * act(silu, g);
    }
  return d;
}

// loss [R] and dlogits [R, ld] (padding and ignored rows 0; invalid target: loss NaN).
inline void cross_entropy(const std::vector<float>& z, int64_t ld, const std::vector<int32_t>& tgt, int64_t R,
                          int64_t V, double scale, double cap, std::vector<double>& loss, std::vector<double>& dz) {
  loss.assign(size_t(R), 0.0);
  dz.assign(size_t(R * ld), 0.0);
  std::vector<double> l(static_cast<size_t>(V));
  for (int64_t r = 0; r < R; ++r) {
    const int32_t t = tgt[size_t(r)];
    if (t < 0 || t >= V) {
      loss[size_t(r)] = t == -1 ? 0.0 : NAN;
      continue;
    }
    double m = -INFINITY;
    for (int64_t c = 0; c < V; ++c) {
      const double zz = z[size_t(r * ld + c)];
      l[size_t(c)] = cap > 0 ? cap * std::tanh(zz / cap) : zz;
      m = std::max(m, l[size_t(c)]);
    }
    double s = 0;
    for (int64_t c = 0; c < V; ++c) s += std::exp(l[size_t(c)] - m);
    loss[size_t(r)] = std::log(s) + m - l[size_t(t)];
    for (int64_t c = 0; c < V; ++c) {
      double d = std::exp(l[size_t(c)] - m) / s - (c == t ? 1.0 : 0.0);
      if (cap > 0) d *= 1.0 - (l[size_t(c)] / cap) * (l[size_t(c)] / cap);
      dz[size_t(r * ld + c)] = scale * d;
    }
  }
}

struct AdamOut {
  std::vector<double> p, m, v;
};
inline AdamOut adamw(const std::vector<float>& p, const std::vector<float>& g, const std::vector<float>& m,
                     const std::vector<float>& v, double lr, double b1, double b2, double eps, double wd, int64_t step,
                     double grad_scale) {
  AdamOut o{std::vector<double>(p.size()), std::vector<double>(p.size()), std::vector<double>(p.size())};
  const double bc1 = 1.0 - std::pow(b1, double(step)), bc2 = 1.0 - std::pow(b2, double(step));
  for (size_t i = 0; i < p.size(); ++i) {
    const double gg = double(g[i]) * grad_scale;
    o.m[i] = b1 * m[i] + (1.0 - b1) * gg;
    o.v[i] = b2 * v[i] + (1.0 - b2) * gg * gg;
    o.p[i] = double(p[i]) * (1.0 - lr * wd) - lr / bc1 * o.m[i] / (std::sqrt(o.v[i] / bc2) + eps);
  }
  return o;
}

// Row-major C[M, N] = alpha op(A) op(B) + beta C0 (A [M, K] or stored [K, M] when ta; B [K, N] or stored [N, K]).
inline std::vector<double> matmul(const std::vector<float>& A, int64_t lda, bool ta, const std::vector<float>& B,
                                  int64_t ldb, bool tb, const std::vector<float>& C0, int64_t ldc, int64_t M, int64_t N,
                                  int64_t K, double alpha, double beta) {
  std::vector<double> C(C0.begin(), C0.end());
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)];
        const double b = tb ? B[size_t(j * ldb + k)] : B[size_t(k * ldb + j)];
        s += a * b;
      }
      double& c = C[size_t(i * ldc + j)];
      c = alpha * s + (beta != 0.0 ? beta * c : 0.0);
    }
  return C;
}

}  // namespace fk_train_test::ref
