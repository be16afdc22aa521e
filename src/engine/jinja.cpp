#include "engine/jinja.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "flashkit/error.hpp"
#include "tokenizer/utf8.hpp"

namespace flashkit::engine::jinja {

// ================================================================================================
// Text utilities: UTF-8, Python's notion of whitespace, Python str()/repr()/json.dumps renderings.
// ================================================================================================
namespace {

struct Pos {
  int line = 1, col = 1;
};

[[noreturn]] void error_at(Pos p, const std::string& msg) {
  fail(Status::invalid_argument,
       "chat template: " + msg + " (line " + std::to_string(p.line) + ", column " + std::to_string(p.col) + ")");
}

// Decodes the code point at s[i] (advancing i); invalid bytes decode as themselves (Latin-1 fallback).
uint32_t next_cp(std::string_view s, size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) {
    ++i;
    return c;
  }
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xC0) != 0x80) {
      ++i;
      return c;
    }
    cp = (cp << 6) | (d & 0x3F);
  }
  i += n;
  return cp;
}

using tok::append_utf8;  // the tokenizer's encoder (ill-formed code points become U+FFFD)

// Python's str.isspace() (Unicode White_Space-ish set used by str.strip()/split()).
bool py_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::vector<uint32_t> decode(std::string_view s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) out.push_back(next_cp(s, i));
  return out;
}

std::string encode(const std::vector<uint32_t>& cps, size_t b = 0, size_t e = std::string::npos) {
  std::string out;
  e = std::min(e, cps.size());
  for (size_t i = b; i < e; ++i) append_utf8(out, cps[i]);
  return out;
}

// Python str.strip/lstrip/rstrip: chars == nullptr strips whitespace, else any code point of *chars.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<uint32_t> set;
  if (chars) set = decode(*chars);
  auto strip_it = [&](uint32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : py_space(cp);
  };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      size_t j = b;
      if (!strip_it(next_cp(s, j))) break;
      b = j;
    }
  }
  if (right) {
    while (e > b) {
      size_t k = e - 1;  // back to the start of the last code point
      while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80 && e - k < 4) --k;
      size_t j = k;
      uint32_t cp = next_cp(s, j);
      if (j != e) {  // not one well-formed sequence: the last byte stands alone
        k = e - 1;
        cp = static_cast<unsigned char>(s[k]);
      }
      if (!strip_it(cp)) break;
      e = k;
    }
  }
  return std::string(s.substr(b, e - b));
}

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0.0) return std::signbit(v) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout (fixed for 1e-4 <= |v| < 1e16, else scientific).
  char buf[64];
  int prec = 1;
  for (; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*e", prec - 1, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  const size_t epos = s.find('e');
  const int exp = std::atoi(s.c_str() + epos + 1);
  std::string mant = s.substr(0, epos);
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      std::string ip = digits.substr(0, std::min(digits.size(), static_cast<size_t>(exp + 1)));
      while (ip.size() < static_cast<size_t>(exp + 1)) ip += '0';
      std::string fp = digits.size() > static_cast<size_t>(exp + 1) ? digits.substr(exp + 1) : "0";
      out = ip + "." + fp;
    } else {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  return neg ? "-" + out : out;
}

std::string py_repr_str(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (size_t i = 0; i < s.size();) {
    const uint32_t cp = next_cp(s, i);
    if (cp == static_cast<uint32_t>(q) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || cp == 0x7F) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", cp);
      out += b;
    } else {
      append_utf8(out, cp);
    }
  }
  out += q;
  return out;
}

std::string repr(const Value& v);

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

struct JsonSeps {
  std::string item, key;
};

void json_dump(std::string& out, const Value& v, int indent, bool sort_keys, int level, const JsonSeps& seps) {
  auto newline = [&](int lv) {
    out += '\n';
    out.append(static_cast<size_t>(indent * lv), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::none:
      out += "null";
      return;
    case Value::Kind::boolean:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::integer:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::floating: {
      const double d = v.as_double();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : float_repr(d);
      return;
    }
    case Value::Kind::string:
      json_string(out, v.str());
      return;
    case Value::Kind::list: {
      const auto& l = v.list();
      if (l.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) out += seps.item;
        if (indent >= 0) newline(level + 1);
        json_dump(out, l[i], indent, sort_keys, level + 1, seps);
      }
      if (indent >= 0) newline(level);
      out += ']';
      return;
    }
    case Value::Kind::dict: {
      auto items = v.dict_ref().items;
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (sort_keys)
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += seps.item;
        if (indent >= 0) newline(level + 1);
        json_string(out, items[i].first);
        out += seps.key;
        json_dump(out, items[i].second, indent, sort_keys, level + 1, seps);
      }
      if (indent >= 0) newline(level);
      out += '}';
      return;
    }
    case Value::Kind::undefined:
      fail(Status::invalid_argument,
           "chat template: tojson of an undefined value" + (v.str().empty() ? std::string() : " ('" + v.str() + "')"));
    case Value::Kind::function:
      fail(Status::invalid_argument, "chat template: tojson of a function");
  }
}

std::string repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::string:
      return py_repr_str(v.str());
    case Value::Kind::list: {
      std::string out = v.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < v.list().size(); ++i) out += (i ? ", " : "") + repr(v.list()[i]);
      if (v.is_tuple()) return out + (v.list().size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Value::Kind::dict: {
      if (v.is_namespace()) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.dict_ref().items) {
        out += (first ? "" : ", ") + py_repr_str(k) + ": " + repr(x);
        first = false;
      }
      return out + "}";
    }
    default:
      return to_str(v);
  }
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return "";
    case Value::Kind::none:
      return "None";
    case Value::Kind::boolean:
      return v.as_bool() ? "True" : "False";
    case Value::Kind::integer:
      return std::to_string(v.as_int());
    case Value::Kind::floating:
      return float_repr(v.as_double());
    case Value::Kind::string:
      return v.str();
    case Value::Kind::list:
    case Value::Kind::dict:
      return repr(v);
    case Value::Kind::function:
      return "<function " + v.str() + ">";
  }
  return "";
}

std::string to_json(const Value& v, int indent, bool sort_keys) {
  return to_json(v, indent, sort_keys, indent >= 0 ? "," : ", ", ": ");
}

std::string to_json(const Value& v, int indent, bool sort_keys, std::string_view item_sep, std::string_view key_sep) {
  std::string out;
  json_dump(out, v, indent, sort_keys, 0, JsonSeps{std::string(item_sep), std::string(key_sep)});
  return out;
}

// ================================================================================================
// Value
// ================================================================================================
Value Value::undefined(std::string name) {
  Value v;
  v.s_ = std::move(name);
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::none;
  return v;
}
Value::Value(bool b) : kind_(Kind::boolean), b_(b) {}
Value::Value(int64_t v) : kind_(Kind::integer), i_(v) {}
Value::Value(double v) : kind_(Kind::floating), f_(v) {}
Value::Value(std::string s) : kind_(Kind::string), s_(std::move(s)) {}
Value::Value(List l) : kind_(Kind::list), list_(std::make_shared<List>(std::move(l))) {}
Value Value::tuple(List l) {
  Value v(std::move(l));
  v.tuple_ = true;
  return v;
}
Value Value::dict() {
  Value v;
  v.kind_ = Kind::dict;
  v.dict_ = std::make_shared<Dict>();
  return v;
}
Value Value::namespace_() {
  Value v = dict();
  v.dict_->is_namespace = true;
  return v;
}
Value Value::function(Function f, std::string name) {
  Value v;
  v.kind_ = Kind::function;
  v.func_ = std::make_shared<Function>(std::move(f));
  v.s_ = std::move(name);
  return v;
}
bool Value::is_namespace() const { return kind_ == Kind::dict && dict_->is_namespace; }

Value Value::get(std::string_view key) const {
  if (kind_ != Kind::dict) return undefined(std::string(key));
  const Value* p = dict_->find(key);
  return p ? *p : undefined(std::string(key));
}
void Value::set(std::string key, Value v) {
  if (kind_ == Kind::dict) dict_->set(std::move(key), std::move(v));
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::undefined:
    case Kind::none:
      return false;
    case Kind::boolean:
      return b_;
    case Kind::integer:
      return i_ != 0;
    case Kind::floating:
      return f_ != 0.0;
    case Kind::string:
      return !s_.empty();
    case Kind::list:
      return !list_->empty();
    case Kind::dict:
      return dict_->is_namespace || !dict_->items.empty();
    case Kind::function:
      return true;
  }
  return false;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}
Value* Dict::find(std::string_view key) {
  for (auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}
void Dict::set(std::string key, Value v) {
  if (Value* p = find(key))
    *p = std::move(v);
  else
    items.emplace_back(std::move(key), std::move(v));
}

Value CallArgs::arg(size_t i, std::string_view name) const {
  if (i < positional.size()) return positional[i];
  for (const auto& kv : keyword)
    if (kv.first == name) return kv.second;
  return Value::undefined(std::string(name));
}
bool CallArgs::has(size_t i, std::string_view name) const {
  if (i < positional.size()) return true;
  for (const auto& kv : keyword)
    if (kv.first == name) return true;
  return false;
}

namespace {
template <class J>
Value from_json_impl(const J& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(j.template get<uint64_t>()));
    case nlohmann::json::value_t::number_float:
      return Value(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List l;
      for (const auto& x : j) l.push_back(from_json_impl(x));
      return Value(std::move(l));
    }
    case nlohmann::json::value_t::object: {
      Value d = Value::dict();
      for (auto it = j.begin(); it != j.end(); ++it) d.set(it.key(), from_json_impl(it.value()));
      return d;
    }
    default:
      return Value::undefined();
  }
}
}  // namespace

Value from_json(const nlohmann::ordered_json& j) { return from_json_impl(j); }
Value from_json(const nlohmann::json& j) { return from_json_impl(j); }

