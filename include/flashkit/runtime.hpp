// Process-wide runtime settings: threads, CPU features, memory limits, build info.
#pragma once
#include <cstdint>
#include <string>

#include "flashkit/tuning.hpp"

namespace flashkit {

// Threads used by CPU kernels (default: the default Tuning's num_threads, i.e. FLASHKIT_NUM_THREADS, else OpenMP's
// default). set_num_threads() is process-wide; a ScopedNumThreads overrides it for the calling thread only, until it
// is destroyed (so two callers, e.g. two engine backends on two threads, can use different counts without racing on
// the global).
int num_threads();
void set_num_threads(int n);  // n in 1..max_threads()
// The most threads any flashkit call accepts: 4 x the machine's hardware threads, at most 1024.
int max_threads();
// Checks a requested thread count: 1..max_threads(), or 0 ("the default") when allow_zero. Returns it; otherwise
// throws invalid_argument naming `name` and the accepted range. Every front end uses it.
int check_threads(int64_t n, const std::string& name, bool allow_zero = true);
class ScopedNumThreads {
 public:
  explicit ScopedNumThreads(int n);  // n in 1..max_threads() (invalid_argument otherwise); 0 keeps the count
  ~ScopedNumThreads();
  ScopedNumThreads(const ScopedNumThreads&) = delete;
  ScopedNumThreads& operator=(const ScopedNumThreads&) = delete;

 private:
  int prev_;
};

// The OMP_WAIT_POLICY value the environment must hold when the OpenMP runtime starts for t.cpu_wait to take effect,
// or nullptr when nothing is to change (t.omp_wait_set: the user's OMP_WAIT_POLICY / GOMP_SPINCOUNT win; active is
// OpenMP's own default). libgomp reads its environment once, when it is loaded, so a library cannot change the policy
// later: a front end sets the variable and re-executes itself (the CLI) or sets it before loading flashkit.
const char* omp_wait_policy_env(const Tuning& t);

// The SIMD level CPU kernels dispatch to: "avx512", "avx2" or "scalar": the widest this CPU supports, capped by
// the process default Tuning's cpu_isa (FLASHKIT_CPU_ISA=scalar|avx2|avx512 forces a lower level), or by `cap`.
std::string cpu_isa();
std::string cpu_isa(CpuIsaCap cap);

// Upper bound on workspace one call may allocate: Tuning::max_workspace_bytes (FLASHKIT_MAX_WORKSPACE_BYTES) if
// set, else 80% of the machine's physical memory. Larger requests fail with Status::out_of_memory before allocating.
int64_t max_workspace_bytes();
int64_t max_workspace_bytes(const Tuning& t);
int64_t physical_memory_bytes();

int cuda_device_count();  // 0 without CUDA support or device
// The CUDA stream the calling thread's flashkit launches use (nullptr: legacy default stream).
// Status::unsupported in a build without CUDA.
void set_cuda_stream(void* stream);
void* cuda_stream();
std::string build_info();  // version, compiler, ISA, CUDA
const char* version();

}  // namespace flashkit
