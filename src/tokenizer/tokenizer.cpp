// flashkit::Tokenizer: loads the pipeline of a Hugging Face tokenizer.json and runs it.
//   encode: added tokens split out of the raw text -> normalizer -> added tokens (normalized forms)
//           -> pre-tokenizer -> BPE -> post-processor
//   decode: ids -> token strings -> decoder steps, each applied per token (so streaming decodes the same)
#include "flashkit/tokenizer.hpp"

#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/json_io.hpp"
#include "core/limits.hpp"
#include "flashkit/error.hpp"
#include "model/gguf.hpp"
#include "tokenizer/gguf_tokenizer.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer/json_load.hpp"
#include "tokenizer/normalize.hpp"
#include "tokenizer/regex.hpp"
#include "core/utf8.hpp"
#include "tokenizer/char_tables.hpp"

namespace flashkit {

using nlohmann::json;
using namespace flashkit::tok;

namespace {

[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, "tokenizer.json: " + m); }

// A token id written in the file: an integer in [0, INT32_MAX]. nlohmann's get<int32_t>() casts any number, and a
// float beyond int's range is undefined behaviour (the tokenizer fuzzer found 1.1e128 in post_processor ids).
int32_t json_token_id(const json& v, const char* what) {
  if (!v.is_number_integer() || (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(INT32_MAX)
                                                        : v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX))
    bad(std::string(what) + ": expected a token id (an integer in [0, 2^31)), got " + v.dump().substr(0, 64));
  return int32_t(v.get<int64_t>());
}
[[noreturn]] void unsupported(const std::string& m) { fail(Status::unsupported, "tokenizer.json: " + m); }

std::string get_str(const json& j, const char* k, std::string def = {}) {
  auto it = j.find(k);
  return it != j.end() && it->is_string() ? it->get<std::string>() : def;
}
bool get_bool(const json& j, const char* k, bool def) {
  auto it = j.find(k);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : def;
}

// A "pattern" object: {"String": "..."} or {"Regex": "..."}.
struct Pattern {
  std::string literal;
  std::shared_ptr<Regex> regex;
  explicit Pattern(const json& p) {
    if (!p.is_object()) bad("pattern must be an object with \"String\" or \"Regex\"");
    if (auto it = p.find("String"); it != p.end() && it->is_string()) {
      literal = it->get<std::string>();
      if (literal.empty()) bad("empty String pattern");
    } else if (auto jt = p.find("Regex"); jt != p.end() && jt->is_string()) {
      regex = std::make_shared<Regex>(jt->get<std::string>());
    } else {
      bad("pattern must have \"String\" or \"Regex\"");
    }
  }
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
    if (regex) return regex->find_all(text, out);
    out.clear();
    for (size_t pos = text.find(literal); pos != std::string_view::npos; pos = text.find(literal, pos + literal.size()))
      out.emplace_back(pos, pos + literal.size());
  }
  std::string replace_all(std::string_view text, std::string_view with) const {
    std::vector<std::pair<size_t, size_t>> m;
    find_all(text, m);
    if (m.empty()) return std::string(text);
    std::string out;
    out.reserve(text.size() + m.size() * with.size());
    size_t last = 0;
    for (auto [b, e] : m) {
      out.append(text.substr(last, b - last));
      out.append(with);
      last = e;
    }
    out.append(text.substr(last));
    return out;
  }
};

// ---------------------------------------------------------------- normalizer
struct NormStep {
  enum Kind { replace, prepend, unicode, strip, lowercase } kind;
  NormStep(Kind k, std::shared_ptr<Pattern> p = {}, std::string c = {}) : kind(k), pattern(std::move(p)), content(std::move(c)) {}
  std::shared_ptr<Pattern> pattern;
  std::string content;
  UnicodeForm form = UnicodeForm::nfc;
  bool left = false, right = false;
};

void parse_normalizer(const json& j, std::vector<NormStep>& steps) {
  if (j.is_null()) return;
  std::string type = get_str(j, "type");
  if (type == "Sequence") {
    for (const auto& s : j.at("normalizers")) parse_normalizer(s, steps);
  } else if (type == "Replace") {
    NormStep s{NormStep::replace, std::make_shared<Pattern>(j.at("pattern")), get_str(j, "content")};
    steps.push_back(std::move(s));
  } else if (type == "Prepend") {
    steps.push_back(NormStep{NormStep::prepend, nullptr, get_str(j, "prepend")});
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    NormStep s{NormStep::unicode, nullptr, {}};
    s.form = type == "NFC" ? UnicodeForm::nfc : type == "NFD" ? UnicodeForm::nfd : type == "NFKC" ? UnicodeForm::nfkc : UnicodeForm::nfkd;
    steps.push_back(s);
  } else if (type == "Strip") {
    NormStep s{NormStep::strip, nullptr, {}};
    s.left = get_bool(j, "strip_left", true);
    s.right = get_bool(j, "strip_right", true);
    steps.push_back(s);
  } else if (type == "Lowercase") {
    steps.push_back(NormStep{NormStep::lowercase, nullptr, {}});
  } else {
    unsupported("normalizer type \"" + type + "\" is not supported");
  }
}

