// Which parts of a Mamba layer's decode step the CUDA backend fuses (cuda/cuda_backend.cpp, "Deferred execution and
// fusion"). Pure functions of the shapes, compiled in every build so the CPU tests check them.
//
// Unfused, a decode step (T == 1) of a layer is six kernels: the in_proj GEMV, conv1d, the x_proj and dt_proj
// GEMVs, the scan step and the out_proj GEMV (the residual add goes into the next GEMV's prologue). Fused, three:
//   1. [add][rms_norm] linear(in_proj) ssm_conv   -> the GEMV whose epilogue also runs the conv step of each x
//      channel it produces (the lane writing x[c] owns conv state row c: no race) -- conv_epilogue_ok;
//   2. linear(x_proj) linear(dt_proj) ssm_scan    -> one mixer-step kernel (cuda/mamba_step.cu): every block (or
//      cluster of blocks) computes x_proj from xc, then dt_proj and the state update for its channels --
//      mixer_step_ok, mamba_step_channels, mamba_step_cluster;
//   3. linear(out_proj) [add]                      -> the GEMV as today (the add fuses into the next prologue).
// Where a precondition fails, the ops run unfused (the same results up to rounding order: see the kernels).
#pragma once
#include <cstdint>

namespace flashkit::engine {

struct MambaStepShape {
  int64_t rows = 0;        // T: rows of the step (the fused kernels take exactly one)
  int64_t d_inner = 0;     // channels (x_proj's K)
  int64_t conv_width = 0;  // causal conv taps
  int64_t dt_rank = 0;     // dt_proj's K
  int64_t d_state = 0;     // states per channel
  bool f32 = true;         // every Mamba activation and state buffer f32 (the backend's ops require it)
  bool contiguous_state = true;  // conv state [d_inner, width] and SSM state [d_inner, d_state] without row gaps
  bool bf16_weights = true;      // x_proj and dt_proj plain bf16 matrices (not GGUF blocks), 16-byte aligned
  bool x_proj_bias = false;      // Mamba's x_proj has none; the mixer kernel does not add one
};

// The conv epilogue holds a channel's taps in registers.
constexpr int64_t kMambaConvMaxWidth = 8;
// The mixer step: one thread per state (16 per channel, a half warp), so d_state <= 16 (mamba-1 checkpoints use
// 16); xc and x_proj's output live in shared memory (<= 48 KB: no opt-in). A block carries 32, 16 or 8 channels
// (512, 256 or 128 threads), or 64 channels at 8 threads a channel, two states each (512 threads):
// mamba_step_channels.
constexpr int64_t kMambaStepMaxState = 16;
constexpr int64_t kMambaStepMaxChannels = 32;  // channels per block of the one-state-a-thread widths
constexpr int64_t kMambaStepWideChannels = 64; // the two-states-a-thread width
constexpr int64_t kMambaStepMaxThreads = kMambaStepMaxChannels * kMambaStepMaxState;
// Threads of a mixer-step block of `channels` channels (a compile-time constant of the kernel too).
constexpr int64_t mamba_step_threads(int channels) {
  return channels == kMambaStepWideChannels ? kMambaStepMaxThreads : int64_t(channels) * kMambaStepMaxState;
}
constexpr int64_t kMambaStepMaxInner = 8192;
constexpr int64_t kMambaStepMaxProjRows = 2048;  // dt_rank + 2 d_state
constexpr int kMambaStepMaxCluster = 16;         // non-portable above 8 (sm_90 allows 16)

bool mamba_conv_epilogue_ok(const MambaStepShape& s);
bool mamba_mixer_step_ok(const MambaStepShape& s);
// Channels per mixer-step block: `forced` (Tuning::cuda_mamba_channels: 64, 32, 16 or 8) when set, else the
// narrowest width whose grid is at most one block per SM (more blocks: more SMs issue the latency-bound chain at once,
// while none runs two); when not even 32-channel blocks fit one wave, 64 (v3: mamba-2.8b's 160 blocks of 32 ran as
// two waves of the whole chain; 80 blocks of 64 run as one); 32 when the SM count is unknown (0). Mamba-130m
// (d_inner 1536) on 132 SMs: 16 (96 blocks). True for 8, 16, 32, 64 only: mamba_step_width_ok.
bool mamba_step_width_ok(int channels);
int mamba_step_channels(int64_t d_inner, int sm_count, int forced);
// Blocks of the mixer step (`channels` channels each; the last may be partial).
int64_t mamba_step_blocks(int64_t d_inner, int channels);
// Cluster size of the mixer step. Every block needs all `proj_rows` (dt_rank + 2 d_state) of x_proj's output;
// alone, each block reads all of W_x from L2 (245 KB for mamba-130m: ~2 us of one SM's L2 bandwidth). In a cluster
// of c blocks each computes 1/c of the rows (warp w of rank r: rows r warps + w + c warps i) and reads the others'
// through distributed shared memory. Target: the smallest power of two c with c x warps-per-block (channels / 2)
// >= proj_rows (each warp at most one row: the chain of today's 32-channel blocks in clusters of 8), at most 16;
// run: the largest of 16, 8, 4, 2 not above the target and the blocks whose clusters are all resident at once
// (`resident[c]`: clusters of c the device holds; sm_90, 16 only where non-portable sizes are allowed), else the
// largest that runs at all (`resident[c]` > 0); else 1. The grid is rounded up to a multiple of it (blocks
// past d_inner compute rows only). Mamba-130m (80 rows): 32 channels -> 8, 16 -> 16, 8 -> 16 (two rows a warp).
int mamba_step_cluster(int64_t d_inner, int channels, int64_t proj_rows, const int* resident /* [17], null: none */);
// Dynamic shared memory of a mixer-step block: xc, x_proj's output (each rounded up to 4 floats: 16 bytes), the
// block's dt.
int64_t mamba_step_smem_bytes(int64_t d_inner, int64_t dt_rank, int64_t d_state, int channels);

}  // namespace flashkit::engine
