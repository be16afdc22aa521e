// See gemv_quant.hpp. The expansion of a block is model::dequantize_blocks (the one definition of the layouts);
// the dot products use AVX2 when the ISA allows, chosen at run time like gemv.cpp.
#include "engine/cpu/gemv_quant.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cblas.h>
#include <cstring>
#include <vector>

#include "flashkit/dtype.hpp"
#include "model/quant.hpp"

namespace flashkit::engine::cpu {
namespace {

float dot_scalar(const float* a, const float* b, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// n is a multiple of 32 (every block size is).
__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}

inline float half_bits(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

__attribute__((target("avx2,fma"))) inline float hsum(__m256 s) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}

// 8 bytes at p as 8 floats of (byte >> shift) & mask.
__attribute__((target("avx2,fma"))) inline __m256 bytes8(const uint8_t* p, int shift, int mask) {
  const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, shift), _mm256_set1_epi32(mask)));
}

// Per row of x, the sum of each group of `group` values (the K-quants' min / offset terms need sum(x) per
// sub-block: sum x * (d*s*q - m) = d*s * sum x*q - m * sum x).
void group_sums(const float* x, int64_t ldx, int64_t T, int64_t K, int group, std::vector<float>& out) {
  out.resize(size_t(T * (K / group)));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t g = 0; g < K / group; ++g) {
      float s = 0;
      for (int i = 0; i < group; ++i) s += x[t * ldx + g * group + i];
      out[size_t(t * (K / group) + g)] = s;
    }
}

// Q4_K / Q5_K without expanding: per 32-value sub-block, sum x*q over the 4-bit (+ Q5_K's fifth bit from qh)
// quants converted in registers, then d*scale * that - dmin*min * sum(x).
template <bool FIVE>
__attribute__((target("avx2,fma"))) void rows_q45_k_avx2(const float* x, int64_t ldx, int64_t T, const uint8_t* W,
                                                          int64_t K, int64_t n0, int64_t n1, float* out, int64_t ldo,
                                                          const float* xs) {
  constexpr int64_t kBytes = FIVE ? 176 : 144;
  const int64_t nb = K / 256;
  for (int64_t n = n0; n < n1; ++n) {
    __m256 accv[8];  // the scaled x*q sums stay in vectors (one horizontal sum per output); the min terms are scalar
    float accs[8] = {};
    for (int64_t t = 0; t < T; ++t) accv[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = W + (n * nb + b) * kBytes;
      const float d = half_bits(blk), dmin = half_bits(blk + 2);
      const uint8_t* s = blk + 4;
      for (int sub = 0; sub < 8; ++sub) {
        int sc, mn;
        if (sub < 4) {
          sc = s[sub] & 63, mn = s[sub + 4] & 63;
        } else {
          sc = (s[sub + 4] & 15) | ((s[sub - 4] >> 6) << 4);
          mn = (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4);
        }
        const uint8_t* q = blk + (FIVE ? 48 : 16) + 32 * (sub / 2);
        const int shift = (sub & 1) * 4;
        __m256 q0 = bytes8(q, shift, 15), q1 = bytes8(q + 8, shift, 15), q2 = bytes8(q + 16, shift, 15),
               q3 = bytes8(q + 24, shift, 15);
        if constexpr (FIVE) {  // + 16 * bit `sub` of qh[l]
          const uint8_t* qh = blk + 16;
          const __m256 sixteen = _mm256_set1_ps(16.0f);
          q0 = _mm256_fmadd_ps(bytes8(qh, sub, 1), sixteen, q0);
          q1 = _mm256_fmadd_ps(bytes8(qh + 8, sub, 1), sixteen, q1);
          q2 = _mm256_fmadd_ps(bytes8(qh + 16, sub, 1), sixteen, q2);
          q3 = _mm256_fmadd_ps(bytes8(qh + 24, sub, 1), sixteen, q3);
        }
        const float ds = d * float(sc), dm = dmin * float(mn);
        for (int64_t t = 0; t < T; ++t) {
          const float* xb = x + t * ldx + b * 256 + 32 * sub;
          __m256 v = _mm256_mul_ps(q0, _mm256_loadu_ps(xb));
          v = _mm256_fmadd_ps(q1, _mm256_loadu_ps(xb + 8), v);
          v = _mm256_fmadd_ps(q2, _mm256_loadu_ps(xb + 16), v);
          v = _mm256_fmadd_ps(q3, _mm256_loadu_ps(xb + 24), v);
          accv[t] = _mm256_fmadd_ps(v, _mm256_set1_ps(ds), accv[t]);
          accs[t] -= dm * xs[t * (K / 32) + b * 8 + sub];
        }
      }
    }
    for (int64_t t = 0; t < T; ++t) out[t * ldo + n] = hsum(accv[t]) + accs[t];
  }
}

