// The CUDA engine backend op by op (src/engine/cuda) against f64 references computed here: fresh random inputs,
// NaN-poisoned outputs, odd sizes and strided views; fused op sequences (the backend fuses them at flush) are
// checked against the unfused definitions, with fusion on and off, and a captured decode step against the same
// ops run eagerly and on the CPU backend. Every test skips when no CUDA device is visible (CI has none).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <exception>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend.hpp"
#include "flashkit/dtype.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "model/weights.hpp"

#ifdef FLASHKIT_WITH_CUDA
#include <cuda_runtime.h>

#include <cstdio>

#include "engine/cuda/kernels.hpp"
#endif

using namespace flashkit;
using namespace flashkit::engine;

namespace {

std::unique_ptr<Backend> cuda_backend(const char* fuse = nullptr, const char* graphs = nullptr) {
  if (cuda_device_count() <= 0) return nullptr;
  // The backend's switches come with its options (Tuning), per backend.
  BackendOptions o;
  o.tuning = default_tuning();
  if (fuse) o.tuning.cuda_fuse = std::string(fuse) != "0";
  if (graphs) o.tuning.cuda_graphs = std::string(graphs) != "0";
  std::unique_ptr<Backend> be;
  try {
    be = make_cuda_backend(o);
  } catch (const Error& e) {
    if (e.status() != Status::unsupported) throw;
  }
  return be;
}
#define NEED_CUDA(var, ...)                                    \
  auto var = cuda_backend(__VA_ARGS__);                        \
  if (!var) GTEST_SKIP() << "no CUDA device (or no CUDA build)";

std::vector<float> rnd(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}
float bfr(float x) { return bf16_to_f32(f32_to_bf16(x)); }
std::vector<float> bfr(std::vector<float> v) {
  for (auto& x : v) x = bfr(x);
  return v;
}
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// Device tensors that free themselves.
struct Buf {
  Backend* be = nullptr;
  Tensor t;
  Buf(Backend& b, int64_t rows, int64_t cols, const std::vector<float>* init = nullptr, DType dt = DType::f32)
      : be(&b) {
    t = b.alloc(dt, rows, cols);
    std::vector<float> v = init ? *init : std::vector<float>(size_t(rows * cols), kNaN);
    if (dt == DType::bf16) {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
      b.upload(t, h.data(), h.size() * 2);
    } else {
      b.upload(t, v.data(), v.size() * 4);
    }
  }
  ~Buf() { be->free(t); }
  Buf(const Buf&) = delete;
  std::vector<float> get(int64_t rows = -1) const { return get_view(*be, t, rows < 0 ? t.rows : rows); }
  static std::vector<float> get_view(Backend& b, const Tensor& v, int64_t rows) {
    std::vector<float> h(size_t(rows * v.cols));
    b.download_f32(h.data(), v, rows);
    return h;
  }
};

// A matrix on the backend. The host copies stay alive with it: a backend may keep pointing at host weights when
// their stored type is the one it wants (the CPU backend does, as with a memory-mapped checkpoint).
struct Mat {
  Backend* be;
  Matrix m;
  std::vector<float> wf, bf;
  std::vector<uint16_t> wb;
  Mat(Backend& b, const std::vector<float>& w, int64_t rows, int64_t cols, const std::vector<float>* bias = nullptr,
      bool store_bf16 = false)
      : be(&b), wf(w) {
    model::WeightView wv;
    wv.name = "w";
    wv.shape = {rows, cols};
    if (store_bf16) {
      wb.resize(w.size());
      for (size_t i = 0; i < w.size(); ++i) wb[i] = f32_to_bf16(w[i]);
      wv.type = model::WeightType::bf16, wv.data = wb.data(), wv.nbytes = wb.size() * 2;
    } else {
      wv.type = model::WeightType::f32, wv.data = wf.data(), wv.nbytes = wf.size() * 4;
    }
    const model::WeightView* parts[1] = {&wv};
    model::WeightView bv;
    const model::WeightView* bparts[1] = {&bv};
    if (bias) {
      bf = *bias;
      bv.name = "b", bv.type = model::WeightType::f32, bv.shape = {rows}, bv.data = bf.data(), bv.nbytes = bf.size() * 4;
      m = b.load_matrix(parts, bparts);
    } else {
      m = b.load_matrix(parts);
    }
  }
  ~Mat() { be->free_matrix(m); }
};

Tensor vec(Backend& be, const std::vector<float>& v) { return be.upload_f32(v); }

double rel(const std::vector<float>& got, const std::vector<double>& ref) {
  double d = 0, r = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    d += (got[i] - ref[i]) * (got[i] - ref[i]);
    r += ref[i] * ref[i];
  }
  return std::sqrt(d / std::max(r, 1e-300));
}

// ---- f64 references
std::vector<double> rms_ref(const double* x, int64_t n, const float* w, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double r = 1.0 / std::sqrt(ss / double(n) + eps);
  std::vector<double> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) y[size_t(i)] = x[i] * r * w[i];
  return y;
}
double gelu_ref(double g) { return 0.5 * g * (1 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))); }
double silu_ref(double g) { return g / (1 + std::exp(-g)); }
// y[t, n] = sum_k x[t, k] W[n, k] (+ b[n]); W as the device holds it (bf16-rounded)
std::vector<double> linear_ref(const std::vector<double>& x, int64_t T, int64_t K, const std::vector<float>& W, int64_t N,
                               const std::vector<float>* b) {
  std::vector<double> y(size_t(T * N));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double s = b ? (*b)[size_t(n)] : 0.0;
      for (int64_t k = 0; k < K; ++k) s += x[size_t(t * K + k)] * double(bfr(W[size_t(n * K + k)]));
      y[size_t(t * N + n)] = s;
    }
  return y;
}
void rope_ref(double* x, int64_t D, double pos, const std::vector<float>& inv, double scaling) {
  const int64_t h = D / 2;
  for (int64_t i = 0; i < h; ++i) {
    const double a = pos * double(inv[size_t(i)]), c = std::cos(a) * scaling, s = std::sin(a) * scaling;
    const double x1 = x[i], x2 = x[i + h];
    x[i] = x1 * c - x2 * s;
    x[i + h] = x2 * c + x1 * s;
  }
}
std::vector<double> to_d(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }
std::vector<float> inv_freq(int64_t D, double theta) {
  std::vector<float> f(size_t(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) f[size_t(i)] = float(1.0 / std::pow(theta, double(2 * i) / double(D)));
  return f;
}

// ================================================================ linear
struct LinCase {
  int64_t T, N, K;
  bool bias, store_bf16;
};

TEST(CudaEngineOps, Linear) {
  NEED_CUDA(be);
  const LinCase cases[] = {{1, 37, 64, false, false},  {1, 1000, 640, true, true}, {3, 515, 2056, false, false},
                           {8, 129, 96, true, false},  {17, 300, 136, false, true}, {2, 50, 20, false, false},
                           {1, 4099, 1024, false, true}, {5, 3, 8, true, false}};
  uint64_t seed = 1;
  for (const auto& c : cases) {
    SCOPED_TRACE("T=" + std::to_string(c.T) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K));
    auto W = rnd(size_t(c.N * c.K), seed++, -0.5f, 0.5f);
    auto x = rnd(size_t(c.T * c.K), seed++);
    auto b = rnd(size_t(c.N), seed++);
    Mat m(*be, W, c.N, c.K, c.bias ? &b : nullptr, c.store_bf16);
    Buf xb(*be, c.T, c.K + 3);  // strided input: columns [1, K+1) of a wider buffer
    std::vector<float> xw(size_t(c.T * (c.K + 3)), 7.0f);
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t k = 0; k < c.K; ++k) xw[size_t(t * (c.K + 3) + 1 + k)] = x[size_t(t * c.K + k)];
    be->upload(xb.t, xw.data(), xw.size() * 4);
    Buf y(*be, c.T, c.N + 5);
    const Tensor yv = y.t.col_slice(2, c.N);
    be->linear(xb.t.col_slice(1, c.K), m.m, yv, c.T);
    const auto got = Buf::get_view(*be, yv, c.T);
    const auto ref = linear_ref(to_d(x), c.T, c.K, W, c.N, c.bias ? &b : nullptr);
    const bool gemv = c.T <= 8 && c.K % 8 == 0;
    EXPECT_LT(rel(got, ref), gemv ? 2e-6 : 1e-2);  // cuBLAS rounds x to bf16
  }
}

