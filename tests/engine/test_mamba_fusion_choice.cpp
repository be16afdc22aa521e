// The Mamba decode fusion choice (engine/mamba_fusion.hpp): which shapes the CUDA backend's fused in_proj + conv
// GEMV and mixer-step kernel take, and the mixer's launch geometry. Pure functions: checked in every build.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "engine/mamba_fusion.hpp"
#include "flashkit/tuning.hpp"

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
  EXPECT_EQ(mamba_step_blocks(1536, 32), 48);
  EXPECT_EQ(mamba_step_smem_bytes(1536, 48, 16, 32), (1536 + 80 + 32) * 4);
  EXPECT_EQ(mamba_step_smem_bytes(1536, 48, 16, 8), (1536 + 80 + 8) * 4);
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
  EXPECT_EQ(mamba_step_blocks(0, 32), 0);
  EXPECT_EQ(mamba_step_blocks(1, 32), 1);
  EXPECT_EQ(mamba_step_blocks(32, 32), 1);
  EXPECT_EQ(mamba_step_blocks(72, 32), 3);
  EXPECT_EQ(mamba_step_blocks(72, 16), 5);
  EXPECT_EQ(mamba_step_blocks(72, 8), 9);
  EXPECT_EQ(mamba_step_blocks(1536, 16), 96);
  EXPECT_EQ(mamba_step_blocks(1536, 8), 192);
  EXPECT_EQ(kMambaStepMaxChannels * kMambaStepMaxState, kMambaStepMaxThreads);
  for (int w : {64, 32, 16, 8})
    EXPECT_LE(mamba_step_smem_bytes(kMambaStepMaxInner, kMambaStepMaxProjRows - 32, 16, w), 48 * 1024 - 1024);
  // threads: 16 a channel (one state each), 8 a channel at width 64 (two states each); never above 512
  EXPECT_EQ(mamba_step_threads(32), 512);
  EXPECT_EQ(mamba_step_threads(16), 256);
  EXPECT_EQ(mamba_step_threads(8), 128);
  EXPECT_EQ(mamba_step_threads(64), 512);
}

TEST(MambaFusionChoice, ChannelsPerBlock) {
  for (int w : {64, 32, 16, 8}) EXPECT_TRUE(mamba_step_width_ok(w)) << w;
  for (int w : {0, 1, 4, 24, 128, -16}) EXPECT_FALSE(mamba_step_width_ok(w)) << w;
  EXPECT_EQ(mamba_step_channels(1536, 132, 0), 16);  // mamba-130m on an H200: 96 blocks (192 would be > 1 a SM)
  EXPECT_EQ(mamba_step_channels(1536, 192, 0), 8);   // 192 blocks fit one a SM
  EXPECT_EQ(mamba_step_channels(1536, 47, 0), 64);   // not even 48 blocks of 32 fit one wave: 24 of 64
  EXPECT_EQ(mamba_step_channels(1536, 0, 0), 32);    // SM count unknown (the CPU emulation): today's width
  EXPECT_EQ(mamba_step_channels(5120, 132, 0), 64);  // mamba-2.8b: 160 blocks of 32 were two waves; 80 of 64
  EXPECT_EQ(mamba_step_channels(4096, 132, 0), 32);  // mamba-1.4b: 128 blocks of 32 fit one wave
  EXPECT_EQ(mamba_step_channels(72, 132, 0), 8);
  for (int w : {64, 32, 16, 8}) {  // forced (Tuning::cuda_mamba_channels) whatever the shape and device
    EXPECT_EQ(mamba_step_channels(1536, 132, w), w);
    EXPECT_EQ(mamba_step_channels(72, 0, w), w);
  }
  EXPECT_EQ(mamba_step_channels(1536, 132, 12), 16);  // not a width: the automatic choice (the launcher refuses it)
}

