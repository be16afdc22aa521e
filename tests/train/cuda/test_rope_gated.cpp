// rope_fwd / rope_bwd and gated_act_fwd / gated_act_bwd against the f64 references: vector and scalar paths,
// strided slices of a fused QKV row, large positions, in-place use, SiLU and GELU-tanh over their curved range.
#include "helpers.hpp"
#include "reference.hpp"

namespace fk_train_test {
namespace {

std::vector<float> inv_freq(int64_t D, double theta) {
  std::vector<float> f(size_t(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) f[size_t(i)] = float(1.0 / std::pow(theta, double(2 * i) / double(D)));
  return f;
}

struct RopeCase {
  int64_t T, heads, D, ldx, ldo, col0;  // the heads start at column col0 of rows of stride ldx (input) / ldo
  int32_t max_pos;
};

class Rope : public TrainCuda {};

TEST_F(Rope, ForwardBackward) {
  const RopeCase cases[] = {
      {23, 3, 64, 192, 192, 0, 100},      // contiguous q, vector path
      {17, 2, 64, 5 * 64, 5 * 64, 192, 50},  // k inside a fused [q(3 heads) | k(2) | v(2)] row... (ld 7*64 below)
      {9, 4, 10, 40, 41, 0, 30},          // head_dim 10: half 5, scalar path
      {31, 2, 128, 256, 256, 0, 8191},    // long positions: angles of thousands of radians
      {5, 1, 2, 2, 2, 0, 7},              // the smallest head
  };
  uint64_t seed = 1;
  for (auto c : cases) {
    if (c.col0 > 0) c.ldx = c.ldo = 7 * 64;
    for (int bwd = 0; bwd < 2; ++bwd) {
      SCOPED_TRACE("T=" + std::to_string(c.T) + " heads=" + std::to_string(c.heads) + " D=" + std::to_string(c.D) +
                   " ldx=" + std::to_string(c.ldx) + " ldo=" + std::to_string(c.ldo) + (bwd ? " bwd" : " fwd"));
      const auto x = bfr(rnd(size_t(c.T * c.ldx), seed++, -2.0f, 2.0f));
      std::mt19937_64 g(seed++);
      std::vector<int32_t> pos(size_t(c.T));
      for (auto& p : pos) p = int32_t(g() % uint64_t(c.max_pos + 1));
      pos[0] = c.max_pos;
      const auto inv = inv_freq(c.D, c.D == 128 ? 500000.0 : 10000.0);
      BF16 dx(x), dout(size_t(c.T * c.ldo));
      I32 dpos(pos);
      F32 dinv(inv);
      const bf16* in = dx.b() + c.col0;
      bf16* out = dout.b() + c.col0;
      if (bwd) tc::rope_bwd(in, c.ldx, out, c.ldo, dpos.p, dinv.p, c.T, c.heads, c.D, stream);
      else tc::rope_fwd(in, c.ldx, out, c.ldo, dpos.p, dinv.p, c.T, c.heads, c.D, stream);
      sync();
      // Reference on the sliced views.
      std::vector<float> xs(size_t(c.T * c.ldx));
      for (int64_t t = 0; t < c.T; ++t)
        for (int64_t k = 0; k + c.col0 < c.ldx; ++k) xs[size_t(t * c.ldx + k)] = x[size_t(t * c.ldx + c.col0 + k)];
      std::vector<double> want(size_t(c.T * c.ldo), 0.0);
      ref::rope(xs, c.ldx, want, c.ldo, pos, inv, c.T, c.heads, c.D, bwd != 0);
      const auto got_full = dout.get();
      std::vector<float> got(size_t(c.T * c.ldo), 0.0f);
      std::vector<size_t> idx;
      for (int64_t t = 0; t < c.T; ++t)
        for (int64_t k = 0; k < c.ldo; ++k) {
          const bool inside = k >= c.col0 && k < c.col0 + c.heads * c.D;
          const float v = got_full[size_t(t * c.ldo + k)];
          if (inside) {
            got[size_t(t * c.ldo + k - c.col0)] = v;
            idx.push_back(size_t(t * c.ldo + k - c.col0));
          } else if (!std::isnan(v)) {
            ADD_FAILURE() << "rope wrote outside its heads at row " << t << " column " << k;
          }
        }
      expect_bf16(got, want, bwd ? "rope_bwd" : "rope_fwd", idx);
    }
  }
}

TEST_F(Rope, InPlaceAndInverse) {
  const int64_t T = 19, H = 3, D = 64;
  const auto x = bfr(rnd(size_t(T * H * D), 5));
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(1000 + 37 * t);
  const auto inv = inv_freq(D, 10000.0);
  BF16 dx(x);
  I32 dpos(pos);
  F32 dinv(inv);
  tc::rope_fwd(dx.b(), H * D, dx.b(), H * D, dpos.p, dinv.p, T, H, D, stream);
  sync();
  std::vector<double> want(size_t(T * H * D));
  ref::rope(x, H * D, want, H * D, pos, inv, T, H, D, false);
  expect_bf16(dx.get(), want, "rope_fwd in place");
  // The backward is the inverse rotation: bwd(fwd(x)) = x up to bf16 rounding of the intermediate.
  tc::rope_bwd(dx.b(), H * D, dx.b(), H * D, dpos.p, dinv.p, T, H, D, stream);
  sync();
  expect_close(dx.get(), to_d(x), 1.2e-2, 1e-2, "rope_bwd(rope_fwd(x))");
}

struct GatedCase {
  int64_t T, F;
};

class GatedAct : public TrainCuda {};

TEST_F(GatedAct, ForwardBackward) {
  const GatedCase cases[] = {{37, 200}, {9, 75}, {1, 8}, {3, 1}, {130, 1032}};
  uint64_t seed = 1;
  for (const auto& c : cases)
    for (tc::Act act : {tc::Act::silu, tc::Act::gelu_tanh}) {
      const bool silu = act == tc::Act::silu;
      SCOPED_TRACE("T=" + std::to_string(c.T) + " F=" + std::to_string(c.F) + (silu ? " silu" : " gelu_tanh"));
      const auto gu = bfr(rnd(size_t(c.T * 2 * c.F), seed++, -5.0f, 5.0f));
      const auto dout = bfr(rnd(size_t(c.T * c.F), seed++));
      BF16 dgu(gu), out(size_t(c.T * c.F)), ddo(dout), dgrad(size_t(c.T * 2 * c.F));
      tc::gated_act_fwd(dgu.b(), out.b(), c.T, c.F, act, stream);
      tc::gated_act_bwd(ddo.b(), dgu.b(), dgrad.b(), c.T, c.F, act, stream);
      sync();
      expect_bf16(out.get(), ref::gated_fwd(gu, c.T, c.F, silu), "gated_act_fwd");
      const auto want = ref::gated_bwd(dout, gu, c.T, c.F, silu);
      expect_bf16(dgrad.get(), want, "gated_act_bwd");
      // In place: dgate_up over gate_up.
      tc::gated_act_bwd(ddo.b(), dgu.b(), dgu.b(), c.T, c.F, act, stream);
      sync();
      expect_bf16(dgu.get(), want, "gated_act_bwd in place");
    }
}

}  // namespace
}  // namespace fk_train_test
