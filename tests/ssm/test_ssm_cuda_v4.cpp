// The scan forward v4 (src/kernels/cuda/ssm/scan_v4.cu: cp.async ring, generations 5, 6, 8, 11 of choose_scan_kernel;
// scan_v4_pipe.cu: 13, chunk phases pipelined) against the f64 reference: odd sizes (seqlen not a multiple of the
// 16-step chunk, fewer and more chunks than the 4 stages, d_inner not a multiple of the 32-channel block or of the
// 4-channel copies, d_state 1..16, batch 1..3), with and without z, D, delta bias, softplus and the state; both copy
// paths (16-byte when every pointer and stride allows it, 4-byte otherwise: padded rows and a shifted base pointer
// force it); y poisoned first and its padding checked untouched; the final state carried into a second call and into
// decode steps. Skipped without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "kernels/cuda/ssm/ssm_cuda.hpp"
#include "kernels/ssm_choice.hpp"
#include "ssm_cuda_fixture.hpp"

using namespace flashkit;
using namespace ssm_test;

namespace {

// two / four states per thread; four, one exp on the FMA pipe; v4_npt4 with less per-chunk overhead (lean); lean with
// its chunk phases software-pipelined (13)
constexpr int kV4Generations[] = {5, 6, 8, 11, 13};

// A [batch, seqlen, d_inner] tensor in rows of d_inner + pad elements, starting `shift` elements into the buffer.
struct Rows {
  int64_t batch, seqlen, d_inner, pad, shift;
  int64_t row() const { return d_inner + pad; }
  size_t size() const { return size_t(shift + batch * seqlen * row()); }
  size_t at(int64_t b, int64_t t, int64_t c) const { return size_t(shift + (b * seqlen + t) * row() + c); }
  std::vector<float> spread(const std::vector<float>& dense, float fill) const {
    std::vector<float> v(size(), fill);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < seqlen; ++t)
        for (int64_t c = 0; c < d_inner; ++c) v[at(b, t, c)] = dense[size_t((b * seqlen + t) * d_inner + c)];
    return v;
  }
  std::vector<float> gather(const std::vector<float>& v) const {
    std::vector<float> d(size_t(batch * seqlen * d_inner));
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < seqlen; ++t)
        for (int64_t c = 0; c < d_inner; ++c) d[size_t((b * seqlen + t) * d_inner + c)] = v[at(b, t, c)];
    return d;
  }
  // Elements outside the tensor (padding and the shifted start) that are not NaN: the kernel wrote there.
  int64_t touched_outside(const std::vector<float>& v) const {
    std::vector<char> in(v.size(), 0);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < seqlen; ++t)
        for (int64_t c = 0; c < d_inner; ++c) in[at(b, t, c)] = 1;
    int64_t n = 0;
    for (size_t i = 0; i < v.size(); ++i) n += !in[i] && !std::isnan(v[i]);
    return n;
  }
};

struct V4Case {
  int64_t batch, seqlen, d_inner, d_state;
  bool with_state, with_z, with_D, with_bias, softplus;
  int64_t pad, shift;  // pad % 4 != 0 or shift % 4 != 0 (or d_inner % 4 != 0 with pad 0): the 4-byte copy path
};

std::string describe(const V4Case& k) {
  return "b" + std::to_string(k.batch) + " L" + std::to_string(k.seqlen) + " Di" + std::to_string(k.d_inner) + " N" +
         std::to_string(k.d_state) + (k.with_state ? " state" : "") + (k.with_z ? " z" : "") + (k.with_D ? " D" : "") +
         (k.with_bias ? " bias" : "") + (k.softplus ? " softplus" : "") + " pad" + std::to_string(k.pad) + " shift" +
         std::to_string(k.shift);
}

class CudaScanV4 : public ::testing::TestWithParam<V4Case> {};

