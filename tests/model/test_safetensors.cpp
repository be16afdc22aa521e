// The safetensors reader on the transformers-made fixtures: every tensor the config implies is present with the
// PyTorch shape, and the bf16 copies equal the f32 ones up to bf16 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "model/weights.hpp"

using namespace flashkit::model;
using nlohmann::json;

namespace {

const std::string kModels = std::string(FLASHKIT_TEST_DATA) + "/models/";

json read_config(const std::string& dir) {
  std::ifstream f(kModels + dir + "/config.json");
  return json::parse(f);
}

// Expected HF tensor names and shapes for a Llama or Gemma 3 text config.
std::map<std::string, std::vector<int64_t>> expected_tensors(const json& c) {
  const int64_t hidden = c["hidden_size"], inter = c["intermediate_size"], layers = c["num_hidden_layers"];
  const int64_t heads = c["num_attention_heads"], kv = c["num_key_value_heads"], vocab = c["vocab_size"];
  const int64_t hd = c.value("head_dim", hidden / heads);
  const bool gemma = c["model_type"] == "gemma3_text";
  std::map<std::string, std::vector<int64_t>> t;
  t["model.embed_tokens.weight"] = {vocab, hidden};
  t["model.norm.weight"] = {hidden};
  if (!c.value("tie_word_embeddings", false)) t["lm_head.weight"] = {vocab, hidden};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t[p + "input_layernorm.weight"] = {hidden};
    t[p + "post_attention_layernorm.weight"] = {hidden};
    t[p + "self_attn.q_proj.weight"] = {heads * hd, hidden};
    t[p + "self_attn.k_proj.weight"] = {kv * hd, hidden};
    t[p + "self_attn.v_proj.weight"] = {kv * hd, hidden};
    t[p + "self_attn.o_proj.weight"] = {hidden, heads * hd};
    t[p + "mlp.gate_proj.weight"] = {inter, hidden};
    t[p + "mlp.up_proj.weight"] = {inter, hidden};
    t[p + "mlp.down_proj.weight"] = {hidden, inter};
    if (gemma) {
      t[p + "pre_feedforward_layernorm.weight"] = {hidden};
      t[p + "post_feedforward_layernorm.weight"] = {hidden};
      t[p + "self_attn.q_norm.weight"] = {hd};
      t[p + "self_attn.k_norm.weight"] = {hd};
    }
  }
  return t;
}

std::vector<float> f32_of(const WeightView& w) {
  std::vector<float> v(size_t(w.numel()));
  to_f32(w, v.data());
  return v;
}

class Fixture : public ::testing::TestWithParam<std::string> {};

