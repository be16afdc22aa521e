// CPU offload of weights on the CUDA backend (docs/serving.md "CPU offload"): a model whose last layers stream from
// pinned host memory computes exactly what the resident model computes. The same kernels read the same bf16 bytes
// (only from a slot instead of their own buffer), so logits must be BITWISE equal for 0, 1 (one slot that keeps its
// layer), 3 (fewer than two per slot: a slot keeps its layer across passes), 4 and all 6 layers offloaded (every
// slot refilled every pass), for chunked prefill (all logits), teacher-forced decode steps and greedy generation
// (device argmax), with CUDA graphs on (decode steps captured with their memcpy nodes) and off, f32 and bf16
// activations, and the batched paged steps of serving. Skips when no CUDA device is visible. CPU-side plan and option
// tests: test_offload_plan.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "flashkit/serve.hpp"

namespace {

namespace fs = std::filesystem;
const std::string kData = FLASHKIT_TEST_DATA;

bool have_cuda() {
  if (flashkit::cuda_device_count() <= 0) return false;
  try {
    flashkit::Model::load(kData + "/models/tiny-llama", {.device = "cuda", .random_weights = true});
    return true;
  } catch (const flashkit::Error& e) {
    if (e.status() == flashkit::Status::unsupported) return false;
    throw;
  }
}

// tiny-llama's config with six layers (random weights: every load with the same seed has the same weights); `wide`:
// 30 MB layers, whose copies take far longer than their compute (a missing wait reads a half-copied slot).
struct SixLayers {
  fs::path dir;
  explicit SixLayers(bool wide = false) {
    dir = fs::temp_directory_path() / ("flashkit_offload_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir);
    std::ifstream f(kData + "/models/tiny-llama/config.json");
    nlohmann::json j = nlohmann::json::parse(f);
    j["num_hidden_layers"] = 6;
    if (wide) {
      j["hidden_size"] = 1024, j["intermediate_size"] = 4096, j["num_attention_heads"] = 16;
      j["num_key_value_heads"] = 4, j["head_dim"] = 64;
    }
    std::ofstream(dir / "config.json") << j.dump();
  }
  ~SixLayers() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

struct Out {
  std::vector<float> prefill;  // [P, V]
  std::vector<float> decode;   // steps x V
  std::vector<int32_t> greedy;
  flashkit::ModelInfo info;
};

Out run(const fs::path& dir, const std::string& dtype, int64_t offload, bool graphs) {
  flashkit::LoadOptions o;
  o.device = "cuda";
  o.dtype = dtype;
  o.random_weights = true;
  o.random_seed = 7;
  o.prefill_chunk = 16;  // a 37-token prompt: three passes per prefill
  o.offload_layers = offload;
  o.tuning = flashkit::default_tuning();
  o.tuning->cuda_graphs = graphs;
  auto model = flashkit::Model::load(dir, o);
  Out r;
  r.info = model->info();
  std::vector<int32_t> prompt(37);
  std::mt19937 rng(3);
  for (auto& t : prompt) t = int32_t(rng() % 500) + 1;
  auto s = model->new_session();
  s->prefill(prompt, /*all_logits=*/true);
  r.prefill = s->all_logits();
  for (int i = 0; i < 6; ++i) {  // decode steps (graph-captured from the second replay on)
    s->decode(int32_t(rng() % 500) + 1);
    r.decode.insert(r.decode.end(), s->logits().begin(), s->logits().end());
  }
  auto g = model->new_session();
  flashkit::GenerateOptions go;
  go.max_new_tokens = 12;
  go.temperature = 0;
  go.stop_at_eos = false;
  r.greedy = flashkit::generate(*g, prompt, go).tokens;
  return r;
}

bool bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CudaOffload, LogitsBitwiseEqualForAnyOffloadedCount) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  SixLayers m;
  for (const char* dtype : {"bf16", "f32"}) {
    for (bool graphs : {true, false}) {
      const Out ref = run(m.dir, dtype, 0, graphs);
      EXPECT_EQ(ref.info.offloaded_layers, 0);
      for (int64_t n : {1, 3, 4, 6}) {
        SCOPED_TRACE(std::string(dtype) + (graphs ? " graphs" : " eager") + ", offloaded " + std::to_string(n));
        const Out got = run(m.dir, dtype, n, graphs);
        EXPECT_EQ(got.info.offloaded_layers, n);
        EXPECT_GT(got.info.host_pinned_bytes, 0);
        EXPECT_TRUE(bitwise(got.prefill, ref.prefill)) << "prefill logits differ";
        EXPECT_TRUE(bitwise(got.decode, ref.decode)) << "decode logits differ";
        EXPECT_EQ(got.greedy, ref.greedy);
        if (n >= 3) EXPECT_LT(got.info.device_weight_bytes, ref.info.device_weight_bytes);  // 2 slots < n layers
      }
    }
  }
}

// Layers whose copies dominate the step: the stream order, not luck, keeps the logits equal.
TEST(CudaOffload, WideLayersStreamInOrder) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  SixLayers m(/*wide=*/true);
  const Out ref = run(m.dir, "bf16", 0, true);
  for (int64_t n : {4, 6}) {
    SCOPED_TRACE("offloaded " + std::to_string(n));
    const Out got = run(m.dir, "bf16", n, true);
    EXPECT_TRUE(bitwise(got.prefill, ref.prefill)) << "prefill logits differ";
    EXPECT_TRUE(bitwise(got.decode, ref.decode)) << "decode logits differ";
    EXPECT_EQ(got.greedy, ref.greedy);
  }
}

