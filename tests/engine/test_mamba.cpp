// Mamba models in the engine (C++ side): the recurrent state across prefill chunks and decode steps, what a Mamba
// session refuses (rollback, token trees, paged serving, backends without SSM ops) and bad checkpoints. The logits
// against an independent numpy forward are in test_mamba_fidelity.py.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>
#include <string>
#include <vector>

#include "engine/paged.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "mamba_checkpoint.hpp"

namespace fs = std::filesystem;
using namespace flashkit;

namespace {

constexpr int64_t kVocab = 50, kH = 32, kN = 4, kR = 2, kW = 4, kLayers = 2;  // d_inner = 2 * kH

// A tiny random MambaForCausalLM checkpoint (HF names); `skip` leaves one tensor out.
fs::path make_mamba(const std::string& name, const std::string& skip = "", const std::string& extra_config = "") {
  const fs::path dir = fs::temp_directory_path() / ("flashkit_mamba_" + name + "_" + std::to_string(::getpid()));
  fk_test::TinyMamba m;
  m.vocab = kVocab, m.hidden = kH, m.d_state = kN, m.layers = kLayers, m.conv = kW, m.dt_rank = kR;
  m.skip = skip, m.extra_config = extra_config;
  fk_test::write_tiny_mamba(dir, m);
  return dir;
}

template <class F>
std::string error_of(F&& f, Status want) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), want) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

const std::vector<int32_t> kIds = {1, 7, 33, 2, 49, 0, 12, 12, 5, 40, 3};

TEST(Mamba, ChunksAndDecodeStepsGiveTheOnePassLogits) {
  const fs::path dir = make_mamba("chunks");
  auto m = Model::load(dir, {});
  EXPECT_EQ(m->info().architecture, "mamba");
  auto s = m->new_session();
  s->prefill(kIds, true);
  const std::vector<float> all = s->all_logits();
  LoadOptions small;
  small.prefill_chunk = 3;  // chunks of 3 rows carry conv and SSM state between forward passes
  auto m3 = Model::load(dir, small);
  auto s3 = m3->new_session();
  s3->prefill(std::span<const int32_t>(kIds).first(7));
  for (size_t i = 7; i < kIds.size(); ++i) s3->decode(kIds[i]);
  const auto last = s3->logits();
  double err = 0, ref = 0;
  for (int64_t v = 0; v < kVocab; ++v) {
    const float want = all[(kIds.size() - 1) * kVocab + size_t(v)];
    err = std::max(err, double(std::fabs(last[size_t(v)] - want)));
    ref = std::max(ref, double(std::fabs(want)));
  }
  EXPECT_LE(err / ref, 1e-5);
  EXPECT_GT(ref, 0.1);
  // forward_all_logits (perplexity, verification steps): the same rows as a prefill with every row's logits
  auto s2 = m->new_session();
  s2->forward_all_logits(kIds);
  ASSERT_EQ(s2->all_logits().size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) ASSERT_NEAR(s2->all_logits()[i], all[i], 1e-4f * (1 + std::fabs(all[i])));
  fs::remove_all(dir);
}

