// How much host memory an allocation may take now: refusing a model that cannot fit up front gives a clear
// message instead of the OOM killer (or a swap storm) halfway through loading.
#pragma once
#include <cstdint>

namespace flashkit {

// Bytes of memory available to this process: the kernel's MemAvailable, capped by the cgroup's (v2 or v1) limit
// minus its usage. UINT64_MAX when nothing can be read (not Linux): then nothing is refused.
uint64_t available_host_memory();

}  // namespace flashkit
