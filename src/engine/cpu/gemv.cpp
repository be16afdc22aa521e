// See gemv.hpp. The SIMD bodies use GCC target attributes so this file needs no per-file ISA flags; the
// run-time choice follows flashkit::cpu_isa(cap) (Tuning::cpu_isa, FLASHKIT_CPU_ISA, forces a lower level).
#include "engine/cpu/gemv.hpp"

// GCC 12 flags its own AVX-512 intrinsic headers (_mm512_reduce_add_ps) as using uninitialized values.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cblas.h>
#include <cmath>
#include <cstring>
#include <vector>

#include "flashkit/runtime.hpp"

namespace flashkit::engine::cpu {

Isa detect_isa(CpuIsaCap cap) {
  std::string s = flashkit::cpu_isa(cap);
  if (s == "avx512" && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) return Isa::avx512;
  if ((s == "avx512" || s == "avx2") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return Isa::avx2;
  return Isa::scalar;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    default: return "scalar";
  }
}

namespace {

inline float wval(const void* W, bool bf16, int64_t i) {
  return bf16 ? bf16_to_f32(static_cast<const uint16_t*>(W)[i]) : static_cast<const float*>(W)[i];
}

// ---------------------------------------------------------------- scalar
template <int TB>
void block_scalar(const float* x, int64_t ldx, const void* W, bool bf16, int64_t K, int64_t n0, int64_t n1,
                  float* out, int64_t ldo) {
  for (int64_t n = n0; n < n1; ++n) {
    float acc[TB] = {};
    for (int64_t k = 0; k < K; ++k) {
      float w = wval(W, bf16, n * K + k);
      for (int t = 0; t < TB; ++t) acc[t] += x[t * ldx + k] * w;
    }
    for (int t = 0; t < TB; ++t) out[t * ldo + n] = acc[t];
  }
}

// ---------------------------------------------------------------- AVX2
__attribute__((target("avx2,fma"))) inline __m256 load8(const float* w) { return _mm256_loadu_ps(w); }
__attribute__((target("avx2,fma"))) inline __m256 load8(const uint16_t* w) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
__attribute__((target("avx2,fma"))) inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}
inline float wscalar(const float* w) { return *w; }
inline float wscalar(const uint16_t* w) { return bf16_to_f32(*w); }

// R weight rows x TB rows of x.
template <int TB, int R, typename WT>
__attribute__((target("avx2,fma"))) void tile_avx2(const float* x, int64_t ldx, const WT* W, int64_t K, int64_t n,
                                                   float* out, int64_t ldo) {
  __m256 acc[TB][R];
  for (int t = 0; t < TB; ++t)
    for (int r = 0; r < R; ++r) acc[t][r] = _mm256_setzero_ps();
  const WT* w[R];
  for (int r = 0; r < R; ++r) w[r] = W + (n + r) * K;
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load8(w[r] + k);
    for (int t = 0; t < TB; ++t) {
      __m256 xv = _mm256_loadu_ps(x + t * ldx + k);
      for (int r = 0; r < R; ++r) acc[t][r] = _mm256_fmadd_ps(xv, wv[r], acc[t][r]);
    }
  }
  for (int t = 0; t < TB; ++t)
    for (int r = 0; r < R; ++r) {
      float s = hsum8(acc[t][r]);
      for (int64_t kk = k; kk < K; ++kk) s += x[t * ldx + kk] * wscalar(w[r] + kk);
      out[t * ldo + n + r] = s;
    }
}

// Weight rows [n0, n1) in tiles of R rows (4 when there are at most 2 activation rows, 2 up to 4, else 1: the
// accumulators must stay in registers), the rest one row at a time: tile.template operator()<R>(n) runs one tile.
// Shared by every kernel family below. Each output's sum runs in the same order whatever TB and R are, so a row's
// result does not depend on how many rows are computed with it (batched serving relies on this).
template <int TB, typename Tile>
inline void row_tiles(int64_t n0, int64_t n1, Tile&& tile) {
  constexpr int R = TB <= 2 ? 4 : (TB <= 4 ? 2 : 1);
  int64_t n = n0;
  for (; n + R <= n1; n += R) tile.template operator()<R>(n);
  for (; n < n1; ++n) tile.template operator()<1>(n);
}

