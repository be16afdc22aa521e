// The CS149 ops on the CPU against the f64 references (cs149_cases.hpp), their argument errors and the C API.
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cs149_cases.hpp"
#include "flashkit/cs149.h"
#include "flashkit/error.hpp"

namespace {

using cs149_test::Memory;
using flashkit::Device;

struct HostMemory : Memory {
  std::vector<std::unique_ptr<char[]>> blocks;
  Device device() const override { return Device::cpu; }
  void* alloc(size_t bytes) override {
    blocks.emplace_back(new char[bytes]);
    return blocks.back().get();
  }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
};

TEST(Cs149Histogram, MatchesReference) {
  HostMemory mem;
  cs149_test::check_histogram(mem, 1000, 512, 256, 256, 1);
  cs149_test::check_histogram(mem, 333, 37, 256, 256, 2);  // odd channel count
  cs149_test::check_histogram(mem, 257, 48, 100, 256, 3);  // values >= num_bins are not counted
  cs149_test::check_histogram(mem, 5, 3, 300, 256, 4);     // more bins than uint8 values: the rest stay 0
  cs149_test::check_histogram(mem, 0, 5, 7, 7, 5);         // no rows: all zeros
}

TEST(Cs149Swiglu, MatchesReference) {
  HostMemory mem;
  cs149_test::check_swiglu(mem, 37, 53, 29, 1.0f, 11, 1e-5);
  cs149_test::check_swiglu(mem, 64, 128, 96, 0.7f, 12, 1e-5);
  cs149_test::check_swiglu(mem, 1, 1, 1, 1.0f, 13, 1e-5);
}

TEST(Cs149Rk4, MatchesReference) {
  HostMemory mem;
  cs149_test::check_rk4(mem, 13, 11, 17, 3, 21, 1e-5);
  cs149_test::check_rk4(mem, 9, 9, 9, 2, 22, 1e-5);    // one interior point
  cs149_test::check_rk4(mem, 20, 10, 8, 2, 23, 1e-5);   // nx < 9: no interior, u stays u0
  cs149_test::check_rk4(mem, 12, 12, 12, 0, 24, 1e-5);  // zero steps: a copy
}

TEST(Cs149LayerNormHead, MatchesReference) {
  HostMemory mem;
  cs149_test::check_layernorm_head(mem, 37, 768, flashkit::DType::f32, 31);
  cs149_test::check_layernorm_head(mem, 37, 768, flashkit::DType::f16, 32);
  cs149_test::check_layernorm_head(mem, 5, 13, flashkit::DType::f16, 33);
  cs149_test::check_layernorm_head(mem, 3, 1100, flashkit::DType::f32, 34);
}

TEST(Cs149QueryEmbed, MatchesReference) {
  HostMemory mem;
  cs149_test::check_query_embed(mem, 41, 3, 96, flashkit::DType::f32, 41);
  cs149_test::check_query_embed(mem, 41, 3, 96, flashkit::DType::f16, 42);
  cs149_test::check_query_embed(mem, 7, 16, 37, flashkit::DType::f16, 43);
}

TEST(Cs149Swiglu, KernelChoice) {
  using flashkit::cs149::SwigluKernel;
  flashkit::cs149::SwigluArgs a;
  a.m = 16384; a.k = 2048; a.n = 4096;  // the course shape
  EXPECT_EQ(flashkit::cs149::choose_swiglu_kernel(a), SwigluKernel::split_per_fragment);  // passed the course check
  a.kernel = SwigluKernel::split_per_fragment;
  EXPECT_EQ(flashkit::cs149::choose_swiglu_kernel(a), SwigluKernel::split_per_fragment);
}

TEST(Cs149Rk4, KernelChoice) {
  using flashkit::cs149::Rk4Kernel;
  flashkit::cs149::Rk4Args a;
  EXPECT_EQ(flashkit::cs149::choose_rk4_kernel(a), Rk4Kernel::stage_l1_aligned);  // the H200 winner (s10-10)
  a.nz = a.ny = a.nx = 600;  // the course shape too
  EXPECT_EQ(flashkit::cs149::choose_rk4_kernel(a), Rk4Kernel::stage_l1_aligned);
  a.kernel = Rk4Kernel::stage_l1_aligned;
  EXPECT_EQ(flashkit::cs149::choose_rk4_kernel(a), Rk4Kernel::stage_l1_aligned);
}

template <typename F>
void expect_error(F&& f, flashkit::Status status, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning " << needle;
  } catch (const flashkit::Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Cs149Errors, NameTheArgument) {
  uint8_t data[4] = {0, 1, 2, 3};
  int32_t hist[8];
  flashkit::cs149::HistogramArgs h;
  h.data = data; h.length = 2; h.channels = 2; h.num_bins = 0; h.out = hist;
  expect_error([&] { flashkit::cs149::histogram(h); }, flashkit::Status::invalid_argument, "num_bins");
  h.num_bins = 4; h.out = nullptr;
  expect_error([&] { flashkit::cs149::histogram(h); }, flashkit::Status::invalid_argument, "out");
  h.out = hist; h.length = -1;
  expect_error([&] { flashkit::cs149::histogram(h); }, flashkit::Status::invalid_argument, "length");

  float f[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  float o[16];
  flashkit::cs149::SwigluArgs s;
  s.x = f; s.w = f; s.v = nullptr; s.b = f; s.c = f; s.m = 2; s.k = 2; s.n = 2; s.out = o;
  expect_error([&] { flashkit::cs149::swiglu(s); }, flashkit::Status::invalid_argument, "v is NULL");
  s.v = f; s.beta = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { flashkit::cs149::swiglu(s); }, flashkit::Status::invalid_argument, "beta");
  s.beta = 1.0f; s.k = -3;
  expect_error([&] { flashkit::cs149::swiglu(s); }, flashkit::Status::invalid_argument, "k must be");
  s.k = 2; s.kernel = static_cast<flashkit::cs149::SwigluKernel>(1);  // the retired v1
  expect_error([&] { flashkit::cs149::swiglu(s); }, flashkit::Status::invalid_argument, "kernel must be");
  s.kernel = static_cast<flashkit::cs149::SwigluKernel>(3);  // the retired v3 (split_in_shared)
  expect_error([&] { flashkit::cs149::swiglu(s); }, flashkit::Status::invalid_argument, "a retired kernel");
  s.kernel = static_cast<flashkit::cs149::SwigluKernel>(7);
  expect_error([&] { flashkit::cs149::swiglu(s); }, flashkit::Status::invalid_argument, "kernel must be");
  s.kernel = flashkit::cs149::SwigluKernel::automatic;

  std::vector<float> u(1000, 1.0f), out(1000);
  flashkit::cs149::Rk4Args r;
  r.u0 = u.data(); r.out = out.data(); r.nz = r.ny = r.nx = 10; r.alpha = 1; r.hx = r.hy = r.hz = 1; r.n_steps = 1;
  r.hy = 0.0f;
  expect_error([&] { flashkit::cs149::rk4(r); }, flashkit::Status::invalid_argument, "hy must be positive");
  r.hy = 1.0f; r.out = u.data();
  expect_error([&] { flashkit::cs149::rk4(r); }, flashkit::Status::invalid_argument, "alias");
  r.out = out.data(); r.kernel = static_cast<flashkit::cs149::Rk4Kernel>(99);
  expect_error([&] { flashkit::cs149::rk4(r); }, flashkit::Status::invalid_argument, "kernel must be");
  for (int retired : {1, 2, 3, 5, 6}) {  // v1, v2, v3, v5 (l1_tall), v6 (pair): lost on the H200
    r.kernel = static_cast<flashkit::cs149::Rk4Kernel>(retired);
    expect_error([&] { flashkit::cs149::rk4(r); }, flashkit::Status::invalid_argument, "a retired kernel");
  }
  r.kernel = flashkit::cs149::Rk4Kernel::automatic; r.n_steps = -1;
  expect_error([&] { flashkit::cs149::rk4(r); }, flashkit::Status::invalid_argument, "n_steps");
  flashkit::cs149::LayerNormHeadArgs l;
  l.x = f; l.w = f; l.bias = f; l.out = o; l.rows = 2; l.width = 8; l.dtype = flashkit::DType::bf16;
  expect_error([&] { flashkit::cs149::layernorm_head(l); }, flashkit::Status::invalid_argument, "dtype");
  l.dtype = flashkit::DType::f32; l.bias = nullptr;
  expect_error([&] { flashkit::cs149::layernorm_head(l); }, flashkit::Status::invalid_argument, "bias is NULL");
  l.bias = f; l.width = 0;
  expect_error([&] { flashkit::cs149::layernorm_head(l); }, flashkit::Status::invalid_argument, "width");
  flashkit::cs149::QueryEmbedArgs qe;
  qe.q = f; qe.w = f; qe.b = f; qe.h = o; qe.rows = 1; qe.in_dim = 17; qe.width = 2; qe.dtype = flashkit::DType::f32;
  expect_error([&] { flashkit::cs149::query_embed(qe); }, flashkit::Status::invalid_argument, "in_dim");
#ifndef FLASHKIT_WITH_CUDA
  r.n_steps = 1; r.device = Device::cuda;
  expect_error([&] { flashkit::cs149::rk4(r); }, flashkit::Status::unsupported, "CUDA");
#endif
}

TEST(Cs149CApi, StatusAndMessage) {
  uint8_t data[6] = {0, 1, 2, 2, 1, 0};
  int32_t hist[6] = {};
  ASSERT_EQ(fk_cs149_histogram(data, 3, 2, 3, hist, FK_CPU), FK_OK) << fk_last_error();
  const int32_t want[6] = {1, 1, 1, 1, 1, 1};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(hist[i], want[i]);
  EXPECT_EQ(fk_cs149_histogram(data, 3, 2, 3, hist, 7), FK_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fk_last_error()).find("device"), std::string::npos);
  float x[1] = {1.0f}, out[1];
  EXPECT_EQ(fk_cs149_swiglu(x, x, x, x, x, 1.0f, 1, 1, 1, nullptr, FK_CPU, 0), FK_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fk_last_error()).find("out is NULL"), std::string::npos);
  ASSERT_EQ(fk_cs149_swiglu(x, x, x, x, x, 1.0f, 1, 1, 1, out, FK_CPU, 0), FK_OK);
  EXPECT_NEAR(out[0], 2.0 / (1.0 + std::exp(-2.0)) * 2.0, 1e-5);
  EXPECT_EQ(fk_cs149_swiglu(x, x, x, x, x, 1.0f, 1, 1, 1, out, FK_CPU, 1), FK_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fk_last_error()).find("kernel must be"), std::string::npos);
  EXPECT_EQ(fk_cs149_swiglu(x, x, x, x, x, 1.0f, 1, 1, 1, out, FK_CPU, 3), FK_INVALID_ARGUMENT);  // v3, retired
  EXPECT_NE(std::string(fk_last_error()).find("a retired kernel"), std::string::npos);
  EXPECT_EQ(fk_cs149_rk4(x, 1, 1, 1, 1.0f, 1, 1, 1, 1, out, FK_CPU, 6), FK_INVALID_ARGUMENT);  // v6, retired
  EXPECT_NE(std::string(fk_last_error()).find("a retired kernel"), std::string::npos);
  EXPECT_EQ(fk_cs149_rk4(x, 1, 1, 1, 1.0f, 1, 1, 1, 1, out, FK_CPU, 4), FK_OK);  // v4 by name
  EXPECT_EQ(fk_cs149_rk4(x, 1, 1, 1, -1.0f, 1, 1, 1, 1, out, FK_CPU, 0), FK_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fk_last_error()).find("alpha"), std::string::npos);
}

}  // namespace
