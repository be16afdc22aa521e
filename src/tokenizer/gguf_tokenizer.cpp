// See gguf_tokenizer.hpp.
#include "tokenizer/gguf_tokenizer.hpp"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "core/limits.hpp"
#include "flashkit/error.hpp"

namespace flashkit::tokenizer {
namespace {

using nlohmann::json;

enum TokenType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

[[noreturn]] void bad(const std::string& label, const std::string& what) {
  fail(Status::invalid_argument, label + ": " + what);
}

const json* find(const json& md, const char* key) {
  auto it = md.find(key);
  return it == md.end() ? nullptr : &*it;
}

std::optional<int64_t> id_key(const json& md, const char* key, int64_t n, const std::string& label) {
  const json* v = find(md, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer())
    bad(label, std::string("metadata '") + key + "' is " + v->type_name() + ", expected a token id");
  const int64_t id = v->get<int64_t>();
  // llama.cpp writes -1 (as u32: 4294967295) for "none" in some files.
  if (id == -1 || (v->is_number_unsigned() && v->get<uint64_t>() == 0xffffffffu)) return std::nullopt;
  if (id < 0 || id >= n)
    bad(label, std::string("metadata '") + key + "' is " + std::to_string(id) + ", outside the vocabulary [0, " +
                   std::to_string(n) + ")");
  return id;
}

// The per-token array `key` (optional): n entries of the given kind, else an error naming the key.
const json* per_token(const json& md, const char* key, size_t n, bool numbers, const std::string& label) {
  const json* a = find(md, key);
  if (!a) return nullptr;
  if (!a->is_array() || a->size() != n)
    bad(label, std::string("metadata '") + key + "' must be an array of " + std::to_string(n) +
                   " entries (one per token)");
  for (size_t i = 0; i < n; ++i)
    if (numbers ? !(*a)[i].is_number() : !(*a)[i].is_number_integer())
      bad(label, std::string("metadata '") + key + "[" + std::to_string(i) + "]' is " + (*a)[i].type_name() +
                     ", expected " + (numbers ? "a number" : "an integer"));
  return a;
}

// UTF-8 code point boundaries of s (positions 0 < p < size).
std::vector<size_t> char_splits(const std::string& s) {
  std::vector<size_t> out;
  for (size_t i = 1; i < s.size(); ++i)
    if ((uint8_t(s[i]) & 0xC0) != 0x80) out.push_back(i);
  return out;
}

}  // namespace

std::string gguf_pre_regex(const std::string& pre, const std::string& label) {
  // The splits of each model's own tokenizer.json (llama.cpp maps the same names to the same expressions).
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3" || pre == "smaug-bpe")
    return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
           "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  if (pre == "qwen2" || pre == "deepseek-r1-qwen")
    return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
           "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  if (pre == "gpt2" || pre == "default" || pre.empty())
    return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
  fail(Status::unsupported, label + ": tokenizer.ggml.pre '" + pre.substr(0, 100) +
                                "' is not mapped (flashkit maps llama-bpe/llama3, qwen2, gpt2, default); put the "
                                "model's tokenizer.json beside the file");
}

std::pair<std::string, std::string> gguf_tokenizer_files(const json& md, const std::string& label) {
  const json* model_v = find(md, "tokenizer.ggml.model");
  if (!model_v || !model_v->is_string())
    bad(label, "metadata 'tokenizer.ggml.model' is missing (this GGUF carries no tokenizer; put the model's "
               "tokenizer.json beside it)");
  const std::string model = model_v->get<std::string>();
  if (model != "gpt2" && model != "llama")
    fail(Status::unsupported, label + ": tokenizer.ggml.model '" + model.substr(0, 100) +
                                  "' (flashkit reads gpt2 = byte-level BPE and llama = SentencePiece BPE)");
  const json* tokens = find(md, "tokenizer.ggml.tokens");
  if (!tokens || !tokens->is_array() || tokens->empty())
    bad(label, "metadata 'tokenizer.ggml.tokens' must be a non-empty array of strings");
  if (tokens->size() > uint64_t(limits::kMaxVocab))
    bad(label, "metadata 'tokenizer.ggml.tokens' has " + std::to_string(tokens->size()) +
                   " entries (flashkit's limit is " + std::to_string(limits::kMaxVocab) +
                   ", core/limits.hpp kMaxVocab)");
  const size_t n = tokens->size();
  for (size_t i = 0; i < n; ++i)
    if (!(*tokens)[i].is_string())
      bad(label, "metadata 'tokenizer.ggml.tokens[" + std::to_string(i) + "]' is " + (*tokens)[i].type_name() +
                     ", expected a string");
  const json* types = per_token(md, "tokenizer.ggml.token_type", n, false, label);
  const json* scores = per_token(md, "tokenizer.ggml.scores", n, true, label);
  auto type_of = [&](size_t i) -> int64_t {
    if (!types) return kNormal;
    const int64_t t = (*types)[i].get<int64_t>();
    if (t < 1 || t > 6)
      bad(label, "metadata 'tokenizer.ggml.token_type[" + std::to_string(i) + "]' is " + std::to_string(t) +
                     " (token types are 1..6)");
    return t;
  };

  const bool spm = model == "llama";
  json vocab = json::object(), added = json::array();
  std::unordered_map<std::string, int64_t> id_of;
  for (size_t i = 0; i < n; ++i) {
    const std::string& s = (*tokens)[i].get_ref<const std::string&>();
    const int64_t t = type_of(i);
    if (t == kControl || t == kUserDefined) {
      added.push_back({{"id", i}, {"content", s}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", t != kControl && !spm}, {"special", t == kControl}});
    }
    // Every token keeps its id in the model's vocabulary (as Hugging Face's files do); the first of duplicates wins.
    if (!vocab.contains(s)) vocab[s] = i;
    id_of.emplace(s, int64_t(i));
  }

  json merges = json::array();
  if (!spm) {
    const json* m = find(md, "tokenizer.ggml.merges");
    if (!m || !m->is_array()) bad(label, "metadata 'tokenizer.ggml.merges' (an array of \"a b\" strings) is missing");
    for (size_t i = 0; i < m->size(); ++i) {
      const json& e = (*m)[i];
      if (!e.is_string() || e.get_ref<const std::string&>().find(' ') == std::string::npos)
        bad(label, "metadata 'tokenizer.ggml.merges[" + std::to_string(i) + "]' must be a string \"a b\"");
    }
    merges = *m;
  } else {
    if (!scores) bad(label, "metadata 'tokenizer.ggml.scores' is missing (a SentencePiece vocabulary needs them)");
    // Each piece made of two pieces merges them with its own score: higher scores first, then lower ids. Normal and
    // user-defined pieces take part (as in llama.cpp's SentencePiece tokenizer: Gemma's runs of spaces are
    // user-defined pieces); control, unknown, unused and byte tokens do not.
    struct Merge {
      double score;
      int64_t left, right;
      std::string a, b;
    };
    std::vector<Merge> all;
    for (size_t i = 0; i < n; ++i) {
      auto mergeable = [&](size_t id) { return type_of(id) == kNormal || type_of(id) == kUserDefined; };
      if (!mergeable(i)) continue;
      const std::string& s = (*tokens)[i].get_ref<const std::string&>();
      for (size_t p : char_splits(s)) {
        auto l = id_of.find(s.substr(0, p)), r = id_of.find(s.substr(p));
        if (l == id_of.end() || r == id_of.end()) continue;
        if (!mergeable(size_t(l->second)) || !mergeable(size_t(r->second))) continue;
        all.push_back({(*scores)[i].get<double>(), l->second, r->second, l->first, r->first});
      }
    }
    std::stable_sort(all.begin(), all.end(), [](const Merge& x, const Merge& y) {
      if (x.score != y.score) return x.score > y.score;
      return x.left != y.left ? x.left < y.left : x.right < y.right;
    });
    for (const Merge& mg : all) merges.push_back(json::array({mg.a, mg.b}));
  }

  const auto bos = id_key(md, "tokenizer.ggml.bos_token_id", int64_t(n), label);
  const auto eos = id_key(md, "tokenizer.ggml.eos_token_id", int64_t(n), label);
  const auto unk = id_key(md, "tokenizer.ggml.unknown_token_id", int64_t(n), label);
  const auto pad = id_key(md, "tokenizer.ggml.padding_token_id", int64_t(n), label);
  bool add_bos = spm;  // llama.cpp's defaults: SentencePiece adds BOS, byte-level BPE does not
  if (const json* v = find(md, "tokenizer.ggml.add_bos_token")) {
    if (!v->is_boolean()) bad(label, "metadata 'tokenizer.ggml.add_bos_token' must be a bool");
    add_bos = v->get<bool>();
  }
  auto text = [&](int64_t id) { return (*tokens)[size_t(id)].get<std::string>(); };

  json t = json::object();
  t["version"] = "1.0";
  t["added_tokens"] = std::move(added);
  json m = {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
  if (spm) {
    // tokenizer.ggml.add_space_prefix (llama.cpp; false for Gemma): whether a "▁" is prepended to the text.
    bool prefix = true;
    if (const json* v = find(md, "tokenizer.ggml.add_space_prefix")) {
      if (!v->is_boolean()) bad(label, "metadata 'tokenizer.ggml.add_space_prefix' must be a bool");
      prefix = v->get<bool>();
    }
    m["byte_fallback"] = true;
    m["fuse_unk"] = true;
    if (unk) m["unk_token"] = text(*unk);
    json norms = json::array();
    if (prefix) norms.push_back({{"type", "Prepend"}, {"prepend", "\xe2\x96\x81"}});
    norms.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xe2\x96\x81"}});
    t["normalizer"] = {{"type", "Sequence"}, {"normalizers", std::move(norms)}};
    t["pre_tokenizer"] = nullptr;
    json decs = json::array({{{"type", "Replace"}, {"pattern", {{"String", "\xe2\x96\x81"}}}, {"content", " "}},
                             {{"type", "ByteFallback"}},
                             {{"type", "Fuse"}}});
    if (prefix) decs.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    t["decoder"] = {{"type", "Sequence"}, {"decoders", std::move(decs)}};
  } else {
    std::string pre;
    if (const json* p = find(md, "tokenizer.ggml.pre")) {
      if (!p->is_string()) bad(label, "metadata 'tokenizer.ggml.pre' must be a string");
      pre = p->get<std::string>();
    }
    m["ignore_merges"] = pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3";
    t["normalizer"] = nullptr;
    t["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         json::array({{{"type", "Split"},
                       {"pattern", {{"Regex", gguf_pre_regex(pre, label)}}},
                       {"behavior", "Isolated"},
                       {"invert", false}},
                      {{"type", "ByteLevel"},
                       {"add_prefix_space", false},
                       {"trim_offsets", true},
                       {"use_regex", false}}})}};
    t["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  }
  t["model"] = std::move(m);
  if (add_bos && bos) {
    const std::string b = text(*bos);
    t["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", b}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", json::array()},
        {"special_tokens", {{b, {{"id", b}, {"ids", json::array({*bos})}, {"tokens", json::array({b})}}}}}};
  } else {
    t["post_processor"] = nullptr;
  }

  json cfg = json::object();
  if (bos) cfg["bos_token"] = text(*bos);
  if (eos) cfg["eos_token"] = text(*eos);
  if (unk) cfg["unk_token"] = text(*unk);
  if (pad) cfg["pad_token"] = text(*pad);
  cfg["add_bos_token"] = add_bos;
  if (const json* ct = find(md, "tokenizer.chat_template")) {
    if (!ct->is_string()) bad(label, "metadata 'tokenizer.chat_template' must be a string");
    cfg["chat_template"] = *ct;
  }
  try {
    return {t.dump(), cfg.dump()};
  } catch (const json::exception&) {
    bad(label, "a tokenizer.ggml.tokens entry or the chat template is not valid UTF-8");
  }
}

}  // namespace flashkit::tokenizer
