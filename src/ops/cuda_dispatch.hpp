// The CUDA side of dispatch. Implemented in src/kernels/cuda when flashkit is built with CUDA, and by
// cuda_stub.cpp (which reports Status::unsupported) otherwise.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "flashkit/attention.hpp"
#include "kernels/attention_args.hpp"

namespace flashkit {

void cuda_copy_to_host(void* dst, const void* src, size_t bytes, int device_index);
// host_cu: the validated host copy of cu_seqlens_q then cu_seqlens_k (num_seqs+1 entries each); empty
// when the batch is not variable-length.
// check_finite is not implemented on CUDA (it would cost a pass over q/k/v); CUDA calls ignore it.
void cuda_attention_forward(const kernels::AttentionFwdArgs& a, const std::vector<int32_t>& host_cu, AttentionImpl impl,
                            const Tuning& tuning, OpCost* cost);
void cuda_attention_backward(const kernels::AttentionBwdArgs& g, const std::vector<int32_t>& host_cu,
                             AttentionImpl impl, const Tuning& tuning, OpCost* cost);

}  // namespace flashkit