template <int TB, typename WT>
void block_avx2(const float* x, int64_t ldx, const WT* W, int64_t K, int64_t n0, int64_t n1, float* out, int64_t ldo) {
  row_tiles<TB>(n0, n1, [&]<int R>(int64_t n) { tile_avx2<TB, R>(x, ldx, W, K, n, out, ldo); });
}

// bf16 weights, K % 16 == 0: 16 weights per load, widened by interleaving with zeros (unpacklo/hi put the
// bf16 bits in the high half of each 32-bit lane: two 1-uop shuffles instead of two widening moves and shifts).
// Within each 128-bit lane unpacklo yields elements 0-3 and 8-11 of the 16, unpackhi 4-7 and 12-15, so x is
// pre-permuted per 16-block to [x0-3, x8-11, x4-7, x12-15] (permute_x16) and the dot product is unchanged.
// The weight streams are prefetched kPrefetchBytes ahead into L1: with the hardware prefetchers alone a 2-core bf16
// GEMV streamed ~14 GB/s; 4 KB ahead measured ~18 GB/s on the gemma-3-270m lm_head (bf16 decode 28.7 -> 35.4 tok/s;
// 512 B to 16 KB tried). The f32 path (more bytes per multiply) measured no gain, so it has none.
constexpr int kPrefetchBytes = 4096;
template <int TB, int R>
__attribute__((target("avx2,fma"))) void tile_avx2_bf16p(const float* xp, int64_t K, const uint16_t* W, int64_t n,
                                                         float* out, int64_t ldo) {
  __m256 acc[TB][R];
  for (int t = 0; t < TB; ++t)
    for (int r = 0; r < R; ++r) acc[t][r] = _mm256_setzero_ps();
  const uint16_t* w[R];
  for (int r = 0; r < R; ++r) w[r] = W + (n + r) * K;
  const __m256i zero = _mm256_setzero_si256();
  for (int64_t k = 0; k < K; k += 16) {
    __m256 lo[R], hi[R];
    for (int r = 0; r < R; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(w[r] + k) + kPrefetchBytes, _MM_HINT_T0);
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[r] + k));
      lo[r] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, v));
      hi[r] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, v));
    }
    for (int t = 0; t < TB; ++t) {
      const __m256 xl = _mm256_loadu_ps(xp + t * K + k), xh = _mm256_loadu_ps(xp + t * K + k + 8);
      for (int r = 0; r < R; ++r) acc[t][r] = _mm256_fmadd_ps(xh, hi[r], _mm256_fmadd_ps(xl, lo[r], acc[t][r]));
    }
  }
  for (int t = 0; t < TB; ++t)
    for (int r = 0; r < R; ++r) out[t * ldo + n + r] = hsum8(acc[t][r]);
}

template <int TB>
void block_avx2_bf16p(const float* xp, int64_t K, const uint16_t* W, int64_t n0, int64_t n1, float* out, int64_t ldo) {
  row_tiles<TB>(n0, n1, [&]<int R>(int64_t n) { tile_avx2_bf16p<TB, R>(xp, K, W, n, out, ldo); });
}

// rows x [T, K] (row stride ldx) -> xp [T, K] contiguous, each 16-block permuted for tile_avx2_bf16p.
void permute_x16(const float* x, int64_t ldx, int64_t T, int64_t K, float* xp) {
  static constexpr int kPerm[16] = {0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15};
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; k += 16)
      for (int i = 0; i < 16; ++i) xp[t * K + k + i] = x[t * ldx + k + kPerm[i]];
}

