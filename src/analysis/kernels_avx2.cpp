// Compiled with -mavx2 -mfma (see CMakeLists.txt); only called after have_avx2_fma() said yes.
#include "kernels_avx2.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace flashkit::analysis {

bool have_avx2_fma() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

double fma_chain_avx2(int64_t iters) {
  __m256 a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm256_set1_ps(1.0f + 0.01f * float(j));
  const __m256 m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
#define FK_STEP(j) a[j] = _mm256_fmadd_ps(a[j], m, c);
    FK_STEP(0) FK_STEP(1) FK_STEP(2) FK_STEP(3) FK_STEP(4) FK_STEP(5)
    FK_STEP(6) FK_STEP(7) FK_STEP(8) FK_STEP(9) FK_STEP(10) FK_STEP(11)
#undef FK_STEP
  }
  __m256 s = a[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, a[j]);
  alignas(32) float t[8];
  _mm256_store_ps(t, s);
  double r = 0;
  for (float x : t) r += x;
  return r;
}

namespace {
constexpr int MR = 6, NR = 16;
constexpr int64_t KC = 256, MC = 72, NC = 3072;

// Packs B[k0:k0+kc, j0:j0+nc] into NR-column panels, each kc x NR contiguous, zero-padded.
void pack_b(const float* B, int64_t ldb, int64_t kc, int64_t nc, float* out) {
  for (int64_t j = 0; j < nc; j += NR) {
    const int64_t w = std::min<int64_t>(NR, nc - j);
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = B + k * ldb + j;
      float* dst = out + j * kc + k * NR;
      if (w == NR) std::memcpy(dst, src, NR * sizeof(float));
      else {
        for (int64_t t = 0; t < w; ++t) dst[t] = src[t];
        for (int64_t t = w; t < NR; ++t) dst[t] = 0;
      }
    }
  }
}

// Packs A[i0:i0+mc, k0:k0+kc] into MR-row panels, each kc x MR (k-major), zero-padded.
void pack_a(const float* A, int64_t lda, int64_t mc, int64_t kc, float* out) {
  for (int64_t i = 0; i < mc; i += MR) {
    const int64_t h = std::min<int64_t>(MR, mc - i);
    float* dst = out + i * kc;
    for (int64_t k = 0; k < kc; ++k) {
      for (int64_t r = 0; r < h; ++r) dst[k * MR + r] = A[(i + r) * lda + k];
      for (int64_t r = h; r < MR; ++r) dst[k * MR + r] = 0;
    }
  }
}

// C[6,16] += Ap[kc,6]^T Bp[kc,16]
inline void micro_6x16(int64_t kc, const float* Ap, const float* Bp, float* C, int64_t ldc, int64_t h, int64_t w) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps(),
         c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps(), c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(),
         c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(Bp + k * NR), b1 = _mm256_loadu_ps(Bp + k * NR + 8);
    const float* a = Ap + k * MR;
    __m256 x = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(x, b0, c00); c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(x, b0, c10); c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(x, b0, c20); c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(x, b0, c30); c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(x, b0, c40); c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(x, b0, c50); c51 = _mm256_fmadd_ps(x, b1, c51);
  }
  alignas(32) float t[MR][NR];
  _mm256_store_ps(t[0], c00); _mm256_store_ps(t[0] + 8, c01);
  _mm256_store_ps(t[1], c10); _mm256_store_ps(t[1] + 8, c11);
  _mm256_store_ps(t[2], c20); _mm256_store_ps(t[2] + 8, c21);
  _mm256_store_ps(t[3], c30); _mm256_store_ps(t[3] + 8, c31);
  _mm256_store_ps(t[4], c40); _mm256_store_ps(t[4] + 8, c41);
  _mm256_store_ps(t[5], c50); _mm256_store_ps(t[5] + 8, c51);
  if (h == MR && w == NR) {
    for (int r = 0; r < MR; ++r) {
      float* c = C + r * ldc;
      _mm256_storeu_ps(c, _mm256_add_ps(_mm256_loadu_ps(c), _mm256_load_ps(t[r])));
      _mm256_storeu_ps(c + 8, _mm256_add_ps(_mm256_loadu_ps(c + 8), _mm256_load_ps(t[r] + 8)));
    }
  } else {
    for (int64_t r = 0; r < h; ++r)
      for (int64_t j = 0; j < w; ++j) C[r * ldc + j] += t[r][j];
  }
}
}  // namespace

