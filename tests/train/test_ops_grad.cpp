// Every op's backward against central finite differences, in f64 (the CPU backend's f64 instantiation runs the
// same templated code as the f32 one), on random inputs of odd sizes: loss = sum(out * R) for a random R, so the
// analytic gradient is the op's backward applied to dout = R. Also: the f32 ops against the f64 ones.
#include <gtest/gtest.h>

#include <functional>
#include <tuple>

#include "train_test_util.hpp"

namespace {

using namespace fk_train_test;
using flashkit::train::Act;
using flashkit::train::AttnShape;

std::unique_ptr<Backend> f64() { return flashkit::train::make_cpu_backend(DType::f64, 2); }

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences of f at x (every element).
std::vector<double> numeric_grad(std::vector<double> x, const std::function<double(const std::vector<double>&)>& f,
                                 double h = 1e-5) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

constexpr double kTol = 1e-7;

TEST(TrainOps, EmbeddingBackward) {
  auto be = f64();
  const int64_t V = 7, H = 5, N = 9;
  std::vector<int32_t> ids = {3, 1, 3, 6, 0, 3, 2, 6, 5};
  const auto table = randn(size_t(V * H), 1), R = randn(size_t(N * H), 2);
  const float scale = 1.7f;
  auto f = [&](const std::vector<double>& t) {
    Mat tm = make(*be, V, H, t), out = be->alloc(DType::f64, N, H), id = make_ids(*be, ids);
    be->embedding_fwd(id, tm, out, scale);
    const double l = dot(get(*be, out), R);
    be->free(tm), be->free(out), be->free(id);
    return l;
  };
  Mat dt = be->alloc(DType::f64, V, H), dout = make(*be, N, H, R), id = make_ids(*be, ids);
  be->embedding_bwd(id, dout, dt, scale);
  EXPECT_LT(rel_err(get(*be, dt), numeric_grad(table, f)), kTol);
}

void rmsnorm_case(int64_t rows, int64_t cols, int64_t group, bool plus_one) {
  auto be = f64();
  const auto x = randn(size_t(rows * cols), 3), w = randn(size_t(group), 4, 0.5), R = randn(size_t(rows * cols), 5);
  auto run = [&](const std::vector<double>& xv, const std::vector<double>& wv) {
    Mat xm = make(*be, rows, cols, xv), wm = make(*be, 1, group, wv), out = be->alloc(DType::f64, rows, cols),
        rs = be->alloc(DType::f64, rows, cols / group);
    be->rmsnorm_fwd(xm, wm, out, rs, group, 1e-5f, plus_one);
    const double l = dot(get(*be, out), R);
    be->free(xm), be->free(wm), be->free(out), be->free(rs);
    return l;
  };
  Mat xm = make(*be, rows, cols, x), wm = make(*be, 1, group, w), out = be->alloc(DType::f64, rows, cols),
      rs = be->alloc(DType::f64, rows, cols / group), dout = make(*be, rows, cols, R);
  be->rmsnorm_fwd(xm, wm, out, rs, group, 1e-5f, plus_one);
  // accumulate = true on a non-zero dx: the result is the old value plus the gradient
  const auto base = randn(size_t(rows * cols), 6);
  Mat dx = make(*be, rows, cols, base), dw = be->alloc(DType::f64, 1, group);
  be->rmsnorm_bwd(dout, xm, wm, rs, dx, dw, group, plus_one, true);
  auto dxv = get(*be, dx);
  for (size_t i = 0; i < dxv.size(); ++i) dxv[i] -= base[i];
  EXPECT_LT(rel_err(dxv, numeric_grad(x, [&](const std::vector<double>& v) { return run(v, w); })), kTol);
  EXPECT_LT(rel_err(get(*be, dw), numeric_grad(w, [&](const std::vector<double>& v) { return run(x, v); })), kTol);
  // in place (dx aliases dout), not accumulating
  Mat dw2 = be->alloc(DType::f64, 1, group);
  be->rmsnorm_bwd(dout, xm, wm, rs, dout, dw2, group, plus_one, false);
  EXPECT_LT(rel_err(get(*be, dout), dxv), 1e-12);
}

TEST(TrainOps, RmsNormBackward) { rmsnorm_case(5, 13, 13, false); }
TEST(TrainOps, RmsNormPlusOneBackward) { rmsnorm_case(4, 11, 11, true); }
TEST(TrainOps, RmsNormPerHeadBackward) { rmsnorm_case(3, 18, 6, true); }

TEST(TrainOps, RopeBackward) {
  auto be = f64();
  const int64_t B = 2, T = 5, heads = 3, hd = 6, half = 3;
  const auto x = randn(size_t(B * T * heads * hd), 7), R = randn(x.size(), 8);
  std::vector<double> c(size_t(T * half)), s(size_t(T * half));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double a = double(t) * std::pow(100.0, -double(i) / double(half));
      c[size_t(t * half + i)] = 0.9 * std::cos(a);  // an attention factor != 1
      s[size_t(t * half + i)] = 0.9 * std::sin(a);
    }
  Mat cm = make(*be, T, half, c), sm = make(*be, T, half, s);
  auto f = [&](const std::vector<double>& v) {
    Mat xm = make(*be, B * T, heads * hd, v);
    be->rope_fwd(xm, T, heads, hd, cm, sm);
    const double l = dot(get(*be, xm), R);
    be->free(xm);
    return l;
  };
  Mat d = make(*be, B * T, heads * hd, R);
  be->rope_bwd(d, T, heads, hd, cm, sm);
  EXPECT_LT(rel_err(get(*be, d), numeric_grad(x, f)), kTol);
}

