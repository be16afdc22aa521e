// A tiny random MambaForCausalLM checkpoint with Hugging Face's config keys and tensor names (config.json +
// model.safetensors, f32), for the engine, serving and CUDA fusion tests. Weights ~ N(0, 0.3) from `seed`, plus an
// offset for the norms (1), dt_proj's bias (-2), A_log and D (1).
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "train/safetensors_writer.hpp"

namespace fk_test {

struct TinyMamba {
  int64_t vocab = 50, hidden = 32, d_state = 4, layers = 2, expand = 2, conv = 4, dt_rank = 2;
  float a_log = 1.f;         // A_log's offset (A = -exp(A_log))
  unsigned seed = 7;
  std::string extra_config;  // more config.json members, each as `, "key": value`
  std::string skip;          // one tensor name left out (a checkpoint missing it)
};

inline void write_tiny_mamba(const std::filesystem::path& dir, const TinyMamba& m) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << "{\"model_type\": \"mamba\", \"vocab_size\": " << m.vocab
                                     << ", \"hidden_size\": " << m.hidden << ", \"state_size\": " << m.d_state
                                     << ", \"num_hidden_layers\": " << m.layers << ", \"expand\": " << m.expand
                                     << ", \"conv_kernel\": " << m.conv << ", \"time_step_rank\": " << m.dt_rank
                                     << m.extra_config << "}";
  const int64_t H = m.hidden, Di = m.expand * m.hidden, N = m.d_state, R = m.dt_rank;
  std::mt19937 rng(m.seed);
  std::normal_distribution<float> nd(0.f, 0.3f);
  std::vector<std::vector<float>> store;
  std::vector<flashkit::train::SafetensorsEntry> entries;
  auto add = [&](const std::string& n, std::vector<int64_t> shape, float offset = 0.f) {
    if (n == m.skip) return;
    int64_t numel = 1;
    for (auto s : shape) numel *= s;
    store.emplace_back(size_t(numel));
    for (auto& v : store.back()) v = offset + nd(rng);
    entries.push_back({n, "F32", shape, nullptr, size_t(numel) * 4});
  };
  add("backbone.embeddings.weight", {m.vocab, H});
  add("backbone.norm_f.weight", {H}, 1.f);
  for (int64_t i = 0; i < m.layers; ++i) {
    const std::string p = "backbone.layers." + std::to_string(i) + ".";
    add(p + "norm.weight", {H}, 1.f);
    add(p + "mixer.in_proj.weight", {2 * Di, H});
    add(p + "mixer.conv1d.weight", {Di, 1, m.conv});
    add(p + "mixer.conv1d.bias", {Di});
    add(p + "mixer.x_proj.weight", {R + 2 * N, Di});
    add(p + "mixer.dt_proj.weight", {Di, R});
    add(p + "mixer.dt_proj.bias", {Di}, -2.f);
    add(p + "mixer.A_log", {Di, N}, m.a_log);
    add(p + "mixer.D", {Di}, 1.f);
    add(p + "mixer.out_proj.weight", {H, Di});
  }
  for (size_t i = 0; i < entries.size(); ++i) entries[i].data = store[i].data();
  flashkit::train::write_safetensors(dir / "model.safetensors", entries);
}

}  // namespace fk_test
