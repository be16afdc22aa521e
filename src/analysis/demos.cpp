#include "demos.hpp"

#include <cblas.h>

#include <map>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>

#include "kernels_avx2.hpp"
#include "gemm.hpp"
#include "model_cost.hpp"

#include "flashkit/attention.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"

namespace flashkit::analysis {

namespace {
constexpr float kC0 = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kC1 = 0.044715f;

// tanh as a clamped 13/6 rational function (the approximation Eigen uses for float): vectorizes, and is
// within a few float ulps of std::tanh. Both GELU forms use it, so the comparison is about memory passes.
#pragma omp declare simd
inline float fast_tanh(float x) {
  const float c = 7.90531110763549805f;
  x = x < -c ? -c : (x > c ? c : x);
  const float x2 = x * x;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 - 8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * x;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  return p / q;
}

template <class F>
void pass(Profiler* p, const char* name, double flops_per, double bytes_per, int64_t n, F f) {
  if (p) {
    ScopedRange r(*p, name, flops_per * double(n), bytes_per * double(n), "kernel");
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) f(i);
  } else {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) f(i);
  }
}
}  // namespace

void gelu_separate(const float* x, float* y, float* a, float* b, int64_t n, Profiler* p) {
  // One "kernel" per elementwise op, each a full pass over main memory (8 B or 12 B per element).
  pass(p, "gelu.sep.1_cube", 2, 8, n, [&](int64_t i) { a[i] = x[i] * x[i] * x[i]; });
  pass(p, "gelu.sep.2_mul_c1", 1, 8, n, [&](int64_t i) { a[i] = kC1 * a[i]; });
  pass(p, "gelu.sep.3_add_x", 1, 12, n, [&](int64_t i) { a[i] = x[i] + a[i]; });
  pass(p, "gelu.sep.4_mul_c0", 1, 8, n, [&](int64_t i) { a[i] = kC0 * a[i]; });
  if (have_avx2_fma()) {
    std::optional<ScopedRange> r;
    if (p) r.emplace(*p, "gelu.sep.5_tanh", 30.0 * double(n), 8.0 * double(n), "kernel");
    tanh_avx2(a, b, n);
  } else {
    pass(p, "gelu.sep.5_tanh", 30, 8, n, [&](int64_t i) { b[i] = fast_tanh(a[i]); });
  }
  pass(p, "gelu.sep.6_add_1", 1, 8, n, [&](int64_t i) { b[i] = 1.0f + b[i]; });
  pass(p, "gelu.sep.7_mul_x", 1, 12, n, [&](int64_t i) { b[i] = x[i] * b[i]; });
  pass(p, "gelu.sep.8_mul_half", 1, 8, n, [&](int64_t i) { y[i] = 0.5f * b[i]; });
}

float gelu_fast_tanh(float x) { return fast_tanh(x); }

void gelu_fused(const float* x, float* y, int64_t n) {
  if (have_avx2_fma()) return gelu_tanh_fused_avx2(x, y, n);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + fast_tanh(kC0 * (v + kC1 * v * v * v)));
  }
}

nlohmann::json profile_gelu(Profiler& p, int64_t n, int reps) {
  if (n <= 0) fail(Status::invalid_argument, "gelu: --n must be positive");
  if (reps <= 0) fail(Status::invalid_argument, "gelu: --reps must be positive");
  const size_t un = static_cast<size_t>(n);
  std::vector<float> x(un), y1(un), y2(un), a(un), b(un);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 2);
  for (auto& v : x) v = nd(rng);
  gelu_fused(x.data(), y2.data(), n);  // warm pages
  gelu_separate(x.data(), y1.data(), a.data(), b.data(), n, nullptr);
  double sep_us = 0, fused_us = 0;
  for (int r = 0; r < reps; ++r) {
    const double t0 = p.now_us();
    {
      ScopedRange g(p, "gelu.separate(8 kernels)", 38.0 * double(n), 72.0 * double(n), "op");
      gelu_separate(x.data(), y1.data(), a.data(), b.data(), n, &p);
    }
    sep_us += p.now_us() - t0;
    const double t1 = p.now_us();
    {
      ScopedRange g(p, "gelu.fused(1 kernel)", 38.0 * double(n), 8.0 * double(n), "kernel");
      gelu_fused(x.data(), y2.data(), n);
    }
    fused_us += p.now_us() - t1;
  }
  double diff = 0;
  for (int64_t i = 0; i < n; ++i) diff = std::max(diff, double(std::fabs(y1[size_t(i)] - y2[size_t(i)])));
  const double sep_ms = sep_us / reps / 1e3, fused_ms = fused_us / reps / 1e3;
  return {{"n", n}, {"reps", reps},
          {"separate", {{"kernels", 8}, {"bytes", 72.0 * double(n)}, {"ms", sep_ms},
                        {"gb_per_s", 72.0 * double(n) / (sep_ms * 1e-3) / 1e9}}},
          {"fused", {{"kernels", 1}, {"bytes", 8.0 * double(n)}, {"ms", fused_ms},
                     {"gb_per_s", 8.0 * double(n) / (fused_ms * 1e-3) / 1e9}}},
          {"bytes_ratio", 9.0}, {"speedup", sep_ms / fused_ms}, {"max_abs_diff", diff},
          {"note", "separate = 8 elementwise passes (x^3, *c1, +x, *c0, tanh, +1, *x, *0.5): 72 B/element; "
                   "fused = 1 pass: 8 B/element. tanh is a 13/6 rational function (~30 flops), so on a CPU with few "
                   "cores the fused kernel can approach its compute roof and the speedup stay below 9x."}};
}

