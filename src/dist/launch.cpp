#include "dist/launch.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/env.hpp"
#include "flashkit/error.hpp"

extern char** environ;

namespace flashkit::dist {
namespace {

// A decimal integer in [lo, hi] from variable `name`; `dflt` when unset; throws naming the variable otherwise.
int read_int(const char* name, int dflt, int lo, int hi) {
  const auto v = env::get(name);
  if (!v) return dflt;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v->c_str(), &end, 10);
  if (errno != 0 || end == v->c_str() || *end != 0 || x < lo || x > hi)
    fail(Status::invalid_argument, std::string(name) + "=" + *v + ": expected an integer in [" +
                                       std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return int(x);
}

// The launcher's children, for the signal handler (one launcher per process at a time).
std::atomic<RankLauncher*> g_active{nullptr};
struct sigaction g_old_int, g_old_term;

void forward_signal(int sig) {
  if (RankLauncher* l = g_active.load()) l->signal_all(sig);
  // Then behave as before for this process (default: die), so rank 0 stops too.
  struct sigaction& old = sig == SIGINT ? g_old_int : g_old_term;
  sigaction(sig, &old, nullptr);
  raise(sig);
}

}  // namespace

RankEnv rank_env() {
  RankEnv e;
  const auto ws = env::get("WORLD_SIZE");
  if (!ws) return e;
  e.launched = true;
  e.world_size = read_int("WORLD_SIZE", 1, 1, 4096);
  e.rank = read_int("RANK", 0, 0, e.world_size - 1);
  e.local_rank = read_int("LOCAL_RANK", e.rank, 0, e.world_size - 1);
  e.rendezvous = env::get("FLASHKIT_RENDEZVOUS").value_or("");
  return e;
}

RankLauncher::RankLauncher(const std::string& exe, const std::vector<std::string>& args, int world_size,
                           const std::string& rendezvous, FailureHandler on_failure)
    : on_failure_(std::move(on_failure)) {
  if (!on_failure_)
    on_failure_ = [](const RankExit& e) {
      std::fprintf(stderr, "flashkit: %s; stopping the other ranks\n", describe_failures({e}).c_str());
      std::_Exit(1);
    };
  if (world_size < 1)
    fail(Status::invalid_argument, "launch: world size must be >= 1, got " + std::to_string(world_size));
  if (args.empty()) fail(Status::invalid_argument, "launch: args must hold argv[0]");
  // Every child's environment: this one without the rank variables, plus its own.
  std::vector<std::string> base;
  for (char** p = environ; p && *p; ++p) {
    const std::string kv = *p;
    const std::string key = kv.substr(0, kv.find('='));
    if (key != "RANK" && key != "WORLD_SIZE" && key != "LOCAL_RANK" && key != "FLASHKIT_RENDEZVOUS") base.push_back(kv);
  }
  const pid_t parent = getpid();
  for (int r = 1; r < world_size; ++r) {
    std::vector<std::string> envs = base;
    envs.push_back("RANK=" + std::to_string(r));
    envs.push_back("WORLD_SIZE=" + std::to_string(world_size));
    envs.push_back("LOCAL_RANK=" + std::to_string(r));
    envs.push_back("FLASHKIT_RENDEZVOUS=" + rendezvous);
    std::vector<char*> envp, argv;
    for (auto& s : envs) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> args_copy = args;
    for (auto& s : args_copy) argv.push_back(s.data());
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) {
      signal_all(SIGTERM);
      wait();
      fail(Status::internal, std::string("launch: fork failed: ") + std::strerror(errno));
    }
    if (pid == 0) {
      // The child dies with the launcher; if the launcher already died, stop now.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(128 + SIGTERM);
      execve(exe.c_str(), argv.data(), envp.data());
      _exit(127);  // exec failed: the launcher reports "rank r exited with status 127"
    }
    pids_.push_back(pid);
    reaped_.push_back(false);
    exit_status_.push_back(0);
  }
  RankLauncher* none = nullptr;
  if (!pids_.empty() && g_active.compare_exchange_strong(none, this)) {
    struct sigaction sa{};
    sa.sa_handler = forward_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &g_old_int);
    sigaction(SIGTERM, &sa, &g_old_term);
  }
  if (!pids_.empty()) watcher_ = std::thread([this] { watch(); });
}

void RankLauncher::watch() {
  while (!stop_.load()) {
    for (std::size_t i = 0; i < pids_.size(); ++i) {
      RankExit e;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (reaped_[i] || !reap(i, false) || exit_status_[i] == 0) continue;
        e = {int(i) + 1, exit_status_[i]};
      }
      if (stop_.load()) return;
      signal_all(SIGTERM);
      on_failure_(e);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

bool RankLauncher::reap(std::size_t i, bool block) {
  if (reaped_[i]) return true;
  int st = 0;
  pid_t got;
  do got = waitpid(pids_[i], &st, block ? 0 : WNOHANG);
  while (got < 0 && errno == EINTR);
  if (got == 0) return false;
  reaped_[i] = true;
  if (got < 0) exit_status_[i] = 1;
  else if (WIFEXITED(st)) exit_status_[i] = WEXITSTATUS(st);
  else if (WIFSIGNALED(st)) exit_status_[i] = 128 + WTERMSIG(st);
  return true;
}

RankLauncher::~RankLauncher() {
  stop_ = true;
  if (watcher_.joinable()) watcher_.join();
  signal_all(SIGTERM);
  wait();
  RankLauncher* self = this;
  if (g_active.compare_exchange_strong(self, nullptr)) {
    sigaction(SIGINT, &g_old_int, nullptr);
    sigaction(SIGTERM, &g_old_term, nullptr);
  }
}

void RankLauncher::signal_all(int sig) {
  // No lock: this is also the signal handler. A reap racing it only makes kill() hit a pid that just exited.
  for (std::size_t i = 0; i < pids_.size(); ++i)
    if (!reaped_[i]) kill(pids_[i], sig);
}

std::vector<RankExit> RankLauncher::wait() {
  // Polls rather than blocking in waitpid, so the watcher keeps its turn; the first failure stops the others
  // (the caller reports it from the returned exits).
  for (bool stopped = false;;) {
    bool all = true, failed = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (std::size_t i = 0; i < pids_.size(); ++i) {
        all = reap(i, false) && all;
        failed = failed || (reaped_[i] && exit_status_[i] != 0);
      }
    }
    if (all) break;
    if (failed && !stopped) {
      signal_all(SIGTERM);
      stopped = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<RankExit> exits;
  for (std::size_t i = 0; i < pids_.size(); ++i) exits.push_back({int(i) + 1, exit_status_[i]});
  return exits;
}

std::string describe_failures(const std::vector<RankExit>& exits) {
  for (const auto& e : exits) {
    if (e.status == 0) continue;
    if (e.status > 128) return "rank " + std::to_string(e.rank) + " was killed by signal " + std::to_string(e.status - 128);
    return "rank " + std::to_string(e.rank) + " exited with status " + std::to_string(e.status);
  }
  return "";
}

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) fail(Status::internal, "launch: cannot read /proc/self/exe: " + ec.message());
  return p.string();
}

}  // namespace flashkit::dist

namespace flashkit::dist {

std::vector<std::string> self_args() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  if (!in) fail(Status::internal, "launch: cannot read /proc/self/cmdline");
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(in, arg, '\0')) args.push_back(arg);
  return args;
}

}  // namespace flashkit::dist
