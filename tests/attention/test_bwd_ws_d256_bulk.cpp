// The warp-specialized d256 backward's bulk-dQ variant v24b (flash_bwd_sm90_ws_d256.cuh, worklog v24b): the
// environment knob that picks it and the pure functions of its dQ chunk (bwd_ws_d256_buffers.hpp), CPU build.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "core/tuning.hpp"
#include "kernels/cuda/bwd_ws_d256_buffers.hpp"

namespace {

using namespace flashkit::cuda;

// FLASHKIT_SM90_BWD_D256_DQ: atomic by default, atomic and bulk honoured, anything else warned about once and the
// default kept.
TEST(CudaChoice, BackwardWsD256DqFromEnvironment) {
  const char* name = "FLASHKIT_SM90_BWD_D256_DQ";
  const char* old = std::getenv(name);
  const std::string saved = old ? old : "";
  unsetenv(name);
  EXPECT_FALSE(flashkit::Tuning{}.sm90_bwd_d256_bulk_dq);
  EXPECT_FALSE(flashkit::tuning_from_env().sm90_bwd_d256_bulk_dq);
  setenv(name, "bulk", 1);
  EXPECT_TRUE(flashkit::tuning_from_env().sm90_bwd_d256_bulk_dq);
  setenv(name, "atomic", 1);
  EXPECT_FALSE(flashkit::tuning_from_env().sm90_bwd_d256_bulk_dq);
  setenv(name, "tma", 1);
  testing::internal::CaptureStderr();
  const bool first = flashkit::tuning_from_env().sm90_bwd_d256_bulk_dq;
  const bool second = flashkit::tuning_from_env().sm90_bwd_d256_bulk_dq;
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(first, flashkit::Tuning{}.sm90_bwd_d256_bulk_dq);
  EXPECT_EQ(second, flashkit::Tuning{}.sm90_bwd_d256_bulk_dq);
  const std::string warning = "ignoring FLASHKIT_SM90_BWD_D256_DQ=tma";
  const size_t at = err.find(warning);
  EXPECT_NE(at, std::string::npos) << err;
  if (at != std::string::npos) EXPECT_EQ(err.find(warning, at + 1), std::string::npos) << "warned twice: " << err;
  if (old) setenv(name, saved.c_str(), 1);
  else unsetenv(name);
}

// The chunks of a step cover the 256 dQ columns once, each from the warpgroup that holds those columns (warpgroup w:
// [128w, 128w + 128)), warpgroup 0 first.
TEST(CudaChoice, BackwardWsD256DqChunksCoverColumns) {
  std::vector<int> seen(256, 0);
  int prev_owner = 0;
  for (int j = 0; j < kBwdWsD256DqChunks; ++j) {
    const int wg = bwd_ws_d256_dq_owner(j), c0 = bwd_ws_d256_dq_col0(j);
    ASSERT_GE(wg, 0);
    ASSERT_LT(wg, 2);
    EXPECT_GE(wg, prev_owner) << "chunk " << j;
    prev_owner = wg;
    for (int c = c0; c < c0 + kBwdWsD256DqCols; ++c) {
      ASSERT_GE(c, 0);
      ASSERT_LT(c, 256);
      EXPECT_EQ(c / 128, wg) << "column " << c << " of chunk " << j << " is not its warpgroup's";
      ++seen[c];
    }
  }
  for (int c = 0; c < 256; ++c) EXPECT_EQ(seen[c], 1) << "column " << c;
}

// The hand-over: the writer frees the buffer after each chunk (but the CTA's last) to the warpgroup that fills the
// next one; a warpgroup waits before each of its fills but the CTA's first. So, per "empty" barrier, the writer's
// arrivals and the warpgroup's waits match one for one, in order (a mismatch is a hang or two fills at once).
TEST(CudaChoice, BackwardWsD256DqHandOver) {
  for (int nsteps = 1; nsteps <= 5; ++nsteps) {
    const int fills = nsteps * kBwdWsD256DqChunks;
    std::vector<int> arrivals[2], waits[2];  // the fill index each arrival frees / each wait guards
    for (int f = 0; f < fills; ++f) {
      const int s = f / kBwdWsD256DqChunks, j = f % kBwdWsD256DqChunks;
      if (bwd_ws_d256_dq_fill_waits(s, j)) waits[bwd_ws_d256_dq_owner(j)].push_back(f);
      if (bwd_ws_d256_dq_writer_frees(s, j, nsteps)) arrivals[bwd_ws_d256_dq_next_owner(j)].push_back(f + 1);
    }
    for (int wg = 0; wg < 2; ++wg) EXPECT_EQ(arrivals[wg], waits[wg]) << "warpgroup " << wg << ", " << nsteps << " steps";
  }
}

// Layout: rows 16-byte aligned (bulk copies), the mbarriers 8-byte aligned, distinct, inside the chunk and outside
// every row's 256 bytes; and the consumers' float4 stores (row 16wq + g + 8 odd, bytes 32cc + 16 (t4 >> 1)) take 4
// wavefronts per warp instruction, the minimum for 512 bytes.
TEST(CudaChoice, BackwardWsD256DqLayout) {
  constexpr uint32_t row_bytes = kBwdWsD256DqCols * 4;
  for (int r = 0; r < kBwdWsD256DqRows; ++r) {
    EXPECT_EQ(bwd_ws_d256_dq_row_off(r) % 16, 0u) << r;
    EXPECT_LE(bwd_ws_d256_dq_row_off(r) + row_bytes, kBwdWsD256DqBytes) << r;
  }
  std::set<uint32_t> bars;
  for (int k = 0; k < 5; ++k) {
    const uint32_t o = bwd_ws_d256_dq_mbar_off(k);
    EXPECT_EQ(o % 8, 0u) << k;
    EXPECT_LE(o + 8, kBwdWsD256DqBytes) << k;
    EXPECT_TRUE(bars.insert(o).second) << "mbarrier " << k << " shares its bytes";
    for (int r = 0; r < kBwdWsD256DqRows; ++r) {
      const uint32_t r0 = bwd_ws_d256_dq_row_off(r);
      EXPECT_TRUE(o + 8 <= r0 || o >= r0 + row_bytes) << "mbarrier " << k << " inside row " << r;
    }
  }
  for (int wq = 0; wq < 4; ++wq)
    for (int cc = 0; cc < kBwdWsD256DqCols / 8; ++cc) {
      std::vector<std::set<uint32_t>> bank_group(8);  // 16-byte addresses per group of 4 banks
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, t4 = lane & 3;
        const uint32_t at = bwd_ws_d256_dq_row_off(wq * 16 + g + 8 * (t4 & 1)) + 32u * cc + 16u * (t4 >> 1);
        ASSERT_LT(at + 16, bwd_ws_d256_dq_row_off(wq * 16 + g + 8 * (t4 & 1)) + row_bytes + 1);
        bank_group[(at / 16) % 8].insert(at);
      }
      size_t wavefronts = 0;
      for (const auto& s : bank_group) wavefronts = std::max(wavefronts, s.size());
      EXPECT_EQ(wavefronts, 4u) << "warp " << wq << ", store " << cc;
    }
}

