// The fp8 (e4m3) attention forward and its quantizer (include/flashkit/attention_fp8.hpp) on the CPU backend:
// the e4m3 conversions against a brute-force nearest search, quantize_e4m3, the CPU path against the f64
// reference of the dequantized inputs (P rounded to e4m3) on random inputs with poisoned outputs and odd sizes,
// the accuracy statement of the header, every bad input, and the CUDA support rule as a pure function.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention_fixture.hpp"
#include "flashkit/attention_fp8.hpp"
#include "flashkit/e4m3.hpp"
#include "flashkit/tuning.hpp"
#include "kernels/attention_fp8_args.hpp"
#include "kernels/cuda/fp8/fp8_layout.hpp"
#include "ops/attention_fp8_choice.hpp"
#include "env_knob.hpp"

using namespace flashkit;
using fk_test::HostTensor;

namespace {

// The positive finite e4m3 values in code order (0x00 .. 0x7E), decoded from the format's definition.
std::vector<double> e4m3_positive_values() {
  std::vector<double> v;
  for (int c = 0; c <= 0x7E; ++c) {
    const int e = c >> 3, m = c & 7;
    v.push_back(e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10));
  }
  return v;
}

// Nearest e4m3 code to x by search, ties to the even code, saturating at 448.
uint8_t e4m3_nearest(float x) {
  static const std::vector<double> vals = e4m3_positive_values();
  const double a = std::fabs(double(x));
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  if (a >= 448) return sign | 0x7E;
  int best = 0;
  for (int c = 1; c <= 0x7E; ++c) {
    const double dc = std::fabs(vals[size_t(c)] - a), db = std::fabs(vals[size_t(best)] - a);
    if (dc < db || (dc == db && (c & 1) == 0)) best = c;
  }
  return sign | uint8_t(best);
}

TEST(E4m3, DecodesEveryCodeByTheFormat) {
  const std::vector<double> vals = e4m3_positive_values();
  for (int c = 0; c < 256; ++c) {
    const float f = e4m3_to_f32(uint8_t(c));
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(f)) << c;
      EXPECT_EQ(f32_to_e4m3(f) & 0x7F, 0x7F) << c;
      continue;
    }
    const double want = (c & 0x80 ? -1 : 1) * vals[size_t(c & 0x7F)];
    EXPECT_EQ(double(f), want) << "code " << c;
    EXPECT_EQ(f32_to_e4m3(f), uint8_t(c)) << "code " << c;  // every value round-trips (-0 included)
  }
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
}

TEST(E4m3, RoundsToNearestEvenAndSaturates) {
  const std::vector<double> vals = e4m3_positive_values();
  for (int c = 0; c < 0x7E; ++c) {  // exact midpoints go to the even code
    const float mid = float((vals[size_t(c)] + vals[size_t(c + 1)]) / 2);
    EXPECT_EQ(f32_to_e4m3(mid), uint8_t(c % 2 == 0 ? c : c + 1)) << "midpoint after code " << c;
    EXPECT_EQ(f32_to_e4m3(-mid), uint8_t(0x80 | (c % 2 == 0 ? c : c + 1)));
  }
  EXPECT_EQ(f32_to_e4m3(464.0f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(1e30f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7F, 0x7F);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -10)), 0x00);                  // half the smallest subnormal: tie to 0
  EXPECT_EQ(f32_to_e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(f32_to_e4m3(1e-30f), 0x00);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exp_u(-14.0f, 9.5f), mant(1.0f, 2.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = (i & 1 ? -1.0f : 1.0f) * mant(rng) * std::exp2(std::floor(exp_u(rng)));
    ASSERT_EQ(f32_to_e4m3(x), e4m3_nearest(x)) << "x = " << x;
  }
}

TEST(E4m3, DTypeIsNamedAndSized) {
  EXPECT_EQ(dtype_size(DType::e4m3), 1);
  EXPECT_EQ(dtype_name(DType::e4m3), "e4m3");
}

TEST(QuantizeE4m3, MapsAmaxTo448AndRoundsTheRest) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    HostTensor src(dt, {3, 37}), dst(DType::e4m3, {3, 37});
    std::mt19937 rng(11);
    src.fill_random(rng, -3.0, 3.0);
    src.set(40, -5.0);  // the amax, negative
    float descale = 0;
    quantize_e4m3(src.view, dst.view, &descale);
    EXPECT_FLOAT_EQ(descale, 5.0f / 448.0f);
    EXPECT_EQ(dst.bytes[40], 0xFE);
    for (int64_t i = 0; i < src.numel(); ++i)
      ASSERT_EQ(dst.bytes[size_t(i)], f32_to_e4m3(float(src.get(i)) / descale)) << i;
  }
  HostTensor zeros(DType::f32, {4}), dst(DType::e4m3, {4});
  for (int i = 0; i < 4; ++i) zeros.set(i, 0.0);
  float descale = 0;
  quantize_e4m3(zeros.view, dst.view, &descale);
  EXPECT_EQ(descale, 1.0f);
}

