#include "tokenizer/char_tables.hpp"

#include "core/utf8.hpp"

namespace flashkit::tok {

bool is_white_space(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

ByteLevelTable::ByteLevelTable() {
  cp_to_byte.fill(-1);
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    uint32_t cp = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + extra++);
    byte_to_cp[b] = cp;
    append_utf8(byte_to_utf8[b], cp);
    cp_to_byte[cp] = static_cast<int16_t>(b);
  }
}

const ByteLevelTable& byte_level_table() {
  static const ByteLevelTable t;
  return t;
}

}  // namespace flashkit::tok
