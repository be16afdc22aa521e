// rmsnorm_fwd / rmsnorm_bwd against the f64 reference: plain rows and per-head groups inside a wider (fused QKV)
// row, vector and scalar paths, f32 and bf16 weights, Gemma's 1 + w, in-place forward, dx overwrite and
// accumulate, dw accumulation and its bitwise determinism; columns outside the groups stay untouched.
#include "helpers.hpp"
#include "reference.hpp"

namespace fk_train_test {
namespace {

struct NormCase {
  int64_t T, groups, C, ldx, ldy;
  bool plus_one;
};
const NormCase kCases[] = {
    {37, 1, 200, 200, 200, false},     // vector path
    {19, 1, 203, 203, 203, true},      // scalar path
    {13, 3, 64, 208, 200, true},       // per-head groups in a strided row (q of a fused QKV row)
    {11, 2, 30, 67, 61, false},        // per-head, scalar
    {7, 1, 4104, 4104, 4112, false},   // several 256-column sweeps per lane
    {5000, 1, 64, 64, 64, true},       // more groups than 512 blocks x 8 warps: several per warp
    {3, 1, 13000, 13000, 13000, true}  // > 12288 columns: one warp per block, opt-in shared memory
};

std::string name(const NormCase& c) {
  return "T=" + std::to_string(c.T) + " groups=" + std::to_string(c.groups) + " C=" + std::to_string(c.C) +
         " ldx=" + std::to_string(c.ldx) + " ldy=" + std::to_string(c.ldy) + (c.plus_one ? " plus_one" : "");
}
// Indices of the elements of a [T, ld] buffer that belong to the groups.
std::vector<size_t> group_elems(const NormCase& c, int64_t ld) {
  std::vector<size_t> v;
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t k = 0; k < c.groups * c.C; ++k) v.push_back(size_t(t * ld + k));
  return v;
}
// Expects every element outside the groups to be NaN (the poison) or equal to `keep`.
void expect_gaps(const NormCase& c, int64_t ld, const std::vector<float>& got, const std::vector<float>& keep,
                 const char* what) {
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t k = c.groups * c.C; k < ld; ++k) {
      const size_t i = size_t(t * ld + k);
      const bool same = keep.empty() ? std::isnan(got[i]) : std::memcmp(&got[i], &keep[i], 4) == 0;
      if (!same) {
        ADD_FAILURE() << what << " wrote outside its groups at row " << t << " column " << k;
        return;
      }
    }
}

class RmsNorm : public TrainCuda {};

TEST_F(RmsNorm, Forward) {
  uint64_t seed = 1;
  const float eps = 1e-5f;
  for (const auto& c : kCases) {
    for (int wbf = 0; wbf < 2; ++wbf) {
      SCOPED_TRACE(name(c) + (wbf ? " w bf16" : " w f32"));
      const auto x = bfr(rnd(size_t(c.T * c.ldx), seed++, -2.0f, 2.0f));
      auto w = rnd(size_t(c.C), seed++, -1.0f, 1.5f);
      if (wbf) w = bfr(w);
      BF16 dx(x), dy(size_t(c.T * c.ldy));
      F32 dw(w), rstd(size_t(c.T * c.groups));
      BF16 dwb(w);
      if (wbf) tc::rmsnorm_fwd(dx.b(), c.ldx, dwb.b(), dy.b(), c.ldy, rstd.p, c.T, c.groups, c.C, eps, c.plus_one, stream);
      else tc::rmsnorm_fwd(dx.b(), c.ldx, dw.p, dy.b(), c.ldy, rstd.p, c.T, c.groups, c.C, eps, c.plus_one, stream);
      sync();
      std::vector<double> y(size_t(c.T * c.ldy), 0.0), r;
      ref::rmsnorm_fwd(x, c.ldx, w, c.T, c.groups, c.C, eps, c.plus_one, y, c.ldy, r);
      const auto got = dy.get();
      expect_bf16(got, y, "y", group_elems(c, c.ldy));
      expect_gaps(c, c.ldy, got, {}, "rmsnorm_fwd");
      expect_close(rstd.get(), r, 3e-5, 0.0, "rstd");  // f32 sums of up to 13000 squares
    }
  }
}

TEST_F(RmsNorm, ForwardInPlaceWithoutRstd) {
  const NormCase c{29, 2, 96, 200, 200, true};
  const auto x = bfr(rnd(size_t(c.T * c.ldx), 7, -3.0f, 3.0f));
  const auto w = rnd(size_t(c.C), 8);
  BF16 dx(x);
  F32 dw(w);
  tc::rmsnorm_fwd(dx.b(), c.ldx, dw.p, dx.b(), c.ldx, nullptr, c.T, c.groups, c.C, 1e-6f, c.plus_one, stream);
  sync();
  std::vector<double> y(size_t(c.T * c.ldx), 0.0), r;
  ref::rmsnorm_fwd(x, c.ldx, w, c.T, c.groups, c.C, 1e-6, c.plus_one, y, c.ldx, r);
  const auto got = dx.get();
  expect_bf16(got, y, "y in place", group_elems(c, c.ldx));
  expect_gaps(c, c.ldx, got, x, "rmsnorm_fwd in place");
}