nlohmann::json profile_attention(Profiler& p, const AttentionProfileArgs& a) {
  if (a.batch <= 0 || a.heads <= 0 || a.kv_heads <= 0 || a.seqlen <= 0 || a.head_dim <= 0 || a.reps <= 0)
    fail(Status::invalid_argument, "attention profile: batch, heads, kv-heads, N, d and reps must be positive");
  if (a.heads % a.kv_heads) fail(Status::invalid_argument, "attention profile: heads must be a multiple of kv-heads");
  const int64_t B = a.batch, N = a.seqlen, H = a.heads, Hk = a.kv_heads, d = a.head_dim;
  std::vector<float> q(size_t(B * N * H * d)), k(size_t(B * N * Hk * d)), v(k.size()), o(q.size()), lse(size_t(B * H * N));
  std::vector<float> dout, dq, dk, dv;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 1);
  for (auto* t : {&q, &k, &v})
    for (auto& x : *t) x = nd(rng);
  auto Q = TensorView::contiguous(q.data(), DType::f32, {B, N, H, d});
  auto K = TensorView::contiguous(k.data(), DType::f32, {B, N, Hk, d});
  auto V = TensorView::contiguous(v.data(), DType::f32, {B, N, Hk, d});
  auto O = TensorView::contiguous(o.data(), DType::f32, {B, N, H, d});
  auto L = TensorView::contiguous(lse.data(), DType::f32, {B, H, N});
  TensorView dO, dQ, dK, dV;
  if (a.backward) {
    dout.resize(q.size()), dq.resize(q.size()), dk.resize(k.size()), dv.resize(k.size());
    for (auto& x : dout) x = nd(rng);
    dO = TensorView::contiguous(dout.data(), DType::f32, {B, N, H, d});
    dQ = TensorView::contiguous(dq.data(), DType::f32, {B, N, H, d});
    dK = TensorView::contiguous(dk.data(), DType::f32, {B, N, Hk, d});
    dV = TensorView::contiguous(dv.data(), DType::f32, {B, N, Hk, d});
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& name : a.impls) {
    AttentionImpl impl;
    if (!parse_impl(name, &impl)) fail(Status::invalid_argument, "unknown attention impl '" + name + "'; valid: reference, standard, flash");
    AttentionOptions opts;
    opts.causal = a.causal;
    opts.impl = impl;
    opts.check_finite = false;
    OpCost c;
    attention_forward(Q, K, V, O, L, opts, &c);  // warm-up and cost
    double best = 1e300;
    for (int r = 0; r < a.reps; ++r) {
      ScopedRange s(p, "attention.fwd." + name, c.flops, c.bytes_read + c.bytes_written, "kernel");
      s.event().args = {{"kernel", c.kernel}, {"model", c.model}, {"workspace_bytes", c.workspace_bytes}};
      const double t0 = p.now_us();
      attention_forward(Q, K, V, O, L, opts, nullptr);
      best = std::min(best, p.now_us() - t0);
    }
    const double bytes = c.bytes_read + c.bytes_written;
    nlohmann::json row = {{"impl", name}, {"kernel", c.kernel}, {"pass", "forward"}, {"flops", c.flops}, {"bytes", bytes},
                          {"workspace_bytes", c.workspace_bytes}, {"best_ms", best / 1e3},
                          {"floor_ms", p.roof().floor_max(c.flops, bytes) * 1e3},
                          {"bound", bound_name(p.roof().bound(c.flops / bytes))}, {"model", c.model}};
    row["measured_over_floor"] = row["best_ms"].get<double>() / row["floor_ms"].get<double>();
    out.push_back(row);
    if (a.backward) {
      OpCost cb;
      attention_backward(dO, Q, K, V, O, L, dQ, dK, dV, opts, &cb);
      double bb = 1e300;
      for (int r = 0; r < a.reps; ++r) {
        ScopedRange s(p, "attention.bwd." + name, cb.flops, cb.bytes_read + cb.bytes_written, "kernel");
        s.event().args = {{"kernel", cb.kernel}, {"model", cb.model}};
        const double t0 = p.now_us();
        attention_backward(dO, Q, K, V, O, L, dQ, dK, dV, opts, nullptr);
        bb = std::min(bb, p.now_us() - t0);
      }
      const double bytes_b = cb.bytes_read + cb.bytes_written;
      nlohmann::json rb = {{"impl", name}, {"kernel", cb.kernel}, {"pass", "backward"}, {"flops", cb.flops},
                           {"bytes", bytes_b}, {"workspace_bytes", cb.workspace_bytes}, {"best_ms", bb / 1e3},
                           {"floor_ms", p.roof().floor_max(cb.flops, bytes_b) * 1e3},
                           {"bound", bound_name(p.roof().bound(cb.flops / bytes_b))}, {"model", cb.model}};
      rb["measured_over_floor"] = rb["best_ms"].get<double>() / rb["floor_ms"].get<double>();
      out.push_back(rb);
    }
  }
  return {{"batch", B}, {"heads", H}, {"kv_heads", Hk}, {"N", N}, {"d", d}, {"causal", a.causal}, {"rows", out}};
}

}  // namespace flashkit::analysis

