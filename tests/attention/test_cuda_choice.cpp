// The CUDA kernel choice as pure functions (src/ops/attention_choice.cpp, src/kernels/cuda/decode/plan.cpp), run in
// the CPU-only build: representative H200 (132 SMs, sm_90) and A100 (108 SMs, sm_80) shapes, each printed and
// pinned. The expected values reproduce the decisions of the dispatch before it became these functions (the split
// counts were computed by a transcription of the old code in cuda_runtime.cu, commit 0508600).
#include <gtest/gtest.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/bwd_ws_d256_buffers.hpp"
#include "kernels/cuda/bwd_ws_staging.hpp"
#include "kernels/cuda/ws_schedule.hpp"
#include "ops/attention_choice.hpp"
#include "choice_fixture.hpp"
#include "env_knob.hpp"

namespace {

using flashkit::BwdChoice;
using flashkit::ClusterResidency;
using flashkit::CudaKernel;
using flashkit::DeviceInfo;
using flashkit::DType;
using flashkit::FwdChoice;
using flashkit::Tuning;
using flashkit::kernels::AttentionMask;
using flashkit::kernels::AttentionShape;
namespace cuda = flashkit::cuda;

using choice_fixture::a100;
using choice_fixture::causal_mask;
using choice_fixture::h200;
using choice_fixture::shape;

FwdChoice fwd(const char* what, const AttentionShape& s, const DeviceInfo& d, const Tuning& t = {},
              const AttentionMask& m = {}, const ClusterResidency& res = {}, bool allow_ws = true) {
  const FwdChoice c = flashkit::choose_fwd(s, m, d, t, res, allow_ws);
  std::printf("%-34s %-5s -> %s (tile %dx%d, %d stages)\n", what, d.cc_major == 9 ? "H200" : "A100",
              flashkit::kernel_name(c, DType::bf16).c_str(), c.tile_m, c.tile_n, c.stages);
  return c;
}

TEST(CudaChoice, ForwardOnHopperFollowsTheMeasuredThresholds) {
  // d128: the warp-specialized kernel at every length.
  FwdChoice c = fwd("d128 4096", shape(2, 16, 16, 128, 4096, 4096), h200());
  EXPECT_EQ(c.kernel, CudaKernel::fwd_sm90_ws);
  EXPECT_EQ(c.tile_m, 128);
  EXPECT_EQ(c.tile_n, 128);
  EXPECT_EQ(c.stages, 2);
  EXPECT_TRUE(c.pingpong);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.fwd.sm90ws.bf16.d128");
  EXPECT_EQ(fwd("d128 causal 512", shape(1, 16, 16, 128, 512, 512), h200(), {}, causal_mask()).kernel,
            CudaKernel::fwd_sm90_ws);
  // d64: small tiles below 2k tokens (causal: 4k), configuration 2 for short causal ones, ws above.
  c = fwd("d64 1024", shape(2, 16, 16, 64, 1024, 1024), h200());
  EXPECT_EQ(c.kernel, CudaKernel::fwd_sm90);
  EXPECT_EQ(c.config, 1);
  EXPECT_EQ(c.tile_m, 128);
  EXPECT_EQ(c.tile_n, 128);
  c = fwd("d64 causal 1024", shape(2, 16, 16, 64, 1024, 1024), h200(), {}, causal_mask());
  EXPECT_EQ(c.kernel, CudaKernel::fwd_sm90);
  EXPECT_EQ(c.config, 2);
  EXPECT_EQ(c.tile_m, 64);
  EXPECT_EQ(c.tile_n, 64);
  EXPECT_EQ(fwd("d64 causal 2048", shape(2, 16, 16, 64, 2048, 2048), h200(), {}, causal_mask()).config, 1);
  EXPECT_EQ(fwd("d64 2048", shape(2, 16, 16, 64, 2048, 2048), h200()).kernel, CudaKernel::fwd_sm90_ws);
  EXPECT_EQ(fwd("d64 causal 4096", shape(2, 16, 16, 64, 4096, 4096), h200(), {}, causal_mask()).kernel,
            CudaKernel::fwd_sm90_ws);
  EXPECT_EQ(fwd("d64 3 stages (ws)", shape(1, 8, 8, 64, 8192, 8192), h200()).stages, 3);
  // d256 and head dims padded to it: the warp-specialized kernel (BN 80, 2 stages); sm_80 when it declines or a
  // cp.async configuration is forced (that kernel has no d256 tiles).
  c = fwd("d256 4096", shape(1, 8, 8, 256, 4096, 4096), h200());
  EXPECT_EQ(c.kernel, CudaKernel::fwd_sm90_ws);
  EXPECT_EQ(c.tile_m, 128);
  EXPECT_EQ(c.tile_n, 80);
  EXPECT_EQ(c.stages, 2);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.fwd.sm90ws.bf16.d256");
  EXPECT_EQ(fwd("d256 causal 512", shape(1, 8, 8, 256, 512, 512), h200(), {}, causal_mask()).kernel,
            CudaKernel::fwd_sm90_ws);
  c = fwd("d256 4096, ws declined", shape(1, 8, 8, 256, 4096, 4096), h200(), {}, {}, {}, false);
  EXPECT_EQ(c.kernel, CudaKernel::fwd_sm80);
  EXPECT_EQ(c.tile_m, 64);
  EXPECT_EQ(c.tile_n, 32);
  Tuning cfg1;
  cfg1.sm90_fwd_config = 1;
  EXPECT_EQ(fwd("d256, cfg 1 forced", shape(1, 8, 8, 256, 4096, 4096), h200(), cfg1).kernel, CudaKernel::fwd_sm80);
  c = fwd("d200 (padded to 256)", shape(1, 8, 8, 200, 4096, 4096), h200());
  EXPECT_EQ(c.dpad, 256);
  EXPECT_EQ(c.kernel, CudaKernel::fwd_sm90_ws);
  EXPECT_EQ(fwd("d96 (padded to 128)", shape(1, 8, 8, 96, 4096, 4096), h200()).dpad, 128);
}

TEST(CudaChoice, ForwardFallbacksAndTuning) {
  // When the ws kernel declines (no TMA descriptor), the cp.async kernel: configuration 1 up to 2k tokens, then 2.
  FwdChoice c = fwd("d128 512, ws declined", shape(1, 16, 16, 128, 512, 512), h200(), {}, {}, {}, false);
  EXPECT_EQ(c.kernel, CudaKernel::fwd_sm90);
  EXPECT_EQ(c.config, 1);
  EXPECT_EQ(c.tile_n, 64);
  c = fwd("d128 4096, ws declined", shape(1, 16, 16, 128, 4096, 4096), h200(), {}, {}, {}, false);
  EXPECT_EQ(c.config, 2);
  EXPECT_EQ(c.tile_n, 128);
  // When the Hopper kernels cannot run (no sm_90a code for the device): sm_80.
  DeviceInfo no90 = h200();
  no90.sm90a = false;
  EXPECT_EQ(fwd("d128, no sm_90a code", shape(1, 16, 16, 128, 4096, 4096), no90).kernel, CudaKernel::fwd_sm80);
  // Tuning, per call: sm90 off, a forced configuration, ping-pong off.
  Tuning t;
  t.sm90 = false;
  EXPECT_EQ(fwd("d128, sm90 off", shape(1, 16, 16, 128, 4096, 4096), h200(), t).kernel, CudaKernel::fwd_sm80);
  t = Tuning{};
  t.sm90_fwd_config = 3;
  EXPECT_EQ(fwd("d64 1024, cfg 3", shape(1, 16, 16, 64, 1024, 1024), h200(), t).kernel, CudaKernel::fwd_sm90_ws);
  t.sm90_fwd_config = 2;
  c = fwd("d128 4096, cfg 2", shape(1, 16, 16, 128, 4096, 4096), h200(), t);
  EXPECT_EQ(c.kernel, CudaKernel::fwd_sm90);
  EXPECT_EQ(c.config, 2);
  t = Tuning{};
  t.sm90_ws_pingpong = false;
  c = fwd("d128, no ping-pong", shape(1, 16, 16, 128, 4096, 4096), h200(), t);
  EXPECT_FALSE(c.pingpong);
  EXPECT_EQ(flashkit::kernel_name(c, DType::f16), "cuda.flash.fwd.sm90ws.f16.d128.nopingpong");
  // The wide key tile, asked for: d128 only (d64 and d256 keep theirs).
  t = Tuning{};
  t.sm90_ws_bn = 176;
  c = fwd("d128, BN 176", shape(1, 16, 16, 128, 4096, 4096), h200(), t);
  EXPECT_EQ(c.kernel, CudaKernel::fwd_sm90_ws);
  EXPECT_EQ(c.tile_n, 176);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.fwd.sm90ws.bf16.d128.bn176");
  EXPECT_EQ(fwd("d64, BN 176 asked", shape(1, 16, 16, 64, 4096, 4096), h200(), t).tile_n, 128);
  t.sm90_ws_bn = 192;
  c = fwd("d64, BN 192", shape(1, 16, 16, 64, 4096, 4096), h200(), t);
  EXPECT_EQ(c.tile_n, 192);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.fwd.sm90ws.bf16.d64.bn192");
  EXPECT_EQ(fwd("d128, BN 192 asked", shape(1, 16, 16, 128, 4096, 4096), h200(), t).tile_n, 128);
  EXPECT_EQ(fwd("d64 16384, automatic", shape(1, 16, 16, 64, 16384, 16384), h200()).tile_n, 192);
  EXPECT_EQ(fwd("d64 4096, automatic", shape(1, 16, 16, 64, 4096, 4096), h200()).tile_n, 128);
  t.sm90_ws_bn = 176;
  // Automatic: from 8k keys (run s13-2); BN 128 asked keeps it narrow there.
  EXPECT_EQ(fwd("d128 8192", shape(1, 16, 16, 128, 8192, 8192), h200()).tile_n, 176);
  EXPECT_EQ(fwd("d128 4096 queries, 8192 keys", shape(1, 16, 16, 128, 4096, 8192), h200()).tile_n, 176);
  EXPECT_EQ(fwd("d128 8191", shape(1, 16, 16, 128, 8191, 8191), h200()).tile_n, 128);
  t.sm90_ws_bn = 128;
  EXPECT_EQ(fwd("d128 16384, BN 128 asked", shape(1, 16, 16, 128, 16384, 16384), h200(), t).tile_n, 128);
  EXPECT_EQ(fwd("d256, BN 176 asked", shape(1, 8, 8, 256, 4096, 4096), h200(), t).tile_n, 80);
}

// The persistent grid of the ws kernel (v19): d64/d128 with ping-pong and the narrow key tile only; automatic at
// d128 up to 1k query rows (causal 2k) beyond one wave (run s13-6); Tuning::sm90_ws_persist forces it on or off.
TEST(CudaChoice, WsPersistentGrid) {
  FwdChoice c = fwd("d128 causal 512 (64 tiles)", shape(1, 16, 16, 128, 512, 512), h200(), {}, causal_mask());
  EXPECT_EQ(c.kernel, CudaKernel::fwd_sm90_ws);
  EXPECT_EQ(c.persist_ctas, 0);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.fwd.sm90ws.bf16.d128");
  // Automatic: 132 tiles fill one wave exactly (no), 133 need a second (yes); the length limits; never d64.
  EXPECT_EQ(fwd("d128 132 tiles", shape(1, 33, 33, 128, 512, 512), h200()).persist_ctas, 0);
  EXPECT_EQ(fwd("d128 133 tiles", shape(1, 19, 19, 128, 896, 896), h200()).persist_ctas, 132);
  EXPECT_EQ(fwd("d128 1024", shape(16, 16, 16, 128, 1024, 1024), h200()).persist_ctas, 132);
  EXPECT_EQ(fwd("d128 1025", shape(16, 16, 16, 128, 1025, 1025), h200()).persist_ctas, 0);
  EXPECT_EQ(fwd("d128 causal 2048", shape(8, 16, 16, 128, 2048, 2048), h200(), {}, causal_mask()).persist_ctas, 132);
  EXPECT_EQ(fwd("d128 causal 4096", shape(4, 16, 16, 128, 4096, 4096), h200(), {}, causal_mask()).persist_ctas, 132);
  EXPECT_EQ(fwd("d128 causal 4097", shape(4, 16, 16, 128, 4097, 4097), h200(), {}, causal_mask()).persist_ctas, 0);
  EXPECT_EQ(fwd("d64 causal 4096", shape(2, 16, 16, 64, 4096, 4096), h200(), {}, causal_mask()).persist_ctas, 0);
  {
    Tuning ws;
    ws.sm90_fwd_config = 3;
    EXPECT_EQ(fwd("d64 512, cfg 3", shape(32, 32, 32, 64, 512, 512), h200(), ws).persist_ctas, 0);
  }
  // Varlen, forced: tiles of the longest sequence for every sequence (the grid the kernel walks).
  AttentionShape v = shape(1, 8, 2, 128, 100, 100);
  v.batch = 40, v.max_seqlen_q = 300, v.max_seqlen_k = 300;  // 3 x 8 x 40 = 960 tiles
  Tuning on;
  on.sm90_ws_persist = 100000;
  EXPECT_EQ(fwd("d128 varlen", v, h200(), on).persist_ctas, 132);
  // Never: d256, no ping-pong, the cp.async kernel.
  EXPECT_EQ(fwd("d256 4096", shape(2, 16, 16, 256, 4096, 4096), h200()).persist_ctas, 0);
  Tuning t;
  t.sm90_ws_pingpong = false;
  EXPECT_EQ(fwd("d128 4096, no ping-pong", shape(2, 16, 16, 128, 4096, 4096), h200(), t).persist_ctas, 0);
  EXPECT_EQ(fwd("d64 1024 (cp.async)", shape(2, 16, 16, 64, 1024, 1024), h200()).persist_ctas, 0);
  // Forced: off; on with at most 3 CTAs (every CTA runs several tiles); on with one per SM but never more CTAs
  // than tiles; never at d256.
  t = Tuning{};
  t.sm90_ws_persist = 0;
  EXPECT_EQ(fwd("d128 4096, persist off", shape(2, 16, 16, 128, 4096, 4096), h200(), t).persist_ctas, 0);
  t.sm90_ws_persist = 3;
  c = fwd("d128 512, persist 3", shape(1, 16, 16, 128, 512, 512), h200(), t);
  EXPECT_EQ(c.persist_ctas, 3);
  EXPECT_EQ(flashkit::kernel_name(c, DType::f16), "cuda.flash.fwd.sm90ws.f16.d128.persistent3.tmastore");
  EXPECT_TRUE(c.overlap_epilogue);  // 512 query rows: v23b's epilogue by default (WsOverlapEpilogue)
  t.sm90_ws_persist = 100000;
  EXPECT_EQ(fwd("d128 512, persist any", shape(1, 16, 16, 128, 512, 512), h200(), t).persist_ctas, 64);
  EXPECT_EQ(fwd("d128 4096, persist any", shape(1, 16, 16, 128, 4096, 4096), h200(), t).persist_ctas, 132);
  EXPECT_EQ(fwd("d128 8192 (BN 176), persist any", shape(1, 16, 16, 128, 8192, 8192), h200(), t).persist_ctas, 0);
  EXPECT_EQ(fwd("d256, persist any", shape(1, 16, 16, 256, 8192, 8192), h200(), t).persist_ctas, 0);
  t.sm90_fwd_config = 3;
  EXPECT_EQ(fwd("d64 1024, cfg 3, persist any", shape(1, 16, 16, 64, 1024, 1024), h200(), t).persist_ctas, 128);
}

// The persistent grid's epilogue (v23, v23b): by default under the next tile's first product with O written by TMA
// stores up to 2k query rows (causal or not; where run s15-5 measured it level or ahead), v19's order beyond;
// forced either way by Tuning::sm90_ws_overlap (1: v23 without the TMA store, 2: with it); nothing to choose
// without the persistent grid.
TEST(CudaChoice, WsOverlapEpilogue) {
  FwdChoice c = fwd("d128 causal 1024", shape(16, 16, 16, 128, 1024, 1024), h200(), Tuning{}, causal_mask());
  EXPECT_EQ(c.persist_ctas, 132);
  EXPECT_TRUE(c.overlap_epilogue);
  EXPECT_TRUE(c.tma_store_o);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.fwd.sm90ws.bf16.d128.persistent132.tmastore");
  c = fwd("d128 1024", shape(16, 16, 16, 128, 1024, 1024), h200());
  EXPECT_EQ(c.persist_ctas, 132);
  EXPECT_TRUE(c.overlap_epilogue);
  EXPECT_TRUE(c.tma_store_o);
  c = fwd("d128 causal 4096", shape(4, 16, 16, 128, 4096, 4096), h200(), Tuning{}, causal_mask());
  EXPECT_EQ(c.persist_ctas, 132);
  EXPECT_FALSE(c.overlap_epilogue);
  EXPECT_FALSE(c.tma_store_o);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.fwd.sm90ws.bf16.d128.persistent132.serialepi");
  Tuning t;
  t.sm90_ws_overlap = 1;
  c = fwd("d128 causal 4096, overlap forced", shape(4, 16, 16, 128, 4096, 4096), h200(), t, causal_mask());
  EXPECT_TRUE(c.overlap_epilogue);
  EXPECT_FALSE(c.tma_store_o);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.fwd.sm90ws.bf16.d128.persistent132");
  t.sm90_ws_overlap = 0;
  c = fwd("d128 causal 1024, serial epilogue", shape(16, 16, 16, 128, 1024, 1024), h200(), t, causal_mask());
  EXPECT_EQ(c.persist_ctas, 132);
  EXPECT_FALSE(c.overlap_epilogue);
  EXPECT_FALSE(c.tma_store_o);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.fwd.sm90ws.bf16.d128.persistent132.serialepi");
  // One CTA per tile (no next tile to overlap), whatever the setting.
  for (int on : {-1, 0, 1, 2}) {
    t.sm90_ws_overlap = on;
    c = fwd("d128 causal 512 (64 tiles)", shape(1, 16, 16, 128, 512, 512), h200(), t, causal_mask());
    EXPECT_EQ(c.persist_ctas, 0);
    EXPECT_FALSE(c.overlap_epilogue);
    EXPECT_FALSE(c.tma_store_o);
    EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.fwd.sm90ws.bf16.d128");
  }
}

// v23b's TMA store of O forced (sm90_ws_overlap = 2): wherever the grid is persistent, never elsewhere.
TEST(CudaChoice, WsTmaStoreO) {
  Tuning t;
  t.sm90_ws_overlap = 2;
  FwdChoice c = fwd("d128 causal 4096, TMA store", shape(4, 16, 16, 128, 4096, 4096), h200(), t, causal_mask());
  EXPECT_EQ(c.persist_ctas, 132);
  EXPECT_TRUE(c.overlap_epilogue);
  EXPECT_TRUE(c.tma_store_o);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.fwd.sm90ws.bf16.d128.persistent132.tmastore");
  // d256 has no persistent grid; the cp.async kernel (d64 short) none either.
  EXPECT_FALSE(fwd("d256 4096, TMA store", shape(4, 16, 16, 256, 4096, 4096), h200(), t).tma_store_o);
  EXPECT_FALSE(fwd("d64 1024 (cp.async), TMA store", shape(16, 16, 16, 64, 1024, 1024), h200(), t).tma_store_o);
}

// FLASHKIT_SM90_WS_OVERLAP through tuning_from_env(): auto by default, auto/0/1/2 (and off/on), and an unparsable value
// keeps the default (with one warning on stderr).
TEST(CudaChoice, WsOverlapFromEnvironment) {
  expect_env_knob("FLASHKIT_SM90_WS_OVERLAP", [] { return flashkit::tuning_from_env().sm90_ws_overlap; }, -1,
                  {{"0", 0}, {"on", 1}, {"2", 2}, {"auto", -1}, {"off", 0}}, "sometimes");
  expect_env_knob("FLASHKIT_SM90_WS_OVERLAP", [] { return flashkit::tuning_from_env().sm90_ws_overlap; }, -1, {}, "3");
}

// FLASHKIT_SM90_WS_PERSIST through tuning_from_env(): -1 (auto) by default and for values out of range.
TEST(CudaChoice, WsPersistFromEnvironment) {
  const char* name = "FLASHKIT_SM90_WS_PERSIST";
  const char* old = std::getenv(name);
  const std::string saved = old ? old : "";
  EXPECT_EQ(Tuning{}.sm90_ws_persist, -1);
  setenv(name, "3", 1);
  EXPECT_EQ(flashkit::tuning_from_env().sm90_ws_persist, 3);
  setenv(name, "0", 1);
  EXPECT_EQ(flashkit::tuning_from_env().sm90_ws_persist, 0);
  setenv(name, "-7", 1);
  EXPECT_EQ(flashkit::tuning_from_env().sm90_ws_persist, -1);
  if (old) setenv(name, saved.c_str(), 1);
  else unsetenv(name);
}

// The static schedule: every tile exactly once; tile order as the one-CTA-per-tile grid launches (query tile fastest,
// longest first); reversed odd rounds balance causal tiles where plain striding gives one CTA the longest every time.
TEST(CudaChoice, WsPersistentSchedule) {
  const auto c = cuda::ws_tile_coord(0, 4, 3);
  EXPECT_EQ(c.mb, 3);
  EXPECT_EQ(c.hblk, 0);
  EXPECT_EQ(c.bslot, 0);
  const auto d = cuda::ws_tile_coord(4 * 3 * 2 - 1, 4, 3);
  EXPECT_EQ(d.mb, 0);
  EXPECT_EQ(d.hblk, 2);
  EXPECT_EQ(d.bslot, 1);
  EXPECT_EQ(cuda::ws_tile_coord(5, 4, 3).mb, 2);
  EXPECT_EQ(cuda::ws_tile_coord(5, 4, 3).hblk, 1);
  for (int total : {1, 7, 131, 132, 133, 1000, 2112}) {
    for (int ctas : {1, 3, 64, 132}) {
      std::vector<int> seen(size_t(total), 0);
      for (int cta = 0; cta < ctas; ++cta)
        for (int r = 0; r * ctas < total; ++r) {
          const int i = cuda::ws_tile_of(cta, r, ctas);
          ASSERT_GE(i, 0);
          if (i < total) ++seen[size_t(i)];
        }
      for (int i = 0; i < total; ++i) ASSERT_EQ(seen[size_t(i)], 1) << "tile " << i << " of " << total << ", " << ctas;
    }
  }
  // Causal, 4 query tiles per head (cost mb + 1), 16 heads x 33 sequences on 132 CTAs.
  const int mblocks = 4, total = mblocks * 16 * 33, ctas = 132;
  int worst = 0, worst_plain = 0, sum = 0;
  for (int cta = 0; cta < ctas; ++cta) {
    int cost = 0, plain = 0;
    for (int r = 0; r * ctas < total; ++r) {
      const int i = cuda::ws_tile_of(cta, r, ctas);
      if (i < total) cost += cuda::ws_tile_coord(i, mblocks, 16).mb + 1;
      if (r * ctas + cta < total) plain += cuda::ws_tile_coord(r * ctas + cta, mblocks, 16).mb + 1;
    }
    worst = std::max(worst, cost), worst_plain = std::max(worst_plain, plain), sum += cost;
  }
  EXPECT_LE(worst, (sum + ctas - 1) / ctas + mblocks);
  EXPECT_GT(worst_plain, worst);
  EXPECT_EQ(cuda::ws_persistent_ctas(1000, 132, 0), 132);
  EXPECT_EQ(cuda::ws_persistent_ctas(50, 132, 0), 50);
  EXPECT_EQ(cuda::ws_persistent_ctas(1000, 132, 3), 3);
  EXPECT_EQ(cuda::ws_persistent_ctas(1000, 0, 0), 1);
}

TEST(CudaChoice, ForwardOnAmpere) {
  for (int d : {64, 128}) {
    const FwdChoice c = fwd("prefill", shape(2, 16, 16, d, 4096, 4096), a100());
    EXPECT_EQ(c.kernel, CudaKernel::fwd_sm80);
    EXPECT_EQ(c.tile_m, 128);
    EXPECT_EQ(c.tile_n, 64);
    EXPECT_EQ(c.stages, 2);
  }
  EXPECT_EQ(flashkit::kernel_name(fwd("prefill d64", shape(2, 16, 16, 64, 4096, 4096), a100()), DType::bf16),
            "cuda.flash.fwd.sm80mma.bf16.d64");
}

struct DecodeCase {
  const char* name;
  int64_t b, h, hkv, d, sq, sk;
  int h200_splits;
  bool h200_narrow;  // the narrow CTA (decode_narrow_auto, where the wide plan splits in one wave)
  int a100_splits;
  bool a100_mma;  // the mma decode kernel fits A100's shared memory (d64 only)
};

TEST(CudaChoice, DecodeSplitsOnH200AndA100) {
  const DecodeCase cases[] = {
      {"b1 32/8 d128 32k", 1, 32, 8, 128, 1, 32768, 16, false, 54, false},  // (the wide CTA, counter merge)
      {"b1 8/1 d256 32k", 1, 8, 1, 256, 1, 32768, 128, false, 128, false},
      {"b16 32/8 d128 32k", 16, 32, 8, 128, 1, 32768, 1, false, 16, false},
      {"b5 32/8 d128 32k", 5, 32, 8, 128, 1, 32768, 13, false, 10, false},
      {"b1 32/8 d128 1k", 1, 32, 8, 128, 1, 1024, 16, false, 8, false},  // (no residency: no clusters)
      {"b1 8/1 d256 128k", 1, 8, 1, 256, 1, 131072, 128, false, 128, false},
      {"b1 32/8 d128 128k", 1, 32, 8, 128, 1, 131072, 33, true, 54, false},
      {"b1 32/8 d64 4k", 1, 32, 8, 64, 1, 4096, 49, true, 13, true},  // (8 MiB of K/V: the cluster range)
      {"b1 32/8 d64 8k", 1, 32, 8, 64, 1, 8192, 16, false, 13, true},
      {"b1 32/8 d64 2k", 1, 32, 8, 64, 1, 2048, 49, true, 13, true},  // (A100: automatic on Hopper only)
      {"b4 16/16 d80 sq3 1000", 4, 16, 16, 80, 3, 1000, 4, true, 6, false},
  };
  for (const DecodeCase& k : cases) {
    const FwdChoice h = fwd(k.name, shape(k.b, k.h, k.hkv, k.d, k.sq, k.sk), h200());
    ASSERT_EQ(h.kernel, CudaKernel::decode);
    EXPECT_EQ(h.decode.kernel, cuda::DecodeKernel::mma) << k.name;
    EXPECT_EQ(h.splits, k.h200_splits) << k.name;
    EXPECT_EQ(h.decode.narrow, k.h200_narrow) << k.name;
    EXPECT_TRUE(h.decode.pdl) << k.name;
    // (the wide CTA at d64 and d128, batch 1, up to 32k keys: the counter merge, DecodeCounterMerge)
    const bool counter = k.b == 1 && !k.h200_narrow && k.sk <= 32768 && (k.d == 64 || k.d == 128);
    EXPECT_EQ(h.decode.merge, k.h200_splits == 1 ? cuda::DecodeMergeKind::none
                              : counter          ? cuda::DecodeMergeKind::counter
                                                 : cuda::DecodeMergeKind::combine)
        << k.name;
    const FwdChoice a = fwd(k.name, shape(k.b, k.h, k.hkv, k.d, k.sq, k.sk), a100());
    EXPECT_EQ(a.decode.kernel, k.a100_mma ? cuda::DecodeKernel::mma : cuda::DecodeKernel::one_warp) << k.name;
    EXPECT_EQ(a.splits, k.a100_splits) << k.name;
    EXPECT_FALSE(a.decode.pdl) << k.name;  // PDL is sm_90 only
    EXPECT_FALSE(a.decode.narrow) << k.name;
  }
  EXPECT_EQ(flashkit::kernel_name(fwd("name", shape(1, 32, 8, 128, 1, 32768), h200()), DType::bf16),
            "cuda.flash.decode.mma.bf16.d128.splits16.counter");
  EXPECT_EQ(flashkit::kernel_name(fwd("name", shape(1, 32, 8, 128, 1, 32768), a100()), DType::bf16),
            "cuda.flash.decode.one_warp.bf16.d128.splits54.combine");
}

// The L2 prefetch before the PDL wait (v30): automatic for the mma member with PDL where no combine launch follows
// (one split, or the cluster merge), never for varlen batches (their offsets are device memory the previous grid may
// write) nor without PDL; FLASHKIT_DECODE_PREFETCH=0 turns it off.
TEST(CudaChoice, DecodePrefetch) {
  ClusterResidency res{};
  for (int c = 2; c <= 16; ++c) res[c] = 8;
  const FwdChoice one = fwd("16 keys: one split", shape(1, 32, 8, 128, 1, 16), h200());
  EXPECT_EQ(one.decode.splits, 1);
  EXPECT_TRUE(one.decode.prefetch);
  const FwdChoice cl = fwd("1k keys: cluster merge", shape(1, 32, 8, 128, 1, 1024), h200(), {}, {}, res);
  ASSERT_GT(cl.decode.cluster, 1);
  EXPECT_TRUE(cl.decode.prefetch);
  EXPECT_EQ(flashkit::kernel_name(cl, DType::bf16),
            "cuda.flash.decode.mma.bf16.d128.narrow.prefetch.splits" + std::to_string(cl.decode.splits) + ".cluster" +
                std::to_string(cl.decode.cluster));
  const FwdChoice comb = fwd("128k keys: combine", shape(1, 32, 8, 128, 1, 131072), h200(), {}, {}, res);
  EXPECT_EQ(comb.decode.merge, flashkit::cuda::DecodeMergeKind::combine);
  EXPECT_FALSE(comb.decode.prefetch);
  const FwdChoice cnt = fwd("32k keys: counter", shape(1, 32, 8, 128, 1, 32768), h200(), {}, {}, res);
  EXPECT_EQ(cnt.decode.merge, flashkit::cuda::DecodeMergeKind::counter);
  EXPECT_FALSE(cnt.decode.prefetch);
  EXPECT_FALSE(fwd("d256 4k: combine", shape(1, 8, 1, 256, 1, 4096), h200()).decode.prefetch);
  flashkit::kernels::AttentionShape v = shape(1, 32, 8, 128, 1, 16);
  const int32_t cu[2] = {0, 1};
  v.cu_seqlens_q = cu, v.cu_seqlens_k = cu;
  EXPECT_FALSE(fwd("varlen", v, h200()).decode.prefetch);
  EXPECT_FALSE(fwd("A100 (no PDL)", shape(1, 32, 8, 128, 1, 16), a100()).decode.prefetch);
  Tuning t;
  t.decode_pdl = false;
  EXPECT_FALSE(fwd("PDL off", shape(1, 32, 8, 128, 1, 16), h200(), t).decode.prefetch);
  t = Tuning{};
  t.decode_prefetch = false;
  EXPECT_FALSE(fwd("FLASHKIT_DECODE_PREFETCH=0", shape(1, 32, 8, 128, 1, 16), h200(), t).decode.prefetch);
}

// The counter merge (v31): automatic for the wide CTA at d64 in one wave past the narrow CTA's range (measured -2 to
// -6% at 8k-32k keys, batch 1, 8 KV heads); FLASHKIT_DECODE_COMBINE=last takes it wherever the combine would run, up
// to kDecodeCounterMaxSplits partials, and keeps the automatic clusters. Never with the L2 prefetch (it lost there).
TEST(CudaChoice, DecodeCounterMerge) {
  ClusterResidency res{};
  for (int c = 2; c <= 16; ++c) res[c] = 8;
  using flashkit::cuda::DecodeMergeKind;
  const FwdChoice d64 = fwd("d64 32k: the wide CTA, counter", shape(1, 32, 8, 64, 1, 32768), h200(), {}, {}, res);
  EXPECT_FALSE(d64.decode.narrow);
  EXPECT_EQ(d64.decode.merge, DecodeMergeKind::counter);
  EXPECT_EQ(d64.decode.splits, 16);
  EXPECT_FALSE(d64.decode.prefetch);
  EXPECT_EQ(flashkit::kernel_name(d64, DType::bf16), "cuda.flash.decode.mma.bf16.d64.splits16.counter");
  EXPECT_EQ(fwd("d64 8k", shape(1, 32, 8, 64, 1, 8192), h200(), {}, {}, res).decode.merge, DecodeMergeKind::counter);
  EXPECT_EQ(fwd("d64 4k: narrow clusters", shape(1, 32, 8, 64, 1, 4096), h200(), {}, {}, res).decode.merge,
            DecodeMergeKind::cluster);
  EXPECT_EQ(fwd("d64 32k batch 8 (unmeasured)", shape(8, 32, 8, 64, 1, 32768), h200(), {}, {}, res).decode.merge,
            DecodeMergeKind::combine);
  const FwdChoice d128 = fwd("d128 32k: the wide CTA, counter", shape(1, 32, 8, 128, 1, 32768), h200(), {}, {}, res);
  EXPECT_FALSE(d128.decode.narrow);
  EXPECT_EQ(d128.decode.merge, DecodeMergeKind::counter);
  EXPECT_EQ(flashkit::kernel_name(d128, DType::bf16), "cuda.flash.decode.mma.bf16.d128.splits16.counter");
  const FwdChoice d128l = fwd("d128 128k (unmeasured): narrow, combine", shape(1, 32, 8, 128, 1, 131072), h200(), {}, {}, res);
  EXPECT_TRUE(d128l.decode.narrow);
  EXPECT_EQ(d128l.decode.merge, DecodeMergeKind::combine);
  EXPECT_EQ(fwd("d128 1k: narrow clusters", shape(1, 32, 8, 128, 1, 1024), h200(), {}, {}, res).decode.merge,
            DecodeMergeKind::cluster);
  Tuning narrow_on;
  narrow_on.decode_narrow = 1;
  EXPECT_EQ(fwd("d128 32k, narrow forced: combine", shape(1, 32, 8, 128, 1, 32768), h200(), narrow_on, {}, res).decode.merge,
            DecodeMergeKind::combine);
  EXPECT_EQ(fwd("d256 1k: combine", shape(1, 8, 1, 256, 1, 1024), h200()).decode.merge, DecodeMergeKind::combine);
  Tuning kernel;
  kernel.decode_combine = flashkit::DecodeCombine::kernel;
  EXPECT_EQ(fwd("d64 32k, =kernel", shape(1, 32, 8, 64, 1, 32768), h200(), kernel).decode.merge,
            DecodeMergeKind::combine);

  Tuning t;
  t.decode_combine = flashkit::DecodeCombine::last;
  const FwdChoice c32k = fwd("=last, d128 32k: counter", shape(1, 32, 8, 128, 1, 32768), h200(), t, {}, res);
  EXPECT_EQ(c32k.decode.merge, DecodeMergeKind::counter);
  EXPECT_EQ(c32k.decode.splits, 33);
  EXPECT_TRUE(c32k.decode.narrow);
  EXPECT_FALSE(c32k.decode.prefetch);
  EXPECT_EQ(flashkit::kernel_name(c32k, DType::bf16), "cuda.flash.decode.mma.bf16.d128.narrow.splits33.counter");
  const FwdChoice cl = fwd("=last, 1k keys: the automatic cluster", shape(1, 32, 8, 128, 1, 1024), h200(), t, {}, res);
  EXPECT_EQ(cl.decode.merge, DecodeMergeKind::cluster);
  EXPECT_EQ(cl.decode.cluster, fwd("1k keys, auto", shape(1, 32, 8, 128, 1, 1024), h200(), {}, {}, res).decode.cluster);
  EXPECT_EQ(fwd("=last, d256 1k", shape(1, 8, 1, 256, 1, 1024), h200(), t).decode.merge, DecodeMergeKind::counter);
  const FwdChoice d256 = fwd("=last, d256 32k: 128 splits, combine", shape(1, 8, 1, 256, 1, 32768), h200(), t);
  EXPECT_GT(d256.decode.splits, flashkit::cuda::kDecodeCounterMaxSplits);
  EXPECT_EQ(d256.decode.merge, DecodeMergeKind::combine);
  EXPECT_EQ(fwd("=last, one split", shape(1, 32, 8, 128, 1, 16), h200(), t).decode.merge, DecodeMergeKind::none);
  // The merges that read f32 partials from HBM (the op allocates them for these).
  EXPECT_TRUE(flashkit::cuda::decode_merge_uses_hbm_partials(DecodeMergeKind::combine));
  EXPECT_TRUE(flashkit::cuda::decode_merge_uses_hbm_partials(DecodeMergeKind::counter));
  EXPECT_FALSE(flashkit::cuda::decode_merge_uses_hbm_partials(DecodeMergeKind::cluster));
  EXPECT_FALSE(flashkit::cuda::decode_merge_uses_hbm_partials(DecodeMergeKind::none));
}

TEST(CudaChoice, DecodeWindowTuningAndClusters) {
  AttentionMask win;
  win.window_left = 1024, win.window_right = 0, win.causal = true;
  EXPECT_EQ(fwd("b1 32/8 d128 32k window 1024", shape(1, 32, 8, 128, 1, 32768), h200(), {}, win).splits, 14);
  Tuning t;
  t.decode_max_splits = 8;
  EXPECT_EQ(fwd("max splits 8", shape(1, 32, 8, 128, 1, 32768), h200(), t).splits, 8);
  t = Tuning{};
  t.decode_pdl = false;
  EXPECT_FALSE(fwd("pdl off", shape(1, 32, 8, 128, 1, 32768), h200(), t).decode.pdl);
  // The wide kernel's cluster merge (FLASHKIT_DECODE_NARROW=0): taken when 8 clusters of 16 fit (one wave, as the
  // combine path), not when only 6 do. (The residency is queried for every sm_90 decode at head_dim <= 128, where
  // the automatic narrow CTA may cluster; not with FLASHKIT_DECODE_COMBINE=kernel, at d256 or on the A100.)
  t = Tuning{};
  t.decode_combine = flashkit::DecodeCombine::cluster;
  t.decode_narrow = 0;
  ClusterResidency res{};
  for (int c = 2; c <= 16; ++c) res[c] = 8;
  EXPECT_TRUE(flashkit::fwd_needs_decode_residency(shape(1, 32, 8, 128, 1, 32768), h200(), t));
  EXPECT_TRUE(flashkit::fwd_needs_decode_residency(shape(1, 32, 8, 128, 1, 32768), h200(), Tuning{}));
  Tuning kernel_merge;
  kernel_merge.decode_combine = flashkit::DecodeCombine::kernel;
  EXPECT_FALSE(flashkit::fwd_needs_decode_residency(shape(1, 32, 8, 128, 1, 32768), h200(), kernel_merge));
  EXPECT_FALSE(flashkit::fwd_needs_decode_residency(shape(1, 8, 1, 256, 1, 32768), h200(), Tuning{}));
  EXPECT_FALSE(flashkit::fwd_needs_decode_residency(shape(1, 32, 8, 128, 1, 32768), a100(), Tuning{}));
  FwdChoice c = fwd("cluster, 8 resident", shape(1, 32, 8, 128, 1, 32768), h200(), t, {}, res);
  EXPECT_EQ(c.splits, 16);
  EXPECT_EQ(c.cluster, 16);
  EXPECT_EQ(c.decode.merge, cuda::DecodeMergeKind::cluster);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.decode.mma.bf16.d128.prefetch.splits16.cluster16");
  res[15] = res[16] = 6;
  c = fwd("cluster, 6 resident at 15-16", shape(1, 32, 8, 128, 1, 32768), h200(), t, {}, res);
  EXPECT_EQ(c.splits, 16);
  EXPECT_EQ(c.cluster, 0);
  EXPECT_EQ(c.decode.merge, cuda::DecodeMergeKind::combine);
}

Tuning kernel_merge_tuning() {
  Tuning t;
  t.decode_combine = flashkit::DecodeCombine::kernel;
  return t;
}

// The narrow decode CTA (Tuning::decode_narrow; plan.hpp DecodePlan::narrow): 4 warps, 2 (d128) or 3 (d64) CTAs an
// SM, as many splits as fill that one wave; never at d256, with a window, or where the tiles exceed a wave; with the
// cluster merge only when asked for (decode_narrow = 1); automatic at d128, and at d64 up to 2k keys
// (decode_narrow_auto).
TEST(CudaChoice, DecodeNarrow) {
  Tuning on;
  on.decode_narrow = 1;
  FwdChoice c = fwd("b1 32/8 d128 32k narrow", shape(1, 32, 8, 128, 1, 32768), h200(), on);
  ASSERT_EQ(c.kernel, CudaKernel::decode);
  EXPECT_TRUE(c.decode.narrow);
  EXPECT_EQ(c.splits, 33);  // 8 KV heads x 33 = 264 CTAs = 2 on each of 132 SMs
  EXPECT_EQ(c.decode.merge, cuda::DecodeMergeKind::combine);
  EXPECT_TRUE(c.decode.pdl);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.decode.mma.bf16.d128.narrow.splits33.combine");
  EXPECT_EQ(fwd("b1 32/8 d64 32k narrow", shape(1, 32, 8, 64, 1, 32768), h200(), on).splits, 49);  // 3 an SM
  EXPECT_EQ(fwd("b1 32/8 d128 4k narrow", shape(1, 32, 8, 128, 1, 4096), h200(), on).splits, 33);
  EXPECT_EQ(fwd("b1 32/8 d128 256 keys narrow", shape(1, 32, 8, 128, 1, 256), h200(), on).splits, 8);  // blocks / 2
  // Where it does not apply: d256, more tiles than a wave holds, a window, the cluster merge, the A100 at d128.
  EXPECT_FALSE(fwd("d256", shape(1, 8, 1, 256, 1, 32768), h200(), on).decode.narrow);
  EXPECT_FALSE(fwd("b64 x 8 KV heads", shape(64, 32, 8, 128, 1, 4096), h200(), on).decode.narrow);
  AttentionMask win;
  win.window_left = 1024, win.window_right = 0, win.causal = true;
  EXPECT_FALSE(fwd("window", shape(1, 32, 8, 128, 1, 32768), h200(), on, win).decode.narrow);
  Tuning cl;  // the explicit cluster merge takes the narrow CTA (no clusters resident here: the combine)
  cl.decode_combine = flashkit::DecodeCombine::cluster;
  c = fwd("cluster merge, none resident", shape(1, 32, 8, 128, 1, 32768), h200(), cl);
  EXPECT_TRUE(c.decode.narrow);
  EXPECT_EQ(c.decode.merge, cuda::DecodeMergeKind::combine);
  EXPECT_FALSE(fwd("A100 d128", shape(1, 32, 8, 128, 1, 32768), a100(), on).decode.narrow);
  // A split cap still holds.
  on.decode_max_splits = 20;
  EXPECT_EQ(fwd("cap 20", shape(1, 32, 8, 128, 1, 32768), h200(), on).splits, 20);
  // With the cluster merge (opt-in, decode_residency_is_narrow: the residency passed is the narrow kernel's): the
  // largest cluster of <= 16 splits whose 8 tiles all fit at once, one launch; else the wave-filling combine.
  Tuning nc;
  nc.decode_narrow = 1;
  nc.decode_combine = flashkit::DecodeCombine::cluster;
  EXPECT_TRUE(cuda::decode_residency_is_narrow(128, nc));
  EXPECT_FALSE(cuda::decode_residency_is_narrow(256, nc));
  EXPECT_TRUE(cuda::decode_residency_is_narrow(64, Tuning{}));
  Tuning wide_clusters = cl;
  wide_clusters.decode_narrow = 0;
  EXPECT_FALSE(cuda::decode_residency_is_narrow(128, wide_clusters));
  ClusterResidency res{};
  for (int c = 2; c <= 16; ++c) res[c] = 8;
  c = fwd("narrow clusters of 16", shape(1, 32, 8, 128, 1, 32768), h200(), nc, {}, res);
  EXPECT_TRUE(c.decode.narrow);
  EXPECT_EQ(c.splits, 16);
  EXPECT_EQ(c.cluster, 16);
  EXPECT_EQ(c.decode.merge, cuda::DecodeMergeKind::cluster);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.decode.mma.bf16.d128.narrow.prefetch.splits16.cluster16");
  res[15] = res[16] = 6;
  EXPECT_EQ(fwd("narrow, 6 resident at 15-16", shape(1, 32, 8, 128, 1, 32768), h200(), nc, {}, res).cluster, 14);
  c = fwd("narrow, no cluster fits", shape(1, 32, 8, 128, 1, 32768), h200(), nc, {}, ClusterResidency{});
  EXPECT_TRUE(c.decode.narrow);
  EXPECT_EQ(c.splits, 33);
  EXPECT_EQ(c.decode.merge, cuda::DecodeMergeKind::combine);
  EXPECT_EQ(fwd("narrow clusters, 256 keys", shape(1, 32, 8, 128, 1, 256), h200(), nc, {}, res).cluster, 8);
  // Automatic: the cluster merge where the clusters fit and each CTA reads at most 64 KiB of K and V
  // (kDecodeClusterAutoBytesPerCta), else the wave-filling combine (d128) or the wide CTA (d64 past 2k keys and
  // 8 MiB); never the wide CTA's clusters (d256; or with the narrow CTA off), which lost by the same rule.
  for (int cc = 2; cc <= 16; ++cc) res[cc] = 8;
  c = fwd("auto d128 1k", shape(1, 32, 8, 128, 1, 1024), h200(), {}, {}, res);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.decode.mma.bf16.d128.narrow.prefetch.splits16.cluster16");
  c = fwd("auto d128 4k (16 MiB): the wide CTA, counter", shape(1, 32, 8, 128, 1, 4096), h200(), {}, {}, res);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.decode.mma.bf16.d128.splits16.counter");
  c = fwd("d128 4k, merge kernel: narrow, combine", shape(1, 32, 8, 128, 1, 4096), h200(), kernel_merge_tuning(), {}, res);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.decode.mma.bf16.d128.narrow.splits33.combine");
  c = fwd("auto d64 4k (8 MiB)", shape(1, 32, 8, 64, 1, 4096), h200(), {}, {}, res);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.decode.mma.bf16.d64.narrow.prefetch.splits16.cluster16");
  c = fwd("auto d64 32k", shape(1, 32, 8, 64, 1, 32768), h200(), {}, {}, res);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.decode.mma.bf16.d64.splits16.counter");
  c = fwd("auto d128 1k, merge kernel", shape(1, 32, 8, 128, 1, 1024), h200(), kernel_merge_tuning(), {}, res);
  EXPECT_EQ(c.decode.merge, cuda::DecodeMergeKind::combine);
  c = fwd("auto d256 256 keys", shape(1, 8, 1, 256, 1, 256), h200(), {}, {}, res);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.decode.mma.bf16.d256.splits8.combine");
  c = fwd("auto d256 1k", shape(1, 8, 1, 256, 1, 1024), h200(), {}, {}, res);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.decode.mma.bf16.d256.splits32.combine");
  Tuning no_narrow;
  no_narrow.decode_narrow = 0;
  c = fwd("auto d128 1k, narrow off", shape(1, 32, 8, 128, 1, 1024), h200(), no_narrow, {}, res);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.decode.mma.bf16.d128.splits16.counter");
  // Off, and automatic.
  Tuning off;
  off.decode_narrow = 0;
  EXPECT_FALSE(fwd("off", shape(1, 32, 8, 128, 1, 32768), h200(), off).decode.narrow);
  EXPECT_FALSE(fwd("auto d128 32k (the wide CTA, counter)", shape(1, 32, 8, 128, 1, 32768), h200()).decode.narrow);
  EXPECT_TRUE(fwd("auto d128 128k", shape(1, 32, 8, 128, 1, 131072), h200()).decode.narrow);
  EXPECT_TRUE(fwd("auto d96 (padded to 128) 4k, batch 2", shape(2, 32, 8, 96, 1, 4096), h200()).decode.narrow);
  EXPECT_TRUE(fwd("auto d64 1k", shape(1, 32, 8, 64, 1, 1024), h200()).decode.narrow);
  EXPECT_TRUE(fwd("auto d64 4k (8 MiB)", shape(1, 32, 8, 64, 1, 4096), h200()).decode.narrow);
  EXPECT_FALSE(fwd("auto d64 8k", shape(1, 32, 8, 64, 1, 8192), h200()).decode.narrow);
  EXPECT_FALSE(fwd("auto d256", shape(1, 8, 1, 256, 1, 4096), h200()).decode.narrow);
}

// FLASHKIT_DECODE_NARROW through tuning_from_env(): auto by default, auto/0/1 (and off/on); anything else keeps the
// default with one warning.
TEST(CudaChoice, DecodeNarrowFromEnvironment) {
  expect_env_knob("FLASHKIT_DECODE_NARROW", [] { return flashkit::tuning_from_env().decode_narrow; }, -1,
                  {{"0", 0}, {"1", 1}, {"on", 1}, {"off", 0}, {"auto", -1}}, "wide");
}

TEST(CudaChoice, DecodeCombineFromEnvironment) {
  expect_env_knob("FLASHKIT_DECODE_COMBINE", [] { return int(flashkit::tuning_from_env().decode_combine); }, 0,
                  {{"auto", 0}, {"kernel", 1}, {"cluster", 2}, {"last", 3}}, "counter");
}

TEST(CudaChoice, EngineDecodePlan) {
  // The fused-prologue kernel: splits for the most keys a launch site sees, clusters when the heads leave room.
  ClusterResidency res{};
  res[8] = 18, res[16] = 9;
  auto plan = [&](int64_t heads, int64_t keys, const DeviceInfo& d, const Tuning& t = {}) {
    cuda::DecodeShape s;
    s.heads = heads, s.kv_heads = 1, s.head_dim = 256, s.max_seqlen_k = keys, s.kv_len_on_device = true;
    const cuda::DecodePlan p = cuda::plan_decode(s, d, t, res);
    std::printf("engine %2lld heads %6lld keys -> %s\n", (long long)heads, (long long)keys,
                cuda::decode_plan_name(p).c_str());
    return p;
  };
  cuda::DecodePlan p = plan(4, 512, h200());  // gemma-3-270m
  EXPECT_EQ(p.kernel, cuda::DecodeKernel::fused_prologue);
  EXPECT_EQ(p.splits, 16);
  EXPECT_EQ(p.cluster, 16);
  EXPECT_EQ(p.merge, cuda::DecodeMergeKind::cluster);
  EXPECT_TRUE(p.pdl);
  p = plan(4, 32768, h200());
  EXPECT_EQ(p.splits, 64);
  EXPECT_EQ(p.cluster, 16);
  EXPECT_EQ(p.merge, cuda::DecodeMergeKind::counter);  // a full context uses more splits than a cluster holds
  EXPECT_EQ(plan(4, 100, h200()).cluster, 4);
  EXPECT_EQ(plan(1, 40, h200()).cluster, 2);
  p = plan(32, 4096, h200());  // Llama-3.2-1B: too many heads for clusters
  EXPECT_EQ(p.splits, 8);
  EXPECT_EQ(p.cluster, 0);
  EXPECT_EQ(p.merge, cuda::DecodeMergeKind::counter);
  Tuning t;
  t.engine_decode_merge = flashkit::EngineDecodeMerge::cluster;
  EXPECT_EQ(plan(32, 4096, h200(), t).cluster, 8);
  t.engine_decode_merge = flashkit::EngineDecodeMerge::global;
  EXPECT_EQ(plan(4, 512, h200(), t).cluster, 0);
  t = Tuning{};
  t.cuda_pdl = false;
  EXPECT_FALSE(plan(4, 512, h200(), t).pdl);
  res = ClusterResidency{};  // A100: no clusters
  p = plan(4, 512, a100());
  EXPECT_EQ(p.splits, 16);
  EXPECT_EQ(p.cluster, 0);
  EXPECT_FALSE(p.pdl);
}

TEST(CudaChoice, PagedDecodePlan) {
  // The serving step's kernel: splits only when rows x KV heads leave the machine short of CTAs, >= 64 keys each.
  auto plan = [&](int64_t rows, int64_t heads, int64_t kv_heads, int64_t keys, int64_t window_left = -1,
                  const Tuning& t = {}) {
    cuda::DecodeShape s;
    s.batch = rows, s.heads = heads, s.kv_heads = kv_heads, s.head_dim = 64, s.max_seqlen_k = keys;
    s.window_left = window_left;
    s.paged = true;
    const cuda::DecodePlan p = cuda::plan_decode(s, h200(), t, ClusterResidency{});
    std::printf("paged %3lld rows %2lld/%lld heads %5lld keys -> %s\n", (long long)rows, (long long)heads,
                (long long)kv_heads, (long long)keys, cuda::decode_plan_name(p).c_str());
    return p;
  };
  cuda::DecodePlan p = plan(64, 32, 8, 384);  // Llama-3.2-1B serving 64 streams
  EXPECT_EQ(p.kernel, cuda::DecodeKernel::paged);
  EXPECT_EQ(p.splits, 1);
  EXPECT_EQ(p.merge, cuda::DecodeMergeKind::none);
  EXPECT_EQ(decode_plan_name(p), "paged");
  p = plan(1, 32, 8, 3000);
  EXPECT_EQ(p.splits, 33);
  EXPECT_EQ(p.merge, cuda::DecodeMergeKind::combine);
  EXPECT_EQ(decode_plan_name(p), "paged.splits33.combine");
  EXPECT_EQ(plan(1, 8, 1, 3000).splits, 47);     // MQA: one tile, as many splits as 64-key slices
  EXPECT_EQ(plan(1, 32, 8, 3000, 511).splits, 8);  // a window bounds the keys
  EXPECT_EQ(plan(16, 32, 8, 2176).splits, 3);
  EXPECT_EQ(plan(1, 32, 2, 3000).mtiles, 4);     // 16 q heads per KV head: two CTAs of 8 heads
  EXPECT_EQ(plan(3, 32, 8, 40).splits, 1);        // fewer keys than one split's minimum
  Tuning t;
  t.decode_max_splits = 4;
  EXPECT_EQ(plan(1, 32, 8, 3000, -1, t).splits, 4);
  EXPECT_EQ(cuda::paged_row_splits(33, 1), 1);
  EXPECT_EQ(cuda::paged_row_splits(33, 64), 1);
  EXPECT_EQ(cuda::paged_row_splits(33, 65), 2);
  EXPECT_EQ(cuda::paged_row_splits(33, 3000), 33);
  EXPECT_FALSE(cuda::decode_plan_needs_residency({.paged = true}, h200(), Tuning{}));
}

TEST(CudaChoice, Backward) {
  auto bwd = [](const char* what, int d, float softcap, const DeviceInfo& dev, const Tuning& t = {}) {
    const BwdChoice c = flashkit::choose_bwd(shape(2, 16, 16, d, 4096, 4096), softcap, dev, t);
    std::printf("bwd %-26s %-5s -> %s (tile %dx%d)\n", what, dev.cc_major == 9 ? "H200" : "A100",
                flashkit::kernel_name(c, DType::bf16).c_str(), c.tile_m, c.tile_n);
    return c;
  };
  // d64 on Hopper: the cp.async backward (v6; the warp-specialized one lost there, run s14-3), BM 128.
  BwdChoice c = bwd("d64", 64, 0.f, h200());
  EXPECT_EQ(c.kernel, CudaKernel::bwd_sm90);
  EXPECT_EQ(c.tile_m, 128);
  EXPECT_EQ(c.tile_n, 128);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.bwd.sm90wgmma.bf16.d64");
  // softcap and FLASHKIT_SM90_BWD_CFG=1 stay on v6.
  c = bwd("d64 softcap", 64, 30.f, h200());
  EXPECT_EQ(c.kernel, CudaKernel::bwd_sm90);
  EXPECT_EQ(c.tile_m, 64);
  EXPECT_TRUE(c.softcap);
  Tuning t;
  t.sm90_bwd_config = 1;
  c = bwd("d64 config 1", 64, 0.f, h200(), t);
  EXPECT_EQ(c.kernel, CudaKernel::bwd_sm90);
  EXPECT_EQ(c.tile_m, 64);
  // d128: the warp-specialized backward (v22) on v6's default tile.
  c = bwd("d128", 128, 0.f, h200());
  EXPECT_EQ(c.kernel, CudaKernel::bwd_sm90_ws);
  EXPECT_EQ(c.tile_m, 64);
  EXPECT_EQ(c.tile_n, 128);
  EXPECT_EQ(flashkit::kernel_name(c, DType::f16), "cuda.flash.bwd.sm90ws.f16.d128");
  c = bwd("d128 softcap", 128, 30.f, h200());
  EXPECT_EQ(c.kernel, CudaKernel::bwd_sm90);
  EXPECT_EQ(flashkit::kernel_name(c, DType::f16), "cuda.flash.bwd.sm90wgmma.f16.d128");
  // d256 (and head dims padded to it) on Hopper: the warp-specialized d256 kernel (v24) on v16's tile, config 1
  // included; softcap on the d256 wgmma kernel (v16).
  c = bwd("d256", 256, 0.f, h200());
  EXPECT_EQ(c.kernel, CudaKernel::bwd_sm90_ws);
  EXPECT_EQ(c.tile_m, 64);
  EXPECT_EQ(c.tile_n, 64);
  EXPECT_FALSE(c.softcap);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.bwd.sm90ws.bf16.d256");
  c = bwd("d256 softcap", 256, 30.f, h200());
  EXPECT_EQ(c.kernel, CudaKernel::bwd_sm90);
  EXPECT_TRUE(c.softcap);
  EXPECT_EQ(c.tile_n, 64);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.bwd.sm90wgmma.bf16.d256");
  c = bwd("d200 (padded to 256)", 200, 0.f, h200());
  EXPECT_EQ(c.kernel, CudaKernel::bwd_sm90_ws);
  EXPECT_EQ(c.dpad, 256);
  c = bwd("d256 config 1", 256, 0.f, h200(), t);
  EXPECT_EQ(c.kernel, CudaKernel::bwd_sm90_ws);
  EXPECT_EQ(c.tile_m, 64);
  // The portable kernel: sm90 = false (the tests' "sm80" path), a device without sm_90a code, an A100.
  Tuning no90;
  no90.sm90 = false;
  c = bwd("d256 sm90=false", 256, 0.f, h200(), no90);
  EXPECT_EQ(c.kernel, CudaKernel::bwd_sm80);
  EXPECT_EQ(c.tile_m, 32);
  EXPECT_EQ(c.tile_n, 64);
  DeviceInfo plain90 = h200();
  plain90.sm90a = false;
  EXPECT_EQ(bwd("d256 no sm_90a code", 256, 0.f, plain90).kernel, CudaKernel::bwd_sm80);
  c = bwd("d256", 256, 0.f, a100());
  EXPECT_EQ(c.kernel, CudaKernel::bwd_sm80);
  EXPECT_EQ(flashkit::kernel_name(c, DType::f16), "cuda.flash.bwd.sm80mma.f16.d256");
  c = bwd("d64", 64, 0.f, a100());
  EXPECT_EQ(c.kernel, CudaKernel::bwd_sm80);
  EXPECT_EQ(c.tile_m, 64);
  EXPECT_EQ(c.tile_n, 128);
  EXPECT_EQ(flashkit::kernel_name(c, DType::f16), "cuda.flash.bwd.sm80mma.f16.d64");
}

// The warp-specialized backward (v22): without softcap on an sm_90a device, by default (Tuning::sm90_bwd_ws = -1) at
// head dims padded to 128 only (d64 measured slower than v6, run s14-3), forced (1) at d64 too; 0
// (FLASHKIT_SM90_BWD_WS=0) and a launch that declined (allow_ws = false) give v6 with its own tile; sm90 = false and
// devices without sm_90a code the portable kernel. Masks, GQA and varlen do not enter the choice.
TEST(CudaChoice, BackwardWarpSpecialized) {
  auto bwd = [](const AttentionShape& sh, float softcap, const DeviceInfo& dev, const Tuning& t, bool allow_ws = true) {
    return flashkit::choose_bwd(sh, softcap, dev, t, allow_ws);
  };
  const Tuning dflt;
  EXPECT_EQ(dflt.sm90_bwd_ws, -1);
  Tuning forced;
  forced.sm90_bwd_ws = 1;
  for (int d : {40, 64, 96, 128}) {  // padded head dims included
    const AttentionShape sh = shape(1, 8, 2, d, 77, 300);
    BwdChoice c = bwd(sh, 0.f, h200(), dflt);
    EXPECT_EQ(c.kernel, c.dpad == 128 ? CudaKernel::bwd_sm90_ws : CudaKernel::bwd_sm90) << d;
    EXPECT_EQ(c.tile_n, 128) << d;
    EXPECT_EQ(c.tile_m, c.dpad == 64 ? 128 : 64) << d;
    c = bwd(sh, 0.f, h200(), forced);
    EXPECT_EQ(c.kernel, CudaKernel::bwd_sm90_ws) << d;
    EXPECT_EQ(c.tile_n, 128) << d;
    EXPECT_EQ(c.tile_m, c.dpad == 64 ? 128 : 64) << d;
    EXPECT_EQ(bwd(sh, 30.f, h200(), forced).kernel, CudaKernel::bwd_sm90) << d;  // softcap: v6 even when forced
    Tuning off;
    off.sm90_bwd_ws = 0;
    c = bwd(sh, 0.f, h200(), off);
    EXPECT_EQ(c.kernel, CudaKernel::bwd_sm90) << d;
    EXPECT_EQ(c.tile_m, c.dpad == 64 ? 128 : 64) << d;
    EXPECT_EQ(flashkit::kernel_name(c, DType::bf16).rfind("cuda.flash.bwd.sm90wgmma.", 0), 0u) << d;
    c = bwd(sh, 0.f, h200(), dflt, /*allow_ws=*/false);
    EXPECT_EQ(c.kernel, CudaKernel::bwd_sm90) << d;
    EXPECT_EQ(bwd(sh, 0.f, h200(), forced, /*allow_ws=*/false).kernel, CudaKernel::bwd_sm90) << d;
    EXPECT_EQ(bwd(sh, 0.f, a100(), dflt).kernel, CudaKernel::bwd_sm80) << d;
    Tuning no90;
    no90.sm90 = false;
    EXPECT_EQ(bwd(sh, 0.f, h200(), no90).kernel, CudaKernel::bwd_sm80) << d;
  }
  // Varlen shapes take v22 like any other (d256: CudaChoice.BackwardWarpSpecializedD256).
  AttentionShape v = shape(1, 8, 2, 128, 100, 100);
  v.batch = 5, v.max_seqlen_q = 60, v.max_seqlen_k = 80;
  EXPECT_EQ(bwd(v, 0.f, h200(), dflt).kernel, CudaKernel::bwd_sm90_ws);
}

// The warp-specialized d256 backward (v24, flash_bwd_sm90_ws_d256.cuh): at head dims padded to 256 on sm_90a
// devices without softcap, by default (auto) and forced (1), on v16's tile (64 queries x 64 keys) whatever
// sm90_bwd_config says; softcap, FLASHKIT_SM90_BWD_WS=0 and a declined launch (allow_ws = false: no TMA map, another
// register budget) take v16 (bwd_sm90 at d256); sm90 = false, devices without sm_90a code and the A100 the portable
// kernel. GQA, unequal lengths and varlen do not enter the choice.
TEST(CudaChoice, BackwardWarpSpecializedD256) {
  auto bwd = [](const AttentionShape& sh, float softcap, const DeviceInfo& dev, const Tuning& t, bool allow_ws = true) {
    return flashkit::choose_bwd(sh, softcap, dev, t, allow_ws);
  };
  const Tuning dflt;
  Tuning forced, off, cfg1, no90;
  forced.sm90_bwd_ws = 1;
  off.sm90_bwd_ws = 0;
  cfg1.sm90_bwd_config = 1;
  no90.sm90 = false;
  AttentionShape var = shape(1, 8, 2, 256, 300, 300);
  var.batch = 4, var.max_seqlen_q = 130, var.max_seqlen_k = 190;
  for (const AttentionShape& sh : {shape(2, 16, 16, 256, 4096, 4096), shape(1, 8, 2, 200, 77, 300),
                                   shape(3, 4, 1, 136, 190, 65), var}) {
    const int d = int(sh.head_dim);
    for (const Tuning& t : {dflt, forced, cfg1}) {
      const BwdChoice c = bwd(sh, 0.f, h200(), t);
      EXPECT_EQ(c.kernel, CudaKernel::bwd_sm90_ws) << d;
      EXPECT_EQ(c.dpad, 256) << d;
      EXPECT_EQ(c.tile_m, 64) << d;
      EXPECT_EQ(c.tile_n, 64) << d;
      EXPECT_FALSE(c.softcap) << d;
      EXPECT_EQ(flashkit::kernel_name(c, DType::f16), "cuda.flash.bwd.sm90ws.f16.d256") << d;
    }
    for (const Tuning& t : {dflt, forced}) {
      BwdChoice c = bwd(sh, 30.f, h200(), t);  // softcap: v16
      EXPECT_EQ(c.kernel, CudaKernel::bwd_sm90) << d;
      EXPECT_TRUE(c.softcap) << d;
      c = bwd(sh, 0.f, h200(), t, /*allow_ws=*/false);  // the launch declined: v16
      EXPECT_EQ(c.kernel, CudaKernel::bwd_sm90) << d;
      EXPECT_EQ(c.tile_m, 64) << d;
      EXPECT_EQ(c.tile_n, 64) << d;
      EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.bwd.sm90wgmma.bf16.d256") << d;
    }
    const BwdChoice c = bwd(sh, 0.f, h200(), off);
    EXPECT_EQ(c.kernel, CudaKernel::bwd_sm90) << d;
    EXPECT_EQ(c.tile_n, 64) << d;
    EXPECT_EQ(bwd(sh, 0.f, h200(), no90).kernel, CudaKernel::bwd_sm80) << d;
    DeviceInfo plain90 = h200();
    plain90.sm90a = false;
    EXPECT_EQ(bwd(sh, 0.f, plain90, forced).kernel, CudaKernel::bwd_sm80) << d;
    EXPECT_EQ(bwd(sh, 0.f, a100(), forced).kernel, CudaKernel::bwd_sm80) << d;
  }
}

// The d256 ws backward's P^T/dS^T buffers (bwd_ws_d256_buffers.hpp) under its only ordering, one named barrier per
// step: epoch e is the time between barriers e-1 and e; step s writes its buffer in epoch s and both warpgroups read
// it in epoch s+1. Accesses within an epoch are unordered, so the buffer written in an epoch must not be the one read
// there, and each read must find its own step's tile. A single buffer (v16's, with its second CTA barrier) fails.
TEST(CudaChoice, BackwardWsD256PdsBuffers) {
  using flashkit::cuda::bwd_ws_pds_buffer;
  using flashkit::cuda::kBwdWsPdsBuffers;
  for (int nsteps = 1; nsteps <= 9; ++nsteps) {
    std::vector<int> holds(kBwdWsPdsBuffers, -1);  // the step whose tile each buffer holds
    for (int e = 0; e <= nsteps; ++e) {
      const int wstep = e < nsteps ? e : -1, rstep = e - 1;
      if (wstep >= 0) {
        ASSERT_GE(bwd_ws_pds_buffer(wstep), 0);
        ASSERT_LT(bwd_ws_pds_buffer(wstep), kBwdWsPdsBuffers);
        if (rstep >= 0)
          EXPECT_NE(bwd_ws_pds_buffer(wstep), bwd_ws_pds_buffer(rstep)) << "epoch " << e << " of " << nsteps;
      }
      if (rstep >= 0) EXPECT_EQ(holds[bwd_ws_pds_buffer(rstep)], rstep) << "step " << rstep << " of " << nsteps;
      if (wstep >= 0) holds[bwd_ws_pds_buffer(wstep)] = wstep;
    }
  }
}

// The ws backward's LSE/Dsum staging (bwd_ws_staging.hpp): every query row of a step staged by exactly one consumer
// thread, half by each warpgroup; and the slot ring under the kernel's only ordering, the dS^T barriers. Epoch e is
// the time between barriers e-1 and e (epoch -1: before the loop's first): step s reads its slot in epoch s, and
// step s+1's values are written in epoch s. Accesses within an epoch are unordered, so a slot written in an epoch
// must not be read there, and each read must find its own step's values (written in an earlier epoch). v22's first
// version ordered these stores with mbarriers instead, which racecheck reported (run s14-3).
TEST(CudaChoice, BackwardWsLseStaging) {
  auto rows_of = [](auto bm_tag) {
    constexpr int BM = decltype(bm_tag)::value;
    std::vector<int> owner(BM, -1);
    int per_wg[2] = {0, 0};
    for (int tid = 0; tid < 256; ++tid) {
      const int r = flashkit::cuda::bwd_ws_lse_row<BM>(tid);
      if (r < 0) continue;
      ASSERT_LT(r, BM) << tid;
      EXPECT_EQ(owner[r], -1) << "row " << r << " staged twice (BM " << BM << ")";
      owner[r] = tid;
      ++per_wg[tid / 128];
    }
    for (int r = 0; r < BM; ++r) EXPECT_GE(owner[r], 0) << "row " << r << " never staged (BM " << BM << ")";
    EXPECT_EQ(per_wg[0], BM / 2);
    EXPECT_EQ(per_wg[1], BM / 2);
  };
  rows_of(std::integral_constant<int, 64>{});
  rows_of(std::integral_constant<int, 128>{});

  using flashkit::cuda::bwd_ws_lse_slot;
  using flashkit::cuda::kBwdWsLseSlots;
  for (int nsteps = 1; nsteps <= 7; ++nsteps) {
    std::vector<int> holds(kBwdWsLseSlots, -1);  // the step whose values each slot holds
    for (int e = -1; e < nsteps; ++e) {
      const int wstep = e + 1 < nsteps ? e + 1 : -1, rstep = e >= 0 ? e : -1;
      if (wstep >= 0) {
        ASSERT_GE(bwd_ws_lse_slot(wstep), 0);
        ASSERT_LT(bwd_ws_lse_slot(wstep), kBwdWsLseSlots);
      }
      if (rstep >= 0) {
        EXPECT_EQ(holds[bwd_ws_lse_slot(rstep)], rstep) << "step " << rstep << " of " << nsteps;
        if (wstep >= 0)
          EXPECT_NE(bwd_ws_lse_slot(wstep), bwd_ws_lse_slot(rstep)) << "epoch " << e << " of " << nsteps;
      }
      if (wstep >= 0) holds[bwd_ws_lse_slot(wstep)] = wstep;
    }
  }
}

// FLASHKIT_SM90_BWD_WS through tuning_from_env(): auto (-1) by default, auto/0/1/off/on honoured, an unparsable
// value warned about once and the default kept.
TEST(CudaChoice, BackwardWsFromEnvironment) {
  expect_env_knob("FLASHKIT_SM90_BWD_WS", [] { return flashkit::tuning_from_env().sm90_bwd_ws; }, -1,
                  {{"0", 0}, {"1", 1}, {"off", 0}, {"on", 1}, {"auto", -1}}, "sometimes");
}

}  // namespace
