// Whether the CUDA fp8 attention forward can run a call, as a pure function of the device and the head dim
// (unit-tested in the CPU build: tests/attention/test_attention_fp8.cpp).
#pragma once
#include <cstdint>
#include <string>

#include "core/cuda_device.hpp"

namespace flashkit {

// Head dims the sm_90a fp8 kernel is instantiated for.
inline constexpr int64_t kFp8CudaHeadDims[] = {128, 256};

// Empty when the fp8 kernel runs the call; otherwise the reason (a whole sentence for Status::unsupported).
std::string fp8_cuda_unsupported_reason(const DeviceInfo& dev, int64_t head_dim);

}  // namespace flashkit
