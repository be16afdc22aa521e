// What kernel choices need to know about a CUDA device, as a plain value (no CUDA header: the pure choice
// functions and their tests use it in the CPU-only build), and the queries that fill it (cuda_device.cpp, CUDA
// builds only), shared by the attention dispatch and the engine.
#pragma once
#include <array>
#include <cstddef>
#include <string>

namespace flashkit {

struct DeviceInfo {
  int sms = 0;                   // multiprocessors
  int smem_per_block_optin = 0;  // largest dynamic shared memory one CTA may opt into (bytes)
  int smem_per_sm = 0;           // shared memory per multiprocessor (bytes)
  int cc_major = 0, cc_minor = 0;
  // The build carries sm_90a code (wgmma/TMA kernels) and this is a compute capability 9.x device. A launcher may
  // still decline (e.g. a driver that JIT-compiles PTX instead of loading the sm_90a binary); the dispatch then
  // asks the choice function again with this false.
  bool sm90a = false;
};

// How many thread-block clusters of c CTAs of one kernel can be resident at once, for c = 0..16 (entries 0 and 1
// unused); all 0 where the kernel cannot run as clusters (before sm_90, or code built for an older architecture).
using ClusterResidency = std::array<int, 17>;

#ifdef FLASHKIT_WITH_CUDA
// The current device's info, queried once per device. Throws flashkit::Error(device_error) when the runtime fails.
DeviceInfo cuda_device_info();
int cuda_current_device();
// Makes device `index` current for this thread after checking it exists; returns its name as "cuda:N NAME". Throws
// flashkit::Error: unsupported when no CUDA device is visible, invalid_argument for an index past the last one.
// The engine's and the trainer's backends both open their device with it.
std::string cuda_use_device(int index);
// Cluster residency of `kernel` (a __global__ function's address) launched with `threads` threads and `smem` bytes
// of dynamic shared memory (0: none; else the kernel's limit is raised to it first), for cluster sizes 2..16 (above
// 8 only when the non-portable size is allowed). The caller caches it per (kernel, device). Enqueues nothing and
// relaxes the thread's graph-capture mode around its queries, so it may be called first inside a capture.
ClusterResidency query_cluster_residency(const void* kernel, int threads, size_t smem);
#endif

}  // namespace flashkit
