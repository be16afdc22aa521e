// The CS149 CUDA launchers in a build without CUDA: src/ops/cs149.cpp refuses CUDA requests before reaching them.
#include "flashkit/error.hpp"
#include "kernels/cuda/cs149/launch.hpp"

namespace flashkit::cs149::cuda {

void histogram(const HistogramArgs&) { fail(Status::unsupported, "cs149::histogram: this build has no CUDA support"); }
void swiglu(const SwigluArgs&) { fail(Status::unsupported, "cs149::swiglu: this build has no CUDA support"); }
void layernorm_head(const LayerNormHeadArgs&) {
  fail(Status::unsupported, "cs149::layernorm_head: this build has no CUDA support");
}
void query_embed(const QueryEmbedArgs&) {
  fail(Status::unsupported, "cs149::query_embed: this build has no CUDA support");
}
void rk4(const Rk4Args&) { fail(Status::unsupported, "cs149::rk4: this build has no CUDA support"); }

}  // namespace flashkit::cs149::cuda
