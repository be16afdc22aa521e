#include "dist/memory.hpp"

#include <cstring>
#include <string>

#include "flashkit/error.hpp"
#ifdef FLASHKIT_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashkit::dist {

#ifdef FLASHKIT_WITH_CUDA
namespace {
// A CUDA build on a machine without a usable GPU (CI): every buffer is host memory and there is no stream to wait on.
bool cuda_usable() {
  static const bool usable = [] {
    int n = 0;
    const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    cudaGetLastError();
    return ok;
  }();
  return usable;
}
}  // namespace

bool is_device_pointer(const void* p) {
  if (p == nullptr || !cuda_usable()) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // a plain host pointer on old drivers: clear the sticky-free error
    return false;
  }
  return attr.type == cudaMemoryTypeDevice;
}

void copy_bytes(void* dst, const void* src, std::size_t bytes, void* stream) {
  if (bytes == 0 || dst == src) return;
  if (!is_device_pointer(dst) && !is_device_pointer(src)) {
    std::memmove(dst, src, bytes);
    return;
  }
  auto s = static_cast<cudaStream_t>(stream);
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  if (e != cudaSuccess)
    fail(Status::device_error, std::string("dist: copying a collective's buffer failed: ") + cudaGetErrorString(e));
}

void wait_stream(void* stream) {
  if (!cuda_usable()) return;
  const cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  if (e != cudaSuccess) fail(Status::device_error, std::string("dist: waiting for a collective failed: ") + cudaGetErrorString(e));
}
int current_device() {
  int d = 0;
  if (cuda_usable()) cudaGetDevice(&d);
  return d;
}
void set_device(int device) {
  if (cuda_usable()) cudaSetDevice(device);
}
void* device_alloc(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess)
    fail(Status::device_error, "dist: cudaMalloc(" + std::to_string(bytes) + " bytes) failed: " + cudaGetErrorString(e));
  return p;
}
void device_free(void* p) {
  if (p) cudaFree(p);
}
void device_synchronize() {
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) fail(Status::device_error, std::string("dist: cudaDeviceSynchronize failed: ") + cudaGetErrorString(e));
}
#else
void* device_alloc(std::size_t) { fail(Status::unsupported, "dist: device memory needs a CUDA build"); }
void device_free(void*) {}
void device_synchronize() {}
bool is_device_pointer(const void*) { return false; }
void wait_stream(void*) {}
int current_device() { return 0; }
void set_device(int) {}

void copy_bytes(void* dst, const void* src, std::size_t bytes, void*) {
  if (bytes == 0 || dst == src) return;
  std::memmove(dst, src, bytes);
}
#endif

}  // namespace flashkit::dist
