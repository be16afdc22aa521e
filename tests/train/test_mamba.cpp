// Mamba-1 in the trainer (model_type mamba): the whole model's gradient against central finite differences (f64
// backend), the f32 trainer (flashkit's selective-scan op) against the f64 one, the initialisation, the loss
// falling on a repetitive corpus, the exported MambaForCausalLM directory giving the trainer's logits in the
// engine, and bad Mamba recipes / backends refused with errors naming the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
#include "flashkit/train.hpp"
#include "model/weights.hpp"
#include "train/data.hpp"
#include "train/model.hpp"
#include "train_test_util.hpp"

namespace {

using namespace fk_train_test;
namespace fs = std::filesystem;
namespace tr = flashkit::train;
using nlohmann::json;
using tr::TrainModel;

json tiny_mamba_json(int64_t vocab = 31, bool tied = false) {
  return {{"model_type", "mamba"},  {"vocab_size", vocab},      {"hidden_size", 8},
          {"state_size", 4},        {"expand", 2},              {"conv_kernel", 3},
          {"time_step_rank", 2},    {"num_hidden_layers", 2},   {"layer_norm_epsilon", 1e-5},
          {"use_conv_bias", true},  {"use_bias", false},        {"residual_in_fp32", true},
          {"tie_word_embeddings", tied}};
}

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t seed, bool some_ignored) {
  tr::Rng r(seed, 5);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = some_ignored && i % 5 == 4 ? -1 : int32_t(r.below(uint64_t(vocab)));
  return v;
}

// Random parameters around the initialisation's scale: matrices N(0, 0.3), norms and D around 1, A_log around
// log(1..N), dt biases around the inverse softplus of 0.05 (so dt stays in the range training sees).
std::vector<double> random_params(const TrainModel& m, uint64_t seed) {
  std::vector<double> p = randn(size_t(m.table().size()), seed, 0.3);
  for (const auto& e : m.table().entries()) {
    auto has = [&](const char* s) { return e.name.find(s) != std::string::npos; };
    for (int64_t i = 0; i < e.numel(); ++i) {
      double& x = p[size_t(e.offset + i)];
      if (has("norm") || has(".D")) x = 1.0 + 0.5 * x;
      else if (has("A_log")) x = std::log(double(i % 4 + 1)) + 0.5 * x;
      else if (has("dt_proj.bias")) x = std::log(std::expm1(0.05)) + 2 * x;
    }
  }
  return p;
}

TEST(TrainMamba, ModelGradientMatchesFiniteDifferences) {
  for (bool tied : {false, true}) {
    const auto cfg = cfg_of(tiny_mamba_json(31, tied));
    auto be = tr::make_cpu_backend(DType::f64, 2);
    const int64_t B = 2, T = 7, N = B * T;
    TrainModel m(cfg, *be, B, T);
    m.init_weights(3);
    std::vector<double> p = random_params(m, 17);
    tr::upload_converted(*be, m.params(), p);
    const auto ids = random_ids(N, cfg.vocab_size, 1, false), tg = random_ids(N, cfg.vocab_size, 2, true);
    const float gs = 0.25f;
    be->zero(m.grads());
    m.step(ids.data(), tg.data(), B, T, true, gs);
    const auto grad = get(*be, m.grads());
    auto loss = [&](const std::vector<double>& pv) {
      tr::upload_converted(*be, m.params(), pv);
      return m.step(ids.data(), tg.data(), B, T, false, 1.f).sum * gs;
    };
    tr::Rng r(9, 9);
    std::vector<double> want, got;
    for (const auto& e : m.table().entries()) {
      const int64_t k = std::min<int64_t>(10, e.numel());
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
    }
    EXPECT_LT(rel_err(got, want), 1e-6) << "tied " << tied << ", " << want.size() << " entries";
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-6 + 1e-5 * std::fabs(want[i])) << "entry " << i;
  }
}

