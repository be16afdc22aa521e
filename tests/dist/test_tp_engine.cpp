// Tensor-parallel inference (engine/tp.hpp, docs/distributed.md, "Tensor-parallel inference") against one rank: Llama, Gemma 3, Qwen2 (q/k/v
// biases), Qwen3 (q/k norms) and Llama with an o_proj bias on tiny random checkpoints, the transformers fixtures and
// the shipped models/target, at 2 and 4 thread ranks. The ranks' partial sums are added in a different order than the
// one-rank matmul, so logits agree to a tolerance (1e-5 relative in f32), not bitwise; greedy tokens are identical.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/config.hpp"
#include "engine/tp.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path kRoot = FLASHKIT_SOURCE_DIR;
const fs::path kModels = kRoot / "tests" / "data" / "models";

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("flashkit_tp_test_" + std::to_string(std::random_device{}()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

json read_json(const fs::path& p) { return json::parse(std::ifstream(p)); }

// A random tiny model of one family: the tiny fixtures' configs (4 heads, 2 KV heads, hidden 64), changed as asked.
fs::path write_config(const TempDir& d, const std::string& arch) {
  json j = read_json(kModels / (arch == "gemma3_text" ? "tiny-gemma3" : "tiny-llama") / "config.json");
  j["model_type"] = arch == "llama+bias" ? "llama" : arch;
  if (arch == "llama+bias") j["attention_bias"] = true;  // q/k/v and o_proj biases: o's bias once, on rank 0
  if (arch == "llama-mha") j["model_type"] = "llama", j["num_key_value_heads"] = 4;
  j["intermediate_size"] = 176;  // divides by 2 and 4
  std::ofstream(d.path / "config.json") << j.dump();
  return d.path;
}

double rel_err(std::span<const float> a, std::span<const float> ref) {
  double d = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    d += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    r += double(ref[i]) * ref[i];
  }
  return std::sqrt(d / r);
}

std::vector<std::vector<int32_t>> prompts(int64_t vocab) {
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> ps;
  for (int len : {1, 5, 23}) {
    std::vector<int32_t> p;
    for (int i = 0; i < len; ++i) p.push_back(int32_t(rng() % uint32_t(vocab)));
    ps.push_back(p);
  }
  return ps;
}

// Greedy tokens of every prompt identical, and the prefill and decode logits within `tol` of one rank's.
void expect_same_as_one_rank(const fs::path& dir, flashkit::LoadOptions lo, int tp, double tol, int steps = 8) {
  lo.max_context = 64;
  lo.prefill_chunk = 16;  // a 23-token prompt runs in two chunks
  auto one = flashkit::Model::load(dir, lo);
  lo.tp = tp;
  auto many = flashkit::Model::load(dir, lo);
  EXPECT_EQ(many->info().tp, tp);
  EXPECT_EQ(many->info().num_heads, one->info().num_heads);
  const int64_t V = one->info().vocab_size;
  for (const auto& p : prompts(V)) {
    auto a = one->new_session(), b = many->new_session();
    a->prefill(p);
    b->prefill(p);
    EXPECT_LT(rel_err(b->logits(), a->logits()), tol) << dir << " tp " << tp << " prompt of " << p.size();
    for (int s = 0; s < 3; ++s) {
      const int32_t t = int32_t((p.back() + 31 * s) % V);
      a->decode(t);
      b->decode(t);
      EXPECT_LT(rel_err(b->logits(), a->logits()), tol) << dir << " tp " << tp << " decode step " << s;
    }
    flashkit::GenerateOptions g;
    g.max_new_tokens = steps;
    g.temperature = 0;
    g.stop_at_eos = false;
    a->reset();
    b->reset();
    EXPECT_EQ(flashkit::generate(*b, p, g).tokens, flashkit::generate(*a, p, g).tokens)
        << dir << " tp " << tp << " prompt of " << p.size();
  }
}

class TpRandom : public ::testing::TestWithParam<std::string> {};

TEST_P(TpRandom, TwoAndFourRanksMatchOneRank) {
  TempDir d;
  const fs::path dir = write_config(d, GetParam());
  for (int tp : {2, 4}) {  // 4 ranks > 2 KV heads: each KV head replicated on two ranks
    flashkit::LoadOptions lo;
    lo.random_weights = true;
    lo.dtype = "f32";
    expect_same_as_one_rank(dir, lo, tp, 2e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(TpFamilies, TpRandom,
                         ::testing::Values("llama", "llama+bias", "llama-mha", "qwen2", "qwen3", "gemma3_text"),
                         [](const auto& i) {
                           std::string n = i.param;
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

// The transformers fixtures (real checkpoints), f32 and bf16 storage (bf16 weights, f32 compute on the CPU).
TEST(TpCheckpoint, TinyFixturesMatchOneRank) {
  for (const char* name : {"tiny-llama", "tiny-gemma3", "tiny-llama-bf16"}) {
    flashkit::LoadOptions lo;
    expect_same_as_one_rank(kModels / name, lo, 2, 2e-5);
  }
}

// The shipped model (8 heads, 2 KV heads, intermediate 1536): 2 ranks split the KV heads, 4 replicate them.
TEST(TpCheckpoint, ShippedTargetMatchesOneRank) {
  for (int tp : {2, 4}) expect_same_as_one_rank(kRoot / "models" / "target", {}, tp, 2e-5, 12);
}

// ---------------------------------------------------------------------------------------------- CUDA
// Two thread ranks sharing the one GPU of the test machine (the "threads" communicator stages the all-reduce through
// host memory). f32 weights (cuBLAS may round prefill GEMM inputs to TF32): one rank's logits to 1e-3; bf16 (the
// shipped checkpoint, bf16 prefill activations): 2e-2; greedy tokens identical (12 steps on models/target).
TEST(TpCuda, RandomAndShippedModelsMatchOneRank) {
  if (flashkit::cuda_device_count() <= 0) GTEST_SKIP() << "no CUDA device (or no CUDA build)";
  for (const char* arch : {"llama", "qwen2", "gemma3_text"}) {
    TempDir d;
    flashkit::LoadOptions lo;
    lo.device = "cuda";
    lo.random_weights = true;
    lo.dtype = "f32";
    expect_same_as_one_rank(write_config(d, arch), lo, 2, 1e-3);
  }
  flashkit::LoadOptions lo;
  lo.device = "cuda";
  expect_same_as_one_rank(kRoot / "models" / "target", lo, 2, 2e-2, 12);
}

// ---------------------------------------------------------------------------------------------- bad input
template <typename F>
void expect_error(F&& f, std::vector<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "expected flashkit::Error";
  } catch (const flashkit::Error& e) {
    const std::string m = e.what();
    for (auto& n : needles) EXPECT_NE(m.find(n), std::string::npos) << "message \"" << m << "\" lacks \"" << n << "\"";
  }
}

TEST(TpErrors, ConfigsThatDoNotSplitAreRefusedNamingTpAndTheField) {
  TempDir d;
  const fs::path dir = write_config(d, "llama");
  auto load = [&](int tp) {
    flashkit::LoadOptions lo;
    lo.random_weights = true;
    lo.tp = tp;
    flashkit::Model::load(dir, lo);
  };
  expect_error([&] { load(3); }, {"--tp 3", "num_attention_heads = 4", "not divisible"});
  expect_error([&] { load(8); }, {"--tp 8", "num_attention_heads = 4"});
  expect_error([&] { load(0); }, {"--tp 0", "[1, 64]"});
  expect_error([&] { load(-2); }, {"--tp -2"});
  expect_error([&] { load(65); }, {"--tp 65"});
  expect_error([&] {  // checked before it is divided among the ranks
    flashkit::LoadOptions lo;
    lo.random_weights = true;
    lo.tp = 2;
    lo.threads = -1;
    flashkit::Model::load(dir, lo);
  }, {"threads"});
  json j = read_json(dir / "config.json");
  j["intermediate_size"] = 175;
  std::ofstream(dir / "config.json") << j.dump();
  expect_error([&] { load(2); }, {"--tp 2", "intermediate_size = 175"});
}

// The shard plan as a pure function: query heads, KV heads (split or replicated) and MLP columns of each rank.
TEST(TpShard, PlanCoversEveryHeadAndColumnOnce) {
  flashkit::engine::ModelConfig c;
  c.num_heads = 8, c.num_kv_heads = 2, c.intermediate_size = 96, c.head_dim = 4;
  for (int tp : {1, 2, 4, 8}) {
    int64_t heads = 0, ff = 0;
    for (int r = 0; r < tp; ++r) {
      const auto s = flashkit::engine::plan_tp_shard(c, tp, r);
      EXPECT_EQ(s.head0, heads);
      EXPECT_EQ(s.ff0, ff);
      heads += s.heads, ff += s.ff;
      // Every query head of the rank uses one of the rank's KV heads (GQA groups of num_heads / num_kv_heads).
      for (int64_t h = s.head0; h < s.head0 + s.heads; ++h) {
        const int64_t kv = h / (c.num_heads / c.num_kv_heads);
        EXPECT_GE(kv, s.kv_head0);
        EXPECT_LT(kv, s.kv_head0 + s.kv_heads);
      }
      EXPECT_EQ(s.kv_replicated, tp > 2);
    }
    EXPECT_EQ(heads, 8);
    EXPECT_EQ(ff, 96);
  }
  expect_error([&] { flashkit::engine::plan_tp_shard(c, 16, 0); }, {"--tp 16", "num_attention_heads = 8"});
  c.num_heads = 12, c.num_kv_heads = 3;
  expect_error([&] { flashkit::engine::plan_tp_shard(c, 4, 0); }, {"--tp 4", "num_key_value_heads = 3"});
  c.num_heads = 12, c.num_kv_heads = 6, c.intermediate_size = 96;
  expect_error([&] { flashkit::engine::plan_tp_shard(c, 4, 0); }, {"--tp 4", "num_key_value_heads = 6"});
}

// Column slices copy the right elements (f32 and bf16), row slices point at the right rows.
TEST(TpShard, WeightSlices) {
  std::vector<float> w(5 * 6);
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(i) + 0.5f;
  flashkit::model::WeightView v;
  v.name = "w";
  v.type = flashkit::model::WeightType::f32;
  v.shape = {5, 6};
  v.data = w.data();
  v.nbytes = w.size() * 4;
  std::vector<char> store;
  const auto c = flashkit::engine::tp_col_slice(v, 2, 3, store);
  ASSERT_EQ(c.shape, (std::vector<int64_t>{5, 3}));
  for (int r = 0; r < 5; ++r)
    for (int k = 0; k < 3; ++k) EXPECT_EQ(static_cast<const float*>(c.data)[r * 3 + k], w[size_t(r * 6 + 2 + k)]);
  const auto rs = flashkit::engine::tp_row_slice(v, 3, 2);
  ASSERT_EQ(rs.shape, (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(static_cast<const float*>(rs.data)[0], w[18]);
  EXPECT_EQ(rs.nbytes, size_t(2 * 6 * 4));
  std::vector<uint16_t> h(5 * 6);
  for (size_t i = 0; i < h.size(); ++i) h[i] = uint16_t(i);
  v.type = flashkit::model::WeightType::bf16;
  v.data = h.data();
  const auto hc = flashkit::engine::tp_col_slice(v, 4, 2, store);
  EXPECT_EQ(static_cast<const uint16_t*>(hc.data)[2], h[6 + 4]);
}

// Mamba has no heads to split: refused naming --tp.
TEST(TpErrors, MambaRefused) {
  flashkit::engine::ModelConfig c;
  c.arch = flashkit::engine::Arch::mamba;
  expect_error([&] { flashkit::engine::plan_tp_shard(c, 2, 0); }, {"--tp 2", "mamba"});
}

}  // namespace
