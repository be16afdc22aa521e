// Scalar conversions (bf16, f16), TensorView helpers, name parsing and status names.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "flashkit/flashkit.hpp"

using namespace flashkit;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0; }
bool bf16_is_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0; }

// The value of an IEEE binary16 pattern, computed independently of the library.
double f16_value(uint16_t h) {
  const int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0) v = std::ldexp(double(mant), -24);
  else if (exp == 31) v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else v = std::ldexp(double(1024 + mant), exp - 25);
  return sign ? -v : v;
}

// ---------------------------------------------------------------------------------------------------
// f16
TEST(DtypeF16, DecodesEveryPatternExactly) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    const double want = f16_value(uint16_t(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
    } else {
      ASSERT_EQ(double(f), want) << std::hex << h;
      ASSERT_EQ(std::signbit(f), bool(h & 0x8000u)) << std::hex << h;  // -0 stays -0
    }
  }
}

TEST(DtypeF16, RoundTripsEveryFinitePattern) {
  int finite = 0;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    if ((h & 0x7c00u) == 0x7c00u) continue;  // Inf / NaN: below
    ASSERT_EQ(f32_to_f16(f16_to_f32(uint16_t(h))), uint16_t(h)) << std::hex << h;
    ++finite;
  }
  EXPECT_EQ(finite, 63488);  // 2 * 31 * 1024
}

TEST(DtypeF16, NaNAndInf) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    if (!f16_is_nan(uint16_t(h))) continue;
    const float f = f16_to_f32(uint16_t(h));
    ASSERT_TRUE(std::isnan(f)) << std::hex << h;
    ASSERT_TRUE(f16_is_nan(f32_to_f16(f))) << std::hex << h;
  }
  EXPECT_EQ(f16_to_f32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_f32(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
  // f32 NaNs of any payload, including ones whose payload sits below f16's mantissa bits, stay NaN.
  for (uint32_t u : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7f801000u, 0x7fffffffu, 0xffc00000u}) {
    EXPECT_TRUE(f16_is_nan(f32_to_f16(from_bits(u)))) << std::hex << u;
  }
}

TEST(DtypeF16, Overflow) {
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);                       // largest finite
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);                       // below the halfway point
  EXPECT_EQ(f32_to_f16(from_bits(bits(65520.0f) - 1)), 0x7bff);  // just below it
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);                       // halfway to 65536 rounds to even: inf
  EXPECT_EQ(f32_to_f16(-65520.0f), 0xfc00);
  EXPECT_EQ(f32_to_f16(65536.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::max()), 0xfc00);
}

TEST(DtypeF16, Subnormals) {
  const float tiny = std::ldexp(1.0f, -24);  // smallest f16 subnormal
  EXPECT_EQ(f16_to_f32(0x0001), tiny);
  EXPECT_EQ(f16_to_f32(0x8001), -tiny);
  EXPECT_EQ(f16_to_f32(0x03ff), 1023 * tiny);  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(f32_to_f16(tiny), 0x0001);
  EXPECT_EQ(f32_to_f16(-tiny), 0x8001);
  EXPECT_EQ(f32_to_f16(0.5f * tiny), 0x0000);          // tie between 0 and 1: even (0)
  EXPECT_EQ(f32_to_f16(-0.5f * tiny), 0x8000);         // -0
  EXPECT_EQ(f32_to_f16(0.5001f * tiny), 0x0001);       // just above the tie
  EXPECT_EQ(f32_to_f16(1.5f * tiny), 0x0002);          // tie between 1 and 2: even (2)
  EXPECT_EQ(f32_to_f16(2.5f * tiny), 0x0002);          // tie between 2 and 3: even (2)
  EXPECT_EQ(f32_to_f16(1023.5f * tiny), 0x0400);       // tie between the largest subnormal and the smallest normal
  EXPECT_EQ(f32_to_f16(1023.25f * tiny), 0x03ff);
  EXPECT_EQ(f32_to_f16(0.25f * tiny), 0x0000);         // underflow to zero
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::denorm_min()), 0x8000);
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  for (uint16_t m = 1; m < 0x400; ++m) EXPECT_EQ(f16_to_f32(m), float(m) * tiny) << m;
}

