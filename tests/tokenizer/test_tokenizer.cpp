// Unit tests of flashkit::Tokenizer on two tiny hand-made tokenizer.json files (tests/data/tokenizers):
//   tiny_sp         SentencePiece-style BPE: Prepend/Replace normalizer, byte fallback, Strip decoder
//   tiny_bytelevel  byte-level BPE: Llama 3's Split regex + ByteLevel, ignore_merges
//   tiny_metaspace  NFC normalizer, Metaspace pre-tokenizer and decoder
// plus round trips, streaming and metadata on the real Llama 3.1 / Gemma 3 files when `npm ci` has been run.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <thread>
#include <sstream>

#include "flashkit/error.hpp"
#include "flashkit/tokenizer.hpp"
#include "tokenizer_test_util.hpp"

namespace {

using flashkit::Tokenizer;
namespace ft = flashkit::test;
using Ids = std::vector<int32_t>;

std::filesystem::path tiny(const char* name) { return std::filesystem::path(FLASHKIT_TEST_DATA) / "tokenizers" / name; }

const Tokenizer& sp() {
  static Tokenizer t = Tokenizer::from_dir(tiny("tiny_sp"));
  return t;
}
const Tokenizer& bl() {
  static Tokenizer t = Tokenizer::from_dir(tiny("tiny_bytelevel"));
  return t;
}

int32_t id(const Tokenizer& t, const std::string& s) {
  auto v = t.token_id(s);
  EXPECT_TRUE(v.has_value()) << "no token " << s;
  return v.value_or(-1);
}
std::vector<std::string> pieces(const Tokenizer& t, const Ids& ids) {
  std::vector<std::string> r;
  for (auto i : ids) r.push_back(t.token_text(i));
  return r;
}
using Strs = std::vector<std::string>;

std::string read(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ------------------------------------------------------------------ BPE merges
TEST(TokenizerBpe, MergesFollowRankNotPosition) {
  // "▁abc": a+b (rank 0) then ab+c (rank 2) win over ▁+a (rank 13), so ▁ stays alone
  EXPECT_EQ(pieces(sp(), sp().encode("abc")), (Strs{"▁", "abc"}));
  EXPECT_EQ(pieces(sp(), sp().encode("bc")), (Strs{"▁", "bc"}));
  EXPECT_EQ(pieces(sp(), sp().encode("hello world")), (Strs{"▁hello", "▁world"}));
  EXPECT_EQ(pieces(sp(), sp().encode("a")), (Strs{"▁a"}));
}

TEST(TokenizerBpe, ByteFallbackForUnknownCharacters) {
  // é is not in the vocabulary: its two UTF-8 bytes
  EXPECT_EQ(pieces(sp(), sp().encode("é")), (Strs{"▁", "<0xC3>", "<0xA9>"}));
  EXPECT_EQ(pieces(sp(), sp().encode("🙂")), (Strs{"▁", "<0xF0>", "<0x9F>", "<0x99>", "<0x82>"}));
  EXPECT_EQ(sp().decode(sp().encode("é🙂 hello")), "é🙂 hello");
}

TEST(TokenizerBpe, IgnoreMergesTakesWholeVocabWords) {
  // " hattrick" is one vocabulary entry that no merge sequence reaches
  EXPECT_EQ(pieces(bl(), bl().encode("the hattrick")), (Strs{"t", "he", "Ġhattrick"}));
  EXPECT_EQ(pieces(bl(), bl().encode(" the cat")), (Strs{"Ġthe", "Ġcat"}));
}

TEST(TokenizerBpe, Llama3RegexPreTokenizer) {
  // contractions fold ASCII case; digits go in threes; newline runs stay together
  EXPECT_EQ(pieces(bl(), bl().encode("I'LL")), (Strs{"I", "'", "L", "L"}));
  auto p = pieces(bl(), bl().encode("cat's 12345\n\nin"));
  EXPECT_EQ(p, (Strs{"c", "at", "'s", "Ġ", "123", "4", "5", "ĊĊ", "in"}));
  // whitespace before a word: all but the last space form their own piece
  EXPECT_EQ(pieces(bl(), bl().encode("   cat")), (Strs{"ĠĠ", "Ġcat"}));
}

TEST(TokenizerBpe, NfcNormalizerAndMetaspace) {
  auto t = Tokenizer::from_dir(tiny("tiny_metaspace"));
  // e + combining acute composes to é before BPE; Metaspace prepends ▁ to the first section only
  EXPECT_EQ(pieces(t, t.encode("e\u0301")), (Strs{"▁é"}));
  EXPECT_EQ(t.encode("e\u0301"), t.encode("\u00e9"));
  EXPECT_EQ(pieces(t, t.encode("hello world")), (Strs{"▁hello", "▁world"}));
  EXPECT_EQ(t.decode(t.encode("hello world")), "hello world");
}

// ------------------------------------------------------------------ added / special tokens
TEST(TokenizerAdded, SpecialTokensSplitFirstAndPostProcessor) {
  EXPECT_EQ(sp().encode("abc", true), (Ids{1, id(sp(), "▁"), id(sp(), "abc")}));
  EXPECT_EQ(sp().encode("abc", false), (Ids{id(sp(), "▁"), id(sp(), "abc")}));
  // special token text in the input is recognised as the token
  EXPECT_EQ(sp().encode("<s>a</s>"), (Ids{1, id(sp(), "▁a"), 2}));
  // lstrip/rstrip: <tool> swallows the spaces around it; each side is normalized on its own
  EXPECT_EQ(pieces(sp(), sp().encode("a  <tool>  b")), (Strs{"▁a", "<tool>", "▁", "b"}));
  EXPECT_TRUE(sp().is_special(1));
  EXPECT_FALSE(sp().is_special(*sp().token_id("<tool>")));
  EXPECT_FALSE(sp().is_special(*sp().token_id("abc")));
  auto b = bl().encode("<|begin_of_text|>the<|eot_id|>", true);
  EXPECT_EQ(pieces(bl(), b), (Strs{"<|begin_of_text|>", "<|begin_of_text|>", "t", "he", "<|eot_id|>"}));
}

TEST(TokenizerAdded, Metadata) {
  EXPECT_EQ(sp().bos_id(), 1);
  EXPECT_EQ(sp().bos_token(), "<s>");
  EXPECT_EQ(sp().eos_token(), "</s>");
  EXPECT_EQ(sp().eos_ids(), (Ids{2}));
  EXPECT_NE(sp().chat_template().find("messages"), std::string::npos);
  EXPECT_TRUE(sp().add_bos_by_default());
  EXPECT_EQ(sp().vocab_size(), 287);
  // no tokenizer_config.json: BOS from the template, EOS from well-known end tokens
  EXPECT_EQ(bl().bos_token(), "<|begin_of_text|>");
  EXPECT_EQ(bl().eos_ids(), (Ids{*bl().token_id("<|eot_id|>"), *bl().token_id("<|end_of_text|>")}));
  EXPECT_EQ(bl().chat_template(), "");
}

// ------------------------------------------------------------------ decode
TEST(TokenizerDecode, SentencePieceStyle) {
  EXPECT_EQ(sp().decode(Ids{id(sp(), "▁hello"), id(sp(), "▁world")}), "hello world");
  EXPECT_EQ(sp().decode(Ids{1, id(sp(), "▁hello")}), "<s> hello");
  EXPECT_EQ(sp().decode(Ids{1, id(sp(), "▁hello"), 2}, true), "hello");
  // a lone byte that is not UTF-8 decodes to U+FFFD
  EXPECT_EQ(sp().decode(Ids{id(sp(), "<0xFF>")}), "\xEF\xBF\xBD");
  for (std::string s : {"hello world", "  two  spaces ", "abc\nbc", "日本語 and 🙂👍🏽", "x<tool>y"}) {
    std::string back = sp().decode(sp().encode(s));
    if (s == "x<tool>y") EXPECT_EQ(back, "x<tool> y");  // normalization puts ▁ before each section
    else EXPECT_EQ(back, s);
  }
}

TEST(TokenizerDecode, ByteLevel) {
  for (std::string s : {"the cat in the hat", "  spaces\n\n\ttabs ", "Grüße 🙂 日本", "<|eot_id|> x"}) {
    EXPECT_EQ(bl().decode(bl().encode(s)), s);
  }
  EXPECT_EQ(bl().decode(bl().encode("<|begin_of_text|>hi", true), true), "hi");
}

TEST(TokenizerDecode, BadIdThrows) {
  EXPECT_THROW(sp().decode(Ids{-1}), flashkit::Error);
  EXPECT_THROW(sp().decode(Ids{sp().vocab_size()}), flashkit::Error);
  EXPECT_THROW(sp().token_text(1 << 29), flashkit::Error);
}

// ------------------------------------------------------------------ streaming
TEST(TokenizerStream, NeverEmitsPartialUtf8) {
  auto ids = sp().encode("a🙂é");
  // ▁a, then 4 byte tokens of the emoji, then 2 of é
  ASSERT_EQ(ids.size(), 7u);
  auto d = sp().stream_decoder();
  std::vector<std::string> outs;
  for (auto i : ids) outs.push_back(d.push(i));
  EXPECT_EQ(outs, (Strs{"a", "", "", "", "🙂", "", "é"}));
  EXPECT_EQ(d.flush(), "");
  // the held back bytes of an unfinished character come out of flush as U+FFFD
  d.reset();
  EXPECT_EQ(d.push(id(sp(), "<0xF0>")), "");
  EXPECT_EQ(d.push(id(sp(), "<0x9F>")), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");
  // an invalid byte is replaced at once, then text goes on
  EXPECT_EQ(d.push(id(sp(), "<0xFF>")), "\xEF\xBF\xBD");
  EXPECT_EQ(d.push(id(sp(), "▁hello")), " hello");
  // ids past the vocabulary (padded embeddings) are skipped, not thrown
  EXPECT_EQ(d.push(sp().vocab_size() + 5), "");
  EXPECT_EQ(d.push(-1), "");
  EXPECT_EQ(d.push(id(sp(), "▁world")), " world");
}

TEST(TokenizerStream, SkipsSpecialAndMatchesDecode) {
  auto ids = sp().encode("<s>hello world</s>");
  auto d = sp().stream_decoder(true);
  std::string s;
  for (auto i : ids) s += d.push(i);
  s += d.flush();
  EXPECT_EQ(s, sp().decode(ids, true));
  EXPECT_EQ(s, "hello world");
  auto b = bl().stream_decoder();
  std::string t;
  for (auto i : bl().encode("Grüße 🙂")) t += b.push(i);
  EXPECT_EQ(t + b.flush(), "Grüße 🙂");
}

// ------------------------------------------------------------------ errors
TEST(TokenizerErrors, InvalidUtf8NamesOffset) {
  try {
    sp().encode(std::string("abc\xC3(", 5));
    FAIL() << "no throw";
  } catch (const flashkit::Error& e) {
    EXPECT_EQ(e.status(), flashkit::Status::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("byte offset 3"), std::string::npos) << e.what();
  }
  for (std::string bad : {std::string("\xFF"), std::string("\xC0\x80"), std::string("\xED\xA0\x80"),
                          std::string("x\xF4\x90\x80\x80"), std::string("\xE2\x82")}) {
    EXPECT_THROW(bl().encode(bad), flashkit::Error) << bad.size();
  }
  EXPECT_NO_THROW(bl().encode(""));
  EXPECT_TRUE(bl().encode("").empty());
}

TEST(TokenizerErrors, BadFiles) {
  EXPECT_THROW(Tokenizer::from_dir(tiny("does_not_exist")), flashkit::Error);
  EXPECT_THROW(Tokenizer::from_dir(std::filesystem::path(FLASHKIT_TEST_DATA)), flashkit::Error);  // no tokenizer.json
  EXPECT_THROW(Tokenizer::from_json("{not json"), flashkit::Error);
  EXPECT_THROW(Tokenizer::from_json("[]"), flashkit::Error);
  EXPECT_THROW(Tokenizer::from_json(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [7]}})"), flashkit::Error);
  EXPECT_THROW(Tokenizer::from_json(R"({"model": {"type": "WordPiece", "vocab": {}}})"), flashkit::Error);
  EXPECT_THROW(Tokenizer::from_json(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                                       "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(["}}})"),
               flashkit::Error);
  std::string ok = read(tiny("tiny_sp") / "tokenizer.json");
  EXPECT_THROW(Tokenizer::from_json(ok, "{broken"), flashkit::Error);
  try {
    Tokenizer::from_json(ok.substr(0, ok.size() / 2));
    FAIL();
  } catch (const flashkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
}

