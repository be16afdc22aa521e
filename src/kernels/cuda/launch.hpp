// Host-side helpers shared by the kernel launchers: per-device kernel setup and the Hopper-kernel check. Both are
// per (kernel, device) because cudaFuncSetAttribute acts on the current device only and one process may drive
// GPUs of different kinds.
#pragma once
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <utility>

#include "core/cuda_check.hpp"
#include "core/cuda_launch.hpp"

namespace flashkit::cuda {

using flashkit::launch_ex;

// compute(device) for the current device, evaluated once per (kernel, device) and remembered; every call site has
// its own memo (each lambda is its own Compute type). A compute that throws is retried at the next call.
template <typename Value, typename Compute>
Value once_per_kernel_device(const void* kern, Compute compute) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, Value> memo;
  int dev = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mu);
  auto it = memo.find({kern, dev});
  if (it != memo.end()) return it->second;
  const Value v = compute(dev);
  memo.emplace(std::pair<const void*, int>{kern, dev}, v);
  return v;
}

// Raises `kern`'s dynamic shared-memory limit to `bytes` on the current device, once per device.
template <typename Kern>
void set_max_dynamic_smem(Kern kern, size_t bytes, const char* what) {
  const void* k = reinterpret_cast<const void*>(kern);
  once_per_kernel_device<bool>(k, [&](int) {
    check_cuda(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)), what);
    return true;
  });
}

// Whether `kern` was built with exactly `regs` registers per thread (read once per device). The warp-specialized
// kernels' setmaxnreg.inc waits for registers the launch must have allocated: with any other count (a toolchain
// that did not pin it at the launch bound) it could wait forever, so their launchers decline then.
template <typename Kern>
bool kernel_has_regs(Kern kern, int regs) {
  const void* k = reinterpret_cast<const void*>(kern);
  return once_per_kernel_device<bool>(k, [&](int) {
    cudaFuncAttributes attr{};
    const bool ok = cudaFuncGetAttributes(&attr, k) == cudaSuccess && attr.numRegs == regs;
    if (!ok) cudaGetLastError();
    return ok;
  });
}

// Whether the Hopper (wgmma) kernel `kern` runs as such on the current device: the build compiled sm_90a
// (FLASHKIT_HAVE_SM90A, from CMAKE_CUDA_ARCHITECTURES; a plain sm_90 build gets only trapping stubs), the device
// is compute capability 9.x, and the loaded code is sm_90 machine code (not a JIT of older PTX, as on a newer
// GPU that cannot run sm_90a code). Cached per (kernel, device).
template <typename Kern>
bool sm90_kernel_usable(Kern kern) {
#ifndef FLASHKIT_HAVE_SM90A
  (void)kern;
  return false;
#else
  const void* k = reinterpret_cast<const void*>(kern);
  return once_per_kernel_device<bool>(k, [&](int dev) {
    int major = 0;
    cudaFuncAttributes attr{};
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                    major == 9 && cudaFuncGetAttributes(&attr, k) == cudaSuccess && attr.binaryVersion == 90 &&
                    attr.ptxVersion >= 90;
    if (!ok) cudaGetLastError();  // a failed query means "not usable", not a sticky error
    return ok;
  });
#endif
}

}  // namespace flashkit::cuda
