// Portable fallback: one lane. Included inside an ISA namespace by attention_flash_scalar.cpp.
using vf = float;
constexpr int W = 1;
inline vf vzero() { return 0.f; }
inline vf vload(const float* p) { return *p; }
inline void vstore(float* p, vf v) { *p = v; }
inline vf vset1(float x) { return x; }
inline vf vfma(vf a, vf b, vf c) { return a * b + c; }
inline vf vmul(vf a, vf b) { return a * b; }
inline vf vadd(vf a, vf b) { return a + b; }
inline vf vsub(vf a, vf b) { return a - b; }
inline vf vmax(vf a, vf b) { return a > b ? a : b; }
inline float hsum(vf v) { return v; }
inline float hmax(vf v) { return v; }
inline vf vexp2(vf x) { return x < -126.f ? 0.f : std::exp2(x); }
inline void load_row(const void* src, DType dt, float* dst, int64_t n) { row_to_f32(src, dt, dst, n); }
inline void store_row(const float* src, DType dt, void* dst, int64_t n) { row_from_f32(src, dt, dst, n); }
