#include "flashkit/dtype.hpp"

#include <cmath>

namespace flashkit {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::e4m3: return "e4m3";
  }
  return "unknown";
}

bool parse_dtype(std::string_view s, DType* out) {
  if (s == "f32" || s == "float32" || s == "float") *out = DType::f32;
  else if (s == "bf16" || s == "bfloat16") *out = DType::bf16;
  else if (s == "f16" || s == "float16" || s == "half") *out = DType::f16;
  else return false;
  return true;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: renormalize
      int e = -1;
      do { ++e; mant <<= 1; } while (!(mant & 0x400u));
      u = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | mant << 13;
  } else {
    u = sign | (exp + 112) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t au = u & 0x7fffffffu;
  if (au >= 0x7f800000u) return sign | (au > 0x7f800000u ? 0x7e00u : 0x7c00u);  // NaN / Inf
  if (au >= 0x477ff000u) return sign | 0x7c00u;                                   // rounds to Inf
  if (au < 0x38800000u) {  // subnormal or zero in f16: round (au as float) * 2^24 to integer
    float af;
    std::memcpy(&af, &au, 4);
    return sign | uint16_t(std::nearbyint(af * 16777216.0f));
  }
  uint32_t mant_odd = (au >> 13) & 1u;
  au += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return sign | uint16_t(au >> 13);
}

}  // namespace flashkit
