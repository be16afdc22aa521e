// The BPE model of tokenizer.json: merges applied by rank (lowest first, leftmost on ties) with a heap
// over a linked list of symbols, so a pre-token of n characters costs O(n log n). A long pre-token (SentencePiece
// style pipelines hand BPE the whole normalized text as one "word") is first cut where no merge can join the
// characters on either side, which gives the same ids and keeps the work per piece small and cacheable.
#pragma once
#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace flashkit::tok {

struct StrHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept;
};
using StrMap = std::unordered_map<std::string, int32_t, StrHash, std::equal_to<>>;

// Open-addressing hash map from a 64-bit key to two int32 values (linear probing, power-of-two size):
// the per-character and per-pair lookups of BPE are the hot loop and node-based maps miss the cache.
class FlatMap {
 public:
  struct Slot {
    uint64_t key;
    int32_t a, b;
  };
  void reserve(size_t n);
  // Inserts unless the key is present (then keeps the first values).
  void insert(uint64_t key, int32_t a, int32_t b);
  const Slot* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s;
      if (s.key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~0ULL;
  static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
  }
  void grow();
  std::vector<Slot> slots_;
  size_t mask_ = 0, size_ = 0;
};

class BpeModel {
 public:
  // `model`: the "model" object of tokenizer.json, whose "vocab" and "merges" were taken out while parsing
  // (see json_load.hpp) and are passed here. Throws flashkit::Error.
  BpeModel(const nlohmann::json& model, std::vector<std::pair<std::string, int64_t>>& vocab,
           std::vector<std::pair<std::string, std::string>>& merges);

  // Appends the ids of one pre-token (already in the model's alphabet: byte-level chars or ▁ text).
  void encode(std::string_view word, std::vector<int32_t>& out) const;
  // The same merges over the whole word at once, never cut and never cached: the reference the cutting is
  // checked against in tests (and what encode() gives for models that cannot be cut).
  void encode_whole(std::string_view word, std::vector<int32_t>& out) const {
    if (!word.empty()) bpe(word, out);
  }

  const StrMap& vocab() const { return vocab_; }
  int32_t max_id() const { return max_id_; }  // largest vocab id
  std::optional<int32_t> unk_id() const { return unk_id_; }

 private:
  static constexpr int32_t kInternal = 1 << 30;  // ids of merge parts/results missing from the vocab
  int32_t intern(const std::string& s);  // vocab id or a new internal id
  std::string_view str(int32_t id) const;
  void bpe(std::string_view word, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;  // cache, then bpe
  void encode_split(std::string_view word, std::vector<int32_t>& out) const;
  void emit_unknown(std::string_view piece, std::vector<int32_t>& out, bool& last_unk) const;

  StrMap vocab_;
  StrMap internal_;                       // strings that are merge parts/results but not in the vocab
  std::vector<std::string> internal_str_;
  std::vector<std::string_view> id_str_;  // vocab id -> string (views into vocab_ keys)
  FlatMap merges_;  // (left id << 32 | right id) -> (rank, result id)
  FlatMap chars_;   // code point -> id of the one-character token (vocab or internal)
  // (last code point of a << 32 | first code point of b) for every merge (a, b): a symbol spanning two adjacent
  // characters x y can only ever be made by a merge whose join is exactly there, so a pair absent from this set
  // is a place where the word can be cut without changing the result (see encode_split).
  FlatMap joins_;
  bool splittable_ = false;  // cutting is exact for this model (no end_of_word_suffix; see the constructor)
  std::array<int32_t, 256> byte_ids_{};   // <0xXX> tokens, -1 if absent
  std::optional<int32_t> unk_id_;
  int32_t max_id_ = -1;
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  std::string end_of_word_suffix_, continuing_prefix_;

  // results for short pre-tokens (words repeat a lot)
  struct Cache {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StrHash, std::equal_to<>> map;
  };
  static constexpr int kShards = 16;
  mutable std::array<Cache, kShards> cache_;
};

}  // namespace flashkit::tok
