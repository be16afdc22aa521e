// The occupancy decoder's query input layer + SiLU on the CPU (f32 accumulation, rounded to the dtype twice as the
// two torch ops round).
#include <cmath>

#include "flashkit/dtype.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/cpu/cs149.hpp"

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
  if (a.dtype == DType::f32) {
    run(a, [](const void* p, int64_t i) { return static_cast<const float*>(p)[i]; },
        [](void* p, int64_t i, float v) {
          if (p) static_cast<float*>(p)[i] = v;
          return v;
        });
  } else {
    run(a, [](const void* p, int64_t i) { return f16_to_f32(static_cast<const uint16_t*>(p)[i]); },
        [](void* p, int64_t i, float v) {
          const uint16_t h = f32_to_f16(v);
          if (p) static_cast<uint16_t*>(p)[i] = h;
          return f16_to_f32(h);
        });
  }
}

}  // namespace flashkit::cs149::cpu
