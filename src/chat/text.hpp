// Python's text semantics as jinja2 sees them: str.isspace(), code point sequences, strip, case mapping,
// repr() of a string, float repr, and json.dumps string escaping. Template text is UTF-8; stray bytes that are
// not UTF-8 decode as themselves (core/utf8.hpp next_cp_lenient) and so survive a round trip.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace flashkit::chat::jinja {

// Python's str.isspace() (the set str.strip() and str.split() use).
bool py_space(uint32_t cp);

std::vector<uint32_t> decode(std::string_view s);
std::string encode(const std::vector<uint32_t>& cps, size_t b = 0, size_t e = std::string::npos);
size_t count_code_points(std::string_view s);

// Python str.strip/lstrip/rstrip: chars == nullptr strips whitespace, else any code point of *chars.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);

std::string py_title(const std::string& s);
std::string ascii_upper(std::string s);
std::string ascii_lower(std::string s);
std::string py_capitalize(const std::string& s);

// Python repr(float): shortest round-trip digits in Python's layout.
std::string float_repr(double v);
// Python repr(str).
std::string py_repr_str(const std::string& s);
// json.dumps(str, ensure_ascii=False), appended to out.
void json_string(std::string& out, const std::string& s);

}  // namespace flashkit::chat::jinja