// Q4_0 without expanding: per 32-value block, d * (sum x*q - 8 * sum(x)) with q the 4-bit quants (values 0..15
// from the low nibbles of the 16 bytes, 16..31 from the high nibbles).
__attribute__((target("avx2,fma"))) void rows_q4_0_avx2(const float* x, int64_t ldx, int64_t T, const uint8_t* W,
                                                         int64_t K, int64_t n0, int64_t n1, float* out, int64_t ldo,
                                                         const float* xs) {
  const int64_t nb = K / 32;
  for (int64_t n = n0; n < n1; ++n) {
    __m256 accv[8];
    float accs[8] = {};
    for (int64_t t = 0; t < T; ++t) accv[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = W + (n * nb + b) * 18;
      const float d = half_bits(blk);
      const __m256 q0 = bytes8(blk + 2, 0, 15), q1 = bytes8(blk + 10, 0, 15), q2 = bytes8(blk + 2, 4, 15),
                   q3 = bytes8(blk + 10, 4, 15);
      const __m256 dv = _mm256_set1_ps(d);
      for (int64_t t = 0; t < T; ++t) {
        const float* xb = x + t * ldx + b * 32;
        __m256 v = _mm256_mul_ps(q0, _mm256_loadu_ps(xb));
        v = _mm256_fmadd_ps(q1, _mm256_loadu_ps(xb + 8), v);
        v = _mm256_fmadd_ps(q2, _mm256_loadu_ps(xb + 16), v);
        v = _mm256_fmadd_ps(q3, _mm256_loadu_ps(xb + 24), v);
        accv[t] = _mm256_fmadd_ps(v, dv, accv[t]);
        accs[t] -= 8.0f * d * xs[t * nb + b];
      }
    }
    for (int64_t t = 0; t < T; ++t) out[t * ldo + n] = hsum(accv[t]) + accs[t];
  }
}

// Q6_K without expanding: per 16-value sub-block, sum x*q over the 6-bit quants (low 4 bits from ql, top 2 from qh,
// assembled in registers), then d*scale * (that - 32 * sum(x)).
__attribute__((target("avx2,fma"))) void rows_q6_k_avx2(const float* x, int64_t ldx, int64_t T, const uint8_t* W,
                                                         int64_t K, int64_t n0, int64_t n1, float* out, int64_t ldo,
                                                         const float* xs) {
  const int64_t nb = K / 256;
  for (int64_t n = n0; n < n1; ++n) {
    __m256 accv[8];
    float accs[8] = {};
    for (int64_t t = 0; t < T; ++t) accv[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = W + (n * nb + b) * 210;
      const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
      const float d = half_bits(blk + 208);
      for (int h = 0; h < 2; ++h)
        for (int k = 0; k < 4; ++k)
          for (int half = 0; half < 2; ++half) {  // 16 values: lanes 16 * half .. + 15
            const int l0 = 16 * half;
            const uint8_t* ql = blk + 64 * h + 32 * (k & 1) + l0;
            const uint8_t* qh = blk + 128 + 32 * h + l0;
            const int ls = k < 2 ? 0 : 4;
            __m256 q[2];
            for (int c = 0; c < 2; ++c) {
              const __m128i lb = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(ql + 8 * c));
              const __m128i hb = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qh + 8 * c));
              const __m256i lo = _mm256_and_si256(_mm256_srli_epi32(_mm256_cvtepu8_epi32(lb), ls),
                                                  _mm256_set1_epi32(15));
              const __m256i hi = _mm256_and_si256(_mm256_srli_epi32(_mm256_cvtepu8_epi32(hb), 2 * k),
                                                  _mm256_set1_epi32(3));
              q[c] = _mm256_cvtepi32_ps(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)));
            }
            const int sub = 8 * h + 2 * k + half;  // = (128 h + 32 k + l0) / 16
            const float ds = d * float(sc[sub]);
            for (int64_t t = 0; t < T; ++t) {
              const float* xb = x + t * ldx + b * 256 + 128 * h + 32 * k + l0;
              const __m256 v = _mm256_fmadd_ps(q[1], _mm256_loadu_ps(xb + 8), _mm256_mul_ps(q[0], _mm256_loadu_ps(xb)));
              accv[t] = _mm256_fmadd_ps(v, _mm256_set1_ps(ds), accv[t]);
              accs[t] -= 32.0f * ds * xs[t * (K / 16) + b * 16 + sub];
            }
          }
    }
    for (int64_t t = 0; t < T; ++t) out[t * ldo + n] = hsum(accv[t]) + accs[t];
  }
}

