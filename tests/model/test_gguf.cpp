// GGUF reader against the fixtures made by tools/model/hf_to_gguf.py: every tensor maps back to its safetensors
// original (names, PyTorch shapes, values up to the storage type's rounding) and the config built from the
// metadata matches config.json.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "gguf_builder.hpp"
#include "model/gguf.hpp"
#include "model/weights.hpp"

using namespace flashkit::model;
using nlohmann::json;

namespace {

const std::string kData = std::string(FLASHKIT_TEST_DATA) + "/";

std::vector<float> f32_of(const WeightView& w) {
  std::vector<float> v(size_t(w.numel()));
  to_f32(w, v.data());
  return v;
}

struct Case {
  const char* gguf;
  const char* model;
  WeightType matrix_type;  // what 2-D tensors are stored as
};

class GgufFixture : public ::testing::TestWithParam<Case> {};

TEST_P(GgufFixture, TensorsMatchSafetensors) {
  const Case c = GetParam();
  auto g = open_gguf(kData + "gguf/" + c.gguf);
  auto s = open_safetensors(kData + "models/" + c.model);
  const json cfg = json::parse(std::ifstream(kData + "models/" + c.model + "/config.json"));
  const bool gemma = cfg["model_type"] == "gemma3_text";

  size_t matched = 0;
  for (const auto& name : s->names()) {
    if (name == "lm_head.weight" && cfg.value("tie_word_embeddings", false)) continue;
    const WeightView* gw = g->find(name);
    ASSERT_NE(gw, nullptr) << c.gguf << " lacks " << name;
    const WeightView& sw = s->get(name);
    ASSERT_EQ(gw->shape, sw.shape) << name;
    ++matched;
    const auto a = f32_of(*gw), b = f32_of(sw);
    const bool norm = name.find("norm.weight") != std::string::npos;
    if (sw.shape.size() == 1) {
      EXPECT_EQ(gw->type, WeightType::f32) << name;  // 1-D tensors stay f32, as llama.cpp's converter keeps them
      // Gemma norms went through (w + 1) - 1 in f32: off by at most half an ulp of 1 + w.
      const float tol = gemma && norm ? 2e-7f * 2 : 0.0f;
      for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << name << "[" << i << "]";
      continue;
    }
    // Q8_0 rows must be whole 32-element blocks; the converter stores other matrices as f16 (as llama.cpp does).
    const WeightType type =
        c.matrix_type == WeightType::q8_0 && sw.shape.back() % 32 != 0 ? WeightType::f16 : c.matrix_type;
    EXPECT_EQ(gw->type, type) << name;
    if (type == WeightType::q8_0) {
      double err = 0, ref = 0, amax = 0, emax = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        err += double(a[i] - b[i]) * (a[i] - b[i]);
        ref += double(b[i]) * b[i];
        amax = std::max(amax, double(std::fabs(b[i])));
        emax = std::max(emax, double(std::fabs(a[i] - b[i])));
      }
      EXPECT_LT(std::sqrt(err / ref), 1e-2) << name;
      EXPECT_LE(emax, amax / 127.0 * 0.51 + 1e-3 * amax) << name;  // half a quantisation step (+ f16 scale rounding)
    } else {
      for (size_t i = 0; i < a.size(); ++i) {
        const float want = type == WeightType::f16    ? flashkit::f16_to_f32(flashkit::f32_to_f16(b[i]))
                           : type == WeightType::bf16 ? flashkit::bf16_to_f32(flashkit::f32_to_bf16(b[i]))
                                                      : b[i];
        ASSERT_EQ(a[i], want) << name << "[" << i << "]";
      }
    }
  }
  // Nothing beyond the HF tensors, except llama3's baked RoPE factors.
  size_t extra = g->names().size() - matched;
  EXPECT_EQ(extra, g->find("rope_freqs.weight") ? 1u : 0u);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufFixture,
                         ::testing::Values(Case{"tiny-llama-f16.gguf", "tiny-llama", WeightType::f16},
                                           Case{"tiny-llama-q8_0.gguf", "tiny-llama", WeightType::q8_0},
                                           Case{"tiny-gemma3-q8_0.gguf", "tiny-gemma3", WeightType::q8_0},
                                           Case{"tiny-gemma3-bf16.gguf", "tiny-gemma3-bf16", WeightType::bf16}),
                         [](const auto& info) {
                           std::string s = info.param.gguf;
                           s = s.substr(0, s.size() - 5);
                           for (char& ch : s)
                             if (ch == '-' || ch == '.') ch = '_';
                           return s;
                         });

