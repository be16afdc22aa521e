// The one-row decode GEMV's launch plan (cuda/gemv.cu): which step shape (R rows x U 16-byte chunks per lane) and
// which grid. Pure: compiled in every build, unit-tested on the CPU (tests/engine/test_gemv_plan.cpp).
//
// Why a plan: the GEMV is latency-bound per warp (a warp walks its rows in steps, each step one memory round trip
// with the next step's loads in flight), so a block lasts as long as its busiest warp. The legacy grid sizes
// rows per block from the block count alone; at shapes such as mamba-2.8b's in_proj (N 10240, K 2560: 20 row pairs
// over 8 warps) or out_proj (N 2560, K 5120: 10 rows over 8 warps) some warps carry 1.5-2x the others' rows, and
// the last step of each row is partly empty (K 2560 = 10 chunks a lane in steps of 4). The balanced plan gives every
// warp the same whole number of rows, picks U dividing the chunks a lane reads per row where it can, and uses a
// leaner instantiation (3 blocks of 256 threads per SM) so that more warps share the rows in one wave.
// The plan never changes a sum's order: lane l always accumulates chunks l, l + 32, ... of its row, then the warp's
// butterfly (gemv.cu), so every plan gives the same bits.
#pragma once
#include <cstdint>

namespace flashkit::engine {

constexpr int kGemvPlanWarps = 8;  // warps per GEMV block (gemv.cu kWarps)

enum class GemvPlanMode { automatic = 0, legacy = 1, balanced = 2 };  // Tuning::cuda_gemv_plan

// A compiled step shape of the one-row, ungated GEMV (gemv.cu instantiates exactly these).
enum class GemvStep { r2u4, r1u8, r1u4_lean, r1u5_lean };
struct GemvStepShape {
  int r = 1;           // rows per warp step
  int u = 8;           // 16-byte chunks per lane per row and step
  int min_blocks = 2;  // __launch_bounds__ blocks per SM (3: <= 80 registers)
};
GemvStepShape gemv_step_shape(GemvStep s);

struct GemvPlan {
  GemvStep step = GemvStep::r1u8;
  int64_t rows_per_block = 0;  // a multiple of the step's r
  int64_t blocks = 0;
  int64_t warp_steps = 0;      // steps of the busiest warp (the plan's cost)
  bool balanced = false;
};

// resident[s]: blocks of step shape s that fit one SM (cudaOccupancyMaxActiveBlocksPerMultiprocessor; <= 0 treated
// as 1). n, k: the matrix [n, k], k % 8 == 0; sms > 0.
GemvPlan gemv_plan_legacy(int64_t n, int64_t k, int sms, const int (&resident)[4]);
// Every warp the same number of whole rows (the last block may have fewer), one wave, the U of the lean shapes that
// needs the fewest steps per row (ties: U 5 only where it divides the chunks exactly).
GemvPlan gemv_plan_balanced(int64_t n, int64_t k, int sms, const int (&resident)[4]);
// automatic: legacy (the balanced plan measured no faster where it shortens the busiest warp, run s13-5).
GemvPlan gemv_plan(int64_t n, int64_t k, int sms, const int (&resident)[4], GemvPlanMode mode);

}  // namespace flashkit::engine