// Rows [n0, n1) for up to 8 rows of x: each block is expanded once and used by every row of x.
void rows_quant(bool simd, const float* x, int64_t ldx, int64_t T, const uint8_t* W, model::WeightType type,
                int64_t K, int64_t n0, int64_t n1, float* out, int64_t ldo) {
  const model::QuantBlock qb = model::quant_block(type);
  const int64_t nb = K / qb.values;
  alignas(64) float w[256];
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = W + n * nb * qb.bytes;
    float acc[8] = {};
    for (int64_t b = 0; b < nb; ++b) {
      model::dequantize_blocks(type, row + b * qb.bytes, 1, w);
      for (int64_t t = 0; t < T; ++t) {
        const float* xb = x + t * ldx + b * qb.values;
        acc[t] += simd ? dot_avx2(w, xb, qb.values) : dot_scalar(w, xb, qb.values);
      }
    }
    for (int64_t t = 0; t < T; ++t) out[t * ldo + n] = acc[t];
  }
}

}  // namespace

void matmul_quant(Isa isa, int threads, const float* x, int64_t ldx, int64_t T, const uint8_t* W,
                  model::WeightType type, int64_t N, int64_t K, float* out, int64_t ldo) {
  if (type == model::WeightType::q8_0) return matmul(isa, threads, x, ldx, T, W, DType::f32, N, K, out, ldo, true);
  const model::QuantBlock qb = model::quant_block(type);
  const int64_t row_bytes = K / qb.values * qb.bytes;
  const bool simd = isa != Isa::scalar;
  if (T <= 8) {
    // With AVX2 every type is multiplied straight from its quants (converted in registers); the scalar ISA expands
    // a block at a time. Output rows in chunks of 16 spread over the threads when the work is worth it.
    const bool direct = simd;
    thread_local std::vector<float> xs;
    if (direct) group_sums(x, ldx, T, K, type == model::WeightType::q6_k ? 16 : 32, xs);
    const float* xsp = xs.data();
    const int64_t chunks = (N + 15) / 16;
#pragma omp parallel for schedule(static) num_threads(threads) if (N * K * T > 32768)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t n0 = 16 * c, n1 = std::min(N, 16 * c + 16);
      if (!direct) rows_quant(false, x, ldx, T, W, type, K, n0, n1, out, ldo);
      else if (type == model::WeightType::q4_k) rows_q45_k_avx2<false>(x, ldx, T, W, K, n0, n1, out, ldo, xsp);
      else if (type == model::WeightType::q5_k) rows_q45_k_avx2<true>(x, ldx, T, W, K, n0, n1, out, ldo, xsp);
      else if (type == model::WeightType::q6_k) rows_q6_k_avx2(x, ldx, T, W, K, n0, n1, out, ldo, xsp);
      else rows_q4_0_avx2(x, ldx, T, W, K, n0, n1, out, ldo, xsp);
    }
    return;
  }
  // Prefill: each thread owns a slice of output columns and expands ~1 MB panels of its rows for a
  // single-threaded sgemm (one thread pool; see gemv.cpp's GEMM comment for why OpenBLAS runs single-threaded).
  openblas_set_num_threads(1);
  const int nt = int(std::max<int64_t>(1, std::min<int64_t>(threads, (N + 63) / 64)));
  const int64_t slice = ((N + nt - 1) / nt + 15) / 16 * 16;
  const int64_t panel = std::max<int64_t>(16, (int64_t(1) << 18) / std::max<int64_t>(K, 1));
#pragma omp parallel num_threads(nt)
  {
    const int64_t n_begin = std::min<int64_t>(N, int64_t(omp_get_thread_num()) * slice);
    const int64_t n_end = std::min<int64_t>(N, n_begin + slice);
    thread_local std::vector<float> buf;
    if (n_begin < n_end) buf.resize(size_t(std::min(panel, n_end - n_begin) * K));
    for (int64_t n0 = n_begin; n0 < n_end; n0 += panel) {
      const int64_t nn = std::min(panel, n_end - n0);
      model::dequantize_blocks(type, W + n0 * row_bytes, nn * (K / qb.values), buf.data());
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(T), int(nn), int(K), 1.f, x, int(ldx), buf.data(),
                  int(K), 0.f, out + n0, int(ldo));
    }
  }
}

}  // namespace flashkit::engine::cpu
