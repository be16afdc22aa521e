// The tokenizer's character tables: the White_Space property (what \s means in the pre-tokenizers' regexes)
// and the GPT-2 byte-level alphabet. UTF-8 decoding itself is core/utf8.hpp, shared with the chat templates.
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace flashkit::tok {

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