size_t trim_left_ws(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (!is_white_space(next_cp(s, j))) break;
    i = j;
  }
  return i;
}
size_t trim_right_ws(std::string_view s) {  // new length
  size_t n = s.size();
  while (n > 0) {
    size_t b = n - 1;
    while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
    size_t j = b;
    if (!is_white_space(next_cp(s, j))) break;
    n = b;
  }
  return n;
}

std::string normalize(const std::vector<NormStep>& steps, std::string text) {
  for (const auto& s : steps) {
    switch (s.kind) {
      case NormStep::replace: text = s.pattern->replace_all(text, s.content); break;
      case NormStep::prepend:
        if (!text.empty()) text = s.content + text;
        break;
      case NormStep::unicode: text = unicode_normalize(text, s.form); break;
      case NormStep::strip: {
        size_t n = s.right ? trim_right_ws(text) : text.size();
        text.resize(n);
        if (s.left) text.erase(0, trim_left_ws(text));
        break;
      }
      case NormStep::lowercase: text = unicode_lowercase(text); break;
    }
  }
  return text;
}

// ---------------------------------------------------------------- pre-tokenizer
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

struct PreStep {
  enum Kind { split, byte_level, metaspace, digits, whitespace_split } kind;
  explicit PreStep(Kind k) : kind(k) {}
  std::shared_ptr<Pattern> pattern;  // split
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;
  bool add_prefix_space = false, use_regex = true;  // byte_level
  std::string replacement;                          // metaspace
  enum class Prepend { always, first, never } prepend = Prepend::always;
  bool msplit = true;
  bool individual_digits = false;
};

void parse_pre_tokenizer(const json& j, std::vector<PreStep>& steps) {
  if (j.is_null()) return;
  std::string type = get_str(j, "type");
  if (type == "Sequence") {
    for (const auto& s : j.at("pretokenizers")) parse_pre_tokenizer(s, steps);
  } else if (type == "Split") {
    PreStep s{PreStep::split};
    s.pattern = std::make_shared<Pattern>(j.at("pattern"));
    std::string b = get_str(j, "behavior", "Isolated");
    if (b == "Removed") s.behavior = SplitBehavior::removed;
    else if (b == "Isolated") s.behavior = SplitBehavior::isolated;
    else if (b == "MergedWithPrevious") s.behavior = SplitBehavior::merged_with_previous;
    else if (b == "MergedWithNext") s.behavior = SplitBehavior::merged_with_next;
    else if (b == "Contiguous") s.behavior = SplitBehavior::contiguous;
    else bad("unknown Split behavior \"" + b + "\"");
    s.invert = get_bool(j, "invert", false);
    steps.push_back(std::move(s));
  } else if (type == "ByteLevel") {
    PreStep s{PreStep::byte_level};
    s.add_prefix_space = get_bool(j, "add_prefix_space", false);
    s.use_regex = get_bool(j, "use_regex", true);
    if (s.use_regex) {
      s.pattern = std::make_shared<Pattern>(json{{"Regex",
          "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"}});
    }
    steps.push_back(std::move(s));
  } else if (type == "Metaspace") {
    PreStep s{PreStep::metaspace};
    s.replacement = get_str(j, "replacement", "\xE2\x96\x81");
    std::string scheme = get_str(j, "prepend_scheme", "");
    if (scheme.empty()) scheme = get_bool(j, "add_prefix_space", true) ? "always" : "never";
    s.prepend = scheme == "first" ? PreStep::Prepend::first : scheme == "never" ? PreStep::Prepend::never : PreStep::Prepend::always;
    s.msplit = get_bool(j, "split", true);
    steps.push_back(std::move(s));
  } else if (type == "Digits") {
    PreStep s{PreStep::digits};
    s.individual_digits = get_bool(j, "individual_digits", false);
    steps.push_back(std::move(s));
  } else if (type == "WhitespaceSplit") {
    steps.push_back(PreStep{PreStep::whitespace_split});
  } else {
    unsupported("pre_tokenizer type \"" + type + "\" is not supported");
  }
}

