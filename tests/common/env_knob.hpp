// Tests of the environment knobs that tuning_from_env() reads (FLASHKIT_SM90_*, FLASHKIT_FP8_*, ...): every knob
// promises the same things -- its spellings map to values, and anything else keeps the default with ONE warning
// naming the variable and the value, however often it is read.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>

// Sets an environment variable for a scope, then restores its previous state (normally unset).
struct ScopedEnv {
  std::string name, old;
  bool had = false;
  ScopedEnv(const char* n, const std::string& value) : name(n) {
    if (const char* o = std::getenv(n)) {
      had = true;
      old = o;
    }
    ::setenv(n, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had) ::setenv(name.c_str(), old.c_str(), 1);
    else ::unsetenv(name.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

// `read()` returns the knob's value as tuning_from_env() parses it. Unset must give `dflt`, each (spelling, value)
// pair its value, and `bad` the default with exactly one warning that contains "NAME=bad".
template <typename Read>
void expect_env_knob(const char* name, Read read, int dflt, std::initializer_list<std::pair<const char*, int>> values,
                     const char* bad) {
  {
    ScopedEnv keep(name, "");
    ::unsetenv(name);
    EXPECT_EQ(read(), dflt) << name << " unset";
  }
  for (const auto& [spelling, want] : values) {
    ScopedEnv e(name, spelling);
    EXPECT_EQ(read(), want) << name << "=" << spelling;
  }
  ScopedEnv e(name, bad);
  testing::internal::CaptureStderr();
  const int first = read(), second = read();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(first, dflt) << name << "=" << bad;
  EXPECT_EQ(second, dflt) << name << "=" << bad;
  const std::string warning = std::string(name) + "=" + bad;
  const size_t at = err.find(warning);
  EXPECT_NE(at, std::string::npos) << err;
  if (at != std::string::npos) EXPECT_EQ(err.find(warning, at + 1), std::string::npos) << "warned twice: " << err;
}
