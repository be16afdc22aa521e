// The SSM CUDA kernels run by the CPU emulation (tools/cuda_emu/run_ssm.sh) against the f64 reference: every forward
// generation (with and without the initial state) and both backward generations, on small odd shapes.
#include <cstdio>
#include <utility>
#include <string>
#include "flashkit/error.hpp"
#include "flashkit/ssm.hpp"
#include "kernels/cuda/ssm/ssm_cuda.hpp"
#include "kernels/ssm_choice.hpp"
#include "ssm_fixture.hpp"
using namespace flashkit;
using namespace ssm_test;

kernels::ScanArgs kargs(ScanProblem& p, bool D, bool z, bool bias, bool softplus, float* state) {
  kernels::ScanArgs a;
  a.batch = p.batch, a.seqlen = p.seqlen, a.d_inner = p.d_inner, a.d_state = p.d_state;
  a.u = p.u.data(), a.delta = p.delta.data(), a.A = p.A.data(), a.B = p.B.data(), a.C = p.C.data(), a.y = p.y.data();
  a.D = D ? p.D.data() : nullptr, a.z = z ? p.z.data() : nullptr, a.delta_bias = bias ? p.bias.data() : nullptr;
  a.state = state;
  const int64_t rows = p.seqlen * p.d_inner, nrows = p.seqlen * p.d_state;
  a.u_b = a.dl_b = a.z_b = a.y_b = rows;
  a.u_t = a.dl_t = a.z_t = a.y_t = p.d_inner;
  a.B_b = a.C_b = nrows;
  a.B_t = a.C_t = p.d_state;
  a.softplus = softplus;
  return a;
}

int fails = 0;
void expect(double err, double tol, const std::string& what) {
  std::printf("%s %-70s err %.3g\n", err <= tol ? "ok  " : "FAIL", what.c_str(), err);
  if (!(err <= tol)) ++fails;
}

