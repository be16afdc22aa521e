// Whether the CUDA fp8 attention forward can run a call, and which of its kernels, as pure functions of the device,
// the head dim and the Tuning (unit-tested in the CPU build: tests/attention/test_attention_fp8.cpp).
#pragma once
#include <cstdint>
#include <string>

#include "core/cuda_device.hpp"
#include "flashkit/tuning.hpp"

namespace flashkit {

// Head dims the sm_90a fp8 kernel is instantiated for.
inline constexpr int64_t kFp8CudaHeadDims[] = {128, 256};

// Empty when the fp8 kernel runs the call; otherwise the reason (a whole sentence for Status::unsupported).
std::string fp8_cuda_unsupported_reason(const DeviceInfo& dev, int64_t head_dim);

// The share of the softmax's exp2 the kernel computes on the FMA pipe, in eighths (EMU: 0, 1, 2 or 3; the values
// instantiated at d128). Tuning::fp8_exp_emu forces one at d128; d256 is always 0 (twice the tensor work per exp2:
// the SFU is not its wall). Automatic: kFp8ExpEmuAuto, 0 until the GPU run measures the others (worklog v3).
inline constexpr int kFp8ExpEmuAuto = 0;
int fp8_exp_emu(int64_t head_dim, const Tuning& tuning);

// OpCost's kernel name for the choice, e.g. "cuda.flash.fwd.sm90ws.e4m3.d128.emu2".
std::string fp8_kernel_name(int64_t head_dim, int emu);

}  // namespace flashkit