// ---------------------------------------------------------------- one decoder layer on the CPU

namespace flashkit::analysis {

namespace {
void rmsnorm_rows(const float* x, float* y, const float* w, int64_t rows, int64_t width) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * width;
    float* yr = y + r * width;
    float ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < width; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / float(width) + 1e-6f);
#pragma omp simd
    for (int64_t i = 0; i < width; ++i) yr[i] = xr[i] * inv * (1.0f + w[i]);
  }
}
// y[T, out] = x[T, in] W^T with W stored [out, in] (PyTorch Linear layout). One token: our AVX2 GEMV (OpenBLAS's
// M=1 path fights our OpenMP threads for the two cores); more tokens: BLAS.
void matmul(const float* x, const float* w, float* y, int64_t T, int64_t in, int64_t out) {
  if (T == 1) return gemv(GemmImpl::blocked, out, in, w, x, y);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(T), int(out), int(in), 1.0f, x, int(in), w, int(in), 0.0f,
              y, int(out));
}
// cos/sin of each (position, frequency), computed once per call site like an engine's RoPE cache.
struct RopeTable {
  std::vector<float> cs, sn;  // [T, hd/2]
  RopeTable(const std::vector<int64_t>& pos, int64_t hd) : cs(pos.size() * size_t(hd / 2)), sn(cs.size()) {
    for (size_t t = 0; t < pos.size(); ++t)
      for (int64_t i = 0; i < hd / 2; ++i) {
        const double ang = double(pos[t]) * std::pow(10000.0, -2.0 * double(i) / double(hd));
        cs[t * size_t(hd / 2) + size_t(i)] = float(std::cos(ang));
        sn[t * size_t(hd / 2) + size_t(i)] = float(std::sin(ang));
      }
  }
};
void rope_rows(float* x, int64_t T, int64_t heads, int64_t hd, const RopeTable& tab) {
  const int64_t half = hd / 2;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * hd;
      const float* c = tab.cs.data() + t * half;
      const float* s = tab.sn.data() + t * half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = a * s[i] + b * c[i];
      }
    }
}
}  // namespace

