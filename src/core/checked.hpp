// Overflow-checked size arithmetic for sizes that come from files or arguments: a product that wraps would size
// a buffer too small (and a later fill writes past it), so every such product goes through here.
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>

#include "flashkit/error.hpp"

namespace flashkit {

// a * b, or flashkit::Error(invalid_argument) "<what> overflows" when the result does not fit T (or is negative
// for signed inputs that should be sizes).
template <class T>
T checked_mul(T a, T b, const std::string& what) {
  static_assert(std::is_integral_v<T>);
  T r;
  if (__builtin_mul_overflow(a, b, &r))
    fail(Status::invalid_argument, what + ": " + std::to_string(a) + " x " + std::to_string(b) + " overflows");
  return r;
}

template <class T>
T checked_add(T a, T b, const std::string& what) {
  static_assert(std::is_integral_v<T>);
  T r;
  if (__builtin_add_overflow(a, b, &r))
    fail(Status::invalid_argument, what + ": " + std::to_string(a) + " + " + std::to_string(b) + " overflows");
  return r;
}

}  // namespace flashkit