void expect_error(const std::function<void()>& f, Status status, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.status(), status) << msg;
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    return;
  }
  ADD_FAILURE() << "did not throw";
}

TEST(QuantizeE4m3, RejectsBadInput) {
  HostTensor src(DType::f32, {2, 8}), dst(DType::e4m3, {2, 8}), dst_bad(DType::bf16, {2, 8}), dst_shape(DType::e4m3, {16});
  std::mt19937 rng(1);
  src.fill_random(rng);
  float s = 0;
  expect_error([&] { quantize_e4m3(src.view, dst.view, nullptr); }, Status::invalid_argument, {"descale"});
  expect_error([&] { quantize_e4m3(src.view, dst_bad.view, &s); }, Status::invalid_argument, {"dst", "e4m3", "bf16"});
  expect_error([&] { quantize_e4m3(src.view, dst_shape.view, &s); }, Status::invalid_argument, {"dst", "shape"});
  expect_error([&] { quantize_e4m3(dst.view, dst.view, &s); }, Status::invalid_argument, {"src", "dtype"});
  src.set(5, std::numeric_limits<double>::infinity());
  expect_error([&] { quantize_e4m3(src.view, dst.view, &s); }, Status::invalid_argument, {"src", "non-finite", "5"});
}

// One fp8 problem: random f32 inputs, quantized per tensor; outputs poisoned.
struct Fp8Problem {
  int64_t B, Sq, Sk, H, Hkv, D;
  HostTensor q32, k32, v32, q, k, v, o, lse;
  AttentionFp8Scales scales;
  Fp8Problem(int64_t b, int64_t sq, int64_t sk, int64_t h, int64_t hkv, int64_t d, uint32_t seed)
      : B(b), Sq(sq), Sk(sk), H(h), Hkv(hkv), D(d),
        q32(DType::f32, {b, sq, h, d}), k32(DType::f32, {b, sk, hkv, d}), v32(DType::f32, {b, sk, hkv, d}),
        q(DType::e4m3, {b, sq, h, d}), k(DType::e4m3, {b, sk, hkv, d}), v(DType::e4m3, {b, sk, hkv, d}),
        o(DType::bf16, {b, sq, h, d}), lse(DType::f32, {b, h, sq}) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> n01(0.0, 1.0);
    for (HostTensor* t : {&q32, &k32, &v32})
      for (int64_t i = 0; i < t->numel(); ++i) {
        const double x = n01(rng);
        t->set(i, x == 0 ? 1e-3 : x);
      }
    // Scaled differently so the descales matter (a descale bug cannot cancel out).
    for (int64_t i = 0; i < q32.numel(); ++i) q32.set(i, q32.get(i) * 3.0);
    for (int64_t i = 0; i < v32.numel(); ++i) v32.set(i, v32.get(i) * 0.25);
    quantize_e4m3(q32.view, q.view, &scales.q_descale);
    quantize_e4m3(k32.view, k.view, &scales.k_descale);
    quantize_e4m3(v32.view, v.view, &scales.v_descale);
    o.poison();
    lse.poison();
  }
  // The f64 reference of the dequantized inputs into (o_ref, lse_ref).
  // lazy_tau: tile_max_lazy's threshold (log2 units; the kernel's kFp8LazyRescaleTau unless given).
  void reference(kernels::Fp8PRounding rounding, const AttentionOptions& opts, HostTensor* o_ref, HostTensor* lse_ref,
                 double lazy_tau = kernels::kFp8LazyRescaleTau) {
    *o_ref = HostTensor(DType::bf16, {B, Sq, H, D});
    *lse_ref = HostTensor(DType::f32, {B, H, Sq});
    o_ref->poison();
    lse_ref->poison();
    kernels::AttentionFp8Args a;
    a.fwd.dtype = DType::e4m3;
    a.fwd.shape = {B, Sq, Sk, H, Hkv, D, nullptr, nullptr, Sq, Sk};
    auto op = [](const HostTensor& t) {
      return kernels::AttnOperand{t.view.data, t.view.strides[0], t.view.strides[1], t.view.strides[2]};
    };
    a.fwd.q = op(q);
    a.fwd.k = op(k);
    a.fwd.v = op(v);
    a.fwd.o = op(*o_ref);
    a.fwd.lse = static_cast<float*>(lse_ref->view.data);
    a.fwd.scale = opts.scale > 0 ? opts.scale : float(1.0 / std::sqrt(double(D)));
    a.fwd.mask.causal = opts.causal;
    a.fwd.mask.window_right = opts.causal ? 0 : -1;
    a.q_descale = scales.q_descale;
    a.k_descale = scales.k_descale;
    a.v_descale = scales.v_descale;
    a.lazy_tau = lazy_tau;
    kernels::attention_forward_fp8_reference(a, rounding);
  }
};

