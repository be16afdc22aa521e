// GGUF block-quantized types: the library's dequantization against the values the test packs into random blocks
// (quant_pack.hpp: scales, mins and quants chosen first, packed value by value), through to_f32 / to_bf16, the
// finiteness check and the GGUF reader; and the Qwen2 / Qwen3 architectures' names and config.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "gguf_builder.hpp"
#include "model/gguf.hpp"
#include "model/quant.hpp"
#include "model/weights.hpp"
#include "quant_pack.hpp"

using namespace flashkit::model;
using fk_test::QType;

namespace {

constexpr QType kTypes[] = {QType::q8_0, QType::q4_0, QType::q4_k, QType::q5_k, QType::q6_k};

WeightType weight_type(QType t) {
  switch (t) {
    case QType::q8_0: return WeightType::q8_0;
    case QType::q4_0: return WeightType::q4_0;
    case QType::q4_k: return WeightType::q4_k;
    case QType::q5_k: return WeightType::q5_k;
    case QType::q6_k: return WeightType::q6_k;
  }
  return WeightType::f32;
}

// `rows` rows of `blocks_per_row` random blocks.
struct Packed {
  std::string bytes;
  std::vector<double> values;
};
Packed pack(QType t, int64_t rows, int64_t blocks_per_row, uint32_t seed) {
  std::mt19937 rng(seed);
  Packed p;
  for (int64_t i = 0; i < rows * blocks_per_row; ++i) fk_test::pack_random_block(t, rng, p.bytes, p.values);
  return p;
}

TEST(Quant, BlockGeometry) {
  for (QType t : kTypes) {
    const QuantBlock qb = quant_block(weight_type(t));
    EXPECT_EQ(qb.values, fk_test::qtype_values(t)) << fk_test::qtype_name(t);
    EXPECT_EQ(qb.bytes, fk_test::qtype_bytes(t)) << fk_test::qtype_name(t);
    EXPECT_TRUE(is_quantized(weight_type(t)));
  }
  EXPECT_FALSE(is_quantized(WeightType::bf16));
}

TEST(Quant, ToF32MatchesPackedValuesOnRandomBlocks) {
  for (QType t : kTypes)
    for (uint32_t seed : {1u, 2u, 3u}) {
      const int64_t rows = 3, bpr = 2, cols = bpr * fk_test::qtype_values(t);
      const Packed p = pack(t, rows, bpr, seed);
      WeightView w;
      w.name = "w";
      w.type = weight_type(t);
      w.shape = {rows, cols};
      w.data = p.bytes.data();
      w.nbytes = p.bytes.size();
      std::vector<float> out(size_t(rows * cols), std::numeric_limits<float>::quiet_NaN());
      to_f32(w, out.data());
      double peak = 0;
      for (double v : p.values) peak = std::max(peak, std::fabs(v));
      ASSERT_GT(peak, 0) << "random blocks must not be all zero";
      for (size_t i = 0; i < out.size(); ++i)
        ASSERT_NEAR(out[i], p.values[i], 2e-6 * peak) << fk_test::qtype_name(t) << " seed " << seed << " value " << i;
      std::vector<uint16_t> bf(out.size(), 0xffff);
      to_bf16(w, bf.data());
      for (size_t i = 0; i < out.size(); ++i)
        ASSERT_EQ(bf[i], flashkit::f32_to_bf16(out[i])) << fk_test::qtype_name(t) << " value " << i;
      EXPECT_EQ(first_non_finite(w), -1);
    }
}

TEST(Quant, NonFiniteScaleIsFoundAndNamed) {
  for (QType t : kTypes) {
    Packed p = pack(t, 1, 3, 9);
    const uint16_t inf = 0x7c00;
    const size_t d_at = t == QType::q6_k ? 208 : 0;  // Q6_K keeps its f16 scale last
    std::memcpy(&p.bytes[size_t(fk_test::qtype_bytes(t)) * 2 + d_at], &inf, 2);
    WeightView w;
    w.name = "blk.w";
    w.type = weight_type(t);
    w.shape = {1, 3 * fk_test::qtype_values(t)};
    w.data = p.bytes.data();
    w.nbytes = p.bytes.size();
    const int64_t at = first_non_finite(w);
    EXPECT_GE(at, 2 * fk_test::qtype_values(t)) << fk_test::qtype_name(t);
    EXPECT_LT(at, 3 * fk_test::qtype_values(t)) << fk_test::qtype_name(t);
    try {
      check_finite(w, "m.gguf");
      ADD_FAILURE() << "no error";
    } catch (const flashkit::Error& e) {
      EXPECT_NE(std::string(e.what()).find("block scale"), std::string::npos) << e.what();
    }
  }
}

TEST(Quant, GgufReaderKeepsQuantizedTensors) {
  for (QType t : kTypes) {
    const int64_t cols = 2 * fk_test::qtype_values(t);
    const Packed p = pack(t, 4, 2, 5);
    fk_test::GgufBuilder b;
    b.llama(1, 1).tensor("blk.0.ffn_up.weight", {uint64_t(cols), 4}, fk_test::qtype_ggml(t), p.bytes);
    const std::string bytes = b.build();
    auto g = open_gguf_memory(bytes.data(), bytes.size(), "q.gguf");
    const WeightView& w = g->get("model.layers.0.mlp.up_proj.weight");
    EXPECT_EQ(w.type, weight_type(t));
    EXPECT_EQ(w.shape, (std::vector<int64_t>{4, cols}));
    std::vector<float> out(size_t(w.numel()));
    to_f32(w, out.data());
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], p.values[i], 1e-5) << fk_test::qtype_name(t);
  }
}

