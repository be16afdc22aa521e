// Engine tests beyond fidelity: config parsing (transformers 4 and 5 spellings), the sliding-window ring cache,
// chunked prefill, the CPU matrix kernels per ISA, sampling reproducibility, random-weight models of every
// architecture, and bad input (clear flashkit::Error, never a crash).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend.hpp"
#include "engine/config.hpp"
#include "engine/cpu/gemv.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kData = FLASHKIT_TEST_DATA;
const std::string kModels = kData + "/models";
const std::string kConfigs = kData + "/../../models/configs";

json read_json(const std::string& p) {
  std::ifstream f(p);
  return json::parse(f);
}

double rel_err(const float* a, const float* ref, int64_t n) {
  double d = 0, r = 0;
  for (int64_t i = 0; i < n; ++i) {
    d += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    r += double(ref[i]) * ref[i];
  }
  return std::sqrt(d / std::max(r, 1e-300));
}

std::vector<int32_t> prompt_of(const std::string& name) {
  return read_json(kModels + "/" + name + "/expected.json")["prompt_ids"].get<std::vector<int32_t>>();
}

// A scratch directory removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("flashkit_engine_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                        "_" + std::to_string(std::random_device{}()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  void copy_from(const std::string& dir) {
    for (auto& e : fs::directory_iterator(dir)) fs::copy_file(e.path(), path / e.path().filename());
  }
  void write(const std::string& name, const std::string& text) { std::ofstream(path / name) << text; }
};

// Expects a flashkit::Error whose message contains every one of `needles`.
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

}  // namespace

// ------------------------------------------------------------------------------------------------ config
TEST(EngineConfig, Gemma3V4RealConfig) {
  auto c = flashkit::engine::load_config(kConfigs + "/gemma-3-270m.json");
  EXPECT_EQ(c.arch, flashkit::engine::Arch::gemma3);
  EXPECT_EQ(c.num_layers, 18);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.sliding_window, 512);
  EXPECT_TRUE(c.norm_plus_one);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_NEAR(c.attn_scale, 1.0 / 16.0, 1e-12);  // query_pre_attn_scalar 256
  EXPECT_NEAR(c.embed_scale, std::sqrt(640.0), 1e-9);
  for (int i = 0; i < 18; ++i) EXPECT_EQ(c.layer_sliding[size_t(i)], (i + 1) % 6 != 0) << i;
  EXPECT_EQ(c.rope_global.theta, 1e6);
  EXPECT_EQ(c.rope_global.type, "default");
  EXPECT_EQ(c.rope_local.theta, 1e4);
  EXPECT_EQ(c.final_softcap, 0);
  EXPECT_EQ(c.activation, "gelu_tanh");
}

// gemma-3-1b spells the layer pattern as sliding_window_pattern (no layer_types) and lists two EOS ids.
TEST(EngineConfig, Gemma3OneBillionPatternSpelling) {
  auto c = flashkit::engine::load_config(kConfigs + "/gemma-3-1b.json");
  EXPECT_EQ(c.arch, flashkit::engine::Arch::gemma3);
  EXPECT_EQ(c.num_layers, 26);
  EXPECT_EQ(c.hidden_size, 1152);
  ASSERT_EQ(c.layer_sliding.size(), 26u);
  for (int i = 0; i < 26; ++i) EXPECT_EQ(c.layer_sliding[size_t(i)], (i + 1) % 6 != 0) << i;
  EXPECT_EQ(c.eos_ids, (std::vector<int32_t>{1, 106}));
  EXPECT_EQ(c.rope_local.theta, 1e4);
  EXPECT_EQ(c.rope_global.theta, 1e6);
}

TEST(EngineConfig, LlamaV4RealConfig) {
  auto c = flashkit::engine::load_config(kConfigs + "/llama-3.2-1b.json");
  EXPECT_EQ(c.arch, flashkit::engine::Arch::llama);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rope_global.type, "llama3");
  EXPECT_EQ(c.rope_global.factor, 32.0);
  EXPECT_EQ(c.rope_global.original_max_position, 8192);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_FALSE(c.norm_plus_one);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.activation, "silu");
  EXPECT_EQ(c.eos_ids, std::vector<int32_t>{128001});
}

