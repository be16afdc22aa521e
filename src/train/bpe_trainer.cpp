// Byte-level BPE training (GPT-2 / Llama 3 style), written as a Hugging Face tokenizer.json.
//
// 1. Pre-tokenize every file with the Llama 3 split regex (PCRE2, src/tokenizer/regex) and count the distinct
//    pieces ("words"); each word starts as its UTF-8 bytes (one symbol per byte).
// 2. Count adjacent symbol pairs over the words (weighted by word frequency) and remember which words hold each
//    pair. A max-heap orders pairs by count (ties: the smaller pair of ids), with lazy deletion: an entry whose
//    count is stale is re-queued with the current count when it surfaces.
// 3. Merge the best pair into a new symbol, but only in the words that hold it: each changed word's pair counts
//    are updated by the difference between its old and new pairs (incremental counts, never a full recount).
// Deterministic: the same files and options give the same tokenizer.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <queue>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "flashkit/error.hpp"
#include "flashkit/train.hpp"
#include "tokenizer/regex.hpp"
#include "core/utf8.hpp"
#include "tokenizer/char_tables.hpp"
#include "train/io.hpp"

namespace flashkit::train {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, m); }

// Llama 3's pre-tokenizer split (contractions, letters with one leading non-letter, 1-3 digits, punctuation
// runs, newlines, spaces).
const char* kSplitPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

const char* kChatTemplate =
    "{{ bos_token }}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

struct Word {
  std::vector<int32_t> sym;
  int64_t freq = 0;
};

inline uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

struct HeapItem {
  int64_t count;
  uint64_t pair;
  bool operator<(const HeapItem& o) const {  // max-heap on count, then the smaller pair first
    return count != o.count ? count < o.count : pair > o.pair;
  }
};

}  // namespace

