// The one CUDA runtime error check of the library: a failed call becomes flashkit::Error naming the call, with
// Status::out_of_memory for allocation failures and Status::device_error otherwise. (Include only from CUDA
// translation units or files that include cuda_runtime.h.)
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "flashkit/error.hpp"

namespace flashkit {

[[noreturn]] inline void cuda_fail(cudaError_t e, const std::string& what) {
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  fail(e == cudaErrorMemoryAllocation ? Status::out_of_memory : Status::device_error,
       what + ": " + cudaGetErrorString(e));
}
inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) cuda_fail(e, what);
}
inline void check_cuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) cuda_fail(e, what);
}

}  // namespace flashkit
