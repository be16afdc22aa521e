// The one-row GEMV's fused prologue and epilogue features (kernels.hpp GemvIn / GemvOut), case by case, for tests
// that run one call under two launch plans and compare the bits (the bulk kernel against the legacy one):
// tests/engine/test_cuda_gemv_bulk.cpp on the GPU, tools/cuda_emu/gemv_bulk_harness.cpp on the CPU emulation. The
// memory is abstracted (Mem: alloc poisons with 0xff, put / get copy bytes in / out), the plan is the caller's
// (Tuning::cuda_gemv_plan). Random inputs (never zeros), odd sizes, outputs NaN-poisoned, an f64 reference.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/cuda/kernels.hpp"
#include "flashkit/dtype.hpp"

namespace fk_test {

struct GemvFeatureCase {
  const char* name;
  int64_t N, K;
  bool x_bf16 = false, d = false, post_w = false, norm = false, h_out = false, a_out = false;
  bool in_place = false;  // h_out is x (f32): the residual stream updated in place (the arrival-counter path)
  bool bias = false, softcap = false, residual = false, residual_is_y = false, y_bf16 = false;
  bool big = false;  // a model-sized shape (GPU only)
};

inline std::vector<GemvFeatureCase> gemv_feature_cases() {
  std::vector<GemvFeatureCase> v;
  GemvFeatureCase c{"norm + a_out", 37, 1288};
  c.norm = c.a_out = true;
  v.push_back(c);
  c = {"bf16 x, sandwich norm, h_out + a_out, bias, softcap, residual, bf16 y", 515, 776};
  c.x_bf16 = c.d = c.post_w = c.norm = c.h_out = c.a_out = c.bias = c.softcap = c.residual = c.y_bf16 = true;
  v.push_back(c);
  c = {"in place: h_out is x, norm", 300, 520};
  c.d = c.norm = c.h_out = c.in_place = true;
  v.push_back(c);
  c = {"plain, 513 chunks a row, bias", 1001, 4104};
  c.bias = true;
  v.push_back(c);
  c = {"one row of K 8, residual is y", 1, 8};
  c.residual = c.residual_is_y = true;
  v.push_back(c);
  c = {"5 rows, d without post norm, a_out", 5, 24};
  c.d = c.a_out = true;
  v.push_back(c);
  c = {"mamba-2.8b in_proj (norm)", 10240, 2560};
  c.norm = c.big = true;
  v.push_back(c);
  c = {"mamba-2.8b out_proj (residual)", 2560, 5120};
  c.residual = c.big = true;
  v.push_back(c);
  c = {"Llama-8B down_proj shape, bf16 x", 4096, 14336};
  c.x_bf16 = c.big = true;
  v.push_back(c);
  return v;
}

// What one call wrote: y (widened to f32 when bf16), h_out, a_out (empty when not asked for), and the relative
// error of y against the f64 reference.
struct GemvFeatureResult {
  std::vector<float> y, h, a;
  double err = 0;
};

template <class Mem>
GemvFeatureResult run_gemv_feature_case(const GemvFeatureCase& c, Mem& mem) {
  namespace kc = flashkit::engine::cuda;
  const int64_t N = c.N, K = c.K;
  std::mt19937_64 g(uint64_t(N * 131 + K));
  auto rnd = [&](size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(g);
    return v;
  };
  std::vector<uint16_t> wb(static_cast<size_t>(N * K));
  {
    const auto wf = rnd(wb.size(), -0.5f, 0.5f);
    for (size_t i = 0; i < wb.size(); ++i) wb[i] = flashkit::f32_to_bf16(wf[i]);
  }
  auto x = rnd(size_t(K), -2.f, 2.f);
  std::vector<uint16_t> xb(static_cast<size_t>(K));
  for (size_t i = 0; i < x.size(); ++i)  // x exactly representable in bf16 when it is given as bf16
    if (c.x_bf16) xb[i] = flashkit::f32_to_bf16(x[i]), x[i] = flashkit::bf16_to_f32(xb[i]);
  const auto d = rnd(size_t(K), -1.f, 1.f), pw = rnd(size_t(K), 0.5f, 1.5f), nw = rnd(size_t(K), 0.5f, 1.5f);
  const auto bias = rnd(size_t(N), -1.f, 1.f), res = rnd(size_t(N), -1.f, 1.f);
  const float cap = 15.f, eps = 1e-5f;

  auto up = [&](const void* src, size_t bytes) {
    void* p = mem.alloc(bytes);
    mem.put(p, src, bytes);
    return p;
  };
  void* dW = up(wb.data(), wb.size() * 2);
  void* dx = c.x_bf16 ? up(xb.data(), xb.size() * 2) : up(x.data(), x.size() * 4);
  void* dd = up(d.data(), d.size() * 4);
  void* dpw = up(pw.data(), pw.size() * 4);
  void* dnw = up(nw.data(), nw.size() * 4);
  void* dbias = up(bias.data(), bias.size() * 4);
  void* dres = up(res.data(), res.size() * 4);
  const size_t ybytes = size_t(N) * (c.y_bf16 ? 2 : 4);
  void* dy = mem.alloc(ybytes);
  if (c.residual_is_y) mem.put(dy, res.data(), size_t(N) * 4);
  void* dh = c.in_place ? dx : mem.alloc(size_t(K) * 4);
  void* da = mem.alloc(size_t(K) * 4);
  void* dcnt = mem.alloc(4);
  const uint32_t zero = 0;
  mem.put(dcnt, &zero, 4);

  kc::GemvIn in;
  in.x = dx, in.x_bf16 = c.x_bf16, in.ldx = K, in.eps = eps;
  if (c.d) in.d = static_cast<const float*>(dd), in.ldd = K;
  if (c.post_w) in.post_w = static_cast<const float*>(dpw);
  if (c.norm) in.norm_w = static_cast<const float*>(dnw);
  if (c.h_out) in.h_out = static_cast<float*>(dh), in.ldh = K;
  if (c.a_out) in.a_out = static_cast<float*>(da), in.lda = K;
  kc::GemvOut out;
  out.y = dy, out.y_bf16 = c.y_bf16, out.ldy = N;
  if (c.bias) out.bias = static_cast<const float*>(dbias);
  if (c.softcap) out.softcap = cap;
  if (c.residual) out.residual = static_cast<const float*>(c.residual_is_y ? dy : dres), out.ldr = N;
  kc::gemv_bf16(in, static_cast<const uint16_t*>(dW), N, K, 1, out, static_cast<unsigned*>(dcnt), nullptr);

  GemvFeatureResult r;
  r.y.resize(size_t(N));
  if (c.y_bf16) {
    std::vector<uint16_t> yb(static_cast<size_t>(N));
    mem.get(yb.data(), dy, ybytes);
    for (size_t i = 0; i < yb.size(); ++i) r.y[i] = flashkit::bf16_to_f32(yb[i]);
  } else {
    mem.get(r.y.data(), dy, ybytes);
  }
  if (c.h_out) r.h.resize(size_t(K)), mem.get(r.h.data(), dh, size_t(K) * 4);
  if (c.a_out) r.a.resize(size_t(K)), mem.get(r.a.data(), da, size_t(K) * 4);

  // f64 reference
  std::vector<double> h(static_cast<size_t>(K)), a(static_cast<size_t>(K));
  double rd = 1, ss = 0;
  if (c.d && c.post_w) {
    for (float v : d) ss += double(v) * v;
    rd = 1 / std::sqrt(ss / double(K) + eps);
  }
  ss = 0;
  for (int64_t k = 0; k < K; ++k) {
    h[size_t(k)] = double(x[size_t(k)]) + (c.d ? double(d[size_t(k)]) * rd * (c.post_w ? pw[size_t(k)] : 1.f) : 0.0);
    ss += h[size_t(k)] * h[size_t(k)];
  }
  const double rn = c.norm ? 1 / std::sqrt(ss / double(K) + eps) : 1.0;
  for (int64_t k = 0; k < K; ++k) a[size_t(k)] = h[size_t(k)] * rn * (c.norm ? nw[size_t(k)] : 1.f);
  double e2 = 0, n2 = 0;
  for (int64_t n = 0; n < N; ++n) {
    double v = 0;
    for (int64_t k = 0; k < K; ++k) v += double(flashkit::bf16_to_f32(wb[size_t(n * K + k)])) * a[size_t(k)];
    if (c.bias) v += bias[size_t(n)];
    if (c.softcap) v = cap * std::tanh(v / cap);
    if (c.residual) v += res[size_t(n)];
    e2 += (r.y[size_t(n)] - v) * (r.y[size_t(n)] - v), n2 += v * v;
  }
  r.err = std::isfinite(e2) ? std::sqrt(e2 / n2) : INFINITY;
  for (int64_t k = 0; k < K && c.h_out; ++k)
    if (!(std::fabs(r.h[size_t(k)] - h[size_t(k)]) <= 1e-5 * (1 + std::fabs(h[size_t(k)])))) r.err = INFINITY;
  for (int64_t k = 0; k < K && c.a_out; ++k)
    if (!(std::fabs(r.a[size_t(k)] - a[size_t(k)]) <= 1e-5 * (1 + std::fabs(a[size_t(k)])))) r.err = INFINITY;
  for (void* p : {dW, dx, dd, dpw, dnw, dbias, dres, dy, da, dcnt}) mem.free(p);
  if (!c.in_place) mem.free(dh);
  return r;
}

// The error bound of y: f32 accumulation (1e-5), or the bf16 rounding of y.
inline double gemv_feature_tolerance(const GemvFeatureCase& c) { return c.y_bf16 ? 4e-3 : 1e-5; }

}  // namespace fk_test
