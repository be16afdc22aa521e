// The CPU selective scan and conv1d against the f64 reference (random inputs, poisoned outputs, odd sizes), the
// chunked scan and the decode step against one whole scan, and the reference backward against f64 finite
// differences of the reference forward.
#include <gtest/gtest.h>

#include <cstring>

#include "flashkit/runtime.hpp"
#include "flashkit/tuning.hpp"
#include "ssm_fixture.hpp"

using namespace flashkit;
using namespace ssm_test;

namespace {

struct Shape {
  int64_t batch, seqlen, d_inner, d_state;
  bool D, z, bias, softplus;
};

class ScanGrid : public ::testing::TestWithParam<Shape> {};

TEST_P(ScanGrid, CpuMatchesReference) {
  const Shape s = GetParam();
  ScanProblem p(s.batch, s.seqlen, s.d_inner, s.d_state, s.D, s.z, s.bias, 7);
  if (!s.softplus) p.positive_delta();
  std::vector<float> ref(p.y.size());
  auto a = p.args();
  a.delta_softplus = s.softplus;
  a.impl = SsmImpl::reference;
  selective_scan_forward(a);
  ref = p.y;
  poison(p.y);
  a.impl = SsmImpl::cpu;
  OpCost cost;
  selective_scan_forward(a, &cost);
  EXPECT_EQ(cost.kernel, "cpu.scan.f32");
  EXPECT_LE(rel_err(p.y, ref), 2e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ScanGrid,
                         ::testing::Values(Shape{1, 1, 1, 1, true, true, true, true},
                                           Shape{2, 37, 19, 16, true, true, true, true},
                                           Shape{3, 65, 9, 8, false, false, false, true},
                                           Shape{1, 130, 24, 5, true, false, true, false},
                                           Shape{2, 17, 33, 64, false, true, false, true}));

// exp(dt * A) far below the f32 range (the CPU kernel's vectorized exp clamps its exponent there): the state forgets
// its past as the reference's does.
TEST(Scan, StrongDecayMatchesReference) {
  ScanProblem p(2, 19, 11, 16, true, true, true, 21);
  for (size_t i = 0; i < p.A.size(); ++i) p.A[i] = i % 3 ? -5000.f : -90.f;
  for (auto& d : p.delta) d += 3.f;  // dt ~ 3: dt * A down to -15000
  auto a = p.args();
  a.impl = SsmImpl::reference;
  selective_scan_forward(a);
  const std::vector<float> ref = p.y;
  poison(p.y);
  a.impl = SsmImpl::cpu;
  selective_scan_forward(a);
  EXPECT_LE(rel_err(p.y, ref), 2e-5);
}

// Two chunks carrying the state give the one-pass result; so do seqlen steps of selective_scan_step.
TEST(Scan, ChunksAndStepsMatchOnePass) {
  const int64_t b = 2, L = 23, Di = 13, N = 16, L1 = 10;
  ScanProblem p(b, L, Di, N, true, true, true, 3);
  auto a = p.args();
  a.impl = SsmImpl::reference;
  selective_scan_forward(a);
  const std::vector<float> whole = p.y;
  for (SsmImpl impl : {SsmImpl::reference, SsmImpl::cpu}) {
    // chunks: views over time [0, L1) and [L1, L)
    poison(p.y);
    std::vector<float> state(b * Di * N, 0.f);
    for (auto [t0, n] : {std::pair<int64_t, int64_t>{0, L1}, {L1, L - L1}}) {
      auto c = p.args();
      c.impl = impl;
      for (TensorView* t : {&c.u, &c.delta, &c.B, &c.C, &c.z, &c.y}) {
        t->data = static_cast<float*>(t->data) + t0 * t->strides[1];
        t->shape[1] = n;
      }
      c.state = view(state, {b, Di, N});
      selective_scan_forward(c);
    }
    EXPECT_LE(rel_err(p.y, whole), 2e-5) << "chunks, impl " << int(impl);
    // steps: [batch, d_inner] rows with the time stride skipped
    poison(p.y);
    std::fill(state.begin(), state.end(), 0.f);
    for (int64_t t = 0; t < L; ++t) {
      auto c = p.args();
      c.impl = impl;
      for (TensorView* v : {&c.u, &c.delta, &c.B, &c.C, &c.z, &c.y}) {
        v->data = static_cast<float*>(v->data) + t * v->strides[1];
        v->ndim = 2;
        v->shape[1] = v->shape[2];
        v->strides[1] = 1;
      }
      c.state = view(state, {b, Di, N});
      selective_scan_step(c);
    }
    EXPECT_LE(rel_err(p.y, whole), 2e-5) << "steps, impl " << int(impl);
  }
}

TEST(Conv1d, CpuMatchesReferenceChunkedAndStepped) {
  const int64_t b = 2, L = 29, Ch = 21, W = 4;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> x(b * L * Ch), w(Ch * W), bias(Ch), ref(b * L * Ch), out(b * L * Ch);
  for (auto* v : {&x, &w, &bias})
    for (auto& e : *v) e = d(rng);
  CausalConv1dArgs a;
  a.x = view(x, {b, L, Ch});
  a.weight = view(w, {Ch, W});
  a.bias = view(bias, {Ch});
  a.out = view(ref, {b, L, Ch});
  a.impl = SsmImpl::reference;
  poison(ref);
  causal_conv1d_forward(a);
  // check one element by hand: out[1, 5, 3]
  double s = bias[3];
  for (int64_t k = 0; k < W; ++k) s += double(w[3 * W + k]) * x[(1 * L + 5 - (W - 1) + k) * Ch + 3];
  EXPECT_NEAR(ref[(1 * L + 5) * Ch + 3], s / (1 + std::exp(-s)), 1e-5);
  for (SsmImpl impl : {SsmImpl::reference, SsmImpl::cpu}) {
    poison(out);
    a.impl = impl;
    a.out = view(out, {b, L, Ch});
    causal_conv1d_forward(a);
    EXPECT_LE(rel_err(out, ref), 1e-5);
    // a chunk of 11 then steps, through the conv state
    poison(out);
    std::vector<float> st(b * Ch * W, 0.f);
    CausalConv1dArgs c = a;
    c.conv_state = view(st, {b, Ch, W});
    c.x.shape[1] = c.out.shape[1] = 11;
    causal_conv1d_forward(c);
    for (int64_t t = 11; t < L; ++t) {
      CausalConv1dArgs one = a;
      one.conv_state = view(st, {b, Ch, W});
      for (TensorView* v : {&one.x, &one.out}) {
        v->data = static_cast<float*>(v->data) + t * Ch;
        v->ndim = 2;
        v->shape = {b, Ch, 0, 0};
        v->strides = {L * Ch, 1, 0, 0};
      }
      causal_conv1d_step(one);
    }
    EXPECT_LE(rel_err(out, ref), 1e-5) << "impl " << int(impl);
  }
}

// Every instruction-set build of the CPU kernels (kernels/cpu/ssm_cpu_{scalar,avx2,avx512}.cpp; a level this CPU
// lacks runs its widest) against the f64 reference: channel counts that leave a short last block at 8 and 16 lanes
// and at the conv's 64-channel blocks, delta over the range where softplus switches form (log1p(e) with 1 + e
// rounding to 1 below about -17, x itself above 20), and the states carried through calls of 1, 2 and 147 steps.
class EveryIsa : public ::testing::TestWithParam<CpuIsaCap> {
 protected:
  void SetUp() override {
    saved_ = default_tuning();
    Tuning t = saved_;
    t.cpu_isa = GetParam();
    set_default_tuning(t);
  }
  void TearDown() override { set_default_tuning(saved_); }
  Tuning saved_;
};

TEST_P(EveryIsa, ScanMatchesReference) {
  for (int64_t di : {1, 7, 33, 70})
    for (int64_t n : {1, 16, 19}) {
      ScanProblem p(2, 150, di, n, true, true, true, uint32_t(di * 100 + n));
      for (size_t i = 0; i < p.delta.size(); ++i) p.delta[i] = -40.f + 75.f * float(i % 97) / 96.f;  // -40 .. 35
      auto a = p.args();
      a.impl = SsmImpl::reference;
      selective_scan_forward(a);
      const std::vector<float> ref = p.y;
      // three calls carrying the state: 1, 2, then 147 steps (more than the kernel's time chunk of 64)
      std::vector<float> state(size_t(2 * di * n), 0.f);
      poison(p.y);
      for (auto [t0, len] : {std::pair<int64_t, int64_t>{0, 1}, {1, 2}, {3, 147}}) {
        auto c = p.args();
        c.impl = SsmImpl::cpu;
        for (TensorView* t : {&c.u, &c.delta, &c.B, &c.C, &c.z, &c.y}) {
          t->data = static_cast<float*>(t->data) + t0 * t->strides[1];
          t->shape[1] = len;
        }
        c.state = view(state, {2, di, n});
        selective_scan_forward(c);
      }
      EXPECT_LE(rel_err(p.y, ref), 2e-5) << cpu_isa(GetParam()) << " d_inner " << di << " d_state " << n;
    }
}

TEST_P(EveryIsa, Conv1dMatchesReference) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (int64_t ch : {1, 64, 150})
    for (int64_t W : {1, 2, 4, 7})
      for (bool with_bias : {true, false})
        for (bool silu : {true, false}) {
          const int64_t b = 2, L = 23;
          std::vector<float> x(b * L * ch), w(ch * W), bias(ch), ref(b * L * ch), out(b * L * ch), st(b * ch * W);
          for (auto* v : {&x, &w, &bias})
            for (auto& e : *v) e = 4.f * d(rng);  // pre-activations well past silu's knee
          CausalConv1dArgs a;
          a.x = view(x, {b, L, ch});
          a.weight = view(w, {ch, W});
          if (with_bias) a.bias = view(bias, {ch});
          a.silu = silu;
          a.out = view(ref, {b, L, ch});
          a.impl = SsmImpl::reference;
          causal_conv1d_forward(a);
          poison(out);
          std::fill(st.begin(), st.end(), 0.f);
          for (auto [t0, len] : {std::pair<int64_t, int64_t>{0, 1}, {1, 2}, {3, 20}}) {
            CausalConv1dArgs c = a;
            c.impl = SsmImpl::cpu;
            c.out = view(out, {b, L, ch});
            c.conv_state = view(st, {b, ch, W});
            for (TensorView* v : {&c.x, &c.out}) {
              v->data = static_cast<float*>(v->data) + t0 * ch;
              v->shape[1] = len;
            }
            causal_conv1d_forward(c);
          }
          EXPECT_LE(rel_err(out, ref), 1e-5)
              << cpu_isa(GetParam()) << " channels " << ch << " width " << W << " bias " << with_bias;
        }
}

INSTANTIATE_TEST_SUITE_P(Cpu, EveryIsa, ::testing::Values(CpuIsaCap::scalar, CpuIsaCap::avx2, CpuIsaCap::avx512),
                         [](const ::testing::TestParamInfo<CpuIsaCap>& i) {
                           return std::string(i.param == CpuIsaCap::scalar ? "scalar"
                                              : i.param == CpuIsaCap::avx2 ? "avx2" : "avx512");
                         });

// The reference's analytic gradients against central differences of the reference forward (f64 inside; f32
// inputs, so a step of 1e-3 and a loss of sum(y * w) with random w).
TEST(ScanBackward, MatchesFiniteDifferences) {
  for (SsmImpl impl : {SsmImpl::reference, SsmImpl::cpu})
  for (bool softplus : {true, false}) {
    const int64_t b = 2, L = 6, Di = 3, N = 4;
    ScanProblem p(b, L, Di, N, true, true, true, 11);
    if (!softplus) p.positive_delta();
    std::vector<float> w(p.y.size());
    std::mt19937 rng(2);
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    for (auto& e : w) e = d(rng);
    auto loss = [&]() {
      auto a = p.args();
      a.impl = SsmImpl::reference;
      a.delta_softplus = softplus;
      selective_scan_forward(a);
      double s = 0;
      for (size_t i = 0; i < w.size(); ++i) s += double(w[i]) * p.y[i];
      return s;
    };
    std::vector<float> du(p.u.size()), ddelta(p.u.size()), dA(p.A.size()), dB(p.B.size()), dC(p.C.size()),
        dD(p.D.size()), dz(p.z.size()), dbias(p.bias.size());
    for (auto* v : {&du, &ddelta, &dA, &dB, &dC, &dD, &dz, &dbias}) poison(*v);
    auto a = p.args();
    a.delta_softplus = softplus;
    a.impl = impl;
    SelectiveScanGrads g{view(du, {b, L, Di}), view(ddelta, {b, L, Di}), view(dA, {Di, N}), view(dB, {b, L, N}),
                         view(dC, {b, L, N}), view(dD, {Di}), view(dz, {b, L, Di}), view(dbias, {Di})};
    selective_scan_backward(a, view(w, {b, L, Di}), g);
    std::vector<std::pair<std::vector<float>*, std::vector<float>*>> pairs = {
        {&p.u, &du}, {&p.delta, &ddelta}, {&p.A, &dA}, {&p.B, &dB}, {&p.C, &dC}, {&p.D, &dD}, {&p.z, &dz},
        {&p.bias, &dbias}};
    for (auto [x, gx] : pairs)
      for (size_t i = 0; i < x->size(); ++i) {
        const float x0 = (*x)[i], h = 1e-3f;
        (*x)[i] = x0 + h;
        const double lp = loss();
        (*x)[i] = x0 - h;
        const double lm = loss();
        (*x)[i] = x0;
        const double fd = (lp - lm) / (double((x0 + h)) - double(x0 - h));
        EXPECT_NEAR((*gx)[i], fd, 2e-3 * std::max(1.0, std::fabs(fd)))
            << "impl " << int(impl) << " softplus " << softplus << " index " << i;
      }
  }
}

// The f32 CPU backward (OpenMP over channels, per-thread dB/dC partials) against the f64 reference's gradients on odd
// shapes, with and without the optional inputs, one thread and several.
TEST(ScanBackward, CpuMatchesReference) {
  struct Shape { int64_t b, L, Di, N; bool D, z, bias, softplus; };
  for (const Shape& s : {Shape{1, 1, 1, 1, false, false, false, true}, Shape{3, 37, 13, 7, true, true, true, true},
                         Shape{2, 50, 9, 16, true, false, true, false}, Shape{1, 19, 33, 5, false, true, false, true}})
    for (int threads : {1, 3}) {
      ScanProblem p(s.b, s.L, s.Di, s.N, s.D, s.z, s.bias, 5 + uint32_t(s.L));
      if (!s.softplus) p.positive_delta();
      std::vector<float> w(p.y.size());
      std::mt19937 rng(9);
      std::uniform_real_distribution<float> d(-1.f, 1.f);
      for (auto& e : w) e = d(rng);
      auto grads = [&](SsmImpl impl) {
        std::vector<std::vector<float>> out = {std::vector<float>(p.u.size()), std::vector<float>(p.u.size()),
                                               std::vector<float>(p.A.size()), std::vector<float>(p.B.size()),
                                               std::vector<float>(p.C.size()), std::vector<float>(p.D.size()),
                                               std::vector<float>(p.z.size()), std::vector<float>(p.bias.size())};
        for (auto& v : out) poison(v);
        auto a = p.args();
        a.delta_softplus = s.softplus;
        a.impl = impl;
        a.threads = threads;
        auto opt = [](bool wanted, std::vector<float>& v, std::initializer_list<int64_t> shape) {
          return wanted ? view(v, shape) : TensorView{};
        };
        SelectiveScanGrads g{view(out[0], {s.b, s.L, s.Di}), view(out[1], {s.b, s.L, s.Di}), view(out[2], {s.Di, s.N}),
                             view(out[3], {s.b, s.L, s.N}),   view(out[4], {s.b, s.L, s.N}),
                             opt(s.D, out[5], {s.Di}),        opt(s.z, out[6], {s.b, s.L, s.Di}),
                             opt(s.bias, out[7], {s.Di})};
        selective_scan_backward(a, view(w, {s.b, s.L, s.Di}), g);
        return out;
      };
      const auto ref = grads(SsmImpl::reference), cpu = grads(SsmImpl::cpu);
      const char* names[] = {"du", "ddelta", "dA", "dB", "dC", "dD", "dz", "ddelta_bias"};
      const bool present[] = {true, true, true, true, true, s.D, s.z, s.bias};
      for (size_t i = 0; i < ref.size(); ++i)
        if (present[i])
          EXPECT_LE(rel_err(cpu[i], ref[i]), 2e-5) << names[i] << " b" << s.b << " L" << s.L << " Di" << s.Di << " N"
                                                  << s.N << " threads " << threads;
    }
}

// The CPU backward repeats bit for bit with several threads (dB / dC sum over channels in per-thread partials:
// the channel -> thread map must not depend on timing; training resumes rely on it).
TEST(ScanBackward, CpuIsBitReproducibleWithThreads) {
  ScanProblem p(2, 40, 64, 16, true, true, true, 21);
  std::vector<float> w(p.y.size());
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (auto& e : w) e = d(rng);
  std::vector<float> first_B, first_C;
  for (int run = 0; run < 8; ++run) {
    std::vector<float> du(p.u.size()), dd(p.u.size()), dA(p.A.size()), dB(p.B.size()), dC(p.C.size()),
        dD(p.D.size()), dz(p.z.size()), db(p.bias.size());
    auto a = p.args();
    a.impl = SsmImpl::cpu;
    a.threads = 3;
    SelectiveScanGrads g{view(du, {2, 40, 64}), view(dd, {2, 40, 64}), view(dA, {64, 16}), view(dB, {2, 40, 16}),
                         view(dC, {2, 40, 16}), view(dD, {64}),        view(dz, {2, 40, 64}), view(db, {64})};
    selective_scan_backward(a, view(w, {2, 40, 64}), g);
    if (run == 0) {
      first_B = dB, first_C = dC;
      continue;
    }
    ASSERT_EQ(std::memcmp(dB.data(), first_B.data(), dB.size() * 4), 0) << "dB, run " << run;
    ASSERT_EQ(std::memcmp(dC.data(), first_C.data(), dC.size() * 4), 0) << "dC, run " << run;
  }
}

}  // namespace
