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
                                           flashkit::cs149::SwigluKernel::split_per_fragment),
                         [](const auto& info) {
                           return std::string(info.param == flashkit::cs149::SwigluKernel::split_per_fragment
                                                  ? "split_per_fragment" : "automatic");
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
                                           flashkit::cs149::Rk4Kernel::stage_l1_aligned),
                         [](const auto& info) {
                           return std::string(info.param == flashkit::cs149::Rk4Kernel::stage_l1_aligned
                                                  ? "l1_aligned" : "automatic");
                         });

// v4's warps begin up to 31 columns before x = 4 of their row: nx 45 and 101 make rows start at every offset mod
// 32 (one to four column blocks); ny 77 gives full and partial 8-row blocks; nz 23 and 13 a partial z chunk, nz 70
// several. (These shapes were the v1/v4/v5/v6 bit-identity test until v1, v5 and v6 were retired in run s10-10.)
TEST(Cs149CudaRk4Shapes, AlignedWarpsEveryRowOffset) {
  REQUIRE_GPU();
  CudaMemory mem;
  cs149_test::check_rk4(mem, 23, 77, 45, 3, 31, 1e-5);
  cs149_test::check_rk4(mem, 13, 20, 101, 3, 32, 1e-5);
  cs149_test::check_rk4(mem, 70, 30, 40, 3, 33, 1e-5);
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
