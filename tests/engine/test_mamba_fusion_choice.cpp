// The Mamba decode fusion choice (engine/mamba_fusion.hpp): which shapes the CUDA backend's fused in_proj + conv
// GEMV and mixer-step kernel take, and the mixer's launch geometry. Pure functions: checked in every build.
#include <gtest/gtest.h>

#include "engine/mamba_fusion.hpp"

using namespace flashkit::engine;

namespace {

MambaStepShape mamba_130m() {  // state-spaces/mamba-130m: d_inner 1536, dt_rank 48, d_state 16, conv width 4
  MambaStepShape s;
  s.rows = 1, s.d_inner = 1536, s.conv_width = 4, s.dt_rank = 48, s.d_state = 16;
  return s;
}

TEST(MambaFusionChoice, Mamba130mDecodeFusesBoth) {
  EXPECT_TRUE(mamba_conv_epilogue_ok(mamba_130m()));
  EXPECT_TRUE(mamba_mixer_step_ok(mamba_130m()));
  EXPECT_EQ(mamba_step_blocks(1536), 48);
  EXPECT_EQ(mamba_step_smem_bytes(1536, 48, 16), (1536 + 80 + 32) * 4);
}

TEST(MambaFusionChoice, PrefillAndChunksStayUnfused) {
  for (int64_t rows : {0, 2, 8, 512}) {
    MambaStepShape s = mamba_130m();
    s.rows = rows;
    EXPECT_FALSE(mamba_conv_epilogue_ok(s)) << rows;
    EXPECT_FALSE(mamba_mixer_step_ok(s)) << rows;
  }
}

TEST(MambaFusionChoice, MixerPreconditions) {
  auto with = [](auto edit) {
    MambaStepShape s = mamba_130m();
    edit(s);
    return mamba_mixer_step_ok(s);
  };
  EXPECT_FALSE(with([](MambaStepShape& s) { s.dt_rank = 6; }));    // dt_proj's K % 8 != 0 (the GEMV's chunks)
  EXPECT_FALSE(with([](MambaStepShape& s) { s.d_inner = 1540; }));  // x_proj's K % 8 != 0
  EXPECT_TRUE(with([](MambaStepShape& s) { s.d_inner = 72; }));     // not a multiple of the block's 32 channels
  EXPECT_FALSE(with([](MambaStepShape& s) { s.d_state = 17; }));    // one thread per state, 16 per channel
  EXPECT_TRUE(with([](MambaStepShape& s) { s.d_state = 1; }));
  EXPECT_FALSE(with([](MambaStepShape& s) { s.d_state = 0; }));
  EXPECT_FALSE(with([](MambaStepShape& s) { s.d_inner = kMambaStepMaxInner + 8; }));  // shared memory
  EXPECT_TRUE(with([](MambaStepShape& s) { s.d_inner = 5120, s.dt_rank = 160; }));     // mamba-2.8b
  EXPECT_FALSE(with([](MambaStepShape& s) { s.dt_rank = kMambaStepMaxProjRows; }));
  EXPECT_FALSE(with([](MambaStepShape& s) { s.f32 = false; }));
  EXPECT_FALSE(with([](MambaStepShape& s) { s.contiguous_state = false; }));
  EXPECT_FALSE(with([](MambaStepShape& s) { s.bf16_weights = false; }));  // GGUF blocks
  EXPECT_FALSE(with([](MambaStepShape& s) { s.x_proj_bias = true; }));
}

TEST(MambaFusionChoice, ConvEpiloguePreconditions) {
  auto with = [](auto edit) {
    MambaStepShape s = mamba_130m();
    edit(s);
    return mamba_conv_epilogue_ok(s);
  };
  EXPECT_TRUE(with([](MambaStepShape& s) { s.dt_rank = 6, s.d_state = 64; }));  // the conv does not care
  EXPECT_TRUE(with([](MambaStepShape& s) { s.conv_width = 1; }));
  EXPECT_TRUE(with([](MambaStepShape& s) { s.conv_width = kMambaConvMaxWidth; }));
  EXPECT_FALSE(with([](MambaStepShape& s) { s.conv_width = kMambaConvMaxWidth + 1; }));
  EXPECT_FALSE(with([](MambaStepShape& s) { s.conv_width = 0; }));
  EXPECT_FALSE(with([](MambaStepShape& s) { s.f32 = false; }));
  EXPECT_FALSE(with([](MambaStepShape& s) { s.contiguous_state = false; }));
}

TEST(MambaFusionChoice, StepBlocksCoverEveryChannel) {
  EXPECT_EQ(mamba_step_blocks(0), 0);
  EXPECT_EQ(mamba_step_blocks(1), 1);
  EXPECT_EQ(mamba_step_blocks(32), 1);
  EXPECT_EQ(mamba_step_blocks(72), 3);
  EXPECT_EQ(kMambaStepChannels * kMambaStepMaxState, kMambaStepThreads);
  EXPECT_LE(mamba_step_smem_bytes(kMambaStepMaxInner, kMambaStepMaxProjRows - 32, 16), 48 * 1024 - 1024);
}

TEST(MambaFusionChoice, ClusterSize) {
  int none[17] = {}, all[17] = {}, upto4[17] = {};
  for (int c = 2; c <= 16; ++c) all[c] = 4, upto4[c] = c <= 4 ? 2 : 0;
  EXPECT_EQ(mamba_step_cluster(1536, nullptr), 1);  // no clusters (sm_80, or not a CUDA build)
  EXPECT_EQ(mamba_step_cluster(1536, none), 1);     // none fits
  EXPECT_EQ(mamba_step_cluster(1536, all), 8);      // mamba-130m on an H200: 48 blocks in 6 clusters of 8
  EXPECT_EQ(mamba_step_cluster(1536, upto4), 4);
  EXPECT_EQ(mamba_step_cluster(72, all), 2);   // 3 blocks: clusters of 2 (the grid rounded up to 4)
  EXPECT_EQ(mamba_step_cluster(160, all), 4);  // 5 blocks
  EXPECT_EQ(mamba_step_cluster(32, all), 1);   // one block
}

}  // namespace