struct Fp8Case {
  int64_t B, Sq, Sk, H, Hkv, D;
  bool causal;
};

class Fp8Cpu : public ::testing::TestWithParam<Fp8Case> {};

// The contract's bound against the f64 reference with P rounded to e4m3 (the CPU path rounds against the same row
// max: what is left is f32 sums and the bf16 output, ~0.3%).
constexpr double kTolRoundedRef = 1e-2;

TEST_P(Fp8Cpu, MatchesTheF64ReferenceOfTheDequantizedInputs) {
  const Fp8Case c = GetParam();
  Fp8Problem p(c.B, c.Sq, c.Sk, c.H, c.Hkv, c.D, uint32_t(c.Sq * 131 + c.Sk * 7 + c.D + c.causal));
  AttentionOptions opts;
  opts.causal = c.causal;
  OpCost cost;
  attention_forward_fp8(p.q.view, p.k.view, p.v.view, p.o.view, p.lse.view, p.scales, opts, &cost);
  EXPECT_EQ(cost.kernel, "cpu.fp8.f32");
  EXPECT_GT(cost.flops, 0);
  HostTensor o_ref, lse_ref, o_plain, lse_plain;
  p.reference(kernels::Fp8PRounding::row_max, opts, &o_ref, &lse_ref);
  p.reference(kernels::Fp8PRounding::none, opts, &o_plain, &lse_plain);
  const double err = fk_test::rel_error(p.o, o_ref), lse_err = fk_test::rel_error(p.lse, lse_ref);
  EXPECT_LT(err, kTolRoundedRef);
  EXPECT_LT(err, 1e-3);  // the CPU path rounds P against the reference's own row max
  EXPECT_LT(lse_err, 1e-5);
  // The header's statement: P's rounding alone moves o by a few percent (relative RMS), not more.
  const double p_rounding = fk_test::rel_error(o_ref, o_plain);
  EXPECT_LT(p_rounding, 0.03);
  EXPECT_EQ(fk_test::rel_error(lse_ref, lse_plain), 0.0);  // lse comes from the unrounded p
  RecordProperty("rel_err_vs_rounded_ref", std::to_string(err));
  RecordProperty("p_rounding_rel_rms", std::to_string(p_rounding));
}

INSTANTIATE_TEST_SUITE_P(Grid, Fp8Cpu,
                         ::testing::Values(Fp8Case{1, 1, 1, 1, 1, 64, false}, Fp8Case{2, 17, 17, 4, 2, 128, false},
                                           Fp8Case{1, 17, 255, 2, 2, 128, true}, Fp8Case{1, 255, 17, 3, 1, 64, true},
                                           Fp8Case{1, 255, 255, 2, 1, 256, true},
                                           Fp8Case{1, 1000, 1000, 2, 1, 128, false},
                                           Fp8Case{2, 40, 33, 4, 4, 8, true}));

TEST(Fp8Cpu, ReferenceImplAndAccuracyAgainstTheUnquantizedInputs) {
  Fp8Problem p(1, 200, 200, 2, 1, 128, 5);
  AttentionOptions opts;
  opts.impl = AttentionImpl::reference;
  OpCost cost;
  attention_forward_fp8(p.q.view, p.k.view, p.v.view, p.o.view, p.lse.view, p.scales, opts, &cost);
  EXPECT_EQ(cost.kernel, "reference.f64.fp8");
  HostTensor o_ref, lse_ref;
  p.reference(kernels::Fp8PRounding::row_max, opts, &o_ref, &lse_ref);
  EXPECT_EQ(fk_test::rel_error(p.o, o_ref), 0.0);
  // Against attention of the original (unquantized) inputs: quantizing q, k, v and P together. Bounded loosely;
  // the H200 script reports the measured number against the bf16 kernel.
  HostTensor o32(DType::f32, {1, 200, 2, 128}), lse32(DType::f32, {1, 2, 200});
  AttentionOptions ref;
  ref.impl = AttentionImpl::reference;
  attention_forward(p.q32.view, p.k32.view, p.v32.view, o32.view, lse32.view, ref);
  const double err = fk_test::rel_error(p.o, o32);
  EXPECT_LT(err, 0.1);
  RecordProperty("rel_err_vs_unquantized", std::to_string(err));
}

