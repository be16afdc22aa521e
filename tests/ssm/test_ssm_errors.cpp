// Bad input to the SSM ops: each error names the argument and what was expected, nothing is written.
#include <gtest/gtest.h>

#include <string>

#include "flashkit/error.hpp"
#include "ssm_fixture.hpp"

using namespace flashkit;
using namespace ssm_test;

namespace {

template <class F>
std::string error_of(F&& f, Status want = Status::invalid_argument) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), want) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(SsmErrors, ScanArgumentsNamed) {
  ScanProblem p(2, 5, 6, 4);
  {
    auto a = p.args();
    a.B.shape[2] = 3;
    EXPECT_NE(error_of([&] { selective_scan_forward(a); }).find("B: expected shape [2, 5, 4]"), std::string::npos);
  }
  {
    auto a = p.args();
    a.delta.shape[1] = 4;
    EXPECT_NE(error_of([&] { selective_scan_forward(a); }).find("delta:"), std::string::npos);
  }
  {
    auto a = p.args();
    a.A.dtype = DType::bf16;
    EXPECT_NE(error_of([&] { selective_scan_forward(a); }).find("A: expected dtype f32"), std::string::npos);
  }
  {
    auto a = p.args();
    a.z.strides[2] = 2;
    EXPECT_NE(error_of([&] { selective_scan_forward(a); }).find("z: the last dimension must be contiguous"),
              std::string::npos);
  }
  {
    auto a = p.args();
    a.y.data = nullptr;
    EXPECT_NE(error_of([&] { selective_scan_forward(a); }).find("y: data pointer is null"), std::string::npos);
  }
  {
    auto a = p.args();
    a.u.ndim = 2;
    EXPECT_NE(error_of([&] { selective_scan_forward(a); }).find("u: expected 3 dimensions"), std::string::npos);
  }
  {
    auto a = p.args();
    a.u.device = Device::cuda;  // no CUDA data really: rejected before anything runs (the others are CPU tensors)
    EXPECT_NE(error_of([&] { selective_scan_forward(a); }).find("delta: expected a tensor on the same device as u"),
              std::string::npos);
  }
  {
    auto a = p.args();
    a.u.ndim = 2;  // a step without a state
    a.u.shape = {2, 6, 0, 0};
    a.u.strides = {6, 1, 0, 0};
    EXPECT_NE(error_of([&] { selective_scan_step(a); }).find("delta: expected 2 dimensions"), std::string::npos);
  }
  {
    auto a = p.args();
    a.threads = -1;
    EXPECT_NE(error_of([&] { selective_scan_forward(a); }).find("threads"), std::string::npos);
  }
  for (float v : p.y) EXPECT_TRUE(std::isnan(v));  // nothing written by a rejected call
}

TEST(SsmErrors, ConvArgumentsNamed) {
  std::vector<float> x(2 * 5 * 3), w(3 * 4), out(x.size()), st(2 * 3 * 4);
  CausalConv1dArgs a;
  a.x = view(x, {2, 5, 3});
  a.weight = view(w, {3, 4});
  a.out = view(out, {2, 5, 3});
  {
    auto b = a;
    b.weight = view(w, {4, 3});
    EXPECT_NE(error_of([&] { causal_conv1d_forward(b); }).find("weight: expected shape [3, 3]"), std::string::npos);
  }
  {
    auto b = a;
    b.conv_state = view(st, {2, 4, 3});
    EXPECT_NE(error_of([&] { causal_conv1d_forward(b); }).find("conv_state: expected shape [2, 3, 4]"),
              std::string::npos);
  }
  {
    auto b = a;
    b.x = view(x, {2, 15});
    b.out = view(out, {2, 15});
    EXPECT_NE(error_of([&] { causal_conv1d_step(b); }).find("weight: expected shape [15, 4]"), std::string::npos);
  }
  {
    std::vector<float> w20(3 * 20);
    auto b = a;
    b.weight = view(w20, {3, 20});
    EXPECT_NE(error_of([&] { causal_conv1d_forward(b); }).find("weight: width (dimension 1) must be in 1..16"),
              std::string::npos);
  }
}

TEST(SsmErrors, BackwardRejectsStateAndExtraGrads) {
  ScanProblem p(1, 3, 2, 2, false, false, false);
  std::vector<float> dout(p.y.size(), 1.f), du(p.u.size()), dd(p.u.size()), dA(p.A.size()), dB(p.B.size()),
      dC(p.C.size()), dD(2), st(1 * 2 * 2);
  SelectiveScanGrads g{view(du, {1, 3, 2}), view(dd, {1, 3, 2}), view(dA, {2, 2}), view(dB, {1, 3, 2}),
                       view(dC, {1, 3, 2}), view(dD, {2}), {}, {}};
  auto a = p.args();
  EXPECT_NE(error_of([&] { selective_scan_backward(a, view(dout, {1, 3, 2}), g); })
                .find("dD: must be empty, the forward has no such input"),
            std::string::npos);
  g.dD = {};
  a.state = view(st, {1, 2, 2});
  EXPECT_NE(error_of([&] { selective_scan_backward(a, view(dout, {1, 3, 2}), g); }).find("state:"), std::string::npos);
}

// The backward's implementation must run on the tensors' device, and every gradient lives there too.
TEST(SsmErrors, BackwardImplAndGradientDevice) {
  ScanProblem p(1, 3, 2, 2, false, false, false);
  std::vector<float> dout(p.y.size(), 1.f), du(p.u.size()), dd(p.u.size()), dA(p.A.size()), dB(p.B.size()),
      dC(p.C.size());
  SelectiveScanGrads g{view(du, {1, 3, 2}), view(dd, {1, 3, 2}), view(dA, {2, 2}), view(dB, {1, 3, 2}),
                       view(dC, {1, 3, 2}), {}, {}, {}};
  auto a = p.args();
  a.impl = SsmImpl::cuda;
  EXPECT_NE(error_of([&] { selective_scan_backward(a, view(dout, {1, 3, 2}), g); }, Status::unsupported)
                .find("impl: the cuda selective scan backward runs on CUDA tensors only"),
            std::string::npos);
  a.impl = SsmImpl::automatic;
  g.dB.device = Device::cuda;
  EXPECT_NE(error_of([&] { selective_scan_backward(a, view(dout, {1, 3, 2}), g); })
                .find("dB: expected a tensor on the same device as u"),
            std::string::npos);
}

}  // namespace
