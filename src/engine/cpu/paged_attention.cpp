// See paged_attention.hpp. The dot products and the weighted sum of values are the inner loops; they get an
// AVX2/FMA body (GCC target attribute, as gemv.cpp) and a portable one, picked by the backend's ISA.
#include "engine/cpu/paged_attention.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace flashkit::engine::cpu {

namespace {

inline float dot_scalar(const float* a, const float* b, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
inline void axpy_scalar(float w, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += w * x[i];
}

__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  acc0 = _mm256_add_ps(acc0, acc1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc0), _mm256_extractf128_ps(acc0, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  float r = _mm_cvtss_f32(s);
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}
__attribute__((target("avx2,fma"))) void axpy_avx2(float w, const float* x, float* y, int64_t n) {
  const __m256 wv = _mm256_set1_ps(w);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += w * x[i];
}

// One (row, kv head): G query heads against the visible keys of the row's sequence.
template <bool kAvx2>
void one_group(const PagedDecodeArgs& a, int64_t r, int64_t g, std::vector<float>& scores) {
  const int64_t hd = a.head_dim, G = a.heads / a.kv_heads, ldkv = a.kv_heads * hd, bs = a.block_size;
  const int64_t p = a.positions[r];
  const int64_t lo = a.window > 0 ? std::max<int64_t>(0, p - a.window + 1) : 0;
  const int64_t L = p - lo + 1;
  const int32_t* table = a.block_tables + int64_t(a.row_seq[r]) * a.max_blocks;
  const float* q = a.q + r * a.ldq + g * G * hd;
  float* o = a.out + r * a.ldo + g * G * hd;
  scores.resize(size_t(G * L));
  auto dot = [&](const float* x, const float* y) { return kAvx2 ? dot_avx2(x, y, hd) : dot_scalar(x, y, hd); };
  auto axpy = [&](float w, const float* x, float* y) {
    if constexpr (kAvx2) axpy_avx2(w, x, y, hd);
    else axpy_scalar(w, x, y, hd);
  };
  // Pass 1: scores, block by block (the slots of one block are consecutive pool rows).
  for (int64_t j0 = lo; j0 <= p;) {
    const int64_t blk = j0 / bs, j1 = std::min<int64_t>(p + 1, (blk + 1) * bs);
    const float* kb = a.k_pool + (int64_t(table[blk]) * bs + (j0 - blk * bs)) * ldkv + g * hd;
    for (int64_t j = j0; j < j1; ++j, kb += ldkv)
      for (int64_t h = 0; h < G; ++h) {
        float s = dot(q + h * hd, kb) * a.scale;
        if (a.softcap > 0) s = a.softcap * std::tanh(s / a.softcap);
        scores[size_t(h * L + (j - lo))] = s;
      }
    j0 = j1;
  }
  // Pass 2: softmax weights (max subtracted), per head.
  std::vector<float> inv(static_cast<size_t>(G), 0.0f);
  for (int64_t h = 0; h < G; ++h) {
    float* s = scores.data() + h * L;
    float mx = s[0];
    for (int64_t j = 1; j < L; ++j) mx = std::max(mx, s[j]);
    double sum = 0;
    for (int64_t j = 0; j < L; ++j) {
      s[j] = std::exp(s[j] - mx);
      sum += s[j];
    }
    inv[size_t(h)] = float(1.0 / sum);
    std::fill(o + h * hd, o + (h + 1) * hd, 0.0f);
  }
  // Pass 3: weighted sum of the values.
  for (int64_t j0 = lo; j0 <= p;) {
    const int64_t blk = j0 / bs, j1 = std::min<int64_t>(p + 1, (blk + 1) * bs);
    const float* vb = a.v_pool + (int64_t(table[blk]) * bs + (j0 - blk * bs)) * ldkv + g * hd;
    for (int64_t j = j0; j < j1; ++j, vb += ldkv)
      for (int64_t h = 0; h < G; ++h) axpy(scores[size_t(h * L + (j - lo))], vb, o + h * hd);
    j0 = j1;
  }
  for (int64_t h = 0; h < G; ++h)
    for (int64_t i = 0; i < hd; ++i) o[h * hd + i] *= inv[size_t(h)];
}

}  // namespace

void paged_decode_attention(Isa isa, int threads, const PagedDecodeArgs& a) {
  const int64_t pairs = a.n_rows * a.kv_heads;
  int64_t work = 0;  // multiply-adds, to decide whether waking threads pays
  for (int64_t i = 0; i < a.n_rows; ++i) work += (int64_t(a.positions[a.rows[i]]) + 1) * a.heads * a.head_dim * 2;
  const bool avx2 = isa != Isa::scalar;
#pragma omp parallel num_threads(threads) if (work > (int64_t(1) << 17) && threads > 1)
  {
    std::vector<float> scores;
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < pairs; ++i) {
      const int64_t r = a.rows[i / a.kv_heads], g = i % a.kv_heads;
      if (avx2) one_group<true>(a, r, g, scores);
      else one_group<false>(a, r, g, scores);
    }
  }
}

}  // namespace flashkit::engine::cpu