TEST_F(RmsNorm, Backward) {
  uint64_t seed = 1000;
  const float eps = 1e-6f;
  for (const auto& c : kCases) {
    for (int acc = 0; acc < 2; ++acc) {
      SCOPED_TRACE(name(c) + (acc ? " dx accumulate" : " dx overwrite"));
      // The backward's dx / dy layouts reuse ldy for dy and ldx for x and dx.
      const int64_t lddy = c.ldy, ldx = c.ldx, lddx = c.ldx;
      const auto x = bfr(rnd(size_t(c.T * ldx), seed++, -2.0f, 2.0f));
      const auto dyv = bfr(rnd(size_t(c.T * lddy), seed++));
      const auto w = rnd(size_t(c.C), seed++, -1.0f, 1.5f);
      const auto dx0 = bfr(rnd(size_t(c.T * lddx), seed++));
      const auto dw0 = rnd(size_t(c.C), seed++);
      BF16 dx_in(x), ddy(dyv), dy_fwd(size_t(c.T * c.ldy));
      F32 dw(w), rstd(size_t(c.T * c.groups));
      tc::rmsnorm_fwd(dx_in.b(), ldx, dw.p, dy_fwd.b(), c.ldy, rstd.p, c.T, c.groups, c.C, eps, c.plus_one, stream);
      BF16 ddx = acc ? BF16(dx0) : BF16(size_t(c.T * lddx));
      F32 dgw(dw0), dgw2(dw0);
      const int64_t sf = tc::rmsnorm_bwd_scratch_floats(c.T, c.groups, c.C);
      F32 scratch(static_cast<size_t>(sf));
      tc::rmsnorm_bwd(ddy.b(), lddy, dx_in.b(), ldx, dw.p, rstd.p, ddx.b(), lddx, acc != 0, dgw.p, scratch.p, c.T,
                      c.groups, c.C, c.plus_one, stream);
      // Again into a second dw, with a separate dx: dw must come out bit-identical.
      BF16 ddx2(size_t(c.T * lddx));
      tc::rmsnorm_bwd(ddy.b(), lddy, dx_in.b(), ldx, dw.p, rstd.p, ddx2.b(), lddx, false, dgw2.p, scratch.p, c.T,
                      c.groups, c.C, c.plus_one, stream);
      sync();
      std::vector<double> rdx(dx0.begin(), dx0.end()), rdw(dw0.begin(), dw0.end());
      ref::rmsnorm_bwd(dyv, lddy, x, ldx, w, c.T, c.groups, c.C, eps, c.plus_one, rdx, lddx, acc != 0, rdw);
      const auto got = ddx.get();
      expect_bf16(got, rdx, "dx", group_elems(c, lddx));
      expect_gaps(c, lddx, got, acc ? dx0 : std::vector<float>{}, "rmsnorm_bwd");
      const auto gw = dgw.get();
      expect_close(gw, rdw, 1e-4, 1e-4, "dw");  // f32 sums over up to 5000 groups
      EXPECT_TRUE(bitwise_equal(gw, dgw2.get())) << "dw is not deterministic";
    }
  }
}

TEST_F(RmsNorm, BackwardInPlaceDx) {
  const NormCase c{21, 1, 136, 136, 136, false};
  const auto x = bfr(rnd(size_t(c.T * c.C), 51));
  const auto dyv = bfr(rnd(size_t(c.T * c.C), 52));
  const auto w = rnd(size_t(c.C), 53);
  BF16 dx_in(x), ddy(dyv), y(size_t(c.T * c.C));
  F32 dw(w), rstd(size_t(c.T)), dgw(std::vector<float>(size_t(c.C), 0.0f));
  F32 scratch(size_t(tc::rmsnorm_bwd_scratch_floats(c.T, 1, c.C)));
  tc::rmsnorm_fwd(dx_in.b(), c.C, dw.p, y.b(), c.C, rstd.p, c.T, 1, c.C, 1e-5f, false, stream);
  tc::rmsnorm_bwd(ddy.b(), c.C, dx_in.b(), c.C, dw.p, rstd.p, ddy.b(), c.C, false, dgw.p, scratch.p, c.T, 1, c.C,
                  false, stream);
  sync();
  std::vector<double> rdx(size_t(c.T * c.C)), rdw(size_t(c.C), 0.0);
  ref::rmsnorm_bwd(dyv, c.C, x, c.C, w, c.T, 1, c.C, 1e-5, false, rdx, c.C, false, rdw);
  expect_bf16(ddy.get(), rdx, "dx over dy");
}

}  // namespace
}  // namespace fk_train_test
