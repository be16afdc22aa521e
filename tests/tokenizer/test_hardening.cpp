// Hostile-input regressions of the tokenizer (harden-parse): deeply nested pipelines, oversized/deep
// tokenizer_config.json, long BPE words cut at safe points (ids unchanged), and threads: concurrent encode and
// the C API's free during encode.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "flashkit/error.hpp"
#include "flashkit/flashkit.h"
#include "flashkit/tokenizer.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer/json_load.hpp"
#include "tokenizer/char_tables.hpp"
#include "tokenizer_test_util.hpp"

namespace {

using flashkit::Tokenizer;
using nlohmann::json;
namespace ft = flashkit::test;
namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

fs::path tiny(const char* name) { return fs::path(FLASHKIT_TEST_DATA) / "tokenizers" / name; }

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const flashkit::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-flashkit exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

// tiny_sp's tokenizer.json with `key` replaced by the JSON text `value` (spliced as text: a 50,000-deep value
// cannot go through nlohmann's recursive dump).
std::string with_raw(const std::string& key, const std::string& value) {
  json t = json::parse(read(tiny("tiny_sp") / "tokenizer.json"));
  t[key] = "@@VALUE@@";
  std::string s = t.dump();
  s.replace(s.find("\"@@VALUE@@\""), 11, value);
  return s;
}

// `depth` Sequences around `leaf`: {"type": "Sequence", "<list>": [ ... ]}.
std::string nested_sequence(const char* list, const std::string& leaf, int depth) {
  std::string open = std::string("{\"type\":\"Sequence\",\"") + list + "\":[", close = "]}";
  std::string s;
  s.reserve(size_t(depth) * (open.size() + close.size()) + leaf.size());
  for (int i = 0; i < depth; ++i) s += open;
  s += leaf;
  for (int i = 0; i < depth; ++i) s += close;
  return s;
}

// ------------------------------------------------------------------ nesting depth

struct Stage {
  const char* key;
  const char* list;
  const char* leaf;
};
const Stage kStages[] = {
    {"normalizer", "normalizers", R"({"type":"Lowercase"})"},
    {"pre_tokenizer", "pretokenizers", R"({"type":"WhitespaceSplit"})"},
    {"decoder", "decoders", R"({"type":"Fuse"})"},
    {"post_processor", "processors", R"({"type":"ByteLevel"})"},
};

TEST(HardenTokenizer, SequencesNested50000DeepAreRefusedNotRecursed) {
  for (const Stage& st : kStages) {
    SCOPED_TRACE(st.key);
    const std::string text = with_raw(st.key, nested_sequence(st.list, st.leaf, 50000));  // ~1.8 MB, as reported
    const std::string m = error_of([&] { Tokenizer::from_json(text); });
    EXPECT_NE(m.find("tokenizer.json: JSON nested deeper than 64 levels"), std::string::npos) << m;
  }
}

TEST(HardenTokenizer, ModeratelyNestedSequencesStillWork) {
  // 20 Sequences = 40 JSON levels (+ 1 for the document): allowed, and the same as the flat pipeline.
  const Tokenizer flat = Tokenizer::from_json(with_raw("normalizer", R"({"type":"Lowercase"})"));
  const Tokenizer deep = Tokenizer::from_json(with_raw("normalizer", nested_sequence("normalizers", R"({"type":"Lowercase"})", 20)));
  EXPECT_EQ(deep.encode("Hello World ABC"), flat.encode("Hello World ABC"));
}

TEST(HardenTokenizer, TokenizerConfigIsBoundedToo) {
  const std::string tok = read(tiny("tiny_sp") / "tokenizer.json");
  const std::string deep = "{\"chat_template\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  std::string m = error_of([&] { Tokenizer::from_json(tok, deep); });
  EXPECT_NE(m.find("tokenizer_config.json: JSON nested deeper than 64"), std::string::npos) << m;
  m = error_of([&] { Tokenizer::from_json(tok, "{\"bos_token\": "); });
  EXPECT_NE(m.find("tokenizer_config.json: invalid JSON"), std::string::npos) << m;
  // From a directory: the file's size is checked before it is read (a FIFO or a huge file is refused, not read).
  std::string tmpl = (fs::temp_directory_path() / "flashkit-tokcfg-XXXXXX").string();
  const fs::path dir = ::mkdtemp(tmpl.data());
  fs::copy_file(tiny("tiny_sp") / "tokenizer.json", dir / "tokenizer.json");
  {
    std::ofstream f(dir / "tokenizer_config.json");
    f << "{\"x\": \"";
    f << std::string((16u << 20) + 1, 'a');  // one byte over limits::kMaxConfigFileBytes
    f << "\"}";
  }
  m = error_of([&] { Tokenizer::from_dir(dir); });
  EXPECT_NE(m.find("tokenizer_config.json: "), std::string::npos) << m;
  EXPECT_NE(m.find("bytes is more than"), std::string::npos) << m;
  fs::remove(dir / "tokenizer_config.json");
  ASSERT_EQ(::mkfifo((dir / "tokenizer_config.json").c_str(), 0600), 0);
  m = error_of([&] { Tokenizer::from_dir(dir); });
  EXPECT_NE(m.find("not a regular file"), std::string::npos) << m;
  fs::remove_all(dir);
}

// ------------------------------------------------------------------ long BPE words

// The BPE model of a tokenizer.json file.
std::unique_ptr<flashkit::tok::BpeModel> bpe_of(const fs::path& file) {
  auto parsed = flashkit::tok::parse_tokenizer_json(read(file));
  return std::make_unique<flashkit::tok::BpeModel>(parsed.tree["model"], parsed.vocab, parsed.merges);
}

// Random words over `alphabet` (UTF-8 characters), 65..max_chars characters: every one takes the cutting path.
std::vector<std::string> random_words(const std::vector<std::string>& alphabet, int count, int max_chars,
                                      std::mt19937& rng) {
  std::vector<std::string> out;
  for (int k = 0; k < count; ++k) {
    const int n = std::uniform_int_distribution<int>(65, max_chars)(rng);
    std::string w;
    for (int i = 0; i < n; ++i) w += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
    out.push_back(std::move(w));
  }
  return out;
}

void expect_cut_is_exact(const flashkit::tok::BpeModel& m, const std::vector<std::string>& words) {
  for (const auto& w : words) {
    Ids cut, whole;
    m.encode(w, cut);
    m.encode_whole(w, whole);
    ASSERT_EQ(cut, whole) << "word of " << w.size() << " bytes: " << w.substr(0, 120);
  }
}

TEST(HardenBpe, CuttingLongWordsGivesTheSameIdsTinyModels) {
  std::mt19937 rng(11);
  // tiny_sp: SentencePiece style (▁ words, byte fallback for unknown characters, fuse_unk).
  auto sp = bpe_of(tiny("tiny_sp") / "tokenizer.json");
  expect_cut_is_exact(*sp, random_words({"\xE2\x96\x81", "a", "b", "c", "h", "e", "l", "o", "w", "r", "d", "z", "\xC3\xA9",
                                         "\xF0\x9F\x98\x80", "\xE2\x96\x81\xE2\x96\x81"},
                                        300, 400, rng));
  // tiny_bytelevel: byte-level alphabet, ignore_merges.
  auto bl = bpe_of(tiny("tiny_bytelevel") / "tokenizer.json");
  const auto& table = flashkit::tok::byte_level_table();
  std::vector<std::string> bytes;
  for (const char* s : {"t", "h", "e", " ", "c", "a", "1", "2", "\n", "\xC3\xBC"})
    for (char c : std::string(s)) bytes.push_back(table.byte_to_utf8[static_cast<unsigned char>(c)]);
  expect_cut_is_exact(*bl, random_words(bytes, 300, 400, rng));
}

TEST(HardenBpe, CuttingLongWordsGivesTheSameIdsGemma3) {
  if (!ft::have_real_tokenizer("gemma3")) GTEST_SKIP() << ft::kNpmHint;
  auto g = bpe_of(ft::real_tokenizer_dir("gemma3") / "tokenizer.json");
  std::mt19937 rng(12);
  // Real text with ▁ for spaces (what the normalizer hands BPE), cut at random character boundaries.
  std::string text;
  for (const auto& s : json::parse(read(ft::node_dir() / "corpus.json"))) text += s.get<std::string>() + " ";
  std::string sp;
  for (char c : text) sp += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
  std::vector<std::string> words;
  for (int k = 0; k < 200; ++k) {
    size_t b = std::uniform_int_distribution<size_t>(0, sp.size() - 1)(rng);
    size_t e = std::min(sp.size(), b + std::uniform_int_distribution<size_t>(65, 3000)(rng));
    while (b > 0 && (static_cast<unsigned char>(sp[b]) & 0xC0) == 0x80) --b;
    while (e < sp.size() && (static_cast<unsigned char>(sp[e]) & 0xC0) == 0x80) ++e;
    words.push_back(sp.substr(b, e - b));
  }
  words.push_back(sp);
  expect_cut_is_exact(*g, words);
  // Dense alphabets where most neighbours can merge, and characters outside the vocabulary (byte fallback).
  expect_cut_is_exact(*g, random_words({"\xE2\x96\x81", "a", "b", ">", "<", "/", "\n", "\xE4\xBD\xA0", "\xF0\x9F\x98\x80",
                                        "\xF3\xA0\x80\x81", "1", "2"},
                                       200, 2000, rng));
}

TEST(HardenBpe, LongSentencePieceTextIsCutIntoCachedPieces) {
  // Gemma's pipeline hands BPE the whole normalized text as one word: 22 MB of prose took 11 s of CPU and 877 MB
  // (a heap over every character) before the cut, 0.35 s and 258 MB after, with the same ids.
  static const Tokenizer tiny_sp = Tokenizer::from_dir(tiny("tiny_sp"));
  const bool gemma = ft::have_real_tokenizer("gemma3");
  const Tokenizer& t = gemma ? ft::real_tokenizer("gemma3") : tiny_sp;
  const std::string para = "The quick brown fox jumps over the lazy dog; 1234 Grüße, 你好. ";
  std::string text;
  while (text.size() < (8u << 20)) text += para;
  auto cpu_now = [] {  // this thread's CPU time: a busy machine does not fail the bound
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  };
  const double t0 = cpu_now();
  const Ids ids = t.encode(text);
  const double secs = cpu_now() - t0;
  EXPECT_GT(ids.size(), text.size() / 8);
  EXPECT_EQ(t.decode(ids), text);
  RecordProperty("encode_8MB_one_word_cpu_seconds", std::to_string(secs));
  // The bound guards the cut (4 s before it, 0.35 s after, plain optimized build); AddressSanitizer builds run
  // several times slower (1.54 s seen in CI's sanitizer run), so they get 6 s, which still tells the two apart.
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
  if (gemma) EXPECT_LT(secs, 1.5) << "8 MB as one SentencePiece word (before the cut: ~4 s)";
#elif defined(__SANITIZE_ADDRESS__)
  if (gemma) EXPECT_LT(secs, 6.0) << "8 MB as one SentencePiece word (sanitizer build; before the cut: ~4 s plain)";
#endif
}

// ------------------------------------------------------------------ threads

std::vector<std::string> thread_texts() {
  std::vector<std::string> v = {"the cat in the hat 12345 Grüße", std::string(3000, 'a'), "你好世界 " + std::string(500, 'x')};
  std::string long_line;
  for (int i = 0; i < 200; ++i) long_line += "word" + std::to_string(i) + " and more words, ";
  v.push_back(long_line);
  return v;
}

void concurrent_encode_matches(const Tokenizer& t) {
  const auto texts = thread_texts();
  std::vector<Ids> want;
  for (const auto& s : texts) want.push_back(t.encode(s, true));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> th;
  for (int k = 0; k < 6; ++k)
    th.emplace_back([&, k] {
      for (int r = 0; r < 20; ++r) {
        const size_t i = size_t(k + r) % texts.size();
        if (t.encode(texts[i], true) != want[i]) ++mismatches;
        if (t.decode(want[i]).empty()) ++mismatches;
      }
    });
  for (auto& x : th) x.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(HardenThreads, ConcurrentEncodeFromSeveralThreads) {
  for (const char* name : {"tiny_sp", "tiny_bytelevel", "tiny_metaspace"}) {
    SCOPED_TRACE(name);
    concurrent_encode_matches(Tokenizer::from_dir(tiny(name)));
  }
  for (const char* name : {"gemma3", "llama3"})
    if (ft::have_real_tokenizer(name)) concurrent_encode_matches(ft::real_tokenizer(name));
}

TEST(HardenThreads, CApiFreeDuringEncodeLetsTheCallsFinish) {
  // Python's Tokenizer.close() on one thread while others are inside encode() crashed every time: the C handle
  // was deleted under the running calls. Now calls hold references and the last one frees the tokenizer.
  const fs::path dir = tiny("tiny_sp");
  std::string text;
  while (text.size() < (4u << 20)) text += "hello world abc ";
  const Ids want = Tokenizer::from_dir(dir).encode(text);
  for (int round = 0; round < 3; ++round) {
    fk_tokenizer* tok = nullptr;
    ASSERT_EQ(fk_tokenizer_load(dir.c_str(), &tok), FK_OK);
    std::atomic<int> started{0}, ok{0};
    std::vector<std::thread> th;
    for (int k = 0; k < 3; ++k)
      th.emplace_back([&] {
        std::vector<int32_t> ids(text.size() + 16);
        size_t n = 0;
        ++started;
        const fk_status st = fk_tokenizer_encode(tok, text.data(), text.size(), 0, ids.data(), ids.size(), &n);
        ids.resize(n);
        if (st == FK_OK && ids == want) ++ok;
      });
    while (started.load() < 3) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the 4 MB encodes take longer than this
    fk_tokenizer_free(tok);
    for (auto& x : th) x.join();
    EXPECT_EQ(ok.load(), 3) << "round " << round;
    // The handle outlives the free as a tombstone: a late call fails cleanly, a second free is a no-op.
    size_t n = 0;
    EXPECT_EQ(fk_tokenizer_encode(tok, "abc", 3, 0, nullptr, 0, &n), FK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(fk_last_error()).find("tok: this tokenizer has been freed"), std::string::npos)
        << fk_last_error();
    fk_tokenizer_free(tok);
  }
}

}  // namespace

namespace {

// ------------------------------------------------------------------ fuzz corpus

// Replays tests/data/fuzz/tokenizer (inputs found by tests/fuzz/fuzz_tokenizer, fixed since) the way the fuzzer
// drives them: load, then encode / decode / stream short texts. flashkit::Error is fine; anything else fails.
TEST(FuzzCorpus, Tokenizer) {
  const fs::path dir = fs::path(FLASHKIT_TEST_DATA) / "fuzz" / "tokenizer";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  ASSERT_FALSE(files.empty());
  std::sort(files.begin(), files.end());
  for (const auto& p : files) {
    SCOPED_TRACE(p.string());
    try {
      const Tokenizer t = Tokenizer::from_json(read(p));
      for (const char* text : {"Hello world! 1234 <s> \xE2\x96\x81x", "Gr\xC3\xBC\xC3\x9F" "e \xF0\x9F\x98\x80\n\n",
                               "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa bb"}) {
        try {
          const Ids ids = t.encode(text, true);
          (void)t.decode(ids);
          auto d = t.stream_decoder();
          for (int32_t id : ids) (void)d.push(id);
          (void)d.flush();
        } catch (const flashkit::Error&) {
        }
      }
    } catch (const flashkit::Error& e) {
      EXPECT_FALSE(std::string(e.what()).empty());
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw a non-flashkit exception: " << e.what();
    }
  }
}

}  // namespace

namespace {

TEST(HardenTokenizer, CatastrophicBacktrackingRegexIsBadInput) {
  // A Split pattern that backtracks exponentially: PCRE2's step limit stops it; the file is at fault.
  const Tokenizer t = Tokenizer::from_json(
      with_raw("pre_tokenizer", R"({"type":"Split","pattern":{"Regex":"(a|aa)+$"},"behavior":"Isolated"})"));
  const std::string m = error_of([&] { t.encode(std::string(60, 'a') + "!"); });
  EXPECT_NE(m.find("backtracking limit"), std::string::npos) << m;
  EXPECT_EQ(t.encode("aa b").size() > 0, true);  // ordinary text is fine
}

}  // namespace