// ================================================================================================
// Lexer
// ================================================================================================
namespace {

enum class Tok { text, var_begin, var_end, block_begin, block_end, name, string, integer, floating, op, eof };

struct Token {
  Tok type;
  std::string value;
  Pos pos;
};

class Lexer {
 public:
  Lexer(std::string_view src, const Template::Options& o) : opt_(o) {
    // jinja2 normalises newlines and drops one trailing newline unless keep_trailing_newline.
    src_.reserve(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      if (src[i] == '\r') {
        src_ += '\n';
        if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
      } else {
        src_ += src[i];
      }
    }
    if (!opt_.keep_trailing_newline && !src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    bool line_starting = true;
    while (i_ < src_.size()) {
      size_t start = std::string::npos;
      for (size_t k = i_; k + 1 < src_.size(); ++k)
        if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) {
          start = k;
          break;
        }
      if (start == std::string::npos) {
        add(Tok::text, src_.substr(i_), i_);
        i_ = src_.size();
        break;
      }
      const char kind = src_[start + 1];
      const char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
      std::string text = src_.substr(i_, start - i_);
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+' && opt_.lstrip_blocks && kind != '{') {
        const size_t l = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((l > 0 || line_starting) && l < text.size() &&
            std::all_of(text.begin() + static_cast<ptrdiff_t>(l), text.end(), [](char c) { return ascii_ws(c); }))
          text.resize(l);
      }
      if (!text.empty()) add(Tok::text, text, i_);
      i_ = start + 2;
      if (sign == '-' || sign == '+') ++i_;
      if (kind == '#') {
        const size_t e = src_.find("#}", i_);
        if (e == std::string::npos) error_at(pos_of(start), "unterminated comment");
        const bool strip = e > i_ && src_[e - 1] == '-';
        i_ = e + 2;
        line_starting = finish_tag(strip, src_[e - 1] == '+', true);
        continue;
      }
      add(kind == '{' ? Tok::var_begin : Tok::block_begin, "", start);
      line_starting = lex_tag(kind == '{' ? "}}" : "%}", kind == '%');
    }
    add(Tok::eof, "", src_.size());
    return std::move(toks_);
  }

 private:
  static bool ascii_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

  static std::string rstrip_ws(const std::string& s) { return py_strip(s, nullptr, false, true); }

  Pos pos_of(size_t off) const {
    Pos p;
    for (size_t k = 0; k < off && k < src_.size(); ++k) {
      if (src_[k] == '\n') {
        ++p.line;
        p.col = 1;
      } else {
        ++p.col;
      }
    }
    return p;
  }

  void add(Tok t, std::string v, size_t off) {
    // Positions are computed incrementally from the last token.
    for (; scan_ < off && scan_ < src_.size(); ++scan_) {
      if (src_[scan_] == '\n') {
        ++cur_.line;
        cur_.col = 1;
      } else {
        ++cur_.col;
      }
    }
    toks_.push_back({t, std::move(v), cur_});
  }

  // After a tag's closing delimiter: '-' strips following whitespace, trim_blocks drops one newline after
  // block tags and comments (not after '+'). Returns whether the consumed text ended a line.
  bool finish_tag(bool strip, bool plus, bool is_block) {
    const size_t before = i_;
    if (strip) {
      size_t k = i_;
      while (k < src_.size()) {
        size_t j = k;
        const uint32_t cp = next_cp(src_, j);
        if (!py_space(cp)) break;
        k = j;
      }
      i_ = k;
    } else if (is_block && opt_.trim_blocks && !plus && i_ < src_.size() && src_[i_] == '\n') {
      ++i_;
    }
    return i_ > before ? src_[i_ - 1] == '\n' : false;
  }

  bool lex_tag(const char* close, bool is_block) {
    while (true) {
      while (i_ < src_.size() && ascii_ws(src_[i_])) ++i_;
      if (i_ >= src_.size()) error_at(pos_of(i_), std::string("unexpected end of template, expected '") + close + "'");
      // Closing delimiter, with optional whitespace control.
      for (const char s : {'-', '+', '\0'}) {
        const std::string end = s ? std::string(1, s) + close : std::string(close);
        if (src_.compare(i_, end.size(), end) == 0) {
          add(is_block ? Tok::block_end : Tok::var_end, "", i_);
          i_ += end.size();
          return finish_tag(s == '-', s == '+', is_block);
        }
      }
      const size_t at = i_;
      const char c = src_[i_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = i_;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        add(Tok::name, src_.substr(i_, e - i_), at);
        i_ = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t e = i_;
        bool is_float = false;
        while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
          is_float = true;
          ++e;
          while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
        }
        if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
          size_t f = e + 1;
          if (f < src_.size() && (src_[f] == '+' || src_[f] == '-')) ++f;
          if (f < src_.size() && std::isdigit(static_cast<unsigned char>(src_[f]))) {
            is_float = true;
            e = f;
            while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
          }
        }
        std::string num;
        for (size_t k = i_; k < e; ++k)
          if (src_[k] != '_') num += src_[k];
        add(is_float ? Tok::floating : Tok::integer, num, at);
        i_ = e;
      } else if (c == '\'' || c == '"') {
        add(Tok::string, lex_string(c), at);
      } else {
        static const char* ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                    ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ".", ",", ":", "|"};
        bool found = false;
        for (const char* op : ops) {
          const size_t n = std::strlen(op);
          if (src_.compare(i_, n, op) == 0) {
            add(Tok::op, op, at);
            i_ += n;
            found = true;
            break;
          }
        }
        if (!found) error_at(pos_of(i_), std::string("unexpected character '") + c + "'");
      }
    }
  }

  // Python string literal body (jinja2 decodes with unicode-escape).
  std::string lex_string(char q) {
    const size_t start = i_;
    ++i_;
    std::string out;
    while (true) {
      if (i_ >= src_.size()) error_at(pos_of(start), "unterminated string literal");
      const char c = src_[i_];
      if (c == q) {
        ++i_;
        return out;
      }
      if (c != '\\') {
        out += c;
        ++i_;
        continue;
      }
      if (i_ + 1 >= src_.size()) error_at(pos_of(start), "unterminated string literal");
      const char e = src_[i_ + 1];
      i_ += 2;
      auto hex = [&](int n) {
        uint32_t v = 0;
        for (int k = 0; k < n; ++k) {
          if (i_ >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[i_])))
            error_at(pos_of(start), "bad escape in string literal");
          const char h = src_[i_++];
          v = v * 16 +
              static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : std::tolower(h) - 'a' + 10);
        }
        return v;
      };
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case '\n':
          break;  // line continuation
        case 'x':
          append_utf8(out, hex(2));
          break;
        case 'u':
          append_utf8(out, hex(4));
          break;
        case 'U':
          append_utf8(out, hex(8));
          break;
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i_ < src_.size() && src_[i_] >= '0' && src_[i_] <= '7'; ++k)
              v = v * 8 + static_cast<uint32_t>(src_[i_++] - '0');
            append_utf8(out, v);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
  }

  Template::Options opt_;
  std::string src_;
  size_t i_ = 0;
  std::vector<Token> toks_;
  size_t scan_ = 0;
  Pos cur_;
};

}  // namespace

// ================================================================================================
// AST
// ================================================================================================
namespace {

struct Context;

struct Expr {
  Pos pos;
  virtual ~Expr() = default;
  virtual Value eval(Context& ctx) const = 0;
};
using ExprP = std::unique_ptr<Expr>;

enum class Flow { normal, brk, cont };

struct Stmt {
  Pos pos;
  virtual ~Stmt() = default;
  virtual Flow exec(Context& ctx, std::string& out) const = 0;
};
using StmtP = std::unique_ptr<Stmt>;
using Body = std::vector<StmtP>;

Flow exec_body(const Body& body, Context& ctx, std::string& out) {
  for (const auto& s : body) {
    const Flow f = s->exec(ctx, out);
    if (f != Flow::normal) return f;
  }
  return Flow::normal;
}

// raise_exception(msg): carried up to the call site, which adds the template position.
struct RaisedError {
  std::string message;
};

struct Context {
  std::vector<std::unordered_map<std::string, Value>> scopes;  // [0] = globals + render variables
  std::optional<std::time_t> now;
  int depth = 0;

  Value lookup(const std::string& name) const {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return Value::undefined(name);
  }
  void assign(const std::string& name, Value v) { scopes.back()[name] = std::move(v); }
};

struct ScopeGuard {
  Context& ctx;
  explicit ScopeGuard(Context& c) : ctx(c) { ctx.scopes.emplace_back(); }
  ~ScopeGuard() { ctx.scopes.pop_back(); }
};

// ---------- value operations ----------

[[noreturn]] void type_error(Pos p, const std::string& what) { error_at(p, what); }

std::string kind_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return "undefined";
    case Value::Kind::none:
      return "none";
    case Value::Kind::boolean:
      return "bool";
    case Value::Kind::integer:
      return "int";
    case Value::Kind::floating:
      return "float";
    case Value::Kind::string:
      return "string";
    case Value::Kind::list:
      return "list";
    case Value::Kind::dict:
      return v.is_namespace() ? "namespace" : "dict";
    case Value::Kind::function:
      return "function";
  }
  return "?";
}

bool numeric(const Value& v) {
  return v.kind() == Value::Kind::integer || v.kind() == Value::Kind::floating || v.kind() == Value::Kind::boolean;
}
double num_d(const Value& v) { return v.kind() == Value::Kind::boolean ? (v.as_bool() ? 1.0 : 0.0) : v.as_double(); }
int64_t num_i(const Value& v) { return v.kind() == Value::Kind::boolean ? (v.as_bool() ? 1 : 0) : v.as_int(); }
bool is_intlike(const Value& v) { return v.kind() == Value::Kind::integer || v.kind() == Value::Kind::boolean; }