// Hostile ids: huge vocab/added ids would size dense tables in gigabytes; post-processor ids must exist.
TEST(TokenizerErrors, OutOfRangeIdsAreRejected) {
  auto expect_error = [](const std::string& json, const char* needle) {
    try {
      Tokenizer::from_json(json);
      FAIL() << "accepted: " << json;
    } catch (const flashkit::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1000000000}, "merges": []}})", "model.vocab id");
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                   "added_tokens": [{"id": 2147483647, "content": "<x>", "special": true}]})", "added token id");
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                   "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}},
                     {"Sequence": {"id": "A"}}], "pair": [],
                     "special_tokens": {"<s>": {"id": "<s>", "ids": [123456], "tokens": ["<s>"]}}}})",
               "post_processor uses token id");
}

TEST(TokenizerErrors, ConcurrentEncodeIsSafe) {
  std::vector<std::thread> th;
  std::vector<Ids> got(4);
  for (int k = 0; k < 4; ++k)
    th.emplace_back([&, k] {
      for (int r = 0; r < 50; ++r) got[static_cast<size_t>(k)] = bl().encode("the cat in the hat 12345 Grüße");
    });
  for (auto& t : th) t.join();
  for (int k = 1; k < 4; ++k) EXPECT_EQ(got[static_cast<size_t>(k)], got[0]);
}

