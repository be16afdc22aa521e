// Which CUDA selective-scan kernel runs (src/kernels/cuda/ssm/scan.cu): a pure function of the problem, unit-tested
// in the CPU build (tests/ssm/test_ssm_scan.cpp). `generation` 0 is production (the newest kernel that fits);
// generation 1 keeps v1 reachable so the tests and the benchmark can compare both on the same inputs.
#pragma once
#include <cstdint>

namespace flashkit::kernels {

enum class ScanKernel : int {
  v1_n16,  // v1: 4 threads per channel x 4 states, one basic block per time step (d_state <= 16)
  v1_n64,  // v1: 4 threads per channel x 16 states (d_state <= 64)
  v2_n16,  // v2: as v1_n16, per-step channel terms hoisted and the recurrence branch-free (d_state <= 16)
  step_n16,  // decode step: 16 threads per channel (d_state <= 16)
  step_n64,  // decode step: 16 threads per channel x 4 states (d_state <= 64)
};

// d_state <= 64 is validated before (kCudaMaxState); `step`: the one-token decode kernel.
inline ScanKernel choose_scan_kernel(int64_t d_state, bool step, int generation = 0) {
  if (step) return d_state <= 16 ? ScanKernel::step_n16 : ScanKernel::step_n64;
  if (d_state > 16) return ScanKernel::v1_n64;
  return generation == 1 ? ScanKernel::v1_n16 : ScanKernel::v2_n16;
}

inline const char* scan_kernel_name(ScanKernel k) {
  switch (k) {
    case ScanKernel::v1_n16: return "cuda.scan.n16.split4";
    case ScanKernel::v1_n64: return "cuda.scan.n64.split4";
    case ScanKernel::v2_n16: return "cuda.scan.v2.n16.split4";
    case ScanKernel::step_n16: return "cuda.scan_step.n16.split16";
    case ScanKernel::step_n64: return "cuda.scan_step.n64.split16";
  }
  return "?";
}

}  // namespace flashkit::kernels