// Splits `s` at `matches` following the Hugging Face split behaviours.
void split_by(std::string_view s, const std::vector<std::pair<size_t, size_t>>& matches, SplitBehavior behavior,
              bool invert, std::vector<std::string>& out) {
  struct Seg {
    size_t b, e;
    bool m;
  };
  std::vector<Seg> segs;
  size_t last = 0;
  for (auto [b, e] : matches) {
    if (b > last) segs.push_back({last, b, invert});
    segs.push_back({b, e, !invert});
    last = e;
  }
  if (last < s.size()) segs.push_back({last, s.size(), invert});
  switch (behavior) {
    case SplitBehavior::removed:
      for (auto& g : segs)
        if (!g.m) out.emplace_back(s.substr(g.b, g.e - g.b));
      break;
    case SplitBehavior::isolated:
      for (auto& g : segs) out.emplace_back(s.substr(g.b, g.e - g.b));
      break;
    case SplitBehavior::merged_with_previous: {
      size_t start = 0;
      bool open = false;
      for (auto& g : segs) {
        if (g.m && open) {
          out.emplace_back(s.substr(start, g.e - start));
          open = false;
        } else if (g.m) {
          out.emplace_back(s.substr(g.b, g.e - g.b));
        } else {
          if (open) out.emplace_back(s.substr(start, g.b - start));
          start = g.b;
          open = true;
        }
      }
      if (open) out.emplace_back(s.substr(start));
      break;
    }
    case SplitBehavior::merged_with_next: {
      size_t start = 0;
      bool open = false;  // pending matches waiting for the next segment
      for (auto& g : segs) {
        if (g.m) {
          if (!open) start = g.b;
          open = true;
        } else {
          size_t b = open ? start : g.b;
          out.emplace_back(s.substr(b, g.e - b));
          open = false;
        }
      }
      if (open) out.emplace_back(s.substr(start));
      break;
    }
    case SplitBehavior::contiguous: {
      for (size_t i = 0; i < segs.size();) {
        size_t j = i + 1;
        if (segs[i].m)
          while (j < segs.size() && segs[j].m) ++j;
        out.emplace_back(s.substr(segs[i].b, segs[j - 1].e - segs[i].b));
        i = j;
      }
      break;
    }
  }
}

void pre_tokenize(const std::vector<PreStep>& steps, std::string text, size_t section_index,
                  std::vector<std::string>& pieces) {
  pieces.clear();
  pieces.push_back(std::move(text));
  std::vector<std::string> next;
  std::vector<std::pair<size_t, size_t>> m;
  const auto& bl = byte_level_table();
  for (const auto& st : steps) {
    next.clear();
    for (auto& p : pieces) {
      switch (st.kind) {
        case PreStep::split:
          st.pattern->find_all(p, m);
          split_by(p, m, st.behavior, st.invert, next);
          break;
        case PreStep::byte_level: {
          std::string src = p;
          if (st.add_prefix_space && (src.empty() || src[0] != ' ')) src.insert(src.begin(), ' ');
          std::vector<std::string> parts;
          if (st.use_regex) {
            st.pattern->find_all(src, m);
            split_by(src, m, SplitBehavior::isolated, false, parts);
          } else {
            parts.push_back(std::move(src));
          }
          for (auto& part : parts) {
            std::string enc;
            enc.reserve(part.size() * 2);
            for (char c : part) enc += bl.byte_to_utf8[static_cast<unsigned char>(c)];
            next.push_back(std::move(enc));
          }
          break;
        }
        case PreStep::metaspace: {
          std::string r;
          r.reserve(p.size() + 8);
          for (char c : p) {
            if (c == ' ') r += st.replacement;
            else r += c;
          }
          bool prepend = st.prepend == PreStep::Prepend::always ||
                         (st.prepend == PreStep::Prepend::first && section_index == 0);
          if (prepend && r.compare(0, st.replacement.size(), st.replacement) != 0) r = st.replacement + r;
          if (st.msplit) {
            std::vector<std::pair<size_t, size_t>> mm;
            for (size_t pos = r.find(st.replacement); pos != std::string::npos; pos = r.find(st.replacement, pos + st.replacement.size()))
              mm.emplace_back(pos, pos + st.replacement.size());
            split_by(r, mm, SplitBehavior::merged_with_next, false, next);
          } else {
            next.push_back(std::move(r));
          }
          break;
        }
        case PreStep::digits: {
          std::vector<std::pair<size_t, size_t>> mm;
          for (size_t i = 0; i < p.size();) {
            if (p[i] >= '0' && p[i] <= '9') {
              size_t j = i + 1;
              if (!st.individual_digits)
                while (j < p.size() && p[j] >= '0' && p[j] <= '9') ++j;
              mm.emplace_back(i, j);
              i = j;
            } else {
              ++i;
            }
          }
          split_by(p, mm, SplitBehavior::isolated, false, next);
          break;
        }
        case PreStep::whitespace_split: {
          size_t i = 0;
          while (i < p.size()) {
            size_t s = i + trim_left_ws(std::string_view(p).substr(i));
            if (s >= p.size()) break;
            size_t e = s;
            while (e < p.size()) {
              size_t j = e;
              if (is_white_space(next_cp(p, j))) break;
              e = j;
            }
            next.emplace_back(p.substr(s, e - s));
            i = e;
          }
          break;
        }
      }
    }
    pieces.swap(next);
  }
}

// ---------------------------------------------------------------- decoder
struct DecStep {
  enum Kind { byte_level, replace, byte_fallback, fuse, strip, metaspace } kind;
  explicit DecStep(Kind k) : kind(k) {}
  std::shared_ptr<Pattern> pattern;
  std::string content;
  int start = 0, stop = 0;
  bool metaspace_strip_first = true;
};

