// CUDA SSM kernels (src/kernels/cuda/ssm/scan.cu): launched by src/ops/ssm.cpp on validated arguments, on the calling
// thread's stream (flashkit::cuda_stream()). Each returns the name of the kernel configuration it ran.
#pragma once
#include <string>

#include "kernels/ssm_args.hpp"

namespace flashkit::kernels {

constexpr int64_t kCudaMaxState = 64;  // register carry: d_state beyond this is refused in src/ops/ssm.cpp

std::string selective_scan_cuda(const ScanArgs& a);
std::string selective_scan_step_cuda(const ScanArgs& a);
void causal_conv1d_cuda(const ConvArgs& a);

}  // namespace flashkit::kernels
