// The one-row decode GEMV's launch plan (engine/gemv_plan.hpp): legacy grid as gemv.cu computed it before the plan,
// the balanced grid, the bulk kernel's ring, and the automatic choice at the shapes that matter (Mamba 130m / 1.4b / 2.8b, Llama-3.2-1B,
// gemma-3-270m) on an H200-sized machine. Pure functions: checked in every build.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "engine/gemv_plan.hpp"
#include "flashkit/tuning.hpp"

using namespace flashkit::engine;

namespace {

constexpr int kSms = 132;
constexpr int kResident[4] = {2, 2, 3, 3};  // r2u4, r1u8 (<= 128 registers), the lean shapes (<= 80)

// Every row is covered exactly once, rows_per_block whole row groups, and one wave.
void expect_valid(const GemvPlan& p, int64_t n) {
  const GemvStepShape sh = gemv_step_shape(p.step);
  ASSERT_GT(p.rows_per_block, 0);
  EXPECT_EQ(p.rows_per_block % sh.r, 0);
  EXPECT_EQ(p.blocks, (n + p.rows_per_block - 1) / p.rows_per_block);
  EXPECT_GE(p.blocks * p.rows_per_block, n);
  EXPECT_LT((p.blocks - 1) * p.rows_per_block, n);
  EXPECT_LE(p.blocks, int64_t(kSms) * kResident[int(p.step)]);
}

TEST(GemvPlan, LegacyIsTheOldGrid) {
  // mamba-2.8b in_proj: 10240 rows >= 132 x 32: two rows a warp step; 264 blocks -> 20 pairs a block -> 256 blocks
  GemvPlan p = gemv_plan_legacy(10240, 2560, kSms, kResident);
  EXPECT_EQ(p.step, GemvStep::r2u4);
  EXPECT_EQ(p.rows_per_block, 40);
  EXPECT_EQ(p.blocks, 256);
  EXPECT_EQ(p.warp_steps, 3 * 3);  // 3 pairs for warps 0-3 (2 for 4-7), 10 chunks a lane in steps of 4: 3 steps
  // mamba-2.8b out_proj: 2560 rows, one a step; 10 rows a block over 8 warps: warps 0-1 take two
  p = gemv_plan_legacy(2560, 5120, kSms, kResident);
  EXPECT_EQ(p.step, GemvStep::r1u8);
  EXPECT_EQ(p.rows_per_block, 10);
  EXPECT_EQ(p.blocks, 256);
  EXPECT_EQ(p.warp_steps, 2 * 3);
  for (auto [n, k] : {std::pair<int64_t, int64_t>{10240, 2560}, {2560, 5120}, {3072, 2048}, {1, 8}, {50280, 768}})
    expect_valid(gemv_plan_legacy(n, k, kSms, kResident), n);
}

TEST(GemvPlan, BalancedGivesEveryWarpTheSameRows) {
  // mamba-2.8b in_proj: 4 rows a warp on 320 blocks (3 an SM), U 5 divides the 10 chunks a lane: 2 steps a row
  GemvPlan p = gemv_plan_balanced(10240, 2560, kSms, kResident);
  EXPECT_TRUE(p.balanced);
  EXPECT_EQ(p.step, GemvStep::r1u5_lean);
  EXPECT_EQ(p.rows_per_block, 4 * kGemvPlanWarps);
  EXPECT_EQ(p.blocks, 320);
  EXPECT_EQ(p.warp_steps, 8);
  // out_proj: one row a warp, 20 chunks a lane in 4 steps of 5
  p = gemv_plan_balanced(2560, 5120, kSms, kResident);
  EXPECT_EQ(p.step, GemvStep::r1u5_lean);
  EXPECT_EQ(p.rows_per_block, kGemvPlanWarps);
  EXPECT_EQ(p.blocks, 320);
  EXPECT_EQ(p.warp_steps, 4);
  // 8 chunks a lane (K 2048): U 5 would leave its second step 3/5 full; U 4
  p = gemv_plan_balanced(2048, 2048, kSms, kResident);
  EXPECT_EQ(p.step, GemvStep::r1u4_lean);
  EXPECT_EQ(p.warp_steps, 2);
  // fewer resident blocks than expected (registers or shared memory): more rows a warp, still one wave
  const int two[4] = {2, 2, 2, 2};
  p = gemv_plan_balanced(10240, 2560, kSms, two);
  EXPECT_EQ(p.rows_per_block, 5 * kGemvPlanWarps);
  EXPECT_EQ(p.blocks, 256);
  for (auto [n, k] : {std::pair<int64_t, int64_t>{10240, 2560}, {2560, 5120}, {3072, 768}, {1, 8}, {7, 24},
                      {100003, 520}})
    expect_valid(gemv_plan_balanced(n, k, kSms, kResident), n);
}

TEST(GemvPlan, AutomaticIsLegacyWithoutTheBulkKernel) {
  // (no GemvBulkLimits: the device cannot run the bulk kernel, e.g. before sm_90)
  auto pick = [](int64_t n, int64_t k) { return gemv_plan(n, k, kSms, kResident, GemvPlanMode::automatic); };
  // The balanced plan shortens the busiest warp at mamba-2.8b (in_proj 9 -> 8 steps, out_proj 6 -> 4) and
  // mamba-130m's in_proj, but measured no faster there (run s13-5): automatic stays legacy everywhere.
  for (auto [n, k] : {std::pair<int64_t, int64_t>{10240, 2560}, {2560, 5120}, {3072, 768}})
    EXPECT_LT(gemv_plan_balanced(n, k, kSms, kResident).warp_steps, gemv_plan_legacy(n, k, kSms, kResident).warp_steps);
  // mamba-2.8b and -130m as above, mamba-1.4b (in_proj 8192 x 2048, out_proj 2048 x 4096), mamba-130m out_proj and lm_head,
  // Llama-3.2-1B qkv (a tie), o, down, lm_head; gemma-3-270m lm_head
  for (auto [n, k] : {std::pair<int64_t, int64_t>{10240, 2560}, {2560, 5120}, {3072, 768}, {8192, 2048}, {2048, 4096},
                      {768, 1536}, {50280, 768}, {3072, 2048},
                      {2048, 2048}, {2048, 8192}, {128256, 2048}, {262144, 640}}) {
    const GemvPlan a = pick(n, k), l = gemv_plan_legacy(n, k, kSms, kResident);
    EXPECT_FALSE(a.balanced) << n << " x " << k;
    EXPECT_FALSE(a.bulk) << n << " x " << k;
    EXPECT_EQ(a.step, l.step) << n << " x " << k;
    EXPECT_EQ(a.rows_per_block, l.rows_per_block) << n << " x " << k;
  }
  // forced modes
  EXPECT_FALSE(gemv_plan(10240, 2560, kSms, kResident, GemvPlanMode::legacy).balanced);
  EXPECT_TRUE(gemv_plan(2048, 8192, kSms, kResident, GemvPlanMode::balanced).balanced);
  EXPECT_FALSE(gemv_plan(2048, 8192, kSms, kResident, GemvPlanMode::bulk).bulk);  // bulk asked for, not supported
}

// An H200: 200 KB of dynamic shared memory a block (gemv.cu max_smem), one input row of K floats.
GemvBulkLimits h200(int64_t k, bool keep_h = false) {
  GemvBulkLimits l;
  l.supported = true;
  l.smem_cap = 200 << 10;
  l.input_bytes = k * 4 * (keep_h ? 2 : 1);
  return l;
}

// Every row in exactly one CTA (CTA b: [b n / blocks, (b + 1) n / blocks), at least one each), whole rows per stage,
// stages within the mbarriers the kernel has, within shared memory, and copies an mbarrier can count.
void expect_valid_bulk(const GemvPlan& p, int64_t n, int64_t k, const GemvBulkLimits& lim) {
  ASSERT_TRUE(p.bulk) << n << " x " << k;
  EXPECT_FALSE(p.balanced);
  EXPECT_GE(p.blocks, 1);
  EXPECT_LE(p.blocks, kSms);
  EXPECT_LE(p.blocks, n);  // every CTA at least one row
  int64_t covered = 0, most = 0;
  for (int64_t b = 0; b < p.blocks; ++b) {
    const int64_t lo = b * n / p.blocks, hi = (b + 1) * n / p.blocks;
    EXPECT_EQ(lo, covered);
    EXPECT_GE(hi - lo, 1);
    covered = hi, most = std::max(most, hi - lo);
  }
  EXPECT_EQ(covered, n);
  EXPECT_EQ(p.rows_per_block, most);
  EXPECT_GE(p.rows_per_stage, 1);
  EXPECT_LE(p.rows_per_stage, most);
  EXPECT_GE(p.stages, 2);
  EXPECT_LE(p.stages, kGemvBulkMaxStages);
  EXPECT_LE(p.rows_per_stage * k * 2, kGemvBulkMaxCopyBytes);
  EXPECT_EQ(p.smem_bytes, p.stages * p.rows_per_stage * k * 2 + lim.input_bytes);
  EXPECT_LE(p.smem_bytes, lim.smem_cap);
}

TEST(GemvPlan, BulkStreamsWholeRowsThroughTheRing) {
  // mamba-2.8b in_proj: 10240 rows of 5 KB over 132 CTAs (77-78 rows each), 6 rows (30 KB) a stage, 4 stages (the
  // 128 KB ring target), 120 KB of ring + the 10 KB input row
  GemvBulkLimits lim = h200(2560);
  GemvPlan p = gemv_plan_bulk(10240, 2560, kSms, lim);
  expect_valid_bulk(p, 10240, 2560, lim);
  EXPECT_EQ(p.blocks, 132);
  EXPECT_EQ(p.rows_per_block, 78);
  EXPECT_EQ(p.rows_per_stage, 6);
  EXPECT_EQ(p.stages, 4);
  EXPECT_EQ(p.smem_bytes, 4 * 30720 + 10240);
  // out_proj: 2560 rows of 10 KB, 19-20 a CTA, 3 a stage
  lim = h200(5120);
  p = gemv_plan_bulk(2560, 5120, kSms, lim);
  expect_valid_bulk(p, 2560, 5120, lim);
  EXPECT_EQ(p.rows_per_stage, 3);
  EXPECT_EQ(p.stages, 4);
  // Llama-8B down_proj (K 14336: 28 KB rows): one row a stage, 4 stages + the 56 KB input row
  lim = h200(14336);
  p = gemv_plan_bulk(4096, 14336, kSms, lim);
  expect_valid_bulk(p, 4096, 14336, lim);
  EXPECT_EQ(p.rows_per_stage, 1);
  EXPECT_EQ(p.stages, 4);
  // h kept for a side output (twice the input bytes): the ring shrinks to what is left
  lim = h200(14336, true);
  p = gemv_plan_bulk(4096, 14336, kSms, lim);
  expect_valid_bulk(p, 4096, 14336, lim);
  EXPECT_EQ(p.stages, 3);
  // a smaller ring target (Tuning::cuda_gemv_ring_kb): 64 KB = 2 stages of 30 KB; a larger one: up to 8
  lim = h200(2560), lim.ring_bytes = 64 << 10;
  EXPECT_EQ(gemv_plan_bulk(10240, 2560, kSms, lim).stages, 2);
  lim.ring_bytes = 1 << 20;
  p = gemv_plan_bulk(10240, 2560, kSms, lim);
  expect_valid_bulk(p, 10240, 2560, lim);
  EXPECT_EQ(p.stages, 6);  // (200 KB - 10 KB) / 30 KB
  // fewer rows than SMs: one row a CTA, one row a stage, the ring no longer than 2 stages
  lim = h200(768);
  p = gemv_plan_bulk(100, 768, kSms, lim);
  expect_valid_bulk(p, 100, 768, lim);
  EXPECT_EQ(p.blocks, 100);
  EXPECT_EQ(p.rows_per_stage, 1);
  EXPECT_EQ(p.stages, 2);
  // mamba-130m in_proj (3072 x 768: 23-24 rows of 1.5 KB a CTA): stages of a quarter of a CTA's bytes (6 rows, 9 KB),
  // not one 32 KB stage holding nearly all of them
  lim = h200(768);
  p = gemv_plan_bulk(3072, 768, kSms, lim);
  expect_valid_bulk(p, 3072, 768, lim);
  EXPECT_EQ(p.rows_per_stage, 6);
  EXPECT_EQ(p.stages, 4);
  // odd and tiny shapes
  for (auto [n, k] : {std::pair<int64_t, int64_t>{1, 8}, {7, 24}, {1001, 1288}, {133, 8}, {100003, 520}, {3072, 768},
                      {50280, 768}, {128256, 2048}, {14336, 4096}, {5120, 2560}}) {
    lim = h200(k);
    expect_valid_bulk(gemv_plan_bulk(n, k, kSms, lim), n, k, lim);
  }
}

TEST(GemvPlan, BulkDeclinesWhatItCannotRun) {
  GemvBulkLimits lim = h200(2560);
  lim.supported = false;  // not sm_90 device code
  EXPECT_FALSE(gemv_plan_bulk(10240, 2560, kSms, lim).bulk);
  // K 32768: the 128 KB input row leaves 72 KB, under two 64 KB rows
  lim = h200(32768);
  EXPECT_FALSE(gemv_plan_bulk(4096, 32768, kSms, lim).bulk);
  // K 25600: exactly two 50 KB stages after the 100 KB input row
  lim = h200(25600);
  expect_valid_bulk(gemv_plan_bulk(4096, 25600, kSms, lim), 4096, 25600, lim);
  EXPECT_FALSE(gemv_plan_bulk(0, 2560, kSms, h200(2560)).bulk);
}

TEST(GemvPlan, AutomaticIsBulkWhereItApplies) {
  for (auto [n, k] : {std::pair<int64_t, int64_t>{10240, 2560}, {2560, 5120}, {3072, 768}, {768, 1536},
                      {50280, 768}, {14336, 4096}, {4096, 14336}, {262144, 640}}) {
    const GemvBulkLimits lim = h200(k);
    for (GemvPlanMode m : {GemvPlanMode::automatic, GemvPlanMode::bulk}) {
      const GemvPlan a = gemv_plan(n, k, kSms, kResident, m, lim), b = gemv_plan_bulk(n, k, kSms, lim);
      EXPECT_TRUE(a.bulk) << n << " x " << k;
      EXPECT_EQ(a.stages, b.stages);
      EXPECT_EQ(a.rows_per_stage, b.rows_per_stage);
    }
    // forced legacy and balanced ignore it
    EXPECT_FALSE(gemv_plan(n, k, kSms, kResident, GemvPlanMode::legacy, lim).bulk);
    EXPECT_FALSE(gemv_plan(n, k, kSms, kResident, GemvPlanMode::balanced, lim).bulk);
  }
  // where it does not apply: the legacy grid
  const GemvPlan a = gemv_plan(4096, 32768, kSms, kResident, GemvPlanMode::automatic, h200(32768)),
                 l = gemv_plan_legacy(4096, 32768, kSms, kResident);
  EXPECT_FALSE(a.bulk);
  EXPECT_EQ(a.step, l.step);
  EXPECT_EQ(a.rows_per_block, l.rows_per_block);
  EXPECT_EQ(a.blocks, l.blocks);
}

// FLASHKIT_CUDA_GEMV_PLAN (tuning_from_env) forces a plan for A/B runs; anything else is automatic.
TEST(GemvPlan, ModeFromTheEnvironment) {
  const char* name = "FLASHKIT_CUDA_GEMV_PLAN";
  const char* before = std::getenv(name);
  const std::string saved = before ? before : "";
  for (auto [value, want] : {std::pair{"legacy", 1}, {"balanced", 2}, {"bulk", 3}, {"auto", 0}, {"fast", 0}}) {
    setenv(name, value, 1);
    testing::internal::CaptureStderr();
    EXPECT_EQ(flashkit::tuning_from_env().cuda_gemv_plan, want) << value;
    testing::internal::GetCapturedStderr();
  }
  unsetenv(name);
  EXPECT_EQ(flashkit::tuning_from_env().cuda_gemv_plan, 0);
  EXPECT_EQ(flashkit::Tuning{}.cuda_gemv_plan, 0);
  if (before) setenv(name, saved.c_str(), 1);
}

// FLASHKIT_CUDA_GEMV_RING_KB: the bulk ring's target for sweeps, 16..1024 KB; anything else is the default (0).
TEST(GemvPlan, RingFromTheEnvironment) {
  const char* name = "FLASHKIT_CUDA_GEMV_RING_KB";
  const char* before = std::getenv(name);
  const std::string saved = before ? before : "";
  for (auto [value, want] : {std::pair{"64", 64}, {"1024", 1024}, {"8", 0}, {"2048", 0}, {"big", 0}}) {
    setenv(name, value, 1);
    testing::internal::CaptureStderr();
    EXPECT_EQ(flashkit::tuning_from_env().cuda_gemv_ring_kb, want) << value;
    testing::internal::GetCapturedStderr();
  }
  unsetenv(name);
  EXPECT_EQ(flashkit::tuning_from_env().cuda_gemv_ring_kb, 0);
  if (before) setenv(name, saved.c_str(), 1);
}

}  // namespace
