// The CUDA backend's quantized linear ops and their fusions at the Backend level, against f64: rms_norm -> linear
// over a matrix of two quantized parts (Q4_K + Q6_K segments, as a Q4_K_M q|k|v) -> linear (Q8_0) -> residual add,
// with fusion on (the norm becomes the first GEMV's prologue, the add the second GEMV's epilogue: stats() counts
// both) and off, for one and three rows. Skips without a CUDA device (CI has none).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../model/quant_pack.hpp"
#include "engine/backend.hpp"
#include "flashkit/dtype.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "model/weights.hpp"

using namespace flashkit;
using namespace flashkit::engine;

namespace {

struct QMat {
  std::string bytes;
  std::vector<double> values;  // row-major [rows, cols]
  model::WeightView view;
};

QMat make_qmat(fk_test::QType t, model::WeightType wt, int64_t rows, int64_t cols, std::mt19937& rng,
               const char* name) {
  QMat m;
  for (int64_t i = 0; i < rows * cols / fk_test::qtype_values(t); ++i)
    fk_test::pack_random_block(t, rng, m.bytes, m.values);
  m.view.name = name, m.view.type = wt, m.view.shape = {rows, cols};
  m.view.data = m.bytes.data(), m.view.nbytes = m.bytes.size();
  return m;
}

double rel(const std::vector<float>& a, const std::vector<double>& ref) {
  double d = 0, r = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    d += (a[i] - ref[i]) * (a[i] - ref[i]);
    r += ref[i] * ref[i];
  }
  return std::sqrt(d / r);
}

TEST(CudaQuantBackend, NormPrologueAndResidualEpilogueAgainstF64) {
  if (cuda_device_count() <= 0) GTEST_SKIP() << "no CUDA device (or no CUDA build)";
  using fk_test::QType;
  using WT = model::WeightType;
  const int64_t K = 256, Na = 64, Nb = 32, N1 = Na + Nb;
  const float eps = 1e-5f;
  std::mt19937 rng(41);
  QMat a = make_qmat(QType::q4_k, WT::q4_k, Na, K, rng, "w1a"), b = make_qmat(QType::q6_k, WT::q6_k, Nb, K, rng, "w1b");
  QMat c = make_qmat(QType::q8_0, WT::q8_0, K, N1, rng, "w2");
  std::normal_distribution<float> nd;
  for (const char* fuse : {"1", "0"})
    for (int64_t T : {1, 3}) {
      BackendOptions o;
      o.tuning = default_tuning();
      o.tuning.cuda_fuse = fuse[0] == '1';
      o.keep_quantized = true;
      o.weight_dtype = DType::bf16;
      std::unique_ptr<Backend> be;
      try {
        be = make_cuda_backend(o);
      } catch (const Error& e) {
        if (e.status() != Status::unsupported) throw;
        GTEST_SKIP() << "no CUDA build";
      }
      const model::WeightView* w1[2] = {&a.view, &b.view};
      const model::WeightView* w2[1] = {&c.view};
      Matrix W1 = be->load_matrix(w1), W2 = be->load_matrix(w2);
      // The blocks as they are; each segment starts 16-byte aligned.
      EXPECT_EQ(be->stats().weight_bytes, (a.bytes.size() + 15) / 16 * 16 + b.bytes.size() + c.bytes.size());
      std::vector<float> h(static_cast<size_t>(T * K)), nw(static_cast<size_t>(K));
      for (auto& v : h) v = nd(rng);
      for (auto& v : nw) v = 1.0f + 0.2f * nd(rng);
      Tensor th = be->alloc(DType::f32, T, K), txn = be->alloc(DType::f32, T, K), ty = be->alloc(DType::f32, T, N1),
             to = be->alloc(DType::f32, T, K), tnw = be->upload_f32(nw);
      be->upload(th, h.data(), h.size() * 4);
      be->reserve_step(T);
      be->set_step(std::vector<int32_t>(size_t(T), 0), 0);
      const Backend::Stats s0 = be->stats();
      be->rms_norm(th, tnw, txn, T, K, eps);
      be->linear(txn, W1, ty, T);
      be->linear(ty, W2, to, T);
      be->add(to, th, T);
      std::vector<float> gh(h.size()), gxn(h.size()), gy(size_t(T * N1)), go(h.size());
      be->download_f32(gh.data(), th, T);
      be->download_f32(gxn.data(), txn, T);
      be->download_f32(gy.data(), ty, T);
      be->download_f32(go.data(), to, T);
      const Backend::Stats s1 = be->stats();
      EXPECT_EQ(s1.quant_fused_norms - s0.quant_fused_norms, fuse[0] == '1' ? 1u : 0u);
      EXPECT_EQ(s1.quant_fused_adds - s0.quant_fused_adds, fuse[0] == '1' ? 1u : 0u);
      // f64 reference
      std::vector<double> rxn(h.size()), ry(gy.size()), ro(h.size()), rh(h.size());
      for (int64_t t = 0; t < T; ++t) {
        double ss = 0;
        for (int64_t k = 0; k < K; ++k) ss += double(h[size_t(t * K + k)]) * h[size_t(t * K + k)];
        const double r = 1.0 / std::sqrt(ss / double(K) + eps);
        for (int64_t k = 0; k < K; ++k) rxn[size_t(t * K + k)] = h[size_t(t * K + k)] * r * nw[size_t(k)];
        for (int64_t n = 0; n < N1; ++n) {
          const std::vector<double>& v = n < Na ? a.values : b.values;
          const int64_t row = n < Na ? n : n - Na;
          double e = 0;
          for (int64_t k = 0; k < K; ++k) e += rxn[size_t(t * K + k)] * v[size_t(row * K + k)];
          ry[size_t(t * N1 + n)] = e;
        }
        for (int64_t n = 0; n < K; ++n) {
          double e = 0;
          for (int64_t k = 0; k < N1; ++k) e += ry[size_t(t * N1 + k)] * c.values[size_t(n * N1 + k)];
          ro[size_t(t * K + n)] = e;
          rh[size_t(t * K + n)] = h[size_t(t * K + n)] + e;
        }
      }
      const std::string what = std::string("fuse ") + fuse + " T " + std::to_string(T);
      EXPECT_LT(rel(gxn, rxn), 1e-5) << what << " (normed rows)";
      EXPECT_LT(rel(gy, ry), 1e-5) << what << " (first product)";
      EXPECT_LT(rel(go, ro), 1e-5) << what << " (second product)";
      EXPECT_LT(rel(gh, rh), 1e-5) << what << " (residual)";
      be->free_matrix(W1);
      be->free_matrix(W2);
    }
}

