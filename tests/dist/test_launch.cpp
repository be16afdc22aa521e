// The launcher: children get their rank variables, exit codes are collected, a failed rank is reported by
// number, no child outlives the launcher; rank_env() refuses malformed variables by name.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "dist/launch.hpp"
#include "flashkit/error.hpp"

namespace fd = flashkit::dist;
namespace fs = std::filesystem;

namespace {
fs::path fresh_dir(const char* name) {
  auto d = fs::temp_directory_path() / (std::string("flashkit_launch_") + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
}  // namespace

TEST(DistLaunch, ChildrenGetTheirRankVariablesAndExitCodesAreCollected) {
  const auto dir = fresh_dir("ok");
  fd::RankLauncher launcher(FLASHKIT_RANK_PROBE, {"probe", dir.string(), "0", "0", "0"}, 3, "/tmp/rdv-file");
  EXPECT_EQ(launcher.children(), 2);
  const auto exits = launcher.wait();
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_EQ(fd::describe_failures(exits), "");
  for (int r = 1; r < 3; ++r) {
    std::ifstream in(dir / ("rank" + std::to_string(r) + ".txt"));
    int rank = -1, world = -1, local = -1;
    std::string rdv;
    in >> rank >> world >> local >> rdv;
    EXPECT_EQ(rank, r);
    EXPECT_EQ(world, 3);
    EXPECT_EQ(local, r);
    EXPECT_EQ(rdv, "/tmp/rdv-file");
  }
  EXPECT_FALSE(fs::exists(dir / "rank0.txt"));  // this process is rank 0
  fs::remove_all(dir);
}

TEST(DistLaunch, AFailedRankIsNamedAndTheOthersAreStopped) {
  const auto dir = fresh_dir("fail");
  fd::RankLauncher launcher(FLASHKIT_RANK_PROBE, {"probe", dir.string(), "0", "sleep", "3"}, 3, "",
                            [](const fd::RankExit&) {});
  const auto t0 = std::chrono::steady_clock::now();
  const auto exits = launcher.wait();  // rank 1 sleeps 30 s unless rank 2's failure stops it
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(exits[1].status, 3);
  EXPECT_EQ(exits[0].status, 128 + SIGTERM);
  EXPECT_EQ(fd::describe_failures({exits[1]}), "rank 2 exited with status 3");
  fs::remove_all(dir);
}

// Rank 0 busy (as if blocked in a collective): the watcher reports the failed rank and stops the others.
TEST(DistLaunch, TheWatcherReportsAFailureWhileRankZeroIsBusy) {
  const auto dir = fresh_dir("watch");
  std::atomic<int> failed_rank{-1}, failed_status{-1};
  fd::RankLauncher launcher(FLASHKIT_RANK_PROBE, {"probe", dir.string(), "0", "sleep", "5"}, 3, "",
                            [&](const fd::RankExit& e) {
                              failed_status = e.status;
                              failed_rank = e.rank;
                            });
  const auto t0 = std::chrono::steady_clock::now();
  while (failed_rank.load() < 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(failed_rank.load(), 2);
  EXPECT_EQ(failed_status.load(), 5);
  const auto exits = launcher.wait();
  EXPECT_EQ(exits[0].status, 128 + SIGTERM);  // the sleeping rank was stopped
  fs::remove_all(dir);
}

TEST(DistLaunch, DestroyingTheLauncherEndsItsChildren) {
  const auto dir = fresh_dir("dtor");
  const auto t0 = std::chrono::steady_clock::now();
  { fd::RankLauncher launcher(FLASHKIT_RANK_PROBE, {"probe", dir.string(), "0", "sleep"}, 2, "", [](const fd::RankExit&) {}); }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  fs::remove_all(dir);
}

TEST(DistLaunch, RankEnvironmentIsCheckedByName) {
  unsetenv("WORLD_SIZE");
  EXPECT_FALSE(fd::rank_env().launched);
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", "1", 1);
  unsetenv("LOCAL_RANK");
  auto e = fd::rank_env();
  EXPECT_TRUE(e.launched);
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.local_rank, 1);
  setenv("RANK", "2", 1);
  try {
    fd::rank_env();
    ADD_FAILURE() << "RANK=2 of 2 accepted";
  } catch (const flashkit::Error& err) {
    EXPECT_NE(std::string(err.what()).find("RANK=2"), std::string::npos) << err.what();
  }
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
}