// The CUDA kernel rounds P against the running max of 128-key tiles (its online softmax); its reference differs
// from the row-max one by a rounding of P at other points (~1-2% relative RMS), and has the same lse.
TEST(Fp8Cpu, TileMaxRoundingReference) {
  Fp8Problem p(1, 130, 700, 2, 1, 128, 21);
  for (bool causal : {false, true}) {
    AttentionOptions opts;
    opts.causal = causal;
    HostTensor o_row, lse_row, o_tile, lse_tile, o_none, lse_none, o_one, lse_one;
    p.reference(kernels::Fp8PRounding::row_max, opts, &o_row, &lse_row);
    p.reference(kernels::Fp8PRounding::tile_max, opts, &o_tile, &lse_tile);
    p.reference(kernels::Fp8PRounding::none, opts, &o_none, &lse_none);
    EXPECT_EQ(fk_test::rel_error(lse_tile, lse_row), 0.0);
    const double tile_vs_row = fk_test::rel_error(o_tile, o_row), tile_vs_none = fk_test::rel_error(o_tile, o_none);
    EXPECT_GT(tile_vs_row, 0.0);
    EXPECT_LT(tile_vs_row, 0.04);
    EXPECT_LT(tile_vs_none, 0.04);
    RecordProperty(causal ? "tile_vs_row_causal" : "tile_vs_row", std::to_string(tile_vs_row));
  }
}

// The lazy running max of the CUDA kernel's RESCALE 2 (tile_max_lazy): lazy_tau = 0 is the eager tile_max
// reference bit for bit; the default threshold (kFp8LazyRescaleTau, 8 in log2 units) keeps the lse (it comes from the
// unrounded p) and moves o by P's rounding only (~1-2%, like tile_max), differently from tile_max.
TEST(Fp8Cpu, LazyTileMaxReference) {
  Fp8Problem p(1, 130, 700, 2, 1, 128, 23);
  for (bool causal : {false, true}) {
    AttentionOptions opts;
    opts.causal = causal;
    HostTensor o_tile, lse_tile, o_row, lse_row, o_lazy, lse_lazy, o_lazy0, lse_lazy0, o_none, lse_none;
    p.reference(kernels::Fp8PRounding::none, opts, &o_none, &lse_none);
    p.reference(kernels::Fp8PRounding::tile_max, opts, &o_tile, &lse_tile);
    p.reference(kernels::Fp8PRounding::row_max, opts, &o_row, &lse_row);
    p.reference(kernels::Fp8PRounding::tile_max_lazy, opts, &o_lazy, &lse_lazy);
    p.reference(kernels::Fp8PRounding::tile_max_lazy, opts, &o_lazy0, &lse_lazy0, 0.0);
    EXPECT_TRUE(o_lazy0.bytes == o_tile.bytes) << "lazy_tau 0 is not the eager running max";
    EXPECT_TRUE(lse_lazy0.bytes == lse_tile.bytes);
    EXPECT_EQ(fk_test::rel_error(lse_lazy, lse_tile), 0.0);
    const double lazy_vs_tile = fk_test::rel_error(o_lazy, o_tile), lazy_vs_row = fk_test::rel_error(o_lazy, o_row);
    EXPECT_GT(lazy_vs_tile, 0.0);  // some row kept a smaller max: its P bytes rounded differently
    EXPECT_LT(lazy_vs_tile, 0.04);
    EXPECT_LT(lazy_vs_row, 0.04);
    // P's rounding error alone (against unrounded P): the lazy max's P bytes are rounded as coarsely, relative to
    // a smaller max.
    const double lazy_vs_none = fk_test::rel_error(o_lazy, o_none), tile_vs_none = fk_test::rel_error(o_tile, o_none);
    EXPECT_LT(lazy_vs_none, 0.04);
    const std::string sfx = causal ? "_causal" : "";
    RecordProperty("lazy_vs_tile" + sfx, std::to_string(lazy_vs_tile));
    RecordProperty("lazy_vs_none" + sfx, std::to_string(lazy_vs_none));
    RecordProperty("tile_vs_none" + sfx, std::to_string(tile_vs_none));
  }
}