// ================================================================ fused sequences (and the same with fusion off)
void sandwich_case(Backend& be, int64_t T, int64_t K, int64_t N, uint64_t seed) {
  SCOPED_TRACE("sandwich T=" + std::to_string(T));
  const float eps = 1e-6f;
  auto h0 = rnd(size_t(T * K), seed), d = rnd(size_t(T * K), seed + 1, -3, 3);
  auto pw = rnd(size_t(K), seed + 2, 0.5f, 1.5f), w = rnd(size_t(K), seed + 3, 0.5f, 1.5f);
  auto W = rnd(size_t(N * K), seed + 4, -0.3f, 0.3f);
  Mat m(be, W, N, K);
  Buf h(be, T, K, &h0), db(be, T, K, &d), xn(be, T, K), y(be, T, N);
  Tensor pwt = vec(be, pw), wt = vec(be, w);
  be.add_rms_norm(db.t, pwt, h.t, T, eps);
  be.rms_norm(h.t, wt, xn.t, T, K, eps);
  be.linear(xn.t, m.m, y.t, T);
  std::vector<double> href(size_t(T * K)), xref;
  for (int64_t t = 0; t < T; ++t) {
    auto dn = rms_ref(to_d(d).data() + t * K, K, pw.data(), eps);
    for (int64_t k = 0; k < K; ++k) href[size_t(t * K + k)] = h0[size_t(t * K + k)] + dn[size_t(k)];
    auto a = rms_ref(href.data() + t * K, K, w.data(), eps);
    xref.insert(xref.end(), a.begin(), a.end());
  }
  const auto yref = linear_ref(xref, T, K, W, N, nullptr);
  EXPECT_LT(rel(h.get(), href), 1e-6);
  EXPECT_LT(rel(xn.get(), xref), 1e-6);
  EXPECT_LT(rel(y.get(), yref), 2e-6);
  be.free(pwt);
  be.free(wt);
}

void gated_case(Backend& be, int64_t T, int64_t K, int64_t F, Activation act, uint64_t seed) {
  SCOPED_TRACE("gated T=" + std::to_string(T) + (act == Activation::silu ? " silu" : " gelu"));
  const float eps = 1e-5f;
  auto h0 = rnd(size_t(T * K), seed), d = rnd(size_t(T * K), seed + 1);
  auto w = rnd(size_t(K), seed + 3, 0.5f, 1.5f);
  auto W = rnd(size_t(2 * F * K), seed + 4, -0.3f, 0.3f);
  Mat m(be, W, 2 * F, K);
  Buf h(be, T, K, &h0), db(be, T, K, &d), xn(be, T, K), gu(be, T, 2 * F), out(be, T, F);
  Tensor wt = vec(be, w);
  be.add(db.t, h.t, T);
  be.rms_norm(h.t, wt, xn.t, T, K, eps);
  be.linear(xn.t, m.m, gu.t, T);
  be.gated_act(gu.t, out.t, T, act);
  std::vector<double> href(size_t(T * K)), xref;
  for (int64_t i = 0; i < T * K; ++i) href[size_t(i)] = double(h0[size_t(i)]) + d[size_t(i)];
  for (int64_t t = 0; t < T; ++t) {
    auto a = rms_ref(href.data() + t * K, K, w.data(), eps);
    xref.insert(xref.end(), a.begin(), a.end());
  }
  const auto guref = linear_ref(xref, T, K, W, 2 * F, nullptr);
  std::vector<double> oref(size_t(T * F));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t f = 0; f < F; ++f) {
      const double g = guref[size_t(t * 2 * F + f)], u = guref[size_t(t * 2 * F + F + f)];
      oref[size_t(t * F + f)] = (act == Activation::silu ? silu_ref(g) : gelu_ref(g)) * u;
    }
  EXPECT_LT(rel(h.get(), href), 1e-6);
  EXPECT_LT(rel(xn.get(), xref), 1e-6);
  EXPECT_LT(rel(gu.get(), guref), 2e-6);
  EXPECT_LT(rel(out.get(), oref), 1e-5);
  be.free(wt);
}

void head_case(Backend& be, int64_t K, int64_t V, float cap, uint64_t seed) {
  SCOPED_TRACE("lm head");
  const float eps = 1e-6f;
  auto h0 = rnd(size_t(3 * K), seed), w = rnd(size_t(K), seed + 1, 0.5f, 1.5f);
  auto W = rnd(size_t(V * K), seed + 2, -0.5f, 0.5f);
  Mat m(be, W, V, K);
  Buf h(be, 3, K, &h0), xn(be, 3, K), lg(be, 1, V);
  Tensor wt = vec(be, w);
  const Tensor hl = h.t.row_slice(2, 1), xl = xn.t.row_slice(2, 1);
  be.rms_norm(hl, wt, xl, 1, K, eps);
  be.linear(xl, m.m, lg.t, 1);
  be.softcap(lg.t, 1, cap);
  auto xref = rms_ref(to_d(h0).data() + 2 * K, K, w.data(), eps);
  auto ref = linear_ref(xref, 1, K, W, V, nullptr);
  for (auto& r : ref) r = cap * std::tanh(r / cap);
  EXPECT_LT(rel(lg.get(), ref), 2e-6);
  EXPECT_LT(rel(Buf::get_view(be, xl, 1), xref), 1e-6);
  be.free(wt);
}

void fused_suite(Backend& be) {
  for (int64_t T : {1, 3}) {
    sandwich_case(be, T, 640, 1536, 10 + T);
    gated_case(be, T, 2048, 1000, Activation::silu, 20 + T);
    gated_case(be, T, 64, 160, Activation::gelu_tanh, 30 + T);
  }
  head_case(be, 640, 5003, 30.0f, 40);
}

TEST(CudaEngineOps, FusedSequences) {
  NEED_CUDA(be);
  fused_suite(*be);
}
TEST(CudaEngineOps, FusedSequencesWithFusionOff) {
  NEED_CUDA(be, "0");
  fused_suite(*be);
}

// Residual ping-pong (cuda_backend.cpp, run()): two in-place residual updates, each the prologue of a fused GEMV,
// with an op between them that does not touch h. The first GEMV writes h to the backend's shadow buffer, the second
// reads the shadow and writes h home (stats: one redirect, no copy). Variants: an op on h between the updates
// (softcap: no redirect), a flush between them (a download: no redirect), and a second update that cannot fuse (its
// norm is per half row: redirect, then a copy home before it runs). T = 3 uses a strided h (a column slice of a
// wider buffer whose other half must survive). With fusion off nothing is redirected.
void residual_chain_case(Backend& be, int64_t T, int between, bool fused, uint64_t seed) {
  SCOPED_TRACE("residual chain T=" + std::to_string(T) + " between=" + std::to_string(between));
  const float eps = 1e-6f, cap = 2.0f;
  const int64_t K = 640, N1 = 96, N2 = 200, G2 = between == 3 ? K / 2 : K;  // G2: the second norm's group
  const bool strided = T > 1;
  auto h0 = rnd(size_t(T * K), seed), d1 = rnd(size_t(T * K), seed + 1, -3, 3);
  auto pw1 = rnd(size_t(K), seed + 2, 0.5f, 1.5f), w1 = rnd(size_t(K), seed + 3, 0.5f, 1.5f);
  auto pw2 = rnd(size_t(K), seed + 4, 0.5f, 1.5f), w2 = rnd(size_t(G2), seed + 5, 0.5f, 1.5f);
  auto W1 = rnd(size_t(N1 * K), seed + 6, -0.3f, 0.3f), Wd = rnd(size_t(K * N1), seed + 7, -0.3f, 0.3f);
  auto W2 = rnd(size_t(N2 * K), seed + 8, -0.3f, 0.3f);
  // h: [T, K] of a [T, 2K] buffer when strided (the right half holds other data that must not change)
  std::vector<float> wide(size_t(T * 2 * K));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < 2 * K; ++k) wide[size_t(t * 2 * K + k)] = k < K ? h0[size_t(t * K + k)] : float(t * 1000 + k);
  Mat m1(be, W1, N1, K), md(be, Wd, K, N1), m2(be, W2, N2, K);
  Buf hbuf(be, T, strided ? 2 * K : K, strided ? &wide : &h0);
  const Tensor h = strided ? hbuf.t.col_slice(0, K) : hbuf.t;
  Buf db(be, T, K, &d1), xn(be, T, K), y1(be, T, N1), d2(be, T, K), y2(be, T, N2);
  Tensor pw1t = vec(be, pw1), w1t = vec(be, w1), pw2t = vec(be, pw2), w2t = vec(be, w2);

  // f64 reference of the same chain
  std::vector<double> href(size_t(T * K)), x1, x2;
  for (int64_t t = 0; t < T; ++t) {
    auto dn = rms_ref(to_d(d1).data() + t * K, K, pw1.data(), eps);
    for (int64_t k = 0; k < K; ++k) href[size_t(t * K + k)] = h0[size_t(t * K + k)] + dn[size_t(k)];
    auto a = rms_ref(href.data() + t * K, K, w1.data(), eps);
    x1.insert(x1.end(), a.begin(), a.end());
  }
  const std::vector<double> h_mid = href;
  const auto y1ref = linear_ref(x1, T, K, W1, N1, nullptr);
  const auto d2ref = linear_ref(y1ref, T, N1, Wd, K, nullptr);
  if (between == 1)
    for (auto& v : href) v = cap * std::tanh(v / cap);
  for (int64_t t = 0; t < T; ++t) {
    auto dn = rms_ref(d2ref.data() + t * K, K, pw2.data(), eps);
    for (int64_t k = 0; k < K; ++k) href[size_t(t * K + k)] += dn[size_t(k)];
    for (int64_t c = 0; c < K; c += G2) {
      auto a = rms_ref(href.data() + t * K + c, G2, w2.data(), eps);
      x2.insert(x2.end(), a.begin(), a.end());
    }
  }
  const auto y2ref = linear_ref(x2, T, K, W2, N2, nullptr);

  const Backend::Stats s0 = be.stats();
  be.add_rms_norm(db.t, pw1t, h, T, eps);
  be.rms_norm(h, w1t, xn.t, T, K, eps);
  be.linear(xn.t, m1.m, y1.t, T);
  be.linear(y1.t, md.m, d2.t, T);  // does not touch h
  if (between == 1) be.softcap(h, T, cap);
  if (between == 2) EXPECT_LT(rel(Buf::get_view(be, h, T), h_mid), 1e-5) << "h between the updates";
  be.add_rms_norm(d2.t, pw2t, h, T, eps);
  be.rms_norm(h, w2t, xn.t, T, G2, eps);
  be.linear(xn.t, m2.m, y2.t, T);

  EXPECT_LT(rel(y1.get(), y1ref), 2e-6);
  EXPECT_LT(rel(d2.get(), d2ref), 1e-5);
  EXPECT_LT(rel(Buf::get_view(be, h, T), href), 1e-5);
  EXPECT_LT(rel(xn.get(), x2), 1e-5);
  EXPECT_LT(rel(y2.get(), y2ref), 1e-5);
  if (strided) {
    const auto all = hbuf.get();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = K; k < 2 * K; ++k)
        ASSERT_EQ(all[size_t(t * 2 * K + k)], float(t * 1000 + k)) << "the other half of h's rows, row " << t;
  }
  const Backend::Stats s1 = be.stats();
  const bool redirect = fused && (between == 0 || between == 3);
  EXPECT_EQ(s1.residual_redirects - s0.residual_redirects, redirect ? 1u : 0u);
  EXPECT_EQ(s1.residual_copies - s0.residual_copies, redirect && between == 3 ? 1u : 0u);
  for (Tensor t : {pw1t, w1t, pw2t, w2t}) be.free(t);
}