TEST(DtypeF16, RoundsToNearestEvenAtTies) {
  const float ulp1 = std::ldexp(1.0f, -10);  // f16 spacing in [1, 2)
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 0.5f * ulp1), 0x3c00);                // tie, 1.0 is even
  EXPECT_EQ(f32_to_f16(1.0f + 1.5f * ulp1), 0x3c02);                // tie, 0x3c02 is even
  EXPECT_EQ(f32_to_f16(1.0f + 2.5f * ulp1), 0x3c02);                // tie, 0x3c02 is even
  EXPECT_EQ(f32_to_f16(1.0f + 3.5f * ulp1), 0x3c04);
  EXPECT_EQ(f32_to_f16(from_bits(bits(1.0f + 0.5f * ulp1) + 1)), 0x3c01);  // just above the tie
  EXPECT_EQ(f32_to_f16(from_bits(bits(1.0f + 1.5f * ulp1) - 1)), 0x3c01);  // just below the tie
  EXPECT_EQ(f32_to_f16(-(1.0f + 0.5f * ulp1)), 0xbc00);
  EXPECT_EQ(f32_to_f16(-(1.0f + 1.5f * ulp1)), 0xbc02);
  EXPECT_EQ(f32_to_f16(2.0f - 0.5f * ulp1), 0x4000);               // tie at the top of a binade: carries into the exponent
  EXPECT_EQ(f32_to_f16(1024.5f), 0x6400);                          // 1024 + half ulp (ulp 1): even
  EXPECT_EQ(f32_to_f16(1025.5f), 0x6402);
  EXPECT_EQ(f32_to_f16(0.1f), 0x2e66);
  EXPECT_EQ(f32_to_f16(3.14159265f), 0x4248);
}

// Every finite f32 (random sample) converts to the nearest f16, ties to even.
TEST(DtypeF16, RandomValuesRoundToNearest) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<uint32_t> exp(100, 145);  // 2^-27 .. 2^18: subnormal, normal, overflow
  std::uniform_int_distribution<uint32_t> mant(0, 0x7fffff);
  for (int n = 0; n < 200000; ++n) {
    const uint32_t u = (uint32_t(n & 1) << 31) | (exp(rng) << 23) | mant(rng);
    const float x = from_bits(u);
    const uint16_t r = f32_to_f16(x);
    if (std::fabs(double(x)) >= 65520.0) {
      ASSERT_EQ(r & 0x7fffu, 0x7c00u) << x;
      continue;
    }
    ASSERT_EQ(bool(r & 0x8000u), std::signbit(x)) << x;
    const double err = std::fabs(f16_value(r) - double(x));
    for (int d : {-1, 1}) {  // neighbours in magnitude
      const int mag = int(r & 0x7fffu) + d;
      if (mag < 0 || mag > 0x7bff) continue;
      const double other = std::fabs(f16_value(uint16_t((r & 0x8000u) | uint16_t(mag))) - double(x));
      ASSERT_LE(err, other) << "x=" << x << " r=" << std::hex << r;
      if (err == other) {
        ASSERT_EQ(r & 1u, 0u) << "tie not to even: x=" << x;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// bf16
TEST(DtypeBf16, RoundTripsEveryFinitePattern) {
  int finite = 0;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    if ((h & 0x7f80u) == 0x7f80u) continue;
    const float f = bf16_to_f32(uint16_t(h));
    ASSERT_EQ(bits(f), h << 16) << std::hex << h;  // bf16 is the top half of an f32
    ASSERT_EQ(f32_to_bf16(f), uint16_t(h)) << std::hex << h;
    ++finite;
  }
  EXPECT_EQ(finite, 65280);  // 2 * 255 * 128
}

TEST(DtypeBf16, NaNAndInf) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    if (!bf16_is_nan(uint16_t(h))) continue;
    const float f = bf16_to_f32(uint16_t(h));
    ASSERT_TRUE(std::isnan(f)) << std::hex << h;
    ASSERT_TRUE(bf16_is_nan(f32_to_bf16(f))) << std::hex << h;
  }
  // NaN payloads only in the low 16 bits must not truncate to Inf.
  for (uint32_t u : {0x7f800001u, 0xff800001u, 0x7f80ffffu, 0x7fc00000u, 0x7fffffffu}) {
    EXPECT_TRUE(bf16_is_nan(f32_to_bf16(from_bits(u)))) << std::hex << u;
    EXPECT_EQ(f32_to_bf16(from_bits(u)) & 0x8000u, (u >> 16) & 0x8000u) << "sign kept";
  }
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(bf16_to_f32(0x7f80), std::numeric_limits<float>::infinity());
  EXPECT_EQ(bf16_to_f32(0xff80), -std::numeric_limits<float>::infinity());
}

