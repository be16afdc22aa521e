// The CUDA selective-scan kernel choice (src/kernels/ssm_choice.hpp), a pure function run in the CPU build: v2 for
// d_state <= 16 in production, v1 kept reachable through generation 1 only, v1's wide-state kernel beyond 16, the
// decode step by d_state.
#include <gtest/gtest.h>

#include <string>

#include "kernels/ssm_choice.hpp"

using flashkit::kernels::choose_scan_kernel;
using flashkit::kernels::scan_kernel_name;
using flashkit::kernels::ScanKernel;

TEST(ScanChoice, ProductionPicksV2UpToSixteenStates) {
  for (int64_t n : {1, 5, 8, 16}) EXPECT_EQ(choose_scan_kernel(n, false), ScanKernel::v2_n16) << n;
  for (int64_t n : {17, 40, 64}) EXPECT_EQ(choose_scan_kernel(n, false), ScanKernel::v1_n64) << n;
}

TEST(ScanChoice, GenerationOneKeepsV1) {
  for (int64_t n : {1, 16}) EXPECT_EQ(choose_scan_kernel(n, false, 1), ScanKernel::v1_n16) << n;
  EXPECT_EQ(choose_scan_kernel(64, false, 1), ScanKernel::v1_n64);
}

TEST(ScanChoice, DecodeStepByStateSize) {
  EXPECT_EQ(choose_scan_kernel(16, true), ScanKernel::step_n16);
  EXPECT_EQ(choose_scan_kernel(16, true, 1), ScanKernel::step_n16);
  EXPECT_EQ(choose_scan_kernel(17, true), ScanKernel::step_n64);
}

TEST(ScanChoice, NamesAreDistinctAndKeepV1Names) {
  // v1's names are those of the committed H200 results (bench/results/ssm-h200.json).
  EXPECT_STREQ(scan_kernel_name(ScanKernel::v1_n16), "cuda.scan.n16.split4");
  EXPECT_STREQ(scan_kernel_name(ScanKernel::step_n16), "cuda.scan_step.n16.split16");
  EXPECT_NE(std::string(scan_kernel_name(ScanKernel::v2_n16)), scan_kernel_name(ScanKernel::v1_n16));
}