TEST(MambaFusionChoice, ClusterSize) {
  int none[17] = {}, all[17] = {}, upto4[17] = {}, upto8[17] = {};
  for (int c = 2; c <= 16; ++c) all[c] = 4, upto4[c] = c <= 4 ? 2 : 0, upto8[c] = c <= 8 ? 3 : 0;
  constexpr int64_t rows = 80;  // mamba-130m: dt_rank 48 + 2 x 16
  EXPECT_EQ(mamba_step_cluster(1536, 32, rows, nullptr), 1);  // no clusters (sm_80, or not a CUDA build)
  EXPECT_EQ(mamba_step_cluster(1536, 32, rows, none), 1);     // none fits
  EXPECT_EQ(mamba_step_cluster(1536, 32, rows, all), 8);      // 48 blocks of 16 warps in 6 clusters of 8: a row a warp
  EXPECT_EQ(mamba_step_cluster(1536, 16, rows, all), 16);     // 96 blocks of 8 warps in 6 clusters of 16
  EXPECT_EQ(mamba_step_cluster(1536, 8, rows, all), 16);      // 192 of 4 warps: 12 clusters of 16 (2 rows a warp)
  EXPECT_EQ(mamba_step_cluster(1536, 16, rows, upto8), 8);    // 16 not allowed (non-portable): the largest below
  EXPECT_EQ(mamba_step_cluster(1536, 32, rows, upto4), 4);
  EXPECT_EQ(mamba_step_cluster(1536, 32, 24, all), 2);        // 24 rows: 2 blocks of 16 warps cover them
  EXPECT_EQ(mamba_step_cluster(1536, 32, 16, all), 1);        // one block's warps cover every row
  EXPECT_EQ(mamba_step_cluster(5120, 32, 192, all), 16);      // mamba-2.8b: 192 rows over 16 x 16 warps
  EXPECT_EQ(mamba_step_cluster(5120, 64, 192, all), 16);      // the same at width 64 (16 warps a block): 5 clusters
  EXPECT_EQ(mamba_step_cluster(4096, 64, 80, all), 8);        // 80 rows over 8 x 16 warps
  // one wave first: 5 clusters of 16 where only 4 are resident -> 10 of 8 (16 resident); 5 resident -> 16
  int gpc4[17] = {}, gpc5[17] = {};
  for (int c = 2; c <= 16; ++c) gpc4[c] = gpc5[c] = 128 / c;
  gpc4[16] = 4, gpc5[16] = 5;
  EXPECT_EQ(mamba_step_cluster(5120, 64, 192, gpc4), 8);
  EXPECT_EQ(mamba_step_cluster(5120, 64, 192, gpc5), 16);
  EXPECT_EQ(mamba_step_cluster(5120, 32, 192, gpc5), 16);     // 160 blocks fit no size in one wave: the largest
  EXPECT_EQ(mamba_step_cluster(72, 32, rows, all), 2);   // 3 blocks: clusters of 2 (the grid rounded up to 4)
  EXPECT_EQ(mamba_step_cluster(160, 32, rows, all), 4);  // 5 blocks
  EXPECT_EQ(mamba_step_cluster(32, 32, rows, all), 1);   // one block
  EXPECT_EQ(mamba_step_cluster(72, 8, rows, all), 8);    // 9 blocks of 8 channels
}

// FLASHKIT_CUDA_MAMBA_CHANNELS (read by tuning_from_env, as the bench and the CLI do) forces the width for A/B runs;
// a value that is not a width is ignored (with a warning): automatic.
TEST(MambaFusionChoice, WidthFromTheEnvironment) {
  const char* name = "FLASHKIT_CUDA_MAMBA_CHANNELS";
  const char* before = std::getenv(name);
  const std::string saved = before ? before : "";
  for (auto [value, want] :
       {std::pair{"64", 64}, {"32", 32}, {"16", 16}, {"8", 8}, {"auto", 0}, {"12", 0}, {"wide", 0}}) {
    setenv(name, value, 1);
    testing::internal::CaptureStderr();
    EXPECT_EQ(flashkit::tuning_from_env().cuda_mamba_channels, want) << value;
    testing::internal::GetCapturedStderr();
  }
  unsetenv(name);
  EXPECT_EQ(flashkit::tuning_from_env().cuda_mamba_channels, 0);
  EXPECT_EQ(flashkit::Tuning{}.cuda_mamba_channels, 0);
  if (before) setenv(name, saved.c_str(), 1);
}

}  // namespace
