// Element access of the CS149 f16/f32 ops on the CPU: calls f(load, store) with load(ptr, i) -> float and
// store(ptr, i, v) -> the value as stored, rounded to the dtype (store to nullptr only rounds). The course's f16
// references round every intermediate to f16 the same way, so the CPU kernels do too.
#pragma once
#include <cstdint>

#include "flashkit/dtype.hpp"

namespace flashkit::cs149::cpu {

template <typename F>
void with_element_access(DType dt, F&& f) {
  if (dt == DType::f32) {
    f([](const void* p, int64_t i) { return static_cast<const float*>(p)[i]; },
      [](void* p, int64_t i, float v) {
        if (p) static_cast<float*>(p)[i] = v;
        return v;
      });
  } else {
    f([](const void* p, int64_t i) { return f16_to_f32(static_cast<const uint16_t*>(p)[i]); },
      [](void* p, int64_t i, float v) {
        const uint16_t h = f32_to_f16(v);
        if (p) static_cast<uint16_t*>(p)[i] = h;
        return f16_to_f32(h);
      });
  }
}

}  // namespace flashkit::cs149::cpu
