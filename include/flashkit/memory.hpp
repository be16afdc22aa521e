// Memory on any device, for callers without their own allocator (the CLI, C users, tests).
// Library kernels never allocate user-visible tensors; these helpers only serve front ends.
#pragma once
#include <cstddef>

#include "flashkit/tensor.hpp"

namespace flashkit {

// 64-byte aligned on the CPU; cudaMalloc on CUDA. Throws Status::out_of_memory on failure and
// Status::unsupported for CUDA in a build without it.
void* device_alloc(Device device, size_t bytes, int device_index = 0);
void device_free(Device device, void* p);
void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
void device_memset(Device device, void* p, int value, size_t bytes);
void device_synchronize(Device device);

}  // namespace flashkit
