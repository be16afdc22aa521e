// Which CUDA selective-scan kernel runs (src/kernels/cuda/ssm/scan.cu): a pure function of the problem, unit-tested
// in the CPU build (tests/ssm/test_ssm_choice.cpp). `generation` 0 is production: for d_state <= 16 v3 with two
// states per thread (H200, batch 8, d_inner 1536: 26% of the copy ceiling at 1k-32k tokens against v2's 11%, 2.3x;
// docs/worklog/ssm-scan.md). 1 keeps v1 reachable, 2 and 3 the other v3 variants (one state per thread, chunks of 16
// / 32 steps: 19-20%), 4 keeps v2, 5 and 6 are v4 (cp.async ring, two / four states per thread; not yet measured),
// 7 is v3 with two states per thread by its own number (today the same kernel as 0), 8 is v4 with four states per
// thread, one exp of four on the FMA pipe (the SFU is the scan's second floor), so the tests and the benchmark
// compare every kernel on the same inputs and it stays reachable when kProductionScan changes. 9 is v5, the chunked
// two-pass scan over v4's block (scan_v5.cu, plan_scan_chunked below; not yet measured), 10 the same with two of a
// thread's four exps of pass 1 on the FMA pipe (pass 1 doubles the exps: the SFU becomes a floor). 11 is v4 with four
// states per thread and the per-chunk overhead cut (copy addresses carried across chunks, fast softplus and silu;
// docs/worklog/ssm-scan.md "v6"; production since run s12-9). 12 is generation 11 with two channels per thread, their
// recurrences interleaved (scan_v4_cpt.cu; docs/worklog/ssm-scan.md "generation 12"; not yet measured). 13 is
// generation 11 with its chunk phases software-pipelined (scan_v4_pipe.cu; "generation 13"; not yet measured).
#pragma once
#include <cstdint>