void gemm_blocked_avx2(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                       float* C, int64_t ldc, int threads) {
  for (int64_t i = 0; i < M; ++i) std::memset(C + i * ldc, 0, size_t(N) * sizeof(float));
  if (M == 0 || N == 0 || K == 0) return;
  const int64_t nc_max = std::min(NC, (N + NR - 1) / NR * NR);
  std::vector<float> bpack(size_t(KC * nc_max));
  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = std::min(NC, N - jc);
    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t kc = std::min(KC, K - pc);
      pack_b(B + pc * ldb + jc, ldb, kc, nc, bpack.data());
      const int64_t mblocks = (M + MC - 1) / MC;
#pragma omp parallel num_threads(threads)
      {
        std::vector<float> apack(size_t(MC * KC));
#pragma omp for schedule(dynamic)
        for (int64_t ib = 0; ib < mblocks; ++ib) {
          const int64_t ic = ib * MC, mc = std::min(MC, M - ic);
          pack_a(A + ic * lda + pc, lda, mc, kc, apack.data());
          for (int64_t jr = 0; jr < nc; jr += NR)
            for (int64_t ir = 0; ir < mc; ir += MR)
              micro_6x16(kc, apack.data() + ir * kc, bpack.data() + jr * kc, C + (ic + ir) * ldc + jc + jr, ldc,
                         std::min<int64_t>(MR, mc - ir), std::min<int64_t>(NR, nc - jr));
        }
      }
    }
  }
}

void gemv_avx2(int64_t M, int64_t K, const float* A, int64_t lda, const float* x, float* y, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < M; ++i) {
    const float* a = A + i * lda;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(x + k), s0);
      s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 8), _mm256_loadu_ps(x + k + 8), s1);
      s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 16), _mm256_loadu_ps(x + k + 16), s2);
      s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 24), _mm256_loadu_ps(x + k + 24), s3);
    }
    for (; k + 8 <= K; k += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(x + k), s0);
    __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
    alignas(32) float t[8];
    _mm256_store_ps(t, s);
    float r = ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
    for (; k < K; ++k) r += a[k] * x[k];
    y[i] = r;
  }
}

namespace {
inline __m256 tanh8(__m256 x) {
  const __m256 c = _mm256_set1_ps(7.90531110763549805f);
  x = _mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), c), _mm256_min_ps(x, c));
  const __m256 x2 = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-2.76076847742355e-16f);
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.00018790482477e-13f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-8.60467152213735e-11f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(5.12229709037114e-08f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(1.48572235717979e-05f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(6.37261928875436e-04f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(4.89352455891786e-03f));
  p = _mm256_mul_ps(p, x);
  __m256 q = _mm256_set1_ps(1.19825839466702e-06f);
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(1.18534705686654e-04f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(2.26843463243900e-03f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(4.89352518554385e-03f));
  return _mm256_div_ps(p, q);
}
float tanh1(float x) {
  alignas(32) float t[8] = {x};
  _mm256_store_ps(t, tanh8(_mm256_load_ps(t)));
  return t[0];
}
}  // namespace

void tanh_avx2(const float* x, float* y, int64_t n) {
  const int64_t nv = n / 8 * 8;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < nv; i += 8) _mm256_storeu_ps(y + i, tanh8(_mm256_loadu_ps(x + i)));
  for (int64_t i = nv; i < n; ++i) y[i] = tanh1(x[i]);
}

void gelu_tanh_fused_avx2(const float* x, float* y, int64_t n) {
  const __m256 c0 = _mm256_set1_ps(0.7978845608028654f), c1 = _mm256_set1_ps(0.044715f), one = _mm256_set1_ps(1.0f),
               half = _mm256_set1_ps(0.5f);
  auto g = [&](__m256 v) {
    const __m256 v3 = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
    const __m256 t = tanh8(_mm256_mul_ps(c0, _mm256_fmadd_ps(c1, v3, v)));
    return _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, t));
  };
  const int64_t nv = n / 8 * 8;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < nv; i += 8) _mm256_storeu_ps(y + i, g(_mm256_loadu_ps(x + i)));
  if (nv < n) {
    alignas(32) float t[8] = {0};
    for (int64_t i = nv; i < n; ++i) t[i - nv] = x[i];
    _mm256_store_ps(t, g(_mm256_load_ps(t)));
    for (int64_t i = nv; i < n; ++i) y[i] = t[i - nv];
  }
}

}  // namespace flashkit::analysis