// serve::Engine's batched paged steps over an offloaded model: the same greedy tokens as the resident model.
TEST(CudaOffload, PagedServingStepsMatch) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  SixLayers m;
  auto tokens_of = [&](int64_t offload) {
    flashkit::LoadOptions o;
    o.device = "cuda", o.dtype = "bf16", o.random_weights = true, o.random_seed = 7, o.offload_layers = offload;
    auto model = flashkit::Model::load(m.dir, o);
    flashkit::serve::EngineOptions eo;
    eo.background = false;
    eo.kv_memory = int64_t(8) << 20;
    auto engine = flashkit::serve::Engine::create(model, eo);
    std::vector<std::vector<int32_t>> out(3);
    for (int r = 0; r < 3; ++r) {
      flashkit::serve::Request q;
      for (int i = 0; i < 9 + 5 * r; ++i) q.prompt.push_back(int32_t((i * 37 + r * 11) % 500) + 1);
      q.max_tokens = 10;
      q.sampling.temperature = 0;
      q.stop_at_eos = false;
      q.on_token = [&out, r](int32_t t) {
        out[size_t(r)].push_back(t);
        return true;
      };
      engine->submit(std::move(q));
    }
    while (engine->step()) {
    }
    return out;
  };
  const auto ref = tokens_of(0);
  EXPECT_EQ(ref[0].size(), 10u);
  EXPECT_EQ(tokens_of(4), ref);
}

TEST(CudaOffload, BudgetAndErrors) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  SixLayers m;
  flashkit::LoadOptions o;
  o.device = "cuda", o.dtype = "bf16", o.random_weights = true;
  o.gpu_memory_bytes = int64_t(1) << 40;  // everything fits: nothing offloaded
  EXPECT_EQ(flashkit::Model::load(m.dir, o)->info().offloaded_layers, 0);
  o.gpu_memory_bytes = 1024;  // nothing fits
  try {
    flashkit::Model::load(m.dir, o);
    ADD_FAILURE() << "a 1 KiB budget was accepted";
  } catch (const flashkit::Error& e) {
    EXPECT_EQ(e.status(), flashkit::Status::out_of_memory);
    EXPECT_NE(std::string(e.what()).find("--gpu-memory"), std::string::npos) << e.what();
  }
  o.gpu_memory_bytes = 0;
  o.offload_layers = 7;  // above the layer count
  try {
    flashkit::Model::load(m.dir, o);
    ADD_FAILURE() << "7 of 6 layers offloaded";
  } catch (const flashkit::Error& e) {
    EXPECT_EQ(e.status(), flashkit::Status::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("0..6"), std::string::npos) << e.what();
  }
}

}  // namespace
