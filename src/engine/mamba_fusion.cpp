// The Mamba decode fusion choice (mamba_fusion.hpp).
#include "engine/mamba_fusion.hpp"

#include <initializer_list>

namespace flashkit::engine {

bool mamba_conv_epilogue_ok(const MambaStepShape& s) {
  return s.rows == 1 && s.d_inner > 0 && s.conv_width >= 1 && s.conv_width <= kMambaConvMaxWidth && s.f32 &&
         s.contiguous_state;
}

bool mamba_mixer_step_ok(const MambaStepShape& s) {
  // x_proj and dt_proj are computed as the GEMV computes them (16-byte chunks of 8 weights): K % 8 == 0 for both.
  return s.rows == 1 && s.d_inner > 0 && s.d_inner % 8 == 0 && s.d_inner <= kMambaStepMaxInner && s.dt_rank > 0 &&
         s.dt_rank % 8 == 0 && s.d_state >= 1 && s.d_state <= kMambaStepMaxState &&
         s.dt_rank + 2 * s.d_state <= kMambaStepMaxProjRows && s.f32 && s.contiguous_state && s.bf16_weights &&
         !s.x_proj_bias;
}

bool mamba_step_width_ok(int channels) {
  return channels == 64 || channels == 32 || channels == 16 || channels == 8;
}

int mamba_step_channels(int64_t d_inner, int sm_count, int forced) {
  if (mamba_step_width_ok(forced)) return forced;
  if (sm_count > 0) {
    for (int w : {8, 16, 32})
      if (mamba_step_blocks(d_inner, w) <= sm_count) return w;
    return int(kMambaStepWideChannels);
  }
  return int(kMambaStepMaxChannels);
}

int64_t mamba_step_blocks(int64_t d_inner, int channels) {
  return d_inner <= 0 || channels <= 0 ? 0 : (d_inner + channels - 1) / channels;
}

int mamba_step_cluster(int64_t d_inner, int channels, int64_t proj_rows, const int* resident) {
  if (!resident || channels < 2) return 1;
  const int64_t blocks = mamba_step_blocks(d_inner, channels), warps = mamba_step_threads(channels) / 32;
  int target = 1;
  while (target < kMambaStepMaxCluster && target * warps < proj_rows) target *= 2;
  // One wave first: the largest size whose clusters are all resident at once (a second wave repeats the whole
  // dependent chain: v3); else the largest that runs.
  for (int c : {16, 8, 4, 2})
    if (c <= target && c <= blocks && resident[c] > 0 && (blocks + c - 1) / c <= resident[c]) return c;
  for (int c : {16, 8, 4, 2})
    if (c <= target && c <= blocks && resident[c] > 0) return c;
  return 1;
}

int64_t mamba_step_smem_bytes(int64_t d_inner, int64_t dt_rank, int64_t d_state, int channels) {
  auto up4 = [](int64_t n) { return (n + 3) / 4 * 4; };
  return (up4(d_inner) + up4(dt_rank + 2 * d_state) + channels) * 4;
}

}  // namespace flashkit::engine
