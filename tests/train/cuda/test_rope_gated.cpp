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

// cos / sin per (row, pair index) from inv_freq, as the kernels form them.
void freq_tables(const std::vector<int64_t>& pos, const std::vector<float>& inv, std::vector<double>& cs,
                 std::vector<double>& sn) {
  const size_t h2 = inv.size();
  cs.assign(pos.size() * h2, 0.0);
  sn.assign(pos.size() * h2, 0.0);
  for (size_t t = 0; t < pos.size(); ++t)
    for (size_t i = 0; i < h2; ++i) {
      const double a = ref::rope_angle(pos[t], inv[i]);
      cs[t * h2 + i] = std::cos(a), sn[t * h2 + i] = std::sin(a);
    }
}

struct RopeCase {
  int64_t T, heads, D, ldx, ldo, col0;  // the heads start at column col0 of rows of stride ldx (input) / ldo
  int32_t max_pos;
  int64_t seq_len;  // > 0: no positions array, row t at position t % seq_len
};

// Which rotation source a run uses.
enum class Source { freq, table_bf16, table_f32 };

class Rope : public TrainCuda {};

TEST_F(Rope, ForwardBackward) {
  const RopeCase cases[] = {
      {23, 3, 64, 192, 192, 0, 100, 0},    // contiguous q, vector path
      {17, 2, 64, 448, 448, 192, 50, 0},   // k (2 heads at column 192) inside a fused [q 3 | k 2 | v 2] x 64 row
      {9, 4, 10, 40, 41, 0, 30, 0},        // head_dim 10: half 5, scalar path
      {31, 2, 128, 256, 256, 0, 8191, 0},  // long positions: angles of thousands of radians
      {5, 1, 2, 2, 2, 0, 7, 0},            // the smallest head
      {40, 2, 64, 128, 128, 0, 0, 13},     // no positions array: batch-major sequences of 13
  };
  uint64_t seed = 1;
  for (const auto& c : cases)
    for (Source src : {Source::freq, Source::table_bf16, Source::table_f32})
      for (int bwd = 0; bwd < 2; ++bwd) {
        const char* src_name = src == Source::freq ? " inv_freq" : src == Source::table_bf16 ? " bf16 table" : " f32 table";
        SCOPED_TRACE("T=" + std::to_string(c.T) + " heads=" + std::to_string(c.heads) + " D=" + std::to_string(c.D) +
                     " ldx=" + std::to_string(c.ldx) + " ldo=" + std::to_string(c.ldo) + " seq_len=" +
                     std::to_string(c.seq_len) + src_name + (bwd ? " bwd" : " fwd"));
        const int64_t h2 = c.D / 2;
        const auto x = bfr(rnd(size_t(c.T * c.ldx), seed++, -2.0f, 2.0f));
        std::mt19937_64 g(seed++);
        std::vector<int32_t> pos(static_cast<size_t>(c.T));
        std::vector<int64_t> p64(pos.size());
        for (size_t t = 0; t < pos.size(); ++t) {
          pos[t] = c.seq_len > 0 ? 0 : int32_t(g() % uint64_t(c.max_pos + 1));
          if (t == 0 && c.seq_len == 0) pos[t] = c.max_pos;
          p64[t] = c.seq_len > 0 ? int64_t(t) % c.seq_len : pos[t];
        }
        const auto inv = inv_freq(c.D, c.D == 128 ? 500000.0 : 10000.0);
        // Tables over every position a row can take, scaled by an attention factor (0.9) as the trainer's are.
        const int64_t max_pos = c.seq_len > 0 ? c.seq_len : c.max_pos + 1;
        std::vector<float> ct(size_t(max_pos * h2)), st(ct.size());
        for (int64_t p = 0; p < max_pos; ++p)
          for (int64_t i = 0; i < h2; ++i) {
            const double a = ref::rope_angle(p, inv[size_t(i)]);
            ct[size_t(p * h2 + i)] = float(std::cos(a) * 0.9), st[size_t(p * h2 + i)] = float(std::sin(a) * 0.9);
          }
        if (src == Source::table_bf16) ct = bfr(ct), st = bfr(st);
        std::vector<double> cs, sn;
        if (src == Source::freq) {
          freq_tables(p64, inv, cs, sn);
        } else {
          cs.resize(size_t(c.T * h2)), sn.resize(cs.size());
          for (int64_t t = 0; t < c.T; ++t)
            for (int64_t i = 0; i < h2; ++i)
              cs[size_t(t * h2 + i)] = ct[size_t(p64[size_t(t)] * h2 + i)],
                                  sn[size_t(t * h2 + i)] = st[size_t(p64[size_t(t)] * h2 + i)];
        }
        BF16 dx(x), dout(size_t(c.T * c.ldo)), ctb(ct), stb(st);
        I32 dpos(pos);
        F32 dinv(inv), ctf(ct), stf(st);
        const int32_t* positions = c.seq_len > 0 ? nullptr : dpos.p;
        const bf16* in = dx.b() + c.col0;
        bf16* out = dout.b() + c.col0;
        const int64_t T = c.T, H = c.heads, D = c.D, L = c.seq_len;
        switch (src) {
          case Source::freq:
            if (bwd) tc::rope_bwd(in, c.ldx, out, c.ldo, positions, L, dinv.p, T, H, D, stream);
            else tc::rope_fwd(in, c.ldx, out, c.ldo, positions, L, dinv.p, T, H, D, stream);
            break;
          case Source::table_bf16:
            if (bwd) tc::rope_bwd_table(in, c.ldx, out, c.ldo, positions, L, ctb.b(), stb.b(), max_pos, T, H, D, stream);
            else tc::rope_fwd_table(in, c.ldx, out, c.ldo, positions, L, ctb.b(), stb.b(), max_pos, T, H, D, stream);
            break;
          case Source::table_f32:
            if (bwd) tc::rope_bwd_table(in, c.ldx, out, c.ldo, positions, L, ctf.p, stf.p, max_pos, T, H, D, stream);
            else tc::rope_fwd_table(in, c.ldx, out, c.ldo, positions, L, ctf.p, stf.p, max_pos, T, H, D, stream);
            break;
        }
        sync();
        // Reference on the sliced views.
        std::vector<float> xs(size_t(c.T * c.ldx));
        for (int64_t t = 0; t < c.T; ++t)
          for (int64_t k = 0; k + c.col0 < c.ldx; ++k) xs[size_t(t * c.ldx + k)] = x[size_t(t * c.ldx + c.col0 + k)];
        std::vector<double> want(size_t(c.T * c.ldo), 0.0);
        ref::rope(xs, c.ldx, want, c.ldo, cs, sn, c.T, c.heads, c.D, bwd != 0);
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

TEST_F(Rope, InPlaceAndInverse) {
  const int64_t T = 19, H = 3, D = 64;
  const auto x = bfr(rnd(size_t(T * H * D), 5));
  std::vector<int32_t> pos(static_cast<size_t>(T));
  std::vector<int64_t> p64(pos.size());
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(1000 + 37 * t), p64[size_t(t)] = pos[size_t(t)];
  const auto inv = inv_freq(D, 10000.0);
  BF16 dx(x);
  I32 dpos(pos);
  F32 dinv(inv);
  tc::rope_fwd(dx.b(), H * D, dx.b(), H * D, dpos.p, 0, dinv.p, T, H, D, stream);
  sync();
  std::vector<double> want(size_t(T * H * D)), cs, sn;
  freq_tables(p64, inv, cs, sn);
  ref::rope(x, H * D, want, H * D, cs, sn, T, H, D, false);
  expect_bf16(dx.get(), want, "rope_fwd in place");
  // The backward is the inverse rotation: bwd(fwd(x)) = x up to bf16 rounding of the intermediate.
  tc::rope_bwd(dx.b(), H * D, dx.b(), H * D, dpos.p, 0, dinv.p, T, H, D, stream);
  sync();
  expect_close(dx.get(), to_d(x), 1.2e-2, 1e-2, "rope_bwd(rope_fwd(x))");
}

TEST_F(Rope, TablePositionOutOfRangeGivesNaN) {
  const int64_t T = 4, H = 1, D = 16, max_pos = 8;
  const std::vector<int32_t> pos = {0, 7, 8, -1};  // rows 2 and 3 fall outside the table
  BF16 x(rnd(size_t(T * D), 9)), out(size_t(T * D)), ct(rnd(size_t(max_pos * D / 2), 10)),
      st(rnd(size_t(max_pos * D / 2), 11));
  I32 dpos(pos);
  tc::rope_fwd_table(x.b(), D, out.b(), D, dpos.p, 0, ct.b(), st.b(), max_pos, T, H, D, stream);
  sync();
  const auto got = out.get();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < D; ++k)
      EXPECT_EQ(std::isnan(got[size_t(t * D + k)]), t >= 2) << "row " << t << " column " << k;
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