// The kernel's named barriers per step, as three agents (a consumer warpgroup arrives with 128 threads, the writer
// warp with 32) run in random interleavings: every run finishes (no hang) and no barrier collects more arrivals
// than its count before it completes (two generations mixed: a fill overwriting a chunk still being read).
// Warpgroup w: Ds once before the loop; per step PdsFree (from step 1), Ds, then per own chunk: empty_w (sync,
// when bwd_ws_d256_dq_fill_waits), full (arrive). Writer: per chunk full (sync), empty of the next owner (arrive,
// when bwd_ws_d256_dq_writer_frees).
TEST(CudaChoice, BackwardWsD256NamedBarrierProtocol) {
  enum Bar { kDs, kPds, kFull, kEmpty0, kEmpty1, kBars };
  const int need[kBars] = {256, 256, 160, 160, 160};
  struct Op {
    bool sync;
    Bar bar;
    int threads;
  };
  for (int nsteps = 1; nsteps <= 4; ++nsteps) {
    std::vector<Op> prog[3];
    for (int w = 0; w < 2; ++w) {
      prog[w].push_back({true, kDs, 128});
      for (int s = 0; s < nsteps; ++s) {
        if (s > 0) prog[w].push_back({true, kPds, 128});
        prog[w].push_back({true, kDs, 128});
        for (int j = 0; j < kBwdWsD256DqChunks; ++j) {
          if (bwd_ws_d256_dq_owner(j) != w) continue;
          if (bwd_ws_d256_dq_fill_waits(s, j)) prog[w].push_back({true, Bar(kEmpty0 + w), 128});
          prog[w].push_back({false, kFull, 128});
        }
      }
    }
    for (int s = 0; s < nsteps; ++s)
      for (int j = 0; j < kBwdWsD256DqChunks; ++j) {
        prog[2].push_back({true, kFull, 32});
        if (bwd_ws_d256_dq_writer_frees(s, j, nsteps))
          prog[2].push_back({false, Bar(kEmpty0 + bwd_ws_d256_dq_next_owner(j)), 32});
      }
    for (unsigned seed = 0; seed < 200; ++seed) {
      uint32_t rng = seed * 2654435761u + 1u;
      size_t pc[3] = {0, 0, 0};
      int count[kBars] = {};
      bool blocked[3] = {false, false, false};
      std::vector<int> waiting[kBars];
      for (;;) {
        int ready[3], n = 0;
        for (int a = 0; a < 3; ++a)
          if (!blocked[a] && pc[a] < prog[a].size()) ready[n++] = a;
        if (n == 0) break;
        rng = rng * 1664525u + 1013904223u;
        const int a = ready[(rng >> 16) % uint32_t(n)];
        const Op op = prog[a][pc[a]++];
        count[op.bar] += op.threads;
        ASSERT_LE(count[op.bar], need[op.bar]) << "barrier " << op.bar << " over-full, " << nsteps << " steps";
        if (op.sync) blocked[a] = true, waiting[op.bar].push_back(a);
        if (count[op.bar] == need[op.bar]) {
          count[op.bar] = 0;
          for (int x : waiting[op.bar]) blocked[x] = false;
          waiting[op.bar].clear();
        }
      }
      for (int a = 0; a < 3; ++a)
        ASSERT_EQ(pc[a], prog[a].size()) << "agent " << a << " hangs, " << nsteps << " steps, seed " << seed;
    }
  }
}

}  // namespace
