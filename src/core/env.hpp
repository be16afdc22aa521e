// The FLASHKIT_* environment variables, read one way everywhere (the README lists them). A value that does not
// parse is ignored with a one-time warning on stderr naming the variable and what it expects: a misspelt knob must
// not silently do nothing.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

namespace flashkit::env {

// The raw value; nullopt when unset or empty.
std::optional<std::string> get(const char* name);
// An on/off switch: 1/0, on/off, true/false, yes/no (any case); `dflt` when unset or unparseable.
bool flag(const char* name, bool dflt);
// A decimal integer in [lo, hi]; `dflt` when unset, unparseable or out of range.
int64_t integer(const char* name, int64_t dflt, int64_t lo, int64_t hi);
// A number > 0; `dflt` when unset, unparseable or not positive.
double positive(const char* name, double dflt);
// The index of the value among `choices` (exact match); `dflt` when unset or not one of them.
int choice(const char* name, std::initializer_list<const char*> choices, int dflt);

// The one-time warning (exposed for the tests).
void warn_ignored(const char* name, const std::string& value, const char* expected);

}  // namespace flashkit::env