TEST_P(CudaScanV4, MatchesReference) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const V4Case k = GetParam();
  ScanProblem p(k.batch, k.seqlen, k.d_inner, k.d_state, k.with_D, k.with_z, k.with_bias, 31);
  if (!k.softplus) p.positive_delta();
  std::vector<float> st0(size_t(k.batch * k.d_inner * k.d_state));
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (auto& e : st0) e = d(rng);
  auto a = p.args();
  a.delta_softplus = k.softplus;
  std::vector<float> st = st0;
  if (k.with_state) a.state = view(st, {k.batch, k.d_inner, k.d_state});
  a.impl = SsmImpl::reference;
  selective_scan_forward(a);
  const std::vector<float> ref = p.y, ref_st = st;

  const Rows rows{k.batch, k.seqlen, k.d_inner, k.pad, k.shift};
  const float nan = std::nanf("");
  for (int generation : kV4Generations) {
    Dev u(rows.spread(p.u, 7.f)), dl(rows.spread(p.delta, 7.f)), z(rows.spread(p.z, 7.f)), y(rows.spread(p.y, nan));
    Dev A(p.A), B(p.B), C(p.C), D(p.D), bias(p.bias), s(st0);
    poison(p.y);
    kernels::ScanArgs g;
    g.batch = k.batch, g.seqlen = k.seqlen, g.d_inner = k.d_inner, g.d_state = k.d_state;
    g.u = u.p + k.shift, g.delta = dl.p + k.shift, g.z = k.with_z ? z.p + k.shift : nullptr, g.y = y.p + k.shift;
    g.A = A.p, g.B = B.p, g.C = C.p;
    g.D = k.with_D ? D.p : nullptr;
    g.delta_bias = k.with_bias ? bias.p : nullptr;
    g.state = k.with_state ? s.p : nullptr;
    g.u_b = g.dl_b = g.z_b = g.y_b = k.seqlen * rows.row();
    g.u_t = g.dl_t = g.z_t = g.y_t = rows.row();
    g.B_b = g.C_b = k.seqlen * k.d_state;
    g.B_t = g.C_t = k.d_state;
    g.softplus = k.softplus;
    const std::string name = kernels::selective_scan_cuda(g, nullptr, generation);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << name;
    EXPECT_EQ(name, kernels::scan_kernel_name(kernels::choose_scan_kernel(k.d_state, false, generation)));
    const std::vector<float> out = y.get();
    EXPECT_LE(rel_err(rows.gather(out), ref), 1e-4) << name << " " << describe(k);
    EXPECT_EQ(rows.touched_outside(out), 0) << name << " wrote outside y, " << describe(k);
    if (k.with_state) {
      EXPECT_LE(rel_err(s.get(), ref_st), 1e-4) << name << " final state, " << describe(k);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaScanV4,
    ::testing::Values(V4Case{1, 1, 1, 1, false, true, true, true, true, 0, 0},
                      V4Case{2, 17, 19, 16, true, true, true, true, true, 0, 0},     // 4-byte path, 2 chunks
                      V4Case{3, 100, 64, 8, true, true, true, true, true, 0, 0},     // 16-byte path, 7 chunks
                      V4Case{1, 531, 96, 16, true, false, false, false, true, 0, 0},  // no z / D / bias
                      V4Case{2, 64, 40, 13, false, true, false, true, false, 0, 0},  // chunks = stages, no softplus
                      V4Case{3, 45, 33, 3, true, false, true, false, true, 4, 0},    // padded odd rows
                      V4Case{2, 40, 36, 16, true, true, true, true, true, 4, 0},     // padded, 16-byte path
                      V4Case{2, 33, 64, 16, true, true, true, true, true, 0, 1},     // shifted base: 4-byte path
                      V4Case{1, 1000, 45, 16, true, true, true, true, false, 3, 0},  // long, no softplus
                      V4Case{1, 15, 128, 2, false, true, true, true, true, 0, 0}));  // one partial chunk

// Chunked prefill through v4 then decode steps, each continuing the previous call's final state, against one pass of
// the reference over the whole sequence.
TEST(CudaScanV4Continuation, ChunksThenStepsMatchOnePass) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (int generation : kV4Generations)
    for (int64_t Di : {45, 64})
      for (int64_t N : {5, 16}) {
        const int64_t b = 2, L1 = 37, L2 = 20, steps = 3, L = L1 + L2 + steps;
        ScanProblem p(b, L, Di, N, true, true, true, 17);
        auto a = p.args();
        a.impl = SsmImpl::reference;
        std::vector<float> st(size_t(b * Di * N), 0.f);
        a.state = view(st, {b, Di, N});
        selective_scan_forward(a);
        const std::vector<float> ref = p.y, ref_st = st;
        poison(p.y);
        Dev u(p.u), dl(p.delta), A(p.A), B(p.B), C(p.C), D(p.D), z(p.z), bias(p.bias), y(p.y),
            s(std::vector<float>(size_t(b * Di * N), 0.f));
        auto part = [&](int64_t t0, int64_t len) {
          kernels::ScanArgs g;
          g.batch = b, g.seqlen = len, g.d_inner = Di, g.d_state = N;
          g.u = u.p + t0 * Di, g.delta = dl.p + t0 * Di, g.z = z.p + t0 * Di, g.y = y.p + t0 * Di;
          g.B = B.p + t0 * N, g.C = C.p + t0 * N;
          g.A = A.p, g.D = D.p, g.delta_bias = bias.p, g.state = s.p;
          g.u_b = g.dl_b = g.z_b = g.y_b = L * Di;
          g.u_t = g.dl_t = g.z_t = g.y_t = Di;
          g.B_b = g.C_b = L * N;
          g.B_t = g.C_t = N;
          return g;
        };
        kernels::selective_scan_cuda(part(0, L1), nullptr, generation);
        kernels::selective_scan_cuda(part(L1, L2), nullptr, generation);
        for (int64_t t = L1 + L2; t < L; ++t) kernels::selective_scan_step_cuda(part(t, 1));
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::string tag = "generation " + std::to_string(generation) + " Di " + std::to_string(Di) + " N " +
                                std::to_string(N);
        EXPECT_LE(rel_err(y.get(), ref), 1e-4) << tag;
        EXPECT_LE(rel_err(s.get(), ref_st), 1e-4) << tag;
      }
}