namespace flashkit::kernels {

constexpr int64_t kCudaMaxState = 64;  // register carry: d_state beyond this is refused in src/ops/ssm.cpp

enum class ScanKernel : int {
  v1_n16,  // v1: 4 threads per channel x 4 states, one basic block per time step (d_state <= 16)
  v1_n64,  // v1: 4 threads per channel x 16 states (d_state <= 64)
  v2_n16,  // v2: as v1_n16, per-step channel terms hoisted and the recurrence branch-free (d_state <= 16)
  v3_n16,    // v3: 16 threads per channel x 1 state, chunk terms once per channel, next chunk's loads in flight;
             // chunks of 16 steps (d_state <= 16)
  v3_n16_tc32,  // v3 with chunks of 32 steps
  v3_n16_npt2,  // v3 with 8 threads per channel x 2 states, chunks of 16 steps
  v4_npt2,   // v4 (scan_v4.cu): 32 channels per block, chunks of 16 steps through a 4-stage cp.async ring;
             // 8 threads per channel x 2 states (d_state <= 16)
  v4_npt4,   // v4 with 4 threads per channel x 4 states (128-thread blocks)
  v4_npt4_fma1,  // v4_npt4 with one of a thread's 4 exps on the FMA pipe (a polynomial) instead of the SFU
  v5_chunked,  // v5 (scan_v5.cu): the sequence in chunks scanned in parallel, v4_npt4's block per chunk, two passes
  v5_chunked_fma2,  // v5 with 2 of 4 exps per thread in pass 1 on the FMA pipe
  v4_npt4_lean,  // v4_npt4 with the per-chunk overhead cut: copy addresses carried across chunks, fast softplus / silu
  v4_npt4_lean_cpt2,  // v4_npt4_lean with 2 channels per thread (4 states each), 64-thread blocks of 32 channels
  v4_npt4_lean_pipe,  // v4_npt4_lean with chunk k's recurrence, k+1's prologue and k-1's epilogue in one basic block
  step_n16,  // decode step: 16 threads per channel (d_state <= 16)
  step_n64,  // decode step: 16 threads per channel x 4 states (d_state <= 64)
};

// Production's kernel for d_state <= 16 (generation 0). Promoting another generation is this one line (and the
// production test in tests/ssm/test_ssm_choice.cpp); every kernel keeps its own generation number below.
constexpr ScanKernel kProductionScan = ScanKernel::v4_npt4_lean_pipe;  // 1.11-1.12x generation 11 at 1k-8k (run s13-4)

// d_state <= 64 is validated before (kCudaMaxState); `step`: the one-token decode kernel.
constexpr int kScanGenerations = 14;  // 0..13

inline ScanKernel choose_scan_kernel(int64_t d_state, bool step, int generation = 0) {
  if (step) return d_state <= 16 ? ScanKernel::step_n16 : ScanKernel::step_n64;
  if (d_state > 16) return ScanKernel::v1_n64;
  switch (generation) {
    case 1: return ScanKernel::v1_n16;
    case 2: return ScanKernel::v3_n16;
    case 3: return ScanKernel::v3_n16_tc32;
    case 4: return ScanKernel::v2_n16;
    case 5: return ScanKernel::v4_npt2;
    case 6: return ScanKernel::v4_npt4;
    case 7: return ScanKernel::v3_n16_npt2;
    case 8: return ScanKernel::v4_npt4_fma1;
    case 9: return ScanKernel::v5_chunked;
    case 10: return ScanKernel::v5_chunked_fma2;
    case 11: return ScanKernel::v4_npt4_lean;
    case 12: return ScanKernel::v4_npt4_lean_cpt2;
    case 13: return ScanKernel::v4_npt4_lean_pipe;
    default: return kProductionScan;
  }
}

// The CUDA backward (src/kernels/cuda/ssm/scan_backward.cu). Generation 0 (production): the checkpoint pass and the
// reverse pass with SPLIT threads per channel x 4 states each: 4 threads per channel up to 16 states (32 channels per
// 128-thread block), 16 beyond (8 channels per block). Generation 1 (d_state <= 16; scan_backward_v2.cu): the same
// checkpoint pass, the reverse pass with one state per thread (16 channels per 256-thread block, sums through shared
// memory), kept out of production until the H200 has measured it.
struct ScanBwdPlan {
  bool one_state = false;   // generation 1's reverse kernel
  int split = 4;            // threads per channel (of the reverse kernel)
  int channels_per_block = 32;
  int checkpoint_split = 4;  // threads per channel of the checkpoint kernel (4 states each)
  int64_t checkpoint_blocks = 0;
  int64_t chunk = 16;       // time steps per chunk: one checkpoint state per chunk, the chunk's states in registers
  int64_t chunks = 0;       // ceil(seqlen / chunk)
  int64_t channel_blocks = 0;
  // Workspace (floats): the chunk-start states [batch, chunks, d_inner, d_state], the per-block dB and dC partial
  // sums [batch, channel_blocks, seqlen, d_state] each, and the per-sequence dA [batch, d_inner, d_state], dD and
  // ddelta_bias [batch, d_inner] partials; reduced in a fixed order (deterministic).
  int64_t checkpoint_floats = 0, partial_bc_floats = 0, partial_channel_floats = 0;
  int64_t workspace_bytes() const { return 4 * (checkpoint_floats + 2 * partial_bc_floats + partial_channel_floats); }
};

// d_state <= kCudaMaxState (64) is validated before.
inline ScanBwdPlan plan_scan_backward(int64_t batch, int64_t seqlen, int64_t d_inner, int64_t d_state,
                                      int generation = 0) {
  ScanBwdPlan p;
  p.checkpoint_split = d_state <= 16 ? 4 : 16;
  p.checkpoint_blocks = (d_inner + 128 / p.checkpoint_split - 1) / (128 / p.checkpoint_split);
  p.one_state = generation == 1 && d_state <= 16;
  p.split = p.one_state ? 16 : p.checkpoint_split;
  p.channels_per_block = p.one_state ? 16 : 128 / p.split;
  p.chunks = (seqlen + p.chunk - 1) / p.chunk;
  p.channel_blocks = (d_inner + p.channels_per_block - 1) / p.channels_per_block;
  p.checkpoint_floats = batch * p.chunks * d_inner * d_state;
  p.partial_bc_floats = batch * p.channel_blocks * seqlen * d_state;
  p.partial_channel_floats = batch * d_inner * (d_state + 2);
  return p;
}

// v5, the chunked scan (src/kernels/cuda/ssm/scan_v5.cu; d_state <= 16). v4 runs 384 blocks at batch 8, d_inner
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

inline const char* scan_kernel_name(ScanKernel k) {
  switch (k) {
    case ScanKernel::v1_n16: return "cuda.scan.n16.split4";
    case ScanKernel::v1_n64: return "cuda.scan.n64.split4";
    case ScanKernel::v2_n16: return "cuda.scan.v2.n16.split4";
    case ScanKernel::v3_n16: return "cuda.scan.v3.n16.split16.tc16";
    case ScanKernel::v3_n16_tc32: return "cuda.scan.v3.n16.split16.tc32";
    case ScanKernel::v3_n16_npt2: return "cuda.scan.v3.n16.split8.tc16";
    case ScanKernel::v4_npt2: return "cuda.scan.v4.n16.split8.tc16.s4";
    case ScanKernel::v4_npt4: return "cuda.scan.v4.n16.split4.tc16.s4";
    case ScanKernel::v4_npt4_fma1: return "cuda.scan.v4.n16.split4.tc16.s4.fmaexp1";
    case ScanKernel::v5_chunked: return "cuda.scan.v5.chunked.n16.split4.tc16.s4";
    case ScanKernel::v5_chunked_fma2: return "cuda.scan.v5.chunked.n16.split4.tc16.s4.p1fmaexp2";
    case ScanKernel::v4_npt4_lean: return "cuda.scan.v4.n16.split4.tc16.s4.lean";
    case ScanKernel::v4_npt4_lean_cpt2: return "cuda.scan.v4.n16.split4.tc16.s4.lean.cpt2";
    case ScanKernel::v4_npt4_lean_pipe: return "cuda.scan.v4.n16.split4.tc16.s5.lean.pipe";
    case ScanKernel::step_n16: return "cuda.scan_step.n16.split16";
    case ScanKernel::step_n64: return "cuda.scan_step.n64.split16";
  }
  return "?";
}

}  // namespace flashkit::kernels
