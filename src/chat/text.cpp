#include "chat/text.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/utf8.hpp"

namespace flashkit::chat::jinja {

// Python's str.isspace() (Unicode White_Space-ish set used by str.strip()/split()).
bool py_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::vector<uint32_t> decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(next_cp_lenient(s, i));
  return out;
}

size_t count_code_points(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) next_cp_lenient(s, i);
  return n;
}

std::string encode(const std::vector<uint32_t>& cps, size_t b, size_t e) {
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
      if (!strip_it(next_cp_lenient(s, j))) break;
      b = j;
    }
  }
  if (right) {
    while (e > b) {
      size_t k = e - 1;  // back to the start of the last code point
      while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80 && e - k < 4) --k;
      size_t j = k;
      uint32_t cp = next_cp_lenient(s, j);
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
    const uint32_t cp = next_cp_lenient(s, i);
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

}  // namespace flashkit::chat::jinja
