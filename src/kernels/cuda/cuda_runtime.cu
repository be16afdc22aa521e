// CUDA runtime glue: device discovery, checked copies, and the CUDA entry points of ops dispatch.
#include <cuda_runtime.h>

#include <string>

#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "ops/cuda_dispatch.hpp"

namespace flashkit {

namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(Status::device_error, std::string(what) + ": " + cudaGetErrorString(e));
}
}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

void cuda_copy_to_host(void* dst, const void* src, size_t bytes, int device_index) {
  check(cudaSetDevice(device_index), "cudaSetDevice");
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy(cu_seqlens)");
}

void cuda_attention_forward(const kernels::AttentionFwdArgs&, AttentionImpl, bool, OpCost*) {
  fail(Status::unsupported, "CUDA attention kernels are not built yet in this version");
}
void cuda_attention_backward(const kernels::AttentionBwdArgs&, AttentionImpl, bool, OpCost*) {
  fail(Status::unsupported, "CUDA attention kernels are not built yet in this version");
}

}  // namespace flashkit
