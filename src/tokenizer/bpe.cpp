#include "tokenizer/bpe.hpp"

#include <algorithm>
#include <queue>

#include <nlohmann/json.hpp>

#include "core/limits.hpp"
#include "flashkit/error.hpp"
#include "core/utf8.hpp"

namespace flashkit::tok {

size_t StrHash::operator()(std::string_view s) const noexcept {
  // FNV-1a over 8-byte words: fast on the short strings of a vocabulary
  uint64_t h = 1469598103934665603ULL ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    __builtin_memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 1099511628211ULL;
    h ^= h >> 29;
  }
  for (; i < s.size(); ++i) h = (h ^ static_cast<unsigned char>(s[i])) * 1099511628211ULL;
  h ^= h >> 32;
  return static_cast<size_t>(h);
}

void FlatMap::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  if (cap <= slots_.size()) return;
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.assign(cap, Slot{kEmpty, 0, 0});
  mask_ = cap - 1;
  size_ = 0;
  for (const auto& s : old)
    if (s.key != kEmpty) insert(s.key, s.a, s.b);
}

void FlatMap::insert(uint64_t key, int32_t a, int32_t b) {
  if ((size_ + 1) * 2 > slots_.size()) reserve(size_ + 1 > 8 ? (size_ + 1) * 2 : 16);
  for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == key) return;
    if (s.key == kEmpty) {
      s = Slot{key, a, b};
      ++size_;
      return;
    }
  }
}

namespace {
[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, "tokenizer.json: " + m); }
}  // namespace

BpeModel::BpeModel(const nlohmann::json& m, std::vector<std::pair<std::string, int64_t>>& vocab,
                   std::vector<std::pair<std::string, std::string>>& merges) {
  vocab_.reserve(vocab.size() * 2);
  for (auto& [tok, id] : vocab) {
    // Ids index dense tables: bound them by the vocabulary's size so a stray huge id cannot ask for gigabytes.
    const int64_t id_limit = std::min<int64_t>(kInternal, 2 * int64_t(vocab.size()) + 65536);
    if (id < 0 || id >= id_limit)
      bad("model.vocab id out of range: " + std::to_string(id) + " (expected [0, " + std::to_string(id_limit) + "))");
    max_id_ = std::max(max_id_, static_cast<int32_t>(id));
    vocab_.emplace(std::move(tok), static_cast<int32_t>(id));
  }
  id_str_.assign(static_cast<size_t>(max_id_ + 1), std::string_view{});
  for (auto& [s, id] : vocab_) id_str_[static_cast<size_t>(id)] = s;

  auto str_or_empty = [&](const char* k) {
    auto it = m.find(k);
    return it != m.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto flag = [&](const char* k) {
    auto it = m.find(k);
    return it != m.end() && it->is_boolean() && it->get<bool>();
  };
  byte_fallback_ = flag("byte_fallback");
  fuse_unk_ = flag("fuse_unk");
  ignore_merges_ = flag("ignore_merges");
  end_of_word_suffix_ = str_or_empty("end_of_word_suffix");
  continuing_prefix_ = str_or_empty("continuing_subword_prefix");
  if (!continuing_prefix_.empty()) fail(Status::unsupported, "tokenizer.json: BPE continuing_subword_prefix is not supported");
  if (auto unk = str_or_empty("unk_token"); !unk.empty()) {
    auto it = vocab_.find(unk);
    if (it != vocab_.end()) unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = vocab_.find(std::string_view(name));
    byte_ids_[static_cast<size_t>(b)] = it == vocab_.end() ? -1 : it->second;
  }

  merges_.reserve(merges.size() * 2);
  int32_t rank = 0;
  for (const auto& [a, b] : merges) {
    int32_t ia = intern(a), ib = intern(b), ir = intern(a + b);
    uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(ia)) << 32) | static_cast<uint32_t>(ib);
    merges_.insert(key, rank, ir);  // first (lowest) rank wins on duplicates
    ++rank;
    if (!a.empty() && !b.empty() && utf8_invalid_offset(a) == std::nullopt && utf8_invalid_offset(b) == std::nullopt) {
      size_t last = a.size() - 1, i = 0;
      while (last > 0 && (static_cast<unsigned char>(a[last]) & 0xC0) == 0x80) --last;
      const uint64_t x = next_cp(a, last), y = next_cp(b, i);
      joins_.insert((x << 32) | y, 0, 0);
    }
  }
  // Cutting a word changes nothing when merges are the only thing joining neighbours: the end-of-word suffix is
  // attached to the last character only, and unknown pieces made of merge results missing from the vocabulary
  // could fuse (fuse_unk) across a cut. Neither happens in files Hugging Face accepts; such models are not cut.
  splittable_ = end_of_word_suffix_.empty() && (internal_str_.empty() || !fuse_unk_);
  // single-character tokens by code point
  auto add_chars = [&](const StrMap& m) {
    for (const auto& [s, id] : m) {
      if (s.empty()) continue;
      size_t n = cp_len(static_cast<unsigned char>(s[0]));
      if (n != s.size() || utf8_seq(s, 0) != static_cast<int>(n)) continue;
      size_t i = 0;
      chars_.insert(next_cp(s, i), id, 0);
    }
  };
  add_chars(vocab_);
  add_chars(internal_);
}

int32_t BpeModel::intern(const std::string& s) {
  if (auto it = vocab_.find(s); it != vocab_.end()) return it->second;
  if (auto it = internal_.find(s); it != internal_.end()) return it->second;
  auto id = kInternal + static_cast<int32_t>(internal_str_.size());
  internal_str_.push_back(s);
  internal_.emplace(s, id);
  return id;
}