void attention_case(int64_t B, int64_t T, int64_t heads, int64_t kvh, int64_t hd, float softcap, int64_t window) {
  auto be = f64();
  const int64_t qd = heads * hd, kvd = kvh * hd, W = qd + 2 * kvd, N = B * T;
  // q, k, v as column slices of one fused buffer, as the model stores them
  const auto qkv = randn(size_t(N * W), 9), R = randn(size_t(N * qd), 10);
  AttnShape s{B, T, heads, kvh, hd, 0.41f, softcap, window};
  auto f = [&](const std::vector<double>& v) {
    Mat m = make(*be, N, W, v), o = be->alloc(DType::f64, N, qd), lse = be->alloc(DType::f32, B * heads, T);
    be->attention_fwd(m.col_slice(0, qd), m.col_slice(qd, kvd), m.col_slice(qd + kvd, kvd), o, lse, s);
    const double l = dot(get(*be, o), R);
    be->free(m), be->free(o), be->free(lse);
    return l;
  };
  Mat m = make(*be, N, W, qkv), o = be->alloc(DType::f64, N, qd), lse = be->alloc(DType::f32, B * heads, T);
  be->attention_fwd(m.col_slice(0, qd), m.col_slice(qd, kvd), m.col_slice(qd + kvd, kvd), o, lse, s);
  Mat dout = make(*be, N, qd, R), d = be->alloc(DType::f64, N, W);
  be->attention_bwd(dout, m.col_slice(0, qd), m.col_slice(qd, kvd), m.col_slice(qd + kvd, kvd), o, lse,
                    d.col_slice(0, qd), d.col_slice(qd, kvd), d.col_slice(qd + kvd, kvd), s);
  EXPECT_LT(rel_err(get(*be, d), numeric_grad(qkv, f)), kTol);
}

TEST(TrainOps, AttentionBackwardGqaCausal) { attention_case(2, 7, 4, 2, 8, 0.f, 0); }
TEST(TrainOps, AttentionBackwardWindowSoftcap) { attention_case(3, 9, 3, 1, 16, 2.5f, 3); }

void gated_case(Act act) {
  auto be = f64();
  const int64_t N = 5, F = 7;
  const auto gu = randn(size_t(N * 2 * F), 11, 1.5), R = randn(size_t(N * F), 12);
  auto f = [&](const std::vector<double>& v) {
    Mat g = make(*be, N, 2 * F, v), o = be->alloc(DType::f64, N, F);
    be->gated_act_fwd(g, o, act);
    const double l = dot(get(*be, o), R);
    be->free(g), be->free(o);
    return l;
  };
  Mat g = make(*be, N, 2 * F, gu), d = make(*be, N, F, R), dg = be->alloc(DType::f64, N, 2 * F);
  be->gated_act_bwd(d, g, dg, act);
  EXPECT_LT(rel_err(get(*be, dg), numeric_grad(gu, f)), kTol);
}
TEST(TrainOps, SiluBackward) { gated_case(Act::silu); }
TEST(TrainOps, GeluTanhBackward) { gated_case(Act::gelu_tanh); }

void cross_entropy_case(float softcap) {
  auto be = f64();
  const int64_t R = 6, V = 11;
  const std::vector<int32_t> targets = {3, -1, 0, 10, 7, 3};
  const auto z = randn(size_t(R * V), 13, 2.0);
  const float gs = 0.37f;
  auto f = [&](const std::vector<double>& v) {
    Mat lg = make(*be, R, V, v), t = make_ids(*be, targets), l = be->alloc(DType::f64, R, 1);
    be->cross_entropy_chunk(lg, t, l, softcap, 1.f);
    double s = 0;
    for (double x : get(*be, l)) s += x;
    be->free(lg), be->free(t), be->free(l);
    return s * gs;
  };
  Mat lg = make(*be, R, V, z), t = make_ids(*be, targets), l = be->alloc(DType::f64, R, 1);
  be->cross_entropy_chunk(lg, t, l, softcap, gs);
  EXPECT_LT(rel_err(get(*be, lg), numeric_grad(z, f)), kTol);
  // the loss itself: logsumexp - target logit, 0 for the ignored row
  const auto losses = get(*be, l);
  EXPECT_EQ(losses[1], 0.0);
  double mx = -1e300, sum = 0;
  for (int64_t j = 0; j < V; ++j) {
    const double zz = softcap > 0 ? softcap * std::tanh(z[size_t(j)] / softcap) : z[size_t(j)];
    mx = std::max(mx, zz);
  }
  for (int64_t j = 0; j < V; ++j) {
    const double zz = softcap > 0 ? softcap * std::tanh(z[size_t(j)] / softcap) : z[size_t(j)];
    sum += std::exp(zz - mx);
  }
  const double zt = softcap > 0 ? softcap * std::tanh(z[3] / softcap) : z[3];
  EXPECT_NEAR(losses[0], mx + std::log(sum) - zt, 1e-12);
}
TEST(TrainOps, CrossEntropyBackward) { cross_entropy_case(0.f); }
TEST(TrainOps, CrossEntropySoftcapBackward) { cross_entropy_case(4.f); }