// lazy_tau = +inf: every row keeps its first visible tile's max forever; checked against that rule written out here
// for one head (P = e4m3(exp(s - m1)) * exp(m1 - m), m the row max; O = sum P v / l, l from the unrounded p).
TEST(Fp8Cpu, LazyTileMaxWithInfiniteTauKeepsTheFirstTilesMax) {
  const int64_t Sq = 5, Sk = 300, D = 32;  // three key tiles of 128
  Fp8Problem p(1, Sq, Sk, 1, 1, D, 29);
  AttentionOptions opts;
  HostTensor o_inf, lse_inf, o_tile, lse_tile;
  p.reference(kernels::Fp8PRounding::tile_max_lazy, opts, &o_inf, &lse_inf, std::numeric_limits<double>::infinity());
  p.reference(kernels::Fp8PRounding::tile_max, opts, &o_tile, &lse_tile);
  HostTensor o_want(DType::bf16, {1, Sq, 1, D});
  const double scale = double(float(1.0 / std::sqrt(double(D))));
  for (int64_t i = 0; i < Sq; ++i) {
    std::vector<double> sc(static_cast<size_t>(Sk));
    double m = -std::numeric_limits<double>::infinity(), m1 = m;
    for (int64_t j = 0; j < Sk; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < D; ++c)
        dot += (p.q.get(i * D + c) * p.scales.q_descale) * (p.k.get(j * D + c) * p.scales.k_descale);
      sc[size_t(j)] = scale * dot;
      m = std::max(m, sc[size_t(j)]);
      if (j < 128) m1 = std::max(m1, sc[size_t(j)]);
    }
    double l = 0;
    std::vector<double> o(static_cast<size_t>(D), 0.0);
    for (int64_t j = 0; j < Sk; ++j) {
      l += std::exp(sc[size_t(j)] - m);
      const double pv = double(e4m3_to_f32(f32_to_e4m3(float(std::exp(sc[size_t(j)] - m1))))) * std::exp(m1 - m);
      for (int64_t c = 0; c < D; ++c) o[size_t(c)] += pv * (p.v.get(j * D + c) * p.scales.v_descale);
    }
    for (int64_t c = 0; c < D; ++c) o_want.set(i * D + c, o[size_t(c)] / l);
  }
  EXPECT_LT(fk_test::rel_error(o_inf, o_want), 1e-6);
  EXPECT_GT(fk_test::rel_error(o_tile, o_want), 0.0);  // some row's max is in a later tile: eager differs
  EXPECT_EQ(fk_test::rel_error(lse_inf, lse_tile), 0.0);
}

TEST(Fp8Cpu, RowsWithoutVisibleKeysGiveZeroAndMinusInf) {
  Fp8Problem p(1, 9, 4, 1, 1, 16, 3);  // causal, bottom-right: the first 5 rows see no key
  AttentionOptions opts;
  opts.causal = true;
  attention_forward_fp8(p.q.view, p.k.view, p.v.view, p.o.view, p.lse.view, p.scales, opts);
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(p.lse.get(i), -std::numeric_limits<double>::infinity());
    for (int64_t c = 0; c < 16; ++c) EXPECT_EQ(p.o.get(i * 16 + c), 0.0);
  }
  for (int64_t i = 5; i < 9; ++i) EXPECT_TRUE(std::isfinite(p.lse.get(i)));
}

TEST(Fp8Cpu, StridedOperands) {
  // q with heads interleaved in a wider buffer (non-contiguous seq stride), o contiguous.
  Fp8Problem p(1, 33, 47, 2, 1, 32, 9);
  HostTensor wide(DType::e4m3, {1, 33, 4, 32});
  TensorView qs = wide.view;
  qs.shape = {1, 33, 2, 32};
  for (int64_t s = 0; s < 33; ++s)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t c = 0; c < 32; ++c) wide.bytes[size_t((s * 4 + h) * 32 + c)] = p.q.bytes[size_t((s * 2 + h) * 32 + c)];
  AttentionOptions opts;
  attention_forward_fp8(qs, p.k.view, p.v.view, p.o.view, p.lse.view, p.scales, opts);
  HostTensor o_ref, lse_ref;
  p.reference(kernels::Fp8PRounding::row_max, opts, &o_ref, &lse_ref);
  EXPECT_LT(fk_test::rel_error(p.o, o_ref), kTolRoundedRef);
}

