// 2^x on the FMA pipe (a polynomial and an exponent add) instead of the SFU's ex2.approx, for the part of the online
// softmax's exponentials that the fp8 forward moves off MUFU (flash_fwd_sm90_tile.cuh, Sm90FwdRows::softmax<EMU>;
// docs/worklog/attention-fp8-cuda.md v3). Compiled for the device and the host: the CPU build tests the very
// function the kernel runs (tests/attention/test_attention_fp8.cpp).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FK_EXP2_HD __host__ __device__
#else
#define FK_EXP2_HD
#endif

namespace flashkit::cuda {

// Coefficients of p(f) = 1 + f (c1 + f (c2 + f c3)) ~ 2^f on f in [-1, 0], the minimax of the relative error with the
// constant pinned to 1 (so 2^0 = 1 exactly), by a Remez exchange on 4 alternation points (numpy, f64, rounded to f32;
// the derivation is in the work log). Max relative error 8.96e-5 in f32 Horner; P is then rounded to e4m3 (3
// mantissa bits, relative step 6e-2), and the row sum sees the same 1e-4 at most.
// Why [-1, 0] and not [-0.5, 0.5] (rounding x to the nearest integer): pinning p(0) = 1 costs nothing at an end of
// the interval, but in its middle the same degree-3 fit gets 4.3e-4.
inline constexpr float kExp2PolyC1 = 6.915874481e-01f;
inline constexpr float kExp2PolyC2 = 2.311585695e-01f;
inline constexpr float kExp2PolyC3 = 3.961584717e-02f;

// Below 2^-125 nothing matters (e4m3's smallest subnormal is 2^-9): the clamp keeps the exponent add from wrapping
// and the result a normal f32 (2^-125 at -inf).
inline constexpr float kExp2PolyMinX = -125.0f;

// 1.5 * 2^23: x + this has ulp 1, so the sum holds ceil(x) in its low mantissa bits (2^22 + j), read back without a
// float-to-int conversion (on sm_90 F2I / FRND share the 16-per-clock unit with MUFU).
inline constexpr float kExp2PolyMagic = 12582912.0f;

FK_EXP2_HD inline uint32_t exp2_float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}
FK_EXP2_HD inline float exp2_bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// 2^x for x <= 0 (and -inf), relative error < 1e-4, exactly 1 at 0. NaN gives 2^-125, not NaN as MUFU's ex2: a NaN
// score (a NaN byte in q or k: the CUDA path does not scan its inputs, attention_fp8.hpp) at an emulated position
// weighs ~0 instead of poisoning its row. Keeping the NaN would cost an instruction: FMNMX.NAN alone is not enough,
// the exponent add turns the device's NaN (0x7fffffff) into FLT_MAX, so 2^j would have to be a float multiply. On the device, 8 instructions
// and none on MUFU: FMNMX (clamp), FADD.RP (x + magic, rounded up: j = ceil(x)), FADD (j as a float), FADD
// (f = x - j in (-1, 0], exact), 3 FFMA (Horner), one integer LEA (bits + j << 23: the sum's mantissa shifted left
// by 23 leaves exactly j << 23 in 32 bits). Tiny positive x (the softmax's fma against a rounded max) gives j = 1,
// f ~ -1: still within the error bound.
FK_EXP2_HD inline float exp2_poly3(float x) {
  x = fmaxf(x, kExp2PolyMinX);  // also maps -inf and NaN to the clamp
#if defined(__CUDA_ARCH__)
  const float t = __fadd_ru(x, kExp2PolyMagic);
#else
  const float t = std::ceil(x) + kExp2PolyMagic;  // exact for |x| <= 125: the device's rounded-up sum, bit for bit
#endif
  const float j = t - kExp2PolyMagic;
  const float f = x - j;
  float p = fmaf(kExp2PolyC3, f, kExp2PolyC2);
  p = fmaf(p, f, kExp2PolyC1);
  p = fmaf(p, f, 1.0f);
  return exp2_bits_float(exp2_float_bits(p) + (exp2_float_bits(t) << 23));
}

// Which n8 key tiles of the softmax's exp2 go to exp2_poly3 when EMU of every 8 do: spread out (EMU 1: tile 7; EMU 2:
// 3 and 7; EMU 3: 2, 5 and 7 of each 8) so that MUFU and FMA work alternate in the unrolled loop.
constexpr bool exp2_emulated_tile(int nt, int emu) {
  const int i = nt % 8;
  return (i + 1) * emu / 8 != i * emu / 8;
}

}  // namespace flashkit::cuda
