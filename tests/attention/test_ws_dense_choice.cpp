// The persistent ws forward's DENSE variant (v27) in the CPU build: its host-prepared 32-bit bookkeeping
// (src/kernels/cuda/ws_schedule.hpp: fast divmod, the tile's place, its key range) against the general path's
// arithmetic, the choice that runs it (ws_dense_shape / ws_dense_fwd in src/ops/attention_choice.cpp), its kernel
// name and FLASHKIT_SM90_WS_DENSE.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/ws_schedule.hpp"
#include "ops/attention_choice.hpp"
#include "choice_fixture.hpp"
#include "env_knob.hpp"

namespace {

using flashkit::CudaKernel;
using flashkit::DeviceInfo;
using flashkit::DType;
using flashkit::FwdChoice;
using flashkit::Tuning;
using flashkit::kernels::AttentionMask;
using flashkit::kernels::AttentionShape;
namespace cuda = flashkit::cuda;

// n / d and n % d by multiply-high, add and shift, for divisors and dividends across the whole range the kernel
// uses (d >= 1, n < 2^31): small ones exhaustively, powers of two and their neighbours, and random ones.
TEST(CudaChoice, WsDenseFastDivmod) {
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 300; ++d) divisors.push_back(d);
  for (int s = 1; s <= 31; ++s)
    for (int64_t dd : {-1, 0, 1}) {
      const int64_t d = (int64_t(1) << s) + dd;
      if (d >= 1 && d < (int64_t(1) << 31)) divisors.push_back(uint32_t(d));
    }
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + rng() % 0x7fffffffu);
  for (int i = 0; i < 100; ++i) divisors.push_back(1 + rng() % 5000u);
  std::vector<uint32_t> dividends;
  for (uint32_t n = 0; n <= 4096; ++n) dividends.push_back(n);
  for (int s = 12; s <= 31; ++s)
    for (int64_t dd : {-2, -1, 0, 1}) {
      const int64_t n = (int64_t(1) << s) + dd;
      if (n >= 0 && n < (int64_t(1) << 31)) dividends.push_back(uint32_t(n));
    }
  for (int i = 0; i < 400; ++i) dividends.push_back(rng() & 0x7fffffffu);
  int64_t checked = 0;
  for (uint32_t d : divisors) {
    const cuda::FastDivmod f = cuda::make_fast_divmod(d);
    // Each divisor's multiples and their neighbours too: where a wrong rounding would show.
    std::vector<uint32_t> ns = dividends;
    for (uint32_t k : {1u, 2u, 3u, 1000u, 0x7fffffffu / d})
      for (int64_t dd : {-1, 0, 1}) {
        const int64_t n = int64_t(k) * d + dd;
        if (n >= 0 && n < (int64_t(1) << 31)) ns.push_back(uint32_t(n));
      }
    for (uint32_t n : ns) {
      uint32_t q, r;
      cuda::fast_divmod(f, n, q, r);
      ASSERT_EQ(q, n / d) << n << " / " << d;
      ASSERT_EQ(r, n % d) << n << " % " << d;
      ++checked;
    }
  }
  std::printf("fast divmod: %lld quotients checked\n", static_cast<long long>(checked));
  EXPECT_GT(checked, 1000000);
}

// The dense tile's place: ws_tile_coord's, and its KV head that of its query head.
TEST(CudaChoice, WsDenseTileMatchesTheGeneralOrder) {
  struct G {
    int64_t b, h, hkv, sq;
  };
  for (const G g : {G{1, 1, 1, 1}, G{3, 16, 16, 513}, G{2, 32, 8, 1000}, G{5, 12, 4, 129}, G{1, 7, 1, 4096}}) {
    const cuda::WsDenseGeom geom = cuda::make_ws_dense_geom(g.b, g.h, g.hkv, g.sq, 300, 128, 128);
    const int mblocks = int((g.sq + 127) / 128);
    ASSERT_EQ(geom.mblocks, mblocks);
    ASSERT_EQ(geom.total, mblocks * g.h * g.b);
    for (int i = 0; i < geom.total; ++i) {
      const cuda::WsTileCoord c = cuda::ws_tile_coord(i, mblocks, int(g.h));
      const cuda::WsDenseTile t = cuda::ws_dense_tile(geom, i);
      ASSERT_EQ(t.mb, c.mb) << i;
      ASSERT_EQ(t.h, c.hblk) << i;
      ASSERT_EQ(t.b, c.bslot) << i;
      ASSERT_EQ(t.kvh, int(c.hblk / (g.h / g.hkv))) << i;
    }
  }
}