int main() {
  struct S { int64_t b, L, Di, N; bool D, z, bias, sp, st; };
  for (S s : {S{2, 37, 19, 16, true, true, true, true, true}, S{1, 17, 33, 5, false, false, false, false, false},
              S{2, 40, 40, 16, true, true, true, true, false}, S{1, 1, 3, 3, true, true, true, true, true},
              S{1, 70, 9, 40, true, true, true, true, false}, S{2, 300, 20, 16, true, false, true, false, false},
              S{1, 50, 10, 64, false, true, false, true, false}}) {
    const std::string tag = "b" + std::to_string(s.b) + " L" + std::to_string(s.L) + " Di" + std::to_string(s.Di) +
                            " N" + std::to_string(s.N) + (s.z ? " z" : "") + (s.sp ? " sp" : "") + (s.st ? " st" : "");
    ScanProblem p(s.b, s.L, s.Di, s.N, s.D, s.z, s.bias, 3);
    if (!s.sp) p.positive_delta();
    std::vector<float> st0(s.b * s.Di * s.N);
    for (size_t i = 0; i < st0.size(); ++i) st0[i] = 0.3f * std::sin(float(i));
    auto a = p.args();
    a.delta_softplus = s.sp;
    a.impl = SsmImpl::reference;
    std::vector<float> st = st0;
    if (s.st) a.state = view(st, {s.b, s.Di, s.N});
    selective_scan_forward(a);
    const std::vector<float> ref = p.y, ref_st = st;
    for (int g : kernels::kScanGenerations) {
      poison(p.y);
      std::vector<float> st2 = st0;
      auto k = kargs(p, s.D, s.z, s.bias, s.sp, s.st ? st2.data() : nullptr);
      const std::string name = kernels::selective_scan_cuda(k, nullptr, g);
      expect(rel_err(p.y, ref), 1e-4, "fwd " + name + " " + tag);
      if (s.st) expect(rel_err(st2, ref_st), 1e-4, "fwd state " + name + " " + tag);
    }
    // v4_npt4, its lean generation and lean pipelined (13) with delta over
    // [-30, 30] and z over [-120, 120] (the fast softplus' and silu's branch points and limits;
    // tests/ssm/test_ssm_cuda_v4.cpp CudaScanV4Lean on the GPU)
    if (s.sp && s.z && s.N <= 16) {
      ScanProblem q = p;
      for (size_t i = 0; i < q.delta.size(); ++i) q.delta[i] = -30.f + 60.f * float((i * 7919) % 1001) / 1000.f;
      for (size_t i = 0; i < q.z.size(); ++i) q.z[i] = -120.f + 240.f * float((i * 104729) % 997) / 996.f;
      auto qa = q.args();
      qa.delta_softplus = true;
      qa.impl = SsmImpl::reference;
      selective_scan_forward(qa);
      const std::vector<float> qref = q.y;
      for (int g : {6, 11, 13}) {
        poison(q.y);
        auto k = kargs(q, s.D, true, s.bias, true, nullptr);
        const std::string name = kernels::selective_scan_cuda(k, nullptr, g);
        expect(rel_err(q.y, qref), 1e-4, "fwd extreme delta, z " + name + " " + tag);
        int64_t bad = 0;
        for (size_t i = 0; i < q.y.size(); ++i) bad += q.z[i] < -88.f && !(std::fabs(q.y[i]) <= 1e-20f);
        expect(double(bad), 0.0, "fwd z < -88 gives 0 " + name + " " + tag);
      }
    }
    // backward (no state)
    std::vector<float> w(p.y.size());
    for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(float(i) * 0.7f);
    auto grads = [&](int mode, std::string* name) {
      std::vector<std::vector<float>> v = {std::vector<float>(p.u.size()), std::vector<float>(p.u.size()),
                                           std::vector<float>(p.A.size()), std::vector<float>(p.B.size()),
                                           std::vector<float>(p.C.size()), std::vector<float>(p.D.size()),
                                           std::vector<float>(p.z.size()), std::vector<float>(p.bias.size())};
      for (auto& e : v) poison(e);
      if (mode < 0) {
        auto ar = p.args();
        ar.delta_softplus = s.sp;
        ar.impl = SsmImpl::reference;
        auto opt = [](bool wnt, std::vector<float>& x, std::initializer_list<int64_t> sh) {
          return wnt ? view(x, sh) : TensorView{};
        };
        SelectiveScanGrads g{view(v[0], {s.b, s.L, s.Di}), view(v[1], {s.b, s.L, s.Di}), view(v[2], {s.Di, s.N}),
                             view(v[3], {s.b, s.L, s.N}), view(v[4], {s.b, s.L, s.N}), opt(s.D, v[5], {s.Di}),
                             opt(s.z, v[6], {s.b, s.L, s.Di}), opt(s.bias, v[7], {s.Di})};
        selective_scan_backward(ar, view(w, {s.b, s.L, s.Di}), g);
      } else {
        auto k = kargs(p, s.D, s.z, s.bias, s.sp, nullptr);
        kernels::ScanGradArgs g;
        g.dout = w.data(), g.dout_b = s.L * s.Di, g.dout_t = s.Di;
        g.du = v[0].data(), g.ddelta = v[1].data(), g.dA = v[2].data(), g.dB = v[3].data(), g.dC = v[4].data();
        g.dD = s.D ? v[5].data() : nullptr, g.dz = s.z ? v[6].data() : nullptr;
        g.ddelta_bias = s.bias ? v[7].data() : nullptr;
        *name = kernels::selective_scan_backward_cuda(k, g, nullptr, mode);
      }
      return v;
    };
    const auto ref_g = grads(-1, nullptr);
    const char* names[] = {"du", "ddelta", "dA", "dB", "dC", "dD", "dz", "ddelta_bias"};
    const bool present[] = {true, true, true, true, true, s.D, s.z, s.bias};
    for (int gen : {0, 1}) {
      std::string name;
      const auto got = grads(gen, &name);
      for (int i = 0; i < 8; ++i)
        if (present[i])
          expect(rel_err(got[i], ref_g[i]), 5e-4, std::string("bwd ") + names[i] + " " + name + " " + tag);
    }
  }
  std::printf("%d failures\n", fails);
  return fails != 0;
}
