// The communicators on device buffers (CUDA builds with a GPU; skipped otherwise): NCCL with one rank, and two
// thread ranks sharing one GPU (their device buffers staged through the host), against host sums.
#include <gtest/gtest.h>

#include <thread>

#include "dist/comm.hpp"
#include "flashkit/error.hpp"
#ifdef FLASHKIT_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace fd = flashkit::dist;
using flashkit::DType;

#ifdef FLASHKIT_WITH_CUDA
namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

struct DeviceFloats {
  float* p = nullptr;
  std::size_t n;
  explicit DeviceFloats(const std::vector<float>& host) : n(host.size()) {
    EXPECT_EQ(cudaMalloc(&p, n * 4), cudaSuccess);
    cudaMemcpy(p, host.data(), n * 4, cudaMemcpyHostToDevice);
  }
  ~DeviceFloats() { cudaFree(p); }
  std::vector<float> get() const {
    std::vector<float> h(n);
    cudaMemcpy(h.data(), p, n * 4, cudaMemcpyDeviceToHost);
    return h;
  }
};

std::vector<float> ramp(std::size_t n, float base) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = base + 0.25f * float(i % 13) - 1.0f;
  return v;
}

}  // namespace

TEST(DistDevice, NcclWithOneRankOnDeviceBuffers) {
  if (!fd::nccl_built() || !have_gpu()) GTEST_SKIP() << "needs NCCL and a GPU";
  auto c = fd::make_nccl(0, 1, 0, fd::nccl_unique_id());
  EXPECT_STREQ(c->kind(), "nccl");
  const auto x = ramp(1001, 0.5f);
  DeviceFloats d(x), out(std::vector<float>(1001, -9.f));
  c->all_reduce_sum(d.p, 1001, DType::f32);
  c->reduce_scatter_sum(d.p, out.p, 1001, DType::f32);
  cudaDeviceSynchronize();
  EXPECT_EQ(d.get(), x);
  EXPECT_EQ(out.get(), x);
  DeviceFloats g(std::vector<float>(1001, -9.f));
  c->all_gather(d.p, g.p, 1001, DType::f32);
  c->broadcast(d.p, 1001, DType::f32, 0);
  c->barrier();
  EXPECT_EQ(g.get(), x);
  EXPECT_THROW(c->broadcast(d.p, 1, DType::f32, 1), flashkit::Error);
  EXPECT_THROW(fd::make_nccl(0, 1, 4096, fd::nccl_unique_id()), flashkit::Error);
}

TEST(DistDevice, TwoThreadRanksShareOneGpu) {
  if (!have_gpu()) GTEST_SKIP() << "needs a GPU";
  auto comms = fd::make_thread_ranks(2);
  std::vector<std::vector<float>> reduced(2), gathered(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      cudaSetDevice(0);
      DeviceFloats d(ramp(777, float(r + 1)));
      comms[size_t(r)]->all_reduce_sum(d.p, 777, DType::f32);
      reduced[size_t(r)] = d.get();
      DeviceFloats g(std::vector<float>(2 * 777, -9.f));
      comms[size_t(r)]->all_gather(d.p, g.p, 777, DType::f32);
      gathered[size_t(r)] = g.get();
    });
  for (auto& t : threads) t.join();
  const auto a = ramp(777, 1), b = ramp(777, 2);
  for (std::size_t i = 0; i < 777; ++i) ASSERT_EQ(reduced[0][i], a[i] + b[i]);
  EXPECT_EQ(reduced[1], reduced[0]);
  EXPECT_EQ(gathered[0], gathered[1]);
  EXPECT_TRUE(std::equal(reduced[0].begin(), reduced[0].end(), gathered[0].begin() + 777));
}
#else
TEST(DistDevice, SkippedInCpuBuilds) { GTEST_SKIP() << "CPU build"; }
#endif
