#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.hpp"

#include <pcre2.h>

#include "flashkit/error.hpp"
#include "core/utf8.hpp"

namespace flashkit::tok {

namespace {
constexpr const char* kSpaceItems = "\\t-\\r\\x{85}\\p{Z}";  // White_Space = Z + \t..\r + U+0085

// Letters and numbers assigned after Unicode 14 (the tables of Debian 12's PCRE2) up to Unicode 17 (what
// the JavaScript reference's ICU knows): added to \p{L} / \p{N} so both sides split new scripts alike.
// Made by comparing every code point under both engines; only additions, no code point changed sides.
constexpr const char* kNewerLetters =
    R"(\x{88F}\x{C5C}\x{CDC}\x{1C89}-\x{1C8A}\x{A7CB}-\x{A7CF}\x{A7D2}\x{A7D4}\x{A7DA}-\x{A7DC}\x{A7F1})"
    R"(\x{105C0}-\x{105F3}\x{10940}-\x{10959}\x{10D4A}-\x{10D65}\x{10D6F}-\x{10D85}\x{10EC2}-\x{10EC7})"
    R"(\x{1123F}-\x{11240}\x{11380}-\x{11389}\x{1138B}\x{1138E}\x{11390}-\x{113B5}\x{113B7}\x{113D1}\x{113D3})"
    R"(\x{11BC0}-\x{11BE0}\x{11DB0}-\x{11DDB}\x{11F02}\x{11F04}-\x{11F10}\x{11F12}-\x{11F33}\x{1342F})"
    R"(\x{13441}-\x{13446}\x{13460}-\x{143FA}\x{16100}-\x{1611D}\x{16D40}-\x{16D6C}\x{16EA0}-\x{16EB8})"
    R"(\x{16EBB}-\x{16ED3}\x{16FF2}-\x{16FF3}\x{187F8}-\x{187FF}\x{18CFF}\x{18D09}-\x{18D1E})"
    R"(\x{18D80}-\x{18DF2}\x{1B132}\x{1B155}\x{1DF25}-\x{1DF2A}\x{1E030}-\x{1E06D}\x{1E4D0}-\x{1E4EB})"
    R"(\x{1E5D0}-\x{1E5ED}\x{1E5F0}\x{1E6C0}-\x{1E6DE}\x{1E6E0}-\x{1E6E2}\x{1E6E4}-\x{1E6E5})"
    R"(\x{1E6E7}-\x{1E6ED}\x{1E6F0}-\x{1E6F4}\x{1E6FE}-\x{1E6FF}\x{2B739}-\x{2B73F}\x{2CEA2}-\x{2CEAD})"
    R"(\x{2EBF0}-\x{2EE5D}\x{31350}-\x{33479})";
constexpr const char* kNewerNumbers =
    R"(\x{10D40}-\x{10D49}\x{116D0}-\x{116E3}\x{11BF0}-\x{11BF9}\x{11DE0}-\x{11DE9}\x{11F50}-\x{11F59})"
    R"(\x{16130}-\x{16139}\x{16D70}-\x{16D79}\x{16FF4}-\x{16FF6}\x{1CCF0}-\x{1CCF9}\x{1D2C0}-\x{1D2D3})"
    R"(\x{1E4F0}-\x{1E4F9}\x{1E5F1}-\x{1E5FA})";

bool is_ascii_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }
char upper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c; }
}  // namespace

