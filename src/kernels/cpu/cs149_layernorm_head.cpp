// The occupancy decoder's LayerNorm + Linear(width -> 1) head on the CPU, one row at a time (f32 statistics,
// normalised values and the result rounded to the dtype as the course's reference rounds them).
#include <cmath>

#include "flashkit/dtype.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/cpu/cs149.hpp"
#include "kernels/cpu/cs149_element_access.hpp"

namespace flashkit::cs149::cpu {
namespace {

template <typename Load, typename Round>
void run(const LayerNormHeadArgs& a, Load load, Round round_store) {
  const int64_t W = a.width;
  const float bias = load(a.bias, 0);
#pragma omp parallel for num_threads(num_threads()) schedule(static)
  for (int64_t r = 0; r < a.rows; ++r) {
    float sum = 0;
    for (int64_t j = 0; j < W; ++j) sum += load(a.x, r * W + j);
    const float mean = sum / float(W);
    float sq = 0;
    for (int64_t j = 0; j < W; ++j) {
      const float d = load(a.x, r * W + j) - mean;
      sq += d * d;
    }
    const float rstd = 1.0f / std::sqrt(sq / float(W) + a.eps);
    float dot = 0;
    for (int64_t j = 0; j < W; ++j) dot += round_store(nullptr, 0, (load(a.x, r * W + j) - mean) * rstd) * load(a.w, j);
    round_store(a.out, r, dot + bias);
  }
}

}  // namespace

void layernorm_head(const LayerNormHeadArgs& a) {
  with_element_access(a.dtype, [&](auto load, auto store) { run(a, load, store); });
}

}  // namespace flashkit::cs149::cpu
