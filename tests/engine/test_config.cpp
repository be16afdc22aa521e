// The one config validator (engine/config.hpp) against hostile config.json files, the memory check before
// --random-weights / CPU loads allocate, and the load-time scan for non-finite weights (harden-parse).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/config.hpp"
#include "flashkit/dtype.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using flashkit::Status;

namespace {

const std::string kModels = std::string(FLASHKIT_TEST_DATA) + "/models";

json read_json(const fs::path& p) {
  std::ifstream f(p);
  return json::parse(f);
}

struct Scratch {
  fs::path path;
  Scratch() {
    path = fs::temp_directory_path() / ("flashkit_config_test_" + std::to_string(std::random_device{}()));
    fs::create_directories(path);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  void copy_from(const std::string& dir) {
    for (auto& e : fs::directory_iterator(dir)) fs::copy_file(e.path(), path / e.path().filename());
  }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path / name) << text; }
};

// The status and message of the flashkit::Error `f` throws (a non-flashkit exception fails the test).
template <class F>
std::pair<Status, std::string> error_of(F&& f) {
  try {
    f();
  } catch (const flashkit::Error& e) {
    return {e.status(), e.what()};
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-flashkit exception: " << e.what();
    return {Status::internal, ""};
  }
  ADD_FAILURE() << "no error thrown";
  return {Status::ok, ""};
}

void expect_has(const std::string& m, const std::vector<std::string>& needles) {
  for (const auto& n : needles) EXPECT_NE(m.find(n), std::string::npos) << "message \"" << m << "\" lacks \"" << n << "\"";
}

// parse_config(base with `mutate` applied) must fail with invalid_argument naming every needle.
template <class M>
void rejected(const json& base, M mutate, const std::vector<std::string>& needles) {
  json j = base;
  mutate(j);
  auto [st, m] = error_of([&] { flashkit::engine::parse_config(j, "cfg.json"); });
  EXPECT_EQ(st, Status::invalid_argument) << m;
  expect_has(m, needles);
}

// ------------------------------------------------------------------------------------------------ ranges

TEST(ConfigLimits, DimensionsOutsideTheirRangeNameFieldAndRange) {
  const json llama = read_json(kModels + "/tiny-llama/config.json");
  const int64_t two31 = int64_t(1) << 31, two40 = int64_t(1) << 40;
  rejected(llama, [&](json& j) { j["vocab_size"] = two31; }, {"cfg.json", "\"vocab_size\"", "[1, 16777216]", "2147483648"});
  rejected(llama, [&](json& j) { j["vocab_size"] = two40; }, {"\"vocab_size\"", "[1, 16777216]"});
  rejected(llama, [&](json& j) { j["hidden_size"] = two31; }, {"\"hidden_size\"", "[1, 131072]"});
  rejected(llama, [&](json& j) { j["num_hidden_layers"] = two31; }, {"\"num_hidden_layers\"", "[1, 1024]"});
  rejected(llama, [&](json& j) { j["intermediate_size"] = two40; }, {"\"intermediate_size\"", "[1, 1048576]"});
  rejected(llama, [&](json& j) { j["num_attention_heads"] = 5000; }, {"\"num_attention_heads\"", "[1, 1024]"});
  rejected(llama, [&](json& j) { j["head_dim"] = 7; }, {"\"head_dim\"", "even"});
  rejected(llama, [&](json& j) { j["head_dim"] = 4096; }, {"\"head_dim\"", "[2, 1024]"});
  rejected(llama, [&](json& j) { j["vocab_size"] = 18446744073709551615ull; }, {"\"vocab_size\"", "out of range"});
  rejected(llama, [&](json& j) { j["vocab_size"] = 1e300; }, {"\"vocab_size\"", "out of range"});
  rejected(llama, [&](json& j) { j["max_position_embeddings"] = two40; }, {"\"max_position_embeddings\""});
  rejected(llama, [&](json& j) { j["eos_token_id"] = json::array({2, two40}); }, {"\"eos_token_id\"", "[0, 2^31)"});
  rejected(llama, [&](json& j) {
    j.erase("head_dim");
    j["hidden_size"] = 66;  // 66 / 4 heads: no integer head_dim
  }, {"head_dim", "not a multiple"});
}

