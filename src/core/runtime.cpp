#include "flashkit/runtime.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/limits.hpp"
#include "core/tuning.hpp"
#include "flashkit/error.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

#ifndef FLASHKIT_VERSION
#define FLASHKIT_VERSION "0.1.0"
#endif

namespace flashkit {

namespace {
int default_threads() {
#ifdef _OPENMP
  const int n = default_tuning().num_threads;  // FLASHKIT_NUM_THREADS, read at the boundary
  return std::min(max_threads(), n > 0 ? n : omp_get_max_threads());
#else
  return 1;
#endif
}

std::atomic<int> g_threads{0};
thread_local int t_threads = 0;  // ScopedNumThreads' override for this thread (0: none)
}  // namespace

int num_threads() {
  if (t_threads > 0) return t_threads;
  int n = g_threads.load();
  if (n == 0) {
    n = default_threads();
    g_threads.store(n);
  }
  return n;
}

int max_threads() {
  static const int m = [] {
    const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
    return std::min(limits::kMaxThreads, limits::kThreadsPerHardwareThread * hw);
  }();
  return m;
}

int check_threads(int64_t n, const std::string& name, bool allow_zero) {
  if ((n == 0 && allow_zero) || (n >= 1 && n <= max_threads())) return int(n);
  fail(Status::invalid_argument,
       name + ": expected " + (allow_zero ? "0 (the default) or " : "") + "1.." + std::to_string(max_threads()) +
           " threads (at most " + std::to_string(limits::kThreadsPerHardwareThread) + " x this machine's " +
           std::to_string(std::max(1u, std::thread::hardware_concurrency())) + " hardware threads, and " +
           std::to_string(limits::kMaxThreads) + "), got " + std::to_string(n));
}

void set_num_threads(int n) { g_threads.store(check_threads(n, "num_threads", false)); }

ScopedNumThreads::ScopedNumThreads(int n) : prev_(t_threads) {
  check_threads(n, "threads");
  if (n > 0) t_threads = n;
}
ScopedNumThreads::~ScopedNumThreads() { t_threads = prev_; }

const char* omp_wait_policy_env(const Tuning& t) {
  if (t.omp_wait_set || t.cpu_wait != CpuWait::passive) return nullptr;
  return "passive";
}

namespace {
// The widest level this CPU supports (0 scalar, 1 avx2, 2 avx512), detected once.
int detected_isa_level() {
  static const int level = [] {
    int l = 0;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) l = 1;
    if (l == 1 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
      l = 2;
#endif
    return l;
  }();
  return level;
}
}  // namespace

std::string cpu_isa(CpuIsaCap cap) {
  const int level = std::min(detected_isa_level(), int(cap));
  return std::string(level == 2 ? "avx512" : level == 1 ? "avx2" : "scalar");
}

std::string cpu_isa() { return cpu_isa(default_tuning().cpu_isa); }

int64_t physical_memory_bytes() {
  // Read once: the machine's RAM does not change while the process runs, and sysconf(_SC_PHYS_PAGES) is a sysinfo
  // syscall -- ~11% of a tiny CPU attention call's host time when every call's workspace check asked for it
  // (docs/worklog/attention-cuda.md, v20).
  static const int64_t bytes = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return (pages > 0 && page > 0) ? int64_t(pages) * page : int64_t(8) << 30;
  }();
  return bytes;
}

int64_t max_workspace_bytes(const Tuning& t) {
  return t.max_workspace_bytes > 0 ? t.max_workspace_bytes : physical_memory_bytes() / 10 * 8;
}
int64_t max_workspace_bytes() { return max_workspace_bytes(default_tuning()); }

const char* version() { return FLASHKIT_VERSION; }

#ifndef FLASHKIT_WITH_CUDA
int cuda_device_count() { return 0; }
#endif

std::string build_info() {
  std::string s = std::string("flashkit ") + version() + " (";
#if defined(__clang__)
  s += "clang " __clang_version__;
#elif defined(__GNUC__)
  s += "gcc " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__);
#endif
  s += ", cpu isa " + cpu_isa() + ", threads " + std::to_string(num_threads());
#ifdef FLASHKIT_WITH_CUDA
  s += ", cuda devices " + std::to_string(cuda_device_count());
#else
  s += ", built without CUDA";
#endif
  return s + ")";
}

}  // namespace flashkit
