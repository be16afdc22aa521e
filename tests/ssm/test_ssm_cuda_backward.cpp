// The CUDA selective-scan backward (src/kernels/cuda/ssm/scan_backward.cu) against the f64 reference backward on
// random inputs with NaN-poisoned gradient buffers, odd shapes (partial last chunk, one step, long sequences, d_state
// below and above 16), with and without D, z, the delta bias and softplus, both generations of plan_scan_backward
// (0: production, 1: the one-state-per-thread reverse pass, d_state <= 16); bit-for-bit repeatable; and against
// central differences of the CUDA forward. Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>

#include "kernels/cuda/ssm/ssm_cuda.hpp"
#include "ssm_cuda_fixture.hpp"

using namespace flashkit;
using namespace ssm_test;

namespace {

struct BwdCase { int64_t batch, seqlen, d_inner, d_state; bool D, z, bias, softplus; };

std::string describe(const BwdCase& k) {
  return "b" + std::to_string(k.batch) + " L" + std::to_string(k.seqlen) + " Di" + std::to_string(k.d_inner) + " N" +
         std::to_string(k.d_state) + " D" + std::to_string(k.D) + " z" + std::to_string(k.z) + " bias" +
         std::to_string(k.bias) + " softplus" + std::to_string(k.softplus);
}

constexpr const char* kNames[] = {"du", "ddelta", "dA", "dB", "dC", "dD", "dz", "ddelta_bias"};

// The eight gradients (absent ones empty) of one backward call on `dev`, from poisoned buffers.
struct Grads {
  std::vector<std::vector<float>> v;
  Grads(const ScanProblem& p, const BwdCase& k) {
    v = {std::vector<float>(p.u.size()), std::vector<float>(p.u.size()), std::vector<float>(p.A.size()),
         std::vector<float>(p.B.size()), std::vector<float>(p.C.size()), std::vector<float>(k.D ? p.D.size() : 0),
         std::vector<float>(k.z ? p.z.size() : 0), std::vector<float>(k.bias ? p.bias.size() : 0)};
    for (auto& e : v) poison(e);
  }
  SelectiveScanGrads views(const BwdCase& k) {
    const int64_t b = k.batch, L = k.seqlen, Di = k.d_inner, N = k.d_state;
    auto opt = [](bool wanted, std::vector<float>& x, std::initializer_list<int64_t> shape) {
      return wanted ? view(x, shape) : TensorView{};
    };
    return {view(v[0], {b, L, Di}), view(v[1], {b, L, Di}), view(v[2], {Di, N}),  view(v[3], {b, L, N}),
            view(v[4], {b, L, N}),  opt(k.D, v[5], {Di}),     opt(k.z, v[6], {b, L, Di}), opt(k.bias, v[7], {Di})};
  }
};

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::vector<float> w(n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (auto& e : w) e = d(rng);
  return w;
}

// The CUDA backward of problem p with output gradient w; the gradients come back on the host.
std::vector<std::vector<float>> cuda_grads(ScanProblem& p, const BwdCase& k, std::vector<float>& w,
                                           std::string* error = nullptr) {
  auto a = p.args();
  a.delta_softplus = k.softplus;
  Grads hg(p, k);
  SelectiveScanGrads hv = hg.views(k);
  Dev u(p.u), dl(p.delta), A(p.A), B(p.B), C(p.C), D(p.D), z(p.z), bias(p.bias), y(p.y), dout(w);
  std::vector<std::unique_ptr<Dev>> gd;
  for (auto& e : hg.v) gd.push_back(std::make_unique<Dev>(e));  // poisoned on the device too
  SelectiveScanArgs g = a;
  g.impl = SsmImpl::automatic;
  g.u = on(u, a.u); g.delta = on(dl, a.delta); g.A = on(A, a.A); g.B = on(B, a.B); g.C = on(C, a.C);
  g.y = on(y, a.y);
  if (k.D) g.D = on(D, a.D);
  if (k.z) g.z = on(z, a.z);
  if (k.bias) g.delta_bias = on(bias, a.delta_bias);
  TensorView* views[] = {&hv.du, &hv.ddelta, &hv.dA, &hv.dB, &hv.dC, &hv.dD, &hv.dz, &hv.ddelta_bias};
  const bool wanted[] = {true, true, true, true, true, k.D, k.z, k.bias};
  for (size_t i = 0; i < 8; ++i)
    if (wanted[i]) *views[i] = on(*gd[i], *views[i]);
  try {
    selective_scan_backward(g, on(dout, view(w, {k.batch, k.seqlen, k.d_inner})), hv);
  } catch (const std::exception& e) {
    if (error) *error = e.what();
    ADD_FAILURE() << e.what();
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<std::vector<float>> out;
  for (auto& d : gd) out.push_back(d->get());
  return out;
}

// The same through the kernel entry point with plan_scan_backward's generation (1: the one-state-per-thread reverse
// pass), contiguous tensors.
std::vector<std::vector<float>> cuda_grads_generation(ScanProblem& p, const BwdCase& k, std::vector<float>& w,
                                                      int generation, std::string* kernel) {
  Grads hg(p, k);
  Dev u(p.u), dl(p.delta), A(p.A), B(p.B), C(p.C), D(p.D), z(p.z), bias(p.bias), y(p.y), dout(w);
  std::vector<std::unique_ptr<Dev>> gd;
  for (auto& e : hg.v) gd.push_back(std::make_unique<Dev>(e));
  kernels::ScanArgs a;
  a.batch = k.batch, a.seqlen = k.seqlen, a.d_inner = k.d_inner, a.d_state = k.d_state;
  a.u = u.p, a.delta = dl.p, a.A = A.p, a.B = B.p, a.C = C.p, a.y = y.p;
  a.D = k.D ? D.p : nullptr, a.z = k.z ? z.p : nullptr, a.delta_bias = k.bias ? bias.p : nullptr;
  const int64_t rows = k.seqlen * k.d_inner, nrows = k.seqlen * k.d_state;
  a.u_b = a.dl_b = a.z_b = a.y_b = rows;
  a.u_t = a.dl_t = a.z_t = a.y_t = k.d_inner;
  a.B_b = a.C_b = nrows;
  a.B_t = a.C_t = k.d_state;
  a.softplus = k.softplus;
  kernels::ScanGradArgs g;
  g.dout = dout.p, g.dout_b = rows, g.dout_t = k.d_inner;
  g.du = gd[0]->p, g.ddelta = gd[1]->p, g.dA = gd[2]->p, g.dB = gd[3]->p, g.dC = gd[4]->p;
  g.dD = k.D ? gd[5]->p : nullptr, g.dz = k.z ? gd[6]->p : nullptr, g.ddelta_bias = k.bias ? gd[7]->p : nullptr;
  *kernel = kernels::selective_scan_backward_cuda(a, g, nullptr, generation);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<std::vector<float>> out;
  for (auto& d : gd) out.push_back(d->get());
  return out;
}

class CudaScanBackward : public ::testing::TestWithParam<BwdCase> {};

TEST_P(CudaScanBackward, MatchesReference) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const BwdCase k = GetParam();
  ScanProblem p(k.batch, k.seqlen, k.d_inner, k.d_state, k.D, k.z, k.bias, 31 + uint32_t(k.seqlen));
  if (!k.softplus) p.positive_delta();
  std::vector<float> w = random_vec(p.y.size(), 17);
  Grads ref(p, k);
  {
    auto a = p.args();
    a.delta_softplus = k.softplus;
    a.impl = SsmImpl::reference;
    selective_scan_backward(a, view(w, {k.batch, k.seqlen, k.d_inner}), ref.views(k));
  }
  const auto got = cuda_grads(p, k, w);
  for (size_t i = 0; i < 8; ++i)
    if (!ref.v[i].empty()) EXPECT_LE(rel_err(got[i], ref.v[i]), 5e-4) << kNames[i] << " " << describe(k);
  if (k.d_state <= 16) {  // generation 1: the one-state-per-thread reverse pass
    std::string kernel;
    const auto g1 = cuda_grads_generation(p, k, w, 1, &kernel);
    EXPECT_EQ(kernel, "cuda.scan_bwd.v2.n16.split16");
    for (size_t i = 0; i < 8; ++i)
      if (!ref.v[i].empty())
        EXPECT_LE(rel_err(g1[i], ref.v[i]), 5e-4) << kNames[i] << " " << describe(k) << " " << kernel;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaScanBackward,
    ::testing::Values(BwdCase{1, 1, 1, 1, false, false, false, true},      // one step, one channel, one state
                      BwdCase{2, 17, 19, 16, true, true, true, true},      // a partial second chunk
                      BwdCase{3, 17, 37, 5, false, true, false, false},    // d_state 5, no softplus
                      BwdCase{2, 300, 45, 16, true, false, true, true},    // several blocks of channels
                      BwdCase{1, 1000, 33, 5, true, true, true, true},     // long: 63 chunks
                      BwdCase{2, 1000, 70, 16, false, false, false, false},
                      BwdCase{2, 37, 21, 40, true, true, true, true},      // 16 threads per channel (d_state > 16)
                      BwdCase{1, 300, 9, 64, false, true, true, true}));

// No atomics: two calls give the same bits (both generations).
TEST(CudaScanBackward, Deterministic) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const BwdCase k{2, 150, 200, 16, true, true, true, true};
  ScanProblem p(k.batch, k.seqlen, k.d_inner, k.d_state, k.D, k.z, k.bias, 7);
  std::vector<float> w = random_vec(p.y.size(), 3);
  const auto first = cuda_grads(p, k, w), second = cuda_grads(p, k, w);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(first[i], second[i]) << kNames[i];
  std::string kernel;
  const auto g1a = cuda_grads_generation(p, k, w, 1, &kernel), g1b = cuda_grads_generation(p, k, w, 1, &kernel);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(g1a[i], g1b[i]) << kNames[i] << " " << kernel;
}

// seqlen 0: the sums over time (dA, dD, ddelta_bias) are zero, not the poison.
TEST(CudaScanBackward, EmptySequenceGivesZeroSums) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const BwdCase k{2, 0, 5, 3, true, true, true, true};
  ScanProblem p(k.batch, k.seqlen, k.d_inner, k.d_state, k.D, k.z, k.bias, 7);
  std::vector<float> w(1, 1.f);  // a non-null pointer for the empty dout
  const auto got = cuda_grads(p, k, w);
  for (size_t i : {2, 5, 7})
    for (float x : got[i]) EXPECT_EQ(x, 0.f) << kNames[i];
}