TEST(EngineConfig, Gemma3V5FixtureMatchesV4Spelling) {
  json v5 = read_json(kModels + "/tiny-gemma3/config.json");
  auto c5 = flashkit::engine::parse_config(v5, "v5");
  EXPECT_EQ(c5.rope_global.type, "linear");
  EXPECT_EQ(c5.rope_global.factor, 8.0);
  EXPECT_EQ(c5.rope_global.theta, 1e6);
  EXPECT_EQ(c5.rope_local.type, "default");
  EXPECT_EQ(c5.rope_local.theta, 1e4);
  EXPECT_EQ(c5.sliding_window, 8);
  EXPECT_EQ(c5.attn_softcap, 0);           // transformers does not apply it to Gemma 3
  EXPECT_EQ(c5.attn_softcap_ignored, 50);  // but it was read
  EXPECT_EQ(c5.final_softcap, 30);
  // The same model written the transformers 4 way: rope_theta + rope_scaling (global only) + rope_local_base_freq,
  // and sliding_window_pattern instead of layer_types (pattern 3: layers 2 and 5 global).
  json v4 = v5;
  v4.erase("rope_parameters");
  v4.erase("layer_types");
  v4.erase("_sliding_window_pattern");
  v4["rope_theta"] = 1e6;
  v4["rope_local_base_freq"] = 1e4;
  v4["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  v4["sliding_window_pattern"] = 3;
  auto c4 = flashkit::engine::parse_config(v4, "v4");
  EXPECT_EQ(c4.layer_sliding, c5.layer_sliding);
  EXPECT_EQ(flashkit::engine::rope_inv_freq(c4.rope_global, 64), flashkit::engine::rope_inv_freq(c5.rope_global, 64));
  EXPECT_EQ(flashkit::engine::rope_inv_freq(c4.rope_local, 64), flashkit::engine::rope_inv_freq(c5.rope_local, 64));
  // The linear factor divides the frequencies.
  auto g = flashkit::engine::rope_inv_freq(c5.rope_global, 64);
  EXPECT_FLOAT_EQ(g[0], 1.0f / 8.0f);
}

TEST(EngineConfig, LlamaV5FixtureMatchesV4Spelling) {
  json v5 = read_json(kModels + "/tiny-llama/config.json");
  auto c5 = flashkit::engine::parse_config(v5, "v5");
  json v4 = v5;
  v4["rope_scaling"] = v4["rope_parameters"];
  v4["rope_theta"] = v4["rope_parameters"]["rope_theta"];
  v4["rope_scaling"].erase("rope_theta");
  v4.erase("rope_parameters");
  auto c4 = flashkit::engine::parse_config(v4, "v4");
  EXPECT_EQ(c4.rope_global.type, "llama3");
  EXPECT_EQ(flashkit::engine::rope_inv_freq(c4.rope_global, 16), flashkit::engine::rope_inv_freq(c5.rope_global, 16));
  EXPECT_FALSE(c5.tie_embeddings);
  // llama3 scaling: the highest frequency is untouched, the lowest divided by the factor.
  flashkit::engine::RopeConfig plain = c5.rope_global;
  plain.type = "default";
  auto a = flashkit::engine::rope_inv_freq(c5.rope_global, 16), b = flashkit::engine::rope_inv_freq(plain, 16);
  EXPECT_EQ(a[0], b[0]);
  EXPECT_FLOAT_EQ(a[7], b[7] / 32.0f);
}

TEST(EngineConfig, Rejections) {
  json base = read_json(kModels + "/tiny-llama/config.json");
  auto bad = [&](auto mutate, std::vector<std::string> needles) {
    json j = base;
    mutate(j);
    expect_error([&] { flashkit::engine::parse_config(j, "cfg.json"); }, needles);
  };
  bad([](json& j) { j["model_type"] = "rwkv"; }, {"cfg.json", "unsupported model_type", "rwkv", "mamba"});
  bad([](json& j) { j.erase("model_type"); }, {"model_type"});
  bad([](json& j) { j.erase("hidden_size"); }, {"hidden_size"});
  bad([](json& j) { j["num_key_value_heads"] = 3; }, {"num_key_value_heads"});
  bad([](json& j) { j["hidden_act"] = "relu"; }, {"activation", "relu"});
  bad([](json& j) { j["rope_parameters"]["rope_type"] = "yarn"; }, {"rope_type", "yarn"});
  bad([](json& j) { j["vocab_size"] = -1; }, {"vocab_size"});
  bad([](json& j) { j["layer_types"] = json::array({"full_attention"}); }, {"layer_types"});
  bad([](json& j) { j["mlp_bias"] = true; }, {"mlp_bias"});
}

// ------------------------------------------------------------------------------------------------ kernels
// ||out - x W^T|| / ||x W^T|| with the reference in f64; x [T, K] rows of stride ldx, W [N, K] as doubles, out rows of
// stride ldo.
double matmul_rel_err(const std::vector<float>& x, int64_t ldx, int64_t T, const std::vector<double>& w, int64_t N,
                      int64_t K, const std::vector<float>& out, int64_t ldo) {
  double d = 0, r = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double e = 0;
      for (int64_t k = 0; k < K; ++k) e += double(x[size_t(t * ldx + k)]) * w[size_t(n * K + k)];
      const double o = out[size_t(t * ldo + n)];
      d += (o - e) * (o - e);
      r += e * e;
    }
  return std::sqrt(d / r);
}