bool equal(const Value& a, const Value& b) {
  if (numeric(a) && numeric(b)) {
    if (is_intlike(a) && is_intlike(b)) return num_i(a) == num_i(b);
    return num_d(a) == num_d(b);
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::undefined:
    case Value::Kind::none:
      return true;
    case Value::Kind::string:
      return a.str() == b.str();
    case Value::Kind::list: {
      if (a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i)
        if (!equal(a.list()[i], b.list()[i])) return false;
      return true;
    }
    case Value::Kind::dict: {
      const auto& x = a.dict_ref().items;
      const auto& y = b.dict_ref();
      if (x.size() != y.items.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* o = y.find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    }
    case Value::Kind::function:
      return &a.func() == &b.func();
    default:
      return false;
  }
}

// <0, 0, >0; errors for unorderable types.
int compare(const Value& a, const Value& b, Pos p) {
  if (numeric(a) && numeric(b)) {
    if (is_intlike(a) && is_intlike(b)) return num_i(a) < num_i(b) ? -1 : num_i(a) > num_i(b) ? 1 : 0;
    const double x = num_d(a), y = num_d(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.str().compare(b.str()) < 0 ? -1 : a.str() == b.str() ? 0 : 1;
  if (a.is_list() && b.is_list()) {
    const auto &x = a.list(), &y = b.list();
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      const int c = compare(x[i], y[i], p);
      if (c) return c;
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  type_error(p, "cannot compare " + kind_name(a) + " with " + kind_name(b));
}

size_t py_len(const Value& v, Pos p) {
  switch (v.kind()) {
    case Value::Kind::string:
      return decode(v.str()).size();
    case Value::Kind::list:
      return v.list().size();
    case Value::Kind::dict:
      return v.dict_ref().items.size();
    case Value::Kind::undefined:
      return 0;
    default:
      type_error(p, "object of type " + kind_name(v) + " has no length");
  }
}

// Items of an iterable (for loops, filters): list items, dict keys, string characters.
List iterate(const Value& v, Pos p) {
  switch (v.kind()) {
    case Value::Kind::list:
      return v.list();
    case Value::Kind::dict: {
      List out;
      for (const auto& kv : v.dict_ref().items) out.emplace_back(kv.first);
      return out;
    }
    case Value::Kind::string: {
      List out;
      for (uint32_t cp : decode(v.str())) {
        std::string s;
        append_utf8(s, cp);
        out.emplace_back(std::move(s));
      }
      return out;
    }
    case Value::Kind::undefined:
      return {};
    default:
      type_error(p, "'" + kind_name(v) + "' object is not iterable");
  }
}

bool contains(const Value& container, const Value& item, Pos p) {
  switch (container.kind()) {
    case Value::Kind::string:
      if (!item.is_string()) type_error(p, "'in <string>' requires string as left operand, not " + kind_name(item));
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::list:
      for (const auto& x : container.list())
        if (equal(x, item)) return true;
      return false;
    case Value::Kind::dict:
      return item.is_string() && container.dict_ref().find(item.str()) != nullptr;
    case Value::Kind::undefined:
      return false;
    default:
      type_error(p, "argument of type '" + kind_name(container) + "' is not iterable");
  }
}

int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

void require_defined(const Value& v, Pos p) {
  if (v.is_undefined())
    error_at(p, v.str().empty() ? std::string("value is undefined") : "'" + v.str() + "' is undefined");
}

Value binary_arith(const std::string& op, const Value& a, const Value& b, Pos p) {
  if (op == "~") return Value(to_str(a) + to_str(b));
  require_defined(a, p);
  require_defined(b, p);
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(a.str() + b.str());
    if (a.is_list() && b.is_list()) {
      List l = a.list();
      l.insert(l.end(), b.list().begin(), b.list().end());
      return Value(std::move(l));
    }
  }
  if (op == "*") {
    const Value* seq = a.is_string() || a.is_list() ? &a : b.is_string() || b.is_list() ? &b : nullptr;
    const Value* n = seq == &a ? &b : &a;
    if (seq && is_intlike(*n)) {
      const int64_t k = std::max<int64_t>(0, num_i(*n));
      if (seq->is_string()) {
        std::string s;
        for (int64_t i = 0; i < k; ++i) s += seq->str();
        return Value(std::move(s));
      }
      List l;
      for (int64_t i = 0; i < k; ++i) l.insert(l.end(), seq->list().begin(), seq->list().end());
      return Value(std::move(l));
    }
  }
  if (!numeric(a) || !numeric(b))
    type_error(p, "unsupported operand type(s) for " + op + ": '" + kind_name(a) + "' and '" + kind_name(b) + "'");
  const bool ints = is_intlike(a) && is_intlike(b);
  if (op == "+") return ints ? Value(num_i(a) + num_i(b)) : Value(num_d(a) + num_d(b));
  if (op == "-") return ints ? Value(num_i(a) - num_i(b)) : Value(num_d(a) - num_d(b));
  if (op == "*") return ints ? Value(num_i(a) * num_i(b)) : Value(num_d(a) * num_d(b));
  if (op == "/") {
    if (num_d(b) == 0.0) type_error(p, "division by zero");
    return Value(num_d(a) / num_d(b));
  }
  if (op == "//") {
    if (num_d(b) == 0.0) type_error(p, "integer division or modulo by zero");
    return ints ? Value(floordiv(num_i(a), num_i(b))) : Value(std::floor(num_d(a) / num_d(b)));
  }
  if (op == "%") {
    if (num_d(b) == 0.0) type_error(p, "integer division or modulo by zero");
    if (ints) return Value(num_i(a) - floordiv(num_i(a), num_i(b)) * num_i(b));
    const double r = std::fmod(num_d(a), num_d(b));
    return Value(r != 0.0 && ((r < 0) != (num_d(b) < 0)) ? r + num_d(b) : r);
  }
  if (op == "**") {
    if (ints && num_i(b) >= 0) {
      int64_t r = 1;
      for (int64_t i = 0; i < num_i(b); ++i) r *= num_i(a);
      return Value(r);
    }
    return Value(std::pow(num_d(a), num_d(b)));
  }
  type_error(p, "unknown operator " + op);
}

// Python-style index normalisation; returns false when out of range.
bool norm_index(int64_t& i, size_t n) {
  if (i < 0) i += static_cast<int64_t>(n);
  return i >= 0 && static_cast<size_t>(i) < n;
}

Value subscript(const Value& obj, const Value& key, Pos p);
Value get_attr(const Value& obj, const std::string& name, Pos p);

// ---------- builtins: methods, filters, tests, globals ----------

Value make_method(const Value& self, const std::string& name, Pos p);

std::string py_title(const std::string& s) {
  std::string out;
  bool prev_alpha = false;
  for (char c : s) {
    const bool alpha = std::isalpha(static_cast<unsigned char>(c));
    out += alpha ? static_cast<char>(prev_alpha ? std::tolower(c) : std::toupper(c)) : c;
    prev_alpha = alpha;
  }
  return out;
}
std::string ascii_upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string ascii_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string py_capitalize(const std::string& s) {
  std::string out = ascii_lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

// Python str.split(sep=None, maxsplit=-1).
List py_split(const std::string& s, const Value& sep, int64_t maxsplit, Pos p) {
  List out;
  if (sep.is_undefined() || sep.is_none()) {
    const auto cps = decode(s);
    size_t i = 0;
    while (true) {
      while (i < cps.size() && py_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = cps.size();
        while (e > i && py_space(cps[e - 1])) --e;
        out.emplace_back(encode(cps, i, e));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !py_space(cps[j])) ++j;
      out.emplace_back(encode(cps, i, j));
      i = j;
    }
    return out;
  }
  if (!sep.is_string()) type_error(p, "split separator must be a string");
  const std::string& d = sep.str();
  if (d.empty()) type_error(p, "empty separator");
  size_t start = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) break;
    const size_t f = s.find(d, start);
    if (f == std::string::npos) break;
    out.emplace_back(s.substr(start, f - start));
    start = f + d.size();
  }
  out.emplace_back(s.substr(start));
  return out;
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between every character
    const auto cps = decode(s);
    int64_t n = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      if (i < cps.size()) append_utf8(out, cps[i]);
    }
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t f = s.find(from, start);
    if (f == std::string::npos) break;
    out.append(s, start, f - start);
    out += to;
    start = f + from.size();
    ++n;
  }
  out.append(s, start, std::string::npos);
  return out;
}

int64_t to_int_arg(const Value& v, int64_t dflt, Pos p) {
  if (v.is_undefined() || v.is_none()) return dflt;
  if (!is_intlike(v)) type_error(p, "expected an integer argument, got " + kind_name(v));
  return num_i(v);
}

Value make_method(const Value& self, const std::string& name, Pos p) {
  auto bind = [&](std::function<Value(const Value&, CallArgs&)> f) {
    Value s = self;
    return Value::function([s, f](CallArgs& a) { return f(s, a); }, name);
  };
  if (self.is_string()) {
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const bool l = name != "rstrip", r = name != "lstrip";
      return bind([l, r](const Value& s, CallArgs& a) {
        const Value c = a.arg(0, "chars");
        const std::string* chars = c.is_string() ? &c.str() : nullptr;
        return Value(py_strip(s.str(), chars, l, r));
      });
    }
    if (name == "startswith" || name == "endswith") {
      const bool start = name == "startswith";
      return bind([start, p](const Value& s, CallArgs& a) {
        const Value x = a.arg(0, "prefix");
        List cands = x.is_list() ? x.list() : List{x};
        for (const auto& c : cands) {
          if (!c.is_string()) type_error(p, "startswith/endswith argument must be a string");
          const std::string& t = c.str();
          if (t.size() <= s.str().size() && (start ? s.str().compare(0, t.size(), t) == 0
                                                   : s.str().compare(s.str().size() - t.size(), t.size(), t) == 0))
            return Value(true);
        }
        return Value(false);
      });
    }
    if (name == "split")
      return bind([p](const Value& s, CallArgs& a) {
        return Value(py_split(s.str(), a.arg(0, "sep"), to_int_arg(a.arg(1, "maxsplit"), -1, p), p));
      });
    if (name == "splitlines")
      return bind([](const Value& s, CallArgs&) {
        List out;
        const std::string& t = s.str();
        size_t start = 0;
        for (size_t i = 0; i < t.size(); ++i)
          if (t[i] == '\n') {
            out.emplace_back(t.substr(start, i - start));
            start = i + 1;
          }
        if (start < t.size()) out.emplace_back(t.substr(start));
        return Value(std::move(out));
      });
    if (name == "upper") return bind([](const Value& s, CallArgs&) { return Value(ascii_upper(s.str())); });
    if (name == "lower") return bind([](const Value& s, CallArgs&) { return Value(ascii_lower(s.str())); });
    if (name == "title") return bind([](const Value& s, CallArgs&) { return Value(py_title(s.str())); });
    if (name == "capitalize") return bind([](const Value& s, CallArgs&) { return Value(py_capitalize(s.str())); });
    if (name == "replace")
      return bind([p](const Value& s, CallArgs& a) {
        const Value from = a.arg(0, "old"), to = a.arg(1, "new");
        if (!from.is_string() || !to.is_string()) type_error(p, "replace() arguments must be strings");
        return Value(py_replace(s.str(), from.str(), to.str(), to_int_arg(a.arg(2, "count"), -1, p)));
      });
    if (name == "find" || name == "rfind" || name == "count")
      return bind([name, p](const Value& s, CallArgs& a) {
        const Value x = a.arg(0, "sub");
        if (!x.is_string()) type_error(p, name + "() argument must be a string");
        if (name == "count") {
          int64_t n = 0;
          if (x.str().empty()) return Value(static_cast<int64_t>(decode(s.str()).size() + 1));
          for (size_t f = s.str().find(x.str()); f != std::string::npos; f = s.str().find(x.str(), f + x.str().size()))
            ++n;
          return Value(n);
        }
        const size_t f = name == "find" ? s.str().find(x.str()) : s.str().rfind(x.str());
        if (f == std::string::npos) return Value(static_cast<int64_t>(-1));
        return Value(static_cast<int64_t>(decode(std::string_view(s.str()).substr(0, f)).size()));
      });
    if (name == "join")
      return bind([p](const Value& s, CallArgs& a) {
        std::string out;
        bool first = true;
        for (const auto& x : iterate(a.arg(0, "iterable"), p)) {
          if (!first) out += s.str();
          out += to_str(x);
          first = false;
        }
        return Value(std::move(out));
      });
    if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum")
      return bind([name](const Value& s, CallArgs&) {
        if (s.str().empty()) return Value(false);
        for (char c : s.str()) {
          const auto u = static_cast<unsigned char>(c);
          const bool ok = name == "isdigit"   ? std::isdigit(u)
                          : name == "isalpha" ? std::isalpha(u)
                          : name == "isspace" ? std::isspace(u)
                                              : std::isalnum(u);
          if (!ok) return Value(false);
        }
        return Value(true);
      });
    return Value::undefined(name);
  }
  if (self.is_dict() && !self.is_namespace()) {
    if (name == "get")
      return bind([](const Value& d, CallArgs& a) {
        const Value k = a.arg(0, "key");
        const Value* v = k.is_string() ? d.dict_ref().find(k.str()) : nullptr;
        if (v) return *v;
        return a.has(1, "default") ? a.arg(1, "default") : Value::none();
      });
    if (name == "items" || name == "keys" || name == "values")
      return bind([name](const Value& d, CallArgs&) {
        List out;
        for (const auto& [k, v] : d.dict_ref().items) {
          if (name == "items")
            out.push_back(Value::tuple(List{Value(k), v}));
          else if (name == "keys")
            out.emplace_back(k);
          else
            out.push_back(v);
        }
        return Value(std::move(out));
      });
  }
  return Value::undefined(name);
}