// The lean generations' (11, 13) fast softplus and silu at their branch points and limits (softplus: x > 15 taken as x, x
// down to -30, where e^-|x| is tiny; silu: z beyond +-88, where e^-z overflows or flushes to zero and the quotient
// must be the limit, not NaN), against the reference and against v4_npt4 (generation 6) on the same inputs; y is
// checked per element where the gate is at its limits (|z| > 88: y = z (Ch + Du) or 0, never NaN).
TEST(CudaScanV4Lean, ExtremeDeltaAndGateMatchReference) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const int64_t b = 2, L = 45, Di = 38, N = 16;
  ScanProblem p(b, L, Di, N, true, true, true, 41);
  for (size_t i = 0; i < p.delta.size(); ++i) p.delta[i] = -30.f + 60.f * float((i * 7919) % 1001) / 1000.f;
  for (size_t i = 0; i < p.z.size(); ++i) p.z[i] = -120.f + 240.f * float((i * 104729) % 997) / 996.f;
  auto a = p.args();
  a.impl = SsmImpl::reference;
  selective_scan_forward(a);
  const std::vector<float> ref = p.y;
  for (int generation : {6, 11, 13}) {
    poison(p.y);
    Dev u(p.u), dl(p.delta), A(p.A), B(p.B), C(p.C), D(p.D), z(p.z), bias(p.bias), y(p.y);
    kernels::ScanArgs g;
    g.batch = b, g.seqlen = L, g.d_inner = Di, g.d_state = N;
    g.u = u.p, g.delta = dl.p, g.z = z.p, g.y = y.p, g.A = A.p, g.B = B.p, g.C = C.p, g.D = D.p;
    g.delta_bias = bias.p;
    g.u_b = g.dl_b = g.z_b = g.y_b = L * Di;
    g.u_t = g.dl_t = g.z_t = g.y_t = Di;
    g.B_b = g.C_b = L * N;
    g.B_t = g.C_t = N;
    const std::string name = kernels::selective_scan_cuda(g, nullptr, generation);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << name;
    const std::vector<float> out = y.get();
    EXPECT_LE(rel_err(out, ref), 1e-4) << name;
    double scale = 0;
    for (float r : ref) scale = std::max(scale, std::fabs(double(r)));
    int64_t bad = 0, checked = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      if (p.z[i] < -88.f) bad += !(std::fabs(out[i]) <= 1e-20f), ++checked;  // the limit 0 (the reference's < 1e-30)
      if (p.z[i] > 88.f) bad += !(std::fabs(double(out[i]) - ref[i]) <= 1e-4 * scale), ++checked;  // z (Ch + Du)
    }
    EXPECT_GT(checked, 0);
    EXPECT_EQ(bad, 0) << name << ": elements with |z| > 88 off their limit";
  }
}

}  // namespace
