// v4 of the fused selective scan forward (d_state <= 16; docs/worklog/ssm-scan.md "v4"): the same compulsory bytes
// as v1-v3 (u, delta, z, B, C read once, y written once, the state never in HBM), aimed at memory-level parallelism.
// v3 (two states per thread) measured 26% of the copy ceiling: its next chunk's loads went to registers, so a block
// had at most one chunk (16 steps, ~8 KB) in flight, ~24 KB per SM, under the ~30 KB per SM that Little's law asks
// for at 4.24 TB/s and ~1 us of loaded latency. v4:
//   * a block owns 32 channels (128-byte rows of u, delta, z, y) of one sequence and walks time in chunks of TC
//     steps through a ring of STAGES shared-memory stages filled by cp.async (16-byte copies when every pointer
//     and stride allows, 4-byte ones otherwise; zero-filled past the end), so STAGES - 1 chunks are in flight
//     while one is scanned: ~24 KB per block (18 KB of u, delta, z), ~3 blocks per SM at batch 8;
//   * every thread owns (step, 4-channel group) items: it copies their u, delta, z, turns them into {dt, dt u}
//     (bias, softplus; dt = 0 past the end so h is unchanged), and later sums their partial outputs, applies D and
//     the gate and stores y as one 16-byte row piece. Because a thread reads back only what it copied itself, its
//     own cp.async.wait_group is enough before that work: two barriers per chunk instead of v3's three;
//   * the recurrence: NPT states per thread (16 / NPT threads per channel), A pre-scaled by log2(e), exp as
//     ex2.approx.ftz (for POLY of a thread's states a polynomial on the FMA pipe), the state in registers across
//     chunks; the thread's C h goes to a padded [step][thread][channel] tile (conflict-free writes, 16-byte
//     conflict-free reads in the epilogue).
// Generations 5 (NPT 2, 256 threads), 6 (NPT 4, 128 threads) and 8 (as 6, one of a thread's 4 exps on the FMA pipe
// instead of the SFU) and 11 (as 6 with less per-chunk overhead: scan_v4_block's LEAN) of choose_scan_kernel
// (kernels/ssm_choice.hpp). The block body is scan_v4_block.cuh (the retired v5, dev/cuda/ssm/, ran it per chunk).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "core/cuda_check.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/cuda/ssm/scan_v4_block.cuh"
#include "kernels/cuda/ssm/ssm_cuda.hpp"

namespace flashkit::kernels {
namespace {

using namespace scan_v4_detail;

// POLY: how many of a thread's NPT states take exp2_fma instead of ex2.approx.
template <int NPT, int TC, int STAGES, int POLY>
__global__ void __launch_bounds__(V4<NPT, TC, STAGES>::kThreads, NPT == 2 ? 3 : 4) scan_v4_kernel(ScanArgs a,
                                                                                                  bool vec) {
  scan_v4_block<NPT, TC, STAGES, POLY>(a, vec, blockIdx.y, int64_t(blockIdx.x) * kCh);
}

// Generation 11: v4_npt4's block with the per-chunk overhead cut (scan_v4_block's LEAN); its own kernel so that
// v4's keep their names and code.
template <int NPT, int TC, int STAGES, int POLY>
__global__ void __launch_bounds__(V4<NPT, TC, STAGES>::kThreads, NPT == 2 ? 3 : 4) scan_v4_lean_kernel(ScanArgs a,
                                                                                                       bool vec) {
  scan_v4_block<NPT, TC, STAGES, POLY, false, true>(a, vec, blockIdx.y, int64_t(blockIdx.x) * kCh);
}

template <int NPT, int TC, int STAGES, int POLY, bool LEAN = false>
void launch(const ScanArgs& a, cudaStream_t s) {
  using P = V4<NPT, TC, STAGES>;
  static_assert(POLY >= 0 && POLY <= NPT, "POLY counts a thread's states");
  void (*kernel)(ScanArgs, bool) = scan_v4_kernel<NPT, TC, STAGES, POLY>;
  if constexpr (LEAN) kernel = scan_v4_lean_kernel<NPT, TC, STAGES, POLY>;
  // Above 48 KB of dynamic shared memory needs an opt-in, once per device (not a stream operation: allowed while a
  // CUDA graph is being captured).
  static std::atomic<uint64_t> opted_in{0};
  int dev = 0;
  check_cuda(cudaGetDevice(&dev), "selective scan v4: cudaGetDevice");
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if (P::kSmemBytes > 48 * 1024 && !(opted_in.load() & bit)) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(P::kSmemBytes)),
               "selective scan v4: shared memory opt-in");
    opted_in.fetch_or(bit);
  }
  const dim3 grid(unsigned((a.d_inner + kCh - 1) / kCh), unsigned(a.batch));
  kernel<<<grid, P::kThreads, P::kSmemBytes, s>>>(a, vector_ok(a));
}

}  // namespace

void launch_scan_v4(const ScanArgs& a, void* stream, int states_per_thread, int fma_exp_states, bool lean) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream ? stream : cuda_stream());
  if (lean) launch<4, 16, 4, 0, true>(a, s);
  else if (states_per_thread == 4 && fma_exp_states == 1) launch<4, 16, 4, 1>(a, s);
  else if (states_per_thread == 4) launch<4, 16, 4, 0>(a, s);
  else launch<2, 16, 4, 0>(a, s);
  check_cuda(cudaGetLastError(), "selective scan v4 kernel launch");
}

}  // namespace flashkit::kernels