// The f32 trainer (the selective-scan op's CPU forward and backward, sgemm) against the f64 one.
TEST(TrainMamba, F32MatchesF64) {
  json j = tiny_mamba_json(97);
  j["hidden_size"] = 24;
  j["state_size"] = 16;
  j["time_step_rank"] = "auto";
  j["conv_kernel"] = 4;
  const auto cfg = cfg_of(j);
  auto b64 = tr::make_cpu_backend(DType::f64, 2);
  auto b32 = tr::make_cpu_backend(DType::f32, 2);
  const int64_t B = 3, T = 37;
  TrainModel m64(cfg, *b64, B, T), m32(cfg, *b32, B, T);
  m64.init_weights(4);
  auto p = random_params(m64, 44);
  for (auto& x : p) x *= 0.5;  // keep the f32 sums well conditioned
  for (const auto& e : m64.table().entries())
    if (e.name.find("A_log") != std::string::npos || e.name.find("norm") != std::string::npos)
      for (int64_t i = 0; i < e.numel(); ++i) p[size_t(e.offset + i)] += e.name.find("norm") != std::string::npos ? 0.5 : 0.3;
  tr::upload_converted(*b64, m64.params(), p);
  tr::upload_converted(*b32, m32.params(), p);
  const auto ids = random_ids(B * T, 97, 6, false), tg = random_ids(B * T, 97, 7, false);
  b64->zero(m64.grads());
  b32->zero(m32.grads());
  const double l64 = m64.step(ids.data(), tg.data(), B, T, true, 1.f / float(B * T)).sum;
  const double l32 = m32.step(ids.data(), tg.data(), B, T, true, 1.f / float(B * T)).sum;
  EXPECT_NEAR(l32, l64, 1e-5 * std::fabs(l64));
  EXPECT_LT(rel_err(get(*b32, m32.grads()), get(*b64, m64.grads())), 1e-4);
}

// transformers' Mamba initialisation of the SSM tensors, and a fresh model's loss ~ ln(vocab).
TEST(TrainMamba, InitialisationFollowsTransformers) {
  json j = tiny_mamba_json(512, true);
  j["hidden_size"] = 32;
  j["state_size"] = 8;
  const auto cfg = cfg_of(j);
  auto be = tr::make_cpu_backend(DType::f32, 2);
  const int64_t B = 4, T = 32;
  TrainModel m(cfg, *be, B, T);
  m.init_weights(3);
  const auto p = get(*be, m.params());
  const auto* A = m.table().find("backbone.layers.1.mixer.A_log");
  const auto* D = m.table().find("backbone.layers.0.mixer.D");
  const auto* bias = m.table().find("backbone.layers.0.mixer.dt_proj.bias");
  ASSERT_TRUE(A && D && bias);
  for (int64_t c = 0; c < A->shape[0]; ++c)
    for (int64_t n = 0; n < 8; ++n) EXPECT_NEAR(p[size_t(A->offset + c * 8 + n)], std::log(double(n + 1)), 1e-6);
  for (int64_t c = 0; c < D->numel(); ++c) EXPECT_EQ(p[size_t(D->offset + c)], 1.0);
  for (int64_t c = 0; c < bias->numel(); ++c) {
    const double dt = std::log1p(std::exp(p[size_t(bias->offset + c)]));  // softplus(bias) is the initial dt
    EXPECT_GE(dt, 0.001 * (1 - 1e-5));
    EXPECT_LE(dt, 0.1 * (1 + 1e-5));
  }
  const auto ids = random_ids(B * T, 512, 3, false), tg = random_ids(B * T, 512, 4, false);
  const auto ls = m.step(ids.data(), tg.data(), B, T, false, 1.f);
  EXPECT_NEAR(ls.sum / double(ls.count), std::log(512.0), 0.02 * std::log(512.0));
}

