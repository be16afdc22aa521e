#include "cpu_wait.hpp"

#include <unistd.h>

#include <cstdlib>

#include "flashkit/runtime.hpp"

namespace flashkit::cli {

void apply_cpu_wait_policy(const Tuning& t, char** argv) {
  const char* policy = omp_wait_policy_env(t);
  if (!policy || setenv("OMP_WAIT_POLICY", policy, 1) != 0) return;
  execv("/proc/self/exe", argv);  // returns only on failure: keep going with the default policy
}

}  // namespace flashkit::cli
