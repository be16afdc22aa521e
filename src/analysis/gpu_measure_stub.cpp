// Builds without CUDA: no GPU measurement.
#include "roofline.hpp"

namespace flashkit::analysis {
GpuMeasurement measure_gpu(double) {
  GpuMeasurement m;
  m.error = "this flashkit was built without CUDA";
  return m;
}
double cublas_matmul_seconds(int64_t, int64_t, int64_t, bool, int, std::string* error) {
  if (error) *error = "this flashkit was built without CUDA";
  return -1;
}
std::string gpu_name() { return ""; }
GpuAttentionTiming cuda_attention_time(int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, const std::string&, int) {
  GpuAttentionTiming t;
  t.error = "this flashkit was built without CUDA";
  return t;
}
}  // namespace flashkit::analysis