TEST_P(Fixture, NamesAndShapesMatchConfig) {
  const std::string dir = GetParam();
  auto store = open_safetensors(kModels + dir);
  const auto want = expected_tensors(read_config(dir));
  const auto names = store->names();
  EXPECT_EQ(names.size(), want.size());
  for (const auto& [name, shape] : want) {
    const WeightView* w = store->find(name);
    ASSERT_NE(w, nullptr) << dir << " lacks " << name;
    EXPECT_EQ(w->shape, shape) << name;
    EXPECT_EQ(w->name, name);
    const bool bf16 = dir.find("bf16") != std::string::npos;
    EXPECT_EQ(w->type, bf16 ? WeightType::bf16 : WeightType::f32) << name;
    EXPECT_EQ(int64_t(w->nbytes), w->numel() * (bf16 ? 2 : 4));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(w->data) % (bf16 ? 2 : 4), 0u);
    for (float x : f32_of(*w)) ASSERT_TRUE(std::isfinite(x)) << name;
  }
  EXPECT_EQ(&store->get("model.norm.weight"), store->find("model.norm.weight"));
  EXPECT_NE(store->source().find(dir), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Models, Fixture,
                         ::testing::Values("tiny-llama", "tiny-llama-bf16", "tiny-gemma3", "tiny-gemma3-bf16"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

// The bf16 fixtures were re-initialised with the same seed, so each value is the f32 one rounded to bf16.
TEST(Safetensors, Bf16CopiesEqualF32UpToRounding) {
  for (std::string m : {"tiny-llama", "tiny-gemma3"}) {
    auto a = open_safetensors(kModels + m);
    auto b = open_safetensors(kModels + m + "-bf16");
    ASSERT_EQ(a->names(), b->names());
    for (const auto& n : a->names()) {
      const auto x = f32_of(a->get(n)), y = f32_of(b->get(n));
      ASSERT_EQ(x.size(), y.size());
      for (size_t i = 0; i < x.size(); ++i)
        ASSERT_EQ(flashkit::bf16_to_f32(flashkit::f32_to_bf16(x[i])), y[i]) << m << " " << n << "[" << i << "]";
    }
  }
}

TEST(Safetensors, SingleShardFileAndIndexFileOpenDirectly) {
  auto one = open_safetensors(kModels + "tiny-llama-bf16/model.safetensors");
  EXPECT_EQ(one->names().size(), 30u);
  auto idx = open_safetensors(kModels + "tiny-llama/model.safetensors.index.json");
  EXPECT_EQ(idx->names().size(), 30u);
  // A shard on its own holds just its part of the model.
  auto shard = open_safetensors(kModels + "tiny-llama/model-00001-of-00003.safetensors");
  EXPECT_LT(shard->names().size(), 30u);
  EXPECT_NE(shard->find("model.embed_tokens.weight"), nullptr);
}

TEST(Safetensors, GetNamesTheMissingTensor) {
  auto s = open_safetensors(kModels + "tiny-gemma3");
  EXPECT_EQ(s->find("lm_head.weight"), nullptr);  // tied embeddings
  try {
    s->get("lm_head.weight");
    FAIL();
  } catch (const flashkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("lm_head.weight"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("tiny-gemma3"), std::string::npos);
  }
}

TEST(Weights, TypeNamesAndNumel) {
  EXPECT_STREQ(weight_type_name(WeightType::f32), "f32");
  EXPECT_STREQ(weight_type_name(WeightType::f16), "f16");
  EXPECT_STREQ(weight_type_name(WeightType::bf16), "bf16");
  EXPECT_STREQ(weight_type_name(WeightType::q8_0), "q8_0");
  WeightView w;
  EXPECT_EQ(w.numel(), 1);  // a scalar
  w.shape = {3, 0};
  EXPECT_EQ(w.numel(), 0);
  w.shape = {2, 3, 4};
  EXPECT_EQ(w.numel(), 24);
}

TEST(Weights, ToF32ConvertsEveryType) {
  const uint16_t f16[] = {0x3c00, 0xc000, 0x3800, 0x0001};  // 1, -2, 0.5, smallest subnormal
  WeightView w;
  w.name = "h";
  w.type = WeightType::f16;
  w.shape = {4};
  w.data = f16;
  w.nbytes = sizeof f16;
  float out[32];
  to_f32(w, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 0.5f);
  EXPECT_EQ(out[3], std::ldexp(1.0f, -24));
  const uint16_t bf[] = {0x3f80, 0xc040};  // 1, -3
  w.type = WeightType::bf16;
  w.shape = {2};
  w.data = bf;
  w.nbytes = sizeof bf;
  to_f32(w, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.0f);
  alignas(2) uint8_t q[34];
  const uint16_t d = 0x3800;  // 0.5
  std::memcpy(q, &d, 2);
  for (int i = 0; i < 32; ++i) q[2 + i] = uint8_t(int8_t(i - 16));
  w.type = WeightType::q8_0;
  w.shape = {32};
  w.data = q;
  w.nbytes = sizeof q;
  to_f32(w, out);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 0.5f * float(i - 16));
  // An empty tensor needs no buffer (found by fuzzing: memcpy was handed a null pointer).
  w.type = WeightType::f32;
  w.shape = {0, 4};
  w.data = nullptr;
  w.nbytes = 0;
  EXPECT_NO_THROW(to_f32(w, nullptr));
  w.type = WeightType::q8_0;
  w.shape = {32};
  w.data = q;
  w.nbytes = 33;  // a view that claims fewer bytes than its shape needs is refused, not read past
  EXPECT_THROW(to_f32(w, out), flashkit::Error);
}

}  // namespace