TEST(Fp8Errors, BadInputIsRejectedByName) {
  Fp8Problem p(1, 8, 8, 2, 1, 16, 1);
  AttentionOptions opts;
  auto run = [&](const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                 AttentionFp8Scales s, const AttentionOptions& op) {
    attention_forward_fp8(q, k, v, o, p.lse.view, s, op);
  };
  const auto I = Status::invalid_argument;
  expect_error([&] { run(p.q32.view, p.k.view, p.v.view, p.o.view, p.scales, opts); }, I, {"q: dtype must be e4m3, got f32"});
  expect_error([&] { run(p.q.view, p.k32.view, p.v.view, p.o.view, p.scales, opts); }, I, {"k: dtype must be e4m3"});
  expect_error([&] { run(p.q.view, p.k.view, p.v32.view, p.o.view, p.scales, opts); }, I, {"v: dtype must be e4m3"});
  expect_error([&] { run(p.q.view, p.k.view, p.v.view, p.q32.view, p.scales, opts); }, I, {"o: dtype must be bf16, got f32"});
  for (float bad_s : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    AttentionFp8Scales s = p.scales;
    s.k_descale = bad_s;
    expect_error([&] { run(p.q.view, p.k.view, p.v.view, p.o.view, s, opts); }, I, {"scales.k_descale", "> 0"});
  }
  AttentionFp8Scales s = p.scales;
  s.v_descale = 0;
  expect_error([&] { run(p.q.view, p.k.view, p.v.view, p.o.view, s, opts); }, I, {"scales.v_descale"});
  s = p.scales;
  s.q_descale = -2;
  expect_error([&] { run(p.q.view, p.k.view, p.v.view, p.o.view, s, opts); }, I, {"scales.q_descale"});
  AttentionOptions w = opts;
  w.window_left = 4;
  expect_error([&] { run(p.q.view, p.k.view, p.v.view, p.o.view, p.scales, w); }, I, {"window", "not supported"});
  AttentionOptions sc = opts;
  sc.softcap = 30;
  expect_error([&] { run(p.q.view, p.k.view, p.v.view, p.o.view, p.scales, sc); }, I, {"softcap"});
  std::vector<int32_t> cu = {0, 8};
  AttentionOptions vl = opts;
  vl.cu_seqlens_q = cu.data();
  vl.cu_seqlens_k = cu.data();
  vl.num_seqs = 1;
  expect_error([&] { run(p.q.view, p.k.view, p.v.view, p.o.view, p.scales, vl); }, I, {"cu_seqlens", "variable-length"});
  AttentionOptions st = opts;
  st.impl = AttentionImpl::standard;
  expect_error([&] { run(p.q.view, p.k.view, p.v.view, p.o.view, p.scales, st); }, I, {"impl: standard"});
  // The bf16 op's shape checks apply (head_dim, GQA, shapes), naming the argument.
  HostTensor k3(DType::e4m3, {1, 8, 3, 16});
  expect_error([&] { run(p.q.view, k3.view, p.v.view, p.o.view, p.scales, opts); }, I, {"kv_heads"});
  HostTensor q12(DType::e4m3, {1, 8, 2, 12}), o12(DType::bf16, {1, 8, 2, 12});
  expect_error([&] { run(q12.view, p.k.view, p.v.view, o12.view, p.scales, opts); }, I, {"head_dim"});
  // NaN in an e4m3 operand with check_finite (the default).
  p.k.bytes[3] = 0xFF;
  expect_error([&] { run(p.q.view, p.k.view, p.v.view, p.o.view, p.scales, opts); }, I, {"k: contains a non-finite"});
}

TEST(Fp8Errors, OtherOpsRejectE4m3ByName) {
  Fp8Problem p(1, 8, 8, 2, 1, 16, 1);
  HostTensor o8(DType::e4m3, {1, 8, 2, 16});
  const std::string want = "q: dtype e4m3 is supported only by attention_forward_fp8";
  expect_error([&] { attention_forward(p.q.view, p.k.view, p.v.view, o8.view, p.lse.view, {}); },
               Status::invalid_argument, {want});
  expect_error(
      [&] {
        attention_backward(o8.view, p.q.view, p.k.view, p.v.view, o8.view, p.lse.view, o8.view, p.k.view, p.v.view, {});
      },
      Status::invalid_argument, {want});
  TensorView qc = p.q.view;
  qc.device = Device::cuda;
  expect_error([&] { attention_forward(qc, p.k.view, p.v.view, o8.view, p.lse.view, {}); }, Status::invalid_argument,
               {want});
}