BpeResult train_bpe(const std::vector<fs::path>& files, const BpeOptions& opts, const fs::path& out_dir) {
  const auto t0 = std::chrono::steady_clock::now();
  if (files.empty()) bad("train-tokenizer: no input files");
  const int64_t nspecial = int64_t(opts.special_tokens.size());
  if (opts.vocab_size < 256 + nspecial)
    bad("--vocab-size " + std::to_string(opts.vocab_size) + " is smaller than the 256 byte tokens + " +
        std::to_string(nspecial) + " special tokens");
  if (opts.vocab_size > (int64_t(1) << 24)) bad("--vocab-size " + std::to_string(opts.vocab_size) + " is too large");
  if (opts.min_frequency < 1) bad("--min-frequency must be at least 1");
  for (const auto& f : files) {
    std::error_code ec;
    if (!fs::is_regular_file(f, ec)) bad(f.string() + ": no such corpus file");
  }

  // 1. words
  const tok::Regex split(kSplitPattern);
  std::unordered_map<std::string, int64_t> counts;
  BpeResult res;
  std::vector<std::pair<size_t, size_t>> spans;
  for (const auto& f : files) {
    if (opts.max_bytes > 0 && res.bytes >= opts.max_bytes) break;
    std::string text = read_file(f, "corpus file");
    if (opts.max_bytes > 0 && res.bytes + int64_t(text.size()) > opts.max_bytes) {
      size_t keep = size_t(opts.max_bytes - res.bytes);
      while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) --keep;  // whole characters
      text.resize(keep);
    }
    if (flashkit::utf8_invalid_offset(text)) text = flashkit::sanitize_utf8(text);  // U+FFFD for stray bytes
    res.bytes += int64_t(text.size());
    spans.clear();
    split.find_all(text, spans);
    for (const auto& [b, e] : spans) ++counts[text.substr(b, e - b)];
  }
  std::vector<Word> words;
  words.reserve(counts.size());
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  counts.clear();
  std::sort(sorted.begin(), sorted.end());  // a fixed order: the result does not depend on hashing
  const int32_t byte0 = int32_t(nspecial);  // byte b is token nspecial + b
  for (const auto& [w, c] : sorted) {
    Word x;
    x.freq = c;
    for (unsigned char ch : w) x.sym.push_back(byte0 + ch);
    words.push_back(std::move(x));
  }
  res.words = int64_t(words.size());
  sorted.clear();

  // 2. pair counts, where-lists, heap
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;
  pair_count.reserve(words.size() * 4);
  for (size_t wi = 0; wi < words.size(); ++wi) {
    const Word& w = words[wi];
    for (size_t i = 0; i + 1 < w.sym.size(); ++i) {
      const uint64_t k = key(w.sym[i], w.sym[i + 1]);
      pair_count[k] += w.freq;
      auto& lst = where[k];
      if (lst.empty() || lst.back() != int32_t(wi)) lst.push_back(int32_t(wi));
    }
  }
  std::priority_queue<HeapItem> heap;
  for (const auto& [k, c] : pair_count) heap.push({c, k});

  // 3. merges
  const tok::ByteLevelTable& bl = tok::byte_level_table();
  std::vector<std::string> token_str;  // byte-level strings, by id - nspecial
  for (int b = 0; b < 256; ++b) token_str.push_back(bl.byte_to_utf8[size_t(b)]);
  std::vector<std::pair<int32_t, int32_t>> merges;
  std::vector<uint32_t> stamp(words.size(), 0);
  uint32_t epoch = 0;
  std::vector<std::pair<uint64_t, int64_t>> delta;
  const int64_t target_merges = opts.vocab_size - 256 - nspecial;
  while (int64_t(merges.size()) < target_merges && !heap.empty()) {
    const HeapItem top = heap.top();
    heap.pop();
    auto it = pair_count.find(top.pair);
    const int64_t cur = it == pair_count.end() ? 0 : it->second;
    if (cur != top.count) {  // stale
      if (cur > 0) heap.push({cur, top.pair});
      continue;
    }
    if (cur < opts.min_frequency) break;
    const int32_t a = int32_t(top.pair >> 32), b = int32_t(uint32_t(top.pair));
    const int32_t c = int32_t(nspecial + int64_t(token_str.size()));
    token_str.push_back(token_str[size_t(a - nspecial)] + token_str[size_t(b - nspecial)]);
    merges.push_back({a, b});
    ++epoch;
    std::vector<int32_t> holders = std::move(where[top.pair]);
    where.erase(top.pair);
    for (int32_t wi : holders) {
      if (stamp[size_t(wi)] == epoch) continue;
      stamp[size_t(wi)] = epoch;
      Word& w = words[size_t(wi)];
      bool has = false;
      for (size_t i = 0; i + 1 < w.sym.size() && !has; ++i) has = w.sym[i] == a && w.sym[i + 1] == b;
      if (!has) continue;
      delta.clear();
      for (size_t i = 0; i + 1 < w.sym.size(); ++i) delta.push_back({key(w.sym[i], w.sym[i + 1]), -w.freq});
      std::vector<int32_t> ns;
      ns.reserve(w.sym.size());
      for (size_t i = 0; i < w.sym.size(); ++i) {
        if (i + 1 < w.sym.size() && w.sym[i] == a && w.sym[i + 1] == b) {
          ns.push_back(c);
          ++i;
        } else {
          ns.push_back(w.sym[i]);
        }
      }
      w.sym.swap(ns);
      for (size_t i = 0; i + 1 < w.sym.size(); ++i) delta.push_back({key(w.sym[i], w.sym[i + 1]), w.freq});
      std::sort(delta.begin(), delta.end());
      for (size_t i = 0; i < delta.size();) {
        const uint64_t k = delta[i].first;
        int64_t d = 0;
        for (; i < delta.size() && delta[i].first == k; ++i) d += delta[i].second;
        if (d == 0) continue;
        int64_t& pc = pair_count[k];
        pc += d;
        if (d > 0) {
          heap.push({pc, k});
          if (k != top.pair) where[k].push_back(wi);
        }
        if (pc == 0) pair_count.erase(k);
      }
    }
    pair_count.erase(top.pair);
  }
  res.merges = int64_t(merges.size());
  res.vocab_size = nspecial + int64_t(token_str.size());

  // tokenizer.json
  ordered_json added = ordered_json::array();
  ordered_json vocab = ordered_json::object();
  for (int64_t i = 0; i < nspecial; ++i) {
    const std::string& s = opts.special_tokens[size_t(i)];
    added.push_back({{"id", i}, {"content", s}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
    vocab[s] = i;
  }
  for (size_t i = 0; i < token_str.size(); ++i) {
    if (vocab.contains(token_str[i])) bad("train-tokenizer: a special token collides with a learned token");
    vocab[token_str[i]] = int64_t(nspecial) + int64_t(i);
  }
  ordered_json merge_list = ordered_json::array();
  for (const auto& [a, b] : merges)
    merge_list.push_back(token_str[size_t(a - nspecial)] + " " + token_str[size_t(b - nspecial)]);
  const auto special_id = [&](const std::string& s) -> int64_t {
    for (int64_t i = 0; i < nspecial; ++i)
      if (opts.special_tokens[size_t(i)] == s) return i;
    return -1;
  };
  const int64_t bos = opts.bos_token.empty() ? -1 : special_id(opts.bos_token);
  if (!opts.bos_token.empty() && bos < 0) bad("train-tokenizer: bos token \"" + opts.bos_token + "\" is not a special token");
  if (!opts.eos_token.empty() && special_id(opts.eos_token) < 0)
    bad("train-tokenizer: eos token \"" + opts.eos_token + "\" is not a special token");
  ordered_json post = nullptr;
  if (bos >= 0) {
    auto special = [&](int type) { return ordered_json{{"SpecialToken", {{"id", opts.bos_token}, {"type_id", type}}}}; };
    auto seq = [](const char* id, int type) { return ordered_json{{"Sequence", {{"id", id}, {"type_id", type}}}}; };
    post = {{"type", "TemplateProcessing"},
            {"single", {special(0), seq("A", 0)}},
            {"pair", {special(0), seq("A", 0), special(1), seq("B", 1)}},
            {"special_tokens", {{opts.bos_token, {{"id", opts.bos_token}, {"ids", {bos}}, {"tokens", {opts.bos_token}}}}}}};
  }
  ordered_json tj = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", kSplitPattern}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
      {"post_processor", post},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merge_list}}}};
  ordered_json cfg = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                      {"clean_up_tokenization_spaces", false},
                      {"model_max_length", 1024}};
  if (!opts.bos_token.empty()) cfg["bos_token"] = opts.bos_token;
  if (!opts.eos_token.empty()) cfg["eos_token"] = opts.eos_token;
  cfg["add_bos_token"] = bos >= 0;
  cfg["chat_template"] = kChatTemplate;
  fs::create_directories(out_dir);
  write_file_atomic(out_dir / "tokenizer.json", tj.dump(1) + "\n");
  write_file_atomic(out_dir / "tokenizer_config.json", cfg.dump(2) + "\n");
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace flashkit::train
