// An attention operand seen as f32: aliases the caller's memory when it already is f32, otherwise
// holds a converted contiguous copy. Used by the BLAS-based standard path.
#pragma once
#include <vector>

#include "core/convert.hpp"
#include "kernels/attention_args.hpp"

namespace flashkit::kernels {

struct F32Operand {
  AttnOperand view;        // f32 data with its strides
  std::vector<float> own;  // storage when converted

  F32Operand(const AttnOperand& t, DType dt, int64_t batch, int64_t seq, int64_t heads, int64_t d, bool load = true) {
    if (dt == DType::f32) {
      view = t;
      return;
    }
    own.resize(size_t(batch * seq * heads * d));
    view = {own.data(), seq * heads * d, heads * d, d};
    if (!load) return;
#pragma omp parallel for collapse(2)
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t s = 0; s < seq; ++s)
        for (int64_t h = 0; h < heads; ++h)
          row_to_f32(static_cast<const char*>(t.data) + (b * t.stride_b + s * t.stride_s + h * t.stride_h) * dtype_size(dt), dt,
                     row_ptr<float>(view, b, s, h), d);
  }
  float* row(int64_t b, int64_t s, int64_t h) const { return row_ptr<float>(view, b, s, h); }
  // Writes a converted copy back to the caller's tensor (no-op when aliased).
  void store_to(const AttnOperand& t, DType dt, int64_t batch, int64_t seq, int64_t heads, int64_t d) const {
    if (dt == DType::f32) return;
#pragma omp parallel for collapse(2)
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t s = 0; s < seq; ++s)
        for (int64_t h = 0; h < heads; ++h)
          row_from_f32(row(b, s, h), dt,
                       static_cast<char*>(t.data) + (b * t.stride_b + s * t.stride_s + h * t.stride_h) * dtype_size(dt), d);
  }
};

}  // namespace flashkit::kernels