// The dense key range of rows [r0, r1] is the general one (flash_common.cuh's tile_keys, restated here on the
// mask's lo/hi) under the causal mask or none, seqlen_k above, equal to and below seqlen_q.
TEST(CudaChoice, WsDenseKeysMatchTheMask) {
  for (bool causal : {false, true}) {
    AttentionMask m;
    if (causal) m.causal = true, m.window_right = 0;
    for (int64_t sq : {1, 5, 64, 127, 128, 129, 300, 1000})
      for (int64_t sk : {1, 3, 64, 100, 128, 129, 300, 1000, 2049}) {
        for (int bn : {128, 176}) {
          const cuda::WsDenseGeom g = cuda::make_ws_dense_geom(1, 1, 1, sq, sk, 128, bn);
          for (int r0 = 0; r0 < sq; r0 += 37)
            for (int r1 : {r0, int(std::min<int64_t>(sq - 1, r0 + 63)), int(std::min<int64_t>(sq - 1, r0 + 127))}) {
              const cuda::WsDenseKeys k = cuda::ws_dense_keys(g, causal, r0, r1, bn);
              const int64_t klo = m.lo(r0, sq, sk), khi = m.hi(r1, sq, sk);
              int nb_begin = 0, nb_end = 0;
              if (khi > klo) nb_begin = int(klo / bn), nb_end = int((khi + bn - 1) / bn);
              ASSERT_EQ(k.nb_begin, nb_begin) << sq << " " << sk << " " << r0 << " " << r1;
              ASSERT_EQ(k.nb_end, nb_end) << sq << " " << sk << " " << r0 << " " << r1;
              ASSERT_EQ(k.lo_max, m.lo(r1, sq, sk));
              ASSERT_EQ(k.hi_min, m.hi(r0, sq, sk));
              ASSERT_EQ(cuda::ws_dense_hi(g, causal, r1), m.hi(r1, sq, sk));
            }
        }
      }
  }
}

using choice_fixture::h200;
using choice_fixture::shape;
AttentionMask causal() { return choice_fixture::causal_mask(); }
// The dispatch's decision: choose_fwd, then ws_dense_fwd on it (attention_cuda.cpp).
Tuning dense_on() {
  Tuning t;
  t.sm90_ws_dense = 1;
  return t;
}

FwdChoice choose(const AttentionShape& s, const AttentionMask& m, float softcap = 0.f, const Tuning& t = dense_on()) {
  FwdChoice c = flashkit::choose_fwd(s, m, h200(), t);
  c.dense = flashkit::ws_dense_fwd(s, m, softcap, c, t);
  return c;
}