TEST(ConfigLimits, AbsurdFloatsAreRefusedWithTheAcceptedRange) {
  const json llama = read_json(kModels + "/tiny-llama/config.json");
  const json gemma = read_json(kModels + "/tiny-gemma3/config.json");
  rejected(llama, [](json& j) { j["rope_parameters"]["factor"] = 1e-320; }, {"rope_parameters", "\"factor\"", "[1, 10000]"});
  rejected(gemma, [](json& j) { j["rope_parameters"]["full_attention"]["factor"] = 1e-320; },
           {"rope_parameters.full_attention", "\"factor\""});
  rejected(llama, [](json& j) { j["final_logit_softcapping"] = 1e-300; },
           {"\"final_logit_softcapping\"", "[0.1, 1e+06]", "(or 0 for off)"});
  rejected(gemma, [](json& j) { j["attn_logit_softcapping"] = -5; }, {"\"attn_logit_softcapping\""});
  rejected(llama, [](json& j) { j["rms_norm_eps"] = 1e308; }, {"\"rms_norm_eps\"", "[1e-12, 0.1]", "1e+308"});
  rejected(llama, [](json& j) { j["rms_norm_eps"] = 0; }, {"\"rms_norm_eps\""});
  rejected(llama, [](json& j) { j["rope_parameters"]["rope_theta"] = 0; }, {"\"rope_theta\"", "[1, 1e+12]"});
  rejected(llama, [](json& j) { j["rope_parameters"]["low_freq_factor"] = 1e-300; }, {"\"low_freq_factor\""});
  rejected(llama, [](json& j) { j["rope_parameters"]["original_max_position_embeddings"] = -3; },
           {"\"original_max_position_embeddings\""});
  rejected(gemma, [](json& j) { j["query_pre_attn_scalar"] = 1e-300; }, {"\"query_pre_attn_scalar\""});
  rejected(gemma, [](json& j) { j["rope_local_base_freq"] = 1e300; }, {"\"rope_local_base_freq\""});
  // "off" stays accepted, and the real values are inside the ranges.
  json ok = llama;
  ok["final_logit_softcapping"] = 0;
  EXPECT_NO_THROW(flashkit::engine::parse_config(ok, "ok"));
  EXPECT_NO_THROW(flashkit::engine::parse_config(gemma, "gemma"));
}

TEST(ConfigLimits, WrongTypesNameTheField) {
  const json llama = read_json(kModels + "/tiny-llama/config.json");
  rejected(llama, [](json& j) { j["tie_word_embeddings"] = "yes"; }, {"\"tie_word_embeddings\"", "true or false"});
  rejected(llama, [](json& j) { j["attention_bias"] = 1; }, {"\"attention_bias\"", "true or false"});
  rejected(llama, [](json& j) { j["rope_parameters"]["rope_type"] = 5; }, {"\"rope_type\"", "string"});
  rejected(llama, [](json& j) { j["rms_norm_eps"] = "tiny"; }, {"\"rms_norm_eps\"", "number"});
  // Qwen's max_window_layers indexed the per-layer table from a negative start.
  rejected(llama, [](json& j) {
    j["model_type"] = "qwen2";
    j["use_sliding_window"] = true;
    j["sliding_window"] = 64;
    j["max_window_layers"] = -5;
  }, {"\"max_window_layers\""});
  rejected(llama, [](json& j) {
    j["model_type"] = "qwen2";
    j["use_sliding_window"] = true;
    j["max_window_layers"] = 1;  // layers 1.. slide
    j["sliding_window"] = int64_t(1) << 40;
  }, {"\"sliding_window\"", "[1, 16777216]"});
}

TEST(ConfigLimits, DeepJsonIsRefusedBeforeParsingEverywhere) {
  // 300,000 nested arrays crashed `cost` (a recursive copy) while `generate` refused it: now one reader for both.
  Scratch d;
  d.write("config.json", "{\"model_type\": \"llama\", \"x\": " + std::string(300000, '[') + std::string(300000, ']') + "}");
  for (auto f : {+[](const fs::path& p) { flashkit::engine::load_config(p); },
                 +[](const fs::path& p) { flashkit::Model::load(p); }}) {
    auto [st, m] = error_of([&] { f(d.path); });
    EXPECT_EQ(st, Status::invalid_argument);
    expect_has(m, {"config.json", "JSON nested deeper than 64 levels"});
  }
  // generation_config.json is advisory: a hostile one is ignored, the model still loads.
  Scratch g;
  g.copy_from(kModels + "/tiny-llama-bf16");
  g.write("generation_config.json", "{\"eos_token_id\": " + std::string(300000, '[') + std::string(300000, ']') + "}");
  EXPECT_EQ(flashkit::Model::load(g.path)->info().eos_ids, flashkit::engine::load_config(g.path).eos_ids);
}

// ------------------------------------------------------------------------------------------------ sizes

TEST(ConfigLimits, WeightCountMatchesTheLoadedModels) {
  for (const char* name : {"tiny-llama", "tiny-gemma3", "tiny-llama-bf16", "tiny-gemma3-bf16"}) {
    SCOPED_TRACE(name);
    const auto c = flashkit::engine::load_config(kModels + "/" + name);
    EXPECT_EQ(flashkit::engine::weight_count(c), flashkit::Model::load(kModels + "/" + name)->info().parameters);
  }
}

