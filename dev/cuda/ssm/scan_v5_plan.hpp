// Retired from src/kernels/ssm_choice.hpp (not built): the chunk plan of v5, the chunked scan (scan_v5.cu beside
// it; generations 9 and 10, 0.47-0.59x v4 in H200 run s11-9; docs/worklog/ssm-scan.md "v5"). It was unit-tested in the
// CPU build (ScanChunkPlan.FillsTheGridAndKeepsAWindowInL2, tests/ssm/test_ssm_choice.cpp before its retirement).
#pragma once
#include <cstdint>

namespace flashkit::kernels {

// v5, the chunked scan (dev/cuda/ssm/scan_v5.cu; d_state <= 16). v4 runs 384 blocks at batch 8, d_inner
// 1536 (11 warps per SM on an H200: too few dependent recurrences to hide their latency); v5 cuts each sequence into
// chunks of chunk_len steps and scans `window` of them at once: pass 1 per chunk from a zero state (its end state and
// its sum of dt), a chain over the window's chunk boundaries, pass 2 (v4's block) per chunk from its corrected start
// state. Windows run one after the other, so pass 2 finds the window's u, delta and B still in L2 when the window's
// u and delta fit in l2_bytes. `direct`: the grid is already full without chunks (window 1): v5 runs v4_npt4 as is.
// The numbers: docs/worklog/ssm-scan.md "v5".
struct ScanChunkPlan {
  bool direct = false;
  int64_t chunk_len = 0;  // steps per chunk, a multiple of v4's 16-step tile
  int64_t chunks = 0;     // ceil(seqlen / chunk_len)
  int64_t window = 0;     // chunks scanned in parallel by one pass launch
  int64_t windows = 0;    // ceil(chunks / window), run in order
  // Workspace (floats): per chunk of a window the end state, then start state [window, batch, d_inner, d_state]
  // (the chain rewrites it in place) and the sum of dt [window, batch, d_inner]; the state carried from one window
  // to the next [batch, d_inner, d_state].
  int64_t state_floats = 0, dt_sum_floats = 0, carry_floats = 0;
  int64_t workspace_bytes() const { return 4 * (state_floats + dt_sum_floats + carry_floats); }
};

// A plan with the given chunk length (> 0, a multiple of 16) and window (> 0; capped at the chunk count); the tests
// use it to force many windows on small shapes.
inline ScanChunkPlan make_scan_chunk_plan(int64_t batch, int64_t seqlen, int64_t d_inner, int64_t d_state,
                                          int64_t chunk_len, int64_t window) {
  ScanChunkPlan p;
  p.chunk_len = chunk_len;
  p.chunks = (seqlen + chunk_len - 1) / chunk_len;
  p.window = window < p.chunks ? window : p.chunks;
  if (p.window < 1) p.window = 1;
  p.windows = (p.chunks + p.window - 1) / p.window;
  p.state_floats = p.window * batch * d_inner * d_state;
  p.dt_sum_floats = p.window * batch * d_inner;
  p.carry_floats = batch * d_inner * d_state;
  return p;
}

constexpr int64_t kScanV5ResidentBlocks = 4;  // v4_npt4's block per SM (registers: __launch_bounds__(128, 4))
constexpr int64_t kScanV5MaxWindows = 16;     // each window is three launches: bounds the launch gaps
constexpr int64_t kScanV5L2Bytes = 32 << 20;  // a window's u and delta kept under this (H200: 50 MB of L2)

// sms: the device's multiprocessors. The window (chunks scanned at once): among those giving 4..12 blocks per SM
// (1..3 waves of the 4 resident ones), the one whose last wave is fullest (a partial wave idles SMs), the smallest
// of equals; a direct plan (window 1) when v4's grid, ceil(d_inner / 32) x batch blocks, has 4 per SM already. The
// windows: as few as keep a window's u and delta (8 bytes per step and channel) within l2_bytes, at most
// max_windows; the chunk length: the sequence split evenly over windows x window chunks, rounded up to 16 steps.
inline ScanChunkPlan plan_scan_chunked(int64_t batch, int64_t seqlen, int64_t d_inner, int64_t d_state, int sms,
                                       int64_t l2_bytes = kScanV5L2Bytes, int64_t max_windows = kScanV5MaxWindows) {
  auto div_up = [](int64_t x, int64_t y) { return (x + y - 1) / (y > 0 ? y : 1); };
  const int64_t blocks = batch * div_up(d_inner, 32), slots = kScanV5ResidentBlocks * (sms > 0 ? sms : 1);
  int64_t window = 1;
  if (blocks < slots && seqlen > 16) {
    double best = -1;
    for (int64_t w = div_up(slots, blocks); w <= div_up(3 * slots, blocks) && w <= 64; ++w) {
      const double fill = double(w * blocks) / double(div_up(w * blocks, slots) * slots);
      if (fill > best + 1e-9) best = fill, window = w;
    }
  }
  if (window == 1) {
    ScanChunkPlan p = make_scan_chunk_plan(batch, seqlen, d_inner, d_state, div_up(seqlen > 0 ? seqlen : 1, 16) * 16, 1);
    p.direct = true;
    p.state_floats = p.dt_sum_floats = p.carry_floats = 0;
    return p;
  }
  const int64_t per_step = 8 * batch * d_inner;
  const int64_t l2_steps = l2_bytes / (per_step > 0 ? per_step : 1);  // steps of a window within l2_bytes
  int64_t windows = div_up(seqlen, l2_steps > 16 ? l2_steps : 16);
  windows = windows < 1 ? 1 : windows > max_windows ? max_windows : windows;
  const int64_t len = div_up(div_up(seqlen, windows * window), 16) * 16;
  return make_scan_chunk_plan(batch, seqlen, d_inner, d_state, len, window);
}

}  // namespace flashkit::kernels
