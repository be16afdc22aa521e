// The P^T/dS^T buffers of the warp-specialized d256 backward (flash_bwd_sm90_ws_d256.cuh, v24) and the dQ chunk of
// its bulk variant (v24b): pure functions, compiled for the device and for the host
// (tests/attention/test_cuda_choice.cpp and test_bwd_ws_d256_bulk.cpp check them).
// Protocol: the consumer warpgroups meet at one named barrier per step. Step s writes its P^T/dS^T columns between
// barriers s-1 and s, and both warpgroups' wgmmas read the whole tile between barriers s and s+1 (each waits for
// them before it reaches barrier s+1). So the buffer step s+1 writes must differ from the one step s reads in the
// same interval -- a ring of two buffers by step parity. v24b has one buffer and a second barrier per step instead
// (a warpgroup stores step s+1's tile only after both finished step s's products).
#pragma once

#include <cstdint>

#include "kernels/cuda/bwd_ws_staging.hpp"  // FK_BWDWS_HD

namespace flashkit::cuda {

constexpr int kBwdWsPdsBuffers = 2;
// The P^T/dS^T buffer of step `step`.
FK_BWDWS_HD constexpr int bwd_ws_pds_buffer(int step) { return step & 1; }

// v24b's dQ chunk: 64 query rows x 64 f32 head-dim columns, filled and drained kBwdWsD256DqChunks times per step.
// Chunk j of a step holds columns [64j, 64j + 64): warpgroup j/2's (each owns 128 columns), warpgroup 0 first.
constexpr int kBwdWsD256DqChunks = 4, kBwdWsD256DqCols = 64, kBwdWsD256DqRows = 64;
FK_BWDWS_HD constexpr int bwd_ws_d256_dq_owner(int chunk) { return chunk >> 1; }
FK_BWDWS_HD constexpr int bwd_ws_d256_dq_col0(int chunk) { return chunk * kBwdWsD256DqCols; }
// The warpgroup that fills the chunk after chunk `chunk` (the next step's chunk 0 after chunk 3): the writer
// frees the buffer to it.
FK_BWDWS_HD constexpr int bwd_ws_d256_dq_next_owner(int chunk) {
  return bwd_ws_d256_dq_owner((chunk + 1) % kBwdWsD256DqChunks);
}
// Whether the filler of chunk `chunk` of step `step` waits for the writer to free the buffer (all but the CTA's
// first fill), and whether the writer frees it after that chunk (all but the CTA's last, nobody waits for it).
FK_BWDWS_HD constexpr bool bwd_ws_d256_dq_fill_waits(int step, int chunk) { return step > 0 || chunk > 0; }
FK_BWDWS_HD constexpr bool bwd_ws_d256_dq_writer_frees(int step, int chunk, int nsteps) {
  return step + 1 < nsteps || chunk + 1 < kBwdWsD256DqChunks;
}
// Row r of the chunk starts at r * pitch (16-byte aligned for the bulk copies); the 16 bytes past a row's 256 hold
// nothing the copies read, so the kernel's mbarriers live there: mbarrier k at byte 256 + 8 (k & 1) of row k / 2.
constexpr uint32_t kBwdWsD256DqPitch = kBwdWsD256DqCols * 4 + 16;
constexpr uint32_t kBwdWsD256DqBytes = (kBwdWsD256DqRows - 1) * kBwdWsD256DqPitch + kBwdWsD256DqCols * 4;
FK_BWDWS_HD constexpr uint32_t bwd_ws_d256_dq_row_off(int r) { return uint32_t(r) * kBwdWsD256DqPitch; }
FK_BWDWS_HD constexpr uint32_t bwd_ws_d256_dq_mbar_off(int k) {
  return uint32_t(k >> 1) * kBwdWsD256DqPitch + kBwdWsD256DqCols * 4 + 8u * uint32_t(k & 1);
}

}  // namespace flashkit::cuda