void parse_decoder(const json& j, std::vector<DecStep>& steps) {
  if (j.is_null()) return;
  std::string type = get_str(j, "type");
  if (type == "Sequence") {
    for (const auto& s : j.at("decoders")) parse_decoder(s, steps);
  } else if (type == "ByteLevel") {
    steps.push_back(DecStep{DecStep::byte_level});
  } else if (type == "Replace") {
    DecStep s{DecStep::replace};
    s.pattern = std::make_shared<Pattern>(j.at("pattern"));
    s.content = get_str(j, "content");
    steps.push_back(std::move(s));
  } else if (type == "ByteFallback") {
    steps.push_back(DecStep{DecStep::byte_fallback});
  } else if (type == "Fuse") {
    steps.push_back(DecStep{DecStep::fuse});
  } else if (type == "Strip") {
    DecStep s{DecStep::strip};
    s.content = get_str(j, "content", " ");
    s.start = j.value("start", 0);
    s.stop = j.value("stop", 0);
    steps.push_back(std::move(s));
  } else if (type == "Metaspace") {
    DecStep s{DecStep::metaspace};
    s.content = get_str(j, "replacement", "\xE2\x96\x81");
    std::string scheme = get_str(j, "prepend_scheme", "");
    if (scheme.empty()) scheme = get_bool(j, "add_prefix_space", true) ? "always" : "never";
    s.metaspace_strip_first = scheme != "never";
    steps.push_back(std::move(s));
  } else {
    unsupported("decoder type \"" + type + "\" is not supported");
  }
}

// ---------------------------------------------------------------- post-processor
struct TemplateItem {
  bool sequence = false;
  std::vector<int32_t> ids;
};

}  // namespace

// ==================================================================== Impl
struct Tokenizer::Impl {
  std::unique_ptr<BpeModel> model;
  std::vector<NormStep> normalizer;
  std::vector<PreStep> pre;
  std::vector<DecStep> decoder;
  std::vector<TemplateItem> tmpl;  // empty: no post-processor adds anything

  struct Added {
    std::string content;
    int32_t id;
    bool special, lstrip, rstrip, normalized;
  };
  std::vector<Added> added;
  std::unordered_map<int32_t, size_t> added_by_id;
  StrMap added_by_content;

  // Trie over bytes of the added tokens; two: matched on the raw text and on normalized text.
  struct Trie {
    std::vector<std::vector<std::pair<unsigned char, int32_t>>> kids{{}};
    std::vector<int32_t> term{-1};  // index into `added`
    std::array<bool, 256> first{};
    void insert(std::string_view s, int32_t idx) {
      if (s.empty()) return;
      int32_t n = 0;
      first[static_cast<unsigned char>(s[0])] = true;
      for (char ch : s) {
        auto c = static_cast<unsigned char>(ch);
        auto& k = kids[static_cast<size_t>(n)];
        auto it = std::find_if(k.begin(), k.end(), [&](auto& e) { return e.first == c; });
        if (it == k.end()) {
          auto nn = static_cast<int32_t>(kids.size());
          kids[static_cast<size_t>(n)].emplace_back(c, nn);
          kids.emplace_back();
          term.push_back(-1);
          n = nn;
        } else {
          n = it->second;
        }
      }
      if (term[static_cast<size_t>(n)] < 0) term[static_cast<size_t>(n)] = idx;
    }
    bool empty() const { return kids[0].empty(); }
    // longest match at s[i]: (added index, length) or (-1, 0)
    std::pair<int32_t, size_t> match(std::string_view s, size_t i) const {
      if (!first[static_cast<unsigned char>(s[i])]) return {-1, 0};
      int32_t n = 0;
      std::pair<int32_t, size_t> best{-1, 0};
      for (size_t j = i; j < s.size(); ++j) {
        auto c = static_cast<unsigned char>(s[j]);
        const auto& k = kids[static_cast<size_t>(n)];
        auto it = std::find_if(k.begin(), k.end(), [&](auto& e) { return e.first == c; });
        if (it == k.end()) break;
        n = it->second;
        if (term[static_cast<size_t>(n)] >= 0) best = {term[static_cast<size_t>(n)], j + 1 - i};
      }
      return best;
    }
  };
  Trie raw_trie, norm_trie;

  int32_t n_ids = 0;
  std::vector<uint8_t> special;  // by id
  std::string bos_token, eos_token, pad_token, chat_template;
  std::optional<int32_t> bos_id, pad_id;
  std::vector<int32_t> eos_ids;

  // ---- encode
  struct Section {
    std::string_view text;
    int32_t added = -1;  // index into `added`
  };
  void split_added(std::string_view text, const Trie& trie, std::vector<Section>& out) const {
    out.clear();
    if (trie.empty()) {
      out.push_back({text, -1});
      return;
    }
    size_t start = 0, i = 0;
    while (i < text.size()) {
      auto [idx, len] = trie.match(text, i);
      if (idx >= 0) {
        if (i > start) out.push_back({text.substr(start, i - start), -1});
        out.push_back({text.substr(i, len), idx});
        i += len;
        start = i;
      } else {
        ++i;
      }
    }
    if (start < text.size()) out.push_back({text.substr(start), -1});
    // lstrip / rstrip: added tokens swallow the whitespace next to them
    for (size_t k = 0; k < out.size(); ++k) {
      if (out[k].added < 0) continue;
      const auto& a = added[static_cast<size_t>(out[k].added)];
      if (a.lstrip && k > 0 && out[k - 1].added < 0) out[k - 1].text = out[k - 1].text.substr(0, trim_right_ws(out[k - 1].text));
      if (a.rstrip && k + 1 < out.size() && out[k + 1].added < 0)
        out[k + 1].text = out[k + 1].text.substr(trim_left_ws(out[k + 1].text));
    }
  }