TEST(EngineKernels, MatmulEveryIsaAndShape) {
  using flashkit::engine::cpu::Isa;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<Isa> isas = {Isa::scalar};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) isas.push_back(Isa::avx2);
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) isas.push_back(Isa::avx512);
  for (int64_t T : {1, 2, 3, 4, 5, 9, 20})
    for (auto [N, K] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {7, 13}, {33, 64}, {130, 77}, {64, 200}})
      for (bool bf16 : {false, true}) {
        std::vector<float> x(size_t(T * (K + 3))), wf(size_t(N * K));
        std::vector<uint16_t> wb(size_t(N * K));
        std::vector<double> wd(size_t(N * K));
        for (auto& v : x) v = nd(rng);
        for (size_t i = 0; i < wf.size(); ++i) {
          wb[i] = flashkit::f32_to_bf16(nd(rng));
          wf[i] = flashkit::bf16_to_f32(wb[i]);
          wd[i] = wf[i];
        }
        for (Isa isa : isas) {
          std::vector<float> out(size_t(T * (N + 1)), NAN);
          flashkit::engine::cpu::matmul(isa, 2, x.data(), K + 3, T, bf16 ? (const void*)wb.data() : wf.data(),
                                        bf16 ? flashkit::DType::bf16 : flashkit::DType::f32, N, K, out.data(), N + 1);
          EXPECT_LT(matmul_rel_err(x, K + 3, T, wd, N, K, out, N + 1), 1e-5) << "isa " << flashkit::engine::cpu::isa_name(isa) << " T " << T << " N "
                                             << N << " K " << K << " bf16 " << bf16;
        }
      }
}

