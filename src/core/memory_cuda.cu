// CUDA side of flashkit/memory.hpp; every call is checked.
#include <cuda_runtime.h>

#include <string>

#include "core/cuda_check.hpp"
#include "flashkit/error.hpp"

namespace flashkit::detail {


void* cuda_alloc(size_t bytes, int device_index) {
  check_cuda(cudaSetDevice(device_index), "device_alloc: cudaSetDevice(" + std::to_string(device_index) + ")");
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, bytes ? bytes : 1), "device_alloc: cudaMalloc(" + std::to_string(bytes) + " bytes)");
  return p;
}
void cuda_free(void* p) { check_cuda(cudaFree(p), "device_free: cudaFree"); }
void cuda_copy(void* dst, bool dst_device, const void* src, bool src_device, size_t bytes) {
  const cudaMemcpyKind kind = dst_device ? (src_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                         : cudaMemcpyDeviceToHost;
  check_cuda(cudaMemcpy(dst, src, bytes, kind), "device_copy: cudaMemcpy");
}
void cuda_memset(void* p, int value, size_t bytes) { check_cuda(cudaMemset(p, value, bytes), "device_memset: cudaMemset"); }
void cuda_synchronize() { check_cuda(cudaDeviceSynchronize(), "device_synchronize"); }

}  // namespace flashkit::detail
