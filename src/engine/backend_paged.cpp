// Defaults of the optional Backend ops for batched paged steps (backend.hpp, "Paged KV cache"): a backend that has
// no paged kernels says so instead of computing something else.
#include "engine/backend.hpp"
#include "flashkit/error.hpp"

namespace flashkit::engine {

namespace {
[[noreturn]] void no_paged(const Backend& be, const char* op) {
  fail(Status::unsupported, std::string(op) + ": the " + be.name() +
                                " backend has no paged KV cache (batched serving runs on the CPU and CUDA backends)");
}
}  // namespace

void Backend::set_paged_step(const PagedStep&) { no_paged(*this, "set_paged_step"); }
void Backend::paged_attention(const Tensor&, const Tensor&, const Tensor&, const PagedKVLayer&, const Tensor&, int64_t,
                              const AttentionParams&) {
  no_paged(*this, "paged_attention");
}
void Backend::gather_rows(const Tensor&, const Tensor&, int64_t) { no_paged(*this, "gather_rows"); }
void Backend::argmax_rows(const Tensor&, int64_t) { no_paged(*this, "argmax_rows"); }
void Backend::argmax_rows_result(std::span<ArgmaxResult>) { no_paged(*this, "argmax_rows_result"); }

}  // namespace flashkit::engine