// Q8_0 weights (GGUF blocks: f16 scale + 32 int8) computed as they are, against the dequantized weights in f64; GEMV
// (T <= 8) and GEMM (T > 8) paths, every ISA, odd row counts and strided, NaN-poisoned outputs.
TEST(EngineKernels, MatmulQ8EveryIsaAndShape) {
  using flashkit::engine::cpu::Isa;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  std::uniform_int_distribution<int> qd(-127, 127);
  std::vector<Isa> isas = {Isa::scalar};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
    isas.push_back(Isa::avx2);
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) isas.push_back(Isa::avx512);
  for (int64_t T : {1, 2, 3, 5, 8, 13})
    for (auto [N, K] : std::vector<std::pair<int64_t, int64_t>>{{1, 32}, {7, 64}, {37, 96}, {130, 640}}) {
      std::vector<float> x(size_t(T * (K + 5)));
      for (auto& v : x) v = nd(rng);
      std::vector<uint8_t> blocks(size_t(N * (K / 32) * 34));
      std::vector<double> wf(size_t(N * K));
      for (int64_t b = 0; b < N * K / 32; ++b) {
        const uint16_t h = flashkit::f32_to_f16(0.01f + 0.02f * std::fabs(nd(rng)));
        std::memcpy(&blocks[size_t(34 * b)], &h, 2);
        for (int j = 0; j < 32; ++j) {
          const int8_t q = int8_t(qd(rng));
          blocks[size_t(34 * b + 2 + j)] = uint8_t(q);
          wf[size_t(32 * b + j)] = double(flashkit::f16_to_f32(h)) * q;
        }
      }
      for (Isa isa : isas) {
        std::vector<float> out(size_t(T * (N + 2)), NAN);
        flashkit::engine::cpu::matmul(isa, 2, x.data(), K + 5, T, blocks.data(), flashkit::DType::f32, N, K,
                                      out.data(), N + 2, /*q8=*/true);
        EXPECT_LT(matmul_rel_err(x, K + 5, T, wf, N, K, out, N + 2), 1e-5) << "isa " << flashkit::engine::cpu::isa_name(isa) << " T " << T << " N " << N
                                           << " K " << K;
      }
    }
}

// The gated activations against the textbook formulas in double (gelu with tanh, as transformers writes it; where
// 1 + tanh cancels to 0 in double the absolute tolerance covers the exact, tiny, sigmoid-form value).
TEST(EngineKernels, GatedActivationsEveryIsa) {
  using flashkit::engine::cpu::Isa;
  std::vector<Isa> isas = {Isa::scalar};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) isas.push_back(Isa::avx2);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> ud(-12.f, 12.f);
  const int64_t T = 3, F = 37;
  std::vector<float> gu(size_t(T * 2 * F));
  for (auto& v : gu) v = ud(rng);
  gu[0] = 0.f, gu[1] = -0.f, gu[2] = 1e-8f, gu[3] = -100.f, gu[4] = 100.f;
  for (bool silu : {false, true})
    for (Isa isa : isas) {
      std::vector<float> out(size_t(T * F), NAN);
      flashkit::engine::cpu::gated_act(isa, 2, gu.data(), 2 * F, out.data(), F, T, F, silu);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t f = 0; f < F; ++f) {
          const double g = gu[size_t(t * 2 * F + f)], u = gu[size_t(t * 2 * F + F + f)];
          const double a = silu ? g / (1 + std::exp(-g))
                                : 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)));
          const double want = a * u, got = out[size_t(t * F + f)];
          EXPECT_NEAR(got, want, 2e-6 * std::fabs(want) + 1e-9) << "silu " << silu << " isa "
                                                                 << flashkit::engine::cpu::isa_name(isa) << " g " << g;
        }
    }
}

// ------------------------------------------------------------------------------------------------ caches
// Decoding far past the sliding window (ring of 8 positions) must give what a fresh, one-shot prefill of the
// whole sequence computes (the window mask over contiguous keys).
TEST(EngineCache, SlidingRingMatchesFullRecompute) {
  auto model = flashkit::Model::load(kModels + "/tiny-gemma3", {.dtype = "f32"});
  const int64_t V = model->info().vocab_size;
  std::vector<int32_t> seq = prompt_of("tiny-gemma3");
  seq.resize(5);  // short prompt: the ring fills during decoding
  auto s = model->new_session();
  s->prefill(seq);
  std::mt19937 rng(3);
  double worst = 0;
  for (int step = 0; step < 60; ++step) {
    const int32_t tok = int32_t(rng() % uint32_t(V));
    seq.push_back(tok);
    s->decode(tok);
    if (step % 7 == 6 || step == 59) {
      auto fresh = model->new_session();
      fresh->prefill(seq);
      worst = std::max(worst, rel_err(s->logits().data(), fresh->logits().data(), V));
    }
  }
  EXPECT_EQ(s->position(), 65);
  std::printf("ring decode vs one-shot prefill: max rel err %.3g\n", worst);
  EXPECT_LT(worst, 1e-5);
}