// Llama's q/k permutation moves whole rows, so it works on quantized rows too.
TEST(Quant, LlamaPermutationMovesQuantizedRows) {
  const Packed p = pack(QType::q4_k, 4, 1, 6);  // 4 rows = 1 head of head_dim 4
  fk_test::GgufBuilder b;
  b.llama(1, 1).tensor("blk.0.attn_q.weight", {256, 4}, 12, p.bytes);
  const std::string bytes = b.build();
  auto g = open_gguf_memory(bytes.data(), bytes.size(), "q.gguf");
  std::vector<float> out(4 * 256);
  to_f32(g->get("model.layers.0.self_attn.q_proj.weight"), out.data());
  const int from[] = {0, 2, 1, 3};  // HF row r was llama.cpp row from[r]
  for (int r = 0; r < 4; ++r)
    for (int k = 0; k < 256; ++k) ASSERT_NEAR(out[size_t(r * 256 + k)], p.values[size_t(from[r] * 256 + k)], 1e-5);
}

fk_test::GgufBuilder qwen_header(const std::string& arch) {
  fk_test::GgufBuilder b;
  b.str("general.architecture", arch)
      .u32(arch + ".embedding_length", 8)
      .u32(arch + ".feed_forward_length", 16)
      .u32(arch + ".block_count", 1)
      .u32(arch + ".attention.head_count", 2)
      .u32(arch + ".attention.head_count_kv", 1)
      .u32(arch + ".context_length", 64)
      .f32(arch + ".rope.freq_base", 1000000.0f)
      .f32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
  return b;
}

TEST(GgufQwen, Qwen2BiasesAndConfig) {
  fk_test::GgufBuilder b = qwen_header("qwen2");
  b.tensor("blk.0.attn_q.weight", {8, 8}, 0, std::string(256, '\0'))
      .tensor("blk.0.attn_q.bias", {8}, 0, fk_test::f32_bytes({1, 2, 3, 4, 5, 6, 7, 8}))
      .tensor("blk.0.ffn_norm.weight", {8}, 0, fk_test::f32_bytes({1, 1, 1, 1, 1, 1, 1, 1}));
  const std::string bytes = b.build();
  auto g = open_gguf_memory(bytes.data(), bytes.size(), "qwen2.gguf");
  // No permutation for Qwen (llama.cpp keeps its rows in HF order): the bias comes back as stored.
  std::vector<float> bias(8);
  to_f32(g->get("model.layers.0.self_attn.q_proj.bias"), bias.data());
  EXPECT_EQ(bias, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_NE(g->find("model.layers.0.post_attention_layernorm.weight"), nullptr);
  const nlohmann::json c = gguf_hf_config(*g);
  EXPECT_EQ(c["model_type"], "qwen2");
  EXPECT_EQ(c["architectures"][0], "Qwen2ForCausalLM");
  EXPECT_EQ(c["attention_bias"], true);
  EXPECT_EQ(c["num_key_value_heads"], 1);
  EXPECT_EQ(c["rope_theta"], 1000000.0);
  EXPECT_EQ(c["rms_norm_eps"], 1e-6);
  EXPECT_EQ(c["hidden_act"], "silu");
}

TEST(GgufQwen, Qwen3QkNorms) {
  fk_test::GgufBuilder b = qwen_header("qwen3");
  b.u32("qwen3.attention.key_length", 8)
      .tensor("blk.0.attn_q_norm.weight", {2}, 0, fk_test::f32_bytes({1.5f, 2.0f}))
      .tensor("blk.0.attn_k_norm.weight", {2}, 0, fk_test::f32_bytes({0.5f, 1.0f}));
  const std::string bytes = b.build();
  auto g = open_gguf_memory(bytes.data(), bytes.size(), "qwen3.gguf");
  std::vector<float> qn(2);
  to_f32(g->get("model.layers.0.self_attn.q_norm.weight"), qn.data());  // no Gemma-style 1 + w offset
  EXPECT_EQ(qn, (std::vector<float>{1.5f, 2.0f}));
  EXPECT_NE(g->find("model.layers.0.self_attn.k_norm.weight"), nullptr);
  const nlohmann::json c = gguf_hf_config(*g);
  EXPECT_EQ(c["model_type"], "qwen3");
  EXPECT_EQ(c["head_dim"], 8);
  EXPECT_EQ(c["attention_bias"], false);
}

}  // namespace
