// Builds without CUDA: the GPU fusion demos answer with the reason instead of running.
#include "gpu_demos.hpp"

namespace flashkit::analysis {
namespace {
GpuDemoResult no_cuda() {
  GpuDemoResult r;
  r.error = "this flashkit was built without CUDA";
  return r;
}
}  // namespace
GpuDemoResult gpu_gelu_demo(int64_t, const std::string&, int, int) { return no_cuda(); }
GpuDemoResult gpu_decode_demo(const DecodeShape&, int, int, const std::string&) { return no_cuda(); }
}  // namespace flashkit::analysis
