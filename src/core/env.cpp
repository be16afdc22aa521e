#include "core/env.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>

namespace flashkit::env {

std::optional<std::string> get(const char* name) {
  const char* s = std::getenv(name);
  if (!s || !*s) return std::nullopt;
  return std::string(s);
}

void warn_ignored(const char* name, const std::string& value, const char* expected) {
  static std::mutex mu;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mu);
  if (!warned.insert(std::string(name) + "=" + value).second) return;
  std::fprintf(stderr, "flashkit: ignoring %s=%s (expected %s)\n", name, value.c_str(), expected);
}

bool flag(const char* name, bool dflt) {
  const auto v = get(name);
  if (!v) return dflt;
  std::string s = *v;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (s == "1" || s == "on" || s == "true" || s == "yes") return true;
  if (s == "0" || s == "off" || s == "false" || s == "no") return false;
  warn_ignored(name, *v, "0 or 1");
  return dflt;
}

int64_t integer(const char* name, int64_t dflt, int64_t lo, int64_t hi) {
  const auto v = get(name);
  if (!v) return dflt;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v->c_str(), &end, 10);
  if (errno != 0 || !end || *end != 0 || x < lo || x > hi) {
    const std::string want = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    warn_ignored(name, *v, want.c_str());
    return dflt;
  }
  return x;
}

double positive(const char* name, double dflt) {
  const auto v = get(name);
  if (!v) return dflt;
  char* end = nullptr;
  const double x = std::strtod(v->c_str(), &end);
  if (!end || *end != 0 || !(x > 0)) {
    warn_ignored(name, *v, "a positive number");
    return dflt;
  }
  return x;
}

int choice(const char* name, std::initializer_list<const char*> choices, int dflt) {
  const auto v = get(name);
  if (!v) return dflt;
  int i = 0;
  std::string want = "one of";
  for (const char* c : choices) {
    if (*v == c) return i;
    want += std::string(i ? ", " : " ") + c;
    ++i;
  }
  warn_ignored(name, *v, want.c_str());
  return dflt;
}

}  // namespace flashkit::env
