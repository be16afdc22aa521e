// The CUDA side of dispatch. Implemented in src/kernels/cuda when flashkit is built with CUDA, and by
// cuda_stub.cpp (which reports Status::unsupported) otherwise.
#pragma once
#include <cstddef>

#include "flashkit/attention.hpp"
#include "kernels/attention_args.hpp"

namespace flashkit {

void cuda_copy_to_host(void* dst, const void* src, size_t bytes, int device_index);
void cuda_attention_forward(const kernels::AttentionFwdArgs& a, AttentionImpl impl, bool check_finite, OpCost* cost);
void cuda_attention_backward(const kernels::AttentionBwdArgs& g, AttentionImpl impl, bool check_finite, OpCost* cost);

}  // namespace flashkit