// The CUDA backward against central differences of the CUDA forward (f32: a step of 1e-2 and a loose bound), loss
// sum(y * w), on a tiny shape with two chunks.
TEST(CudaScanBackward, MatchesFiniteDifferencesOfCudaForward) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (bool softplus : {true, false}) {
    const BwdCase k{2, 19, 3, 5, true, true, true, softplus};
    ScanProblem p(k.batch, k.seqlen, k.d_inner, k.d_state, true, true, true, 11);
    if (!softplus) p.positive_delta();
    std::vector<float> w = random_vec(p.y.size(), 2);
    const auto grads = cuda_grads(p, k, w);
    auto loss = [&]() {
      auto a = p.args();
      a.delta_softplus = softplus;
      Dev u(p.u), dl(p.delta), A(p.A), B(p.B), C(p.C), D(p.D), z(p.z), bias(p.bias), y(p.y);
      SelectiveScanArgs g = a;
      g.u = on(u, a.u); g.delta = on(dl, a.delta); g.A = on(A, a.A); g.B = on(B, a.B); g.C = on(C, a.C);
      g.D = on(D, a.D); g.z = on(z, a.z); g.delta_bias = on(bias, a.delta_bias); g.y = on(y, a.y);
      selective_scan_forward(g);
      const std::vector<float> yh = y.get();
      double s = 0;
      for (size_t i = 0; i < w.size(); ++i) s += double(w[i]) * yh[i];
      return s;
    };
    std::vector<float>* inputs[] = {&p.u, &p.delta, &p.A, &p.B, &p.C, &p.D, &p.z, &p.bias};
    for (size_t v = 0; v < 8; ++v)
      for (size_t i = 0; i < inputs[v]->size(); ++i) {
        std::vector<float>& x = *inputs[v];
        const float x0 = x[i], h = 1e-2f;
        x[i] = x0 + h;
        const double lp = loss();
        x[i] = x0 - h;
        const double lm = loss();
        x[i] = x0;
        const double fd = (lp - lm) / (double(x0 + h) - double(x0 - h));
        EXPECT_NEAR(grads[v][i], fd, 1e-2 * std::max(1.0, std::fabs(fd)))
            << kNames[v] << " index " << i << " softplus " << softplus;
      }
  }
}

}  // namespace