// Small (one call) and large enough to be split into per-thread slices by rows (M >= N) and by columns.
TEST(TrainOps, MatmulTransposes) {
  auto be = f64();
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{5, 7, 3}, {70, 50, 40}, {33, 90, 41}})
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const auto a = randn(size_t(M * K), 14), b = randn(size_t(K * N), 15), c0 = randn(size_t(M * N), 16);
      Mat A = ta ? make(*be, K, M, a) : make(*be, M, K, a), B = tb ? make(*be, N, K, b) : make(*be, K, N, b);
      Mat C = make(*be, M, N, c0);
      be->matmul(A, ta, B, tb, C, 0.5f, 2.f);
      std::vector<double> want(size_t(M * N));
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k)
            s += (ta ? a[size_t(k * M + i)] : a[size_t(i * K + k)]) * (tb ? b[size_t(j * K + k)] : b[size_t(k * N + j)]);
          want[size_t(i * N + j)] = 0.5 * s + 2 * c0[size_t(i * N + j)];
        }
      EXPECT_LT(rel_err(get(*be, C), want), 1e-14) << M << "x" << N << "x" << K << " " << ta << tb;
    }
}

TEST(TrainOps, AdamWAndNorm) {
  auto be = f64();
  const int64_t n = 37;
  auto p = randn(size_t(n), 17), g = randn(size_t(n), 18), m = randn(size_t(n), 19, 0.1), v = randn(size_t(n), 20);
  for (auto& x : v) x = x * x;
  Mat P = make(*be, 1, n, p), G = make(*be, 1, n, g), M = make(*be, 1, n, m), Vm = make(*be, 1, n, v);
  double nsq = 0;
  for (double x : g) nsq += x * x;
  EXPECT_NEAR(be->global_norm_sq(G), nsq, 1e-12);
  flashkit::train::AdamW h;
  h.lr = 0.01f, h.beta1 = 0.9f, h.beta2 = 0.95f, h.eps = 1e-8f, h.weight_decay = 0.1f, h.grad_scale = 0.5f, h.step = 3;
  be->adamw_step(P, G, M, Vm, h);
  const auto got = get(*be, P);
  for (int64_t i = 0; i < n; ++i) {
    const double b1 = double(0.9f), b2 = double(0.95f), gi = g[size_t(i)] * 0.5;
    const double mi = b1 * m[size_t(i)] + (1 - b1) * gi, vi = b2 * v[size_t(i)] + (1 - b2) * gi * gi;
    const double mh = mi / (1 - std::pow(b1, 3)), vh = vi / (1 - std::pow(b2, 3));
    const double want = p[size_t(i)] - double(0.01f) * (mh / (std::sqrt(vh) + double(1e-8f)) + double(0.1f) * p[size_t(i)]);
    EXPECT_NEAR(got[size_t(i)], want, 1e-12);
  }
}

// The f32 instantiation (flash attention, sgemm) against the f64 one on the same inputs.
TEST(TrainOps, F32MatchesF64) {
  auto b64 = f64();
  auto b32 = flashkit::train::make_cpu_backend(DType::f32, 2);
  const int64_t B = 2, T = 33, heads = 4, kvh = 2, hd = 8, qd = heads * hd, kvd = kvh * hd, W = qd + 2 * kvd;
  const auto qkv = randn(size_t(B * T * W), 21), R = randn(size_t(B * T * qd), 22);
  AttnShape s{B, T, heads, kvh, hd, 0.35f, 0.f, 5};
  std::vector<std::vector<double>> outs;
  for (Backend* be : {b64.get(), b32.get()}) {
    const DType dt = be->param_dtype();
    Mat m = make(*be, B * T, W, qkv), o = be->alloc(dt, B * T, qd), lse = be->alloc(DType::f32, B * heads, T);
    be->attention_fwd(m.col_slice(0, qd), m.col_slice(qd, kvd), m.col_slice(qd + kvd, kvd), o, lse, s);
    Mat dout = make(*be, B * T, qd, R), d = be->alloc(dt, B * T, W);
    be->attention_bwd(dout, m.col_slice(0, qd), m.col_slice(qd, kvd), m.col_slice(qd + kvd, kvd), o, lse,
                      d.col_slice(0, qd), d.col_slice(qd, kvd), d.col_slice(qd + kvd, kvd), s);
    outs.push_back(get(*be, o));
    outs.push_back(get(*be, d));
  }
  EXPECT_LT(rel_err(outs[2], outs[0]), 1e-5);
  EXPECT_LT(rel_err(outs[3], outs[1]), 1e-5);
}

}  // namespace
