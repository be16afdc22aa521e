// Token ids identical to Hugging Face's JavaScript tokenizers (@huggingface/tokenizers), id for id, on a
// corpus of English, other scripts, code, whitespace runs, emoji and special-token text, for Llama 3.1 and
// Gemma 3. The expected ids are made by running node on tests/tokenizer/node/expected.mjs; without node or
// without `npm ci` in tests/tokenizer/node the tests are skipped.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <unistd.h>
#include <map>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "node_reference.hpp"
#include "tokenizer_test_util.hpp"

namespace {

using flashkit::Tokenizer;
using nlohmann::json;
namespace ft = flashkit::test;

// Runs node once per model (each test is its own process under ctest).
const json* expected(const std::string& model, std::string* why) {
  static std::map<std::string, json> cache;
  static std::map<std::string, std::string> reasons;
  if (!cache.count(model) && !reasons.count(model)) {
    std::string& reason = reasons[model];
    json& data = cache[model];
    if (!ft::have_real_tokenizer("llama3") || !ft::have_real_tokenizer("gemma3")) {
      reason = ft::kNpmHint;
    } else if (auto got = fk_test::run_node_json(ft::node_dir(), "@huggingface/tokenizers",
                                                 "expected.mjs {out} --only " + model, &reason)) {
      data = std::move(*got);
    } else if (reason.starts_with("FAIL")) {
      reason = "node expected.mjs failed: " + reason;
    }
  }
  if (!reasons[model].empty()) {
    *why = reasons[model];
    return nullptr;
  }
  return &cache[model];
}

std::string show(const std::string& s) { return json(s).dump(); }

void compare_model(const std::string& name) {
  std::string why;
  const json* e = expected(name, &why);
  if (!e && why.starts_with("node expected.mjs failed")) FAIL() << why;
  if (!e) GTEST_SKIP() << why;
  const json* m = nullptr;
  for (const auto& x : (*e)["models"])
    if (x["name"] == name) m = &x;
  ASSERT_NE(m, nullptr);
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto& slot = loaded[name];
  if (!slot) slot = std::make_unique<Tokenizer>(Tokenizer::from_dir((*m)["dir"].get<std::string>()));
  const Tokenizer& t = name.starts_with("tiny") ? *slot : ft::real_tokenizer(name);
  int cases = 0, ids_total = 0, mismatches = 0;
  for (const auto& c : (*m)["cases"]) {
    std::string text = c["text"];
    auto want = c["ids"].get<std::vector<int32_t>>();
    auto want_special = c["ids_special"].get<std::vector<int32_t>>();
    auto got = t.encode(text);
    auto got_special = t.encode(text, true);
    ++cases;
    ids_total += static_cast<int>(want.size());
    if (got != want) {
      ++mismatches;
      size_t k = 0;
      while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
      ADD_FAILURE() << name << ": ids differ for " << show(text.substr(0, 200)) << " at index " << k << ": got "
                    << (k < got.size() ? std::to_string(got[k]) + " (" + show(t.token_text(got[k])) + ")" : "end")
                    << ", want "
                    << (k < want.size() ? std::to_string(want[k]) + " (" + show(t.token_text(want[k])) + ")" : "end");
    }
    EXPECT_TRUE(got_special == want_special) << name << ": add_special ids differ for " << show(text.substr(0, 200));
    if (!want.empty()) {
      std::string dec = t.decode(want);
      // The reference's ByteFallback decoder drops a U+FEFF that starts a run of byte tokens (TextDecoder
      // strips a BOM); we keep the text as it was.
      bool bom = text.find("\xEF\xBB\xBF") != std::string::npos;
      if (!bom) {
        EXPECT_TRUE(dec == c["decoded"].get<std::string>())
            << name << ": decode differs from the reference for " << show(text.substr(0, 200)) << "\n  got  "
            << show(dec.substr(0, 300)) << "\n  want " << show(c["decoded"].get<std::string>().substr(0, 300));
      }
      // SentencePiece style: a literal "▁" in the text comes back as a space (as in the reference)
      bool meta = name == "gemma3" && text.find("\xE2\x96\x81") != std::string::npos;
      if (!meta && !name.starts_with("tiny")) {
        EXPECT_TRUE(dec == text) << name << ": decode(encode(x)) != x for " << show(text.substr(0, 200))
                                 << "\n  got " << show(dec.substr(0, 300));
      }
    }
  }
  std::printf("[ %s ] %d texts, %d ids compared with @huggingface/tokenizers, %d mismatching texts\n", name.c_str(),
              cases, ids_total, mismatches);
}

// Encode speed on the corpus document repeated to ~4 MB (printed; the JS figure comes from
// `node expected.mjs OUT --bench`).
void speed(const std::string& name) {
  if (!ft::have_real_tokenizer(name)) GTEST_SKIP() << ft::kNpmHint;
  std::ifstream f(ft::node_dir() / "corpus.json");
  json corpus = json::parse(f);
  std::string doc;
  for (const auto& c : corpus) doc += c.get<std::string>() + "\n";
  std::string big;
  while (big.size() < 4'000'000) big += doc;
  const Tokenizer& t = ft::real_tokenizer(name);
  t.encode(doc);  // warm
  // CPU time of this thread (the machine may be shared, wall time would measure the neighbours)
  auto cpu = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  };
  double c0 = cpu();
  auto ids = t.encode(big);
  double s = cpu() - c0;
  double c1 = cpu();
  std::string back = t.decode(ids);
  double sd = cpu() - c1;
  std::printf("[ %s ] encode %.2f MB/s (%zu bytes -> %zu ids in %.3f s CPU), decode %.1f MB/s\n", name.c_str(),
              static_cast<double>(big.size()) / s / 1e6, big.size(), ids.size(), s,
              static_cast<double>(big.size()) / sd / 1e6);
  if (name == "llama3") EXPECT_TRUE(back == big);  // Gemma turns the corpus's literal "▁" into spaces
  EXPECT_GT(ids.size(), big.size() / 20);
}

TEST(NodeReference, Llama3EncodeSpeed) { speed("llama3"); }
TEST(NodeReference, Gemma3EncodeSpeed) { speed("gemma3"); }

TEST(NodeReference, Llama3IdsIdentical) { compare_model("llama3"); }
TEST(NodeReference, Gemma3IdsIdentical) { compare_model("gemma3"); }
TEST(NodeReference, TinyTokenizersIdsIdentical) {
  compare_model("tiny_sp");
  compare_model("tiny_bytelevel");
  compare_model("tiny_metaspace");
}

}  // namespace