std::string_view BpeModel::str(int32_t id) const {
  return id >= kInternal ? std::string_view(internal_str_[static_cast<size_t>(id - kInternal)])
                         : id_str_[static_cast<size_t>(id)];
}

void BpeModel::emit_unknown(std::string_view piece, std::vector<int32_t>& out, bool& last_unk) const {
  if (byte_fallback_) {
    bool all = true;
    for (char c : piece) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
    if (all) {
      for (char c : piece) out.push_back(byte_ids_[static_cast<unsigned char>(c)]);
      last_unk = false;
      return;
    }
  }
  if (!unk_id_) return;  // nothing to stand for it (as the reference does)
  if (fuse_unk_ && last_unk) return;
  out.push_back(*unk_id_);
  last_unk = true;
}

void BpeModel::encode(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_ && end_of_word_suffix_.empty()) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() > limits::kBpeSplitBytes && splittable_) return encode_split(word, out);
  encode_piece(word, out);
}

void BpeModel::encode_split(std::string_view word, std::vector<int32_t>& out) const {
  // Cut before character c (previous character p) when both are known single-character tokens and no merge
  // joins p to c: no symbol can ever span that point, and merges on the two sides never interact (a merge's
  // rank order restricted to one side is the order BPE would use on that side alone), so the ids are the same.
  size_t start = 0, i = 0;
  uint32_t prev = 0;
  bool prev_known = false;
  while (i < word.size()) {
    const size_t at = i;
    const uint32_t cp = next_cp(word, i);
    const bool known = chars_.find(cp) != nullptr;
    if (known && prev_known && at > start && !joins_.find((uint64_t(prev) << 32) | cp)) {
      encode_piece(word.substr(start, at - start), out);
      start = at;
    }
    prev = cp;
    prev_known = known;
  }
  encode_piece(word.substr(start), out);
}

void BpeModel::encode_piece(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() <= 64) {
    auto& shard = cache_[StrHash{}(word) % kShards];
    {
      std::lock_guard<std::mutex> lock(shard.mu);
      if (auto it = shard.map.find(word); it != shard.map.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> ids;
    bpe(word, ids);
    out.insert(out.end(), ids.begin(), ids.end());
    std::lock_guard<std::mutex> lock(shard.mu);
    if (shard.map.size() > 8192) shard.map.clear();
    shard.map.emplace(std::string(word), std::move(ids));
    return;
  }
  bpe(word, out);
}

void BpeModel::bpe(std::string_view word, std::vector<int32_t>& out) const {
  struct Sym {
    int32_t id;  // vocab or internal id; -1: a character missing from the vocabulary
    int32_t prev, next;
    uint32_t begin, end;  // bytes of `word` it covers
  };
  std::vector<Sym> syms;
  syms.reserve(word.size());
  std::string last_with_suffix;
  for (size_t i = 0; i < word.size();) {
    size_t n = cp_len(static_cast<unsigned char>(word[i]));
    if (i + n > word.size()) n = word.size() - i;
    std::string_view ch = word.substr(i, n);
    int32_t id = -1;
    bool last = i + n == word.size();
    if (last && !end_of_word_suffix_.empty()) {
      last_with_suffix = std::string(ch) + end_of_word_suffix_;
      ch = last_with_suffix;
    }
    if (ch.size() == n && utf8_seq(ch, 0) == static_cast<int>(n)) {
      size_t k = 0;
      if (const auto* slot = chars_.find(next_cp(ch, k))) id = slot->a;
    } else if (auto it = vocab_.find(ch); it != vocab_.end()) {  // last char + end_of_word_suffix
      id = it->second;
    } else if (auto jt = internal_.find(ch); jt != internal_.end()) {
      id = jt->second;
    }
    auto idx = static_cast<int32_t>(syms.size());
    syms.push_back(Sym{id, idx - 1, idx + 1, static_cast<uint32_t>(i), static_cast<uint32_t>(i + n)});
    i += n;
  }
  syms.back().next = -1;

  struct Cand {
    int32_t rank, pos, left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto consider = [&](int32_t l) {
    if (l < 0) return;
    int32_t r = syms[static_cast<size_t>(l)].next;
    if (r < 0) return;
    int32_t a = syms[static_cast<size_t>(l)].id, b = syms[static_cast<size_t>(r)].id;
    if (a < 0 || b < 0) return;
    uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    if (const auto* m = merges_.find(key)) heap.push(Cand{m->a, l, a, b});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) consider(i);
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    Sym& l = syms[static_cast<size_t>(c.pos)];
    if (l.id != c.left || l.next < 0) continue;  // stale: symbols only grow, so equal ids mean unchanged
    Sym& r = syms[static_cast<size_t>(l.next)];
    if (r.id != c.right) continue;
    auto key = (static_cast<uint64_t>(static_cast<uint32_t>(c.left)) << 32) | static_cast<uint32_t>(c.right);
    l.id = merges_.find(key)->b;
    l.end = r.end;
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = c.pos;
    r.id = -2;  // dead
    consider(l.prev);
    consider(c.pos);
  }
  bool last_unk = false;
  for (int32_t i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next) {
    const Sym& s = syms[static_cast<size_t>(i)];
    if (s.id >= 0 && s.id < kInternal) {
      out.push_back(s.id);
      last_unk = false;
    } else if (s.id >= kInternal) {
      emit_unknown(str(s.id), out, last_unk);
    } else {
      std::string piece(word.substr(s.begin, s.end - s.begin));
      if (s.next < 0 && !end_of_word_suffix_.empty()) piece += end_of_word_suffix_;
      emit_unknown(piece, out, last_unk);
    }
  }
}

}  // namespace flashkit::tok