// A repetitive corpus: a few fixed "sentences" of random ids, drawn in random order.
void write_corpus(const fs::path& file, int64_t vocab, int64_t n, uint64_t seed) {
  tr::Rng r(seed, 1);
  std::vector<std::vector<int32_t>> sentences(6);
  for (auto& s : sentences) {
    s.resize(size_t(5 + r.below(6)));
    for (auto& x : s) x = int32_t(r.below(uint64_t(vocab)));
  }
  std::vector<int32_t> ids;
  while (int64_t(ids.size()) < n) {
    const auto& s = sentences[size_t(r.below(sentences.size()))];
    ids.insert(ids.end(), s.begin(), s.end());
  }
  ids.resize(size_t(n));
  tr::write_token_file(file, ids, vocab);
}

tr::Recipe recipe(const json& model, const fs::path& dir, int64_t steps) {
  const json j = {{"model", model},
                  {"data", {{"train", (dir / "train.bin").string()}}},
                  {"train",
                   {{"steps", steps}, {"batch_size", 4}, {"seq_len", 32}, {"lr", 1e-2}, {"warmup_steps", 5},
                    {"weight_decay", 0.01}, {"seed", 7}}},
                  {"log", {{"interval", 1}}},
                  {"output", {{"dir", (dir / "run").string()}}},
                  {"threads", 2}};
  std::ofstream(dir / "recipe.json") << j.dump(2);
  return tr::load_recipe(dir / "recipe.json");
}

// Training lowers the loss, and the exported directory loads in the engine as MambaForCausalLM with the trainer's
// logits (the trainer's forward on the checkpoint's weights against the engine's prefill, f32, rel 1e-4).
TEST(TrainMamba, TrainsAndExportsAModelTheEngineRunsWithTheTrainersLogits) {
  const fs::path dir = temp_dir("mamba");
  json model = tiny_mamba_json(48);
  model["hidden_size"] = 32;
  model["state_size"] = 8;
  const auto cfg = cfg_of(model);
  write_corpus(dir / "train.bin", 48, 6000, 2);
  double first = -1, last = -1;
  tr::TrainOptions o;
  o.quiet = true;
  o.on_report = [&](const tr::StepReport& rep) {
    if (first < 0) first = rep.loss;
    last = rep.loss;
  };
  const tr::TrainResult res = tr::train(recipe(model, dir, 60), o);
  std::printf("[ train ] mamba, 60 steps: loss %.3f -> %.3f\n", first, last);
  EXPECT_NEAR(first, std::log(48.0), 0.1);
  EXPECT_LT(last, 0.7 * first);

  const json exported = json::parse(std::ifstream(res.model_dir / "config.json"));
  EXPECT_EQ(exported["architectures"][0], "MambaForCausalLM");
  auto be = tr::make_cpu_backend(DType::f32, 2);
  const int64_t T = 29, V = cfg.vocab_size;
  TrainModel m(cfg, *be, 1, T);
  const auto st = flashkit::model::open_safetensors(res.checkpoint_dir / "state.safetensors");
  be->upload(m.params(), st->get("params").data, size_t(m.table().size()) * 4);
  const auto ids = random_ids(T, V, 5, false);
  std::vector<float> mine(size_t(T * V));
  m.logits(ids.data(), 1, T, mine.data());
  auto engine_model = flashkit::Model::load(res.model_dir);
  auto s = engine_model->new_session();
  s->prefill(ids, true);
  const std::vector<float>& eng = s->all_logits();
  ASSERT_EQ(eng.size(), mine.size());
  std::vector<double> a(mine.begin(), mine.end()), b(eng.begin(), eng.end());
  std::printf("[ train ] mamba: engine vs trainer logits, relative error %.2e\n", rel_err(a, b));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> ra(a.begin() + t * V, a.begin() + (t + 1) * V), rb(b.begin() + t * V, b.begin() + (t + 1) * V);
    EXPECT_LT(rel_err(ra, rb), 1e-4) << "row " << t;
  }
  fs::remove_all(dir);
}

