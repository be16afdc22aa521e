// FP8 E4M3 (OCP "E4M3FN") scalar conversions, the one copy shared by host C++ and CUDA device code.
// Format: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; NaN is S.1111.111 (0x7F / 0xFF);
// largest finite 448 (0x7E), smallest normal 2^-6, smallest subnormal 2^-9.
// Rounding to e4m3 is to nearest even and saturating (what PTX cvt.rn.satfinite.e4m3x2.f32 does): a finite value
// or an infinity beyond 448 becomes +-448, NaN becomes NaN; the results are independent of the FPU rounding mode.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FK_E4M3_HD __host__ __device__ inline
#else
#define FK_E4M3_HD inline
#endif

namespace flashkit {

inline constexpr float kE4m3Max = 448.0f;
inline constexpr uint8_t kE4m3NaN = 0x7F;

FK_E4M3_HD uint32_t e4m3_detail_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

FK_E4M3_HD float e4m3_detail_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

FK_E4M3_HD bool e4m3_is_nan(uint8_t b) { return (b & 0x7F) == 0x7F; }

FK_E4M3_HD float e4m3_to_f32(uint8_t b) {
  const uint32_t sign = uint32_t(b & 0x80) << 24;
  const uint32_t e = (b >> 3) & 0xF, m = b & 7;
  if ((b & 0x7F) == 0x7F) return e4m3_detail_float(sign | 0x7FC00000u);
  if (e == 0) return e4m3_detail_float(sign | e4m3_detail_bits(float(m) * (1.0f / 512.0f)));  // m * 2^-9
  return e4m3_detail_float(sign | (e + 120) << 23 | m << 20);  // rebias 7 -> 127
}

FK_E4M3_HD uint8_t f32_to_e4m3(float f) {
  const uint32_t u = e4m3_detail_bits(f);
  const uint8_t sign = uint8_t((u >> 24) & 0x80);
  const uint32_t au = u & 0x7FFFFFFFu;
  if (au > 0x7F800000u) return sign | kE4m3NaN;
  if (au >= 0x43E00000u) return sign | 0x7E;  // >= 448 (and +-inf): saturate
  const int32_t e = int32_t(au >> 23) - 127;  // f32 subnormals (e = -127) round to 0 below
  if (e < -10) return sign;                   // below 2^-10: half the smallest subnormal or less
  const uint32_t m = (au & 0x7FFFFFu) | 0x800000u;
  // The kept unit is 2^-9 below the normal range (subnormals), 2^(e-3) inside it: shift the 24-bit significand.
  const int32_t shift = e < -6 ? 14 - e : 20;
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;
  // Subnormal: q counts units of 2^-9 (q == 8 is the smallest normal, 0x08, as it should be). Normal: q holds the
  // implicit bit (q in [8, 16], 16 when rounding carried into the next binade) and 3 mantissa bits.
  if (e < -6) return sign | uint8_t(q);
  const uint32_t code = (uint32_t(e + 7) << 3) + (q - 8);  // a carry (q == 16) bumps the exponent
  return sign | uint8_t(code > 0x7E ? 0x7E : code);
}

}  // namespace flashkit
