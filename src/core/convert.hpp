// Scalar element access by run-time dtype, and row conversions to and from f32. The SIMD kernels have
// their own vectorized conversions; these are for the reference, the standard path and validation.
#pragma once
#include <cstdint>
#include <cstring>

#include "flashkit/dtype.hpp"
#include "flashkit/e4m3.hpp"

namespace flashkit {

inline double load_as_f64(const void* base, DType dt, int64_t i) {
  switch (dt) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::f64: return static_cast<const double*>(base)[i];
    case DType::i32: return static_cast<const int32_t*>(base)[i];
    case DType::e4m3: return e4m3_to_f32(static_cast<const uint8_t*>(base)[i]);
  }
  return 0;
}

inline void store_from_f64(void* base, DType dt, int64_t i, double v) {
  switch (dt) {
    case DType::f32: static_cast<float*>(base)[i] = float(v); break;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = f32_to_bf16(float(v)); break;
    case DType::f16: static_cast<uint16_t*>(base)[i] = f32_to_f16(float(v)); break;
    case DType::f64: static_cast<double*>(base)[i] = v; break;
    case DType::i32: static_cast<int32_t*>(base)[i] = int32_t(v); break;
    case DType::e4m3: static_cast<uint8_t*>(base)[i] = f32_to_e4m3(float(v)); break;
  }
}

inline void row_to_f32(const void* src, DType dt, float* dst, int64_t n) {
  switch (dt) {
    case DType::f32: std::memcpy(dst, src, size_t(n) * 4); break;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(static_cast<const uint16_t*>(src)[i]);
      break;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(static_cast<const uint16_t*>(src)[i]);
      break;
    default:
      for (int64_t i = 0; i < n; ++i) dst[i] = float(load_as_f64(src, dt, i));
  }
}

inline void row_from_f32(const float* src, DType dt, void* dst, int64_t n) {
  switch (dt) {
    case DType::f32: std::memcpy(dst, src, size_t(n) * 4); break;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_bf16(src[i]);
      break;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_f16(src[i]);
      break;
    default:
      for (int64_t i = 0; i < n; ++i) store_from_f64(dst, dt, i, src[i]);
  }
}

}  // namespace flashkit