TEST(CudaChoice, WsDenseOnThePersistentPrefillGrid) {
  // Automatic: kWsDenseAuto decides where the knob is unset.
  EXPECT_EQ(choose(shape(16, 16, 16, 128, 512, 512), causal(), 0.f, Tuning{}).dense, flashkit::kWsDenseAuto);
  // The short prefill calls of issue 20 (d128, automatic persistent grid; the variant asked for): dense, named so.
  FwdChoice c = choose(shape(16, 16, 16, 128, 512, 512), causal());
  EXPECT_TRUE(c.dense);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.fwd.sm90ws.bf16.d128.persistent132.tmastore.dense");
  c = choose(shape(16, 16, 16, 128, 1024, 1024), {});
  EXPECT_TRUE(c.dense);
  c = choose(shape(4, 32, 8, 128, 4096, 4096), causal());  // GQA (not packed), serial epilogue from 4k
  EXPECT_TRUE(c.dense);
  EXPECT_FALSE(c.overlap_epilogue);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.fwd.sm90ws.bf16.d128.persistent132.serialepi.dense");
  c = choose(shape(16, 16, 16, 128, 512, 700), causal());  // more keys than queries: the diagonal offset
  EXPECT_TRUE(c.dense);
  // d64 on the forced persistent grid.
  Tuning t = dense_on();
  t.sm90_fwd_config = 3;
  t.sm90_ws_persist = 1 << 20;
  EXPECT_TRUE(choose(shape(16, 16, 16, 64, 512, 512), causal(), 0.f, t).dense);

  // The general kernel: varlen, a window, softcap, a padded head dim, one CTA per tile, the knob off, the epilogue
  // overlap without the TMA store (no dense instantiation), d256 (no persistent grid).
  AttentionShape v = shape(16, 16, 16, 128, 512, 512);
  const int32_t cu[] = {0, 512};
  v.batch = 1, v.cu_seqlens_q = cu, v.cu_seqlens_k = cu;
  EXPECT_FALSE(flashkit::ws_dense_shape(v, causal(), 0.f));
  AttentionMask w;
  w.window_left = 64;
  EXPECT_FALSE(choose(shape(16, 16, 16, 128, 512, 512), w).dense);
  AttentionMask wc = causal();
  wc.window_left = 100;
  EXPECT_FALSE(choose(shape(16, 16, 16, 128, 512, 512), wc).dense);
  AttentionMask right;  // a right window without the causal flag
  right.window_right = 0;
  EXPECT_FALSE(flashkit::ws_dense_shape(shape(16, 16, 16, 128, 512, 512), right, 0.f));
  EXPECT_FALSE(choose(shape(16, 16, 16, 128, 512, 512), causal(), 30.f).dense);
  c = choose(shape(16, 16, 16, 96, 512, 512), causal());
  EXPECT_GT(c.persist_ctas, 0);
  EXPECT_FALSE(c.dense);
  c = choose(shape(1, 16, 16, 128, 512, 512), causal());  // 64 tiles: one CTA each
  EXPECT_EQ(c.persist_ctas, 0);
  EXPECT_FALSE(c.dense);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.fwd.sm90ws.bf16.d128");
  t = Tuning{};
  t.sm90_ws_dense = 0;
  c = choose(shape(16, 16, 16, 128, 512, 512), causal(), 0.f, t);
  EXPECT_GT(c.persist_ctas, 0);
  EXPECT_FALSE(c.dense);
  EXPECT_EQ(flashkit::kernel_name(c, DType::bf16), "cuda.flash.fwd.sm90ws.bf16.d128.persistent132.tmastore");
  t = Tuning{};
  t.sm90_ws_overlap = 1;
  EXPECT_FALSE(choose(shape(16, 16, 16, 128, 512, 512), causal(), 0.f, t).dense);
  t.sm90_ws_dense = 1;
  EXPECT_FALSE(choose(shape(16, 16, 16, 128, 512, 512), causal(), 0.f, t).dense);
  t = Tuning{};
  t.sm90_ws_persist = 1 << 20;
  EXPECT_FALSE(choose(shape(16, 16, 16, 256, 512, 512), causal(), 0.f, t).dense);
  // Lengths the 32-bit bookkeeping cannot hold.
  EXPECT_FALSE(flashkit::ws_dense_shape(shape(1, 1, 1, 128, int64_t(1) << 30, 512), {}, 0.f));
  EXPECT_FALSE(flashkit::ws_dense_shape(shape(1, 1, 1, 128, 512, int64_t(1) << 30), {}, 0.f));
  EXPECT_TRUE(flashkit::ws_dense_shape(shape(1, 1, 1, 128, (int64_t(1) << 30) - 1, 512), {}, 0.f));
}

// FLASHKIT_SM90_WS_DENSE through tuning_from_env(): auto by default, auto/0/1 (and off/on), and an unparsable value
// keeps the default with one warning.
TEST(CudaChoice, WsDenseFromEnvironment) {
  EXPECT_EQ(Tuning{}.sm90_ws_dense, -1);
  expect_env_knob("FLASHKIT_SM90_WS_DENSE", [] { return flashkit::tuning_from_env().sm90_ws_dense; }, -1,
                  {{"0", 0}, {"1", 1}, {"off", 0}, {"on", 1}, {"auto", -1}}, "maybe");
}

}  // namespace
