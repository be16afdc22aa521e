// Launch settings shared by the engine kernels: multiprocessor count and whether programmatic dependent launch
// (PDL, sm_90+) is used. Cached per device.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/env.hpp"
#include "engine/cuda/kernels.hpp"

namespace flashkit::engine::cuda {

namespace {
struct DevInfo {
  int sms = 0;
  bool pdl = false;
};
const DevInfo& info() {
  static std::mutex mu;
  static std::vector<DevInfo> infos;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    dev = 0;
  }
  std::lock_guard<std::mutex> lock(mu);
  if (int(infos.size()) <= dev) infos.resize(dev + 1);
  DevInfo& d = infos[dev];
  if (d.sms == 0) {
    int sms = 0, major = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      cudaGetLastError();
      sms = 1, major = 0;
    }
    d.pdl = major >= 9 && env::flag("FLASHKIT_CUDA_PDL", true);
    d.sms = sms > 0 ? sms : 1;
  }
  return d;
}
}  // namespace

bool pdl_enabled() { return info().pdl; }

// Off by default: measured on the H200, the bulk L2 prefetch of each block's weight stripe cost 5-8% of the decode
// step (it competes with the stripe's own loads); FLASHKIT_CUDA_PREFETCH=1 turns it on for A/B runs.
bool gemv_prefetch_enabled() {
  static const bool v = env::flag("FLASHKIT_CUDA_PREFETCH", false);
  return v;
}
bool gemv_streaming_loads() {
  static const bool v = env::flag("FLASHKIT_CUDA_LDCS", true);
  return v;
}
int sm_count() { return info().sms; }
// Whether the device can run clusters is the launcher's question (it asks per kernel: the binary it runs must have
// been built for sm_90); this is only the A/B switch.
bool attn_cluster_enabled() {
  static const bool v = env::flag("FLASHKIT_CUDA_ATTN_CLUSTER", true);
  return v;
}

}  // namespace flashkit::engine::cuda