Value get_attr(const Value& obj, const std::string& name, Pos p) {
  if (obj.is_undefined())
    error_at(p, (obj.str().empty() ? std::string("value") : "'" + obj.str() + "'") + " is undefined (while reading ." +
                    name + ")");
  if (obj.is_namespace()) return obj.get(name);
  if (obj.is_dict()) {
    Value m = make_method(obj, name, p);
    if (!m.is_undefined()) return m;
    return obj.get(name);
  }
  return make_method(obj, name, p);
}

Value subscript(const Value& obj, const Value& key, Pos p) {
  if (obj.is_undefined())
    error_at(p,
             (obj.str().empty() ? std::string("value") : "'" + obj.str() + "'") + " is undefined (while subscripting)");
  if (obj.is_dict()) {
    if (key.is_string()) {
      const Value* v = obj.dict_ref().find(key.str());
      if (v) return *v;
      return get_attr(obj, key.str(), p);
    }
    return Value::undefined();
  }
  if ((obj.is_list() || obj.is_string()) && is_intlike(key)) {
    int64_t i = num_i(key);
    if (obj.is_list()) {
      if (!norm_index(i, obj.list().size())) return Value::undefined();
      return obj.list()[static_cast<size_t>(i)];
    }
    const auto cps = decode(obj.str());
    if (!norm_index(i, cps.size())) return Value::undefined();
    return Value(encode(cps, static_cast<size_t>(i), static_cast<size_t>(i) + 1));
  }
  if (key.is_string()) return get_attr(obj, key.str(), p);
  return Value::undefined();
}

Value slice(const Value& obj, const Value& a, const Value& b, const Value& c, Pos p) {
  require_defined(obj, p);
  auto opt = [&](const Value& v) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!is_intlike(v)) type_error(p, "slice indices must be integers or none");
    return num_i(v);
  };
  const int64_t step = opt(c).value_or(1);
  if (step == 0) type_error(p, "slice step cannot be zero");
  std::vector<uint32_t> cps;
  const bool is_str = obj.is_string();
  if (!is_str && !obj.is_list()) type_error(p, "cannot slice a " + kind_name(obj));
  if (is_str) cps = decode(obj.str());
  const int64_t n = is_str ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(obj.list().size());
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t start = clamp(opt(a), step > 0 ? 0 : n - 1), stop = clamp(opt(b), step > 0 ? n : -1);
  List items;
  std::vector<uint32_t> out_cps;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (is_str)
      out_cps.push_back(cps[static_cast<size_t>(i)]);
    else
      items.push_back(obj.list()[static_cast<size_t>(i)]);
  }
  return is_str ? Value(encode(out_cps)) : Value(std::move(items));
}

// ---------- tests ----------
using TestFn = std::function<bool(const Value&, CallArgs&, Pos)>;
using FilterFn = std::function<Value(const Value&, CallArgs&, Context&, Pos)>;

const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> t = [] {
    std::map<std::string, TestFn> m;
    m["defined"] = [](const Value& v, CallArgs&, Pos) { return !v.is_undefined(); };
    m["undefined"] = [](const Value& v, CallArgs&, Pos) { return v.is_undefined(); };
    m["none"] = [](const Value& v, CallArgs&, Pos) { return v.is_none(); };
    m["boolean"] = [](const Value& v, CallArgs&, Pos) { return v.kind() == Value::Kind::boolean; };
    m["true"] = [](const Value& v, CallArgs&, Pos) { return v.kind() == Value::Kind::boolean && v.as_bool(); };
    m["false"] = [](const Value& v, CallArgs&, Pos) { return v.kind() == Value::Kind::boolean && !v.as_bool(); };
    m["integer"] = [](const Value& v, CallArgs&, Pos) { return v.kind() == Value::Kind::integer; };
    m["float"] = [](const Value& v, CallArgs&, Pos) { return v.kind() == Value::Kind::floating; };
    m["number"] = [](const Value& v, CallArgs&, Pos) { return numeric(v); };
    m["string"] = [](const Value& v, CallArgs&, Pos) { return v.is_string(); };
    m["mapping"] = [](const Value& v, CallArgs&, Pos) { return v.is_dict(); };
    m["iterable"] = [](const Value& v, CallArgs&, Pos) {
      return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
    };
    m["sequence"] = [](const Value& v, CallArgs&, Pos) { return v.is_string() || v.is_list() || v.is_dict(); };
    m["callable"] = [](const Value& v, CallArgs&, Pos) { return v.kind() == Value::Kind::function; };
    m["sameas"] = [](const Value& v, CallArgs& a, Pos) {
      const Value o = a.arg(0, "other");
      if (v.kind() != o.kind()) return false;
      // Python identity: None/True/False are singletons; small ints and short strings are interned.
      if (v.is_none() || v.kind() == Value::Kind::boolean || v.kind() == Value::Kind::integer || v.is_string())
        return equal(v, o);
      return false;
    };
    auto cmp = [](std::function<bool(int)> ok) {
      return [ok](const Value& v, CallArgs& a, Pos p) { return ok(compare(v, a.arg(0, "other"), p)); };
    };
    m["eq"] = m["equalto"] = m["=="] = [](const Value& v, CallArgs& a, Pos) { return equal(v, a.arg(0, "other")); };
    m["ne"] = m["!="] = [](const Value& v, CallArgs& a, Pos) { return !equal(v, a.arg(0, "other")); };
    m["lt"] = m["lessthan"] = m["<"] = cmp([](int c) { return c < 0; });
    m["le"] = m["<="] = cmp([](int c) { return c <= 0; });
    m["gt"] = m["greaterthan"] = m[">"] = cmp([](int c) { return c > 0; });
    m["ge"] = m[">="] = cmp([](int c) { return c >= 0; });
    m["in"] = [](const Value& v, CallArgs& a, Pos p) { return contains(a.arg(0, "seq"), v, p); };
    m["odd"] = [](const Value& v, CallArgs&, Pos p) {
      if (!is_intlike(v)) type_error(p, "odd test needs an integer");
      return num_i(v) % 2 != 0;
    };
    m["even"] = [](const Value& v, CallArgs&, Pos p) {
      if (!is_intlike(v)) type_error(p, "even test needs an integer");
      return num_i(v) % 2 == 0;
    };
    m["divisibleby"] = [](const Value& v, CallArgs& a, Pos p) {
      const Value n = a.arg(0, "num");
      if (!is_intlike(v) || !is_intlike(n) || num_i(n) == 0) type_error(p, "divisibleby needs non-zero integers");
      return num_i(v) % num_i(n) == 0;
    };
    m["lower"] = [](const Value& v, CallArgs&, Pos) { return v.is_string() && ascii_lower(v.str()) == v.str(); };
    m["upper"] = [](const Value& v, CallArgs&, Pos) { return v.is_string() && ascii_upper(v.str()) == v.str(); };
    return m;
  }();
  return t;
}

bool run_test(const std::string& name, const Value& v, CallArgs& args, Pos p) {
  const auto& t = tests();
  const auto it = t.find(name);
  if (it == t.end()) error_at(p, "no test named '" + name + "'");
  return it->second(v, args, p);
}

Value call_function(const Value& f, CallArgs& args, Pos p);

// ---------- filters ----------
Value attr_path(const Value& v, const std::string& path, Pos p) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!part.empty() &&
        std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
      cur = subscript(cur, Value(static_cast<int64_t>(std::stoll(part))), p);
    else
      cur = cur.is_undefined() ? cur : subscript(cur, Value(part), p);
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

const std::map<std::string, FilterFn>& filters();

Value run_filter(const std::string& name, const Value& v, CallArgs& args, Context& ctx, Pos p) {
  const auto& f = filters();
  const auto it = f.find(name);
  if (it == f.end()) error_at(p, "no filter named '" + name + "'");
  return it->second(v, args, ctx, p);
}