std::string translate_oniguruma(const std::string& p) {
  std::string out;
  out.reserve(p.size() * 2);
  std::vector<bool> fold_stack;  // per open group: was ASCII folding on before it
  bool fold = false;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char n = p[i + 1];
      ++i;
      if (n == 's') {
        out += in_class ? std::string(kSpaceItems) : "[" + std::string(kSpaceItems) + "]";
      } else if (n == 'S' && !in_class) {
        out += "[^" + std::string(kSpaceItems) + "]";
      } else if (n == 'd') {
        out += "\\p{Nd}";
      } else if ((n == 'p' || n == 'P' || n == 'x') && i + 1 < p.size() && p[i + 1] == '{') {
        size_t close = p.find('}', i + 1);
        if (close == std::string::npos) close = p.size() - 1;
        std::string body = p.substr(i + 2, close - i - 2);
        const char* newer = body == "L" ? kNewerLetters : body == "N" ? kNewerNumbers : nullptr;
        std::string item = "\\" + p.substr(i, close - i + 1);
        if (newer && n == 'p') {
          out += in_class ? item + newer : "[" + item + newer + "]";
        } else if (newer && !in_class) {
          out += "[^\\p{" + body + "}" + newer + "]";
        } else {
          out += item;
        }
        i = close;
      } else {
        out += '\\';
        out += n;
      }
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      out += c;
      continue;
    }
    switch (c) {
      case '[':
        in_class = true;
        out += c;
        if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
        if (i + 1 < p.size() && p[i + 1] == ']') out += "\\]", ++i;  // a leading ] is literal
        break;
      case '(':
        fold_stack.push_back(fold);
        if (p.compare(i, 4, "(?i:") == 0) {
          fold = true;
          out += "(?:";
          i += 3;
        } else {
          out += c;
        }
        break;
      case ')':
        if (!fold_stack.empty()) {
          fold = fold_stack.back();
          fold_stack.pop_back();
        }
        out += c;
        break;
      case '.':
        out += "[^\\n]";
        break;
      default:
        if (fold && is_ascii_letter(c)) {
          out += '[';
          out += lower(c);
          out += upper(c);
          out += ']';
        } else {
          out += c;
        }
    }
  }
  return out;
}

struct Regex::Impl {
  std::string translated;
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() {
    if (code) pcre2_code_free(code);
  }
};

Regex::Regex(const std::string& pattern) : impl_(std::make_unique<Impl>()) {
  impl_->translated = translate_oniguruma(pattern);
  int err = 0;
  PCRE2_SIZE off = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(impl_->translated.data()), impl_->translated.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &off, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail(Status::invalid_argument, "tokenizer.json: cannot compile regex \"" + pattern + "\" at offset " +
                                       std::to_string(off) + ": " + reinterpret_cast<const char*>(msg));
  }
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::Regex(Regex&&) noexcept = default;
Regex::~Regex() = default;
const std::string& Regex::translated() const { return impl_->translated; }

namespace {
struct MatchContext {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchContext() {
    md = pcre2_match_data_create(4, nullptr);
    mctx = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    if (stack) pcre2_jit_stack_assign(mctx, nullptr, stack);
  }
  ~MatchContext() {
    if (stack) pcre2_jit_stack_free(stack);
    if (mctx) pcre2_match_context_free(mctx);
    if (md) pcre2_match_data_free(md);
  }
};
MatchContext& match_context() {
  thread_local MatchContext ctx;
  return ctx;
}
}  // namespace

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  out.clear();
  auto& ctx = match_context();
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    int rc = impl_->jit ? pcre2_jit_match(impl_->code, subject, text.size(), pos, 0, ctx.md, ctx.mctx)
                        : pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, ctx.md, ctx.mctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT ||
        rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // PCRE2's own limits (10M backtracking steps per match by default) stop a pattern that backtracks
      // catastrophically; that is a property of the file's pattern, so it is reported as bad input.
      const std::string& pat = impl_->translated;
      fail(Status::invalid_argument, "tokenizer.json: the regex \"" + (pat.size() > 80 ? pat.substr(0, 80) + "..." : pat) +
                                         "\" exceeded the regex engine's backtracking limit at byte " +
                                         std::to_string(pos) + " of the text (catastrophic backtracking)");
    }
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      fail(Status::internal, std::string("tokenizer regex match failed: ") + reinterpret_cast<const char*>(msg));
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(ctx.md);
    size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      pos = e;
    } else {
      // empty match: step over one character
      if (b >= text.size()) break;
      pos = b + cp_len(static_cast<unsigned char>(text[b]));
    }
  }
}

}  // namespace flashkit::tok
