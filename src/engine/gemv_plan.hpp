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
//
// The bulk plan (v4 of docs/worklog/mamba-decode-cuda.md) is a different kernel, not a grid of the step kernels: one
// CTA per SM owns a contiguous range of whole rows and streams their bytes into a shared-memory ring with 1-D bulk
// copies (cp.async.bulk, sm_90), stage by stage (a stage is whole rows), while its warps take the rows in turn and sum
// each from shared memory in the same order. Its plan sizes the stages and the ring from the shared memory left after
// the input row.
#pragma once
#include <cstdint>

namespace flashkit::engine {

constexpr int kGemvPlanWarps = 8;  // warps per GEMV block (gemv.cu kWarps)

enum class GemvPlanMode { automatic = 0, legacy = 1, balanced = 2, bulk = 3 };  // Tuning::cuda_gemv_plan

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
  // The bulk kernel (bulk == true; step, rows_per_block and warp_steps then unused): `blocks` CTAs, CTA b owning rows
  // [b n / blocks, (b + 1) n / blocks); stages of rows_per_stage rows, `stages` of them in the shared-memory ring.
  bool bulk = false;
  int64_t rows_per_stage = 0;
  int stages = 0;
  int64_t smem_bytes = 0;  // dynamic shared memory: the ring, then the input row(s)
};

constexpr int kGemvBulkMaxStages = 8;              // mbarrier pairs the kernel declares
constexpr int64_t kGemvBulkStageBytes = 32 << 10;  // a stage's target size (whole rows: at least one)
constexpr int64_t kGemvBulkMinStagesPerCta = 4;    // smaller stages where a CTA's rows would fill fewer
constexpr int64_t kGemvBulkRingBytes = 128 << 10;  // the ring's default target (room left for the next kernel's blocks)
constexpr int64_t kGemvBulkMaxCopyBytes = (1 << 20) - 16;  // an mbarrier's transaction count is below 2^20

// What the bulk kernel needs from the call and the device. supported: the device runs the sm_90 code and the call is
// one row, ungated (gemv.cu); smem_cap: dynamic shared memory a block may use; input_bytes: the input row(s) the
// kernel keeps in shared memory (K * 4, twice that when h is kept for a side output); ring_bytes: the ring's target
// (0: kGemvBulkRingBytes; Tuning::cuda_gemv_ring_kb for sweeps).
struct GemvBulkLimits {
  bool supported = false;
  int64_t smem_cap = 0;
  int64_t input_bytes = 0;
  int64_t ring_bytes = 0;
};

// resident[s]: blocks of step shape s that fit one SM (cudaOccupancyMaxActiveBlocksPerMultiprocessor; <= 0 treated
// as 1). n, k: the matrix [n, k], k % 8 == 0; sms > 0.
GemvPlan gemv_plan_legacy(int64_t n, int64_t k, int sms, const int (&resident)[4]);
// Every warp the same number of whole rows (the last block may have fewer), one wave, the U of the lean shapes that
// needs the fewest steps per row (ties: U 5 only where it divides the chunks exactly).
GemvPlan gemv_plan_balanced(int64_t n, int64_t k, int sms, const int (&resident)[4]);
// The bulk kernel's plan: min(sms, n) CTAs; a stage holds min(kGemvBulkStageBytes, a CTA's bytes / 4) / row bytes
// whole rows (at least one, at most a CTA's rows); as many stages as the ring target holds, 2 .. kGemvBulkMaxStages, fewer when shared memory
// (smem_cap - input_bytes) is short, or when a CTA has fewer stages of rows. bulk == false (not applicable) when
// !lim.supported or when two stages do not fit.
GemvPlan gemv_plan_bulk(int64_t n, int64_t k, int sms, const GemvBulkLimits& lim);
// automatic: the bulk kernel where it applies, else legacy (the balanced plan measured no faster where it shortens
// the busiest warp, run s13-5); legacy, balanced: always that grid; bulk: the bulk kernel where it applies, else
// legacy.
GemvPlan gemv_plan(int64_t n, int64_t k, int sms, const int (&resident)[4], GemvPlanMode mode,
                   const GemvBulkLimits& bulk = {});

}  // namespace flashkit::engine