  void encode_text(std::string_view text, std::vector<int32_t>& ids) const {
    std::vector<Section> sections, subs;
    std::vector<std::string> pieces;
    split_added(text, raw_trie, sections);
    for (size_t si = 0; si < sections.size(); ++si) {
      const auto& sec = sections[si];
      if (sec.added >= 0) {
        ids.push_back(added[static_cast<size_t>(sec.added)].id);
        continue;
      }
      if (sec.text.empty()) continue;
      std::string norm = normalizer.empty() ? std::string(sec.text) : normalize(normalizer, std::string(sec.text));
      if (norm.empty()) continue;
      split_added(norm, norm_trie, subs);
      for (const auto& sub : subs) {
        if (sub.added >= 0) {
          ids.push_back(added[static_cast<size_t>(sub.added)].id);
          continue;
        }
        if (sub.text.empty()) continue;
        if (pre.empty()) {
          model->encode(sub.text, ids);
          continue;
        }
        pre_tokenize(pre, std::string(sub.text), si, pieces);
        for (const auto& p : pieces) model->encode(p, ids);
      }
    }
  }

  // ---- decode: bytes of one token at stream position `index`
  std::string_view token_str(int32_t id) const {
    if (auto it = added_by_id.find(id); it != added_by_id.end()) return added[it->second].content;
    return id_strs[static_cast<size_t>(id)];
  }
  std::vector<std::string_view> id_strs;  // model vocab by id (views into the model's keys)

  std::string token_bytes(int32_t id, size_t index) const {
    std::string t(token_str(id));
    bool is_added = added_by_id.count(id) != 0;
    bool fused = false;
    const auto& bl = byte_level_table();
    for (const auto& st : decoder) {
      switch (st.kind) {
        case DecStep::byte_level: {
          if (is_added) break;
          std::string out;
          out.reserve(t.size());
          for (size_t i = 0; i < t.size();) {
            size_t j = i;
            uint32_t cp = next_cp(t, j);
            if (cp < bl.cp_to_byte.size() && bl.cp_to_byte[cp] >= 0) out += static_cast<char>(bl.cp_to_byte[cp]);
            else out.append(t, i, j - i);
            i = j;
          }
          t = std::move(out);
          break;
        }
        case DecStep::replace: t = st.pattern->replace_all(t, st.content); break;
        case DecStep::byte_fallback:
          if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
            auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
            int h = hex(t[3]), l = hex(t[4]);
            if (h >= 0 && l >= 0) t = std::string(1, static_cast<char>(h * 16 + l));
          }
          break;
        case DecStep::fuse: fused = true; break;
        case DecStep::strip:
          if (!fused) t = strip_chars(t, st.content, st.start, st.stop);
          break;  // after Fuse: applied to the whole text by the caller
        case DecStep::metaspace: {
          std::string out;
          for (size_t pos = 0;;) {
            size_t f = t.find(st.content, pos);
            if (f == std::string::npos) {
              out.append(t, pos);
              break;
            }
            out.append(t, pos, f - pos);
            out += ' ';
            pos = f + st.content.size();
          }
          if (index == 0 && st.metaspace_strip_first && !out.empty() && out[0] == ' ') out.erase(0, 1);
          t = std::move(out);
          break;
        }
      }
    }
    return t;
  }
  static std::string strip_chars(const std::string& t, const std::string& c, int start, int stop) {
    size_t b = 0, e = t.size();
    for (int k = 0; k < start && e - b >= c.size() && t.compare(b, c.size(), c) == 0; ++k) b += c.size();
    for (int k = 0; k < stop && e - b >= c.size() && t.compare(e - c.size(), c.size(), c) == 0; ++k) e -= c.size();
    return t.substr(b, e - b);
  }
  // Strip steps that follow a Fuse: (content, start, stop) over the whole text.
  std::vector<const DecStep*> whole_text_strips() const {
    std::vector<const DecStep*> r;
    bool fused = false;
    for (const auto& st : decoder) {
      if (st.kind == DecStep::fuse) fused = true;
      if (st.kind == DecStep::strip && fused) r.push_back(&st);
    }
    return r;
  }
  bool valid_id(int32_t id) const {
    return id >= 0 && id < n_ids && (id_strs[static_cast<size_t>(id)].data() != nullptr || added_by_id.count(id));
  }
  void check_id(int32_t id) const {
    if (!valid_id(id))
      fail(Status::invalid_argument, "token id " + std::to_string(id) + " is not in the vocabulary (size " +
                                         std::to_string(n_ids) + ")");
  }
};

// ==================================================================== loading
namespace {
std::string token_name(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) return get_str(*it, "content");
  return {};
}
}  // namespace

