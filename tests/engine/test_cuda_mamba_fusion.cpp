// The CUDA backend's Mamba decode fusion (engine/mamba_fusion.hpp): a layer's decode step, queued op by op as the
// model queues it (rms_norm, in_proj, conv1d, x_proj, dt_proj, scan, out_proj, add), against an f64 reference of
// the same step, with fusion on (in_proj + conv as one GEMV, x_proj + dt_proj + scan as one kernel) and off, on
// fresh random inputs and states, NaN-poisoned outputs, odd shapes (d_inner not a multiple of the mixer block's 32
// channels, d_state below 16) and shapes the fused kernels refuse (dt_rank not a multiple of 8, d_state above 16),
// where the ops must run unfused. The same prompt through a whole model with fusion on and off: decode logits within
// 1e-4 over 24 steps (CUDA graphs captured and replayed). Skipped without a CUDA device (CI has none).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

#include "engine/backend.hpp"
#include "flashkit/dtype.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "model/weights.hpp"
#include "mamba_checkpoint.hpp"

#ifdef FLASHKIT_WITH_CUDA
#include <cuda_runtime.h>

#include "engine/cuda/kernels.hpp"
#endif

namespace fs = std::filesystem;
using namespace flashkit;
using namespace flashkit::engine;

namespace {

std::unique_ptr<Backend> cuda_backend(bool fuse) {
  if (cuda_device_count() <= 0) return nullptr;
  BackendOptions o;
  o.tuning = default_tuning();
  o.tuning.cuda_fuse = fuse;
  try {
    return make_cuda_backend(o);
  } catch (const Error& e) {
    if (e.status() != Status::unsupported) throw;
  }
  return nullptr;
}

#ifdef FLASHKIT_WITH_CUDA
// A device buffer of `bytes`, holding `host`'s bytes when given (failures are test failures, not exceptions).
void* device_buffer(const void* host, size_t bytes) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
  if (host) {
    EXPECT_EQ(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  return p;
}
#endif

std::vector<float> rnd(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}
float bfr(float x) { return bf16_to_f32(f32_to_bf16(x)); }
const float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Buf {
  Backend* be;
  Tensor t;
  Buf(Backend& b, int64_t rows, int64_t cols, const std::vector<float>* init = nullptr) : be(&b) {
    t = b.alloc(DType::f32, rows, cols);
    const std::vector<float> v = init ? *init : std::vector<float>(size_t(rows * cols), kNaN);
    b.upload(t, v.data(), v.size() * 4);
  }
  ~Buf() { be->free(t); }
  Buf(const Buf&) = delete;
  std::vector<float> get() const {
    std::vector<float> h(size_t(t.rows * t.cols));
    be->download_f32(h.data(), t, t.rows);
    return h;
  }
};
// A bf16 matrix on the backend (converted at load from the f32 values kept here), optional f32 bias.
struct Mat {
  Backend* be;
  Matrix m;
  std::vector<float> w, b;
  Mat(Backend& be_, std::vector<float> w_, int64_t rows, int64_t cols, std::vector<float> bias = {})
      : be(&be_), w(std::move(w_)), b(std::move(bias)) {
    model::WeightView wv, bv;
    wv.name = "w", wv.type = model::WeightType::f32, wv.shape = {rows, cols}, wv.data = w.data();
    wv.nbytes = w.size() * 4;
    const model::WeightView* parts[1] = {&wv};
    const model::WeightView* bparts[1] = {&bv};
    if (!b.empty()) {
      bv.name = "b", bv.type = model::WeightType::f32, bv.shape = {rows}, bv.data = b.data(), bv.nbytes = b.size() * 4;
      m = be->load_matrix(parts, bparts);
    } else {
      m = be->load_matrix(parts);
    }
  }
  ~Mat() { be->free_matrix(m); }
};

double rel(const std::vector<float>& got, const std::vector<double>& ref) {
  double d = 0, r = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    d += (got[i] - ref[i]) * (got[i] - ref[i]);
    r += ref[i] * ref[i];
  }
  return std::sqrt(d / std::max(r, 1e-300));
}
std::vector<double> dot_rows(const std::vector<float>& W, int64_t N, int64_t K, const double* x) {
  std::vector<double> y(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    double s = 0;
    for (int64_t k = 0; k < K; ++k) s += double(bfr(W[size_t(n * K + k)])) * x[k];
    y[size_t(n)] = s;
  }
  return y;
}

struct Shape {
  int64_t H, Di, R, N, W;
  bool mixer_fuses;  // the fused mixer kernel takes it (R % 8 == 0, N <= 16)
};
class CudaMambaStep : public ::testing::TestWithParam<std::tuple<Shape, bool>> {};

TEST_P(CudaMambaStep, LayerDecodeStepsMatchF64) {
  const auto [sh, fuse] = GetParam();
  auto bep = cuda_backend(fuse);
  if (!bep) GTEST_SKIP() << "no CUDA device (or no CUDA build)";
  Backend& be = *bep;
  const int64_t H = sh.H, Di = sh.Di, R = sh.R, N = sh.N, W = sh.W, P = R + 2 * N;
  const float eps = 1e-5f;
  uint64_t seed = uint64_t(Di * 1000 + R * 10 + N);
  auto next = [&] { return ++seed; };
  const auto norm_w = rnd(size_t(H), next(), 0.5f, 1.5f);
  Mat in_proj(be, rnd(size_t(2 * Di * H), next(), -0.3f, 0.3f), 2 * Di, H);
  const auto conv_w = rnd(size_t(Di * W), next(), -0.5f, 0.5f), conv_b = rnd(size_t(Di), next(), -0.2f, 0.2f);
  Mat x_proj(be, rnd(size_t(P * Di), next(), -0.2f, 0.2f), P, Di);
  Mat dt_proj(be, rnd(size_t(Di * R), next(), -0.3f, 0.3f), Di, R, rnd(size_t(Di), next(), -3.f, -1.f));
  const auto A = rnd(size_t(Di * N), next(), -2.f, -0.1f), D = rnd(size_t(Di), next(), 0.5f, 1.5f);
  Mat out_proj(be, rnd(size_t(H * Di), next(), -0.2f, 0.2f), H, Di);
  auto h0 = rnd(size_t(H), next(), -1.f, 1.f), cs0 = rnd(size_t(Di * W), next(), -1.f, 1.f),
       ss0 = rnd(size_t(Di * N), next(), -1.f, 1.f);
  Buf h(be, 1, H, &h0), xn(be, 1, H), xz(be, 1, 2 * Di), xc(be, 1, Di), dbc(be, 1, P), dt(be, 1, Di), y(be, 1, Di),
      o(be, 1, H), conv_state(be, Di, W, &cs0), ssm_state(be, Di, N, &ss0);
  const Tensor nw = be.upload_f32(norm_w), cw = be.upload_f32(conv_w), cb = be.upload_f32(conv_b),
               At = be.upload_f32(A), Dt = be.upload_f32(D);
  std::vector<double> hr(h0.begin(), h0.end()), csr(cs0.begin(), cs0.end()), ssr(ss0.begin(), ss0.end());
  // f32 intermediates and bf16 weights through a recurrence: the fused and unfused paths sum in the same orders;
  // the bound covers f32 against f64. dt_proj with K % 8 != 0 runs on cuBLAS (bf16-rounded inputs) unfused.
  const double tol = R % 8 == 0 ? 2e-5 : 2e-2;
  const Backend::Stats s0 = be.stats();
  constexpr int kSteps = 6;
  for (int step = 0; step < kSteps; ++step) {
    const Tensor x = xz.t.col_slice(0, Di), z = xz.t.col_slice(Di, Di);
    const Tensor dtl = dbc.t.col_slice(0, R), Bm = dbc.t.col_slice(R, N), Cm = dbc.t.col_slice(R + N, N);
    be.rms_norm(h.t, nw, xn.t, 1, H, eps);
    be.linear(xn.t, in_proj.m, xz.t, 1);
    be.causal_conv1d(x, cw, cb, conv_state.t, xc.t, 1);
    be.linear(xc.t, x_proj.m, dbc.t, 1);
    be.linear(dtl, dt_proj.m, dt.t, 1);
    be.selective_scan(xc.t, dt.t, Bm, Cm, z, At, Dt, ssm_state.t, y.t, 1);
    be.linear(y.t, out_proj.m, o.t, 1);
    be.add(o.t, h.t, 1);
    // f64 reference of the step
    double ss = 0;
    for (double v : hr) ss += v * v;
    const double rr = 1.0 / std::sqrt(ss / double(H) + double(eps));
    std::vector<double> xnr(static_cast<size_t>(H));
    for (int64_t k = 0; k < H; ++k) xnr[size_t(k)] = hr[size_t(k)] * rr * norm_w[size_t(k)];
    const auto xzr = dot_rows(in_proj.w, 2 * Di, H, xnr.data());
    std::vector<double> xcr(static_cast<size_t>(Di));
    for (int64_t c = 0; c < Di; ++c) {
      double* st = csr.data() + c * W;
      for (int64_t k = 0; k + 1 < W; ++k) st[k] = st[k + 1];
      st[W - 1] = xzr[size_t(c)];
      double s = conv_b[size_t(c)];
      for (int64_t k = 0; k < W; ++k) s += double(conv_w[size_t(c * W + k)]) * st[k];
      xcr[size_t(c)] = s / (1 + std::exp(-s));
    }
    const auto dbcr = dot_rows(x_proj.w, P, Di, xcr.data());
    auto dtr = dot_rows(dt_proj.w, Di, R, dbcr.data());
    std::vector<double> yr(static_cast<size_t>(Di));
    for (int64_t c = 0; c < Di; ++c) {
      dtr[size_t(c)] += dt_proj.b[size_t(c)];
      const double d = dtr[size_t(c)], sp = d > 20 ? d : std::log1p(std::exp(d)), u = xcr[size_t(c)];
      double acc = 0;
      for (int64_t n = 0; n < N; ++n) {
        double& s = ssr[size_t(c * N + n)];
        s = std::exp(sp * A[size_t(c * N + n)]) * s + sp * dbcr[size_t(R + n)] * u;
        acc += dbcr[size_t(R + N + n)] * s;
      }
      const double zz = xzr[size_t(Di + c)];
      yr[size_t(c)] = (acc + D[size_t(c)] * u) * zz / (1 + std::exp(-zz));
    }
    const auto orr = dot_rows(out_proj.w, H, Di, yr.data());
    for (int64_t k = 0; k < H; ++k) hr[size_t(k)] += orr[size_t(k)];
    const std::string at = "step " + std::to_string(step);
    EXPECT_LT(rel(xc.get(), xcr), tol) << at << " xc";
    EXPECT_LT(rel(dbc.get(), dbcr), tol) << at << " dbc";
    EXPECT_LT(rel(dt.get(), dtr), tol) << at << " dt";
    EXPECT_LT(rel(y.get(), yr), tol) << at << " y";
    EXPECT_LT(rel(xz.get(), xzr), tol) << at << " xz";
    EXPECT_LT(rel(conv_state.get(), csr), tol) << at << " conv state";
    EXPECT_LT(rel(ssm_state.get(), ssr), tol) << at << " ssm state";
    EXPECT_LT(rel(h.get(), hr), tol) << at << " h";
  }
  const Backend::Stats s1 = be.stats();
  EXPECT_EQ(s1.mamba_fused_convs - s0.mamba_fused_convs, fuse ? uint64_t(kSteps) : 0u);
  EXPECT_EQ(s1.mamba_fused_mixers - s0.mamba_fused_mixers, fuse && sh.mixer_fuses ? uint64_t(kSteps) : 0u);
  for (Tensor t : {nw, cw, cb, At, Dt}) be.free(t);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaMambaStep,
                         ::testing::Combine(::testing::Values(Shape{40, 72, 8, 16, 4, true},    // 72 = 2 x 32 + 8
                                                              Shape{24, 48, 16, 5, 3, true},   // d_state 5, width 3
                                                              Shape{16, 40, 6, 4, 4, false},   // dt_rank 6
                                                              Shape{16, 32, 8, 20, 4, false}), // d_state 20
                                            ::testing::Bool()));

#ifdef FLASHKIT_WITH_CUDA
// The mixer-step kernel alone at every block width (64, 32, 16, 8 channels) with every cluster size forced (the
// backend picks both per device: mamba_step_channels, mamba_step_cluster; 1 without clusters), d_inner 264 (5, 9,
// 17, 33 blocks: the grid rounded up to whole clusters), 2056 (x_proj rows longer than the chunks preloaded before
// the PDL wait) and 5120 (mamba-2.8b's), rows of x_proj (24 + 2 x 13 = 50) not a multiple of the 16, 8 or 4 warps:
// outputs vs f64, NaN-poisoned first, over 3 steps; and every width and cluster size gives the bits of width 32
// without clusters (the width changes who computes what, never a sum's order; width 64 adds a thread's two states
// in the order of the 16-thread version's first shuffle).
class CudaMambaStepKernel : public ::testing::TestWithParam<int64_t> {};
TEST_P(CudaMambaStepKernel, EveryWidthAndClusterSizeMatchesF64) {
  if (cuda_device_count() <= 0) GTEST_SKIP() << "no CUDA device (or no CUDA build)";
  const int64_t Di = GetParam();
  constexpr int64_t R = 24, N = 13, P = R + 2 * N;
  auto to_bf = [](const std::vector<float>& v) {
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]);
    return b;
  };
  const auto wx = to_bf(rnd(size_t(P * Di), 1, -0.2f, 0.2f)), wdt = to_bf(rnd(size_t(Di * R), 2, -0.3f, 0.3f));
  const auto bias = rnd(size_t(Di), 3, -3.f, -1.f), A = rnd(size_t(Di * N), 4, -2.f, -0.1f),
             D = rnd(size_t(Di), 5, 0.5f, 1.5f), state0 = rnd(size_t(Di * N), 6, -1.f, 1.f);
  const auto dev = device_buffer;
  void* d_wx = dev(wx.data(), wx.size() * 2);
  void* d_wdt = dev(wdt.data(), wdt.size() * 2);
  void* d_bias = dev(bias.data(), bias.size() * 4);
  void* d_A = dev(A.data(), A.size() * 4);
  void* d_D = dev(D.data(), D.size() * 4);
  void* d_state = dev(nullptr, state0.size() * 4);
  void* d_xc = dev(nullptr, size_t(Di) * 4);
  void* d_z = dev(nullptr, size_t(Di) * 4);
  void* d_dbc = dev(nullptr, size_t(P) * 4);
  void* d_dt = dev(nullptr, size_t(Di) * 4);
  void* d_y = dev(nullptr, size_t(Di) * 4);
  std::vector<std::vector<std::vector<float>>> bits(3);  // per step: dbc, dt, y, state of width 32 without clusters
  for (const auto& [ch, cl] : {std::pair{32, 1}, {32, 2}, {32, 4}, {32, 8}, {32, 16}, {16, 1}, {16, 2}, {16, 4},
                               {16, 8}, {16, 16}, {8, 1}, {8, 2}, {8, 4}, {8, 8}, {8, 16}, {64, 1}, {64, 2},
                               {64, 4}, {64, 8}, {64, 16}}) {
    std::vector<double> sref(state0.begin(), state0.end());
    ASSERT_EQ(cudaMemcpy(d_state, state0.data(), state0.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    for (int step = 0; step < 3; ++step) {
      const auto xc = rnd(size_t(Di), 10 + uint64_t(step), -1.f, 1.f);
      const auto z = rnd(size_t(Di), 20 + uint64_t(step), -2.f, 2.f);
      ASSERT_EQ(cudaMemcpy(d_xc, xc.data(), xc.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(d_z, z.data(), z.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      for (void* p : {d_dbc, d_dt, d_y})  // NaN
        ASSERT_EQ(cudaMemset(p, 0xff, (p == d_dbc ? size_t(P) : size_t(Di)) * 4), cudaSuccess);
      engine::cuda::MambaStepArgs a;
      a.xc = static_cast<const float*>(d_xc), a.z = static_cast<const float*>(d_z);
      a.w_x = static_cast<const uint16_t*>(d_wx), a.w_dt = static_cast<const uint16_t*>(d_wdt);
      a.dt_bias = static_cast<const float*>(d_bias), a.A = static_cast<const float*>(d_A);
      a.D = static_cast<const float*>(d_D), a.state = static_cast<float*>(d_state);
      a.dbc = static_cast<float*>(d_dbc), a.dt = static_cast<float*>(d_dt), a.y = static_cast<float*>(d_y);
      a.d_inner = Di, a.dt_rank = int(R), a.d_state = int(N), a.cluster = cl, a.channels = ch;
      try {
        engine::cuda::mamba_mixer_step(a, nullptr);
      } catch (const Error& e) {  // a forced cluster size this device does not run (before sm_90; 16: non-portable)
        EXPECT_GT(cl, 1) << e.what();
        break;
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "width " << ch << ", cluster " << cl;
      std::vector<float> dbc(static_cast<size_t>(P)), dt(static_cast<size_t>(Di)), y(static_cast<size_t>(Di)),
          st(state0.size());
      ASSERT_EQ(cudaMemcpy(dbc.data(), d_dbc, dbc.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dt.data(), d_dt, dt.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(y.data(), d_y, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(st.data(), d_state, st.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
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
      const std::string at =
          "width " + std::to_string(ch) + ", cluster " + std::to_string(cl) + ", step " + std::to_string(step);
      EXPECT_LT(rel(dbc, dr), 1e-5) << at;
      EXPECT_LT(rel(dt, tr), 1e-5) << at;
      EXPECT_LT(rel(y, yr), 1e-5) << at;
      EXPECT_LT(rel(st, sref), 1e-5) << at;
      auto& b = bits[size_t(step)];
      if (b.empty()) {
        b = {dbc, dt, y, st};
      } else {
        EXPECT_EQ(dbc, b[0]) << at << ": dbc differs from width 32 without clusters";
        EXPECT_EQ(dt, b[1]) << at << ": dt differs from width 32 without clusters";
        EXPECT_EQ(0, std::memcmp(y.data(), b[2].data(), y.size() * 4)) << at << ": y differs from width 32";
        EXPECT_EQ(0, std::memcmp(st.data(), b[3].data(), st.size() * 4)) << at << ": state differs from width 32";
      }
    }
  }
  for (void* p : {d_wx, d_wdt, d_bias, d_A, d_D, d_state, d_xc, d_z, d_dbc, d_dt, d_y}) cudaFree(p);
}
INSTANTIATE_TEST_SUITE_P(Inner, CudaMambaStepKernel, ::testing::Values(int64_t(264), int64_t(2056), int64_t(5120)));

// Shapes outside the kernel's preconditions are refused by name before anything is launched.
TEST(CudaMambaStepLauncher, RefusesShapesItCannotRun) {
  if (cuda_device_count() <= 0) GTEST_SKIP() << "no CUDA device (or no CUDA build)";
  alignas(16) static uint16_t w[16];
  static float f[64];
  auto args = [&] {
    engine::cuda::MambaStepArgs a;
    a.xc = a.z = a.A = f, a.w_x = a.w_dt = w, a.state = a.dbc = a.dt = a.y = f;
    a.d_inner = 64, a.dt_rank = 8, a.d_state = 16;
    return a;
  };
  auto status_of = [](const engine::cuda::MambaStepArgs& a) {
    try {
      engine::cuda::mamba_mixer_step(a, nullptr);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("mamba_mixer_step"), std::string::npos) << e.what();
      return e.status();
    }
    return Status::ok;
  };
  auto a = args();
  a.d_inner = 70;  // x_proj's K % 8
  EXPECT_EQ(status_of(a), Status::invalid_argument);
  a = args(), a.dt_rank = 6;
  EXPECT_EQ(status_of(a), Status::invalid_argument);
  a = args(), a.d_state = 17;
  EXPECT_EQ(status_of(a), Status::invalid_argument);
  a = args(), a.cluster = 3;
  EXPECT_EQ(status_of(a), Status::invalid_argument);
  a = args(), a.cluster = 32;
  EXPECT_EQ(status_of(a), Status::invalid_argument);
  for (int ch : {4, 12, 128, -8}) {  // channels per block: 8, 16, 32, 64 or 0 (automatic)
    a = args(), a.channels = ch;
    EXPECT_EQ(status_of(a), Status::invalid_argument) << ch;
  }
  a = args(), a.y = nullptr;
  EXPECT_EQ(status_of(a), Status::invalid_argument);
}

// The one-row GEMV under every launch plan (engine/gemv_plan.hpp; Tuning::cuda_gemv_plan: legacy, balanced,
// automatic) gives the same bits: the plan changes which warp reads which row and how many chunks a step loads,
// never a sum's order. Shapes: mamba-2.8b's in_proj with the input norm and the conv epilogue (10240 x 2560: the
// balanced plan's U 5 shape, 4 rows a warp), its out_proj (2560 x 5120), mamba-130m's in_proj (3072 x 768) and an
// odd one (1001 x 1288). y against f64 too; outputs NaN-poisoned before each launch.
TEST(CudaGemvPlan, EveryPlanGivesTheSameBits) {
  if (cuda_device_count() <= 0) GTEST_SKIP() << "no CUDA device (or no CUDA build)";
  struct Shape { int64_t N, K, conv_channels; };
  for (const Shape sh : {Shape{10240, 2560, 5120}, Shape{2560, 5120, 0}, Shape{3072, 768, 1536}, Shape{1001, 1288, 0}}) {
    const int64_t N = sh.N, K = sh.K, Di = sh.conv_channels;
    constexpr int W = 4;
    std::vector<uint16_t> w(size_t(N * K));
    {
      const auto wf = rnd(w.size(), 31, -0.05f, 0.05f);
      for (size_t i = 0; i < w.size(); ++i) w[i] = f32_to_bf16(wf[i]);
    }
    const auto x = rnd(size_t(K), 32, -1.f, 1.f), nw = rnd(size_t(K), 33, 0.5f, 1.5f);
    const auto cw = rnd(size_t(std::max<int64_t>(Di, 1) * W), 34, -0.5f, 0.5f),
               cb = rnd(size_t(std::max<int64_t>(Di, 1)), 35, -0.2f, 0.2f),
               st0 = rnd(size_t(std::max<int64_t>(Di, 1) * W), 36, -1.f, 1.f);
    const auto dev = device_buffer;
    void* d_w = dev(w.data(), w.size() * 2);
    void* d_x = dev(x.data(), x.size() * 4);
    void* d_nw = dev(nw.data(), nw.size() * 4);
    void* d_cw = dev(cw.data(), cw.size() * 4);
    void* d_cb = dev(cb.data(), cb.size() * 4);
    void* d_st = dev(nullptr, st0.size() * 4);
    void* d_xc = dev(nullptr, cb.size() * 4);
    void* d_y = dev(nullptr, size_t(N) * 4);
    void* d_counter = dev(nullptr, 4);
    ASSERT_EQ(cudaMemset(d_counter, 0, 4), cudaSuccess);
    std::vector<std::vector<float>> first;
    for (int mode : {1, 2, 0}) {
      Tuning t = default_tuning();
      t.cuda_gemv_plan = mode;
      engine::cuda::ScopedLaunchTuning scope(t);
      ASSERT_EQ(cudaMemcpy(d_st, st0.data(), st0.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemset(d_y, 0xff, size_t(N) * 4), cudaSuccess);
      ASSERT_EQ(cudaMemset(d_xc, 0xff, cb.size() * 4), cudaSuccess);
      engine::cuda::GemvIn in;
      in.x = d_x, in.ldx = K, in.norm_w = static_cast<const float*>(d_nw), in.eps = 1e-5f;
      engine::cuda::GemvOut out;
      out.y = d_y, out.ldy = N;
      if (Di > 0) {
        out.conv_w = static_cast<const float*>(d_cw), out.conv_b = static_cast<const float*>(d_cb);
        out.conv_state = static_cast<float*>(d_st), out.conv_out = static_cast<float*>(d_xc);
        out.conv_channels = Di, out.conv_width = W;
      }
      engine::cuda::gemv_bf16(in, static_cast<const uint16_t*>(d_w), N, K, 1, out,
                              static_cast<unsigned*>(d_counter), nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "plan " << mode;
      std::vector<float> y(static_cast<size_t>(N)), xc(cb.size()), st(st0.size());
      ASSERT_EQ(cudaMemcpy(y.data(), d_y, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(xc.data(), d_xc, xc.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(st.data(), d_st, st.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      const std::string at = std::to_string(N) + " x " + std::to_string(K) + ", plan " + std::to_string(mode);
      if (first.empty()) {
        double ss = 0;
        for (float v : x) ss += double(v) * v;
        const double r = 1.0 / std::sqrt(ss / double(K) + 1e-5);
        std::vector<double> yr(static_cast<size_t>(N));
        for (int64_t n = 0; n < N; ++n)
          for (int64_t k = 0; k < K; ++k)
            yr[size_t(n)] += double(bf16_to_f32(w[size_t(n * K + k)])) * x[size_t(k)] * r * nw[size_t(k)];
        EXPECT_LT(rel(y, yr), 1e-5) << at;
        first = {y, xc, st};
      } else {
        EXPECT_EQ(0, std::memcmp(y.data(), first[0].data(), y.size() * 4)) << at << ": y differs from legacy";
        EXPECT_EQ(0, std::memcmp(xc.data(), first[1].data(), xc.size() * 4)) << at << ": xc differs from legacy";
        EXPECT_EQ(0, std::memcmp(st.data(), first[2].data(), st.size() * 4)) << at << ": state differs";
      }
    }
    for (void* p : {d_w, d_x, d_nw, d_cw, d_cb, d_st, d_xc, d_y, d_counter}) cudaFree(p);
  }
}
#endif

// A tiny random MambaForCausalLM checkpoint (HF names): hidden 40, d_inner 80 (not a multiple of 32), dt_rank
// `rank`, d_state 16.
fs::path make_model(const std::string& name, int rank) {
  const fs::path dir = fs::temp_directory_path() / ("flashkit_mamba_fuse_" + name + "_" + std::to_string(::getpid()));
  fk_test::TinyMamba m;
  m.vocab = 61, m.hidden = 40, m.d_state = 16, m.layers = 3, m.conv = 4, m.dt_rank = rank, m.a_log = 0.5f, m.seed = 11;
  fk_test::write_tiny_mamba(dir, m);
  return dir;
}

// The same prompt and decode steps with fusion on and off: logits within 1e-4 (f32 intermediates; the fused kernels
// sum in the unfused kernels' orders) over 24 decode steps, the steps after the first replaying captured graphs;
// fused with the mixer's block width forced to 64, 32, 16 and 8 channels (Tuning::cuda_mamba_channels) and
// automatic.
TEST(CudaMambaFusion, DecodeLogitsMatchUnfused) {
  if (cuda_device_count() <= 0) GTEST_SKIP() << "no CUDA device (or no CUDA build)";
  for (const auto& [rank, width] : {std::pair{8, 0}, {8, 64}, {8, 32}, {8, 16}, {8, 8}, {6, 0}}) {
    // rank 6: the mixer runs unfused (dt_proj's K % 8 != 0), the conv epilogue still fuses
    const fs::path dir = make_model("r" + std::to_string(rank) + "w" + std::to_string(width), rank);
    LoadOptions on, off;
    on.device = off.device = "cuda";
    on.tuning = off.tuning = default_tuning();
    on.tuning->cuda_fuse = true;
    on.tuning->cuda_mamba_channels = width;
    off.tuning->cuda_fuse = false;
    auto mon = Model::load(dir, on);
    auto moff = Model::load(dir, off);
    auto son = mon->new_session();
    auto soff = moff->new_session();
    const std::vector<int32_t> prompt = {3, 17, 59, 0, 42, 8, 8, 23, 1};
    son->prefill(std::span<const int32_t>(prompt));
    soff->prefill(std::span<const int32_t>(prompt));
    auto rel32 = [](std::span<const float> a, std::span<const float> b) {
      double d = 0, r = 1e-30;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!std::isfinite(a[i])) return double(INFINITY);
        d = std::max(d, double(std::fabs(a[i] - b[i])));
        r = std::max(r, double(std::fabs(b[i])));
      }
      return d / r;
    };
    std::mt19937 g(5);
    for (int step = 0; step < 24; ++step) {
      const int32_t id = int32_t(g() % 61);
      son->decode(id);
      soff->decode(id);
      ASSERT_LE(rel32(son->logits(), soff->logits()), 1e-4)
          << "dt_rank " << rank << ", width " << width << ", decode step " << step;
    }
    EXPECT_GT(mon->graph_counts().replayed, 0) << "decode steps replay a captured graph";
    son.reset(), soff.reset(), mon.reset(), moff.reset();
    fs::remove_all(dir);
  }
}

}  // namespace
