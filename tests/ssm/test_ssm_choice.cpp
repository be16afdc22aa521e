// The CUDA selective-scan kernel choice (src/kernels/ssm_choice.hpp), a pure function run in the CPU build: v4 with
// four states per thread for d_state <= 16 in production, v1 kept reachable through generation 1, the other v3
// variants through 2 and 3, v2 through 4, v4 through 5, 6 and 8 (v3's former production kernel through 7, production v4 also through 6), v1's
// wide-state kernel beyond 16, the decode step by d_state; v4_npt4 lean through 11, pipelined through 13; the retired
// generations (9, 10: v5; 12: two channels per thread) refused as any unknown one is; and the backward's plan.
#include <gtest/gtest.h>

#include <iterator>
#include <set>
#include <string>

#include "flashkit/error.hpp"
#include "kernels/ssm_choice.hpp"

using flashkit::kernels::choose_scan_kernel;
using flashkit::kernels::scan_kernel_name;
using flashkit::kernels::ScanKernel;

TEST(ScanChoice, ProductionPicksV4LeanPipelinedUpToSixteenStates) {
  for (int64_t n : {1, 5, 8, 16}) EXPECT_EQ(choose_scan_kernel(n, false), ScanKernel::v4_npt4_lean_pipe) << n;
  for (int64_t n : {17, 40, 64}) EXPECT_EQ(choose_scan_kernel(n, false), ScanKernel::v1_n64) << n;
}

TEST(ScanChoice, GenerationOneKeepsV1) {
  for (int64_t n : {1, 16}) EXPECT_EQ(choose_scan_kernel(n, false, 1), ScanKernel::v1_n16) << n;
  EXPECT_EQ(choose_scan_kernel(64, false, 1), ScanKernel::v1_n64);
}

TEST(ScanChoice, GenerationsTwoToFourKeepTheOtherKernelsUpToSixteenStates) {
  for (int64_t n : {1, 5, 16}) {
    EXPECT_EQ(choose_scan_kernel(n, false, 2), ScanKernel::v3_n16) << n;
    EXPECT_EQ(choose_scan_kernel(n, false, 3), ScanKernel::v3_n16_tc32) << n;
    EXPECT_EQ(choose_scan_kernel(n, false, 4), ScanKernel::v2_n16) << n;
  }
  EXPECT_EQ(choose_scan_kernel(17, false, 2), ScanKernel::v1_n64);  // v3 has one state per thread, 16 threads
  EXPECT_EQ(choose_scan_kernel(16, true, 2), ScanKernel::step_n16);
  // generations 1.. name every kernel once; 0 is production, one of them
  std::set<std::string> names;
  for (int g : flashkit::kernels::kScanGenerations)
    if (g != 0) names.insert(scan_kernel_name(choose_scan_kernel(16, false, g)));
  EXPECT_EQ(names.size(), std::size(flashkit::kernels::kScanGenerations) - 1);
  EXPECT_EQ(names.count(scan_kernel_name(choose_scan_kernel(16, false, 0))), 1u);
}

// v4 (cp.async ring) is reachable through generations 5 (two states per thread), 6 (four) and 8 (four, one exp on
// the FMA pipe) until the H200 numbers
// promote it (kProductionScan); v3 with two states per thread through 7 as well as 0; beyond 16 states and for the
// decode step the choice does not depend on the generation.
TEST(ScanChoice, GenerationsFiveAndSixAreV4) {
  for (int64_t n : {1, 7, 16}) {
    EXPECT_EQ(choose_scan_kernel(n, false, 5), ScanKernel::v4_npt2) << n;
    EXPECT_EQ(choose_scan_kernel(n, false, 6), ScanKernel::v4_npt4) << n;
  }
  EXPECT_EQ(choose_scan_kernel(17, false, 5), ScanKernel::v1_n64);
  EXPECT_EQ(choose_scan_kernel(64, false, 6), ScanKernel::v1_n64);
  EXPECT_EQ(choose_scan_kernel(16, true, 5), ScanKernel::step_n16);
  EXPECT_EQ(choose_scan_kernel(40, true, 6), ScanKernel::step_n64);
  EXPECT_EQ(choose_scan_kernel(16, false, 7), ScanKernel::v3_n16_npt2);  // production until run s10-4, by its own number
  EXPECT_EQ(choose_scan_kernel(5, false, 8), ScanKernel::v4_npt4_fma1);
  EXPECT_EQ(choose_scan_kernel(17, false, 8), ScanKernel::v1_n64);
}

// Generation 11: v4_npt4 with less per-chunk overhead (not production until the H200 measures it); beyond 16 states
// and for the decode step the generation does not matter.
TEST(ScanChoice, GenerationElevenIsV4Lean) {
  for (int64_t n : {1, 7, 16}) EXPECT_EQ(choose_scan_kernel(n, false, 11), ScanKernel::v4_npt4_lean) << n;
  EXPECT_EQ(choose_scan_kernel(17, false, 11), ScanKernel::v1_n64);
  EXPECT_EQ(choose_scan_kernel(16, true, 11), ScanKernel::step_n16);
  EXPECT_STREQ(scan_kernel_name(ScanKernel::v4_npt4_lean), "cuda.scan.v4.n16.split4.tc16.s4.lean");
}

