// The warp-specialized Hopper backward's d128 variant v25 (flash_bwd_sm90_ws.cuh, worklog v25): the environment
// knob that picks it, and its per-warpgroup LSE/Dsum staging (pure functions, CPU build).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "core/tuning.hpp"
#include "kernels/cuda/bwd_ws_staging.hpp"

namespace {

// FLASHKIT_SM90_BWD_WS_V: 25 by default, 22 and 25 honoured, anything else warned about once and the default kept.
TEST(CudaChoice, BackwardWsVersionFromEnvironment) {
  const char* name = "FLASHKIT_SM90_BWD_WS_V";
  const char* old = std::getenv(name);
  const std::string saved = old ? old : "";
  unsetenv(name);
  EXPECT_EQ(flashkit::Tuning{}.sm90_bwd_ws_version, 25);
  EXPECT_EQ(flashkit::tuning_from_env().sm90_bwd_ws_version, 25);
  setenv(name, "22", 1);
  EXPECT_EQ(flashkit::tuning_from_env().sm90_bwd_ws_version, 22);
  setenv(name, "25", 1);
  EXPECT_EQ(flashkit::tuning_from_env().sm90_bwd_ws_version, 25);
  setenv(name, "24", 1);
  testing::internal::CaptureStderr();
  const int first = flashkit::tuning_from_env().sm90_bwd_ws_version;
  const int second = flashkit::tuning_from_env().sm90_bwd_ws_version;
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(first, 25);
  EXPECT_EQ(second, 25);
  const std::string warning = "ignoring FLASHKIT_SM90_BWD_WS_V=24";
  const size_t at = err.find(warning);
  EXPECT_NE(at, std::string::npos) << err;
  if (at != std::string::npos) EXPECT_EQ(err.find(warning, at + 1), std::string::npos) << "warned twice: " << err;
  if (old) setenv(name, saved.c_str(), 1);
  else unsetenv(name);
}

// v25 has no barrier between the consumer warpgroups, so each stages every row of a step into its own copy: within
// each warpgroup every row exactly once (a row staged only by the other warpgroup would be read unwritten).
TEST(CudaChoice, BackwardWsLseStagingPerWarpgroup) {
  auto rows_of = [](auto bm_tag) {
    constexpr int BM = decltype(bm_tag)::value;
    for (int wg = 0; wg < 2; ++wg) {
      std::vector<int> owner(BM, -1);
      for (int tid = wg * 128; tid < wg * 128 + 128; ++tid) {
        const int r = flashkit::cuda::bwd_ws_lse_row_own<BM>(tid);
        if (r < 0) continue;
        ASSERT_LT(r, BM) << tid;
        EXPECT_EQ(owner[r], -1) << "row " << r << " staged twice in warpgroup " << wg << " (BM " << BM << ")";
        owner[r] = tid;
      }
      for (int r = 0; r < BM; ++r)
        EXPECT_GE(owner[r], 0) << "row " << r << " never staged by warpgroup " << wg << " (BM " << BM << ")";
    }
  };
  rows_of(std::integral_constant<int, 64>{});
  rows_of(std::integral_constant<int, 128>{});
}

}  // namespace
