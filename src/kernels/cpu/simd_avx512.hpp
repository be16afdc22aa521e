// AVX-512F vector primitives (16 x f32). Included inside an ISA namespace by attention_flash_avx512.cpp.
using vf = __m512;
constexpr int W = 16;
inline vf vzero() { return _mm512_setzero_ps(); }
inline vf vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, vf v) { _mm512_storeu_ps(p, v); }
inline vf vset1(float x) { return _mm512_set1_ps(x); }
inline vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
inline float hsum(vf v) { return _mm512_reduce_add_ps(v); }
inline float hmax(vf v) { return _mm512_reduce_max_ps(v); }
// 2^x for x <= 0; see simd_avx2.hpp. Inputs below -126 give exactly 0.
inline vf vexp2(vf x) {
  const vf lo = _mm512_set1_ps(-126.f);
  const __mmask16 ok = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);
  x = _mm512_max_ps(x, lo);
  const vf n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const vf f = _mm512_sub_ps(x, n);
  vf p = _mm512_set1_ps(1.5403530e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504109e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022651e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  const __m512i e = _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23);
  const vf r = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), e));
  return _mm512_maskz_mov_ps(ok, r);
}

// head_dim is a multiple of 8, not always of 16: rows convert with the 8-lane forms.
#include "kernels/cpu/simd_convert_x86.inc"
