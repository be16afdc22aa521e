// The L2 prefetch plan (engine/l2_prefetch_plan.hpp): which weight bytes a decode kernel prefetches for the GEMV
// after it, and the requests each prefetching block issues (the kernels walk the same function). Pure, CPU-only.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/l2_prefetch_plan.hpp"
#include "flashkit/tuning.hpp"

namespace {

using namespace flashkit::engine;

constexpr int64_t kL2 = int64_t(50) << 20;  // the H200's L2

// Every request of every block: 16-byte aligned, a multiple of 16, at most a chunk, inside [0, bytes), no byte
// twice; returns the bytes covered per stripe.
std::vector<int64_t> walk(const L2PrefetchPlan& p, int64_t blocks) {
  std::vector<int64_t> per_stripe(size_t(l2_prefetch_stripes(p)), 0);
  std::vector<char> seen(size_t(p.bytes), 0);
  for (int64_t b = 0; b < blocks; ++b)
    l2_prefetch_requests(p, b, blocks, [&](int64_t off, int64_t size) {
      EXPECT_EQ(off % kL2PrefetchAlign, 0);
      EXPECT_EQ(size % kL2PrefetchAlign, 0);
      EXPECT_GT(size, 0);
      EXPECT_LE(size, kL2PrefetchChunk);
      EXPECT_LE(off + size, p.bytes) << "past the weights' end";
      ASSERT_GE(off, 0);
      const int64_t s = off / p.stripe;
      EXPECT_EQ((off + size - 1) / p.stripe, s) << "a request crosses a stripe";
      EXPECT_EQ(s % blocks, b) << "stripe " << s << " issued by the wrong block";
      per_stripe[size_t(s)] += size;
      for (int64_t i = off; i < off + size && i < p.bytes; ++i) {
        EXPECT_EQ(seen[size_t(i)], 0) << "byte " << i << " twice";
        seen[size_t(i)] = 1;
      }
    });
  return per_stripe;
}

TEST(L2PrefetchPlan, OffPrefetchesNothing) {
  EXPECT_FALSE(l2_prefetch_under_mixer(L2PrefetchMode::off, 26214400, 102400, kL2).active());
  EXPECT_FALSE(l2_prefetch_under_gemv(L2PrefetchMode::off, 26214400, 52428800, 204800, kL2).active());
  EXPECT_FALSE(l2_prefetch_under_gemv(L2PrefetchMode::out, 26214400, 52428800, 204800, kL2).active());
  // unknown L2 size, no stripe, no bytes
  EXPECT_FALSE(l2_prefetch_under_mixer(L2PrefetchMode::out, 26214400, 102400, 0).active());
  EXPECT_FALSE(l2_prefetch_under_mixer(L2PrefetchMode::out, 26214400, 0, kL2).active());
  EXPECT_FALSE(l2_prefetch_under_mixer(L2PrefetchMode::all, 0, 102400, kL2).active());
  int calls = 0;
  l2_prefetch_requests(L2PrefetchPlan{}, 0, 80, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

// mamba-2.8b: out_proj 2560 x 5120 bf16 (26.2 MB, 256 stripes of 10 rows) fits the budget: every byte, stripe by
// stripe, over the mixer's 80 blocks (3-4 stripes a block).
TEST(L2PrefetchPlan, Mamba28bOutProjWholeUnderTheMixer) {
  const int64_t bytes = int64_t(2560) * 5120 * 2, stripe = int64_t(10) * 5120 * 2;
  const L2PrefetchPlan p = l2_prefetch_under_mixer(L2PrefetchMode::out, bytes, stripe, kL2);
  ASSERT_TRUE(p.active());
  EXPECT_EQ(p.bytes, bytes);
  EXPECT_EQ(p.head, p.stripe);
  EXPECT_EQ(l2_prefetch_stripes(p), 256);
  const auto per = walk(p, 80);
  int64_t total = 0;
  for (int64_t v : per) total += v;
  EXPECT_EQ(total, bytes);
  EXPECT_EQ(l2_prefetch_total(p), bytes);
  EXPECT_EQ(l2_prefetch_under_mixer(L2PrefetchMode::all, bytes, stripe, kL2).head, p.head);  // all: the same here
  EXPECT_EQ(l2_prefetch_under_mixer(L2PrefetchMode::late, bytes, stripe, kL2).head, p.head);  // late: same bytes
  EXPECT_FALSE(l2_prefetch_under_gemv(L2PrefetchMode::late, bytes, bytes, stripe, kL2).active());
}

// Mode all under out_proj: the head of each of the next in_proj's stripes (10240 x 2560, 256 stripes of 40 rows),
// as much as the budget leaves beside out_proj: 37.5 - 25 MB = 12.5 MB, 50 KB a stripe.
TEST(L2PrefetchPlan, Mamba28bNextInProjHeadsUnderOutProj) {
  const int64_t out = int64_t(2560) * 5120 * 2, in = int64_t(10240) * 2560 * 2, stripe = int64_t(40) * 2560 * 2;
  const L2PrefetchPlan p = l2_prefetch_under_gemv(L2PrefetchMode::all, out, in, stripe, kL2);
  ASSERT_TRUE(p.active());
  EXPECT_EQ(p.head, (l2_prefetch_budget(kL2) - out) / 256 / 16 * 16);
  EXPECT_LT(p.head, p.stripe);
  const auto per = walk(p, 256);
  int64_t total = 0;
  for (int64_t v : per) {
    EXPECT_EQ(v, p.head);
    total += v;
  }
  EXPECT_LE(total + out, l2_prefetch_budget(kL2));
  EXPECT_EQ(l2_prefetch_total(p), total);
  // nothing left when the current GEMV alone fills the budget
  EXPECT_FALSE(l2_prefetch_under_gemv(L2PrefetchMode::all, l2_prefetch_budget(kL2), in, stripe, kL2).active());
  // a small next matrix (mamba-130m's in_proj, 4.7 MB) is prefetched whole
  const int64_t in130 = int64_t(3072) * 768 * 2;
  const L2PrefetchPlan q = l2_prefetch_under_gemv(L2PrefetchMode::all, int64_t(768) * 1536 * 2, in130, 12 * 1536, kL2);
  ASSERT_TRUE(q.active());
  int64_t t = 0;
  for (int64_t v : walk(q, 96)) t += v;
  EXPECT_EQ(t, in130);
}

// Odd sizes: stripes not a multiple of 16 (rounded up), a short last stripe, bytes not a multiple of 16 (the tail
// under 16 is left out), more blocks than stripes, a budget that gives heads smaller than a chunk or none at all.
TEST(L2PrefetchPlan, OddSizesNeverPassTheEnd) {
  for (const auto& [bytes, stripe, budget_l2] :
       {std::tuple<int64_t, int64_t, int64_t>{123456, 1000, kL2}, {1000008, 65536 * 3 + 16, kL2}, {40, 1000, kL2},
        {1000 * 1000 + 8, 7 * 1024, kL2}, {5 << 20, 100000, int64_t(4) << 20}, {777776, 333, 4096}}) {
    for (int64_t blocks : {1, 3, 80, 1000}) {
      const L2PrefetchPlan p = l2_prefetch_under_mixer(L2PrefetchMode::out, bytes, stripe, budget_l2);
      if (!p.active()) {
        const int64_t stripes = (bytes + (stripe + 15) / 16 * 16 - 1) / ((stripe + 15) / 16 * 16);
        EXPECT_LT(l2_prefetch_budget(budget_l2), stripes * 16) << bytes << " / " << stripe;
        continue;
      }
      EXPECT_EQ(p.stripe % 16, 0);
      EXPECT_GE(p.stripe, stripe);
      const auto per = walk(p, blocks);
      int64_t total = 0;
      for (int64_t v : per) total += v;
      EXPECT_LE(total, l2_prefetch_budget(budget_l2)) << bytes << " / " << stripe;
      if (l2_prefetch_budget(budget_l2) >= bytes) EXPECT_EQ(total, bytes / 16 * 16) << bytes << " / " << stripe;
    }
  }
  // a range past the last stripe or before the first is empty
  const L2PrefetchPlan p = l2_prefetch_under_mixer(L2PrefetchMode::out, 4096, 1024, kL2);
  EXPECT_EQ(l2_prefetch_range(p, 4).begin, l2_prefetch_range(p, 4).end);
  EXPECT_EQ(l2_prefetch_range(p, -1).begin, l2_prefetch_range(p, -1).end);
}

// FLASHKIT_CUDA_L2_PREFETCH (tuning_from_env): 0, out, all, late; anything else warns once and keeps the default (out).
TEST(L2PrefetchPlan, ModeFromTheEnvironment) {
  const char* name = "FLASHKIT_CUDA_L2_PREFETCH";
  const char* before = std::getenv(name);
  const std::string saved = before ? before : "";
  for (auto [value, want] : {std::pair{"0", 0}, {"out", 1}, {"all", 2}, {"late", 3}, {"fast", 1}, {"on", 1}}) {
    setenv(name, value, 1);
    testing::internal::CaptureStderr();
    EXPECT_EQ(flashkit::tuning_from_env().cuda_l2_prefetch, want) << value;
    const std::string err = testing::internal::GetCapturedStderr();
    const bool bad = std::string(value) == "fast" || std::string(value) == "on";
    EXPECT_EQ(err.find(name) != std::string::npos, bad) << value << ": " << err;
  }
  unsetenv(name);
  EXPECT_EQ(flashkit::tuning_from_env().cuda_l2_prefetch, 1);
  EXPECT_EQ(flashkit::Tuning{}.cuda_l2_prefetch, int(L2PrefetchMode::out));
  if (before) setenv(name, saved.c_str(), 1);
}

}  // namespace
