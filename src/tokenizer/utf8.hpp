// UTF-8 helpers of the tokenizer: strict validation, code point iteration, U+FFFD replacement of bad
// sequences (the WHATWG "maximal subpart" rule, as TextDecoder does), and the GPT-2 byte <-> char table.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace flashkit::tok {

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

// Appends cp as UTF-8; code points past U+10FFFF and surrogates become U+FFFD.
void append_utf8(std::string& out, uint32_t cp);

// Valid UTF-8 of `bytes`, each ill-formed subsequence replaced by U+FFFD.
std::string sanitize_utf8(std::string_view bytes);

// Length of the longest prefix of `bytes` that can be emitted now: it ends where an incomplete (but so far
// valid) sequence starts at the end. Ill-formed parts inside the prefix are left for sanitize_utf8.
size_t utf8_complete_prefix(std::string_view bytes);

// White_Space property (what \s means in the tokenizers' regexes).
bool is_white_space(uint32_t cp);

// GPT-2 byte-level alphabet: byte -> code point, and back (-1 where the code point is no byte's).
struct ByteLevelTable {
  std::array<uint32_t, 256> byte_to_cp{};
  std::array<std::string, 256> byte_to_utf8{};
  std::array<int16_t, 324> cp_to_byte{};  // all mapped code points are < 324
  ByteLevelTable();
};
const ByteLevelTable& byte_level_table();

}  // namespace flashkit::tok