// A prompt in chunks (smaller and larger than the window, so chunks land on a wrapped ring) equals one shot.
TEST(EngineCache, ChunkedPrefillEqualsOneShot) {
  for (const char* name : {"tiny-gemma3", "tiny-llama"}) {
    auto one = flashkit::Model::load(kModels + "/" + name, {.dtype = "f32"});
    const int64_t V = one->info().vocab_size;
    std::vector<int32_t> p = prompt_of(name);
    auto s1 = one->new_session();
    s1->prefill(p, true);
    for (int64_t chunk : {1, 3, 7, 13}) {
      auto m = flashkit::Model::load(kModels + "/" + name, {.dtype = "f32", .prefill_chunk = chunk});
      auto s = m->new_session();
      s->prefill(p, true);
      double worst = 0;
      for (size_t r = 0; r < p.size(); ++r)
        worst = std::max(worst, rel_err(s->all_logits().data() + r * V, s1->all_logits().data() + r * V, V));
      EXPECT_LT(worst, 1e-5) << name << " chunk " << chunk;
    }
    // Two prefill calls (a prompt continued later) equal one.
    auto s2 = one->new_session();
    s2->prefill(std::span<const int32_t>(p).first(17));
    s2->prefill(std::span<const int32_t>(p).subspan(17));
    EXPECT_LT(rel_err(s2->logits().data(), s1->logits().data(), V), 1e-5) << name;
  }
}

TEST(EngineCache, ResetStartsOver) {
  auto model = flashkit::Model::load(kModels + "/tiny-llama");
  auto s = model->new_session();
  std::vector<int32_t> p = prompt_of("tiny-llama");
  s->prefill(p);
  std::vector<float> first(s->logits().begin(), s->logits().end());
  s->decode(7);
  s->reset();
  EXPECT_EQ(s->position(), 0);
  s->prefill(p);
  EXPECT_EQ(rel_err(s->logits().data(), first.data(), int64_t(first.size())), 0.0);
}

TEST(EngineCache, SessionOutlivesModelHandle) {
  std::unique_ptr<flashkit::Session> s;
  {
    auto m = flashkit::Model::load(kModels + "/tiny-llama");
    s = m->new_session();
  }
  s->prefill(prompt_of("tiny-llama"));
  EXPECT_EQ(s->position(), 40);
  EXPECT_EQ(s->model().info().architecture, "llama");
}

// ------------------------------------------------------------------------------------------------ generate
TEST(EngineGenerate, SeededSamplingIsReproducible) {
  auto model = flashkit::Model::load(kModels + "/tiny-gemma3-bf16");
  std::vector<int32_t> p = prompt_of("tiny-gemma3-bf16");
  flashkit::GenerateOptions g;
  g.max_new_tokens = 20;
  g.temperature = 1.0f;
  g.top_k = 50;
  g.top_p = 0.9f;
  g.seed = 42;
  g.stop_at_eos = false;
  auto a = flashkit::generate(*model->new_session(), p, g);
  auto b = flashkit::generate(*model->new_session(), p, g);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.tokens.size(), 20u);
  EXPECT_EQ(a.stop_reason, "length");
  g.seed = 43;
  auto c = flashkit::generate(*model->new_session(), p, g);
  EXPECT_NE(a.tokens, c.tokens);
  EXPECT_GT(a.prefill_tokens_per_s(), 0);
  EXPECT_GT(a.decode_tokens_per_s(), 0);
  EXPECT_EQ(a.decode_steps, 19);
}

TEST(EngineGenerate, StopsAtEosStopIdsCallbackAndContext) {
  auto model = flashkit::Model::load(kModels + "/tiny-llama");
  std::vector<int32_t> p = prompt_of("tiny-llama");
  auto greedy = read_json(kModels + "/tiny-llama/expected.json")["greedy_ids"].get<std::vector<int32_t>>();
  flashkit::GenerateOptions g;
  g.temperature = 0;
  g.max_new_tokens = 64;
  g.stop_ids = {greedy[5]};
  auto r = flashkit::generate(*model->new_session(), p, g);
  ASSERT_FALSE(r.tokens.empty());
  EXPECT_EQ(r.tokens.back(), greedy[5]);
  EXPECT_EQ(r.stop_reason, "eos");
  int n = 0;
  g.stop_ids.clear();
  auto r2 = flashkit::generate(*model->new_session(), p, g, [&](int32_t) { return ++n < 3; });
  EXPECT_EQ(r2.tokens.size(), 3u);
  EXPECT_EQ(r2.stop_reason, "callback");
  auto small = flashkit::Model::load(kModels + "/tiny-llama", {.max_context = 45});
  g.stop_at_eos = false;
  auto r3 = flashkit::generate(*small->new_session(), p, g);
  EXPECT_EQ(r3.stop_reason, "context");
  EXPECT_EQ(int64_t(p.size() + r3.tokens.size()), 46);  // 45 in the cache + the last sampled token
}