TEST(CudaEngineOps, ResidualPingPong) {
  for (const char* fuse : {"1", "0"}) {
    SCOPED_TRACE(std::string("Tuning::cuda_fuse = ") + fuse);
    NEED_CUDA(be, fuse);
    for (int64_t T : {1, 3})
      for (int between : {0, 1, 2, 3})
        residual_chain_case(*be, T, between, fuse[0] == '1', 50 + uint64_t(T * 10 + between));
  }
}

// ================================================================ small ops
TEST(CudaEngineOps, SmallOps) {
  NEED_CUDA(be);
  be->reserve_step(8);
  // embed (bf16 table), three tokens
  {
    const int64_t V = 300, C = 72;
    auto tab = rnd(size_t(V * C), 1);
    Mat m(*be, tab, V, C, nullptr, true);
    Buf out(*be, 3, C);
    const std::vector<int32_t> tok = {5, 299, 0};
    be->set_step(tok, 11);
    be->embed(m.m, out.t, 3, 8.5f);
    std::vector<double> ref;
    for (int32_t t : tok)
      for (int64_t c = 0; c < C; ++c) ref.push_back(double(bfr(tab[size_t(t * C + c)])) * 8.5);
    EXPECT_LT(rel(out.get(), ref), 1e-7);
  }
  // rms_norm per head (out of place), add, softcap, gated_act, rope
  {
    const int64_t T = 3, H = 4, D = 64, C = H * D;
    auto x = rnd(size_t(T * C), 2, -2, 2), y0 = rnd(size_t(T * C), 3), w = rnd(size_t(D), 4, 0.5f, 1.5f);
    Buf xb(*be, T, C, &x), out(*be, T, C), yb(*be, T, C, &y0);
    Tensor wt = vec(*be, w);
    be->rms_norm(xb.t, wt, out.t, T, D, 1e-6f);
    std::vector<double> ref;
    for (int64_t r = 0; r < T * H; ++r) {
      auto v = rms_ref(to_d(x).data() + r * D, D, w.data(), 1e-6);
      ref.insert(ref.end(), v.begin(), v.end());
    }
    EXPECT_LT(rel(out.get(), ref), 1e-6) << "rms_norm per head";
    be->add(xb.t, yb.t, T);
    std::vector<double> aref(size_t(T * C));
    for (size_t i = 0; i < aref.size(); ++i) aref[i] = double(x[i]) + y0[i];
    EXPECT_LT(rel(yb.get(), aref), 1e-7) << "add";
    be->softcap(yb.t, T, 2.5f);
    for (auto& a : aref) a = 2.5 * std::tanh(a / 2.5);
    EXPECT_LT(rel(yb.get(), aref), 1e-6) << "softcap";
    Buf g(*be, T, C / 2);
    be->gated_act(xb.t, g.t, T, Activation::gelu_tanh);
    std::vector<double> gref;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t f = 0; f < C / 2; ++f)
        gref.push_back(gelu_ref(x[size_t(t * C + f)]) * x[size_t(t * C + C / 2 + f)]);
    EXPECT_LT(rel(g.get(), gref), 1e-6) << "gated_act";
    auto inv = inv_freq(D, 10000.0);
    Tensor it = vec(*be, inv);
    be->set_step(std::vector<int32_t>{1, 2, 3}, 7);
    be->rope(xb.t, T, H, D, it, 0.75f);
    auto rref = to_d(x);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t hh = 0; hh < H; ++hh) rope_ref(rref.data() + t * C + hh * D, D, double(7 + t), inv, 0.75);
    EXPECT_LT(rel(xb.get(), rref), 1e-6) << "rope";
    be->free(wt);
    be->free(it);
  }
}

// ================================================================ attention
struct AttnCase {
  int64_t H, KVH, D, cap;
  bool ring;
  int64_t window, P, T;
  float softcap;
  bool qk_norm, rope;
  bool cache_bf16 = false;  // the model's cache for bf16 weights (kv_dtype); f32 otherwise
  bool act_bf16 = false;    // bf16 q/k/v and output (activation_dtype of a bf16 prefill)
};
std::string name(const AttnCase& c) {
  return "H" + std::to_string(c.H) + "x" + std::to_string(c.KVH) + " D" + std::to_string(c.D) + " cap" +
         std::to_string(c.cap) + (c.ring ? " ring" : "") + " win" + std::to_string(c.window) + " P" +
         std::to_string(c.P) + " T" + std::to_string(c.T) + (c.softcap > 0 ? " cap" : "") +
         (c.cache_bf16 ? " bf16 cache" : "") + (c.act_bf16 ? " bf16 q/k/v/out" : "");
}

