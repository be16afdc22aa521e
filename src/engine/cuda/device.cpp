// Launch settings shared by the engine kernels: the thread's launch Tuning (installed by the backend), the
// multiprocessor count and whether programmatic dependent launch (PDL, sm_90+) is used.
#include <cuda_runtime.h>

#include "core/cuda_device.hpp"
#include "engine/cuda/kernels.hpp"

namespace flashkit::engine::cuda {

namespace {
thread_local const Tuning* t_tuning = nullptr;  // the innermost ScopedLaunchTuning's (nullptr: the process default)

DeviceInfo info() {
  try {
    return cuda_device_info();
  } catch (...) {  // no device: launches fail on their own, with their own message
    DeviceInfo d;
    d.sms = 1;
    return d;
  }
}
}  // namespace

ScopedLaunchTuning::ScopedLaunchTuning(const Tuning& t) : prev_(t_tuning) { t_tuning = &t; }
ScopedLaunchTuning::~ScopedLaunchTuning() { t_tuning = prev_; }

const Tuning& launch_tuning() {
  if (t_tuning) return *t_tuning;
  thread_local const Tuning process_default = default_tuning();
  return process_default;
}

bool pdl_enabled() { return info().cc_major >= 9 && launch_tuning().cuda_pdl; }
bool gemv_prefetch_enabled() { return launch_tuning().gemv_prefetch; }
bool gemv_streaming_loads() { return launch_tuning().gemv_streaming_loads; }
int sm_count() { return info().sms; }

}  // namespace flashkit::engine::cuda
