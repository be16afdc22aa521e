// The CPU selective scan and causal conv1d compiled for one instruction set (scalar); see ssm_cpu.inc.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include <omp.h>

#include "kernels/ssm_args.hpp"

namespace flashkit::kernels::scalar {
constexpr int64_t kLanes = 8;
#include "kernels/cpu/ssm_cpu.inc"
}  // namespace flashkit::kernels::scalar
