// A tiny random Llama as a GGUF file whose matrices are one block-quantized type, written with the GGUF test
// builder (tests/model/gguf_builder.hpp) and block packer (tests/model/quant_pack.hpp). Rows are whole 256-value
// blocks for every type (hidden 256, q 256, intermediate 512), so the K-quants fit too. The packer's scales are
// rescaled per tensor so that weights have a chosen standard deviation (matrices ~0.05, the embedding ~1): values
// stay in a range where bf16 activations follow f32 ones closely.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "../model/gguf_builder.hpp"
#include "../model/quant_pack.hpp"
#include "flashkit/dtype.hpp"

namespace fk_test {

struct QuantModelSpec {
  QType type = QType::q8_0;       // every matrix (q, k, v, o, gate, up, down)
  bool quant_embedding = true;    // token_embd in `type`, else f32
  bool tied = true;               // no output.weight: the lm_head is the embedding
  QType output = QType::q6_k;     // output.weight's type when not tied
  int64_t hidden = 256, heads = 4, kv_heads = 2, head_dim = 64, inter = 512, layers = 2, vocab = 96;
  uint32_t seed = 1;
};

// Multiplies the f16 scale fields of every block (d, and dmin for Q4_K / Q5_K) by `factor`: every value of the block
// scales by it (up to the f16 rounding of the new scales, which both backends read alike).
inline void rescale_blocks(QType t, std::string& bytes, double factor) {
  const size_t nb = bytes.size() / size_t(qtype_bytes(t));
  auto scale_half = [&](size_t at) {
    uint16_t h;
    std::memcpy(&h, &bytes[at], 2);
    h = flashkit::f32_to_f16(float(flashkit::f16_to_f32(h) * factor));
    std::memcpy(&bytes[at], &h, 2);
  };
  for (size_t b = 0; b < nb; ++b) {
    const size_t o = b * size_t(qtype_bytes(t));
    if (t == QType::q6_k) {
      scale_half(o + 208);
    } else {
      scale_half(o);
      if (t == QType::q4_k || t == QType::q5_k) scale_half(o + 2);
    }
  }
}

// Random blocks for a [rows, cols] matrix with weights of standard deviation about `sd`.
inline std::string random_quant_matrix(QType t, int64_t rows, int64_t cols, double sd, std::mt19937& rng) {
  std::string bytes;
  std::vector<double> v;
  for (int64_t i = 0; i < rows * cols / qtype_values(t); ++i) pack_random_block(t, rng, bytes, v);
  double ss = 0;
  for (double x : v) ss += x * x;
  const double rms = std::sqrt(ss / double(v.size()));
  rescale_blocks(t, bytes, rms > 0 ? sd / rms : 1.0);
  return bytes;
}

inline std::string random_f32(int64_t n, double mean, double sd, std::mt19937& rng) {
  std::normal_distribution<float> nd(static_cast<float>(mean), static_cast<float>(sd));
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  return f32_bytes(v);
}

// The GGUF bytes of the model (llama metadata; no tokenizer: the engine runs on token ids).
inline std::string quant_model_gguf(const QuantModelSpec& s) {
  std::mt19937 rng(s.seed);
  GgufBuilder b;
  b.str("general.architecture", "llama");
  b.u32("llama.context_length", 256).u32("llama.embedding_length", uint32_t(s.hidden));
  b.u32("llama.block_count", uint32_t(s.layers)).u32("llama.feed_forward_length", uint32_t(s.inter));
  b.u32("llama.attention.head_count", uint32_t(s.heads)).u32("llama.attention.head_count_kv", uint32_t(s.kv_heads));
  b.u32("llama.attention.key_length", uint32_t(s.head_dim)).u32("llama.attention.value_length", uint32_t(s.head_dim));
  b.f32("llama.rope.freq_base", 10000.0f).f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  auto mat = [&](const std::string& name, QType t, int64_t rows, int64_t cols, double sd) {
    b.tensor(name, {uint64_t(cols), uint64_t(rows)}, qtype_ggml(t), random_quant_matrix(t, rows, cols, sd, rng));
  };
  const int64_t H = s.hidden, Q = s.heads * s.head_dim, KV = s.kv_heads * s.head_dim;
  if (s.quant_embedding) mat("token_embd.weight", s.type, s.vocab, H, 1.0);
  else b.tensor("token_embd.weight", {uint64_t(H), uint64_t(s.vocab)}, 0, random_f32(s.vocab * H, 0, 1, rng));
  if (!s.tied) mat("output.weight", s.output, s.vocab, H, 0.05);
  b.tensor("output_norm.weight", {uint64_t(H)}, 0, random_f32(H, 1, 0.1, rng));
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    b.tensor(p + "attn_norm.weight", {uint64_t(H)}, 0, random_f32(H, 1, 0.1, rng));
    b.tensor(p + "ffn_norm.weight", {uint64_t(H)}, 0, random_f32(H, 1, 0.1, rng));
    mat(p + "attn_q.weight", s.type, Q, H, 0.05);
    mat(p + "attn_k.weight", s.type, KV, H, 0.05);
    mat(p + "attn_v.weight", s.type, KV, H, 0.05);
    mat(p + "attn_output.weight", s.type, H, Q, 0.05);
    mat(p + "ffn_gate.weight", s.type, s.inter, H, 0.05);
    mat(p + "ffn_up.weight", s.type, s.inter, H, 0.05);
    mat(p + "ffn_down.weight", s.type, H, s.inter, 0.05);
  }
  return b.build();
}

// Writes the model to a fresh file in the temporary directory; removes it when destroyed.
struct TempGguf {
  std::filesystem::path path;
  explicit TempGguf(const QuantModelSpec& s, const std::string& tag) {
    path = std::filesystem::temp_directory_path() /
           ("fk_quant_" + tag + "_" + std::to_string(std::random_device{}()) + ".gguf");
    std::ofstream f(path, std::ios::binary);
    const std::string bytes = quant_model_gguf(s);
    f.write(bytes.data(), std::streamsize(bytes.size()));
  }
  ~TempGguf() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  int64_t bytes() const { return int64_t(std::filesystem::file_size(path)); }
};

}  // namespace fk_test