TEST(Fp8Choice, CudaNeedsSm90aAndAnInstantiatedHeadDim) {
  DeviceInfo dev;
  dev.cc_major = 8;
  dev.cc_minor = 0;
  EXPECT_NE(fp8_cuda_unsupported_reason(dev, 128).find("sm_80"), std::string::npos);
  dev.cc_major = 9;
  EXPECT_NE(fp8_cuda_unsupported_reason(dev, 128).find("no sm_90a code"), std::string::npos);
  dev.sm90a = true;
  EXPECT_EQ(fp8_cuda_unsupported_reason(dev, 128), "");
  EXPECT_EQ(fp8_cuda_unsupported_reason(dev, 256), "");
  EXPECT_NE(fp8_cuda_unsupported_reason(dev, 64).find("head_dim 64"), std::string::npos);
  EXPECT_NE(fp8_cuda_unsupported_reason(dev, 96).find("supported: 128, 256"), std::string::npos);
}

// The choice of the O-rescale mode: the knob within what is instantiated (0, 1, 2) at d128 and d256, otherwise the
// per-head-dim default (the exact skip, 1); the kernel name carries it.
TEST(Fp8Choice, RescaleFollowsTheKnob) {
  Tuning t;
  EXPECT_EQ(t.fp8_rescale, -1);
  EXPECT_EQ(fp8_rescale(128, t), kFp8RescaleAutoD128);
  EXPECT_EQ(fp8_rescale(256, t), kFp8RescaleAutoD256);
  EXPECT_EQ(kFp8RescaleAutoD128, 1);  // the exact skip, measured in run s16-3 (worklog v4)
  EXPECT_EQ(kFp8RescaleAutoD256, 1);
  for (int r : {0, 1, 2}) {
    t.fp8_rescale = r;
    EXPECT_EQ(fp8_rescale(128, t), r);
    EXPECT_EQ(fp8_rescale(256, t), r == 2 ? 1 : r);  // the lazy mode is not run at d256 (run s16-3)
  }
  for (int r : {3, 8, -2}) {  // not instantiated (a Tuning built in code): the automatic choice
    t.fp8_rescale = r;
    EXPECT_EQ(fp8_rescale(128, t), kFp8RescaleAutoD128) << r;
    EXPECT_EQ(fp8_rescale(256, t), kFp8RescaleAutoD256) << r;
  }
  EXPECT_EQ(fp8_kernel_name(128, 1), "cuda.flash.fwd.sm90ws.e4m3.d128.r1");
  EXPECT_EQ(fp8_kernel_name(256, 2), "cuda.flash.fwd.sm90ws.e4m3.d256.r2");
  EXPECT_EQ(fp8_kernel_name(128, 0), "cuda.flash.fwd.sm90ws.e4m3.d128.r0");
}

// The key tile (worklog v5): the wide tile only where it is instantiated (d128 with the exact skip, rescale 1),
// automatic from kFp8WideKeyTileMinKeys keys (causal or not) or forced by the knob; everything else (d256, rescale
// 0 / 2, a tile without a kernel) runs 128.
TEST(Fp8Choice, KeyTileFollowsTheKnobWhereInstantiated) {
  Tuning t;
  EXPECT_EQ(t.fp8_key_tile, 0);
  EXPECT_EQ(kFp8WideKeyTile, 192);
  EXPECT_EQ(kFp8WideKeyTileMinKeys, 8192);  // run s21-2: 192 level with 128 at 4k, behind below, ahead from 8k
  for (int64_t keys : {1, 4096, 8191, 8192, 16384, 1 << 20}) {  // causal or not (run s21-2: both gain from 8k)
    EXPECT_EQ(fp8_key_tile(128, 1, keys, t), keys >= 8192 ? 192 : 128) << keys;
    EXPECT_EQ(fp8_key_tile(128, 0, keys, t), 128);
    EXPECT_EQ(fp8_key_tile(128, 2, keys, t), 128);
    EXPECT_EQ(fp8_key_tile(256, 1, keys, t), 128);
  }
  for (int bn : {192}) {
    t.fp8_key_tile = bn;
    EXPECT_EQ(fp8_key_tile(128, 1, 1000, t), bn);  // forced: also short
    EXPECT_EQ(fp8_key_tile(128, 1, 17, t), bn);
    EXPECT_EQ(fp8_key_tile(128, 0, 1000, t), 128);
    EXPECT_EQ(fp8_key_tile(128, 2, 1000, t), 128);
    EXPECT_EQ(fp8_key_tile(256, 1, 1000, t), 128);
  }
  t.fp8_key_tile = 128;
  EXPECT_EQ(fp8_key_tile(128, 1, 1 << 20, t), 128);
  for (int bn : {64, 176, 224, 256, -1}) {  // no kernel (a Tuning built in code): the automatic choice
    t.fp8_key_tile = bn;
    Tuning a;
    EXPECT_EQ(fp8_key_tile(128, 1, 16384, t), fp8_key_tile(128, 1, 16384, a)) << bn;
  }
  EXPECT_EQ(fp8_kernel_name(128, 1, 128), "cuda.flash.fwd.sm90ws.e4m3.d128.r1");
  EXPECT_EQ(fp8_kernel_name(128, 1, 192), "cuda.flash.fwd.sm90ws.e4m3.d128.r1.bn192");
}

