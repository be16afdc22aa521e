// The engine's fused Mamba decode kernels run by the CPU emulation (tools/cuda_emu/run_mamba_step.sh) against f64:
// the mixer step (src/engine/cuda/mamba_step.cu: x_proj, dt_proj and the scan step at every block width and
// cluster size; odd shapes, d_inner not a multiple of the block's channels, d_state below 16, several steps carrying the state) and the in_proj GEMV with
// its conv epilogue (src/engine/cuda/gemv.cu, one row, both warp shapes, widths 4 and 3, with and without the conv
// bias). Outputs NaN-poisoned first. A development check of indexing; the GPU tests
// (tests/engine/test_cuda_mamba_fusion.cpp) are the real ones.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "engine/cuda/kernels.hpp"
#include "flashkit/dtype.hpp"

using namespace flashkit;

// The launch settings gemv.cu reads (device.cpp on the GPU): the GEMV plan mode is switched per run here.
Tuning g_tuning;
namespace flashkit::engine::cuda {
const Tuning& launch_tuning() { return g_tuning; }
}  // namespace flashkit::engine::cuda

int fails = 0;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
void expect_same(bool same, const std::string& what) {
  std::printf("%s %-44s %s\n", same ? "ok  " : "FAIL", what.c_str(), same ? "bitwise equal" : "bits differ");
  if (!same) ++fails;
}

double rel_err(const std::vector<float>& got, const std::vector<double>& ref) {
  double d = 0, r = 1e-300;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return double(INFINITY);
    d += (got[i] - ref[i]) * (got[i] - ref[i]), r += ref[i] * ref[i];
  }
  return std::sqrt(d / r);
}
void expect(double e, const std::string& what) {
  std::printf("%s %-44s err %.3g\n", e <= 1e-5 ? "ok  " : "FAIL", what.c_str(), e);
  if (!(e <= 1e-5)) ++fails;
}

// [rms_norm] linear(in_proj) with the conv epilogue: y = W . rms_norm(x) * w, then for x channels c < Di the conv
// step on conv state row c.
// Returns y, xc and the state after the step (every GEMV plan must give the same bits).
std::vector<std::vector<float>> check_gemv_conv(int64_t K, int64_t Di, int W, bool bias) {
  const int64_t N = 2 * Di;
  std::mt19937_64 g(uint64_t(K * 7 + Di + W));
  std::uniform_real_distribution<float> ud(-1.f, 1.f);
  auto rnd = [&](size_t n, float scale, float off = 0.f) {
    std::vector<float> v(n);
    for (auto& x : v) x = off + scale * ud(g);
    return v;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto x = rnd(size_t(K), 1.f), nw = rnd(size_t(K), 0.5f, 1.f), cw = rnd(size_t(Di * W), 0.5f),
             cb = rnd(size_t(Di), 0.2f);
  std::vector<uint16_t> wb(size_t(N * K));
  for (auto& w : wb) w = f32_to_bf16(0.3f * ud(g));
  auto state = rnd(size_t(Di * W), 1.f);
  std::vector<double> sref(state.begin(), state.end());
  std::vector<float> y(size_t(N), nan), xc(size_t(Di), nan), xn(size_t(K), nan);
  engine::cuda::GemvIn in;
  in.x = x.data(), in.ldx = K, in.norm_w = nw.data(), in.a_out = xn.data(), in.lda = K, in.eps = 1e-5f;
  engine::cuda::GemvOut out;
  out.y = y.data(), out.ldy = N;
  out.conv_w = cw.data(), out.conv_b = bias ? cb.data() : nullptr, out.conv_state = state.data();
  out.conv_out = xc.data(), out.conv_channels = Di, out.conv_width = W;
  unsigned counter = 0;
  engine::cuda::gemv_bf16(in, wb.data(), N, K, 1, out, &counter, nullptr);
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double r = 1.0 / std::sqrt(ss / double(K) + 1e-5);
  std::vector<double> yr(static_cast<size_t>(N)), xcr(static_cast<size_t>(Di));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) yr[size_t(n)] += double(bf16_to_f32(wb[size_t(n * K + k)])) * x[size_t(k)] * r * nw[size_t(k)];
  for (int64_t c = 0; c < Di; ++c) {
    double* st = sref.data() + c * W;
    for (int k = 0; k + 1 < W; ++k) st[k] = st[k + 1];
    st[W - 1] = yr[size_t(c)];
    double s = bias ? cb[size_t(c)] : 0.0;
    for (int k = 0; k < W; ++k) s += double(cw[size_t(c * W + k)]) * st[k];
    xcr[size_t(c)] = s / (1 + std::exp(-s));
  }
  const std::string tag = "gemv+conv K" + std::to_string(K) + " Di" + std::to_string(Di) + " W" + std::to_string(W) +
                          (bias ? " bias" : "") + " plan " + std::to_string(g_tuning.cuda_gemv_plan);
  expect(rel_err(y, yr), tag + " y");
  expect(rel_err(xc, xcr), tag + " xc");
  expect(rel_err(state, sref), tag + " state");
  return {y, xc, state};
}

