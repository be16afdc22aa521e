// Built only without CUDA: every CUDA entry point reports that this build cannot serve it.
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "ops/cuda_dispatch.hpp"

namespace flashkit {

namespace {
[[noreturn]] void no_cuda() { fail(Status::unsupported, "this flashkit build has no CUDA support (configure with -DFLASHKIT_CUDA=ON)"); }
}  // namespace

void cuda_copy_to_host(void*, const void*, size_t, int) { no_cuda(); }
void set_cuda_stream(void*) { no_cuda(); }
void* cuda_stream() { return nullptr; }
void cuda_attention_forward(const kernels::AttentionFwdArgs&, const std::vector<int32_t>&, AttentionImpl, const Tuning&, OpCost*) {
  no_cuda();
}
void cuda_attention_backward(const kernels::AttentionBwdArgs&, const std::vector<int32_t>&, AttentionImpl, const Tuning&, OpCost*) {
  no_cuda();
}

}  // namespace flashkit
