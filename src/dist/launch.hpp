// One process per rank: the launcher re-executes the current binary for ranks 1..n-1 (this process is rank 0),
// torchrun-style, with the rank in the environment:
//   RANK, WORLD_SIZE, LOCAL_RANK (single host: = RANK) and FLASHKIT_RENDEZVOUS (a file path through which rank 0
//   hands the NCCL unique id to the others: exchange_nccl_id).
// A process started that way (by flashkit or by torchrun) reads its place with rank_env(). The launcher forwards
// SIGINT / SIGTERM to its ranks, and each child dies with its parent (PR_SET_PDEATHSIG), so no rank is orphaned;
// when a child fails, a watcher prints which one and with what status and ends the others.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace flashkit::dist {

struct RankEnv {
  bool launched = false;  // WORLD_SIZE was set: this process is one rank of a launched job
  int rank = 0, world_size = 1, local_rank = 0;
  std::string rendezvous;  // FLASHKIT_RENDEZVOUS (empty when unset)
};
// Reads RANK / WORLD_SIZE / LOCAL_RANK / FLASHKIT_RENDEZVOUS through core/env.hpp. Throws naming the variable when
// one is malformed or inconsistent (RANK >= WORLD_SIZE, ...).
RankEnv rank_env();

struct RankExit {
  int rank = 0;
  int status = 0;  // exit status, or 128 + signal number
};

class RankLauncher {
 public:
  // Spawns ranks 1..world_size-1 running `exe` with `args` (args[0] is argv[0]) and the rank variables set;
  // world_size must be >= 1 (1 spawns nothing). rendezvous: the value of FLASHKIT_RENDEZVOUS for every rank.
  // on_failure runs on the watcher thread when a child exits with a non-zero status while the others may still
  // run (the others have been sent SIGTERM already); the default prints describe_failures() on stderr and ends
  // this process with status 1, since rank 0 may be blocked in a collective waiting for the failed rank.
  using FailureHandler = std::function<void(const RankExit&)>;
  RankLauncher(const std::string& exe, const std::vector<std::string>& args, int world_size,
               const std::string& rendezvous, FailureHandler on_failure = {});
  // Ends and reaps every child still running.
  ~RankLauncher();
  RankLauncher(const RankLauncher&) = delete;
  RankLauncher& operator=(const RankLauncher&) = delete;

  // Waits for every child; returns their exits in rank order.
  std::vector<RankExit> wait();
  // Sends `sig` to every child still running.
  void signal_all(int sig);
  int children() const { return int(pids_.size()); }

 private:
  // Reaps child i if it has exited (blocking when `block`); returns whether it is reaped. Holds mu_.
  bool reap(std::size_t i, bool block);
  void watch();

  std::vector<pid_t> pids_;  // pids_[i] is rank i + 1
  std::vector<bool> reaped_;
  std::vector<int> exit_status_;
  std::mutex mu_;
  FailureHandler on_failure_;
  std::atomic<bool> stop_{false};
  std::thread watcher_;
};

// The first failed exit in `exits` as a one-line message ("rank 2 exited with status 1"), or "" when all are 0.
std::string describe_failures(const std::vector<RankExit>& exits);

// This process's executable (/proc/self/exe) and its arguments (/proc/self/cmdline), for re-execution.
std::string self_exe();
std::vector<std::string> self_args();

}  // namespace flashkit::dist