TEST(TokenizerErrors, LongRunsDoNotBlowUp) {
  for (std::string s : {std::string(200000, ' '), std::string(200000, 'a'), std::string(100000, '\n') + "x",
                        std::string(50000, '\t') + std::string(50000, '.')}) {
    EXPECT_EQ(bl().decode(bl().encode(s)), s);
    EXPECT_EQ(sp().decode(sp().encode(s)), s);
  }
}

// ------------------------------------------------------------------ real tokenizers
const char* kRoundTrip[] = {
    "Hello, world! I'll've been there.",
    "  leading and trailing spaces  ",
    "def f(x):\n\treturn x * 2\n\n\n",
    "Größe, façade, naïve — 日本語のテキスト, 中文, العربية, हिन्दी, русский",
    "Emoji 👩‍👩‍👧‍👦 👍🏽 🏳️‍🌈 🇩🇪 and numbers 1234567890",
    "<start_of_turn>user\nhi<end_of_turn>\n<|eot_id|>",
    "\r\n\r\n \t \u00a0\u3000",
};

void real_round_trip(const std::string& name) {
  if (!ft::have_real_tokenizer(name)) GTEST_SKIP() << ft::kNpmHint;
  const Tokenizer& t = ft::real_tokenizer(name);
  for (const char* s : kRoundTrip) {
    auto ids = t.encode(s);
    EXPECT_EQ(t.decode(ids), s) << name;
    // streaming gives the same text, one token at a time
    auto d = t.stream_decoder(false);
    std::string streamed;
    for (auto i : ids) {
      streamed += d.push(i);
    }
    streamed += d.flush();
    EXPECT_EQ(streamed, s) << name;
  }
}

