// The occupancy decoder's query input layer + SiLU on the CPU (f32 accumulation, rounded to the dtype twice as the
// two torch ops round).
#include <cmath>

#include "flashkit/dtype.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/cpu/cs149.hpp"
#include "kernels/cpu/cs149_element_access.hpp"

namespace flashkit::cs149::cpu {
namespace {

template <typename Load, typename Round>
void run(const QueryEmbedArgs& a, Load load, Round round) {
  const int64_t D = a.in_dim, W = a.width;
#pragma omp parallel for num_threads(num_threads()) schedule(static)
  for (int64_t r = 0; r < a.rows; ++r)
    for (int64_t j = 0; j < W; ++j) {
      float acc = 0.f;
      for (int64_t i = 0; i < D; ++i) acc += load(a.q, r * D + i) * load(a.w, j * D + i);
      const float x = round(nullptr, 0, acc + load(a.b, j));
      round(a.h, r * W + j, x / (1.f + std::exp(-x)));
    }
}

}  // namespace

void query_embed(const QueryEmbedArgs& a) {
  with_element_access(a.dtype, [&](auto load, auto store) { run(a, load, store); });
}

}  // namespace flashkit::cs149::cpu