// ---------------------------------------------------------------- AVX-512
__attribute__((target("avx512f,avx512bw,fma"))) inline __m512 load16(const float* w) { return _mm512_loadu_ps(w); }
__attribute__((target("avx512f,avx512bw,fma"))) inline __m512 load16(const uint16_t* w) {
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <int TB, int R, typename WT>
__attribute__((target("avx512f,avx512bw,fma"))) void tile_avx512(const float* x, int64_t ldx, const WT* W, int64_t K,
                                                                 int64_t n, float* out, int64_t ldo) {
  __m512 acc[TB][R];
  for (int t = 0; t < TB; ++t)
    for (int r = 0; r < R; ++r) acc[t][r] = _mm512_setzero_ps();
  const WT* w[R];
  for (int r = 0; r < R; ++r) w[r] = W + (n + r) * K;
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load16(w[r] + k);
    for (int t = 0; t < TB; ++t) {
      __m512 xv = _mm512_loadu_ps(x + t * ldx + k);
      for (int r = 0; r < R; ++r) acc[t][r] = _mm512_fmadd_ps(xv, wv[r], acc[t][r]);
    }
  }
  for (int t = 0; t < TB; ++t)
    for (int r = 0; r < R; ++r) {
      float s = _mm512_reduce_add_ps(acc[t][r]);
      for (int64_t kk = k; kk < K; ++kk) s += x[t * ldx + kk] * wscalar(w[r] + kk);
      out[t * ldo + n + r] = s;
    }
}

template <int TB, typename WT>
void block_avx512(const float* x, int64_t ldx, const WT* W, int64_t K, int64_t n0, int64_t n1, float* out,
                  int64_t ldo) {
  row_tiles<TB>(n0, n1, [&]<int R>(int64_t n) { tile_avx512<TB, R>(x, ldx, W, K, n, out, ldo); });
}

template <int TB>
void block(Isa isa, const float* x, int64_t ldx, const void* W, bool bf16, int64_t K, int64_t n0, int64_t n1,
           float* out, int64_t ldo) {
  if (isa == Isa::avx512) {
    if (bf16) block_avx512<TB>(x, ldx, static_cast<const uint16_t*>(W), K, n0, n1, out, ldo);
    else block_avx512<TB>(x, ldx, static_cast<const float*>(W), K, n0, n1, out, ldo);
  } else if (isa == Isa::avx2) {
    if (bf16) block_avx2<TB>(x, ldx, static_cast<const uint16_t*>(W), K, n0, n1, out, ldo);
    else block_avx2<TB>(x, ldx, static_cast<const float*>(W), K, n0, n1, out, ldo);
  } else {
    block_scalar<TB>(x, ldx, W, bf16, K, n0, n1, out, ldo);
  }
}

void rows_block(Isa isa, const float* x, int64_t ldx, int64_t T, const void* W, bool bf16, int64_t K, int64_t n0,
                int64_t n1, float* out, int64_t ldo) {
  // Up to 8 rows of x per pass over the weights (a batched decode step of 8 sequences streams them once).
  for (int64_t t = 0; t < T; t += 8) {
    const int64_t tb = std::min<int64_t>(8, T - t);
    const float* xt = x + t * ldx;
    float* ot = out + t * ldo;
    switch (tb) {
      case 1: block<1>(isa, xt, ldx, W, bf16, K, n0, n1, ot, ldo); break;
      case 2: block<2>(isa, xt, ldx, W, bf16, K, n0, n1, ot, ldo); break;
      case 3: block<3>(isa, xt, ldx, W, bf16, K, n0, n1, ot, ldo); break;
      case 4: block<4>(isa, xt, ldx, W, bf16, K, n0, n1, ot, ldo); break;
      case 5: block<5>(isa, xt, ldx, W, bf16, K, n0, n1, ot, ldo); break;
      case 6: block<6>(isa, xt, ldx, W, bf16, K, n0, n1, ot, ldo); break;
      case 7: block<7>(isa, xt, ldx, W, bf16, K, n0, n1, ot, ldo); break;
      default: block<8>(isa, xt, ldx, W, bf16, K, n0, n1, ot, ldo); break;
    }
  }
}

// ---------------------------------------------------------------- Q8_0 weights (GGUF)
// A row of K weights is K / 32 blocks of 34 bytes: an f16 scale d, then 32 int8 q; weight = d * q. The GEMV keeps the
// blocks as they are (1.06 bytes per weight instead of 4 after dequantizing at load) and multiplies in f32: per block,
// sum_j x_j q_j, then scaled by d, so the result is the dequantized weights' dot product up to summation order.
constexpr int64_t kQ8Block = 34;