// select/reject/selectattr/rejectattr.
Value select_impl(const Value& v, CallArgs& a, Pos p, bool attr, bool keep_if) {
  List out;
  size_t argi = 0;
  std::string attribute;
  if (attr) {
    const Value at = a.arg(0, "attribute");
    if (!at.is_string()) type_error(p, "selectattr/rejectattr need an attribute name");
    attribute = at.str();
    argi = 1;
  }
  std::string test;
  CallArgs targs;
  if (argi < a.positional.size()) {
    if (!a.positional[argi].is_string()) type_error(p, "test name must be a string");
    test = a.positional[argi].str();
    targs.positional.assign(a.positional.begin() + static_cast<ptrdiff_t>(argi) + 1, a.positional.end());
  }
  for (const auto& item : iterate(v, p)) {
    const Value x = attr ? attr_path(item, attribute, p) : item;
    const bool ok = test.empty() ? x.truthy() : run_test(test, x, targs, p);
    if (ok == keep_if) out.push_back(item);
  }
  return Value(std::move(out));
}

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> table = [] {
    std::map<std::string, FilterFn> m;
    m["trim"] = [](const Value& v, CallArgs& a, Context&, Pos) {
      const Value c = a.arg(0, "chars");
      const std::string* chars = c.is_string() ? &c.str() : nullptr;
      return Value(py_strip(to_str(v), chars, true, true));
    };
    m["length"] = m["count"] = [](const Value& v, CallArgs&, Context&, Pos p) {
      return Value(static_cast<int64_t>(py_len(v, p)));
    };
    m["upper"] = [](const Value& v, CallArgs&, Context&, Pos) { return Value(ascii_upper(to_str(v))); };
    m["lower"] = [](const Value& v, CallArgs&, Context&, Pos) { return Value(ascii_lower(to_str(v))); };
    m["capitalize"] = [](const Value& v, CallArgs&, Context&, Pos) { return Value(py_capitalize(to_str(v))); };
    m["title"] = [](const Value& v, CallArgs&, Context&, Pos) { return Value(py_title(to_str(v))); };
    m["string"] = [](const Value& v, CallArgs&, Context&, Pos) { return Value(to_str(v)); };
    m["safe"] = m["e"] = m["escape"] = [](const Value& v, CallArgs&, Context&, Pos) { return v; };
    m["tojson"] = [](const Value& v, CallArgs& a, Context&, Pos p) {
      const Value ind = a.arg(1, "indent");
      const int indent = ind.is_undefined() || ind.is_none() ? -1 : static_cast<int>(to_int_arg(ind, -1, p));
      const Value sk = a.arg(3, "sort_keys");
      const Value seps = a.arg(2, "separators");
      if (seps.is_list()) {
        if (seps.list().size() != 2 || !seps.list()[0].is_string() || !seps.list()[1].is_string())
          type_error(p, "tojson separators must be an (item_separator, key_separator) pair of strings");
        return Value(to_json(v, indent, sk.truthy(), seps.list()[0].str(), seps.list()[1].str()));
      }
      return Value(to_json(v, indent, sk.truthy()));
    };
    m["default"] = m["d"] = [](const Value& v, CallArgs& a, Context&, Pos) {
      const bool boolean = a.arg(1, "boolean").truthy();
      if (v.is_undefined() || (boolean && !v.truthy()))
        return a.has(0, "default_value") ? a.arg(0, "default_value") : Value("");
      return v;
    };
    m["first"] = [](const Value& v, CallArgs&, Context&, Pos p) {
      const List l = iterate(v, p);
      return l.empty() ? Value::undefined() : l.front();
    };
    m["last"] = [](const Value& v, CallArgs&, Context&, Pos p) {
      const List l = iterate(v, p);
      return l.empty() ? Value::undefined() : l.back();
    };
    m["join"] = [](const Value& v, CallArgs& a, Context&, Pos p) {
      const Value sep = a.arg(0, "d");
      const Value attr = a.arg(1, "attribute");
      std::string out;
      bool first = true;
      for (const auto& x : iterate(v, p)) {
        if (!first) out += sep.is_undefined() ? "" : to_str(sep);
        out += to_str(attr.is_string() ? attr_path(x, attr.str(), p) : x);
        first = false;
      }
      return Value(std::move(out));
    };
    m["replace"] = [](const Value& v, CallArgs& a, Context&, Pos p) {
      return Value(py_replace(to_str(v), to_str(a.arg(0, "old")), to_str(a.arg(1, "new")),
                              to_int_arg(a.arg(2, "count"), -1, p)));
    };
    m["int"] = [](const Value& v, CallArgs& a, Context&, Pos) {
      const Value dflt = a.has(0, "default") ? a.arg(0, "default") : Value(static_cast<int64_t>(0));
      if (is_intlike(v)) return Value(num_i(v));
      if (v.kind() == Value::Kind::floating) return Value(static_cast<int64_t>(v.as_double()));
      if (v.is_string()) {
        const std::string t = py_strip(v.str(), nullptr, true, true);
        char* end = nullptr;
        const long long x = std::strtoll(t.c_str(), &end, 10);
        if (!t.empty() && end && *end == '\0') return Value(static_cast<int64_t>(x));
        const double d = std::strtod(t.c_str(), &end);
        if (!t.empty() && end && *end == '\0') return Value(static_cast<int64_t>(d));
      }
      return dflt;
    };
    m["float"] = [](const Value& v, CallArgs& a, Context&, Pos) {
      if (numeric(v)) return Value(num_d(v));
      if (v.is_string()) {
        const std::string t = py_strip(v.str(), nullptr, true, true);
        char* end = nullptr;
        const double d = std::strtod(t.c_str(), &end);
        if (!t.empty() && end && *end == '\0') return Value(d);
      }
      return a.has(0, "default") ? a.arg(0, "default") : Value(0.0);
    };
    m["abs"] = [](const Value& v, CallArgs&, Context&, Pos p) {
      if (is_intlike(v)) return Value(num_i(v) < 0 ? -num_i(v) : num_i(v));
      if (numeric(v)) return Value(std::fabs(num_d(v)));
      type_error(p, "abs of a " + kind_name(v));
    };
    m["round"] = [](const Value& v, CallArgs& a, Context&, Pos p) {
      if (!numeric(v)) type_error(p, "round of a " + kind_name(v));
      const int64_t prec = to_int_arg(a.arg(0, "precision"), 0, p);
      const Value method = a.arg(1, "method");
      const double f = std::pow(10.0, static_cast<double>(prec));
      const double x = num_d(v) * f;
      const std::string mth = method.is_string() ? method.str() : "common";
      const double r = mth == "ceil" ? std::ceil(x) : mth == "floor" ? std::floor(x) : std::round(x);
      return Value(r / f);
    };
    m["items"] = [](const Value& v, CallArgs&, Context&, Pos p) {
      if (v.is_undefined()) return Value(List{});
      if (!v.is_dict()) type_error(p, "items filter needs a mapping, got " + kind_name(v));
      List out;
      for (const auto& [k, x] : v.dict_ref().items) out.push_back(Value::tuple(List{Value(k), x}));
      return Value(std::move(out));
    };
    m["dictsort"] = [](const Value& v, CallArgs&, Context&, Pos p) {
      if (!v.is_dict()) type_error(p, "dictsort needs a mapping");
      auto items = v.dict_ref().items;
      std::stable_sort(items.begin(), items.end(),
                       [](const auto& a, const auto& b) { return ascii_lower(a.first) < ascii_lower(b.first); });
      List out;
      for (const auto& [k, x] : items) out.push_back(Value::tuple(List{Value(k), x}));
      return Value(std::move(out));
    };
    m["list"] = [](const Value& v, CallArgs&, Context&, Pos p) { return Value(iterate(v, p)); };
    m["reverse"] = [](const Value& v, CallArgs&, Context&, Pos p) {
      if (v.is_string()) {
        auto cps = decode(v.str());
        std::reverse(cps.begin(), cps.end());
        return Value(encode(cps));
      }
      List l = iterate(v, p);
      std::reverse(l.begin(), l.end());
      return Value(std::move(l));
    };
    m["unique"] = [](const Value& v, CallArgs&, Context&, Pos p) {
      List out;
      for (const auto& x : iterate(v, p))
        if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equal(x, y); })) out.push_back(x);
      return Value(std::move(out));
    };
    m["sort"] = [](const Value& v, CallArgs& a, Context&, Pos p) {
      List l = iterate(v, p);
      const bool rev = a.arg(0, "reverse").truthy();
      const Value attr = a.arg(2, "attribute");
      std::stable_sort(l.begin(), l.end(), [&](const Value& x, const Value& y) {
        const Value xa = attr.is_string() ? attr_path(x, attr.str(), p) : x;
        const Value ya = attr.is_string() ? attr_path(y, attr.str(), p) : y;
        return rev ? compare(ya, xa, p) < 0 : compare(xa, ya, p) < 0;
      });
      return Value(std::move(l));
    };
    m["min"] = [](const Value& v, CallArgs&, Context&, Pos p) {
      const List l = iterate(v, p);
      if (l.empty()) return Value::undefined();
      return *std::min_element(l.begin(), l.end(),
                               [&](const Value& x, const Value& y) { return compare(x, y, p) < 0; });
    };
    m["max"] = [](const Value& v, CallArgs&, Context&, Pos p) {
      const List l = iterate(v, p);
      if (l.empty()) return Value::undefined();
      return *std::max_element(l.begin(), l.end(),
                               [&](const Value& x, const Value& y) { return compare(x, y, p) < 0; });
    };
    m["sum"] = [](const Value& v, CallArgs& a, Context&, Pos p) {
      Value acc = a.has(1, "start") ? a.arg(1, "start") : Value(static_cast<int64_t>(0));
      const Value attr = a.arg(0, "attribute");
      for (const auto& x : iterate(v, p))
        acc = binary_arith("+", acc, attr.is_string() ? attr_path(x, attr.str(), p) : x, p);
      return acc;
    };
    m["select"] = [](const Value& v, CallArgs& a, Context&, Pos p) { return select_impl(v, a, p, false, true); };
    m["reject"] = [](const Value& v, CallArgs& a, Context&, Pos p) { return select_impl(v, a, p, false, false); };
    m["selectattr"] = [](const Value& v, CallArgs& a, Context&, Pos p) { return select_impl(v, a, p, true, true); };
    m["rejectattr"] = [](const Value& v, CallArgs& a, Context&, Pos p) { return select_impl(v, a, p, true, false); };
    m["map"] = [](const Value& v, CallArgs& a, Context& ctx, Pos p) {
      List out;
      const Value attr = a.arg(99, "attribute");
      if (attr.is_string()) {
        const Value dflt = a.arg(99, "default");
        for (const auto& x : iterate(v, p)) {
          Value y = attr_path(x, attr.str(), p);
          out.push_back(y.is_undefined() && !dflt.is_undefined() ? dflt : y);
        }
        return Value(std::move(out));
      }
      if (a.positional.empty() || !a.positional[0].is_string()) type_error(p, "map needs a filter name or attribute=");
      const std::string fname = a.positional[0].str();
      CallArgs fargs;
      fargs.positional.assign(a.positional.begin() + 1, a.positional.end());
      for (const auto& x : iterate(v, p)) out.push_back(run_filter(fname, x, fargs, ctx, p));
      return Value(std::move(out));
    };
    m["indent"] = [](const Value& v, CallArgs& a, Context&, Pos p) {
      const Value w = a.arg(0, "width");
      const std::string pad = w.is_string() ? w.str() : std::string(static_cast<size_t>(to_int_arg(w, 4, p)), ' ');
      const bool first = a.arg(1, "first").truthy(), blank = a.arg(2, "blank").truthy();
      const std::string s = to_str(v);
      std::string out;
      size_t start = 0;
      bool is_first = true;
      while (start <= s.size()) {
        const size_t nl = s.find('\n', start);
        const std::string line = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
        if ((!is_first || first) && (blank || !py_strip(line, nullptr, true, true).empty())) out += pad;
        out += line;
        if (nl == std::string::npos) break;
        out += '\n';
        start = nl + 1;
        is_first = false;
      }
      return Value(std::move(out));
    };
    m["wordcount"] = [](const Value& v, CallArgs&, Context&, Pos p) {
      return Value(static_cast<int64_t>(py_split(to_str(v), Value::none(), -1, p).size()));
    };
    m["batch"] = [](const Value& v, CallArgs& a, Context&, Pos p) {
      const int64_t n = to_int_arg(a.arg(0, "linecount"), 1, p);
      if (n <= 0) type_error(p, "batch size must be positive");
      List out, cur;
      for (const auto& x : iterate(v, p)) {
        cur.push_back(x);
        if (static_cast<int64_t>(cur.size()) == n) {
          out.emplace_back(std::move(cur));
          cur.clear();
        }
      }
      if (!cur.empty()) out.emplace_back(std::move(cur));
      return Value(std::move(out));
    };
    return m;
  }();
  return table;
}