int main() {
  // Each shape under the legacy plan (N = 144: two rows a warp step on the emulated 3-SM machine; N = 40: one),
  // the balanced one (one row a step, several rows a warp; K 1280: 5 chunks a lane, the U 5 shape) and the
  // automatic choice: the same bits from every plan.
  struct G { int64_t K, Di; int W; bool bias; };
  for (G c : {G{40, 72, 4, true}, G{24, 20, 3, false}, G{1280, 40, 4, true}, G{776, 136, 2, false}}) {
    std::vector<std::vector<float>> first;
    for (int mode : {1, 2, 0}) {
      g_tuning.cuda_gemv_plan = mode;
      auto got = check_gemv_conv(c.K, c.Di, c.W, c.bias);
      if (first.empty()) first = got;
      else
        expect_same(same_bits(got[0], first[0]) && same_bits(got[1], first[1]) && same_bits(got[2], first[2]),
                    "gemv+conv K" + std::to_string(c.K) + " plan " + std::to_string(mode) + " vs legacy");
    }
  }
  g_tuning.cuda_gemv_plan = 0;
  struct S { int64_t Di, R, N; int cluster; int ch; };  // cluster 0: the launcher's choice (mamba_step_cluster)
  // Every block width (32, 16, 8 channels) with every cluster size forced and the automatic one; 2056: x_proj rows
  // longer than the 8 chunks per lane preloaded before the PDL wait; 264 with 50 rows: more rows than warps.
  std::vector<S> cases;
  for (int ch : {32, 64, 16, 8}) {
    for (int cl : {0, 1, 2, 4, 8, 16}) cases.push_back(S{72, 8, 16, cl, ch});
    for (S s : {S{48, 16, 5, 0, ch}, S{40, 8, 1, 0, ch}, S{96, 24, 16, 0, ch}, S{264, 24, 13, 0, ch},
                S{2056, 8, 3, 0, ch}, S{200, 16, 9, 0, ch}})
      cases.push_back(s);
  }
  // The first run of each shape (width 32) is the bits every other width and cluster size must reproduce.
  std::map<std::tuple<int64_t, int64_t, int64_t, int>, std::vector<std::vector<float>>> bits;
  for (S s : cases) {
    const int64_t Di = s.Di, R = s.R, N = s.N, P = R + 2 * N;
    std::mt19937_64 g(uint64_t(Di * 100 + N));
    std::uniform_real_distribution<float> ud(-1.f, 1.f);
    auto rnd = [&](size_t n, float scale, float off = 0.f) {
      std::vector<float> v(n);
      for (auto& x : v) x = off + scale * ud(g);
      return v;
    };
    auto to_bf = [](const std::vector<float>& v) {
      std::vector<uint16_t> b(v.size());
      for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]);
      return b;
    };
    const auto wx = to_bf(rnd(size_t(P * Di), 0.2f)), wdt = to_bf(rnd(size_t(Di * R), 0.3f));
    const auto bias = rnd(size_t(Di), 1.f, -2.f), A = rnd(size_t(Di * N), 0.9f, -1.f), D = rnd(size_t(Di), 0.5f, 1.f);
    auto state = rnd(size_t(Di * N), 1.f);
    std::vector<double> sref(state.begin(), state.end());
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int step = 0; step < 3; ++step) {
      const auto xc = rnd(size_t(Di), 1.f), z = rnd(size_t(Di), 2.f);
      std::vector<float> dbc(size_t(P), nan), dt(size_t(Di), nan), y(size_t(Di), nan);
      engine::cuda::MambaStepArgs a;
      a.xc = xc.data(), a.z = z.data(), a.w_x = wx.data(), a.w_dt = wdt.data(), a.dt_bias = bias.data();
      a.A = A.data(), a.D = D.data(), a.state = state.data(), a.dbc = dbc.data(), a.dt = dt.data(), a.y = y.data();
      a.d_inner = Di, a.dt_rank = int(R), a.d_state = int(N), a.cluster = s.cluster, a.channels = s.ch;
      engine::cuda::mamba_mixer_step(a, nullptr);
      // f64 reference
      std::vector<double> dr(static_cast<size_t>(P)), tr(static_cast<size_t>(Di)), yr(static_cast<size_t>(Di));
      for (int64_t j = 0; j < P; ++j)
        for (int64_t k = 0; k < Di; ++k) dr[size_t(j)] += double(bf16_to_f32(wx[size_t(j * Di + k)])) * xc[size_t(k)];
      for (int64_t c = 0; c < Di; ++c) {
        double t = bias[size_t(c)];
        for (int64_t k = 0; k < R; ++k) t += double(bf16_to_f32(wdt[size_t(c * R + k)])) * dr[size_t(k)];
        tr[size_t(c)] = t;
        const double sp = t > 20 ? t : std::log1p(std::exp(t)), u = xc[size_t(c)];
        double acc = 0;
        for (int64_t n = 0; n < N; ++n) {
          double& h = sref[size_t(c * N + n)];
          h = std::exp(sp * A[size_t(c * N + n)]) * h + sp * dr[size_t(R + n)] * u;
          acc += dr[size_t(R + N + n)] * h;
        }
        const double zz = z[size_t(c)];
        yr[size_t(c)] = (acc + D[size_t(c)] * u) * zz / (1 + std::exp(-zz));
      }
      auto err = [](const std::vector<float>& got, const std::vector<double>& ref) {
        double d = 0, r = 1e-300;
        for (size_t i = 0; i < ref.size(); ++i) {
          if (!std::isfinite(got[i])) return double(INFINITY);
          d += (got[i] - ref[i]) * (got[i] - ref[i]), r += ref[i] * ref[i];
        }
        return std::sqrt(d / r);
      };
      const std::string tag = "Di" + std::to_string(Di) + " R" + std::to_string(R) + " N" + std::to_string(N) +
                              " w" + std::to_string(s.ch) + " cluster " + (s.cluster ? std::to_string(s.cluster) : "auto") + " step " +
                              std::to_string(step);
      for (auto [name, e] : {std::pair<const char*, double>{"dbc", err(dbc, dr)}, {"dt", err(dt, tr)},
                             {"y", err(y, yr)}, {"state", err(state, sref)}}) {
        std::printf("%s %-38s %-6s err %.3g\n", e <= 1e-5 ? "ok  " : "FAIL", tag.c_str(), name, e);
        if (!(e <= 1e-5)) ++fails;
      }
      auto& ref = bits[{Di, R, N, step}];
      if (ref.empty()) ref = {dbc, dt, y, state};
      else
        expect_same(same_bits(dbc, ref[0]) && same_bits(dt, ref[1]) && same_bits(y, ref[2]) &&
                        same_bits(state, ref[3]),
                    tag + " vs the first run");
    }
  }
  std::printf("%s\n", fails ? "mamba step emulation: FAILED" : "mamba step emulation: all ok");
  return fails ? 1 : 0;
}