Tokenizer Tokenizer::from_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    fail(Status::invalid_argument, "tokenizer directory " + dir.string() + " does not exist or is not a directory");
  auto tj = dir / "tokenizer.json";
  if (!std::filesystem::exists(tj, ec))
    fail(Status::invalid_argument, "no tokenizer.json in " + dir.string() +
                                       " (only Hugging Face tokenizer.json is supported, not tokenizer.model)");
  std::string cfg;
  if (auto cj = dir / "tokenizer_config.json"; std::filesystem::exists(cj, ec))
    cfg = json_io::read_file(cj, limits::kMaxConfigFileBytes);
  try {
    return from_json(json_io::read_file(tj, limits::kMaxTokenizerFileBytes), cfg);
  } catch (const Error& e) {
    throw Error(e.status(), std::string(e.what()) + " (in " + dir.string() + ")");
  }
}

Tokenizer Tokenizer::from_gguf(const std::filesystem::path& file) {
  const auto header = model::read_gguf_header(file);
  auto [tj, cfg] = tokenizer::gguf_tokenizer_files(header.metadata, file.string());
  try {
    return from_json(tj, cfg);
  } catch (const Error& e) {
    throw Error(e.status(), std::string(e.what()) + " (the tokenizer embedded in " + file.string() + ")");
  }
}

bool Tokenizer::gguf_has_tokenizer(const std::filesystem::path& file) {
  const auto header = model::read_gguf_header(file);
  auto it = header.metadata.find("tokenizer.ggml.model");
  if (it == header.metadata.end()) return false;
  return !(it->is_string() && (*it == "none" || *it == "no_vocab"));
}