// ---------- expression nodes ----------
struct LiteralE : Expr {
  Value v;
  Value eval(Context&) const override { return v; }
};
struct NameE : Expr {
  std::string name;
  Value eval(Context& ctx) const override { return ctx.lookup(name); }
};
struct ListE : Expr {
  std::vector<ExprP> items;
  bool tuple = false;
  Value eval(Context& ctx) const override {
    List l;
    for (const auto& e : items) l.push_back(e->eval(ctx));
    return tuple ? Value::tuple(std::move(l)) : Value(std::move(l));
  }
};
struct DictE : Expr {
  std::vector<std::pair<ExprP, ExprP>> items;
  Value eval(Context& ctx) const override {
    Value d = Value::dict();
    for (const auto& [k, v] : items) {
      const Value key = k->eval(ctx);
      d.set(key.is_string() ? key.str() : to_str(key), v->eval(ctx));
    }
    return d;
  }
};
struct AttrE : Expr {
  ExprP obj;
  std::string name;
  Value eval(Context& ctx) const override { return get_attr(obj->eval(ctx), name, pos); }
};
struct ItemE : Expr {
  ExprP obj, key;
  Value eval(Context& ctx) const override { return subscript(obj->eval(ctx), key->eval(ctx), pos); }
};
struct SliceE : Expr {
  ExprP obj, a, b, c;
  Value eval(Context& ctx) const override {
    auto ev = [&](const ExprP& e) { return e ? e->eval(ctx) : Value::none(); };
    return slice(obj->eval(ctx), ev(a), ev(b), ev(c), pos);
  }
};
struct ArgsE {
  std::vector<ExprP> positional;
  std::vector<std::pair<std::string, ExprP>> keyword;
  CallArgs eval(Context& ctx) const {
    CallArgs a;
    for (const auto& e : positional) a.positional.push_back(e->eval(ctx));
    for (const auto& [k, e] : keyword) a.keyword.emplace_back(k, e->eval(ctx));
    return a;
  }
};
struct CallE : Expr {
  ExprP callee;
  ArgsE args;
  Value eval(Context& ctx) const override {
    const Value f = callee->eval(ctx);
    CallArgs a = args.eval(ctx);
    return call_function(f, a, pos);
  }
};
struct FilterE : Expr {
  ExprP base;
  std::string name;
  ArgsE args;
  Value eval(Context& ctx) const override {
    const Value v = base->eval(ctx);
    CallArgs a = args.eval(ctx);
    return run_filter(name, v, a, ctx, pos);
  }
};
struct TestE : Expr {
  ExprP base;
  std::string name;
  ArgsE args;
  bool negated = false;
  Value eval(Context& ctx) const override {
    const Value v = base->eval(ctx);
    CallArgs a = args.eval(ctx);
    return Value(run_test(name, v, a, pos) != negated);
  }
};
struct NotE : Expr {
  ExprP e;
  Value eval(Context& ctx) const override { return Value(!e->eval(ctx).truthy()); }
};
struct NegE : Expr {
  ExprP e;
  bool negate = true;
  Value eval(Context& ctx) const override {
    const Value v = e->eval(ctx);
    if (!numeric(v))
      type_error(pos, "bad operand type for unary " + std::string(negate ? "-" : "+") + ": " + kind_name(v));
    if (!negate) return v;
    return is_intlike(v) ? Value(-num_i(v)) : Value(-num_d(v));
  }
};
struct BinE : Expr {
  std::string op;
  ExprP l, r;
  Value eval(Context& ctx) const override { return binary_arith(op, l->eval(ctx), r->eval(ctx), pos); }
};
struct AndOrE : Expr {
  bool is_and = true;
  ExprP l, r;
  Value eval(Context& ctx) const override {
    Value a = l->eval(ctx);
    if (is_and ? !a.truthy() : a.truthy()) return a;
    return r->eval(ctx);
  }
};
struct CompareE : Expr {
  ExprP first;
  std::vector<std::pair<std::string, ExprP>> rest;
  Value eval(Context& ctx) const override {
    Value a = first->eval(ctx);
    for (const auto& [op, e] : rest) {
      Value b = e->eval(ctx);
      bool ok;
      if (op == "==")
        ok = equal(a, b);
      else if (op == "!=")
        ok = !equal(a, b);
      else if (op == "in")
        ok = contains(b, a, pos);
      else if (op == "not in")
        ok = !contains(b, a, pos);
      else {
        const int c = compare(a, b, pos);
        ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
      }
      if (!ok) return Value(false);
      a = std::move(b);
    }
    return Value(true);
  }
};
struct CondE : Expr {
  ExprP cond, then, otherwise;
  Value eval(Context& ctx) const override {
    if (cond->eval(ctx).truthy()) return then->eval(ctx);
    return otherwise ? otherwise->eval(ctx) : Value::undefined();
  }
};

// ---------- statements ----------
struct TextS : Stmt {
  std::string text;
  Flow exec(Context&, std::string& out) const override {
    out += text;
    return Flow::normal;
  }
};
struct OutS : Stmt {
  ExprP e;
  Flow exec(Context& ctx, std::string& out) const override {
    out += to_str(e->eval(ctx));
    return Flow::normal;
  }
};
struct IfS : Stmt {
  std::vector<std::pair<ExprP, Body>> branches;
  Body otherwise;
  Flow exec(Context& ctx, std::string& out) const override {
    for (const auto& [c, b] : branches)
      if (c->eval(ctx).truthy()) return exec_body(b, ctx, out);
    return exec_body(otherwise, ctx, out);
  }
};

void assign_targets(Context& ctx, const std::vector<std::string>& targets, const Value& v, Pos p) {
  if (targets.size() == 1) {
    ctx.assign(targets[0], v);
    return;
  }
  const List items = iterate(v, p);
  if (items.size() != targets.size())
    type_error(p, "cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(targets.size()) +
                      " names");
  for (size_t i = 0; i < targets.size(); ++i) ctx.assign(targets[i], items[i]);
}

struct ForS : Stmt {
  std::vector<std::string> targets;
  ExprP iter, filter;
  Body body, otherwise;
  Flow exec(Context& ctx, std::string& out) const override {
    const Value seq = iter->eval(ctx);
    if (seq.is_none()) type_error(pos, "'NoneType' object is not iterable");
    List items = iterate(seq, pos);
    ScopeGuard scope(ctx);
    if (filter) {
      List kept;
      for (const auto& it : items) {
        assign_targets(ctx, targets, it, pos);
        if (filter->eval(ctx).truthy()) kept.push_back(it);
      }
      items = std::move(kept);
    }
    const Value outer_loop = ctx.lookup("loop");
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      Value loop = Value::dict();
      loop.set("index0", Value(i));
      loop.set("index", Value(i + 1));
      loop.set("revindex", Value(n - i));
      loop.set("revindex0", Value(n - i - 1));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i == n - 1));
      loop.set("length", Value(n));
      loop.set("depth", Value(static_cast<int64_t>(1)));
      loop.set("depth0", Value(static_cast<int64_t>(0)));
      loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("previtem"));
      loop.set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("nextitem"));
      const Pos p = pos;
      loop.set("cycle", Value::function(
                            [i, p](CallArgs& a) {
                              if (a.positional.empty()) type_error(p, "loop.cycle needs at least one argument");
                              return a.positional[static_cast<size_t>(i) % a.positional.size()];
                            },
                            "cycle"));
      ctx.assign("loop", loop);
      assign_targets(ctx, targets, items[static_cast<size_t>(i)], pos);
      const Flow f = exec_body(body, ctx, out);
      if (f == Flow::brk) break;
    }
    if (n == 0) {
      ctx.assign("loop", outer_loop);
      return exec_body(otherwise, ctx, out);
    }
    return Flow::normal;
  }
};

struct SetS : Stmt {
  std::vector<std::string> targets;  // names, or {namespace, attribute} when ns_attr
  bool ns_attr = false;
  ExprP value;
  Flow exec(Context& ctx, std::string&) const override {
    Value v = value->eval(ctx);
    if (ns_attr) {
      Value ns = ctx.lookup(targets[0]);
      if (!ns.is_namespace()) type_error(pos, "cannot assign attribute on non-namespace object '" + targets[0] + "'");
      ns.set(targets[1], std::move(v));  // namespaces are shared: this updates every reference
    } else {
      assign_targets(ctx, targets, v, pos);
    }
    return Flow::normal;
  }
};
struct SetBlockS : Stmt {
  std::string name;
  Body body;
  Flow exec(Context& ctx, std::string&) const override {
    std::string captured;
    exec_body(body, ctx, captured);
    ctx.assign(name, Value(std::move(captured)));
    return Flow::normal;
  }
};
struct FilterBlockS : Stmt {
  std::vector<std::pair<std::string, ArgsE>> chain;
  Body body;
  Flow exec(Context& ctx, std::string& out) const override {
    std::string captured;
    exec_body(body, ctx, captured);
    Value v(std::move(captured));
    for (const auto& [name, args] : chain) {
      CallArgs a = args.eval(ctx);
      v = run_filter(name, v, a, ctx, pos);
    }
    out += to_str(v);
    return Flow::normal;
  }
};
struct FlowS : Stmt {
  Flow flow;
  Flow exec(Context&, std::string&) const override { return flow; }
};
struct BlockS : Stmt {  // {% generation %}: renders its body
  Body body;
  Flow exec(Context& ctx, std::string& out) const override { return exec_body(body, ctx, out); }
};
struct MacroS : Stmt {
  std::string name;
  std::vector<std::pair<std::string, ExprP>> params;
  Body body;
  Flow exec(Context& ctx, std::string&) const override {
    Context* c = &ctx;
    const MacroS* self = this;
    ctx.assign(name, Value::function(
                         [c, self](CallArgs& a) {
                           if (a.positional.size() > self->params.size())
                             type_error(self->pos, "macro '" + self->name + "' takes " +
                                                       std::to_string(self->params.size()) + " arguments");
                           if (++c->depth > 200) type_error(self->pos, "macro recursion too deep");
                           ScopeGuard scope(*c);
                           for (size_t i = 0; i < self->params.size(); ++i) {
                             const auto& [pname, dflt] = self->params[i];
                             Value v = a.arg(i, pname);
                             if (v.is_undefined() && !a.has(i, pname) && dflt) v = dflt->eval(*c);
                             c->assign(pname, v);
                           }
                           std::string out;
                           exec_body(self->body, *c, out);
                           --c->depth;
                           return Value(std::move(out));
                         },
                         name));
    return Flow::normal;
  }
};