// max_context sizes the KV cache: beyond the model's positions (or absurdly large) it is refused up front, by name.
TEST(EngineErrors, MaxContextBeyondTheModelIsRefused) {
  try {
    flashkit::Model::load(kModels + "/tiny-llama", {.max_context = int64_t(1) << 62});
    FAIL() << "accepted max_context 2^62";
  } catch (const flashkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_context"), std::string::npos) << e.what();
  }
  try {
    flashkit::Model::load(kModels + "/tiny-gemma3", {.max_context = 4097});  // max_position_embeddings 4096
    FAIL() << "accepted max_context past max_position_embeddings";
  } catch (const flashkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_position_embeddings"), std::string::npos) << e.what();
  }
}

// generate() stops where transformers' generate() would: config.json's eos ids plus generation_config.json's.
TEST(EngineGenerate, EosIdsIncludeGenerationConfig) {
  TempDir d;
  d.copy_from(kModels + "/tiny-llama");
  d.write("generation_config.json", R"({"bos_token_id": 1, "eos_token_id": [2, 77]})");
  auto m = flashkit::Model::load(d.path);
  EXPECT_EQ(m->info().eos_ids, (std::vector<int32_t>{2, 77}));
  d.write("generation_config.json", "{not json");
  EXPECT_EQ(flashkit::Model::load(d.path)->info().eos_ids, std::vector<int32_t>{2});
}

// Every architecture's loader and forward pass on random weights (Qwen2: q/k/v biases; Qwen3: q/k norms).
TEST(EngineGenerate, RandomWeightsEveryArchitecture) {
  json base = read_json(kModels + "/tiny-llama/config.json");
  for (std::string arch : {"llama", "llama+bias", "qwen2", "qwen3", "gemma3_text"}) {
    TempDir d;
    json j = arch == "gemma3_text" ? read_json(kModels + "/tiny-gemma3/config.json") : base;
    j["model_type"] = arch == "llama+bias" ? "llama" : arch;
    if (arch == "llama+bias") j["attention_bias"] = true;  // q, k, v and o biases
    d.write("config.json", j.dump());
    for (const char* dt : {"f32", "bf16"}) {
      auto m = flashkit::Model::load(d.path, {.dtype = dt, .random_weights = true});
      EXPECT_EQ(m->info().weight_dtype, dt);
      auto s = m->new_session();
      std::vector<int32_t> p = {1, 5, 9, 200, 3, 4, 5, 6, 7, 8, 9, 10};
      s->prefill(p);
      for (float v : s->logits()) ASSERT_TRUE(std::isfinite(v)) << arch;
      s->decode(11);
      for (float v : s->logits()) ASSERT_TRUE(std::isfinite(v)) << arch;
    }
  }
}

