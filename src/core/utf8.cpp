#include "core/utf8.hpp"

namespace flashkit {

int utf8_seq(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  if (c < 0x80) return 1;
  int n;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlongs
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return 0;
  }
  size_t avail = s.size() - i;
  for (int k = 1; k < n; ++k) {
    if (static_cast<size_t>(k) >= avail) return -k;
    unsigned char x = b(i + k);
    unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (x < l || x > h) return 0;
  }
  return n;
}

std::optional<size_t> utf8_invalid_offset(std::string_view s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    // ASCII fast path, 8 bytes at a time
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    int k = utf8_seq(s, i);
    if (k <= 0) return i;
    i += static_cast<size_t>(k);
  }
  return std::nullopt;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;  // never emit ill-formed UTF-8
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string sanitize_utf8(std::string_view bytes) {
  if (!utf8_invalid_offset(bytes)) return std::string(bytes);
  std::string out;
  out.reserve(bytes.size() + 8);
  size_t i = 0;
  while (i < bytes.size()) {
    int k = utf8_seq(bytes, i);
    if (k > 0) {
      out.append(bytes.substr(i, static_cast<size_t>(k)));
      i += static_cast<size_t>(k);
    } else {
      out += "\xEF\xBF\xBD";
      // maximal subpart: a valid-but-truncated prefix is replaced as one unit
      if (k < 0) {
        i += static_cast<size_t>(-k);
      } else {
        // count how many bytes of a would-be sequence were acceptable before the failure
        size_t j = i + 1;
        unsigned char c = static_cast<unsigned char>(bytes[i]);
        if (c >= 0xC2 && c <= 0xF4) {
          size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
          std::string_view probe = bytes.substr(i, need);
          for (size_t len = probe.size(); len >= 2; --len) {
            if (utf8_seq(probe.substr(0, len), 0) == -static_cast<int>(len)) {
              j = i + len;
              break;
            }
          }
        }
        i = j;
      }
    }
  }
  return out;
}

size_t utf8_complete_prefix(std::string_view bytes) {
  // An incomplete sequence can only start in the last 3 bytes.
  size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    size_t i = n - back;
    unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c < 0x80) return n;
    if (c >= 0xC0) {
      int k = utf8_seq(bytes, i);
      return k < 0 ? i : n;
    }
  }
  return n;
}

}  // namespace flashkit