Value call_function(const Value& f, CallArgs& args, Pos p) {
  if (f.is_undefined())
    error_at(p,
             (f.str().empty() ? std::string("value") : "'" + f.str() + "'") + " is undefined (called as a function)");
  if (f.kind() != Value::Kind::function) type_error(p, "'" + kind_name(f) + "' object is not callable");
  try {
    return f.func()(args);
  } catch (const RaisedError& e) {
    fail(Status::invalid_argument, "chat template raised an exception: " + e.message + " (line " +
                                       std::to_string(p.line) + ", column " + std::to_string(p.col) + ")");
  }
}

// ---------- parser ----------
class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse_template() {
    std::string end;
    Body b = parse_body({}, end);
    return b;
  }

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool is_op(const char* op) const { return cur().type == Tok::op && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == Tok::name && cur().value == n; }
  Token next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::text:
        return "template text";
      case Tok::var_begin:
        return "'{{'";
      case Tok::var_end:
        return "'}}'";
      case Tok::block_begin:
        return "'{%'";
      case Tok::block_end:
        return "'%}'";
      case Tok::name:
        return "'" + t.value + "'";
      case Tok::string:
        return "string literal";
      case Tok::integer:
      case Tok::floating:
        return "number " + t.value;
      case Tok::op:
        return "'" + t.value + "'";
      case Tok::eof:
        return "end of template";
    }
    return "?";
  }
  [[noreturn]] void unexpected(const std::string& expected) const {
    error_at(cur().pos, "expected " + expected + ", got " + describe(cur()));
  }
  void expect_op(const char* op) {
    if (!is_op(op)) unexpected(std::string("'") + op + "'");
    next();
  }
  void expect_block_end() {
    if (cur().type != Tok::block_end) unexpected("'%}'");
    next();
  }
  std::string expect_name() {
    if (cur().type != Tok::name) unexpected("a name");
    return next().value;
  }

  template <class T>
  std::unique_ptr<T> node(Pos p) {
    auto n = std::make_unique<T>();
    n->pos = p;
    return n;
  }

  // Parses statements until a block tag whose keyword is in `stops` (consumed: '{%' and the keyword; the
  // caller parses the rest of that tag). `end` receives the keyword ("" at end of template).
  Body parse_body(const std::vector<std::string>& stops, std::string& end) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::eof) {
        if (!stops.empty()) {
          std::string list;
          for (const auto& s : stops) list += (list.empty() ? "'" : " or '") + s + "'";
          error_at(t.pos, "unexpected end of template, expected " + list);
        }
        end.clear();
        return body;
      }
      if (t.type == Tok::text) {
        auto n = node<TextS>(t.pos);
        n->text = t.value;
        body.push_back(std::move(n));
        next();
        continue;
      }
      if (t.type == Tok::var_begin) {
        next();
        auto n = node<OutS>(t.pos);
        n->e = parse_tuple_expr();
        if (cur().type != Tok::var_end) unexpected("'}}'");
        next();
        body.push_back(std::move(n));
        continue;
      }
      if (t.type == Tok::block_begin) {
        next();
        if (cur().type != Tok::name) unexpected("a statement name");
        const std::string kw = cur().value;
        if (std::find(stops.begin(), stops.end(), kw) != stops.end()) {
          next();
          end = kw;
          return body;
        }
        if (kw.rfind("end", 0) == 0 || kw == "elif" || kw == "else") {
          std::string list;
          for (const auto& s : stops) list += (list.empty() ? "'" : " or '") + s + "'";
          error_at(cur().pos, "unexpected '" + kw + "'" + (list.empty() ? std::string() : ", expected " + list));
        }
        body.push_back(parse_statement());
        continue;
      }
      unexpected("template text, '{{' or '{%'");
    }
  }

  StmtP parse_statement() {
    const Token kw = next();
    const std::string& k = kw.value;
    if (k == "if") {
      auto n = node<IfS>(kw.pos);
      ExprP cond = parse_expression();
      expect_block_end();
      while (true) {
        std::string end;
        Body b = parse_body({"elif", "else", "endif"}, end);
        n->branches.emplace_back(std::move(cond), std::move(b));
        if (end == "elif") {
          cond = parse_expression();
          expect_block_end();
          continue;
        }
        if (end == "else") {
          expect_block_end();
          n->otherwise = parse_body({"endif"}, end);
        }
        expect_block_end();
        return n;
      }
    }
    if (k == "for") {
      auto n = node<ForS>(kw.pos);
      const bool paren = is_op("(");
      if (paren) next();
      n->targets.push_back(expect_name());
      while (is_op(",")) {
        next();
        if (paren && is_op(")")) break;
        n->targets.push_back(expect_name());
      }
      if (paren) expect_op(")");
      if (!is_name("in")) unexpected("'in'");
      next();
      n->iter = parse_tuple_expr(false);
      if (is_name("if")) {
        next();
        n->filter = parse_expression();
      }
      if (is_name("recursive")) error_at(cur().pos, "recursive loops are not supported");
      expect_block_end();
      std::string end;
      n->body = parse_body({"else", "endfor"}, end);
      if (end == "else") {
        expect_block_end();
        n->otherwise = parse_body({"endfor"}, end);
      }
      expect_block_end();
      return n;
    }
    if (k == "set") {
      const Pos p = kw.pos;
      std::vector<std::string> targets{expect_name()};
      bool ns_attr = false;
      if (is_op(".")) {
        next();
        targets.push_back(expect_name());
        ns_attr = true;
      } else {
        while (is_op(",")) {
          next();
          targets.push_back(expect_name());
        }
      }
      if (is_op("=")) {
        next();
        auto n = node<SetS>(p);
        n->targets = std::move(targets);
        n->ns_attr = ns_attr;
        n->value = parse_tuple_expr();
        expect_block_end();
        return n;
      }
      if (ns_attr || targets.size() != 1) unexpected("'='");
      expect_block_end();
      auto n = node<SetBlockS>(p);
      n->name = targets[0];
      std::string end;
      n->body = parse_body({"endset"}, end);
      expect_block_end();
      return n;
    }
    if (k == "macro") {
      auto n = node<MacroS>(kw.pos);
      n->name = expect_name();
      expect_op("(");
      while (!is_op(")")) {
        std::string pname = expect_name();
        ExprP dflt;
        if (is_op("=")) {
          next();
          dflt = parse_expression();
        }
        n->params.emplace_back(std::move(pname), std::move(dflt));
        if (!is_op(")")) expect_op(",");
      }
      next();
      expect_block_end();
      std::string end;
      n->body = parse_body({"endmacro"}, end);
      if (cur().type == Tok::name) next();  // {% endmacro name %}
      expect_block_end();
      return n;
    }
    if (k == "break" || k == "continue") {
      auto n = node<FlowS>(kw.pos);
      n->flow = k == "break" ? Flow::brk : Flow::cont;
      expect_block_end();
      return n;
    }
    if (k == "generation") {
      auto n = node<BlockS>(kw.pos);
      expect_block_end();
      std::string end;
      n->body = parse_body({"endgeneration"}, end);
      expect_block_end();
      return n;
    }
    if (k == "filter") {
      auto n = node<FilterBlockS>(kw.pos);
      while (true) {
        std::string name = expect_name();
        ArgsE args;
        if (is_op("(")) args = parse_call_args();
        n->chain.emplace_back(std::move(name), std::move(args));
        if (!is_op("|")) break;
        next();
      }
      expect_block_end();
      std::string end;
      n->body = parse_body({"endfilter"}, end);
      expect_block_end();
      return n;
    }
    error_at(kw.pos, "unknown or unsupported tag '" + k + "'");
  }

  // expression [, expression ...] -> tuple (list) when there is a comma.
  ExprP parse_tuple_expr(bool with_condexpr = true) {
    const Pos p = cur().pos;
    ExprP first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    auto l = node<ListE>(p);
    l->tuple = true;
    l->items.push_back(std::move(first));
    while (is_op(",")) {
      next();
      if (cur().type == Tok::block_end || cur().type == Tok::var_end || is_op(")")) break;
      l->items.push_back(parse_expression(with_condexpr));
    }
    return l;
  }

  ExprP parse_expression(bool with_condexpr = true) {
    const Pos p = cur().pos;
    ExprP e = parse_or();
    while (with_condexpr && is_name("if")) {
      next();
      auto c = node<CondE>(p);
      c->then = std::move(e);
      c->cond = parse_or();
      if (is_name("else")) {
        next();
        c->otherwise = parse_expression();
      }
      e = std::move(c);
    }
    return e;
  }
  ExprP parse_or() {
    ExprP l = parse_and();
    while (is_name("or")) {
      const Pos p = cur().pos;
      next();
      auto n = node<AndOrE>(p);
      n->is_and = false;
      n->l = std::move(l);
      n->r = parse_and();
      l = std::move(n);
    }
    return l;
  }
  ExprP parse_and() {
    ExprP l = parse_not();
    while (is_name("and")) {
      const Pos p = cur().pos;
      next();
      auto n = node<AndOrE>(p);
      n->l = std::move(l);
      n->r = parse_not();
      l = std::move(n);
    }
    return l;
  }
  ExprP parse_not() {
    if (is_name("not")) {
      const Pos p = cur().pos;
      next();
      auto n = node<NotE>(p);
      n->e = parse_not();
      return n;
    }
    return parse_compare();
  }
  ExprP parse_compare() {
    const Pos p = cur().pos;
    ExprP first = parse_math1();
    std::unique_ptr<CompareE> cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::op && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                    cur().value == ">" || cur().value == "<=" || cur().value == ">=")) {
        op = next().value;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && peek().type == Tok::name && peek().value == "in") {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = node<CompareE>(p);
        cmp->first = std::move(first);
      }
      cmp->rest.emplace_back(op, parse_math1());
    }
    if (cmp) return cmp;
    return first;
  }
  ExprP bin(const std::string& op, ExprP l, ExprP r, Pos p) {
    auto n = node<BinE>(p);
    n->op = op;
    n->l = std::move(l);
    n->r = std::move(r);
    return n;
  }
  ExprP parse_math1() {
    ExprP l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token t = next();
      l = bin(t.value, std::move(l), parse_concat(), t.pos);
    }
    return l;
  }
  ExprP parse_concat() {
    ExprP l = parse_math2();
    while (is_op("~")) {
      const Token t = next();
      l = bin("~", std::move(l), parse_math2(), t.pos);
    }
    return l;
  }
  ExprP parse_math2() {
    ExprP l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token t = next();
      l = bin(t.value, std::move(l), parse_pow(), t.pos);
    }
    return l;
  }
  ExprP parse_pow() {
    ExprP l = parse_unary();
    while (is_op("**")) {
      const Token t = next();
      l = bin("**", std::move(l), parse_unary(), t.pos);
    }
    return l;
  }
  ExprP parse_unary(bool with_filter = true) {
    ExprP n;
    if (is_op("-") || is_op("+")) {
      const Token t = next();
      auto u = node<NegE>(t.pos);
      u->negate = t.value == "-";
      u->e = parse_unary(false);
      n = std::move(u);
    } else {
      n = parse_primary();
    }
    n = parse_postfix(std::move(n));
    if (with_filter) n = parse_filter_expr(std::move(n));
    return n;
  }
  ExprP parse_primary() {
    const Token t = cur();
    if (t.type == Tok::name) {
      next();
      auto lit = node<LiteralE>(t.pos);
      if (t.value == "true" || t.value == "True") {
        lit->v = Value(true);
        return lit;
      }
      if (t.value == "false" || t.value == "False") {
        lit->v = Value(false);
        return lit;
      }
      if (t.value == "none" || t.value == "None") {
        lit->v = Value::none();
        return lit;
      }
      auto n = node<NameE>(t.pos);
      n->name = t.value;
      return n;
    }
    if (t.type == Tok::string) {
      std::string s;
      while (cur().type == Tok::string) s += next().value;  // adjacent literals concatenate
      auto lit = node<LiteralE>(t.pos);
      lit->v = Value(std::move(s));
      return lit;
    }
    if (t.type == Tok::integer || t.type == Tok::floating) {
      next();
      auto lit = node<LiteralE>(t.pos);
      if (t.type == Tok::integer) {
        errno = 0;
        const long long v = std::strtoll(t.value.c_str(), nullptr, 10);
        if (errno == ERANGE) error_at(t.pos, "integer literal out of range");
        lit->v = Value(static_cast<int64_t>(v));
      } else {
        lit->v = Value(std::strtod(t.value.c_str(), nullptr));
      }
      return lit;
    }
    if (is_op("(")) {
      next();
      if (is_op(")")) {
        next();
        auto l = node<ListE>(t.pos);
        l->tuple = true;
        return l;
      }
      ExprP e = parse_expression();
      if (is_op(",")) {
        auto l = node<ListE>(t.pos);
        l->tuple = true;
        l->items.push_back(std::move(e));
        while (is_op(",")) {
          next();
          if (is_op(")")) break;
          l->items.push_back(parse_expression());
        }
        e = std::move(l);
      }
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto l = node<ListE>(t.pos);
      while (!is_op("]")) {
        l->items.push_back(parse_expression());
        if (!is_op("]")) expect_op(",");
      }
      next();
      return l;
    }
    if (is_op("{")) {
      next();
      auto d = node<DictE>(t.pos);
      while (!is_op("}")) {
        ExprP k = parse_expression();
        expect_op(":");
        ExprP v = parse_expression();
        d->items.emplace_back(std::move(k), std::move(v));
        if (!is_op("}")) expect_op(",");
      }
      next();
      return d;
    }
    unexpected("an expression");
  }
  ExprP parse_postfix(ExprP n) {
    while (true) {
      if (is_op(".")) {
        const Token t = next();
        if (cur().type == Tok::integer) {
          auto it = node<ItemE>(t.pos);
          auto lit = node<LiteralE>(cur().pos);
          lit->v = Value(static_cast<int64_t>(std::stoll(next().value)));
          it->obj = std::move(n);
          it->key = std::move(lit);
          n = std::move(it);
          continue;
        }
        auto a = node<AttrE>(t.pos);
        a->obj = std::move(n);
        a->name = expect_name();
        n = std::move(a);
      } else if (is_op("[")) {
        const Token t = next();
        ExprP start, stop, step;
        bool is_slice = false;
        if (!is_op(":")) start = parse_expression();
        if (is_op(":")) {
          is_slice = true;
          next();
          if (!is_op("]") && !is_op(":")) stop = parse_expression();
          if (is_op(":")) {
            next();
            if (!is_op("]")) step = parse_expression();
          }
        }
        expect_op("]");
        if (is_slice) {
          auto s = node<SliceE>(t.pos);
          s->obj = std::move(n);
          s->a = std::move(start);
          s->b = std::move(stop);
          s->c = std::move(step);
          n = std::move(s);
        } else {
          auto it = node<ItemE>(t.pos);
          it->obj = std::move(n);
          it->key = std::move(start);
          n = std::move(it);
        }
      } else if (is_op("(")) {
        n = parse_call(std::move(n));
      } else {
        return n;
      }
    }
  }
  ArgsE parse_call_args() {
    expect_op("(");
    ArgsE a;
    while (!is_op(")")) {
      if (cur().type == Tok::name && peek().type == Tok::op && peek().value == "=") {
        std::string k = next().value;
        next();
        a.keyword.emplace_back(std::move(k), parse_expression());
      } else {
        if (!a.keyword.empty()) unexpected("a keyword argument (positional after keyword)");
        a.positional.push_back(parse_expression());
      }
      if (!is_op(")")) expect_op(",");
    }
    next();
    return a;
  }
  ExprP parse_call(ExprP callee) {
    const Pos p = cur().pos;
    auto c = node<CallE>(p);
    c->callee = std::move(callee);
    c->args = parse_call_args();
    return c;
  }
  std::string dotted_name() {
    std::string name = expect_name();
    while (is_op(".")) {
      next();
      name += "." + expect_name();
    }
    return name;
  }
  ExprP parse_filter_expr(ExprP n) {
    while (true) {
      if (is_op("|")) {
        const Token t = next();
        auto f = node<FilterE>(t.pos);
        f->base = std::move(n);
        f->name = dotted_name();
        if (is_op("(")) f->args = parse_call_args();
        n = std::move(f);
      } else if (is_name("is")) {
        const Token t = next();
        auto te = node<TestE>(t.pos);
        te->base = std::move(n);
        if (is_name("not")) {
          next();
          te->negated = true;
        }
        if (cur().type == Tok::name && (cur().value == "none" || cur().value == "true" || cur().value == "false" ||
                                        cur().value == "None" || cur().value == "True" || cur().value == "False")) {
          te->name = ascii_lower(next().value);
        } else {
          te->name = dotted_name();
        }
        if (is_op("(")) {
          te->args = parse_call_args();
        } else if ((cur().type == Tok::name || cur().type == Tok::string || cur().type == Tok::integer ||
                    cur().type == Tok::floating || is_op("(") || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) error_at(cur().pos, "you cannot chain multiple tests with 'is'");
          te->args.positional.push_back(parse_postfix(parse_primary()));
        }
        n = std::move(te);
      } else if (is_op("(")) {
        n = parse_call(std::move(n));
      } else {
        return n;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
};

// ---------- globals ----------
void install_globals(std::unordered_map<std::string, Value>& g, Context* ctx) {
  g["range"] = Value::function(
      [](CallArgs& a) {
        const Pos p{};
        int64_t start = 0, stop = 0, step = 1;
        if (a.positional.size() == 1) {
          stop = to_int_arg(a.positional[0], 0, p);
        } else if (a.positional.size() >= 2) {
          start = to_int_arg(a.positional[0], 0, p);
          stop = to_int_arg(a.positional[1], 0, p);
          if (a.positional.size() >= 3) step = to_int_arg(a.positional[2], 1, p);
        }
        if (step == 0) fail(Status::invalid_argument, "chat template: range() step must not be zero");
        List out;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
          out.emplace_back(i);
          if (out.size() > 10'000'000) fail(Status::invalid_argument, "chat template: range() too long");
        }
        return Value(std::move(out));
      },
      "range");
  auto make_dict = [](bool ns) {
    return [ns](CallArgs& a) {
      Value d = ns ? Value::namespace_() : Value::dict();
      for (const auto& x : a.positional)
        if (x.is_dict())
          for (const auto& [k, v] : x.dict_ref().items) d.set(k, v);
      for (const auto& [k, v] : a.keyword) d.set(k, v);
      return d;
    };
  };
  g["namespace"] = Value::function(make_dict(true), "namespace");
  g["dict"] = Value::function(make_dict(false), "dict");
  g["raise_exception"] =
      Value::function([](CallArgs& a) -> Value { throw RaisedError{to_str(a.arg(0, "message"))}; }, "raise_exception");
  g["strftime_now"] = Value::function(
      [ctx](CallArgs& a) {
        const std::string fmt = to_str(a.arg(0, "format"));
        const std::time_t t = ctx->now ? *ctx->now : std::time(nullptr);
        std::tm tm{};
        localtime_r(&t, &tm);
        char buf[512];
        const size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
        return Value(std::string(buf, n));
      },
      "strftime_now");
}

}  // namespace

// ================================================================================================
// Template
// ================================================================================================
struct Template::Impl {
  Body body;
};

Template::Template(std::string_view source, Options options) : impl_(std::make_unique<Impl>()) {
  Lexer lx(source, options);
  Parser ps(lx.run());
  impl_->body = ps.parse_template();
}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const Value& variables, std::optional<std::time_t> now) const {
  Context ctx;
  ctx.now = now;
  ctx.scopes.emplace_back();
  install_globals(ctx.scopes[0], &ctx);
  if (variables.is_dict())
    for (const auto& [k, v] : variables.dict_ref().items) ctx.scopes[0][k] = v;
  ctx.scopes.emplace_back();  // template-level assignments
  std::string out;
  exec_body(impl_->body, ctx, out);
  return out;
}

}  // namespace flashkit::engine::jinja