// Generation 13: generation 11 with its chunk phases software-pipelined (production since run s13-4: 1.11-1.12x).
TEST(ScanChoice, GenerationThirteenIsLeanPipelined) {
  for (int64_t n : {1, 7, 16}) EXPECT_EQ(choose_scan_kernel(n, false, 13), ScanKernel::v4_npt4_lean_pipe) << n;
  EXPECT_EQ(choose_scan_kernel(17, false, 13), ScanKernel::v1_n64);
  EXPECT_EQ(choose_scan_kernel(16, true, 13), ScanKernel::step_n16);
  EXPECT_STREQ(scan_kernel_name(ScanKernel::v4_npt4_lean_pipe), "cuda.scan.v4.n16.split4.tc16.s5.lean.pipe");
}

// The retired generations (9, 10: v5, the chunked scan; 12: generation 11 with two channels per thread; their code
// in dev/cuda/ssm/) are refused with the error any unknown generation gets, naming it and the known ones, for every
// state size and for the decode step too (the generation argument is checked before the choice).
TEST(ScanChoice, RetiredAndUnknownGenerationsAreRefusedAlike) {
  auto message = [](int generation, int64_t d_state, bool step) -> std::string {
    try {
      choose_scan_kernel(d_state, step, generation);
    } catch (const flashkit::Error& e) {
      EXPECT_EQ(e.status(), flashkit::Status::invalid_argument) << generation;
      return e.what();
    }
    return "no error";
  };
  for (int g : {9, 10, 12, 14, 99, -1}) {
    EXPECT_FALSE(flashkit::kernels::scan_generation_known(g)) << g;
    const std::string m = message(g, 16, false);
    EXPECT_NE(m.find("generation " + std::to_string(g) + " is not a kernel generation"), std::string::npos) << m;
    EXPECT_NE(m.find("expected one of 0-8, 11, 13"), std::string::npos) << m;
    EXPECT_EQ(message(g, 64, false), m);
    EXPECT_EQ(message(g, 16, true), m);
  }
  for (int g : flashkit::kernels::kScanGenerations) EXPECT_NO_THROW(choose_scan_kernel(16, false, g)) << g;
  EXPECT_EQ(std::size(flashkit::kernels::kScanGenerations), 11u);
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

// The CUDA backward's plan: 4 threads per channel up to 16 states, 16 beyond; a checkpoint per 16 steps; its workspace
// (checked against the memory limit before the call) is linear in seqlen and far below the expanded state's.
TEST(ScanBackwardPlan, SplitChunksAndWorkspace) {
  using flashkit::kernels::plan_scan_backward;
  const auto p = plan_scan_backward(2, 17, 45, 16);
  EXPECT_EQ(p.split, 4);
  EXPECT_EQ(p.channels_per_block, 32);
  EXPECT_EQ(p.chunks, 2);
  EXPECT_EQ(p.channel_blocks, 2);
  EXPECT_EQ(p.checkpoint_floats, 2 * 2 * 45 * 16);
  EXPECT_EQ(p.partial_bc_floats, 2 * 2 * 17 * 16);
  EXPECT_EQ(p.partial_channel_floats, 2 * 45 * 18);
  EXPECT_EQ(p.workspace_bytes(), 4 * (p.checkpoint_floats + 2 * p.partial_bc_floats + p.partial_channel_floats));
  const auto w = plan_scan_backward(1, 1, 9, 40);
  EXPECT_EQ(w.split, 16);
  EXPECT_EQ(w.channels_per_block, 8);
  EXPECT_EQ(w.chunks, 1);
  EXPECT_EQ(w.channel_blocks, 2);
  EXPECT_EQ(w.checkpoint_blocks, 2);
  // generation 1 (d_state <= 16 only): the one-state-per-thread reverse pass, 16 channels per block; the same
  // checkpoint pass
  const auto g1 = plan_scan_backward(2, 17, 45, 16, 1);
  EXPECT_TRUE(g1.one_state);
  EXPECT_EQ(g1.split, 16);
  EXPECT_EQ(g1.channels_per_block, 16);
  EXPECT_EQ(g1.channel_blocks, 3);
  EXPECT_EQ(g1.checkpoint_blocks, p.checkpoint_blocks);
  EXPECT_EQ(g1.partial_bc_floats, 2 * 3 * 17 * 16);
  EXPECT_FALSE(plan_scan_backward(2, 17, 45, 17, 1).one_state);
  EXPECT_FALSE(p.one_state);
  // batch 8, 16k tokens, d_inner 1536, d_state 16: the checkpoints are 1/16 of the expanded state (8 x 16k x 1536 x
  // 16 floats), the whole workspace (with the dB/dC partials of 48 channel blocks) under 1/6 of it.
  const auto big = plan_scan_backward(8, 16384, 1536, 16);
  const double expanded = 8.0 * 16384 * 1536 * 16;
  EXPECT_EQ(double(big.checkpoint_floats) * 16, expanded);
  EXPECT_LT(double(big.workspace_bytes()), 4 * expanded / 6);
}