nlohmann::json profile_layer(Profiler& p, const ModelConfig& c, const LayerProfileArgs& a) {
  if (a.reps <= 0 || a.batch <= 0 || a.prefill <= 0 || a.context <= 0)
    fail(Status::invalid_argument, "profile layer: prefill, batch, context and reps must be positive");
  if (!a.global && c.sliding_window <= 0) fail(Status::invalid_argument, c.name + " has no sliding-window layers");
  Workload w;
  w.decode = a.decode;
  w.batch = a.decode ? a.batch : 1;
  w.prefill = a.prefill;
  w.context = a.context;
  w.weight_bytes = w.act_bytes = w.kv_bytes = 4;
  w.compute_dtype = "f32";
  std::vector<OpRow> rows = layer_ops(c, w, a.global);
  std::map<std::string, OpRow> by;
  for (const auto& r : rows) by[r.name.substr(0, r.name.find('('))] = r;
  const int64_t T = w.tokens(), h = c.hidden, I = c.intermediate, nh = c.heads, nkv = c.kv_heads, hd = c.head_dim;
  const int64_t q = nh * hd, kv = nkv * hd;
  const int64_t S = a.decode ? a.context : a.prefill;  // keys per sequence
  const int64_t B = w.batch;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0, 1);
  auto randv = [&](size_t n, float scale) {
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng) * scale;
    return v;
  };
  const float ws = 1.0f / std::sqrt(float(h));
  auto Wq = randv(size_t(h * q), ws), Wk = randv(size_t(h * kv), ws), Wv = randv(size_t(h * kv), ws),
       Wo = randv(size_t(q * h), 1.0f / std::sqrt(float(q))), Wg = randv(size_t(h * I), ws), Wu = randv(size_t(h * I), ws),
       Wd = randv(size_t(I * h), 1.0f / std::sqrt(float(I)));
  auto nw = randv(size_t(std::max(h, hd)), 0.1f);
  auto x = randv(size_t(T * h), 1.0f);
  std::vector<float> xn(size_t(T * h)), qb(size_t(T * q)), kb(size_t(T * kv)), ob(size_t(T * q)), ao(size_t(T * h)),
      x2(size_t(T * h)), g(size_t(T * I)), u(size_t(T * I)), md(size_t(T * h)), out(size_t(T * h));
  // KV caches [B, S, nkv, hd]: decode fills the first S-1 positions with random history.
  auto kc = randv(size_t(B * S * kv), 1.0f), vc = randv(size_t(B * S * kv), 1.0f);
  std::vector<float> lse(size_t(B * nh * (a.decode ? 1 : S)));
  std::vector<int64_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = a.decode ? S - 1 : t;
  const bool gelu = c.activation.find("gelu") != std::string::npos;
  const RopeTable rope_tab(pos, hd);

  std::map<std::string, double> best;
  auto timed = [&](const std::string& name, double flops, double bytes, auto&& f) {
    const double t0 = p.now_us();
    {
      ScopedRange r(p, name, flops, bytes, "op");
      f();
    }
    const double dt = p.now_us() - t0;
    auto it = best.find(name);
    if (it == best.end() || dt < it->second) best[name] = dt;
  };
  auto row = [&](const std::string& n) -> const OpRow& {
    auto it = by.find(n);
    if (it == by.end()) fail(Status::internal, "profile layer: cost model has no op " + n);
    return it->second;
  };
  auto run_op = [&](const std::string& n, auto&& f) { timed(n, row(n).flops, row(n).bytes(), f); };
  auto to_cache = [&](const std::vector<float>& src, std::vector<float>& cache) {
    if (!a.decode) {
      std::copy(src.begin(), src.end(), cache.begin());
      return;
    }
    for (int64_t b = 0; b < B; ++b) std::copy_n(src.data() + b * kv, kv, cache.data() + ((b * S) + S - 1) * kv);
  };
  std::vector<std::string> order;
  OpCost att_cost;
  for (int rep = 0; rep < a.reps + 1; ++rep) {  // the first pass warms up and is not kept
    if (rep == 1) {
      best.clear();
      p.clear();
    }
    run_op("input_norm", [&] { rmsnorm_rows(x.data(), xn.data(), nw.data(), T, h); });
    run_op("q_proj", [&] { matmul(xn.data(), Wq.data(), qb.data(), T, h, q); });
    run_op("k_proj", [&] { matmul(xn.data(), Wk.data(), kb.data(), T, h, kv); });
    run_op("v_proj", [&] {
      std::vector<float>& vb = ob;  // scratch, then into the cache
      matmul(xn.data(), Wv.data(), vb.data(), T, h, kv);
      std::vector<float> tmp(vb.begin(), vb.begin() + T * kv);
      to_cache(tmp, vc);
    });
    if (c.qk_norm) {
      run_op("q_norm", [&] { rmsnorm_rows(qb.data(), qb.data(), nw.data(), T * nh, hd); });
      run_op("k_norm", [&] { rmsnorm_rows(kb.data(), kb.data(), nw.data(), T * nkv, hd); });
    }
    run_op("rope", [&] {
      rope_rows(qb.data(), T, nh, hd, rope_tab);
      rope_rows(kb.data(), T, nkv, hd, rope_tab);
      to_cache(kb, kc);
    });
    {
      const OpRow& s1 = row("attn_scores");
      const OpRow& s2 = row("attn_weighted_sum");
      timed("attention(flash)", s1.flops + s2.flops, s1.bytes() + s2.bytes(), [&] {
        const int64_t sq = a.decode ? 1 : S;
        auto Q = TensorView::contiguous(qb.data(), DType::f32, {B, sq, nh, hd});
        auto K = TensorView::contiguous(kc.data(), DType::f32, {B, S, nkv, hd});
        auto V = TensorView::contiguous(vc.data(), DType::f32, {B, S, nkv, hd});
        auto O = TensorView::contiguous(ob.data(), DType::f32, {B, sq, nh, hd});
        auto L = TensorView::contiguous(lse.data(), DType::f32, {B, nh, sq});
        AttentionOptions o;
        o.causal = true;
        o.impl = AttentionImpl::flash;
        o.check_finite = false;
        if (!a.global) o.window_left = c.sliding_window - 1;
        attention_forward(Q, K, V, O, L, o, rep == 0 ? &att_cost : nullptr);
      });
    }
    run_op("o_proj", [&] { matmul(ob.data(), Wo.data(), ao.data(), T, q, h); });
    if (c.sandwich_norm) run_op("post_attn_norm", [&] { rmsnorm_rows(ao.data(), ao.data(), nw.data(), T, h); });
    run_op("residual_attn", [&] {
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < T * h; ++i) x2[size_t(i)] = x[size_t(i)] + ao[size_t(i)];
    });
    run_op("pre_mlp_norm", [&] { rmsnorm_rows(x2.data(), xn.data(), nw.data(), T, h); });
    run_op("mlp_gate", [&] { matmul(xn.data(), Wg.data(), g.data(), T, h, I); });
    run_op("mlp_up", [&] { matmul(xn.data(), Wu.data(), u.data(), T, h, I); });
    run_op("mlp_act", [&] {
      if (gelu) gelu_fused(g.data(), g.data(), T * I);
      else {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < T * I; ++i) g[size_t(i)] = g[size_t(i)] / (1.0f + std::exp(-g[size_t(i)]));
      }
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < T * I; ++i) g[size_t(i)] *= u[size_t(i)];
    });
    run_op("mlp_down", [&] { matmul(g.data(), Wd.data(), md.data(), T, I, h); });
    if (c.sandwich_norm) run_op("post_mlp_norm", [&] { rmsnorm_rows(md.data(), md.data(), nw.data(), T, h); });
    run_op("residual_mlp", [&] {
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < T * h; ++i) out[size_t(i)] = x2[size_t(i)] + md[size_t(i)];
    });
    if (rep == 0)
      for (const auto& e : p.events()) order.push_back(e.name);
  }
  // Predicted floors on the profiler's roof (matmuls and elementwise alike: a CPU has one f32 roof).
  nlohmann::json ops = nlohmann::json::array();
  double pred = 0, meas = 0;
  for (const auto& n : order) {
    double flops = 0, bytes = 0;
    for (const auto& e : p.events())
      if (e.name == n) {
        flops = e.flops, bytes = e.bytes;
        break;
      }
    const double fl = p.roof().floor_max(flops, bytes), ms = best[n] * 1e-6;
    pred += fl, meas += ms;
    ops.push_back({{"name", n}, {"flops", flops}, {"bytes", bytes}, {"intensity", bytes > 0 ? flops / bytes : 0},
                   {"bound", bound_name(p.roof().bound(bytes > 0 ? flops / bytes : 1e30))}, {"floor_s", fl},
                   {"measured_s", ms}, {"ratio", ms / fl}});
  }
  return {{"model", c.name}, {"layer_kind", a.global ? "global" : "sliding"}, {"phase", a.decode ? "decode" : "prefill"},
          {"tokens", T}, {"keys_per_seq", S}, {"batch", B}, {"reps", a.reps}, {"ops", ops},
          {"predicted_floor_s", pred},
          {"attention_opcost", {{"flops", att_cost.flops}, {"bytes", att_cost.bytes_read + att_cost.bytes_written},
                                {"kernel", att_cost.kernel}, {"model", att_cost.model}}}, {"measured_s", meas}, {"ratio", meas / pred},
          {"roof", {{"peak_gflops", p.roof().peak_flops / 1e9}, {"bw_gbs", p.roof().bw_bytes / 1e9}}},
          {"note", "f32 on this CPU; measured = best of reps per op; floor = max(FLOPs/peak, bytes/bandwidth) with "
                   "the cost model's FLOPs and minimum bytes (caches can make small ops beat the DRAM floor)"}};
}

}  // namespace flashkit::analysis
