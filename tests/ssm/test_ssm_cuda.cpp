// The CUDA scan, decode step and conv1d against the f64 reference on random inputs with poisoned outputs; skipped
// without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "kernels/cuda/ssm/ssm_cuda.hpp"
#include "kernels/ssm_choice.hpp"
#include "ssm_cuda_fixture.hpp"

using namespace flashkit;
using namespace ssm_test;

namespace {

struct Case { int64_t batch, seqlen, d_inner, d_state; bool with_state; };

class CudaScan : public ::testing::TestWithParam<Case> {};

TEST_P(CudaScan, MatchesReference) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Case k = GetParam();
  ScanProblem p(k.batch, k.seqlen, k.d_inner, k.d_state, true, true, true, 9);
  std::vector<float> st0(k.batch * k.d_inner * k.d_state);
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (auto& e : st0) e = d(rng);
  auto a = p.args();
  std::vector<float> st = st0;
  if (k.with_state) a.state = view(st, {k.batch, k.d_inner, k.d_state});
  a.impl = SsmImpl::reference;
  selective_scan_forward(a);
  const std::vector<float> ref = p.y, ref_st = st;
  poison(p.y);
  Dev u(p.u), dl(p.delta), A(p.A), B(p.B), C(p.C), D(p.D), z(p.z), bias(p.bias), y(p.y), s(st0);
  auto g = a;
  g.impl = SsmImpl::automatic;
  g.u = on(u, a.u); g.delta = on(dl, a.delta); g.A = on(A, a.A); g.B = on(B, a.B); g.C = on(C, a.C);
  g.D = on(D, a.D); g.z = on(z, a.z); g.delta_bias = on(bias, a.delta_bias); g.y = on(y, a.y);
  if (k.with_state) g.state = on(s, a.state);
  OpCost cost;
  selective_scan_forward(g, &cost);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_LE(rel_err(y.get(), ref), 1e-4) << cost.kernel;
  if (k.with_state) {
    EXPECT_LE(rel_err(s.get(), ref_st), 1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaScan,
                         ::testing::Values(Case{1, 1, 1, 1, false}, Case{2, 37, 19, 16, true},
                                           Case{3, 100, 130, 8, false}, Case{2, 33, 45, 64, true},
                                           Case{1, 531, 257, 16, true}));

// Every scan generation (choose_scan_kernel's generation input: 0 = production; 1 = v1; 2 and 3 = the other v3
// variants; 4 = v2; 5, 6, 8 = v4; 7 = v3 with two states per thread; 11 = lean v4; 13 = lean v4 pipelined;
// kernels::kScanGenerations) through the kernel entry point, on odd shapes with a partial last chunk, d_state below the
// 16 the v2 kernel is laid out for, with and without the initial state, z, D, bias and softplus.
struct GenCase { int64_t batch, seqlen, d_inner, d_state; bool with_state, with_z, softplus; };

class CudaScanGenerations : public ::testing::TestWithParam<GenCase> {};

TEST_P(CudaScanGenerations, BothMatchReference) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const GenCase k = GetParam();
  ScanProblem p(k.batch, k.seqlen, k.d_inner, k.d_state, true, k.with_z, true, 21);
  if (!k.softplus) p.positive_delta();
  std::vector<float> st0(k.batch * k.d_inner * k.d_state);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (auto& e : st0) e = d(rng);
  auto a = p.args();
  a.delta_softplus = k.softplus;
  std::vector<float> st = st0;
  if (k.with_state) a.state = view(st, {k.batch, k.d_inner, k.d_state});
  a.impl = SsmImpl::reference;
  selective_scan_forward(a);
  const std::vector<float> ref = p.y, ref_st = st;
  for (int generation : kernels::kScanGenerations) {
    poison(p.y);
    Dev u(p.u), dl(p.delta), A(p.A), B(p.B), C(p.C), D(p.D), z(p.z), bias(p.bias), y(p.y), s(st0);
    kernels::ScanArgs g;
    g.batch = k.batch, g.seqlen = k.seqlen, g.d_inner = k.d_inner, g.d_state = k.d_state;
    g.u = u.p, g.delta = dl.p, g.A = A.p, g.B = B.p, g.C = C.p, g.D = D.p, g.delta_bias = bias.p, g.y = y.p;
    g.z = k.with_z ? z.p : nullptr;
    g.state = k.with_state ? s.p : nullptr;
    const int64_t rows = k.seqlen * k.d_inner, nrows = k.seqlen * k.d_state;
    g.u_b = g.dl_b = g.z_b = g.y_b = rows;
    g.u_t = g.dl_t = g.z_t = g.y_t = k.d_inner;
    g.B_b = g.C_b = nrows;
    g.B_t = g.C_t = k.d_state;
    g.softplus = k.softplus;
    const std::string name = kernels::selective_scan_cuda(g, nullptr, generation);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(name, kernels::scan_kernel_name(kernels::choose_scan_kernel(k.d_state, false, generation)));
    EXPECT_LE(rel_err(y.get(), ref), 1e-4) << name;
    if (k.with_state) {
      EXPECT_LE(rel_err(s.get(), ref_st), 1e-4) << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaScanGenerations,
                         ::testing::Values(GenCase{2, 37, 19, 16, true, true, true},
                                           GenCase{3, 100, 130, 8, false, true, true},
                                           GenCase{1, 53, 67, 5, true, false, false},
                                           GenCase{2, 1, 33, 16, true, true, true},
                                           GenCase{1, 531, 257, 16, false, false, true},
                                           GenCase{2, 17, 16, 16, true, true, true},     // one 16-channel v3 block
                                           GenCase{1, 1000, 45, 16, true, true, true},
                                           GenCase{3, 300, 21, 5, false, true, false}));

TEST(CudaScanStep, StepsMatchReferenceScan) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (int64_t N : {16, 40}) {
    const int64_t b = 3, L = 9, Di = 77;
    ScanProblem p(b, L, Di, N, true, true, true, 13);
    auto a = p.args();
    a.impl = SsmImpl::reference;
    selective_scan_forward(a);
    const std::vector<float> ref = p.y;
    poison(p.y);
    Dev u(p.u), dl(p.delta), A(p.A), B(p.B), C(p.C), D(p.D), z(p.z), bias(p.bias), y(p.y),
        s(std::vector<float>(b * Di * N, 0.f));
    for (int64_t t = 0; t < L; ++t) {
      auto g = a;
      g.impl = SsmImpl::automatic;
      g.u = on(u, a.u); g.delta = on(dl, a.delta); g.A = on(A, a.A); g.B = on(B, a.B); g.C = on(C, a.C);
      g.D = on(D, a.D); g.z = on(z, a.z); g.delta_bias = on(bias, a.delta_bias); g.y = on(y, a.y);
      for (TensorView* v : {&g.u, &g.delta, &g.B, &g.C, &g.z, &g.y}) {
        v->data = static_cast<float*>(v->data) + t * v->strides[1];
        v->ndim = 2;
        v->shape[1] = v->shape[2];
        v->strides[1] = 1;
      }
      g.state = TensorView::contiguous(s.p, DType::f32, {b, Di, N}, Device::cuda);
      selective_scan_step(g);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_LE(rel_err(y.get(), ref), 1e-4) << "d_state " << N;
  }
}

TEST(CudaConv1d, MatchesReference) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (int64_t W : {4, 3}) {
    const int64_t b = 2, L = 41, Ch = 133;
    std::mt19937 rng(8);
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    std::vector<float> x(b * L * Ch), w(Ch * W), bias(Ch), out(b * L * Ch), st(b * Ch * W);
    for (auto* v : {&x, &w, &bias, &st})
      for (auto& e : *v) e = d(rng);
    const std::vector<float> st0 = st;
    CausalConv1dArgs a;
    a.x = view(x, {b, L, Ch}); a.weight = view(w, {Ch, W}); a.bias = view(bias, {Ch}); a.out = view(out, {b, L, Ch});
    a.conv_state = view(st, {b, Ch, W});
    a.impl = SsmImpl::reference;
    poison(out);
    causal_conv1d_forward(a);
    const std::vector<float> ref = out, ref_st = st;
    poison(out);
    Dev dx(x), dw(w), db(bias), dout(out), ds(st0);
    CausalConv1dArgs g = a;
    g.impl = SsmImpl::automatic;
    g.x = on(dx, a.x); g.weight = on(dw, a.weight); g.bias = on(db, a.bias); g.out = on(dout, a.out);
    g.conv_state = on(ds, a.conv_state);
    causal_conv1d_forward(g);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_LE(rel_err(dout.get(), ref), 1e-5) << "width " << W;
    EXPECT_LE(rel_err(ds.get(), ref_st), 1e-6) << "width " << W;
  }
}

}  // namespace
