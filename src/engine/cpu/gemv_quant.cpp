// See gemv_quant.hpp. The expansion of a block is model::dequantize_blocks (the one definition of the layouts);
// the dot products use AVX2 when the ISA allows, chosen at run time like gemv.cpp.
#include "engine/cpu/gemv_quant.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cblas.h>
#include <vector>

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
    // Output rows in chunks of 16 spread over the threads when the work (multiply-adds) is worth it.
    const int64_t chunks = (N + 15) / 16;
#pragma omp parallel for schedule(static) num_threads(threads) if (N * K * T > 32768)
    for (int64_t c = 0; c < chunks; ++c)
      rows_quant(simd, x, ldx, T, W, type, K, 16 * c, std::min(N, 16 * c + 16), out, ldo);
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
