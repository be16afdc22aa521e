// Shared helpers of the training tests: host <-> backend buffers in f64, seeded random inputs, tiny configs.
#pragma once
#include <cmath>
#include <cstdint>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/config.hpp"
#include "train/backend.hpp"
#include "train/random.hpp"

namespace fk_train_test {

using flashkit::DType;
using flashkit::train::Backend;
using flashkit::train::Mat;

inline std::vector<double> randn(size_t n, uint64_t seed, double scale = 1.0) {
  flashkit::train::Rng r(seed, 99);
  std::vector<double> v(n);
  for (auto& x : v) x = r.normal() * scale;
  return v;
}

// A buffer [rows, cols] of the backend's parameter dtype holding `v`.
inline Mat make(Backend& be, int64_t rows, int64_t cols, const std::vector<double>& v) {
  Mat m = be.alloc(be.param_dtype(), rows, cols);
  flashkit::train::upload_converted(be, m, v);
  return m;
}
inline std::vector<double> get(Backend& be, const Mat& m) {
  std::vector<double> v(size_t(m.numel()));
  flashkit::train::download_converted(be, m, v.data());
  return v;
}
inline Mat make_ids(Backend& be, const std::vector<int32_t>& ids) {
  Mat m = be.alloc(DType::i32, int64_t(ids.size()), 1);
  be.upload(m, ids.data(), ids.size() * 4);
  return m;
}

inline double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

inline std::filesystem::path temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("flashkit_train_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

// Tiny HF-style configs: Llama (GQA, untied, attention soft-capping) and Gemma 3 (sliding window layers, q/k
// norms, (1 + w) norms, final soft-capping, tied embeddings, embedding scale).
inline nlohmann::json tiny_llama_json(int64_t vocab = 37) {
  return {{"model_type", "llama"},      {"vocab_size", vocab},           {"hidden_size", 12},
          {"intermediate_size", 20},    {"num_hidden_layers", 2},        {"num_attention_heads", 3},
          {"num_key_value_heads", 1},   {"head_dim", 8},                 {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},      {"max_position_embeddings", 64}, {"tie_word_embeddings", false},
          {"attn_logit_softcapping", 3.0}};
}
inline nlohmann::json tiny_gemma_json(int64_t vocab = 41) {
  return {{"model_type", "gemma3_text"},
          {"vocab_size", vocab},
          {"hidden_size", 16},
          {"intermediate_size", 24},
          {"num_hidden_layers", 3},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 8},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 1000000.0},
          {"rope_local_base_freq", 10000.0},
          {"sliding_window", 3},
          {"layer_types", {"sliding_attention", "sliding_attention", "full_attention"}},
          {"query_pre_attn_scalar", 8},
          {"final_logit_softcapping", 5.0},
          {"max_position_embeddings", 64},
          {"tie_word_embeddings", true}};
}
inline flashkit::engine::ModelConfig cfg_of(const nlohmann::json& j) { return flashkit::engine::parse_config(j, "test"); }

}  // namespace fk_train_test