// Runs one attention step (with the q/k norms and rope for T == 1, as the model schedules them) and checks the
// output and the cache against an f64 reference.
void attention_case(Backend& be, const AttnCase& c, uint64_t seed) {
  SCOPED_TRACE(name(c));
  const int64_t H = c.H, KVH = c.KVH, D = c.D, T = c.T, qd = H * D, kvd = KVH * D, W = qd + 2 * kvd;
  const float eps = 1e-6f, scale = 1.0f / std::sqrt(float(D)) * 1.1f, rs = 1.0f;
  auto kc0 = rnd(size_t(c.cap * kvd), seed), vc0 = rnd(size_t(c.cap * kvd), seed + 1);
  if (c.cache_bf16) kc0 = bfr(kc0), vc0 = bfr(vc0);  // what a bf16 cache holds
  const DType cdt = c.cache_bf16 ? DType::bf16 : DType::f32;
  auto qkv = rnd(size_t(T * W), seed + 2, -2, 2);
  if (c.act_bf16) qkv = bfr(qkv);  // what the bf16 buffer holds
  const DType adt = c.act_bf16 ? DType::bf16 : DType::f32;
  auto qw = rnd(size_t(D), seed + 3, 0.5f, 1.5f), kw = rnd(size_t(D), seed + 4, 0.5f, 1.5f);
  auto inv = inv_freq(D, 10000.0);
  Buf kc(be, c.cap, kvd, &kc0, cdt), vc(be, c.cap, kvd, &vc0, cdt), qb(be, T, W, &qkv, adt), out(be, T, qd, nullptr, adt);
  Tensor qwt = vec(be, qw), kwt = vec(be, kw), it = vec(be, inv);
  KVLayer kv{kc.t, vc.t, c.cap, c.ring};
  AttentionParams ap{H, KVH, D, scale, c.softcap, c.window};
  const Tensor q = qb.t.col_slice(0, qd), k = qb.t.col_slice(qd, kvd), v = qb.t.col_slice(qd + kvd, kvd);
  be.reserve_step(64);
  be.set_step(std::vector<int32_t>(size_t(T), 0), c.P);
  if (c.qk_norm) {
    be.rms_norm(q, qwt, q, T, D, eps);
    be.rms_norm(k, kwt, k, T, D, eps);
  }
  if (c.rope) {
    be.rope(q, T, H, D, it, rs);
    be.rope(k, T, KVH, D, it, rs);
  }
  be.attention(q, k, v, kv, out.t, T, ap);
  const auto got = out.get();
  const auto kgot = kc.get(), vgot = vc.get();

  // reference: processed new rows
  std::vector<double> qn(size_t(T * qd)), kn(size_t(T * kvd)), vn(size_t(T * kvd));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < qd; ++i) qn[size_t(t * qd + i)] = qkv[size_t(t * W + i)];
    for (int64_t i = 0; i < kvd; ++i) kn[size_t(t * kvd + i)] = qkv[size_t(t * W + qd + i)];
    for (int64_t i = 0; i < kvd; ++i) vn[size_t(t * kvd + i)] = qkv[size_t(t * W + qd + kvd + i)];
    for (int64_t h = 0; h < H; ++h) {
      double* x = qn.data() + t * qd + h * D;
      if (c.qk_norm) {
        auto y = rms_ref(x, D, qw.data(), eps);
        std::copy(y.begin(), y.end(), x);
      }
      if (c.rope) rope_ref(x, D, double(c.P + t), inv, rs);
    }
    for (int64_t h = 0; h < KVH; ++h) {
      double* x = kn.data() + t * kvd + h * D;
      if (c.qk_norm) {
        auto y = rms_ref(x, D, kw.data(), eps);
        std::copy(y.begin(), y.end(), x);
      }
      if (c.rope) rope_ref(x, D, double(c.P + t), inv, rs);
    }
  }
  if (c.cache_bf16)  // the new rows are attended as the cache stores them
    for (size_t i = 0; i < kn.size(); ++i) kn[i] = bfr(float(kn[i])), vn[i] = bfr(float(vn[i]));
  auto slot = [&](int64_t j) { return c.ring ? j % c.cap : j; };
  auto key = [&](int64_t j, int64_t i) -> double {
    return j >= c.P ? kn[size_t((j - c.P) * kvd + i)] : kc0[size_t(slot(j) * kvd + i)];
  };
  auto val = [&](int64_t j, int64_t i) -> double {
    return j >= c.P ? vn[size_t((j - c.P) * kvd + i)] : vc0[size_t(slot(j) * kvd + i)];
  };
  std::vector<double> ref(size_t(T * qd));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = c.P + t;
    int64_t lo = 0;
    if (c.window > 0) lo = std::max<int64_t>(lo, p - c.window + 1);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / KVH);
      std::vector<double> s;
      double mx = -INFINITY;
      for (int64_t j = lo; j <= p; ++j) {
        double d = 0;
        for (int64_t i = 0; i < D; ++i) d += qn[size_t(t * qd + h * D + i)] * key(j, g * D + i);
        d *= scale;
        if (c.softcap > 0) d = c.softcap * std::tanh(d / c.softcap);
        s.push_back(d);
        mx = std::max(mx, d);
      }
      double den = 0;
      for (auto& x : s) den += (x = std::exp(x - mx));
      for (int64_t i = 0; i < D; ++i) {
        double o = 0;
        for (int64_t j = lo; j <= p; ++j) o += s[size_t(j - lo)] * val(j, g * D + i);
        ref[size_t(t * qd + h * D + i)] = o / den;
      }
    }
  }
  // T == 1 keeps f32 math end to end (f32 cache; a bf16 cache may round a new element one ulp apart from the
  // f64 reference; a bf16 output is rounded once, ~2^-9 relative); T > 1 runs flash attention in bf16.
  EXPECT_LT(rel(got, ref), T == 1 ? (c.act_bf16 ? 1e-2 : c.cache_bf16 ? 1e-3 : 1e-5) : 2e-2);
  // cache rows of the new positions (the last `cap` of them for a ring); all other rows untouched
  std::vector<bool> written(size_t(c.cap), false);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = c.P + t;
    if (c.ring && t < T - c.cap) continue;
    const int64_t r = slot(p);
    written[size_t(r)] = true;
    for (int64_t i = 0; i < kvd; ++i) {
      // one bf16 ulp (a bf16 cache, or k normed and rotated in place in a bf16 buffer: T > 1 runs them unfused)
      const double tol = c.cache_bf16 || c.act_bf16 ? 8e-3 : 1e-4;
      EXPECT_NEAR(kgot[size_t(r * kvd + i)], kn[size_t(t * kvd + i)], tol * (1 + std::fabs(kn[size_t(t * kvd + i)])))
          << "k row of position " << p;
      EXPECT_NEAR(vgot[size_t(r * kvd + i)], vn[size_t(t * kvd + i)], c.cache_bf16 ? tol * (1 + std::fabs(vn[size_t(t * kvd + i)])) : 1e-6)
          << "v row of position " << p;
      if (::testing::Test::HasFailure()) return;
    }
  }
  for (int64_t r = 0; r < c.cap; ++r)
    if (!written[size_t(r)])
      for (int64_t i = 0; i < kvd; ++i) ASSERT_EQ(kgot[size_t(r * kvd + i)], kc0[size_t(r * kvd + i)]) << "row " << r;
  be.free(qwt);
  be.free(kwt);
  be.free(it);
}

TEST(CudaEngineOps, DecodeAttention) {
  NEED_CUDA(be);
  const AttnCase cases[] = {
      {4, 1, 256, 512, false, 0, 383, 1, 0.0f, true, true},     // gemma-3-270m global layer
      {4, 1, 256, 512, true, 512, 700, 1, 0.0f, true, true},    // its sliding layer, ring wrapped
      {32, 8, 64, 2048, false, 0, 1000, 1, 0.0f, false, true},  // llama-3.2-1b
      {4, 2, 16, 8, true, 8, 20, 1, 50.0f, true, true},         // tiny ring with softcap
      {4, 2, 40, 64, false, 0, 0, 1, 0.0f, false, false},       // first token, head_dim 40
      {8, 8, 128, 300, false, 16, 200, 1, 0.0f, false, true},   // window on a linear cache
      {6, 3, 64, 4096, false, 0, 4000, 1, 30.0f, true, false},  // long context, many splits
      {4, 1, 256, 512, true, 512, 700, 1, 0.0f, true, true, true},     // bf16 cache: ring
      {32, 8, 64, 2048, false, 0, 1000, 1, 0.0f, false, true, true},   // bf16 cache: linear
      {4, 1, 256, 512, true, 512, 700, 1, 0.0f, true, true, true, true},    // bf16 q/k/v/out, bf16 cache
      {32, 8, 64, 2048, false, 0, 1000, 1, 0.0f, false, true, false, true},  // bf16 q/k/v/out, f32 cache
      // short contexts (1, 7, 100, 257 keys): one split, then a few of the grid's (a cluster's idle blocks on sm_90)
      {4, 1, 256, 512, true, 512, 0, 1, 0.0f, true, true, true},
      {4, 1, 256, 512, true, 512, 6, 1, 0.0f, true, true, true},
      {4, 1, 256, 512, true, 512, 99, 1, 0.0f, true, true, true},
      {4, 1, 256, 512, true, 512, 256, 1, 0.0f, true, true, true},
      {4, 1, 256, 4096, false, 0, 99, 1, 0.0f, true, true, true},  // gemma global layer: a 64-split grid
      {32, 8, 64, 2048, false, 0, 256, 1, 0.0f, false, true, true},
  };
  uint64_t seed = 100;
  for (const auto& c : cases) attention_case(*be, c, seed += 10);
}
TEST(CudaEngineOps, DecodeAttentionUnfused) {
  NEED_CUDA(be, "0");
  attention_case(*be, {4, 1, 256, 512, true, 512, 700, 1, 0.0f, true, true}, 7);
  attention_case(*be, {32, 8, 64, 2048, false, 0, 1000, 1, 0.0f, false, true}, 8);
  attention_case(*be, {4, 1, 256, 512, true, 512, 700, 1, 0.0f, true, true, true, true}, 9);
}

