// Host side of flashkit/memory.hpp; CUDA calls go to memory_cuda.cu (or fail in a CPU-only build).
#include "flashkit/memory.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "flashkit/error.hpp"

namespace flashkit {

namespace detail {
void* cuda_alloc(size_t bytes, int device_index);
void cuda_free(void* p);
void cuda_copy(void* dst, bool dst_device, const void* src, bool src_device, size_t bytes);
void cuda_memset(void* p, int value, size_t bytes);
void cuda_synchronize();
}  // namespace detail

#ifndef FLASHKIT_WITH_CUDA
namespace detail {
[[noreturn]] static void no_cuda() {
  fail(Status::unsupported, "device: this flashkit build has no CUDA support (configure with -DFLASHKIT_CUDA=ON)");
}
void* cuda_alloc(size_t, int) { no_cuda(); }
void cuda_free(void*) { no_cuda(); }
void cuda_copy(void*, bool, const void*, bool, size_t) { no_cuda(); }
void cuda_memset(void*, int, size_t) { no_cuda(); }
void cuda_synchronize() { no_cuda(); }
}  // namespace detail
#endif

void* device_alloc(Device device, size_t bytes, int device_index) {
  if (device == Device::cuda) return detail::cuda_alloc(bytes, device_index);
  const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) fail(Status::out_of_memory, "device_alloc: " + std::to_string(bytes) + " bytes of host memory are not available");
  return p;
}

void device_free(Device device, void* p) {
  if (!p) return;
  if (device == Device::cuda) detail::cuda_free(p);
  else std::free(p);
}

void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (dst_device == Device::cpu && src_device == Device::cpu) std::memcpy(dst, src, bytes);
  else detail::cuda_copy(dst, dst_device == Device::cuda, src, src_device == Device::cuda, bytes);
}

void device_memset(Device device, void* p, int value, size_t bytes) {
  if (device == Device::cuda) detail::cuda_memset(p, value, bytes);
  else std::memset(p, value, bytes);
}

void device_synchronize(Device device) {
  if (device == Device::cuda) detail::cuda_synchronize();
}

}  // namespace flashkit
