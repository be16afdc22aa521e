// The bulk one-row GEMV (gemv.cu gemv_bulk_kernel; engine/gemv_plan.hpp GemvPlanMode::bulk) on the GPU against the
// legacy kernel, bit for bit (speculative verification relies on a one-row launch being bitwise a row of a T-row
// launch, which runs the legacy kernels), and against an f64 reference: every fused prologue / epilogue feature of
// gemv_feature_cases.hpp (bf16 x, sandwich norm, input norm, h_out / a_out written in slices or, in place, by the
// last block, bias, softcap, residual (also aliasing y), bf16 y), odd N and K, NaN-poisoned outputs, the default
// ring and a 16 KB one (two stages refilled many times), and model-sized shapes (mamba-2.8b in_proj / out_proj,
// Llama-8B down_proj). Skipped without a CUDA device (CI has none); on a device before sm_90 the bulk plan falls back
// to the legacy kernel (the bits then trivially equal).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "flashkit/runtime.hpp"
#include "flashkit/tuning.hpp"

#ifdef FLASHKIT_WITH_CUDA
#include <cuda_runtime.h>

#include "engine/cuda/kernels.hpp"
#include "gemv_feature_cases.hpp"

namespace {

struct DeviceMem {
  void* alloc(size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0xff, bytes), cudaSuccess);  // NaN in f32 and bf16
    return p;
  }
  void put(void* dst, const void* src, size_t bytes) {
    EXPECT_EQ(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  void get(void* dst, const void* src, size_t bytes) {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  void free(void* p) { cudaFree(p); }
};

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

fk_test::GemvFeatureResult run_with(const fk_test::GemvFeatureCase& c, int plan, int ring_kb) {
  flashkit::Tuning t = flashkit::default_tuning();
  t.cuda_gemv_plan = plan, t.cuda_gemv_ring_kb = ring_kb;
  flashkit::engine::cuda::ScopedLaunchTuning scope(t);
  DeviceMem mem;
  return fk_test::run_gemv_feature_case(c, mem);
}

TEST(CudaGemvBulk, BitwiseTheLegacyKernelOnEveryFeature) {
  if (flashkit::cuda_device_count() <= 0) GTEST_SKIP() << "no CUDA device";
  int dev = 0, major = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), cudaSuccess);
  if (major < 9) std::printf("note: sm_%d0: the bulk plan falls back to the legacy kernel here\n", major);
  for (const auto& c : fk_test::gemv_feature_cases()) {
    SCOPED_TRACE(std::string(c.name) + ": N " + std::to_string(c.N) + ", K " + std::to_string(c.K));
    const auto legacy = run_with(c, 1, 0);
    EXPECT_LT(legacy.err, fk_test::gemv_feature_tolerance(c)) << "legacy";
    // bulk with the default ring, a 16 KB ring (2 stages), automatic (the bulk kernel where it applies)
    for (auto [plan, ring] : {std::pair{3, 0}, {3, 16}, {0, 0}}) {
      const auto got = run_with(c, plan, ring);
      const std::string at = "plan " + std::to_string(plan) + ", ring " + std::to_string(ring) + " KB";
      EXPECT_LT(got.err, fk_test::gemv_feature_tolerance(c)) << at;
      EXPECT_TRUE(same(got.y, legacy.y)) << at << ": y differs from the legacy kernel's";
      EXPECT_TRUE(same(got.h, legacy.h)) << at << ": h_out differs";
      EXPECT_TRUE(same(got.a, legacy.a)) << at << ": a_out differs";
    }
  }
}

// Back-to-back launches (programmatic dependent launch chains them: the next one's bulk copies start before this
// one ends) give the same bits every time.
TEST(CudaGemvBulk, RepeatedLaunchesAgree) {
  if (flashkit::cuda_device_count() <= 0) GTEST_SKIP() << "no CUDA device";
  fk_test::GemvFeatureCase c{"repeat", 2560, 5120};
  c.norm = c.bias = true;
  const auto first = run_with(c, 3, 0);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(same(run_with(c, 3, 0).y, first.y)) << "launch " << i;
}

}  // namespace
#endif