TEST(ConfigLimits, RandomWeightsTooLargeAreRefusedBeforeAllocating) {
  const json base = read_json(kModels + "/tiny-llama/config.json");
  auto load = [&](json j, const char* dtype) {
    Scratch d;
    d.write("config.json", j.dump());
    return error_of([&] { flashkit::Model::load(d.path, {.dtype = dtype, .random_weights = true}); });
  };
  for (const char* dt : {"f32", "bf16", "auto"}) {
    SCOPED_TRACE(dt);
    // The reported crashes: 2^31 x 2^31 wrapped to a zero-byte buffer (f32: SIGSEGV; bf16: bad_array_new_length),
    // and 2^31 layers grew to 23 GB before anything failed.
    json j = base;
    j["vocab_size"] = int64_t(1) << 31;
    j["hidden_size"] = int64_t(1) << 31;
    auto [st, m] = load(j, dt);
    EXPECT_EQ(st, Status::invalid_argument);
    expect_has(m, {"\"vocab_size\"", "[1, 16777216]"});
    j = base;
    j["num_hidden_layers"] = int64_t(1) << 31;
    std::tie(st, m) = load(j, dt);
    EXPECT_EQ(st, Status::invalid_argument);
    expect_has(m, {"\"num_hidden_layers\""});
    // Inside every limit but terabytes in total: refused against the memory there is, naming both sizes.
    j = base;
    j["vocab_size"] = int64_t(1) << 24;
    j["hidden_size"] = int64_t(1) << 17;
    std::tie(st, m) = load(j, dt);
    EXPECT_EQ(st, Status::out_of_memory);
    expect_has(m, {"--random-weights", "GiB", "parameters", "available"});
  }
  // The memory check counts what a tiny model needs and lets it through.
  EXPECT_NO_THROW(flashkit::Model::load(kModels + "/tiny-llama", {.random_weights = true}));
}

// ------------------------------------------------------------------------------------------------ non-finite

// Writes `v` into element `index` of tensor `name` of DIR/model.safetensors (F32 or BF16).
void poke(const fs::path& file, const std::string& name, int64_t index, float v) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string h(n, '\0');
  f.read(h.data(), std::streamsize(n));
  const json t = json::parse(h).at(name);
  const std::string dt = t.at("dtype");
  const uint64_t begin = t.at("data_offsets")[0];
  const size_t es = dt == "F32" ? 4 : 2;
  f.seekp(std::streamoff(8 + n + begin + uint64_t(index) * es));
  if (dt == "F32") {
    f.write(reinterpret_cast<const char*>(&v), 4);
  } else {
    const uint16_t b = dt == "BF16" ? flashkit::f32_to_bf16(v) : flashkit::f32_to_f16(v);
    f.write(reinterpret_cast<const char*>(&b), 2);
  }
}

TEST(NonFiniteWeights, AnyTensorIsCheckedAtLoadAndNamed) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    const char* model;
    const char* tensor;
    int64_t index;
    float value;
    const char* shown;
  };
  for (const Case& c : {Case{"tiny-llama-bf16", "model.layers.1.self_attn.o_proj.weight", 77, inf, "+inf"},
                        Case{"tiny-gemma3", "model.layers.4.mlp.down_proj.weight", 5, -inf, "-inf"},
                        Case{"tiny-gemma3-bf16", "model.embed_tokens.weight", 1000, nan, "NaN"},
                        Case{"tiny-gemma3", "model.layers.0.input_layernorm.weight", 3, nan, "NaN"}}) {
    SCOPED_TRACE(std::string(c.model) + " " + c.tensor);
    Scratch d;
    d.copy_from(kModels + "/" + c.model);
    poke(d.path / "model.safetensors", c.tensor, c.index, c.value);
    auto [st, m] = error_of([&] { flashkit::Model::load(d.path); });
    EXPECT_EQ(st, Status::invalid_argument);
    expect_has(m, {"model.safetensors", std::string("tensor '") + c.tensor + "'", c.shown,
                   "at element " + std::to_string(c.index)});
    // check_weights = false skips the scan (for trusted checkpoints): the load itself succeeds.
    EXPECT_NO_THROW(flashkit::Model::load(d.path, {.check_weights = false}));
  }
}

}  // namespace

namespace {

// Replays tests/data/fuzz/config (inputs found by tests/fuzz/fuzz_config, fixed since, and the reported hostile
// configs) as the fuzzer does: flashkit::Error or an accepted config with finite derived values.
TEST(FuzzCorpus, Config) {
  const fs::path dir = fs::path(FLASHKIT_TEST_DATA) / "fuzz" / "config";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  ASSERT_FALSE(files.empty());
  std::sort(files.begin(), files.end());
  for (const auto& p : files) {
    SCOPED_TRACE(p.string());
    try {
      const auto c = flashkit::engine::load_config(p);
      EXPECT_GT(flashkit::engine::weight_count(c), 0);
      for (const auto* rc : {&c.rope_global, &c.rope_local})
        for (float f : flashkit::engine::rope_inv_freq(*rc, c.head_dim)) EXPECT_TRUE(std::isfinite(f) && f > 0);
    } catch (const flashkit::Error& e) {
      EXPECT_FALSE(std::string(e.what()).empty());
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw a non-flashkit exception: " << e.what();
    }
  }
}

}  // namespace
