// adamw_step, global_norm_sq / sum_f32 / count_nonfinite and the elementwise ops against f64 references: vector path with a tail,
// misaligned pointers (scalar path), the optional bf16 weight copy, accumulation flags, bitwise determinism.
#include "helpers.hpp"
#include "reference.hpp"

namespace fk_train_test {
namespace {

class AdamW : public TrainCuda {};

TEST_F(AdamW, Step) {
  struct Case {
    int64_t n, offset, step;  // offset: elements into the buffers (1 = misaligned, scalar path)
    float wd, grad_scale;
    bool copy;
  };
  const Case cases[] = {{1001, 0, 1, 0.1f, 1.0f, true}, {37, 1, 10, 0.0f, 0.5f, true}, {4096, 0, 1000, 0.01f, 0.25f, false},
                        {3, 0, 2, 0.1f, 1.0f, true}, {1003, 2, 7, 0.1f, 0.8f, true}};
  const float lr = 0.05f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
  uint64_t seed = 1;
  for (const auto& c : cases) {
    SCOPED_TRACE("n=" + std::to_string(c.n) + " offset=" + std::to_string(c.offset) + " step=" + std::to_string(c.step));
    const size_t N = size_t(c.n + c.offset);
    const auto p = rnd(N, seed++), g = rnd(N, seed++, -0.1f, 0.1f), m = rnd(N, seed++, -0.05f, 0.05f);
    const auto v = rnd(N, seed++, 0.0f, 0.01f);
    F32 dp(p), dg(g), dm(m), dv(v);
    BF16 dpb(N);
    tc::adamw_step(dp.p + c.offset, dg.p + c.offset, dm.p + c.offset, dv.p + c.offset,
                   c.copy ? dpb.b() + c.offset : nullptr, c.n, lr, b1, b2, eps, c.wd, c.step, c.grad_scale, stream);
    sync();
    auto tail = [&](const std::vector<float>& a) { return std::vector<float>(a.begin() + c.offset, a.end()); };
    const auto want = ref::adamw(tail(p), tail(g), tail(m), tail(v), lr, b1, b2, eps, c.wd, c.step, c.grad_scale);
    const auto gp = tail(dp.get());
    expect_f32(tail(dm.get()), want.m, "m");
    expect_close(tail(dv.get()), want.v, 2e-6, 1e-6, "v");
    // The update is small against the weight: compare it, not the weight.
    std::vector<float> step_got(gp.size());
    std::vector<double> step_want(gp.size());
    const auto p0 = tail(p);
    for (size_t i = 0; i < gp.size(); ++i) step_got[i] = gp[i] - p0[i], step_want[i] = want.p[i] - double(p0[i]);
    expect_close(step_got, step_want, 1e-4, 1e-4, "param update");
    if (c.copy) {
      const auto gb = tail(dpb.get());
      for (size_t i = 0; i < gb.size(); ++i)
        if (gb[i] != bfr(gp[i])) {
          ADD_FAILURE() << "param_bf16[" << i << "] = " << gb[i] << " is not bf16(param) = " << bfr(gp[i]);
          break;
        }
      if (c.offset > 0) {
        EXPECT_TRUE(std::isnan(dpb.get()[0])) << "adamw_step wrote before its range";
      }
    }
    if (c.offset > 0) {
      EXPECT_EQ(dp.get()[0], p[0]) << "adamw_step wrote before its range";
    }
  }
}

class Reduce : public TrainCuda {};

TEST_F(Reduce, NormSqAndSum) {
  const int64_t sizes[] = {1000003, 5, 1, 3 * 512 * 16 * 1024 + 17};  // the last one reaches the 1024-partial cap
  uint64_t seed = 1;
  F32 scratch(static_cast<size_t>(tc::reduce_scratch_floats()));
  for (int64_t n : sizes)
    for (int64_t offset : {0, 1}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " offset=" + std::to_string(offset));
      const auto x = rnd(size_t(n + offset), seed++, -1.0f, 1.5f);
      double sq = 0, s = 0, sabs = 0;
      for (size_t i = size_t(offset); i < x.size(); ++i) sq += double(x[i]) * x[i], s += x[i], sabs += std::fabs(x[i]);
      F32 dx(x), out(4);
      tc::global_norm_sq(dx.p + offset, n, out.p, false, scratch.p, stream);
      tc::global_norm_sq(dx.p + offset, n, out.p + 1, false, scratch.p, stream);
      tc::sum_f32(dx.p + offset, n, out.p + 2, false, scratch.p, stream);
      sync();
      auto o = out.get();
      EXPECT_NEAR(o[0], sq, 1e-5 * sq) << "global_norm_sq";
      EXPECT_EQ(std::memcmp(&o[0], &o[1], 4), 0) << "global_norm_sq is not deterministic";
      EXPECT_NEAR(o[2], s, 2e-6 * sabs + 1e-6) << "sum_f32";
      // Accumulate: out[0] += the same sum.
      tc::global_norm_sq(dx.p + offset, n, out.p, true, scratch.p, stream);
      sync();
      EXPECT_NEAR(out.get()[0], 2 * sq, 2e-5 * sq) << "global_norm_sq accumulate";
    }
  // Non-finite values: counted, and they poison the sums (the trainer's NaN check).
  for (int64_t offset : {0, 1}) {
    std::vector<float> x = rnd(size_t(5001 + offset), 77);
    x[size_t(offset + 17)] = kNaN, x[size_t(offset + 4000)] = std::numeric_limits<float>::infinity();
    x[size_t(offset + 5000)] = -std::numeric_limits<float>::infinity();  // the tail of the vector path
    F32 dx(x), out(3);
    tc::count_nonfinite(dx.p + offset, 5001, out.p, false, scratch.p, stream);
    tc::global_norm_sq(dx.p + offset, 5001, out.p + 1, false, scratch.p, stream);
    tc::count_nonfinite(dx.p + offset, 17, out.p + 2, false, scratch.p, stream);  // stops before the NaN
    sync();
    const auto o = out.get();
    EXPECT_EQ(o[0], 3.0f) << "offset " << offset;
    EXPECT_FALSE(std::isfinite(o[1])) << "offset " << offset;
    EXPECT_EQ(o[2], 0.0f) << "offset " << offset;
  }
  // n = 0: the result is 0, or unchanged when accumulating.
  F32 out(std::vector<float>{5.0f, 6.0f});
  tc::global_norm_sq(nullptr, 0, out.p, false, scratch.p, stream);
  tc::sum_f32(nullptr, 0, out.p + 1, true, scratch.p, stream);
  sync();
  const auto o = out.get();
  EXPECT_EQ(o[0], 0.0f);
  EXPECT_EQ(o[1], 6.0f);
}

class Elementwise : public TrainCuda {};

TEST_F(Elementwise, ScaleCastAdd) {
  uint64_t seed = 1;
  for (int64_t n : {int64_t(1003), int64_t(8), int64_t(7), int64_t(100000)})
    for (int64_t off : {int64_t(0), int64_t(1)}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " offset=" + std::to_string(off));
      const size_t N = size_t(n + off);
      const auto a = rnd(N, seed++, -3.0f, 3.0f), b = rnd(N, seed++, -3.0f, 3.0f);
      const auto ab = bfr(a), bb = bfr(b);
      auto window = [&](const std::vector<float>& v) { return std::vector<float>(v.begin() + off, v.end()); };
      auto windowd = [&](const std::vector<double>& v) { return std::vector<double>(v.begin() + off, v.end()); };
      std::vector<double> want(N);
      {  // scale f32 and bf16
        F32 x(a);
        BF16 y(ab);
        tc::scale_inplace(x.p + off, n, 0.3f, stream);
        tc::scale_inplace(y.b() + off, n, 0.3f, stream);
        sync();
        for (size_t i = 0; i < N; ++i) want[i] = double(a[i]) * double(0.3f);
        expect_f32(window(x.get()), windowd(want), "scale_inplace f32");
        for (size_t i = 0; i < N; ++i) want[i] = double(ab[i]) * double(0.3f);
        expect_bf16(window(y.get()), windowd(want), "scale_inplace bf16");
        if (off) {
          EXPECT_EQ(x.get()[0], a[0]) << "scale_inplace wrote before its range";
        }
      }
      {  // casts both ways
        F32 src(a), back(N);
        BF16 dst(N);
        tc::cast_f32_to_bf16(src.p + off, dst.b() + off, n, stream);
        tc::cast_bf16_to_f32(dst.b() + off, back.p + off, n, stream);
        sync();
        for (size_t i = 0; i < N; ++i) want[i] = ab[i];
        expect_close_abs(window(dst.get()), windowd(want), 0.0, 0.0, "cast_f32_to_bf16 (round to nearest even)");
        expect_close_abs(window(back.get()), windowd(want), 0.0, 0.0, "cast_bf16_to_f32");
        if (off) {
          EXPECT_TRUE(std::isnan(dst.get()[0]) && std::isnan(back.get()[0])) << "a cast wrote before its range";
        }
      }
      {  // adds: bf16 += bf16, f32 += f32, f32 += bf16
        BF16 yb(ab), xb(bb);
        F32 yf(a), xf(b), yf2(a);
        tc::add_inplace(yb.b() + off, xb.b() + off, n, stream);
        tc::add_inplace(yf.p + off, xf.p + off, n, stream);
        tc::add_inplace(yf2.p + off, xb.b() + off, n, stream);
        sync();
        for (size_t i = 0; i < N; ++i) want[i] = double(ab[i]) + bb[i];
        expect_bf16(window(yb.get()), windowd(want), "add_inplace bf16");
        for (size_t i = 0; i < N; ++i) want[i] = double(a[i]) + b[i];
        expect_f32(window(yf.get()), windowd(want), "add_inplace f32");
        for (size_t i = 0; i < N; ++i) want[i] = double(a[i]) + bb[i];
        expect_f32(window(yf2.get()), windowd(want), "add_inplace f32 += bf16");
      }
    }
}

}  // namespace
}  // namespace fk_train_test
