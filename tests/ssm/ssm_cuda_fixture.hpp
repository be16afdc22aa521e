// Device buffers for the CUDA SSM tests (test_ssm_cuda.cpp, test_ssm_cuda_backward.cpp): a device copy of a host
// vector and a view of it in a host view's shape.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "ssm_fixture.hpp"

namespace ssm_test {

using flashkit::Device;

inline bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// A device copy of a host vector, freed at scope end.
struct Dev {
  float* p = nullptr;
  size_t n = 0;
  explicit Dev(const std::vector<float>& h) : n(h.size()) {
    EXPECT_EQ(cudaMalloc(&p, n * 4 + 4), cudaSuccess);
    cudaMemcpy(p, h.data(), n * 4, cudaMemcpyHostToDevice);
  }
  ~Dev() { cudaFree(p); }
  std::vector<float> get() const {
    std::vector<float> h(n);
    cudaMemcpy(h.data(), p, n * 4, cudaMemcpyDeviceToHost);
    return h;
  }
};

inline TensorView on(const Dev& d, const TensorView& like) {
  TensorView t = like;
  t.data = d.p;
  t.device = Device::cuda;
  return t;
}

}  // namespace ssm_test