inline float q8_scale(const uint8_t* blk) {
  uint16_t h;
  std::memcpy(&h, blk, 2);
  return f16_to_f32(h);
}

void q8_rows_scalar(const float* x, int64_t ldx, int64_t T, const uint8_t* W, int64_t K, int64_t n0, int64_t n1,
                    float* out, int64_t ldo) {
  const int64_t nb = K / 32;
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t t = 0; t < T; ++t) {
      const float* xt = x + t * ldx;
      const uint8_t* row = W + n * nb * kQ8Block;
      float s = 0;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + b * kQ8Block;
        float bs = 0;
        for (int j = 0; j < 32; ++j) bs += xt[32 * b + j] * float(int8_t(blk[2 + j]));
        s += q8_scale(blk) * bs;
      }
      out[t * ldo + n] = s;
    }
}

// R weight rows x TB rows of x; the int8 -> f32 widening of a block is shared by the TB rows.
template <int TB, int R>
__attribute__((target("avx2,fma,f16c"))) void tile_q8_avx2(const float* x, int64_t ldx, const uint8_t* W, int64_t K,
                                                           int64_t n, float* out, int64_t ldo) {
  const int64_t nb = K / 32;
  __m256 acc[TB][R];
  for (int t = 0; t < TB; ++t)
    for (int r = 0; r < R; ++r) acc[t][r] = _mm256_setzero_ps();
  const uint8_t* w[R];
  for (int r = 0; r < R; ++r) w[r] = W + (n + r) * nb * kQ8Block;
  for (int64_t b = 0; b < nb; ++b) {
    __m256 q[R][4], d[R];
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = w[r] + b * kQ8Block;
      _mm_prefetch(reinterpret_cast<const char*>(blk) + 2048, _MM_HINT_T0);
      uint16_t h;
      std::memcpy(&h, blk, 2);
      d[r] = _mm256_cvtph_ps(_mm_set1_epi16(short(h)));
      for (int j = 0; j < 4; ++j)
        q[r][j] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * j))));
    }
    for (int t = 0; t < TB; ++t) {
      const float* xb = x + t * ldx + 32 * b;
      const __m256 x0 = _mm256_loadu_ps(xb), x1 = _mm256_loadu_ps(xb + 8), x2 = _mm256_loadu_ps(xb + 16),
                   x3 = _mm256_loadu_ps(xb + 24);
      for (int r = 0; r < R; ++r) {
        __m256 bs = _mm256_mul_ps(x0, q[r][0]);
        bs = _mm256_fmadd_ps(x1, q[r][1], bs);
        bs = _mm256_fmadd_ps(x2, q[r][2], bs);
        bs = _mm256_fmadd_ps(x3, q[r][3], bs);
        acc[t][r] = _mm256_fmadd_ps(bs, d[r], acc[t][r]);
      }
    }
  }
  for (int t = 0; t < TB; ++t)
    for (int r = 0; r < R; ++r) out[t * ldo + n + r] = hsum8(acc[t][r]);
}

template <int TB>
void block_q8_avx2(const float* x, int64_t ldx, const uint8_t* W, int64_t K, int64_t n0, int64_t n1, float* out,
                   int64_t ldo) {
  row_tiles<TB>(n0, n1, [&]<int R>(int64_t n) { tile_q8_avx2<TB, R>(x, ldx, W, K, n, out, ldo); });
}

void q8_rows(Isa isa, const float* x, int64_t ldx, int64_t T, const uint8_t* W, int64_t K, int64_t n0, int64_t n1,
             float* out, int64_t ldo) {
  if (isa == Isa::scalar) return q8_rows_scalar(x, ldx, T, W, K, n0, n1, out, ldo);
  for (int64_t t = 0; t < T; t += 4) {  // AVX-512 machines run the AVX2 kernel
    const int64_t tb = std::min<int64_t>(4, T - t);
    const float* xt = x + t * ldx;
    float* ot = out + t * ldo;
    switch (tb) {
      case 1: block_q8_avx2<1>(xt, ldx, W, K, n0, n1, ot, ldo); break;
      case 2: block_q8_avx2<2>(xt, ldx, W, K, n0, n1, ot, ldo); break;
      case 3: block_q8_avx2<3>(xt, ldx, W, K, n0, n1, ot, ldo); break;
      default: block_q8_avx2<4>(xt, ldx, W, K, n0, n1, ot, ldo); break;
    }
  }
}