TEST(TokenizerReal, Llama3RoundTrip) { real_round_trip("llama3"); }
TEST(TokenizerReal, Gemma3RoundTrip) { real_round_trip("gemma3"); }

TEST(TokenizerReal, Llama3Metadata) {
  if (!ft::have_real_tokenizer("llama3")) GTEST_SKIP() << ft::kNpmHint;
  const Tokenizer& t = ft::real_tokenizer("llama3");
  EXPECT_EQ(t.vocab_size(), 128256);
  EXPECT_EQ(t.bos_id(), 128000);
  EXPECT_EQ(t.bos_token(), "<|begin_of_text|>");
  auto eos = t.eos_ids();
  ASSERT_FALSE(eos.empty());
  EXPECT_EQ(eos[0], 128009);  // <|eot_id|>, the config's eos_token
  EXPECT_NE(std::find(eos.begin(), eos.end(), 128001), eos.end());
  EXPECT_TRUE(t.is_special(128000));
  EXPECT_FALSE(t.is_special(9906));
  EXPECT_NE(t.chat_template().find("start_header_id"), std::string::npos);
  EXPECT_EQ(t.encode("Hello world", true), (Ids{128000, 9906, 1917}));
}

TEST(TokenizerReal, Gemma3Metadata) {
  if (!ft::have_real_tokenizer("gemma3")) GTEST_SKIP() << ft::kNpmHint;
  const Tokenizer& t = ft::real_tokenizer("gemma3");
  EXPECT_EQ(t.vocab_size(), 262145);
  EXPECT_EQ(t.bos_id(), 2);
  auto eos = t.eos_ids();
  ASSERT_FALSE(eos.empty());
  EXPECT_EQ(eos[0], 106);  // <end_of_turn>
  EXPECT_NE(std::find(eos.begin(), eos.end(), 1), eos.end());  // <eos>
  EXPECT_EQ(t.token_id("<start_of_turn>"), 105);
  EXPECT_NE(t.chat_template().find("start_of_turn"), std::string::npos);
  EXPECT_EQ(t.encode("Hello world", true), (Ids{2, 9259, 1902}));
  // emoji split over byte tokens streams as whole characters only
  auto ids = t.encode("\xF0\x9F\xAB\xA8");  // U+1FAE8, rare enough to need byte fallback
  auto d = t.stream_decoder();
  std::string s;
  for (auto i : ids) {
    std::string p = d.push(i);
    if (!p.empty()) EXPECT_EQ(p, "\xF0\x9F\xAB\xA8");
    s += p;
  }
  EXPECT_EQ(s + d.flush(), "\xF0\x9F\xAB\xA8");
}

}  // namespace