TEST(DtypeBf16, RoundsToNearestEvenAtTies) {
  const float ulp1 = std::ldexp(1.0f, -7);  // bf16 spacing in [1, 2)
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + 0.5f * ulp1), 0x3f80);  // tie, even
  EXPECT_EQ(f32_to_bf16(1.0f + 1.5f * ulp1), 0x3f82);  // tie, even
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808001u)), 0x3f81);  // just above the tie
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f817fffu)), 0x3f81);  // just below the next tie
  EXPECT_EQ(f32_to_bf16(-(1.0f + 0.5f * ulp1)), 0xbf80);
  EXPECT_EQ(f32_to_bf16(-(1.0f + 1.5f * ulp1)), 0xbf82);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3fff8000u)), 0x4000);  // tie at the top of a binade carries
  EXPECT_EQ(f32_to_bf16(0.1f), 0x3dcd);
  EXPECT_EQ(f32_to_bf16(3.14159265f), 0x4049);
  // Overflow: the largest finite bf16 is 0x7f7f; f32 values at or past the halfway point round to Inf.
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f7f8000u)), 0x7f80);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  // Subnormals and signed zero.
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(f32_to_bf16(from_bits(0x00018000u)), 0x0002);  // subnormal tie, even
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
}

TEST(DtypeBf16, RandomValuesRoundToNearest) {
  std::mt19937 rng(7);
  for (int n = 0; n < 200000; ++n) {
    uint32_t u = rng();
    if ((u & 0x7f800000u) == 0x7f800000u) continue;
    const float x = from_bits(u);
    const uint16_t r = f32_to_bf16(x);
    const uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;  // the two candidates (same sign)
    const double dlo = std::fabs(double(x) - double(from_bits(lo)));
    if ((hi & 0x7f800000u) == 0x7f800000u) {  // rounding up reaches Inf
      ASSERT_TRUE(r == uint16_t(lo >> 16) || r == uint16_t(hi >> 16)) << std::hex << u;
      continue;
    }
    const double dhi = std::fabs(double(from_bits(hi)) - double(x));
    const uint16_t want = dlo < dhi ? uint16_t(lo >> 16) : dhi < dlo ? uint16_t(hi >> 16)
                                                                     : uint16_t(((lo >> 16) & 1) ? hi >> 16 : lo >> 16);
    ASSERT_EQ(r, want) << std::hex << u;
  }
}

// ---------------------------------------------------------------------------------------------------
// TensorView
TEST(TensorViewTest, Contiguous) {
  float buf[1];
  const TensorView t = TensorView::contiguous(buf, DType::bf16, {2, 128, 16, 64});
  EXPECT_EQ(t.data, buf);
  EXPECT_EQ(t.dtype, DType::bf16);
  EXPECT_EQ(t.device, Device::cpu);
  EXPECT_EQ(t.device_index, 0);
  EXPECT_EQ(t.ndim, 4);
  EXPECT_EQ(t.shape, (std::array<int64_t, 4>{2, 128, 16, 64}));
  EXPECT_EQ(t.strides, (std::array<int64_t, 4>{128 * 16 * 64, 16 * 64, 64, 1}));
  EXPECT_EQ(t.numel(), 2 * 128 * 16 * 64);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.shape_str(), "[2, 128, 16, 64]");

  const TensorView c = TensorView::contiguous(nullptr, DType::f32, {3, 5}, Device::cuda);
  EXPECT_EQ(c.device, Device::cuda);
  EXPECT_EQ(c.ndim, 2);
  EXPECT_EQ(c.strides[0], 5);
  EXPECT_EQ(c.strides[1], 1);
  EXPECT_EQ(c.shape_str(), "[3, 5]");

  const TensorView s = TensorView::contiguous(nullptr, DType::f32, {});
  EXPECT_EQ(s.ndim, 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_TRUE(s.is_contiguous());
  EXPECT_EQ(s.shape_str(), "[]");

  const TensorView e = TensorView::contiguous(nullptr, DType::f32, {4, 0, 3});
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.shape_str(), "[4, 0, 3]");

  try {
    TensorView::contiguous(nullptr, DType::f32, {1, 2, 3, 4, 5});
    ADD_FAILURE() << "5 dimensions accepted";
  } catch (const Error& err) {
    EXPECT_EQ(err.status(), Status::invalid_argument);
    EXPECT_NE(std::string(err.what()).find("4 dimensions"), std::string::npos) << err.what();
  }
}

TEST(TensorViewTest, IsContiguous) {
  TensorView t = TensorView::contiguous(nullptr, DType::f32, {2, 3, 4});
  EXPECT_TRUE(t.is_contiguous());
  t.strides = {12, 4, 2, 0};  // every other element
  EXPECT_FALSE(t.is_contiguous());
  t.strides = {12, 1, 3, 0};  // transposed last two dims
  EXPECT_FALSE(t.is_contiguous());
  t.strides = {24, 4, 1, 0};  // padded batch stride
  EXPECT_FALSE(t.is_contiguous());
  // Dimensions of size 1 may carry any stride.
  TensorView u = TensorView::contiguous(nullptr, DType::f32, {1, 3, 1, 4});
  u.strides = {999, 4, 7, 1};
  EXPECT_TRUE(u.is_contiguous());
  u.strides[3] = 2;
  EXPECT_FALSE(u.is_contiguous());
}

