// Built only without CUDA: the fp8 op's CUDA entry points report that this build cannot serve them.
#include "flashkit/error.hpp"
#include "ops/attention_fp8_cuda.hpp"

namespace flashkit {

namespace {
[[noreturn]] void no_cuda() { fail(Status::unsupported, "this flashkit build has no CUDA support (configure with -DFLASHKIT_CUDA=ON)"); }
}  // namespace

void cuda_attention_forward_fp8(const kernels::AttentionFp8Args&, const Tuning&, OpCost*) { no_cuda(); }
void cuda_quantize_e4m3(const TensorView&, const TensorView&, int64_t, float*) { no_cuda(); }

}  // namespace flashkit
