// Which CUDA selective-scan kernel runs (src/kernels/cuda/ssm/scan.cu): a pure function of the problem, unit-tested
// in the CPU build (tests/ssm/test_ssm_choice.cpp). `generation` 0 is production (kProductionScan); every other kernel
// keeps its own number so that the tests and the benchmark compare them on the same inputs and a kernel stays
// reachable when kProductionScan changes (docs/worklog/ssm-scan.md has each one's numbers): 1 v1, 2 and 3 v3 with one
// state per thread (chunks of 16 / 32 steps), 4 v2, 5 and 6 v4 (cp.async ring, two / four states per thread), 7 v3
// with two states per thread, 8 v4 with one exp of four on the FMA pipe, 11 v4 with four states per thread and the
// per-chunk overhead cut ("v6"; the A/B baseline of 13), 13 generation 11 with its chunk phases software-pipelined
// (scan_v4_pipe.cu; production since run s13-4). Retired, their code in dev/cuda/ssm/ (out of the build): 9 and 10
// (v5, the chunked two-pass scan: 0.47-0.59x v4) and 12 (generation 11 with two channels per thread: 0.69x); asking
// for them is asking for an unknown generation.
#pragma once
#include <cstdint>
#include <string>

#include "flashkit/error.hpp"

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
  v4_npt4_lean,  // v4_npt4 with the per-chunk overhead cut: copy addresses carried across chunks, fast softplus / silu
  v4_npt4_lean_pipe,  // v4_npt4_lean with chunk k's recurrence, k+1's prologue and k-1's epilogue in one basic block
  step_n16,  // decode step: 16 threads per channel (d_state <= 16)
  step_n64,  // decode step: 16 threads per channel x 4 states (d_state <= 64)
};

// Production's kernel for d_state <= 16 (generation 0). Promoting another generation is this one line (and the
// production test in tests/ssm/test_ssm_choice.cpp); every kernel keeps its own generation number below.
constexpr ScanKernel kProductionScan = ScanKernel::v4_npt4_lean_pipe;  // 1.11-1.12x generation 11 at 1k-8k (run s13-4)

// The generations choose_scan_kernel knows, in order (9, 10 and 12 are retired: see the top of this file).
constexpr int kScanGenerations[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 13};

constexpr bool scan_generation_known(int generation) {
  for (int g : kScanGenerations)
    if (g == generation) return true;
  return false;
}

// d_state <= 64 is validated before (kCudaMaxState); `step`: the one-token decode kernel. A generation that is not
// in kScanGenerations (retired or never assigned) throws flashkit::Error (invalid_argument) naming it.
inline ScanKernel choose_scan_kernel(int64_t d_state, bool step, int generation = 0) {
  if (!scan_generation_known(generation))
    throw Error(Status::invalid_argument,
                "selective scan: generation " + std::to_string(generation) +
                    " is not a kernel generation; expected one of 0-8, 11, 13 (9, 10 and 12 are retired to "
                    "dev/cuda/ssm/; docs/worklog/ssm-scan.md)");
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
    case 11: return ScanKernel::v4_npt4_lean;
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
    case ScanKernel::v4_npt4_lean: return "cuda.scan.v4.n16.split4.tc16.s4.lean";
    case ScanKernel::v4_npt4_lean_pipe: return "cuda.scan.v4.n16.split4.tc16.s5.lean.pipe";
    case ScanKernel::step_n16: return "cuda.scan_step.n16.split16";
    case ScanKernel::step_n64: return "cuda.scan_step.n64.split16";
  }
  return "?";
}

}  // namespace flashkit::kernels