std::string recipe_error(const json& model) {
  const json j = {{"model", model},
                  {"data", {{"train", "/nonexistent/train.bin"}}},
                  {"train", {{"steps", 2}, {"batch_size", 1}, {"seq_len", 8}}},
                  {"output", {{"dir", "/nonexistent/run"}}}};
  try {
    tr::parse_recipe(j.dump(), "r.json");
  } catch (const flashkit::Error& e) {
    EXPECT_EQ(e.status(), flashkit::Status::invalid_argument);
    return e.what();
  }
  return "";
}

TEST(TrainMamba, BadRecipesAreRefusedNamingTheField) {
  EXPECT_EQ(recipe_error(tiny_mamba_json()), "");
  json j = tiny_mamba_json();
  j["intermediate_size"] = 20;  // expand 2 x hidden 8 = 16
  EXPECT_NE(recipe_error(j).find("\"intermediate_size\" 20 is not expand (2) x hidden_size (8) = 16"), std::string::npos)
      << recipe_error(j);
  j = tiny_mamba_json();
  j["use_bias"] = true;
  EXPECT_NE(recipe_error(j).find("use_bias: training supports Mamba models without in_proj / out_proj biases"),
            std::string::npos)
      << recipe_error(j);
  j = tiny_mamba_json();
  j["time_step_rank"] = 17;  // more than d_inner = 16
  EXPECT_NE(recipe_error(j).find("time_step_rank"), std::string::npos) << recipe_error(j);
  j = tiny_mamba_json();
  j["state_size"] = 0;
  EXPECT_NE(recipe_error(j).find("state_size"), std::string::npos) << recipe_error(j);
}

// A backend without the selective-scan ops (the CUDA trainer today) is refused up front, naming the way out.
class NoSsmBackend final : public Backend {
 public:
  NoSsmBackend() : cpu_(tr::make_cpu_backend(DType::f32, 1)) {}
  flashkit::Device device() const override { return flashkit::Device::cuda; }
  std::string name() const override { return "test (no ssm)"; }
  DType param_dtype() const override { return DType::f32; }
  DType act_dtype() const override { return DType::f32; }
  Mat alloc(DType d, int64_t r, int64_t c) override { return cpu_->alloc(d, r, c); }
  void free(Mat& m) override { cpu_->free(m); }
  void upload(const Mat& d, const void* h, size_t n) override { cpu_->upload(d, h, n); }
  void download(void* h, const Mat& s, size_t n) override { cpu_->download(h, s, n); }
  void zero(const Mat& m) override { cpu_->zero(m); }
  void copy(const Mat& d, const Mat& s) override { cpu_->copy(d, s); }
  void embedding_fwd(const Mat&, const Mat&, const Mat&, float) override {}
  void embedding_bwd(const Mat&, const Mat&, const Mat&, float) override {}
  void rmsnorm_fwd(const Mat&, const Mat&, const Mat&, const Mat&, int64_t, float, bool) override {}
  void rmsnorm_bwd(const Mat&, const Mat&, const Mat&, const Mat&, const Mat&, const Mat&, int64_t, bool, bool) override {}
  void matmul(const Mat&, bool, const Mat&, bool, const Mat&, float, float) override {}
  void rope_fwd(const Mat&, int64_t, int64_t, int64_t, const Mat&, const Mat&) override {}
  void rope_bwd(const Mat&, int64_t, int64_t, int64_t, const Mat&, const Mat&) override {}
  void attention_fwd(const Mat&, const Mat&, const Mat&, const Mat&, const Mat&, const tr::AttnShape&) override {}
  void attention_bwd(const Mat&, const Mat&, const Mat&, const Mat&, const Mat&, const Mat&, const Mat&, const Mat&,
                     const Mat&, const tr::AttnShape&) override {}
  void gated_act_fwd(const Mat&, const Mat&, tr::Act) override {}
  void gated_act_bwd(const Mat&, const Mat&, const Mat&, tr::Act) override {}
  void add_inplace(const Mat&, const Mat&) override {}
  void cross_entropy_chunk(const Mat&, const Mat&, const Mat&, float, float) override {}
  double global_norm_sq(const Mat&) override { return 0; }
  void adamw_step(const Mat&, const Mat&, const Mat&, const Mat&, const tr::AdamW&) override {}
  void scale_inplace(const Mat&, float) override {}
  bool all_finite(const Mat&) override { return true; }