// ---------------------------------------------------------------- activations
inline float act_scalar(float g, bool silu) {
  const float z = silu ? g : 1.5957691216057308f * (g + 0.044715f * g * g * g);  // 2 * sqrt(2 / pi) * (...)
  return g / (1.0f + std::exp(-z));
}

__attribute__((target("avx2,fma"))) inline __m256 exp_avx2(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.4426950408889634f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);  // ln2 split in two parts
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

__attribute__((target("avx2,fma"))) void act_row_avx2(const float* g, const float* u, float* o, int64_t F, bool silu) {
  int64_t f = 0;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; f + 8 <= F; f += 8) {
    const __m256 a = _mm256_loadu_ps(g + f);
    __m256 z = a;
    if (!silu) {
      const __m256 a3 = _mm256_mul_ps(_mm256_mul_ps(a, a), a);
      z = _mm256_mul_ps(_mm256_set1_ps(1.5957691216057308f), _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), a3, a));
    }
    const __m256 den = _mm256_add_ps(one, exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), z)));
    _mm256_storeu_ps(o + f, _mm256_mul_ps(_mm256_div_ps(a, den), _mm256_loadu_ps(u + f)));
  }
  for (; f < F; ++f) o[f] = act_scalar(g[f], silu) * u[f];
}

}  // namespace

void gated_act(Isa isa, int threads, const float* gu, int64_t ldg, float* out, int64_t ldo, int64_t T, int64_t F,
               bool silu) {
#pragma omp parallel for schedule(static) num_threads(threads) if (T * F > 65536)
  for (int64_t t = 0; t < T; ++t) {
    const float* g = gu + t * ldg;
    const float* u = g + F;
    float* o = out + t * ldo;
    if (isa != Isa::scalar) {
      act_row_avx2(g, u, o, F, silu);
    } else {
      for (int64_t f = 0; f < F; ++f) o[f] = act_scalar(g[f], silu) * u[f];
    }
  }
}

namespace {
// GEMV work split: output rows in blocks of a multiple of 4 rows, enough blocks to balance the threads; f(n0, n1) per
// block, on OpenMP's threads when the work (multiply-adds) is worth it.
template <typename F>
void parallel_row_blocks(int threads, int64_t N, int64_t work, F&& f) {
  const int64_t nb = std::max<int64_t>(1, std::min<int64_t>(int64_t(threads) * 8, (N + 15) / 16));
  const int64_t per = ((N + nb - 1) / nb + 3) / 4 * 4;
#pragma omp parallel for schedule(static) num_threads(threads) if (work > 32768)
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t n0 = b * per, n1 = std::min(N, n0 + per);
    if (n0 < n1) f(n0, n1);
  }
}
}  // namespace