// ---------------------------------------------------------------------------------------------------
// Names
TEST(Names, ParseDtype) {
  struct Case {
    const char* s;
    DType want;
  };
  for (Case c : {Case{"f32", DType::f32}, Case{"float32", DType::f32}, Case{"float", DType::f32},
                 Case{"bf16", DType::bf16}, Case{"bfloat16", DType::bf16}, Case{"f16", DType::f16},
                 Case{"float16", DType::f16}, Case{"half", DType::f16}}) {
    DType d = DType::i32;
    EXPECT_TRUE(parse_dtype(c.s, &d)) << c.s;
    EXPECT_EQ(d, c.want) << c.s;
  }
  for (const char* s : {"", "F32", "fp32", "f8", "bf", "float64", "i32", " f32", "f32 "}) {
    DType d = DType::i32;
    EXPECT_FALSE(parse_dtype(s, &d)) << "'" << s << "'";
    EXPECT_EQ(d, DType::i32) << "output untouched on failure: '" << s << "'";
  }
  // Names round-trip for the user-facing dtypes.
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    DType back = DType::i32;
    EXPECT_TRUE(parse_dtype(dtype_name(d), &back)) << dtype_name(d);
    EXPECT_EQ(back, d);
  }
  EXPECT_EQ(dtype_name(DType::f64), "f64");
  EXPECT_EQ(dtype_name(DType::i32), "i32");
  EXPECT_EQ(dtype_name(static_cast<DType>(77)), "unknown");
  EXPECT_EQ(dtype_size(DType::f32), 4);
  EXPECT_EQ(dtype_size(DType::bf16), 2);
  EXPECT_EQ(dtype_size(DType::f16), 2);
  EXPECT_EQ(dtype_size(DType::f64), 8);
  EXPECT_EQ(dtype_size(DType::i32), 4);
}

TEST(Names, ParseImpl) {
  struct Case {
    const char* s;
    AttentionImpl want;
  };
  for (Case c : {Case{"auto", AttentionImpl::automatic}, Case{"reference", AttentionImpl::reference},
                 Case{"ref", AttentionImpl::reference}, Case{"standard", AttentionImpl::standard},
                 Case{"std", AttentionImpl::standard}, Case{"flash", AttentionImpl::flash}}) {
    AttentionImpl i = AttentionImpl::standard;
    if (c.want == AttentionImpl::standard) i = AttentionImpl::flash;
    EXPECT_TRUE(parse_impl(c.s, &i)) << c.s;
    EXPECT_EQ(i, c.want) << c.s;
  }
  for (const char* s : {"", "Flash", "FLASH", "cuda", "math", "automatic", "flash2"}) {
    AttentionImpl i = AttentionImpl::standard;
    EXPECT_FALSE(parse_impl(s, &i)) << "'" << s << "'";
    EXPECT_EQ(i, AttentionImpl::standard) << "output untouched on failure: '" << s << "'";
  }
  for (AttentionImpl impl : {AttentionImpl::automatic, AttentionImpl::reference, AttentionImpl::standard,
                             AttentionImpl::flash}) {
    AttentionImpl back = AttentionImpl::automatic;
    EXPECT_TRUE(parse_impl(impl_name(impl), &back)) << impl_name(impl);
    EXPECT_EQ(back, impl);
  }
  EXPECT_EQ(impl_name(static_cast<AttentionImpl>(9)), "unknown");
}

TEST(Names, StatusName) {
  EXPECT_STREQ(status_name(Status::ok), "ok");
  EXPECT_STREQ(status_name(Status::invalid_argument), "invalid argument");
  EXPECT_STREQ(status_name(Status::unsupported), "unsupported");
  EXPECT_STREQ(status_name(Status::out_of_memory), "out of memory");
  EXPECT_STREQ(status_name(Status::device_error), "device error");
  EXPECT_STREQ(status_name(Status::internal), "internal error");
  EXPECT_STREQ(status_name(static_cast<Status>(42)), "unknown status");
}

TEST(Names, RuntimeInfo) {
  EXPECT_STRNE(version(), "");
  const std::string isa = cpu_isa();
  EXPECT_TRUE(isa == "scalar" || isa == "avx2" || isa == "avx512") << isa;
  EXPECT_NE(build_info().find(version()), std::string::npos) << build_info();
  EXPECT_GE(num_threads(), 1);
  EXPECT_GT(physical_memory_bytes(), 0);
  EXPECT_GT(flash_onchip_bytes(Device::cpu), 0);
}

}  // namespace
