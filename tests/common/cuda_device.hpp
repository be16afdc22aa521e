// Whether the CUDA tests have a device to run on (they skip without one: CI has none). CUDA test files only.
#pragma once
#include <cuda_runtime.h>

namespace fk_test {

inline bool has_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error for the next call
    return false;
  }
  return n > 0;
}

}  // namespace fk_test