TEST(Mamba, RollbackTreesAndPagedServingAreRefused) {
  const fs::path dir = make_mamba("refuse");
  auto m = Model::load(dir, {});
  auto s = m->new_session();
  s->prefill(kIds);
  const std::vector<float> first(s->logits().begin(), s->logits().end());
  EXPECT_NE(error_of([&] { s->truncate(4); }, Status::unsupported).find("cannot roll back to 4 of 11 tokens"),
            std::string::npos);
  s->truncate(11);  // no-op
  EXPECT_EQ(s->position(), 11);
  s->truncate(0);  // = reset: the state is cleared
  s->prefill(kIds);
  EXPECT_EQ(std::vector<float>(s->logits().begin(), s->logits().end()), first);
  EXPECT_FALSE(s->supports_tree());
  GenerateOptions go;
  go.max_new_tokens = 4;
  go.speculative.lookup = 2;  // refused before any token is generated
  int emitted = 0;
  EXPECT_NE(error_of([&] { s->reset(); generate(*s, kIds, go, [&](int32_t) { return ++emitted > 0; }); },
                     Status::unsupported).find("speculative decoding: a mamba session"),
            std::string::npos);
  EXPECT_EQ(emitted, 0);
  engine::PagedRunnerOptions po;
  po.num_blocks = 4;
  EXPECT_NE(error_of([&] { engine::make_paged_runner(*m, po); }, Status::unsupported).find("model_type mamba"),
            std::string::npos);
  EXPECT_NE(error_of([&] { engine::paged_kv_bytes_per_token(*m); }, Status::unsupported).find("paged serving"),
            std::string::npos);
  LoadOptions rw;
  rw.random_weights = true;
  EXPECT_NE(error_of([&] { Model::load(dir, rw); }, Status::invalid_argument).find("--random-weights"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(Mamba, BadCheckpointsNameWhatIsWrong) {
  {
    const fs::path dir = make_mamba("noconv", "backbone.layers.1.mixer.conv1d.weight");
    EXPECT_NE(error_of([&] { Model::load(dir, {}); }, Status::invalid_argument)
                  .find("missing tensor \"backbone.layers.1.mixer.conv1d.weight\" (needed by mamba)"),
              std::string::npos);
    fs::remove_all(dir);
  }
  {
    const fs::path dir = make_mamba("noalog", "backbone.layers.0.mixer.A_log");
    EXPECT_NE(error_of([&] { Model::load(dir, {}); }, Status::invalid_argument).find("backbone.layers.0.mixer.A_log"),
              std::string::npos);
    fs::remove_all(dir);
  }
  {
    const fs::path dir = make_mamba("inter", "", R"(, "intermediate_size": 48)");
    EXPECT_NE(error_of([&] { Model::load(dir, {}); }, Status::invalid_argument)
                  .find("\"intermediate_size\" 48 is not expand (2) x hidden_size (32) = 64"),
              std::string::npos);
    fs::remove_all(dir);
  }
  {
    const fs::path dir = make_mamba("rank", "", R"(, "use_conv_bias": false)");  // the bias is then not read
    EXPECT_NO_THROW(Model::load(dir, {}));
    fs::remove_all(dir);
  }
}

// The CUDA backend's Mamba ops (the fused scan, its decode step, conv1d; f32 weights) against the CPU backend:
// a prefill with every row's logits, then decode steps (CUDA-graph replays) continuing the state. Skipped without a
// CUDA device.
TEST(MambaCuda, MatchesCpuPrefillAndDecode) {
  if (cuda_device_count() <= 0) GTEST_SKIP() << "no CUDA device (or no CUDA build)";
  const fs::path dir = make_mamba("cuda");
  LoadOptions cpu, gpu;
  cpu.dtype = gpu.dtype = "f32";
  gpu.device = "cuda";
  auto mc = Model::load(dir, cpu);
  auto mg = Model::load(dir, gpu);
  auto sc = mc->new_session();
  auto sg = mg->new_session();
  sc->prefill(std::span<const int32_t>(kIds).first(8), true);
  sg->prefill(std::span<const int32_t>(kIds).first(8), true);
  auto rel = [](std::span<const float> a, std::span<const float> b) {
    double e = 0, r = 1e-30;
    for (size_t i = 0; i < a.size(); ++i) {
      e = std::max(e, double(std::fabs(a[i] - b[i])));
      r = std::max(r, double(std::fabs(b[i])));
    }
    return e / r;
  };
  // The CUDA backend keeps weights in bf16 (converted at load) and rounds GEMM inputs to bf16: a bf16-level bound.
  EXPECT_LE(rel(sg->all_logits(), sc->all_logits()), 3e-2);
  for (size_t i = 8; i < kIds.size(); ++i) {
    sc->decode(kIds[i]);
    sg->decode(kIds[i]);
    EXPECT_LE(rel(sg->logits(), sc->logits()), 3e-2) << "decode step " << i;
  }
  fs::remove_all(dir);
}

}  // namespace