void matmul(Isa isa, int threads, const float* x, int64_t ldx, int64_t T, const void* W, DType wtype, int64_t N,
            int64_t K, float* out, int64_t ldo, bool q8) {
  const bool bf16 = !q8 && wtype == DType::bf16;
  if (q8 && (T <= 8 || isa == Isa::scalar)) {
    const uint8_t* Wq = static_cast<const uint8_t*>(W);
    parallel_row_blocks(threads, N, N * K * T,
                        [&](int64_t n0, int64_t n1) { q8_rows(isa, x, ldx, T, Wq, K, n0, n1, out, ldo); });
    return;
  }
  if (bf16 && isa == Isa::avx2 && K % 16 == 0 && T <= 8) {
    thread_local std::vector<float> xp;
    xp.resize(size_t(T * K));
    permute_x16(x, ldx, T, K, xp.data());
    const float* xq = xp.data();
    const uint16_t* Wb = static_cast<const uint16_t*>(W);
    parallel_row_blocks(threads, N, N * K * T, [&](int64_t n0, int64_t n1) {
      for (int64_t t = 0; t < T; t += 8) {
        const int64_t tb = std::min<int64_t>(8, T - t);
        const float* xt = xq + t * K;
        float* ot = out + t * ldo;
        switch (tb) {
          case 1: block_avx2_bf16p<1>(xt, K, Wb, n0, n1, ot, ldo); break;
          case 2: block_avx2_bf16p<2>(xt, K, Wb, n0, n1, ot, ldo); break;
          case 3: block_avx2_bf16p<3>(xt, K, Wb, n0, n1, ot, ldo); break;
          case 4: block_avx2_bf16p<4>(xt, K, Wb, n0, n1, ot, ldo); break;
          case 5: block_avx2_bf16p<5>(xt, K, Wb, n0, n1, ot, ldo); break;
          case 6: block_avx2_bf16p<6>(xt, K, Wb, n0, n1, ot, ldo); break;
          case 7: block_avx2_bf16p<7>(xt, K, Wb, n0, n1, ot, ldo); break;
          default: block_avx2_bf16p<8>(xt, K, Wb, n0, n1, ot, ldo); break;
        }
      }
    });
    return;
  }
  if (T <= 8 || isa == Isa::scalar) {
    parallel_row_blocks(threads, N, N * K * T,
                        [&](int64_t n0, int64_t n1) { rows_block(isa, x, ldx, T, W, bf16, K, n0, n1, out, ldo); });
    return;
  }
  // GEMM (prefill): one thread pool. OpenBLAS here is the pthread build, and its threads competing with OpenMP's
  // spinning workers halved prefill on 2 cores (170 vs 375 tok/s, gemma-3-270m-sized, OMP_WAIT_POLICY unset vs
  // passive). So OpenMP splits the output columns and each thread runs a single-threaded sgemm on its slice; bf16
  // weights are widened per thread, a panel of rows at a time, into a thread-local buffer.
  openblas_set_num_threads(1);
  const int nt = int(std::max<int64_t>(1, std::min<int64_t>(threads, (N + 63) / 64)));
  const int64_t slice = ((N + nt - 1) / nt + 15) / 16 * 16;
#pragma omp parallel num_threads(nt)
  {
    const int64_t n_begin = std::min<int64_t>(N, int64_t(omp_get_thread_num()) * slice);
    const int64_t n_end = std::min<int64_t>(N, n_begin + slice);
    if (n_begin < n_end) {
      if (!bf16 && !q8) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(T), int(n_end - n_begin), int(K), 1.f, x, int(ldx),
                    static_cast<const float*>(W) + n_begin * K, int(K), 0.f, out + n_begin, int(ldo));
      } else {
        // Panels of ~1 MB of f32 weights: widened once, used by all T rows while in cache.
        const int64_t panel = std::max<int64_t>(16, (int64_t(1) << 18) / std::max<int64_t>(K, 1));
        thread_local std::vector<float> buf;
        buf.resize(size_t(std::min(panel, n_end - n_begin) * K));
        const uint16_t* Wb = static_cast<const uint16_t*>(W);
        for (int64_t n0 = n_begin; n0 < n_end; n0 += panel) {
          const int64_t nn = std::min(panel, n_end - n0);
          float* dst = buf.data();
          if (q8) {
            const uint8_t* src = static_cast<const uint8_t*>(W) + n0 * (K / 32) * kQ8Block;
            for (int64_t b = 0; b < nn * K / 32; ++b) {
              const uint8_t* blk = src + b * kQ8Block;
              const float dsc = q8_scale(blk);
              for (int j = 0; j < 32; ++j) dst[32 * b + j] = dsc * float(int8_t(blk[2 + j]));
            }
          } else {
            const uint16_t* src = Wb + n0 * K;
            for (int64_t i = 0; i < nn * K; ++i) {
              const uint32_t u = uint32_t(src[i]) << 16;
              std::memcpy(dst + i, &u, 4);
            }
          }
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(T), int(nn), int(K), 1.f, x, int(ldx), buf.data(),
                      int(K), 0.f, out + n0, int(ldo));
        }
      }
    }
  }
}

}  // namespace flashkit::engine::cpu
