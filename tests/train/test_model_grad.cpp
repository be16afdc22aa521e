// The whole model's gradient against central finite differences (f64 backend) on tiny Llama- and Gemma-style
// configs, and the loss of a freshly initialised model.
#include <gtest/gtest.h>

#include <cmath>

#include "train/model.hpp"
#include "train_test_util.hpp"

namespace {

using namespace fk_train_test;
using flashkit::train::TrainModel;

void model_grad_case(const nlohmann::json& cfg_json, uint64_t seed) {
  const auto cfg = cfg_of(cfg_json);
  auto be = flashkit::train::make_cpu_backend(DType::f64, 2);
  const int64_t B = 2, T = 6, N = B * T;
  TrainModel m(cfg, *be, B, T);
  m.init_weights(seed);
  // Larger random weights than the initialisation (0.02 makes most gradients tiny), norms around their identity.
  std::vector<double> p = randn(size_t(m.table().size()), seed + 1, 0.3);
  for (const auto& e : m.table().entries())
    if (e.shape.size() == 1)
      for (int64_t i = 0; i < e.numel(); ++i) p[size_t(e.offset + i)] = (cfg.norm_plus_one ? 0.0 : 1.0) + 0.2 * p[size_t(e.offset + i)];
  flashkit::train::upload_converted(*be, m.params(), p);
  flashkit::train::Rng r(seed, 5);
  std::vector<int32_t> ids(static_cast<size_t>(N)), tg(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    ids[size_t(i)] = int32_t(r.below(uint64_t(cfg.vocab_size)));
    tg[size_t(i)] = i % 5 == 4 ? -1 : int32_t(r.below(uint64_t(cfg.vocab_size)));
  }
  const float gs = 0.25f;
  be->zero(m.grads());
  m.step(ids.data(), tg.data(), B, T, true, gs);
  const auto grad = get(*be, m.grads());
  auto loss = [&](const std::vector<double>& pv) {
    flashkit::train::upload_converted(*be, m.params(), pv);
    return m.step(ids.data(), tg.data(), B, T, false, 1.f).sum * gs;
  };
  // Up to 12 entries of every tensor (all of the small ones), in random positions.
  std::vector<double> want, got;
  int checked_tensors = 0;
  for (const auto& e : m.table().entries()) {
    const int64_t k = std::min<int64_t>(12, e.numel());
    double tensor_num = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t idx = e.offset + (k == e.numel() ? j : int64_t(r.below(uint64_t(e.numel()))));
      const double h = 1e-5, x0 = p[size_t(idx)];
      p[size_t(idx)] = x0 + h;
      const double lp = loss(p);
      p[size_t(idx)] = x0 - h;
      const double lm = loss(p);
      p[size_t(idx)] = x0;
      want.push_back((lp - lm) / (2 * h));
      got.push_back(grad[size_t(idx)]);
      tensor_num += std::fabs(want.back());
    }
    EXPECT_GT(tensor_num, 0.0) << e.name << " has no gradient";
    ++checked_tensors;
  }
  EXPECT_LT(rel_err(got, want), 1e-6) << "over " << want.size() << " entries of " << checked_tensors << " tensors";
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-6 + 1e-5 * std::fabs(want[i])) << "entry " << i;
}

TEST(TrainModelGrad, LlamaGqaUntiedAttentionSoftcap) { model_grad_case(tiny_llama_json(), 11); }
TEST(TrainModelGrad, GemmaSlidingSoftcapTied) { model_grad_case(tiny_gemma_json(), 12); }

// The f32 trainer (sgemm, flash attention) against the f64 one on the same weights and batch: loss and gradient.
TEST(TrainModelGrad, F32MatchesF64) {
  for (auto j : {tiny_llama_json(97), tiny_gemma_json(97)}) {
    j["hidden_size"] = 48;
    j["intermediate_size"] = 80;
    const auto cfg = cfg_of(j);
    auto b64 = flashkit::train::make_cpu_backend(DType::f64, 2);
    auto b32 = flashkit::train::make_cpu_backend(DType::f32, 2);
    const int64_t B = 3, T = 37;
    TrainModel m64(cfg, *b64, B, T), m32(cfg, *b32, B, T);
    m64.init_weights(4);
    auto p = randn(size_t(m64.table().size()), 44, 0.1);
    for (const auto& e : m64.table().entries())
      if (e.shape.size() == 1)
        for (int64_t i = 0; i < e.numel(); ++i) p[size_t(e.offset + i)] = (cfg.norm_plus_one ? 0.0 : 1.0) + 0.1 * p[size_t(e.offset + i)];
    flashkit::train::upload_converted(*b64, m64.params(), p);
    flashkit::train::upload_converted(*b32, m32.params(), p);
    flashkit::train::Rng r(6, 6);
    std::vector<int32_t> ids(static_cast<size_t>(B * T)), tg(static_cast<size_t>(B * T));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(r.below(97)), tg[i] = int32_t(r.below(97));
    b64->zero(m64.grads());
    b32->zero(m32.grads());
    const double l64 = m64.step(ids.data(), tg.data(), B, T, true, 1.f / float(B * T)).sum;
    const double l32 = m32.step(ids.data(), tg.data(), B, T, true, 1.f / float(B * T)).sum;
    EXPECT_NEAR(l32, l64, 1e-5 * std::fabs(l64)) << cfg.model_type;
    EXPECT_LT(rel_err(get(*b32, m32.grads()), get(*b64, m64.grads())), 1e-4) << cfg.model_type;
  }
}

// A freshly initialised model predicts nearly uniformly: loss ~ ln(vocab).
TEST(TrainModelGrad, InitialLossIsLogVocab) {
  for (auto j : {tiny_llama_json(512), tiny_gemma_json(512)}) {
    j["hidden_size"] = 64;
    j["intermediate_size"] = 128;
    j["num_attention_heads"] = 4;
    j["head_dim"] = 16;
    const auto cfg = cfg_of(j);
    auto be = flashkit::train::make_cpu_backend(DType::f32, 2);
    const int64_t B = 4, T = 32;
    TrainModel m(cfg, *be, B, T);
    m.init_weights(3);
    flashkit::train::Rng r(3, 1);
    std::vector<int32_t> ids(size_t(B * T)), tg(size_t(B * T));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(r.below(512)), tg[i] = int32_t(r.below(512));
    const auto ls = m.step(ids.data(), tg.data(), B, T, false, 1.f);
    const double mean = ls.sum / double(ls.count);
    EXPECT_NEAR(mean, std::log(512.0), 0.02 * std::log(512.0)) << cfg.model_type;
  }
}

}  // namespace