// The fields the engine reads, compared with the transformers config.json the GGUF was made from.
TEST_P(GgufFixture, ConfigMatchesConfigJson) {
  const Case c = GetParam();
  auto g = open_gguf(kData + "gguf/" + c.gguf);
  const json want = json::parse(std::ifstream(kData + "models/" + c.model + "/config.json"));
  const json got = gguf_hf_config(*g);
  std::vector<std::string> keys = {"model_type",
                                   "hidden_size",
                                   "intermediate_size",
                                   "num_hidden_layers",
                                   "num_attention_heads",
                                   "num_key_value_heads",
                                   "head_dim",
                                   "rms_norm_eps",
                                   "vocab_size",
                                   "bos_token_id",
                                   "eos_token_id",
                                   "pad_token_id",
                                   "tie_word_embeddings",
                                   "max_position_embeddings",
                                   "rope_parameters",
                                   "attention_bias"};
  if (want["model_type"] == "gemma3_text")
    for (const char* k : {"sliding_window", "layer_types", "query_pre_attn_scalar", "final_logit_softcapping",
                          "attn_logit_softcapping", "hidden_activation"})
      keys.push_back(k);
  else
    keys.push_back("hidden_act");
  for (const auto& k : keys) {
    ASSERT_TRUE(got.contains(k)) << k;
    EXPECT_EQ(got[k], want[k]) << k << ": gguf " << got[k].dump() << " vs config.json " << want[k].dump();
  }
  if (c.matrix_type == WeightType::bf16) EXPECT_EQ(got["dtype"], want["dtype"]);
  if (c.matrix_type == WeightType::q8_0) EXPECT_FALSE(got.contains("dtype"));
  // The legacy spellings agree with rope_parameters.
  if (want["model_type"] == "llama") {
    EXPECT_EQ(got["rope_theta"], want["rope_parameters"]["rope_theta"]);
    EXPECT_EQ(got["rope_scaling"]["rope_type"], "llama3");
  } else {
    EXPECT_EQ(got["rope_theta"], want["rope_parameters"]["full_attention"]["rope_theta"]);
    EXPECT_EQ(got["rope_local_base_freq"], want["rope_parameters"]["sliding_attention"]["rope_theta"]);
  }
}

TEST(Gguf, HeaderAndMetadata) {
  const auto h = read_gguf_header(kData + "gguf/tiny-gemma3-bf16.gguf");
  EXPECT_EQ(h.version, 3u);
  EXPECT_EQ(h.alignment, 64u);
  EXPECT_EQ(h.data_offset % 64, 0u);
  EXPECT_EQ(h.metadata["general.architecture"], "gemma3");
  for (const auto& t : h.tensors) EXPECT_EQ(t.offset % 64, 0u) << t.name;
  auto g = open_gguf(kData + "gguf/tiny-llama-q8_0.gguf");
  const json& md = gguf_metadata(*g);
  EXPECT_EQ(md["general.architecture"], "llama");
  EXPECT_EQ(md["llama.block_count"], 3);
  EXPECT_EQ(md["general.file_type"], 7);
  auto s = open_safetensors(kData + "models/tiny-llama");
  EXPECT_THROW(gguf_metadata(*s), flashkit::Error);
  EXPECT_EQ(ggml_type_name(12), "Q4_K");
  EXPECT_EQ(ggml_type_name(30), "BF16");
  EXPECT_EQ(ggml_type_name(1000), "type 1000");
}

TEST(Gguf, OpenCheckpointEitherKind) {
  auto a = open_checkpoint(kData + "models/tiny-gemma3");
  auto b = open_checkpoint(kData + "gguf/tiny-gemma3-q8_0.gguf");
  EXPECT_EQ(a.config["num_hidden_layers"], b.config["num_hidden_layers"]);
  EXPECT_EQ(a.config["layer_types"], b.config["layer_types"]);
  EXPECT_EQ(a.weights->get("model.layers.5.self_attn.q_proj.weight").shape,
            b.weights->get("model.layers.5.self_attn.q_proj.weight").shape);
}

