// The CUDA selective-scan kernel choice (src/kernels/ssm_choice.hpp), a pure function run in the CPU build: v4 with
// four states per thread for d_state <= 16 in production, v1 kept reachable through generation 1, the other v3
// variants through 2 and 3, v2 through 4, v4 through 5, 6 and 8 (v3's former production kernel through 7, production v4 also through 6), v1's
// wide-state kernel beyond 16, the decode step by d_state; v5 (chunked) through 9 and 10 and its chunk plan; v4_npt4
// lean through 11, with two channels per thread through 12, pipelined through 13; and the backward's plan.
#include <gtest/gtest.h>

#include <set>
#include <string>

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
  for (int g = 1; g < flashkit::kernels::kScanGenerations; ++g)
    names.insert(scan_kernel_name(choose_scan_kernel(16, false, g)));
  EXPECT_EQ(int(names.size()), flashkit::kernels::kScanGenerations - 1);
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
  EXPECT_EQ(flashkit::kernels::kScanGenerations, 14);
  for (int64_t n : {1, 16}) EXPECT_EQ(choose_scan_kernel(n, false, 9), ScanKernel::v5_chunked) << n;
  EXPECT_EQ(choose_scan_kernel(16, false, 10), ScanKernel::v5_chunked_fma2);
  EXPECT_EQ(choose_scan_kernel(17, false, 10), ScanKernel::v1_n64);
  EXPECT_EQ(choose_scan_kernel(17, false, 9), ScanKernel::v1_n64);
}

// Generation 11: v4_npt4 with less per-chunk overhead (not production until the H200 measures it); beyond 16 states
// and for the decode step the generation does not matter.
TEST(ScanChoice, GenerationElevenIsV4Lean) {
  for (int64_t n : {1, 7, 16}) EXPECT_EQ(choose_scan_kernel(n, false, 11), ScanKernel::v4_npt4_lean) << n;
  EXPECT_EQ(choose_scan_kernel(17, false, 11), ScanKernel::v1_n64);
  EXPECT_EQ(choose_scan_kernel(16, true, 11), ScanKernel::step_n16);
  EXPECT_STREQ(scan_kernel_name(ScanKernel::v4_npt4_lean), "cuda.scan.v4.n16.split4.tc16.s4.lean");
}

// Generation 12: generation 11 with two channels per thread (not production until the H200 measures it against
// generation 11); beyond 16 states and for the decode step the generation does not matter.
TEST(ScanChoice, GenerationTwelveIsLeanWithTwoChannelsPerThread) {
  for (int64_t n : {1, 7, 16}) EXPECT_EQ(choose_scan_kernel(n, false, 12), ScanKernel::v4_npt4_lean_cpt2) << n;
  EXPECT_EQ(choose_scan_kernel(17, false, 12), ScanKernel::v1_n64);
  EXPECT_EQ(choose_scan_kernel(16, true, 12), ScanKernel::step_n16);
  EXPECT_STREQ(scan_kernel_name(ScanKernel::v4_npt4_lean_cpt2), "cuda.scan.v4.n16.split4.tc16.s4.lean.cpt2");
  EXPECT_NE(choose_scan_kernel(16, false, 0), ScanKernel::v4_npt4_lean_cpt2);  // the lead promotes it after the A/B
}

// Generation 13: generation 11 with its chunk phases software-pipelined (production since run s13-4: 1.11-1.12x).
TEST(ScanChoice, GenerationThirteenIsLeanPipelined) {
  for (int64_t n : {1, 7, 16}) EXPECT_EQ(choose_scan_kernel(n, false, 13), ScanKernel::v4_npt4_lean_pipe) << n;
  EXPECT_EQ(choose_scan_kernel(17, false, 13), ScanKernel::v1_n64);
  EXPECT_EQ(choose_scan_kernel(16, true, 13), ScanKernel::step_n16);
  EXPECT_STREQ(scan_kernel_name(ScanKernel::v4_npt4_lean_pipe), "cuda.scan.v4.n16.split4.tc16.s5.lean.pipe");
}

// v5's chunk plan (generation 9): on an H200 (132 SMs, 528 resident v4 blocks) at the benchmark's batch 8, d_inner
// 1536 (384 v4 blocks), four chunks at once (1536 blocks: 2.9 waves, 11.6 per SM, 97% of the waves' slots busy;
// two or three chunks would keep 73% busy), 1k tokens in 4 windows of 4 chunks of 64 steps (a window's u and delta, 8 bytes per
// step and channel, within 32 MB of L2); long sequences are capped at 16 windows (three launches each); a grid that
// is full without chunks runs v4 directly; the workspace is one window's end states and dt sums and the carried
// state.
TEST(ScanChunkPlan, FillsTheGridAndKeepsAWindowInL2) {
  using flashkit::kernels::plan_scan_chunked;
  const auto p = plan_scan_chunked(8, 1024, 1536, 16, 132);
  EXPECT_FALSE(p.direct);
  EXPECT_EQ(p.window, 4);
  EXPECT_EQ(p.chunk_len, 64);
  EXPECT_EQ(p.chunks, 16);
  EXPECT_EQ(p.windows, 4);
  const double per_sm = double(p.window) * 8 * 48 / 132;
  EXPECT_GE(per_sm, 4.0);
  EXPECT_LE(per_sm, 12.0);
  EXPECT_LE(p.window * p.chunk_len * 8 * 1536 * 8, flashkit::kernels::kScanV5L2Bytes);
  EXPECT_EQ(p.workspace_bytes(), 4 * (4 * 8 * 1536 * 16 + 4 * 8 * 1536 + 8 * 1536 * 16));
  for (int64_t L : {17, 1000, 4096, 32768, 100003}) {
    const auto q = plan_scan_chunked(8, L, 1536, 16, 132);
    EXPECT_EQ(q.chunk_len % 16, 0) << L;
    EXPECT_GE(q.chunks * q.chunk_len, L) << L;
    EXPECT_LT((q.chunks - 1) * q.chunk_len, L) << L;
    EXPECT_GE(q.windows * q.window, q.chunks) << L;
    EXPECT_LE(q.windows, flashkit::kernels::kScanV5MaxWindows) << L;
  }
  EXPECT_EQ(plan_scan_chunked(8, 32768, 1536, 16, 132).chunk_len, 512);  // 64 chunks, 16 windows
  // batch 1 (48 v4 blocks): 11 chunks at once fill exactly one wave of 528
  const auto one = plan_scan_chunked(1, 4096, 1536, 16, 132);
  EXPECT_EQ(one.window, 11);
  EXPECT_EQ(one.windows, 2);
  EXPECT_LE(one.window * one.chunk_len * 1536 * 8, flashkit::kernels::kScanV5L2Bytes);
  // a full grid without chunks (batch 64: 3072 blocks), or one tile of steps: v4 as is, no workspace
  for (const auto& d : {plan_scan_chunked(64, 4096, 1536, 16, 132), plan_scan_chunked(8, 16, 1536, 16, 132)}) {
    EXPECT_TRUE(d.direct);
    EXPECT_EQ(d.workspace_bytes(), 0);
  }
  // a forced plan (the tests' many windows): the window is capped at the chunk count
  const auto f = flashkit::kernels::make_scan_chunk_plan(2, 37, 19, 16, 16, 2);
  EXPECT_EQ(f.chunks, 3);
  EXPECT_EQ(f.windows, 2);
  EXPECT_EQ(flashkit::kernels::make_scan_chunk_plan(2, 37, 19, 16, 32, 8).window, 2);
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
