// The one-row decode GEMV's launch plan (gemv_plan.hpp).
#include "engine/gemv_plan.hpp"

#include <algorithm>

namespace flashkit::engine {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t lane_chunks(int64_t k) { return ceil_div(k / 8, 32); }  // 16-byte chunks a lane reads per row
int resident_of(const int (&resident)[4], GemvStep s) { return std::max(1, resident[int(s)]); }
}  // namespace

GemvStepShape gemv_step_shape(GemvStep s) {
  switch (s) {
    case GemvStep::r2u4: return {2, 4, 2};
    case GemvStep::r1u8: return {1, 8, 2};
    case GemvStep::r1u4_lean: return {1, 4, 3};
    case GemvStep::r1u5_lean: return {1, 5, 3};
  }
  return {};
}

GemvPlan gemv_plan_legacy(int64_t n, int64_t k, int sms, const int (&resident)[4]) {
  // gemv.cu before the plan: two rows a warp step when there are enough rows to fill the machine that way; one wave
  // of at most 4 blocks an SM; row groups split evenly over the blocks (not over the warps).
  GemvPlan p;
  p.step = n >= int64_t(sms) * kGemvPlanWarps * 4 ? GemvStep::r2u4 : GemvStep::r1u8;
  const GemvStepShape sh = gemv_step_shape(p.step);
  const int64_t groups = ceil_div(n, sh.r);
  const int64_t max_blocks = int64_t(sms) * std::clamp(resident_of(resident, p.step), 1, 4);
  int64_t blocks = std::max<int64_t>(1, std::min(ceil_div(groups, kGemvPlanWarps), max_blocks));
  const int64_t groups_per_block = ceil_div(groups, blocks);
  p.rows_per_block = groups_per_block * sh.r;
  p.blocks = ceil_div(n, p.rows_per_block);
  p.warp_steps = ceil_div(groups_per_block, kGemvPlanWarps) * ceil_div(lane_chunks(k), sh.u);
  return p;
}

GemvPlan gemv_plan_balanced(int64_t n, int64_t k, int sms, const int (&resident)[4]) {
  GemvPlan best;
  for (GemvStep s : {GemvStep::r1u4_lean, GemvStep::r1u5_lean}) {
    const GemvStepShape sh = gemv_step_shape(s);
    const int64_t slots = int64_t(sms) * resident_of(resident, s);  // blocks of one wave
    const int64_t rows_per_warp = std::max<int64_t>(1, ceil_div(n, slots * kGemvPlanWarps));
    GemvPlan p;
    p.step = s;
    p.balanced = true;
    p.rows_per_block = rows_per_warp * kGemvPlanWarps;
    p.blocks = ceil_div(n, p.rows_per_block);
    const int64_t lc = lane_chunks(k);
    p.warp_steps = rows_per_warp * ceil_div(lc, sh.u);
    // U 5 only where it divides the lane's chunks (K 2560, 5120, ...): otherwise its last step is partly empty
    const bool exact = lc % sh.u == 0;
    if (s == GemvStep::r1u5_lean && !exact) continue;
    if (best.blocks == 0 || p.warp_steps < best.warp_steps) best = p;
  }
  return best;
}

GemvPlan gemv_plan(int64_t n, int64_t k, int sms, const int (&resident)[4], GemvPlanMode mode) {
  const GemvPlan legacy = gemv_plan_legacy(n, k, sms, resident);
  if (mode == GemvPlanMode::legacy) return legacy;
  // automatic = legacy: the balanced plan's fewer warp steps did not make it faster where it applies (run s13-5,
  // mamba-2.8b: 0.984x end to end; ncu in_proj 21.0-22.2 -> 23.9-25.5 us, out_proj 13.7-14.6 -> 13.0 us).
  return mode == GemvPlanMode::balanced ? gemv_plan_balanced(n, k, sms, resident) : legacy;
}

}  // namespace flashkit::engine
