// Who stages the per-query LSE/Dsum of the warp-specialized Hopper backward (flash_bwd_sm90_ws.cuh, v22), and where:
// pure functions, compiled for the device and for the host (the CPU build's tests check them).
// Protocol: the consumers stage step s+1's values during step s, between the dS^T exchange barriers of steps s-1
// and s; step s reads its slot between those same two barriers. So a slot must differ from the previous step's
// (written in the epoch where the previous step reads) -- a ring of two slots by step parity.
#pragma once

#if defined(__CUDACC__)
#define FK_BWDWS_HD __host__ __device__
#else
#define FK_BWDWS_HD
#endif

namespace flashkit::cuda {

// The query row of a step (of BM rows) that consumer thread `tid` (0..255) stages, or -1: rows [0, BM/2) by the
// first BM/2 threads of warpgroup 0, rows [BM/2, BM) by those of warpgroup 1 (the loads split evenly).
template <int BM>
FK_BWDWS_HD constexpr int bwd_ws_lse_row(int tid) {
  static_assert(BM % 2 == 0 && BM / 2 <= 128, "at most 128 rows per warpgroup");
  return (tid & 127) < BM / 2 ? (tid >> 7) * (BM / 2) + (tid & 127) : -1;
}

// The LSE/Dsum slot of step `step`.
FK_BWDWS_HD constexpr int bwd_ws_lse_slot(int step) { return step & 1; }
constexpr int kBwdWsLseSlots = 2;

}  // namespace flashkit::cuda