// The MLP of a decode step: rms_norm -> gate|up (two Q4_K parts) -> gated_act -> down (Q8_0) -> residual add. With
// fusion on and one row, the first three ops are one GEMV (norm prologue, gated epilogue) and the last two another;
// three rows fuse the norm and the add only; fusion off runs them one by one. Both activations, against f64.
TEST(CudaQuantBackend, GatedMlpAgainstF64) {
  if (cuda_device_count() <= 0) GTEST_SKIP() << "no CUDA device (or no CUDA build)";
  using fk_test::QType;
  using WT = model::WeightType;
  const int64_t K = 256, F = 64;
  const float eps = 1e-6f;
  std::mt19937 rng(43);
  QMat g = make_qmat(QType::q4_k, WT::q4_k, F, K, rng, "gate"), u = make_qmat(QType::q4_k, WT::q4_k, F, K, rng, "up");
  QMat dn = make_qmat(QType::q8_0, WT::q8_0, K, F, rng, "down");
  std::normal_distribution<float> nd;
  for (Activation act : {Activation::silu, Activation::gelu_tanh})
    for (const char* fuse : {"1", "0"})
      for (int64_t T : {1, 3}) {
        BackendOptions o;
        o.tuning = default_tuning();
        o.tuning.cuda_fuse = fuse[0] == '1';
        o.keep_quantized = true;
        o.weight_dtype = DType::bf16;
        std::unique_ptr<Backend> be;
        try {
          be = make_cuda_backend(o);
        } catch (const Error& e) {
          if (e.status() != Status::unsupported) throw;
          GTEST_SKIP() << "no CUDA build";
        }
        // Gate values where both activations are far from saturated: the blocks' f16 scales (d, dmin) times 0.1.
        QMat gs = g;
        for (size_t b = 0; b < gs.bytes.size(); b += 144)
          for (size_t at : {b, b + 2}) {
            uint16_t h;
            std::memcpy(&h, &gs.bytes[at], 2);
            const float v = f16_to_f32(h) * 0.1f;
            h = f32_to_f16(v);
            std::memcpy(&gs.bytes[at], &h, 2);
          }
        gs.view.data = gs.bytes.data();
        // The reference uses the values of the rescaled bytes (f16 rounding of the new scales included).
        std::vector<float> gvals(size_t(F * K));
        model::WeightView gv = gs.view;
        model::to_f32(gv, gvals.data());
        const model::WeightView* wgu[2] = {&gs.view, &u.view};
        const model::WeightView* wd[1] = {&dn.view};
        Matrix GU = be->load_matrix(wgu), D = be->load_matrix(wd);
        std::vector<float> h(static_cast<size_t>(T * K)), nw(static_cast<size_t>(K));
        for (auto& v : h) v = nd(rng);
        for (auto& v : nw) v = 1.0f + 0.2f * nd(rng);
        Tensor th = be->alloc(DType::f32, T, K), txn = be->alloc(DType::f32, T, K),
               tgu = be->alloc(DType::f32, T, 2 * F), tact = be->alloc(DType::f32, T, F),
               to = be->alloc(DType::f32, T, K), tnw = be->upload_f32(nw);
        be->upload(th, h.data(), h.size() * 4);
        be->reserve_step(T);
        be->set_step(std::vector<int32_t>(size_t(T), 0), 0);
        const Backend::Stats s0 = be->stats();
        be->rms_norm(th, tnw, txn, T, K, eps);
        be->linear(txn, GU, tgu, T);
        be->gated_act(tgu, tact, T, act);
        be->linear(tact, D, to, T);
        be->add(to, th, T);
        std::vector<float> gh(h.size()), gxn(h.size()), ggu(size_t(T * 2 * F)), gact(size_t(T * F)), go(h.size());
        be->download_f32(gh.data(), th, T);
        be->download_f32(gxn.data(), txn, T);
        be->download_f32(ggu.data(), tgu, T);
        be->download_f32(gact.data(), tact, T);
        be->download_f32(go.data(), to, T);
        const Backend::Stats s1 = be->stats();
        const bool on = fuse[0] == '1';
        EXPECT_EQ(s1.quant_fused_norms - s0.quant_fused_norms, on ? 1u : 0u);
        EXPECT_EQ(s1.quant_fused_gated - s0.quant_fused_gated, on && T == 1 ? 1u : 0u);
        EXPECT_EQ(s1.quant_fused_adds - s0.quant_fused_adds, on ? 1u : 0u);
        std::vector<double> rxn(h.size()), rgu(ggu.size()), ract(gact.size()), ro(h.size()), rh(h.size());
        for (int64_t t = 0; t < T; ++t) {
          double ss = 0;
          for (int64_t k = 0; k < K; ++k) ss += double(h[size_t(t * K + k)]) * h[size_t(t * K + k)];
          const double r = 1.0 / std::sqrt(ss / double(K) + eps);
          for (int64_t k = 0; k < K; ++k) rxn[size_t(t * K + k)] = h[size_t(t * K + k)] * r * nw[size_t(k)];
          for (int64_t f = 0; f < 2 * F; ++f) {
            double e = 0;
            for (int64_t k = 0; k < K; ++k)
              e += rxn[size_t(t * K + k)] * (f < F ? double(gvals[size_t(f * K + k)]) : u.values[size_t((f - F) * K + k)]);
            rgu[size_t(t * 2 * F + f)] = e;
          }
          for (int64_t f = 0; f < F; ++f) {
            const double gg = rgu[size_t(t * 2 * F + f)], uu = rgu[size_t(t * 2 * F + F + f)];
            const double a = act == Activation::silu
                                 ? gg / (1.0 + std::exp(-gg))
                                 : 0.5 * gg * (1.0 + std::tanh(0.7978845608028654 * (gg + 0.044715 * gg * gg * gg)));
            ract[size_t(t * F + f)] = a * uu;
          }
          for (int64_t n = 0; n < K; ++n) {
            double e = 0;
            for (int64_t f = 0; f < F; ++f) e += ract[size_t(t * F + f)] * dn.values[size_t(n * F + f)];
            ro[size_t(t * K + n)] = e;
            rh[size_t(t * K + n)] = h[size_t(t * K + n)] + e;
          }
        }
        const std::string what = std::string(act == Activation::silu ? "silu" : "gelu") + " fuse " + fuse + " T " +
                                 std::to_string(T);
        EXPECT_LT(rel(gxn, rxn), 1e-5) << what << " (normed rows)";
        EXPECT_LT(rel(ggu, rgu), 1e-5) << what << " (gate|up)";
        EXPECT_LT(rel(gact, ract), 1e-4) << what << " (activation)";
        EXPECT_LT(rel(go, ro), 1e-4) << what << " (down)";
        EXPECT_LT(rel(gh, rh), 1e-4) << what << " (residual)";
        be->free_matrix(GU);
        be->free_matrix(D);
      }
}

}  // namespace