// The fused decode attention under attention.hpp's contract B: a NaN in one head's q makes that head's output all
// NaN (it was o = 0: the lane-group merge tested `L > 0`) and leaves the other heads bitwise as without it; a key
// whose score is -inf weighs 0 (the running max started at -inf, so such a first key gave a NaN row). Short and long
// contexts: one split, several splits (cluster or last-block merge).
void decode_nonfinite_case(Backend& be, int64_t H, int64_t KVH, int64_t D, int64_t cap, int64_t P, uint64_t seed) {
  SCOPED_TRACE("H" + std::to_string(H) + "x" + std::to_string(KVH) + " D" + std::to_string(D) + " P" +
               std::to_string(P));
  const int64_t qd = H * D, kvd = KVH * D, W = qd + 2 * kvd;
  AttentionParams ap{H, KVH, D, 1.0f / std::sqrt(float(D)), 0.0f, 0};
  auto kc0 = rnd(size_t(cap * kvd), seed), vc0 = rnd(size_t(cap * kvd), seed + 1);
  const auto qkv = rnd(size_t(W), seed + 2, -2, 2);
  auto step = [&](const std::vector<float>& row, const std::vector<float>& kinit) {
    Buf kc(be, cap, kvd, &kinit), vc(be, cap, kvd, &vc0), qb(be, 1, W, &row), out(be, 1, qd);
    KVLayer kv{kc.t, vc.t, cap, false};
    be.reserve_step(64);
    be.set_step(std::vector<int32_t>(1, 0), P);
    be.attention(qb.t.col_slice(0, qd), qb.t.col_slice(qd, kvd), qb.t.col_slice(qd + kvd, kvd), kv, out.t, 1, ap);
    return out.get();
  };
  const auto clean = step(qkv, kc0);
  auto bad = qkv;
  const int64_t nan_head = H - 1;
  bad[size_t(nan_head * D + D / 3)] = std::numeric_limits<float>::quiet_NaN();
  const auto got = step(bad, kc0);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < D; ++i) {
      const float x = got[size_t(h * D + i)];
      if (h == nan_head) ASSERT_TRUE(std::isnan(x)) << "NaN head " << h << " element " << i << " gave " << x;
      else ASSERT_EQ(x, clean[size_t(h * D + i)]) << "head " << h << " element " << i;
    }
  // Key 0 holds k = -inf in element 0 and 0 elsewhere, and head 0's q is positive there: head 0 scores key 0 at -inf,
  // which weighs 0, so head 0 gives the softmax over keys 1..P (f64 reference).
  auto kinit = kc0;
  for (int64_t i = 0; i < kvd; ++i) kinit[size_t(i)] = 0.0f;
  kinit[0] = -std::numeric_limits<float>::infinity();
  auto pos = qkv;
  pos[0] = 1.5f;
  const auto minf = step(pos, kinit);
  const int64_t g = 0;  // head 0's KV head
  std::vector<double> s;
  double mx = -INFINITY;
  for (int64_t j = 1; j <= P; ++j) {
    double d = 0;
    for (int64_t i = 0; i < D; ++i)
      d += double(pos[size_t(i)]) * (j == P ? pos[size_t(qd + g * D + i)] : kinit[size_t(j * kvd + g * D + i)]);
    s.push_back(d * ap.scale);
    mx = std::max(mx, s.back());
  }
  double den = 0;
  for (auto& x : s) den += (x = std::exp(x - mx));
  for (int64_t i = 0; i < D; ++i) {
    double o = 0;
    for (int64_t j = 1; j <= P; ++j) o += s[size_t(j - 1)] * (j == P ? qkv[size_t(qd + kvd + g * D + i)] : vc0[size_t(j * kvd + g * D + i)]);
    EXPECT_NEAR(minf[size_t(i)], o / den, 1e-4 * (1 + std::fabs(o / den))) << "head 0 with a -inf score, element " << i;
  }
}

TEST(CudaEngineOps, DecodeAttentionNonFinite) {
  NEED_CUDA(be);
  decode_nonfinite_case(*be, 4, 2, 64, 64, 9, 501);        // one split
  decode_nonfinite_case(*be, 8, 2, 128, 4096, 3000, 502);  // many splits
  decode_nonfinite_case(*be, 4, 1, 256, 1024, 700, 503);   // gemma's head size
}

TEST(CudaEngineOps, PrefillAttention) {
  NEED_CUDA(be);
  const AttnCase cases[] = {
      {4, 2, 64, 64, false, 0, 0, 37, 0.0f, false, false},   // first chunk
      {4, 2, 64, 64, false, 0, 37, 5, 0.0f, false, false},   // a second, short chunk
      {4, 2, 64, 8, true, 8, 5, 13, 50.0f, false, false},    // ring that wraps inside the chunk
      {4, 2, 64, 8, true, 8, 0, 3, 0.0f, false, false},      // ring, first chunk
      {4, 1, 256, 16, true, 16, 40, 24, 0.0f, true, true},   // gemma-like head, norms and rope unfused (T > 1)
      {8, 2, 16, 100, false, 0, 10, 20, 0.0f, false, true},  // head_dim 16
      {4, 2, 64, 64, false, 0, 37, 5, 0.0f, false, false, true},  // bf16 cache: attends the cache in place
      {4, 2, 64, 8, true, 8, 5, 13, 50.0f, false, false, true},   // bf16 cache: ring
      // bf16 q/k/v/out (a bf16 prefill): q read in place from the qkv buffer, the output written in place
      {4, 2, 64, 64, false, 0, 20, 40, 0.0f, false, false, true, true},
      {4, 2, 64, 8, true, 8, 5, 13, 50.0f, false, false, true, true},
      {4, 1, 256, 16, true, 16, 40, 24, 0.0f, true, true, true, true},
      {8, 2, 16, 100, false, 0, 10, 20, 0.0f, false, true, false, true},  // f32 cache, head_dim 16
      {4, 2, 64, 16, true, 16, 3, 9, 0.0f, false, true, true, true},      // bf16 ring not yet wrapped: in place
  };
  uint64_t seed = 500;
  for (const auto& c : cases) attention_case(*be, c, seed += 10);
}

#ifdef FLASHKIT_WITH_CUDA
// ================================================================ decode attention: the two split merges
// The launcher itself (the backend picks one split count per layer and the merge from the environment). Each case
// runs once per merge (global memory; a thread-block cluster where the device runs one), captured once in a graph
// and replayed over positions that walk through one split (no merge), a few splits (idle blocks in the cluster),
// the cluster's full width and, for grids wider than a cluster, the global merge, sometimes going back. Every
// replay gets fresh q/k/v and a NaN-poisoned output and is checked against an f64 reference over what the cache
// holds; the two merges are checked against each other; at the end the whole cache against the rows written.
namespace kc = flashkit::engine::cuda;

struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) p = nullptr;
  }
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  DevBuf(const DevBuf&) = delete;
};
void put(void* dst, const std::vector<float>& v, bool bf16) {
  if (bf16) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
    ASSERT_EQ(cudaMemcpy(dst, h.data(), h.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  } else {
    ASSERT_EQ(cudaMemcpy(dst, v.data(), v.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  }
}
std::vector<float> take(const void* src, size_t n, bool bf16) {
  std::vector<float> v(n);
  if (bf16) {
    std::vector<uint16_t> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), src, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < n; ++i) v[i] = bf16_to_f32(h[i]);
  } else {
    EXPECT_EQ(cudaMemcpy(v.data(), src, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return v;
}

struct MergeCase {
  int H, KVH, D;
  int64_t cap;
  bool ring;
  int64_t window;
  int splits;
  bool cache_bf16, io_bf16, norm_rope;
  float softcap;
  std::vector<int64_t> positions;
};

// The outputs of every replay of one case under one merge.
std::vector<std::vector<float>> merge_case(const MergeCase& c, kc::DecodeMerge merge, uint64_t seed) {
  const int64_t H = c.H, KVH = c.KVH, D = c.D, qd = H * D, kvd = KVH * D;
  const float eps = 1e-6f, scale = 1.1f / std::sqrt(float(D));
  const size_t esz = c.cache_bf16 ? 2 : 4, isz = c.io_bf16 ? 2 : 4;
  std::vector<float> kmir = rnd(size_t(c.cap * kvd), seed), vmir = rnd(size_t(c.cap * kvd), seed + 1);
  if (c.cache_bf16) kmir = bfr(kmir), vmir = bfr(vmir);
  const auto qw = rnd(size_t(D), seed + 2, 0.5f, 1.5f), kw = rnd(size_t(D), seed + 3, 0.5f, 1.5f);
  const auto inv = inv_freq(D, 10000.0);
  const int splits = c.splits;
  DevBuf kcache(size_t(c.cap * kvd) * esz), vcache(size_t(c.cap * kvd) * esz), q(size_t(qd) * isz),
      k(size_t(kvd) * isz), v(size_t(kvd) * isz), out(size_t(qd) * isz), pos(4), qwd(size_t(D) * 4),
      kwd(size_t(D) * 4), invd(size_t(D) * 2), part(size_t(kc::decode_attention_part_floats(c.H, c.D, splits)) * 4),
      counters(size_t(H) * 4);
  for (const DevBuf* b : {&kcache, &vcache, &q, &k, &v, &out, &pos, &qwd, &kwd, &invd, &part, &counters})
    if (!b->p) {
      ADD_FAILURE() << "cudaMalloc";
      return {};
    }
  put(kcache.p, kmir, c.cache_bf16);
  put(vcache.p, vmir, c.cache_bf16);
  put(qwd.p, qw, false);
  put(kwd.p, kw, false);
  put(invd.p, inv, false);
  EXPECT_EQ(cudaMemset(counters.p, 0, size_t(H) * 4), cudaSuccess);

  kc::DecodeAttnArgs a;
  a.q = q.p, a.k = k.p, a.v = v.p, a.in_bf16 = c.io_bf16;
  if (c.norm_rope) {
    a.q_norm_w = static_cast<const float*>(qwd.p), a.k_norm_w = static_cast<const float*>(kwd.p), a.eps = eps;
    a.inv_freq = static_cast<const float*>(invd.p), a.attn_scaling = 1.0f;
  }
  a.k_cache = kcache.p, a.v_cache = vcache.p, a.cache_bf16 = c.cache_bf16;
  a.capacity = c.cap, a.ring = c.ring, a.window = c.window;
  a.pos0 = static_cast<const int32_t*>(pos.p);
  a.scale = scale, a.softcap = c.softcap;
  a.out = out.p, a.out_bf16 = c.io_bf16;
  a.heads = c.H, a.kv_heads = c.KVH, a.head_dim = c.D;
  a.splits = splits;
  a.part = static_cast<float*>(part.p);
  a.counters = static_cast<unsigned*>(counters.p);
  a.merge = merge;
  const int csize = kc::decode_attention_cluster_size(a);
  std::printf("[ decode attention ] H%dx%d D%d splits %d, %s merge: cluster size %d\n", c.H, c.KVH, c.D, splits,
              merge == kc::DecodeMerge::cluster ? "cluster" : "global", csize);
  if (merge == kc::DecodeMerge::global) EXPECT_EQ(csize, 1);
  int dev = 0, major = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (merge == kc::DecodeMerge::cluster && major == 9 && splits > 1)
    EXPECT_GT(csize, 1) << "no cluster on an sm_90 device (a build without sm_90a code?)";

  cudaStream_t st = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  try {
    kc::decode_attention(a, st);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "decode_attention: " << e.what();
  }
  EXPECT_EQ(cudaStreamEndCapture(st, &graph), cudaSuccess);
  EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  const int lpk = D <= 16 ? 2 : D <= 32 ? 4 : D <= 64 ? 8 : D <= 128 ? 16 : 32;  // the kernel's keys per block step
  const int64_t min_keys = 1024 / lpk;
  std::vector<std::vector<float>> outs;
  for (size_t step = 0; step < c.positions.size(); ++step) {
    const int64_t p = c.positions[step];
    int64_t lo = 0;
    if (c.window > 0) lo = std::max<int64_t>(lo, p - c.window + 1);
    if (c.ring) lo = std::max<int64_t>(lo, p - c.cap + 1);
    const int64_t n = p - lo + 1;
    const int used = int(std::min<int64_t>(splits, (n + min_keys - 1) / min_keys));
    SCOPED_TRACE("p=" + std::to_string(p) + " keys=" + std::to_string(n) + " splits used " + std::to_string(used) +
                 (used == 1 ? " (no merge)" : used <= csize ? " (cluster merge)" : " (global merge)"));
    const uint64_t s2 = seed + 100 * (step + 1);
    auto qh = rnd(size_t(qd), s2, -2, 2), kh = rnd(size_t(kvd), s2 + 1, -2, 2), vh = rnd(size_t(kvd), s2 + 2, -2, 2);
    if (c.io_bf16) qh = bfr(qh), kh = bfr(kh), vh = bfr(vh);
    put(q.p, qh, c.io_bf16);
    put(k.p, kh, c.io_bf16);
    put(v.p, vh, c.io_bf16);
    const int32_t p32 = int32_t(p);
    EXPECT_EQ(cudaMemcpy(pos.p, &p32, 4, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemset(out.p, 0xff, size_t(qd) * isz), cudaSuccess);  // NaN: every element must be written
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the copies above ran on the legacy stream
    EXPECT_EQ(cudaGraphLaunch(exec, st), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    const auto got = take(out.p, size_t(qd), c.io_bf16);

    // reference: the processed query and new row, then attention over the mirror of the cache
    std::vector<double> qn(qh.begin(), qh.end()), kn(kh.begin(), kh.end()), vn(vh.begin(), vh.end());
    if (c.norm_rope) {
      for (int64_t h = 0; h < H; ++h) {
        auto y = rms_ref(qn.data() + h * D, D, qw.data(), eps);
        std::copy(y.begin(), y.end(), qn.begin() + h * D);
        rope_ref(qn.data() + h * D, D, double(p), inv, 1.0);
      }
      for (int64_t h = 0; h < KVH; ++h) {
        auto y = rms_ref(kn.data() + h * D, D, kw.data(), eps);
        std::copy(y.begin(), y.end(), kn.begin() + h * D);
        rope_ref(kn.data() + h * D, D, double(p), inv, 1.0);
      }
    }
    if (c.cache_bf16)
      for (size_t i = 0; i < kn.size(); ++i) kn[i] = bfr(float(kn[i])), vn[i] = bfr(float(vn[i]));
    const int64_t slot = c.ring ? p % c.cap : p;
    auto row = [&](int64_t j) { return (c.ring ? j % c.cap : j) * kvd; };
    auto key = [&](int64_t j, int64_t i) -> double { return j == p ? kn[size_t(i)] : kmir[size_t(row(j) + i)]; };
    auto val = [&](int64_t j, int64_t i) -> double { return j == p ? vn[size_t(i)] : vmir[size_t(row(j) + i)]; };
    std::vector<double> ref(static_cast<size_t>(qd));
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / KVH);
      std::vector<double> w(static_cast<size_t>(n));
      double mx = -INFINITY;
      for (int64_t j = lo; j <= p; ++j) {
        double d = 0;
        for (int64_t i = 0; i < D; ++i) d += qn[size_t(h * D + i)] * key(j, g * D + i);
        d *= scale;
        if (c.softcap > 0) d = c.softcap * std::tanh(d / c.softcap);
        w[size_t(j - lo)] = d;
        mx = std::max(mx, d);
      }
      double den = 0;
      for (auto& x : w) den += (x = std::exp(x - mx));
      for (int64_t i = 0; i < D; ++i) {
        double o = 0;
        for (int64_t j = lo; j <= p; ++j) o += w[size_t(j - lo)] * val(j, g * D + i);
        ref[size_t(h * D + i)] = o / den;
      }
    }
    EXPECT_LT(rel(got, ref), c.io_bf16 ? 1e-2 : c.cache_bf16 ? 1e-3 : 1e-5);
    outs.push_back(got);

    // the new row as written; from now on the mirror holds exactly what the cache does
    const auto krow = take(static_cast<const char*>(kcache.p) + size_t(slot * kvd) * esz, size_t(kvd), c.cache_bf16);
    const auto vrow = take(static_cast<const char*>(vcache.p) + size_t(slot * kvd) * esz, size_t(kvd), c.cache_bf16);
    const double tol = c.cache_bf16 ? 8e-3 : 1e-4;
    for (int64_t i = 0; i < kvd; ++i) {
      EXPECT_NEAR(krow[size_t(i)], kn[size_t(i)], tol * (1 + std::fabs(kn[size_t(i)]))) << "k row, element " << i;
      EXPECT_NEAR(vrow[size_t(i)], vn[size_t(i)], tol * (1 + std::fabs(vn[size_t(i)]))) << "v row, element " << i;
      if (::testing::Test::HasFailure()) break;
    }
    std::copy(krow.begin(), krow.end(), kmir.begin() + slot * kvd);
    std::copy(vrow.begin(), vrow.end(), vmir.begin() + slot * kvd);
    if (::testing::Test::HasFailure()) break;
  }
  // no other cache row was touched; the arrival counters are back at zero
  EXPECT_EQ(take(kcache.p, size_t(c.cap * kvd), c.cache_bf16), kmir) << "k cache";
  EXPECT_EQ(take(vcache.p, size_t(c.cap * kvd), c.cache_bf16), vmir) << "v cache";
  std::vector<uint32_t> cnt(size_t(H), 1u);
  EXPECT_EQ(cudaMemcpy(cnt.data(), counters.p, size_t(H) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cnt, std::vector<uint32_t>(size_t(H), 0u)) << "arrival counters";
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  if (st) cudaStreamDestroy(st);
  return outs;
}

TEST(CudaEngineOps, DecodeAttentionMerges) {
  if (cuda_device_count() <= 0) GTEST_SKIP() << "no CUDA device";
  // Keys per split at least 1024 / lanes-per-key (32 at head_dim 256, 64 at 128, 128 at 64 and 40, 512 at 8), so
  // the positions below use 1, a few, or all of each grid's splits.
  const MergeCase cases[] = {
      // gemma-3-270m sliding layer (ring of 512, bf16 cache, norms + RoPE): 1, 1, 4, 9, 16, 16, 16 splits
      {4, 1, 256, 512, true, 512, 16, true, false, true, 0.0f, {0, 6, 99, 256, 511, 999, 1000}},
      // its global layer at short contexts: a 64-split grid, so the merge changes with the context (a cluster up
      // to 16 splits, the global merge past that) and back: 1, 4, 9, 16, 17, 32, 47, 8 splits
      {4, 1, 256, 2048, false, 0, 64, false, false, true, 0.0f, {0, 99, 256, 511, 512, 999, 1500, 255}},
      // Llama-3.2-1B (32 / 8 heads, d64): 1, 1, 1, 3, 8, 8 splits; then with a bf16 cache and bf16 q/k/v/out
      {32, 8, 64, 4096, false, 0, 8, false, false, false, 0.0f, {0, 6, 99, 256, 999, 3999}},
      {32, 8, 64, 2048, false, 0, 8, true, true, true, 0.0f, {300, 1000, 2047}},
      // 5 splits in a cluster of 8 (three blocks past the grid's splits), softcap, bf16 q/k/v/out
      {6, 3, 64, 1024, false, 0, 5, false, true, false, 30.0f, {0, 200, 700}},
      // 12 splits in a cluster of 16 (or the global merge where only 8 fit), a window on a linear cache: 1, 5, 11, 12
      {8, 8, 128, 1024, false, 800, 12, false, false, true, 0.0f, {10, 299, 700, 1000}},
      // 20 splits: a cluster of 16 for 10 and 4, the global merge (with blocks past the splits) for 19 and 20
      {2, 1, 256, 1024, false, 0, 20, false, false, false, 0.0f, {300, 600, 700, 100}},
      // head_dim 40 (8 lanes per key, 3 idle) on a wrapped ring with softcap; head_dim 8 (the 2-lane variant)
      {4, 2, 40, 1024, true, 0, 8, false, false, true, 50.0f, {300, 900, 1500}},
      {4, 4, 8, 8192, false, 0, 4, false, false, false, 0.0f, {600, 2000}},
  };
  uint64_t seed = 3000;
  for (const auto& c : cases) {
    SCOPED_TRACE("H" + std::to_string(c.H) + "x" + std::to_string(c.KVH) + " D" + std::to_string(c.D) + " cap" +
                 std::to_string(c.cap) + (c.ring ? " ring" : "") + " win" + std::to_string(c.window) + " splits " +
                 std::to_string(c.splits) + (c.cache_bf16 ? " bf16 cache" : "") + (c.io_bf16 ? " bf16 q/k/v/out" : ""));
    seed += 1000;
    std::vector<std::vector<float>> g, cl;
    {
      SCOPED_TRACE("global merge");
      g = merge_case(c, kc::DecodeMerge::global, seed);
    }
    {
      SCOPED_TRACE("cluster merge");
      cl = merge_case(c, kc::DecodeMerge::cluster, seed);  // same inputs step by step
    }
    if (::testing::Test::HasFailure()) return;
    ASSERT_EQ(g.size(), cl.size());
    for (size_t s = 0; s < g.size(); ++s)
      EXPECT_LT(rel(cl[s], to_d(g[s])), c.io_bf16 ? 8e-3 : 1e-5)
          << "cluster vs global merge, position " << c.positions[s];
  }
}

// The automatic merge choice on Hopper: clusters for few heads (gemma-3-270m: 4 heads, 16 splits), the global merge
// for many (Llama-3.2-1B: 32 heads in clusters of 8 measured slower).
TEST(CudaEngineOps, DecodeAttentionClusterChoice) {
  if (cuda_device_count() <= 0) GTEST_SKIP() << "no CUDA device";
  int dev = 0, major = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (major != 9) GTEST_SKIP() << "clusters are chosen on sm_90 only";
  kc::DecodeAttnArgs a;
  a.merge = kc::DecodeMerge::automatic;
  a.heads = 4, a.kv_heads = 1, a.head_dim = 256, a.splits = 16;
  EXPECT_GT(kc::decode_attention_cluster_size(a), 1) << "gemma-3-270m's shape";
  a.heads = 32, a.kv_heads = 8, a.head_dim = 64, a.splits = 8;
  EXPECT_EQ(kc::decode_attention_cluster_size(a), 1) << "Llama-3.2-1B's shape";
}
#endif  // FLASHKIT_WITH_CUDA

// ================================================================ a captured decode step
// embed -> norm -> qkv -> q/k norms, rope -> attention (ring) -> o-proj -> sandwich norm -> gate/up -> down -> add,
// six decode steps through graph_begin / graph_end / graph_replay; compared with the same ops run eagerly (graphs
// off) and on the CPU backend (bf16 weights there too).
std::vector<std::vector<float>> run_steps(Backend& be, int steps) {
  const int64_t V = 97, C = 64, H = 4, KVH = 2, D = 16, F = 96, qd = H * D, kvd = KVH * D;
  const float eps = 1e-6f;
  auto wv = [&](int64_t n, uint64_t s) { return rnd(size_t(n), s, 0.5f, 1.5f); };
  Mat emb(be, rnd(size_t(V * C), 1), V, C, nullptr, true);
  Mat wqkv(be, rnd(size_t((qd + 2 * kvd) * C), 2, -0.3f, 0.3f), qd + 2 * kvd, C, nullptr, true);
  Mat wo(be, rnd(size_t(C * qd), 3, -0.3f, 0.3f), C, qd, nullptr, true);
  Mat wgu(be, rnd(size_t(2 * F * C), 4, -0.3f, 0.3f), 2 * F, C, nullptr, true);
  Mat wd(be, rnd(size_t(C * F), 5, -0.3f, 0.3f), C, F, nullptr, true);
  Tensor n1 = vec(be, wv(C, 6)), n2 = vec(be, wv(C, 7)), n3 = vec(be, wv(C, 8)), qn = vec(be, wv(D, 9)),
         kn = vec(be, wv(D, 10)), inv = vec(be, inv_freq(D, 10000.0));
  const std::vector<float> z(size_t(8 * kvd), 0.0f);
  Buf h(be, 1, C), xn(be, 1, C), qkv(be, 1, qd + 2 * kvd), attn(be, 1, qd), o(be, 1, C), gu(be, 1, 2 * F),
      act(be, 1, F), kc(be, 8, kvd, &z), vc(be, 8, kvd, &z);
  KVLayer kv{kc.t, vc.t, 8, true};
  AttentionParams ap{H, KVH, D, 0.25f, 20.0f, 8};
  const Tensor q = qkv.t.col_slice(0, qd), k = qkv.t.col_slice(qd, kvd), v = qkv.t.col_slice(qd + kvd, kvd);
  be.reserve_step(4);
  std::vector<std::vector<float>> outs;
  for (int s = 0; s < steps; ++s) {
    const int32_t tok = int32_t((s * 37 + 11) % V);
    be.set_step(std::span<const int32_t>(&tok, 1), s);
    if (!be.graph_replay(42)) {
      be.graph_begin(42);
      be.embed(emb.m, h.t, 1, 8.0f);
      be.rms_norm(h.t, n1, xn.t, 1, C, eps);
      be.linear(xn.t, wqkv.m, qkv.t, 1);
      be.rms_norm(q, qn, q, 1, D, eps);
      be.rms_norm(k, kn, k, 1, D, eps);
      be.rope(q, 1, H, D, inv, 1.0f);
      be.rope(k, 1, KVH, D, inv, 1.0f);
      be.attention(q, k, v, kv, attn.t, 1, ap);
      be.linear(attn.t, wo.m, o.t, 1);
      be.add_rms_norm(o.t, n2, h.t, 1, eps);
      be.rms_norm(h.t, n3, xn.t, 1, C, eps);
      be.linear(xn.t, wgu.m, gu.t, 1);
      be.gated_act(gu.t, act.t, 1, Activation::gelu_tanh);
      be.linear(act.t, wd.m, o.t, 1);
      be.add(o.t, h.t, 1);
      be.graph_end(42);
    }
    outs.push_back(h.get());
  }
  be.graph_forget_all();
  for (Tensor* t : {&n1, &n2, &n3, &qn, &kn, &inv}) be.free(*t);
  return outs;
}

TEST(CudaEngineOps, GraphReplayMatchesEagerAndCpu) {
  NEED_CUDA(be);
  auto eager = cuda_backend("1", "0");
  ASSERT_TRUE(eager);
  BackendOptions co;
  co.weight_dtype = DType::bf16;
  auto cpu = make_cpu_backend(co);
  const int steps = 12;  // the ring of 8 wraps
  auto g = run_steps(*be, steps), e = run_steps(*eager, steps), c = run_steps(*cpu, steps);
  for (int s = 0; s < steps; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    EXPECT_LT(rel(g[size_t(s)], to_d(e[size_t(s)])), 1e-6) << "graph vs eager";
    EXPECT_LT(rel(g[size_t(s)], to_d(c[size_t(s)])), 1e-4) << "cuda vs cpu backend";
  }
}

// ================================================================ bf16 intermediates (activation_dtype bf16)
// A bf16 prefill's ops: rms_norm from the f32 residual into a bf16 row, linear from bf16 x into bf16 (qkv, gate|up)
// or f32 (o, down) outputs through cuBLAS (T > 8) and the GEMV (T <= 8), per-head norms and RoPE in place in bf16,
// the gated activation in bf16. References in f64 from the bf16-rounded inputs; a bf16 output is one rounding away
// (~2^-9 relative per element), hence 4e-3 on the norm of the error; f32 outputs keep the f32 bounds.
TEST(CudaEngineOps, Bf16Intermediates) {
  NEED_CUDA(be);
  be->reserve_step(32);
  const float eps = 1e-6f;
  for (int64_t T : {3, 17}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const int64_t K = 256, N = 300, F = 160, H = 4, D = 64;
    // rms_norm f32 -> bf16 (strided input)
    auto h0 = rnd(size_t(T * (K + 8)), 1 + T, -2, 2), w = rnd(size_t(K), 2, 0.5f, 1.5f);
    Buf h(*be, T, K + 8, &h0), xn(*be, T, K, nullptr, DType::bf16);
    Tensor wt = vec(*be, w);
    const Tensor hv = h.t.col_slice(8, K);
    be->rms_norm(hv, wt, xn.t, T, K, eps);
    std::vector<double> xref;
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> row(h0.begin() + t * (K + 8) + 8, h0.begin() + t * (K + 8) + 8 + K);
      auto y = rms_ref(row.data(), K, w.data(), eps);
      xref.insert(xref.end(), y.begin(), y.end());
    }
    const auto xgot = xn.get();
    EXPECT_LT(rel(xgot, xref), 4e-3) << "rms_norm f32 -> bf16";
    // linear from the bf16 row: bf16 output (with bias) and f32 output
    auto W = rnd(size_t(N * K), 3, -0.3f, 0.3f), b = rnd(size_t(N), 4);
    Mat m(*be, W, N, K, &b), m0(*be, W, N, K);
    Buf yb(*be, T, N, nullptr, DType::bf16), yf(*be, T, N);
    be->linear(xn.t, m.m, yb.t, T);
    be->linear(xn.t, m0.m, yf.t, T);
    const auto xd = to_d(xgot);  // exactly what the bf16 row holds
    EXPECT_LT(rel(yb.get(), linear_ref(xd, T, K, W, N, &b)), 4e-3) << "linear bf16 -> bf16 (+ bias)";
    EXPECT_LT(rel(yf.get(), linear_ref(xd, T, K, W, N, nullptr)), 1e-5) << "linear bf16 -> f32";
    // per-head norm and rope in place on a bf16 [T, H * D] buffer
    auto q0 = bfr(rnd(size_t(T * H * D), 5, -2, 2));
    auto qw = rnd(size_t(D), 6, 0.5f, 1.5f);
    auto inv = inv_freq(D, 10000.0);
    Buf q(*be, T, H * D, &q0, DType::bf16);
    Tensor qwt = vec(*be, qw), it = vec(*be, inv);
    be->set_step(std::vector<int32_t>(size_t(T), 1), 9);
    be->rms_norm(q.t, qwt, q.t, T, D, eps);
    be->rope(q.t, T, H, D, it, 1.0f);
    std::vector<double> qref = to_d(q0);
    for (int64_t r = 0; r < T * H; ++r) {
      auto y = rms_ref(qref.data() + r * D, D, qw.data(), eps);
      std::copy(y.begin(), y.end(), qref.begin() + r * D);
      rope_ref(qref.data() + r * D, D, double(9 + r / H), inv, 1.0);
    }
    EXPECT_LT(rel(q.get(), qref), 6e-3) << "per-head rms_norm + rope in place, bf16 (two roundings)";
    // gated activation bf16 -> bf16
    auto gu0 = bfr(rnd(size_t(T * 2 * F), 7, -3, 3));
    Buf gu(*be, T, 2 * F, &gu0, DType::bf16), act(*be, T, F, nullptr, DType::bf16);
    be->gated_act(gu.t, act.t, T, Activation::silu);
    std::vector<double> aref;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t f = 0; f < F; ++f) aref.push_back(silu_ref(gu0[size_t(t * 2 * F + f)]) * gu0[size_t(t * 2 * F + F + f)]);
    EXPECT_LT(rel(act.get(), aref), 4e-3) << "gated_act bf16";
    for (Tensor* x : {&wt, &qwt, &it}) be->free(*x);
  }
}

// ================================================================ argmax (greedy decoding on the device)
ArgmaxResult argmax_ref(const std::vector<float>& v) {
  ArgmaxResult r;
  bool bad = false;
  float mx = -INFINITY;
  for (float x : v) {
    bad |= std::isnan(x) || x == INFINITY;
    if (x > mx) mx = x;
  }
  r.valid = !bad && mx != -INFINITY;
  if (!r.valid) return r;
  int n = 0;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] == mx && n++ == 0) r.index = int32_t(i);
  r.unique = n == 1;
  return r;
}

// Sizes around the kernel's block and vector boundaries, the max in the vector tail, ties far apart (across blocks),
// +0 / -0, NaN / +inf / all -inf, a misaligned row (a column slice starting at 1), and the same launch captured in a
// graph and replayed over new contents (the arrival counter is reset by every launch).
TEST(CudaEngineOps, Argmax) {
  NEED_CUDA(be);
  auto cpu = make_cpu_backend({});
  const float inf = INFINITY, nan = std::numeric_limits<float>::quiet_NaN();
  auto check = [&](const std::vector<float>& v, const std::string& what) {
    SCOPED_TRACE(what + " n=" + std::to_string(v.size()));
    const ArgmaxResult ref = argmax_ref(v);
    for (int64_t off : {0, 1}) {
      std::vector<float> padded(size_t(off), 123.0f);  // larger than anything: must not be read
      padded.insert(padded.end(), v.begin(), v.end());
      Buf b(*be, 1, int64_t(padded.size()), &padded);
      be->argmax(b.t.col_slice(off, int64_t(v.size())));
      const ArgmaxResult r = be->argmax_result();
      EXPECT_EQ(r.valid, ref.valid) << "offset " << off;
      if (ref.valid) {
        EXPECT_EQ(r.index, ref.index) << "offset " << off;
        EXPECT_EQ(r.unique, ref.unique) << "offset " << off;
      }
    }
    Tensor c = cpu->alloc(DType::f32, 1, int64_t(v.size()));
    cpu->upload(c, v.data(), v.size() * 4);
    cpu->argmax(c);
    const ArgmaxResult rc = cpu->argmax_result();
    EXPECT_EQ(rc.valid, ref.valid) << "cpu backend";
    if (ref.valid) EXPECT_EQ(rc.index, ref.index) << "cpu backend";
    if (ref.valid) EXPECT_EQ(rc.unique, ref.unique) << "cpu backend";
    cpu->free(c);
  };
  uint64_t seed = 900;
  for (int64_t n : {1, 2, 3, 4, 5, 255, 1024, 4095, 4099, 16384, 65537, 128256, 262144}) {
    auto v = rnd(size_t(n), seed++, -10, 10);
    check(v, "random");
    v[size_t(n - 1)] = 11.0f;
    check(v, "max last");
    if (n > 2) {
      v[size_t(n / 2)] = 11.0f;
      check(v, "tie");
      v[0] = 11.0f;
      check(v, "tie at 0");
    }
  }
  std::vector<float> z(262144, -1.0f);
  z[200000] = 0.0f, z[70000] = -0.0f;
  check(z, "+0 / -0");
  z[100] = nan;
  check(z, "NaN");
  z[100] = inf;
  check(z, "+inf");
  check(std::vector<float>(4099, -inf), "all -inf");
  std::vector<float> w(4099, -inf);
  w[4098] = -1e30f;
  check(w, "one finite");

  // captured once, replayed over new contents
  be->reserve_step(1);
  const int64_t n = 262144;
  Buf lg(*be, 1, n);
  for (int s = 0; s < 5; ++s) {
    auto v = rnd(size_t(n), 950 + uint64_t(s), -10, 10);
    v[size_t((s * 52361) % n)] = 20.0f;
    if (s == 3) v[size_t(n - 2)] = 20.0f;
    be->upload(lg.t, v.data(), v.size() * 4);
    const int32_t tok = 0;
    be->set_step(std::span<const int32_t>(&tok, 1), s);
    if (!be->graph_replay(77)) {
      ASSERT_EQ(s, 0) << "not replayed";
      be->graph_begin(77);
      be->argmax(lg.t);
      be->graph_end(77);
    }
    const ArgmaxResult r = be->argmax_result(), ref = argmax_ref(v);
    EXPECT_EQ(r.index, ref.index) << "step " << s;
    EXPECT_EQ(r.unique, ref.unique) << "step " << s;
  }
  be->graph_forget_all();
}

}  // namespace
