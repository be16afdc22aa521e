// Shared helpers of the speculative-decoding tests: tiny random-weight models written as config.json files, the
// transformers fixtures of tests/data/models, plain greedy generation as the reference.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "flashkit/engine.hpp"

namespace flashkit::spectest {

namespace fs = std::filesystem;
using nlohmann::json;

inline const std::string kData = FLASHKIT_TEST_DATA;
inline const std::string kModels = kData + "/models";

inline json read_json(const std::string& p) {
  std::ifstream f(p);
  return json::parse(f);
}

// A config.json in a fresh temporary directory (removed with the object).
class ConfigFile {
 public:
  explicit ConfigFile(const json& cfg) {
    static int counter = 0;
    dir_ = fs::temp_directory_path() /
           ("flashkit_spec_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "config.json") << cfg.dump(1);
  }
  ~ConfigFile() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path() const { return (dir_ / "config.json").string(); }

 private:
  fs::path dir_;
};

// Small configs of each architecture, based on the fixtures' config files.
inline json llama_config(int64_t vocab, int layers = 2) {
  json j = read_json(kModels + "/tiny-llama/config.json");
  j["vocab_size"] = vocab;
  j["num_hidden_layers"] = layers;
  j["hidden_size"] = 32;
  j["intermediate_size"] = 48;
  j["head_dim"] = 8;
  j["bos_token_id"] = 1;
  j["eos_token_id"] = 2;
  return j;
}
inline json gemma3_config(int64_t vocab, int64_t window) {
  json j = read_json(kModels + "/tiny-gemma3/config.json");
  j["vocab_size"] = vocab;
  j["sliding_window"] = window;
  j["num_hidden_layers"] = 3;
  j["layer_types"] = json::array({"sliding_attention", "full_attention", "sliding_attention"});
  j["hidden_size"] = 32;
  j["intermediate_size"] = 48;
  j["head_dim"] = 16;
  return j;
}
inline json qwen3_config(int64_t vocab) {
  json j = llama_config(vocab);
  j["model_type"] = "qwen3";
  j["architectures"] = json::array({"Qwen3ForCausalLM"});
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  return j;
}

struct RandomModel {
  std::unique_ptr<ConfigFile> file;
  std::shared_ptr<Model> model;
};
inline RandomModel random_model(const json& cfg, uint64_t seed, const std::string& dtype = "f32",
                                int64_t ctx = 0, int64_t chunk = 512) {
  RandomModel r;
  r.file = std::make_unique<ConfigFile>(cfg);
  LoadOptions o;
  o.dtype = dtype;
  o.random_weights = true;
  o.random_seed = seed;
  o.max_context = ctx;
  o.prefill_chunk = chunk;
  o.threads = 1;
  r.model = Model::load(r.file->path(), o);
  return r;
}
inline std::shared_ptr<Model> fixture_model(const std::string& name, int64_t ctx = 0) {
  LoadOptions o;
  o.max_context = ctx;
  o.threads = 1;
  return Model::load(kModels + "/" + name, o);
}

inline std::vector<int32_t> random_ids(std::mt19937& g, int64_t vocab, int n) {
  std::uniform_int_distribution<int32_t> d(3, int32_t(vocab - 1));
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(g);
  return v;
}
// A prompt that repeats a random phrase (input-grounded text: n-gram lookup finds matches).
inline std::vector<int32_t> repetitive_ids(std::mt19937& g, int64_t vocab, int n) {
  const auto phrase = random_ids(g, vocab, 5 + int(g() % 6));
  std::vector<int32_t> v;
  while (int(v.size()) < n) {
    v.insert(v.end(), phrase.begin(), phrase.end());
    if (g() % 3 == 0) v.push_back(random_ids(g, vocab, 1)[0]);
  }
  v.resize(size_t(n));
  return v;
}

inline std::string ids_str(const std::vector<int32_t>& v) {
  std::string s;
  for (auto x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace flashkit::spectest
