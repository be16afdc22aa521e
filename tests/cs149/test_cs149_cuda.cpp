// The CS149 CUDA kernels against the f64 references (cs149_cases.hpp): odd shapes, the vector and scalar load
// paths, and the course shapes (histogram in full, SwiGLU on sampled rows). Skipped without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>

#include "cs149_cases.hpp"

namespace {

using cs149_test::Memory;
using flashkit::Device;

struct CudaMemory : Memory {
  std::vector<void*> blocks;
  ~CudaMemory() override {
    for (void* p : blocks) cudaFree(p);
  }
  Device device() const override { return Device::cuda; }
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    blocks.push_back(p);
    return p;
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    EXPECT_EQ(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  void download(void* dst, const void* src, size_t bytes) override {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  }
};

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define REQUIRE_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device"

TEST(Cs149CudaHistogram, OddShapes) {
  REQUIRE_GPU();
  CudaMemory mem;
  cs149_test::check_histogram(mem, 1000, 512, 256, 256, 1);  // 16-byte loads
  cs149_test::check_histogram(mem, 333, 37, 256, 256, 2);    // byte loads, partial channel group
  cs149_test::check_histogram(mem, 4097, 80, 100, 256, 3);   // 16-byte loads, partial group, values >= num_bins
  cs149_test::check_histogram(mem, 5, 3, 300, 256, 4);
  cs149_test::check_histogram(mem, 0, 5, 7, 7, 5);
}

TEST(Cs149CudaHistogram, CourseShape) {
  REQUIRE_GPU();
  CudaMemory mem;
  cs149_test::check_histogram(mem, 1048576, 512, 256, 256, 1001);
}

class Cs149CudaSwiglu : public ::testing::TestWithParam<flashkit::cs149::SwigluKernel> {};

TEST_P(Cs149CudaSwiglu, OddShapes) {
  REQUIRE_GPU();
  CudaMemory mem;
  const auto kernel = GetParam();
  cs149_test::check_swiglu(mem, 37, 53, 29, 1.0f, 11, 1e-5, -1, kernel);     // scalar loads, partial tiles
  cs149_test::check_swiglu(mem, 200, 260, 132, 0.7f, 12, 1e-5, -1, kernel);  // vector loads, partial tiles
  cs149_test::check_swiglu(mem, 130, 36, 70, 1.0f, 15, 1e-5, -1, kernel);    // scalar x, vector W/V, partial k tile
  cs149_test::check_swiglu(mem, 1, 1, 1, 1.0f, 13, 1e-5, -1, kernel);
  cs149_test::check_swiglu(mem, 129, 0, 65, 1.0f, 14, 1e-5, -1, kernel);     // k = 0: the biases alone
}

TEST_P(Cs149CudaSwiglu, CourseShapeSampledRows) {
  REQUIRE_GPU();
  CudaMemory mem;
  cs149_test::check_swiglu(mem, 16384, 2048, 4096, 1.0f, 8846, 1e-5, 48, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Kernels, Cs149CudaSwiglu,
                         ::testing::Values(flashkit::cs149::SwigluKernel::automatic,
                                           flashkit::cs149::SwigluKernel::split_in_shared),
                         [](const auto& info) {
                           return std::string(info.param == flashkit::cs149::SwigluKernel::split_in_shared
                                                  ? "split_in_shared" : "automatic");
                         });

class Cs149CudaRk4 : public ::testing::TestWithParam<flashkit::cs149::Rk4Kernel> {};

TEST_P(Cs149CudaRk4, OddShapes) {
  REQUIRE_GPU();
  CudaMemory mem;
  const auto kernel = GetParam();
  cs149_test::check_rk4(mem, 45, 38, 71, 3, 21, 1e-5, kernel);  // partial x, y and z blocks
  cs149_test::check_rk4(mem, 9, 9, 9, 2, 22, 1e-5, kernel);
  cs149_test::check_rk4(mem, 20, 10, 8, 2, 23, 1e-5, kernel);
  cs149_test::check_rk4(mem, 12, 12, 12, 0, 24, 1e-5, kernel);
  cs149_test::check_rk4(mem, 80, 70, 90, 4, 25, 1e-5, kernel);    // several z chunks
  cs149_test::check_rk4(mem, 9, 100, 33, 1, 26, 1e-5, kernel);    // one interior z plane
}

INSTANTIATE_TEST_SUITE_P(Kernels, Cs149CudaRk4,
                         ::testing::Values(flashkit::cs149::Rk4Kernel::automatic,
                                           flashkit::cs149::Rk4Kernel::stage_l1,
                                           flashkit::cs149::Rk4Kernel::stage_l1_aligned,
                                           flashkit::cs149::Rk4Kernel::stage_l1_tall,
                                           flashkit::cs149::Rk4Kernel::stage_pair),
                         [](const auto& info) {
                           switch (info.param) {
                             case flashkit::cs149::Rk4Kernel::stage_l1: return std::string("l1");
                             case flashkit::cs149::Rk4Kernel::stage_l1_aligned: return std::string("l1_aligned");
                             case flashkit::cs149::Rk4Kernel::stage_l1_tall: return std::string("l1_tall");
                             case flashkit::cs149::Rk4Kernel::stage_pair: return std::string("pair");
                             default: return std::string("automatic");
                           }
                         });

// v4, v5 and v6 keep v1's operations and only change which thread computes which point and where the second
// stage's input lives (v6): the fields must be bit-identical to v1's. ny 77: 69 interior rows = two full 32-row
// blocks of v5 and a partial one, four full 16-row tiles of v6 and a partial one; nx 45 and 101: rows start at
// every offset mod 32, v4's warps begin up to 31 columns before x = 4, one to four column blocks; nz 23 and 13: a
// partial z chunk, nz 70 below: several.
TEST(Cs149CudaRk4Variants, BitIdenticalToL1) {
  REQUIRE_GPU();
  CudaMemory mem;
  std::mt19937 rng(31);
  const int64_t shapes[3][3] = {{23, 77, 45}, {13, 20, 101}, {70, 30, 40}};
  for (const auto& shape : shapes) {
    const int64_t nz = shape[0], ny = shape[1], nx = shape[2];
    const auto u0 = cs149_test::randn(size_t(nz * ny * nx), rng);
    flashkit::cs149::Rk4Args a;
    a.u0 = mem.put(u0);
    a.nz = nz; a.ny = ny; a.nx = nx; a.alpha = 0.7f; a.hx = 1.1f; a.hy = 0.8f; a.hz = 1.3f; a.n_steps = 3;
    a.device = Device::cuda;
    const flashkit::cs149::Rk4Kernel kernels[4] = {
        flashkit::cs149::Rk4Kernel::stage_l1, flashkit::cs149::Rk4Kernel::stage_l1_aligned,
        flashkit::cs149::Rk4Kernel::stage_l1_tall, flashkit::cs149::Rk4Kernel::stage_pair};
    std::vector<float> out[4];
    for (int i = 0; i < 4; ++i) {
      a.kernel = kernels[i];
      a.out = mem.put(std::vector<float>(u0.size(), std::numeric_limits<float>::quiet_NaN()));
      flashkit::cs149::rk4(a);
      out[i] = mem.get(a.out, u0.size());
    }
    for (int k = 1; k < 4; ++k) {
      int64_t differ = 0;
      for (size_t i = 0; i < u0.size(); ++i) differ += std::memcmp(&out[0][i], &out[k][i], sizeof(float)) != 0;
      EXPECT_EQ(differ, 0) << "kernel " << int(kernels[k]) << ", shape " << nz << " x " << ny << " x " << nx;
    }
  }
}

TEST(Cs149CudaQueryEmbed, Shapes) {
  REQUIRE_GPU();
  CudaMemory mem;
  cs149_test::check_query_embed(mem, 5000, 3, 768, flashkit::DType::f16, 41);  // the course's dims, many row chunks
  cs149_test::check_query_embed(mem, 77, 3, 300, flashkit::DType::f32, 42);    // partial column block, float4 stores
  cs149_test::check_query_embed(mem, 9, 16, 37, flashkit::DType::f16, 43);      // in_dim at run time, scalar stores
  cs149_test::check_query_embed(mem, 41, 3, 30, flashkit::DType::f16, 44);     // in_dim 3, scalar stores
}

TEST(Cs149CudaLayerNormHead, Shapes) {
  REQUIRE_GPU();
  CudaMemory mem;
  cs149_test::check_layernorm_head(mem, 1001, 768, flashkit::DType::f16, 31);   // the course width (v2: 3 chunks)
  cs149_test::check_layernorm_head(mem, 37, 768, flashkit::DType::f32, 32);     // 192 chunks: v1
  cs149_test::check_layernorm_head(mem, 19, 13, flashkit::DType::f16, 33);      // narrow rows
  cs149_test::check_layernorm_head(mem, 50, 256, flashkit::DType::f32, 34);     // v2: 2 chunks per lane
  cs149_test::check_layernorm_head(mem, 33, 1024, flashkit::DType::f16, 35);    // v2: 4 chunks per lane
  cs149_test::check_layernorm_head(mem, 21, 40, flashkit::DType::f16, 36);      // v2: 5 chunks, most lanes idle
  cs149_test::check_layernorm_head(mem, 7, 1100, flashkit::DType::f32, 34);     // wider than the register path
  cs149_test::check_layernorm_head(mem, 20000, 768, flashkit::DType::f16, 35);   // many blocks
}

}  // namespace