// ------------------------------------------------------------------------------------------------ bad input
TEST(EngineErrors, BadModelDirectories) {
  expect_error([] { flashkit::Model::load("/nonexistent/model"); }, {"/nonexistent/model"});
  {
    TempDir d;  // no config.json
    expect_error([&] { flashkit::Model::load(d.path); }, {"config.json"});
  }
  {
    TempDir d;  // config but no weights
    fs::copy_file(kModels + "/tiny-llama/config.json", d.path / "config.json");
    expect_error([&] { flashkit::Model::load(d.path); }, {d.path.string()});
  }
  {
    TempDir d;  // unknown architecture
    json j = read_json(kModels + "/tiny-llama/config.json");
    j["model_type"] = "falcon";
    d.write("config.json", j.dump());
    expect_error([&] { flashkit::Model::load(d.path); }, {"falcon"});
  }
  {
    TempDir d;  // a tensor the config needs is missing: one layer more than the checkpoint has
    d.copy_from(kModels + "/tiny-gemma3");
    json j = read_json(kModels + "/tiny-gemma3/config.json");
    j["num_hidden_layers"] = 7;
    j["layer_types"].push_back("sliding_attention");
    d.write("config.json", j.dump());
    expect_error([&] { flashkit::Model::load(d.path); }, {"model.layers.6.", "missing tensor"});
  }
  {
    TempDir d;  // wrong shape
    d.copy_from(kModels + "/tiny-gemma3");
    json j = read_json(kModels + "/tiny-gemma3/config.json");
    j["intermediate_size"] = 128;
    d.write("config.json", j.dump());
    expect_error([&] { flashkit::Model::load(d.path); }, {"mlp.", "shape"});
  }
  {
    TempDir d;  // truncated weights file
    d.copy_from(kModels + "/tiny-gemma3");
    fs::resize_file(d.path / "model.safetensors", fs::file_size(d.path / "model.safetensors") / 2);
    expect_error([&] { flashkit::Model::load(d.path); }, {"model.safetensors"});
  }
  {
    TempDir d;  // a shard listed in the index is missing
    d.copy_from(kModels + "/tiny-llama");
    fs::remove(d.path / "model-00002-of-00003.safetensors");
    expect_error([&] { flashkit::Model::load(d.path); }, {"model-00002-of-00003.safetensors"});
  }
  {
    TempDir d;  // untied embeddings without lm_head
    d.copy_from(kModels + "/tiny-gemma3");
    json j = read_json(kModels + "/tiny-gemma3/config.json");
    j["tie_word_embeddings"] = false;
    d.write("config.json", j.dump());
    expect_error([&] { flashkit::Model::load(d.path); }, {"lm_head.weight"});
  }
}

TEST(EngineErrors, BadOptionsAndInputs) {
  const std::string dir = kModels + "/tiny-llama";
  expect_error([&] { flashkit::Model::load(dir, {.dtype = "int4"}); }, {"dtype", "int4"});
  expect_error([&] { flashkit::Model::load(dir, {.device = "tpu"}); }, {"device", "tpu"});
  try {
    flashkit::Model::load(dir, {.device = "cuda"});
    // A CUDA build with a GPU may load it; a CPU build must say it has no CUDA backend.
  } catch (const flashkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
  }
  auto m = flashkit::Model::load(dir, {.max_context = 16});
  auto s = m->new_session();
  std::vector<int32_t> p = prompt_of("tiny-llama");  // 40 tokens
  expect_error([&] { s->prefill(p); }, {"40 tokens", "context of 16"});
  EXPECT_EQ(s->position(), 0);
  expect_error([&] { s->prefill(std::vector<int32_t>{1, 512}); }, {"512", "vocabulary"});
  expect_error([&] { s->prefill(std::vector<int32_t>{-1}); }, {"-1"});
  expect_error([&] { s->prefill(std::vector<int32_t>{}); }, {"no tokens"});
  flashkit::GenerateOptions g;
  g.max_new_tokens = 0;
  expect_error([&] { flashkit::generate(*s, std::vector<int32_t>{1, 2}, g); }, {"max_new_tokens"});
  g.max_new_tokens = 4;
  g.top_p = 0;
  expect_error([&] { flashkit::generate(*s, std::vector<int32_t>{1, 2}, g); }, {"top_p"});
}

// A CPU backend's thread count is its own: creating one must not change flashkit's process-wide setting (two
// models on two threads would otherwise fight over it).
TEST(EngineCpuBackend, ThreadsOptionIsPerBackend) {
  const int before = flashkit::num_threads();
  flashkit::engine::BackendOptions o;
  o.threads = before == 1 ? 2 : 1;
  auto be = flashkit::engine::make_cpu_backend(o);
  EXPECT_EQ(flashkit::num_threads(), before);
  EXPECT_NE(be->name().find("(" + std::to_string(o.threads) + " threads)"), std::string::npos) << be->name();
}