 private:
  std::unique_ptr<Backend> cpu_;
};

TEST(TrainMamba, ABackendWithoutScanOpsIsRefused) {
  NoSsmBackend be;
  try {
    TrainModel m(cfg_of(tiny_mamba_json()), be, 1, 8);
    FAIL() << "no error";
  } catch (const flashkit::Error& e) {
    EXPECT_EQ(e.status(), flashkit::Status::unsupported);
    EXPECT_NE(std::string(e.what()).find("model_type mamba: the test (no ssm) training backend has no selective-scan ops"),
              std::string::npos)
        << e.what();
  }
  Mat none;
  EXPECT_THROW(be.selective_scan_fwd(none, none, none, none, none, none, none, none, none, 1), flashkit::Error);
}

}  // namespace

namespace {

// Two runs of the same step give the same gradient bit for bit (the resume guarantee of docs/training.md): the
// scan's backward sums dB and dC over channels, which must not depend on the threads' timing.
TEST(TrainMamba, StepIsBitReproducible) {
  json j = tiny_mamba_json(64);
  j["hidden_size"] = 32;
  j["state_size"] = 16;
  const auto cfg = cfg_of(j);
  const int64_t B = 4, T = 48;
  const auto ids = random_ids(B * T, 64, 1, false), tg = random_ids(B * T, 64, 2, false);
  std::vector<double> first;
  for (int run = 0; run < 6; ++run) {
    auto be = tr::make_cpu_backend(DType::f32, 2);
    TrainModel m(cfg, *be, B, T);
    m.init_weights(5);
    tr::upload_converted(*be, m.params(), random_params(m, 8));
    be->zero(m.grads());
    m.step(ids.data(), tg.data(), B, T, true, 1.f / float(B * T));
    const auto g = get(*be, m.grads());
    if (run == 0) first = g;
    else ASSERT_EQ(std::memcmp(g.data(), first.data(), g.size() * 8), 0) << "run " << run;
  }
}

}  // namespace

namespace {

// A Mamba run stopped halfway and resumed equals the uninterrupted one bit for bit (params and Adam moments).
TEST(TrainMamba, ResumeIsBitIdentical) {
  const fs::path dir = temp_dir("mamba_resume");
  json model = tiny_mamba_json(48);
  model["hidden_size"] = 32;
  model["state_size"] = 16;
  write_corpus(dir / "train.bin", 48, 6000, 4);
  tr::TrainOptions o;
  o.quiet = true;
  auto run = [&](const std::string& out) {
    tr::Recipe r = recipe(model, dir, 16);
    r.output_dir = dir / out;
    r.model_dir = dir / out / "model";
    r.grad_accum = 2;
    return tr::train(r, o);
  };
  const auto full = run("full");
  o.stop_at = 8;
  run("parts");
  o.stop_at = 0;
  o.resume = dir / "parts";
  const auto second = run("parts");
  EXPECT_EQ(second.steps, 16);
  auto read = [](const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  };
  const std::string a = read(full.checkpoint_dir / "state.safetensors"), b = read(second.checkpoint_dir / "state.safetensors");
  ASSERT_GT(a.size(), 0u);
  EXPECT_TRUE(a == b) << "the resumed run's state differs from the uninterrupted run's";
  fs::remove_all(dir);
}

}  // namespace