// The two llama.cpp conventions on hand-made data, independent of our converter.
TEST(Gguf, UndoesLlamaQkPermutation) {
  // One head of dim 8, rows of 2 floats: GGUF row r holds value r. HF row j*4+i = GGUF row 2*i+j.
  std::vector<float> q;
  for (int r = 0; r < 8; ++r) q.insert(q.end(), {float(r), float(r)});
  // Two kv heads of dim 4 for k: per head, HF row j*2+i = GGUF row 2*i+j.
  std::vector<float> k;
  for (int r = 0; r < 8; ++r) k.insert(k.end(), {float(r), float(r)});
  fk_test::GgufBuilder b;
  b.llama(1, 2)
      .tensor("blk.0.attn_q.weight", {2, 8}, 0, fk_test::f32_bytes(q))
      .tensor("blk.0.attn_k.weight", {2, 8}, 0, fk_test::f32_bytes(k))
      .tensor("blk.0.attn_v.weight", {2, 8}, 0, fk_test::f32_bytes(k));
  const std::string bytes = b.build();
  auto g = open_gguf_memory(bytes.data(), bytes.size(), "perm.gguf");
  const auto qq = f32_of(g->get("model.layers.0.self_attn.q_proj.weight"));
  const float want_q[] = {0, 2, 4, 6, 1, 3, 5, 7};
  for (int r = 0; r < 8; ++r) EXPECT_EQ(qq[2 * r], want_q[r]) << r;
  const auto kk = f32_of(g->get("model.layers.0.self_attn.k_proj.weight"));
  const float want_k[] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int r = 0; r < 8; ++r) EXPECT_EQ(kk[2 * r], want_k[r]) << r;
  const auto vv = f32_of(g->get("model.layers.0.self_attn.v_proj.weight"));  // v is not permuted
  for (int r = 0; r < 8; ++r) EXPECT_EQ(vv[2 * r], float(r));
  EXPECT_EQ(g->get("model.layers.0.self_attn.q_proj.weight").shape, (std::vector<int64_t>{8, 2}));
}