// FLASHKIT_FP8_KEY_TILE through tuning_from_env(): auto|128|192; anything else warns once and keeps auto.
TEST(Fp8Choice, KeyTileKnobFromTheEnvironment) {
  expect_env_knob("FLASHKIT_FP8_KEY_TILE", [] { return tuning_from_env().fp8_key_tile; }, 0,
                  {{"auto", 0}, {"128", 128}, {"192", 192}}, "224");
}

// FLASHKIT_FP8_RESCALE through tuning_from_env(): auto|0|1|2; anything else warns once and keeps auto.
TEST(Fp8Choice, RescaleKnobFromTheEnvironment) {
  expect_env_knob("FLASHKIT_FP8_RESCALE", [] { return tuning_from_env().fp8_rescale; }, -1,
                  {{"auto", -1}, {"0", 0}, {"1", 1}, {"2", 2}}, "lazy");
}

// The P-from-registers layout of the CUDA kernel: the permutation is one, and packing the S accumulator as the
// kernel does puts, for every thread, the right row and the permuted key at each logical k of the A fragment.
TEST(Fp8Layout, PFragmentPermutationMatchesTheAccumulator) {
  using namespace flashkit::cuda;
  std::vector<int> seen(32, 0);
  for (int k = 0; k < 32; ++k) {
    const int key = fp8_pv_key_of_slot(k);
    ASSERT_GE(key, 0);
    ASSERT_LT(key, 32);
    ++seen[size_t(key)];
  }
  for (int key = 0; key < 32; ++key) EXPECT_EQ(seen[size_t(key)], 1) << key;
  for (int t = 0; t < 4; ++t)
    for (int r = 0; r < 4; ++r)
      for (int b = 0; b < 4; ++b) {
        // A fragment (8-bit, m64k32): row offset and logical k of register r byte b.
        const int a_row = 8 * (r & 1), a_k = 16 * (r >> 1) + 4 * t + b;
        // S accumulator element the kernel packs there: n8 tile j of the chunk, element e.
        const int j = fp8_p_tile(r, b), e = fp8_p_elem(r, b);
        const int s_row = 8 * (e >> 1), s_key = 8 * j + 2 * t + (e & 1);
        EXPECT_EQ(s_row, a_row) << "t " << t << " r " << r << " b " << b;
        EXPECT_EQ(s_key, fp8_pv_key_of_slot(a_k)) << "t " << t << " r " << r << " b " << b;
      }
  for (long long slot = 0; slot < 256; ++slot) {  // V^T column -> V key: inside the slot's chunk, the permutation
    EXPECT_EQ(fp8_vt_source_key(slot) / 32, slot / 32);
    EXPECT_EQ(fp8_vt_source_key(slot) % 32, fp8_pv_key_of_slot(int(slot % 32)));
  }
  EXPECT_EQ(fp8_vt_keys(1, 128), 128);
  EXPECT_EQ(fp8_vt_keys(128, 128), 128);
  EXPECT_EQ(fp8_vt_keys(129, 128), 256);
  // The wide tiles (192; 224 was measured): every tile's second 128-key V^T box starts inside the padded keys (the kernel loads it whole;
  // TMA fills what lies past them with zeros).
  for (int bn : {192, 224})
    for (long long sk : {1LL, 31LL, 128LL, 129LL, 192LL, 200LL, 224LL, 225LL, 449LL, 1000LL, 16384LL}) {
      const long long keys = fp8_vt_keys(sk, bn);
      EXPECT_EQ(keys % bn, 0);
      EXPECT_EQ(keys % 32, 0);  // whole permuted chunks; a multiple of 16 bytes, as a TMA stride must be
      for (long long tile = 0; tile * bn < sk; ++tile) EXPECT_LT(tile * bn + 128, keys) << bn << " " << sk;
    }
}

}  // namespace
