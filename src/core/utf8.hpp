// UTF-8 helpers shared by the tokenizer, the stop-string matcher and the chat templates: strict validation,
// code point iteration (strict, and a lenient form for text that may hold stray bytes), U+FFFD replacement of
// bad sequences (the WHATWG "maximal subpart" rule, as TextDecoder does).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace flashkit {

// Length of the valid UTF-8 sequence starting at s[i] (1..4), 0 when it is invalid, -k when the k bytes
// left (k < needed) are a valid but incomplete start of a sequence.
int utf8_seq(std::string_view s, size_t i);

// Offset of the first byte that is not part of well-formed UTF-8 (overlongs, surrogates and code points
// past U+10FFFF are ill-formed); nullopt when the whole text is valid.
std::optional<size_t> utf8_invalid_offset(std::string_view s);

// Decodes the code point at s[i] of valid UTF-8 and advances i.
inline uint32_t next_cp(std::string_view s, size_t& i) {
  auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    ++i;
    return c;
  }
  int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  uint32_t cp = c & (0x7F >> n);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}
inline size_t cp_len(unsigned char lead) { return lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2; }

// Decodes the code point at s[i] of any text and advances i: a well-formed sequence decodes as usual, and each
// byte that does not start one decodes as itself (U+0080..U+00FF, the Latin-1 reading) so no byte is lost.
inline uint32_t next_cp_lenient(std::string_view s, size_t& i) {
  if (utf8_seq(s, i) > 0) return next_cp(s, i);
  return static_cast<unsigned char>(s[i++]);
}

// Appends cp as UTF-8; code points past U+10FFFF and surrogates become U+FFFD.
void append_utf8(std::string& out, uint32_t cp);

// Valid UTF-8 of `bytes`, each ill-formed subsequence replaced by U+FFFD.
std::string sanitize_utf8(std::string_view bytes);

// Length of the longest prefix of `bytes` that can be emitted now: it ends where an incomplete (but so far
// valid) sequence starts at the end. Ill-formed parts inside the prefix are left for sanitize_utf8.
size_t utf8_complete_prefix(std::string_view bytes);

}  // namespace flashkit
