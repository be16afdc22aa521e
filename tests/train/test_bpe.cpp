// The byte-level BPE trainer: its tokenizer.json loads in flashkit's tokenizer, round-trips any text, compresses,
// is deterministic, and tokenizes id for id like Hugging Face's JavaScript tokenizers (skipped without node).
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include "chat/chat_template.hpp"
#include "flashkit/error.hpp"
#include "flashkit/tokenizer.hpp"
#include "flashkit/train.hpp"
#include "node_reference.hpp"
#include "train/io.hpp"
#include "train_test_util.hpp"

namespace {

using namespace fk_train_test;
namespace fs = std::filesystem;
namespace tr = flashkit::train;
using nlohmann::json;

fs::path repo() { return fs::path(FLASHKIT_TEST_DATA).parent_path().parent_path(); }

// Text files of the repository (docs, sources) up to `limit` bytes, in a fixed order.
std::vector<fs::path> repo_text(int64_t limit) {
  std::vector<fs::path> files;
  for (const char* d : {"docs", "src", "include", "apps", "python", "tests/cli"})
    for (const auto& e : fs::recursive_directory_iterator(repo() / d)) {
      const auto ext = e.path().extension();
      if (e.is_regular_file() && (ext == ".md" || ext == ".cpp" || ext == ".hpp" || ext == ".py" || ext == ".cu"))
        files.push_back(e.path());
    }
  std::sort(files.begin(), files.end());
  std::vector<fs::path> out;
  int64_t total = 0;
  for (const auto& f : files) {
    if (total >= limit) break;
    total += int64_t(fs::file_size(f));
    out.push_back(f);
  }
  return out;
}

std::vector<std::string> probe_texts() {
  std::vector<std::string> t = {
      "In the beginning God created the heaven and the earth.",
      "  leading spaces, trailing spaces   \n\n\ttabs\tand\r\nCRLF",
      "Numbers 1234567 3.14159 and 1,000,000; contractions: don't, I'll, we've, she'd, THEY'RE",
      "unicode: caf\xC3\xA9 na\xC3\xAFve \xE4\xBD\xA0\xE5\xA5\xBD \xD0\xBF\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 "
      "\xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
      "<|begin_of_text|>special <|im_start|>user\nhi<|im_end|>\n<|end_of_text|>",
      "for (int i = 0; i < n; ++i) { x[i] += y[i] * 2; }  // code",
      "",
      " ",
  };
  std::ifstream f(repo() / "tests" / "tokenizer" / "node" / "corpus.json");
  if (f)
    for (const auto& s : json::parse(f)) t.push_back(s.get<std::string>());
  std::ifstream doc(repo() / "docs" / "ARCHITECTURE.md");
  std::string line;
  for (int i = 0; i < 60 && std::getline(doc, line); ++i) t.push_back(line);
  return t;
}

// One trained tokenizer per test process, removed at exit.
const fs::path& trained() {
  struct Dir {
    fs::path p;
    ~Dir() {
      std::error_code ec;
      if (!p.empty()) fs::remove_all(p, ec);
    }
  };
  static Dir dir;
  if (dir.p.empty()) {
    dir.p = temp_dir("bpe");
    tr::BpeOptions o;
    o.vocab_size = 1500;
    tr::train_bpe(repo_text(600'000), o, dir.p);
  }
  return dir.p;
}

TEST(Bpe, TrainedTokenizerLoadsAndRoundTrips) {
  const fs::path& dir = trained();
  const flashkit::Tokenizer tok = flashkit::Tokenizer::from_dir(dir);
  EXPECT_EQ(tok.vocab_size(), 1500);
  EXPECT_EQ(tok.bos_token(), "<|begin_of_text|>");
  EXPECT_EQ(tok.eos_token(), "<|end_of_text|>");
  EXPECT_EQ(tok.bos_id(), 0);
  EXPECT_FALSE(tok.chat_template().empty());
  int64_t bytes = 0, ids = 0;
  for (const auto& text : probe_texts()) {
    const auto e = tok.encode(text);
    EXPECT_EQ(tok.decode(e), text);
    const auto s = tok.encode(text, true);
    ASSERT_FALSE(s.empty());
    EXPECT_EQ(s[0], 0) << "BOS first with add_special";
    bytes += int64_t(text.size());
    ids += int64_t(e.size());
  }
  // specials are single ids
  EXPECT_EQ(tok.encode("<|im_start|>").size(), 1u);
  // merges compress English: well under one id per 2 bytes on the documentation it was trained on
  const std::string arch = tr::read_file(repo() / "docs" / "ARCHITECTURE.md", "doc");
  EXPECT_LT(double(tok.encode(arch).size()), 0.4 * double(arch.size()));
  EXPECT_GT(ids, 0);
  EXPECT_GT(bytes, 0);
}

// The chat template renders in flashkit's Jinja engine, and its markers are single special ids.
TEST(Bpe, ChatTemplateRenders) {
  const flashkit::Tokenizer tok = flashkit::Tokenizer::from_dir(trained());
  const flashkit::chat::ChatTemplate ct(tok.chat_template());
  flashkit::chat::ChatTemplateOptions o;
  o.bos_token = tok.bos_token();
  o.eos_token = tok.eos_token();
  const std::string text = ct.render({{"system", "Be brief."}, {"user", "Hi!"}}, o);
  EXPECT_EQ(text, "<|begin_of_text|><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
                  "<|im_start|>assistant\n");
  const auto ids = tok.encode(text);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], *tok.token_id("<|im_start|>"));
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(Bpe, Deterministic) {
  const fs::path dir = temp_dir("bpe2");
  tr::BpeOptions o;
  o.vocab_size = 1500;
  tr::train_bpe(repo_text(600'000), o, dir);
  EXPECT_EQ(tr::read_file(dir / "tokenizer.json", "t"), tr::read_file(trained() / "tokenizer.json", "t"));
  fs::remove_all(dir);
}

TEST(Bpe, IdsIdenticalToHuggingFaceJs) {
  const fs::path modules = repo() / "tests" / "tokenizer" / "node" / "node_modules";
  const fs::path dir = trained();
  const auto texts = probe_texts();
  const fs::path tf = dir / "texts.json";
  std::ofstream(tf) << json(texts).dump();
  std::string why;
  const auto got = fk_test::run_node_json(
      repo() / "tests" / "tokenizer" / "node", "@huggingface/tokenizers",
      "'" + (repo() / "tests" / "train" / "node" / "encode.mjs").string() + "' '" + modules.string() + "' '" +
          dir.string() + "' '" + tf.string() + "' {out}",
      &why);
  if (!got && why.starts_with("FAIL")) FAIL() << why;
  if (!got) GTEST_SKIP() << why;
  const flashkit::Tokenizer tok = flashkit::Tokenizer::from_dir(dir);
  const auto& cases = (*got)["cases"];
  ASSERT_EQ(cases.size(), texts.size());
  int64_t compared = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(tok.encode(texts[i]), cases[i]["ids"].get<std::vector<int32_t>>()) << json(texts[i]).dump();
    EXPECT_EQ(tok.encode(texts[i], true), cases[i]["ids_special"].get<std::vector<int32_t>>()) << json(texts[i]).dump();
    EXPECT_EQ(tok.decode(cases[i]["ids"].get<std::vector<int32_t>>()), cases[i]["decoded"].get<std::string>());
    compared += int64_t(cases[i]["ids"].size());
  }
  std::printf("[ bpe ] %zu texts, %lld ids identical to @huggingface/tokenizers\n", texts.size(),
              static_cast<long long>(compared));
}

// A few MB at vocabulary 8k on one core (printed; performance is not asserted).
TEST(Bpe, SpeedOnAFewMegabytes) {
  const fs::path dir = temp_dir("bpe_speed");
  const auto files = repo_text(3'000'000);
  tr::BpeOptions o;
  o.vocab_size = 8192;
  const auto r = tr::train_bpe(files, o, dir);
  std::printf("[ bpe ] %lld bytes, %lld distinct words -> %lld tokens (%lld merges) in %.2f s\n",
              static_cast<long long>(r.bytes), static_cast<long long>(r.words), static_cast<long long>(r.vocab_size),
              static_cast<long long>(r.merges), r.seconds);
  EXPECT_GT(r.merges, 1000);
  EXPECT_TRUE(fs::exists(dir / "tokenizer.json"));
  fs::remove_all(dir);
}

TEST(Bpe, OptionsAreChecked) {
  const fs::path dir = temp_dir("bpe_bad");
  tr::BpeOptions o;
  o.vocab_size = 100;
  try {
    tr::train_bpe(repo_text(1000), o, dir);
    ADD_FAILURE();
  } catch (const flashkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--vocab-size 100 is smaller than the 256 byte tokens"), std::string::npos);
  }
  fs::remove_all(dir);
}

}  // namespace