TEST(Gguf, UndoesGemmaNormOffsetAndMapsGemmaNames) {
  fk_test::GgufBuilder b;
  b.str("general.architecture", "gemma3");
  b.tensor("blk.0.attn_norm.weight", {2}, 0, fk_test::f32_bytes({1.5f, 0.25f}))
      .tensor("blk.0.post_attention_norm.weight", {2}, 0, fk_test::f32_bytes({1.0f, 2.0f}))
      .tensor("blk.0.ffn_norm.weight", {2}, 0, fk_test::f32_bytes({1.0f, 2.0f}))
      .tensor("blk.0.post_ffw_norm.weight", {2}, 0, fk_test::f32_bytes({1.0f, 2.0f}))
      .tensor("blk.0.attn_q_norm.weight", {2}, 0, fk_test::f32_bytes({1.0f, 2.0f}))
      .tensor("output_norm.weight", {2}, 0, fk_test::f32_bytes({3.0f, 1.0f}))
      .tensor("blk.0.attn_q.weight", {2, 2}, 0, fk_test::f32_bytes({1, 2, 3, 4}));  // not a norm: untouched
  const std::string bytes = b.build();
  auto g = open_gguf_memory(bytes.data(), bytes.size(), "g.gguf");
  EXPECT_EQ(f32_of(g->get("model.layers.0.input_layernorm.weight")), (std::vector<float>{0.5f, -0.75f}));
  EXPECT_EQ(f32_of(g->get("model.layers.0.post_attention_layernorm.weight")), (std::vector<float>{0, 1}));
  EXPECT_EQ(f32_of(g->get("model.layers.0.pre_feedforward_layernorm.weight")), (std::vector<float>{0, 1}));
  EXPECT_EQ(f32_of(g->get("model.layers.0.post_feedforward_layernorm.weight")), (std::vector<float>{0, 1}));
  EXPECT_EQ(f32_of(g->get("model.layers.0.self_attn.q_norm.weight")), (std::vector<float>{0, 1}));
  EXPECT_EQ(f32_of(g->get("model.norm.weight")), (std::vector<float>{2, 0}));
  EXPECT_EQ(f32_of(g->get("model.layers.0.self_attn.q_proj.weight")), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(g->get("model.layers.0.self_attn.q_proj.weight").shape, (std::vector<int64_t>{2, 2}));
}

TEST(Gguf, MetadataOfEveryTypeIncludingNestedArrays) {
  fk_test::GgufBuilder b;
  auto v = [](auto x) { return std::string(reinterpret_cast<const char*>(&x), sizeof x); };
  b.str("general.architecture", "llama")
      .raw("u8", 0, v(uint8_t(200)))
      .raw("i8", 1, v(int8_t(-5)))
      .raw("u16", 2, v(uint16_t(60000)))
      .raw("i16", 3, v(int16_t(-300)))
      .raw("u32", 4, v(uint32_t(4000000000u)))
      .raw("i32", 5, v(int32_t(-7)))
      .raw("f32", 6, v(0.5f))
      .raw("bool", 7, v(uint8_t(1)))
      .raw("u64", 10, v(uint64_t(1) << 60))
      .raw("i64", 11, v(int64_t(-1) << 60))
      .raw("f64", 12, v(0.125));
  // [[1, 2], [3]]: an array of element type ARRAY, each element its own type, count and values.
  std::string arr;
  fk_test::put_u32(arr, 9);
  fk_test::put_u64(arr, 2);
  fk_test::put_u32(arr, 5);
  fk_test::put_u64(arr, 2);
  arr += v(int32_t(1)) + v(int32_t(2));
  fk_test::put_u32(arr, 5);
  fk_test::put_u64(arr, 1);
  arr += v(int32_t(3));
  b.raw("nested", 9, arr);
  std::string strs;
  fk_test::put_u32(strs, 8);
  fk_test::put_u64(strs, 2);
  fk_test::put_str(strs, "a");
  fk_test::put_str(strs, "");
  b.raw("strings", 9, strs);
  const std::string bytes = b.build();
  const auto h = read_gguf_header(bytes.data(), bytes.size(), "m.gguf");
  const json& m = h.metadata;
  EXPECT_EQ(m["u8"], 200);
  EXPECT_EQ(m["i8"], -5);
  EXPECT_EQ(m["u16"], 60000);
  EXPECT_EQ(m["i16"], -300);
  EXPECT_EQ(m["u32"], 4000000000u);
  EXPECT_EQ(m["i32"], -7);
  EXPECT_EQ(m["f32"], 0.5);
  EXPECT_EQ(m["bool"], true);
  EXPECT_EQ(m["u64"], uint64_t(1) << 60);
  EXPECT_EQ(m["i64"], int64_t(-1) << 60);
  EXPECT_EQ(m["f64"], 0.125);
  EXPECT_EQ(m["nested"], json::parse("[[1,2],[3]]"));
  EXPECT_EQ(m["strings"], json::parse(R"(["a",""])"));
}

TEST(Gguf, TokenizerJsonFromMetadata) {
  fk_test::GgufBuilder b;
  b.str("general.architecture", "llama").str("tokenizer.ggml.model", "gpt2");
  std::string toks, types, merges;
  fk_test::put_u32(toks, 8);
  fk_test::put_u64(toks, 3);
  for (const char* t : {"<s>", "a", "b"}) fk_test::put_str(toks, t);
  fk_test::put_u32(types, 5);
  fk_test::put_u64(types, 3);
  for (int32_t t : {3, 1, 1}) types.append(reinterpret_cast<const char*>(&t), 4);
  fk_test::put_u32(merges, 8);
  fk_test::put_u64(merges, 1);
  fk_test::put_str(merges, "a b");
  b.raw("tokenizer.ggml.tokens", 9, toks)
      .raw("tokenizer.ggml.token_type", 9, types)
      .raw("tokenizer.ggml.merges", 9, merges)
      .u32("tokenizer.ggml.bos_token_id", 0);
  const std::string bytes = b.build();
  auto g = open_gguf_memory(bytes.data(), bytes.size(), "tok.gguf");
  const json t = gguf_tokenizer_json(*g);
  EXPECT_EQ(t["model"]["type"], "BPE");
  EXPECT_EQ(t["model"]["vocab"]["b"], 2);
  EXPECT_EQ(t["model"]["merges"], json::parse(R"(["a b"])"));
  EXPECT_EQ(t["added_tokens"][0]["content"], "<s>");
  EXPECT_EQ(t["gguf"]["ggml.bos_token_id"], 0);
  auto f = open_gguf(kData + "gguf/tiny-llama-f16.gguf");  // the fixtures carry no vocabulary
  EXPECT_THROW(gguf_tokenizer_json(*f), flashkit::Error);
}

}  // namespace