Tokenizer Tokenizer::for_model(const std::filesystem::path& path) {
  std::error_code ec;
  const bool is_dir = std::filesystem::is_directory(path, ec);
  const auto dir = is_dir ? path : path.parent_path();
  if (!is_dir && path.extension() == ".gguf" && !std::filesystem::exists(dir / "tokenizer.json", ec) &&
      gguf_has_tokenizer(path))
    return from_gguf(path);
  return from_dir(dir.empty() ? std::filesystem::path(".") : dir);
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json) {
  TokenizerJson parsed;
  try {
    parsed = parse_tokenizer_json(tokenizer_json);
  } catch (const json::exception& e) {
    bad(std::string("not valid JSON: ") + e.what());
  }
  const json& t = parsed.tree;
  json cfg = json::object();
  if (!config_json.empty()) {
    cfg = json_io::parse(config_json, "tokenizer_config.json");
    if (!cfg.is_object()) fail(Status::invalid_argument, "tokenizer_config.json: must be a JSON object");
  }
  if (!t.is_object()) bad("must be a JSON object");
  auto impl = std::make_unique<Impl>();
  try {
    auto mit = t.find("model");
    if (mit == t.end() || !mit->is_object()) bad("no \"model\" object");
    std::string mtype = get_str(*mit, "type", "BPE");
    if (mtype != "BPE") unsupported("model type \"" + mtype + "\" is not supported (BPE only)");
    if (!parsed.has_vocab) bad("model.vocab (an object of token -> id) is missing");
    if (!parsed.has_merges) bad("model.merges (an array) is missing");
    impl->model = std::make_unique<BpeModel>(*mit, parsed.vocab, parsed.merges);
    parsed.vocab = {};
    parsed.merges = {};
    if (auto it = t.find("normalizer"); it != t.end()) parse_normalizer(*it, impl->normalizer);
    if (auto it = t.find("pre_tokenizer"); it != t.end()) parse_pre_tokenizer(*it, impl->pre);
    if (auto it = t.find("decoder"); it != t.end()) parse_decoder(*it, impl->decoder);

    // ids
    int32_t n = impl->model->max_id() + 1;
    if (auto it = t.find("added_tokens"); it != t.end() && it->is_array()) {
      for (const auto& a : *it) {
        if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
            !a["content"].is_string())
          bad("added_tokens entries need an integer \"id\" and a string \"content\"");
        Impl::Added x;
        // Ids index dense tables: a stray huge id would ask for gigabytes (or overflow), so bound them by the
        // vocabulary's size (real files append added tokens right after the vocabulary).
        const int64_t id64 = a["id"].get<int64_t>();
        const int64_t id_limit = 2 * int64_t(impl->model->max_id() + 1) + 65536;
        if (id64 < 0 || id64 >= id_limit)
          bad("added token id " + std::to_string(id64) + " is outside [0, " + std::to_string(id_limit) +
              ") (ids must follow the vocabulary's)");
        x.id = int32_t(id64);
        x.content = a["content"].get<std::string>();
        x.special = get_bool(a, "special", false);
        x.lstrip = get_bool(a, "lstrip", false);
        x.rstrip = get_bool(a, "rstrip", false);
        x.normalized = get_bool(a, "normalized", !x.special);
        impl->added_by_id[x.id] = impl->added.size();
        impl->added_by_content[x.content] = x.id;
        n = std::max(n, x.id + 1);
        impl->added.push_back(std::move(x));
      }
    }
    impl->n_ids = n;
    impl->id_strs.assign(static_cast<size_t>(n), std::string_view{});
    for (const auto& [s, id] : impl->model->vocab()) impl->id_strs[static_cast<size_t>(id)] = s;
    impl->special.assign(static_cast<size_t>(n), 0);
    for (size_t i = 0; i < impl->added.size(); ++i) {
      auto& a = impl->added[i];
      if (a.special) impl->special[static_cast<size_t>(a.id)] = 1;
      if (a.normalized && !impl->normalizer.empty()) {
        auto nc = normalize(impl->normalizer, a.content);
        impl->norm_trie.insert(nc, static_cast<int32_t>(i));
      } else {
        impl->raw_trie.insert(a.content, static_cast<int32_t>(i));
      }
    }

    // post-processor
    auto lookup = [&](const std::string& tok) -> int32_t {
      if (auto it = impl->added_by_content.find(tok); it != impl->added_by_content.end()) return it->second;
      if (auto it = impl->model->vocab().find(tok); it != impl->model->vocab().end()) return it->second;
      bad("post_processor names the token \"" + tok + "\" that is not in the vocabulary");
    };
    std::function<void(const json&)> parse_post = [&](const json& pp) {
      if (pp.is_null()) return;
      std::string type = get_str(pp, "type");
      if (type == "Sequence") {
        for (const auto& p : pp.at("processors")) parse_post(p);
      } else if (type == "ByteLevel") {
        // offsets only
      } else if (type == "TemplateProcessing") {
        impl->tmpl.clear();
        const auto& specials = pp.contains("special_tokens") ? pp["special_tokens"] : json::object();
        for (const auto& item : pp.at("single")) {
          TemplateItem ti;
          if (item.contains("Sequence")) {
            ti.sequence = true;
          } else if (item.contains("SpecialToken")) {
            std::string name = get_str(item["SpecialToken"], "id");
            if (specials.contains(name) && specials[name].contains("ids")) {
              for (const auto& v : specials[name]["ids"]) ti.ids.push_back(json_token_id(v, "post_processor ids"));
            } else {
              ti.ids.push_back(lookup(name));
            }
          } else {
            bad("TemplateProcessing item is neither Sequence nor SpecialToken");
          }
          impl->tmpl.push_back(std::move(ti));
        }
      } else if (type == "BertProcessing" || type == "RobertaProcessing") {
        impl->tmpl.clear();
        auto cls = pp.at("cls"), sep = pp.at("sep");
        impl->tmpl.push_back({false, {json_token_id(cls.at(1), "post_processor cls")}});
        impl->tmpl.push_back({true, {}});
        impl->tmpl.push_back({false, {json_token_id(sep.at(1), "post_processor sep")}});
      } else {
        unsupported("post_processor type \"" + type + "\" is not supported");
      }
    };
    if (auto it = t.find("post_processor"); it != t.end()) parse_post(*it);
    for (const auto& ti : impl->tmpl)
      for (int32_t id : ti.ids)
        if (!impl->valid_id(id))
          bad("post_processor uses token id " + std::to_string(id) + ", which is not in the vocabulary [0, " +
              std::to_string(impl->n_ids) + ")");
  } catch (const json::exception& e) {
    bad(std::string("unexpected structure: ") + e.what());
  }

  // tokenizer_config.json
  impl->bos_token = token_name(cfg, "bos_token");
  impl->eos_token = token_name(cfg, "eos_token");
  impl->pad_token = token_name(cfg, "pad_token");
  auto id_of = [&](const std::string& s) -> std::optional<int32_t> {
    if (s.empty()) return std::nullopt;
    if (auto it = impl->added_by_content.find(s); it != impl->added_by_content.end()) return it->second;
    if (auto it = impl->model->vocab().find(s); it != impl->model->vocab().end()) return it->second;
    return std::nullopt;
  };
  impl->bos_id = id_of(impl->bos_token);
  if (!impl->bos_id) {  // no config: the first special token of the template
    for (const auto& ti : impl->tmpl) {
      if (ti.sequence) break;
      if (!ti.ids.empty()) {
        impl->bos_id = ti.ids[0];
        impl->bos_token = std::string(impl->token_str(ti.ids[0]));
        break;
      }
    }
  }
  impl->pad_id = id_of(impl->pad_token);
  auto add_eos = [&](std::optional<int32_t> id) {
    if (id && std::find(impl->eos_ids.begin(), impl->eos_ids.end(), *id) == impl->eos_ids.end()) impl->eos_ids.push_back(*id);
  };
  add_eos(id_of(impl->eos_token));
  for (const char* name : {"<|eot_id|>", "<|end_of_text|>", "<|eom_id|>", "<end_of_turn>", "<eos>", "</s>",
                           "<|endoftext|>", "<|im_end|>"}) {
    auto id = id_of(name);
    if (id && impl->special[static_cast<size_t>(*id)]) add_eos(id);
  }
  if (impl->eos_token.empty() && !impl->eos_ids.empty()) impl->eos_token = std::string(impl->token_str(impl->eos_ids[0]));
  if (auto it = cfg.find("chat_template"); it != cfg.end()) {
    if (it->is_string()) {
      impl->chat_template = it->get<std::string>();
    } else if (it->is_array()) {  // [{name, template}, ...]: the "default" one, else the first
      for (const auto& e : *it)
        if (get_str(e, "name") == "default") impl->chat_template = get_str(e, "template");
      if (impl->chat_template.empty() && !it->empty()) impl->chat_template = get_str((*it)[0], "template");
    }
  }
  return Tokenizer(std::move(impl));
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

