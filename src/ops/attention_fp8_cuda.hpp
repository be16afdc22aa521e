// The CUDA side of the fp8 attention op (ops/attention_fp8.cpp): implemented in src/kernels/cuda/fp8/ when flashkit
// is built with CUDA, by attention_fp8_cuda_stub.cpp (Status::unsupported) otherwise.
#pragma once
#include "flashkit/attention.hpp"
#include "flashkit/tensor.hpp"
#include "kernels/attention_fp8_args.hpp"

namespace flashkit {

// Validated arguments; checks the device (fp8_cuda_unsupported_reason) and launches on the thread's stream.
void cuda_attention_forward_fp8(const kernels::AttentionFp8Args& a, const Tuning& tuning, OpCost* cost);
// Validated contiguous src (f32/bf16/f16) and dst (e4m3) of n elements; waits for the amax.
void cuda_quantize_e4m3(const TensorView& src, const TensorView& dst, int64_t n, float* descale);

}  // namespace flashkit
