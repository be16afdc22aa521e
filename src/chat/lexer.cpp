#include "chat/lexer.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "chat/text.hpp"
#include "core/utf8.hpp"

namespace flashkit::chat::jinja {
namespace {

class Lexer {
 public:
  Lexer(std::string_view src, const TemplateOptions& o) : opt_(o) {
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
        const uint32_t cp = next_cp_lenient(src_, j);
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

  TemplateOptions opt_;
  std::string src_;
  size_t i_ = 0;
  std::vector<Token> toks_;
  size_t scan_ = 0;
  Pos cur_;
};

}  // namespace

std::vector<Token> lex(std::string_view source, const TemplateOptions& options) { return Lexer(source, options).run(); }

}  // namespace flashkit::chat::jinja