// ==================================================================== encode / decode
std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  if (auto off = utf8_invalid_offset(text)) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(text[*off]));
    fail(Status::invalid_argument, "text is not valid UTF-8: byte " + std::string(hex) + " at byte offset " +
                                       std::to_string(*off));
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (!add_special || impl_->tmpl.empty()) {
    impl_->encode_text(text, ids);
    return ids;
  }
  for (const auto& ti : impl_->tmpl) {
    if (ti.sequence) impl_->encode_text(text, ids);
    else ids.insert(ids.end(), ti.ids.begin(), ti.ids.end());
  }
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  size_t index = 0;
  for (int32_t id : ids) {
    impl_->check_id(id);
    if (skip_special && impl_->special[static_cast<size_t>(id)]) continue;
    bytes += impl_->token_bytes(id, index++);
  }
  for (const DecStep* st : impl_->whole_text_strips()) bytes = Impl::strip_chars(bytes, st->content, st->start, st->stop);
  return sanitize_utf8(bytes);
}

// ==================================================================== streaming
struct Tokenizer::StreamDecoder::State {
  const Tokenizer::Impl* impl;
  bool skip_special;
  size_t index = 0;
  std::string pending;
  std::vector<const DecStep*> strips;
  std::vector<int> strip_left;  // leading chars each whole-text strip may still remove
};

Tokenizer::StreamDecoder::StreamDecoder(std::unique_ptr<State> s) : s_(std::move(s)) {}
Tokenizer::StreamDecoder::StreamDecoder(StreamDecoder&&) noexcept = default;
Tokenizer::StreamDecoder& Tokenizer::StreamDecoder::operator=(StreamDecoder&&) noexcept = default;
Tokenizer::StreamDecoder::~StreamDecoder() = default;

Tokenizer::StreamDecoder Tokenizer::stream_decoder(bool skip_special) const {
  auto st = std::make_unique<StreamDecoder::State>();
  st->impl = impl_.get();
  st->skip_special = skip_special;
  st->strips = impl_->whole_text_strips();
  StreamDecoder d(std::move(st));
  d.reset();
  return d;
}

void Tokenizer::StreamDecoder::reset() {
  s_->index = 0;
  s_->pending.clear();
  s_->strip_left.clear();
  for (const auto* st : s_->strips) s_->strip_left.push_back(st->start);
}

std::string Tokenizer::StreamDecoder::push(int32_t id) {
  if (!s_->impl->valid_id(id)) return {};  // e.g. a padding row of a model's larger embedding
  if (s_->skip_special && s_->impl->special[static_cast<size_t>(id)]) return {};
  std::string b = s_->impl->token_bytes(id, s_->index++);
  for (size_t k = 0; k < s_->strips.size(); ++k) {
    const std::string& c = s_->strips[k]->content;
    while (s_->strip_left[k] > 0 && s_->pending.empty() && b.size() >= c.size() && b.compare(0, c.size(), c) == 0) {
      b.erase(0, c.size());
      --s_->strip_left[k];
    }
    if (!b.empty() || !s_->pending.empty()) s_->strip_left[k] = 0;
  }
  s_->pending += b;
  size_t n = utf8_complete_prefix(s_->pending);
  std::string out = sanitize_utf8(std::string_view(s_->pending).substr(0, n));
  s_->pending.erase(0, n);
  return out;
}

std::string Tokenizer::StreamDecoder::flush() {
  std::string out = sanitize_utf8(s_->pending);
  s_->pending.clear();
  return out;
}

// ==================================================================== queries
int32_t Tokenizer::vocab_size() const { return impl_->n_ids; }
std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  if (auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end()) return it->second;
  if (auto it = impl_->model->vocab().find(token); it != impl_->model->vocab().end()) return it->second;
  return std::nullopt;
}
std::string Tokenizer::token_text(int32_t id) const {
  impl_->check_id(id);
  return std::string(impl_->token_str(id));
}
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos_id; }
std::vector<int32_t> Tokenizer::eos_ids() const { return impl_->eos_ids; }
std::optional<int32_t> Tokenizer::pad_id() const { return impl_->pad_id; }
bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < impl_->n_ids && impl_->special[static_cast<size_t>(id)] != 0;
}
std::string Tokenizer::bos_token() const { return impl_->bos_token; }
std::string Tokenizer::eos_token() const { return impl_->eos_token; }
std::string Tokenizer::chat_template() const { return impl_->chat_template; }
bool Tokenizer::add_bos_by_default() const {
  return !impl_->tmpl.empty() && !impl_->tmpl[0].sequence && impl_->bos_id && !impl_->tmpl[0].ids.empty() &&
         impl_->tmpl[0].ids[0] == *impl_->bos_id;
}

}  // namespace flashkit
