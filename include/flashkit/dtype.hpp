// Element types and scalar conversions shared by every backend.
#pragma once
#include <cstdint>
#include <cstring>
#include <string_view>

namespace flashkit {

// e4m3: OCP FP8 E4M3FN (include/flashkit/e4m3.hpp); only attention_forward_fp8 and quantize_e4m3 take it
// (include/flashkit/attention_fp8.hpp), every other op rejects it by name.
enum class DType : int32_t { f32 = 0, bf16 = 1, f16 = 2, f64 = 3, i32 = 4, e4m3 = 5 };

constexpr int64_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::e4m3: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t);
// Parses "f32"/"float32", "bf16"/"bfloat16", "f16"/"float16"/"half"; returns false on anything else.
bool parse_dtype(std::string_view s, DType* out);

// bf16 <-> f32: bf16 is the top half of an IEEE f32; rounding is to nearest even, NaN stays NaN.
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// IEEE binary16 <-> f32 in portable code (the AVX2 kernels use F16C instead).
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace flashkit
