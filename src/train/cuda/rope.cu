// RoPE forward and backward (HF rotate-half: element i pairs with i + head_dim / 2), on bf16 [T, heads, head_dim]
// rows of stride ld. One thread per (token, head, 8 consecutive pair indices) with 16-byte loads when
// head_dim / 2, the strides and the pointers are multiples of 8 elements / 16 bytes; one pair otherwise. The angle
// is recomputed per head (sincosf, full precision: angles reach thousands of radians), which costs less than the
// memory traffic at head_dim 64. Floor: 4 bytes per element (read x, write out).
#include "train/cuda/common.cuh"

namespace flashkit::train::cuda {

namespace {

constexpr int kThreads = 256;

template <bool VEC, bool BWD>
__global__ void rope_kernel(const uint16_t* x, int64_t ldx, uint16_t* out, int64_t ldo, const int32_t* positions,
                            const float* inv_freq, int64_t T, int64_t heads, int64_t half) {
  constexpr int W = VEC ? 8 : 1;
  const int64_t per_head = half / W, per_row = heads * per_head, n = T * per_row;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n; idx += stride) {
    const int64_t t = idx / per_row, rem = idx - t * per_row, h = rem / per_head, i = (rem - h * per_head) * W;
    const float p = float(positions[t]);
    float c[W], s[W], f[W], x1[W], x2[W], o1[W], o2[W];
    const int64_t xb = t * ldx + h * 2 * half, ob = t * ldo + h * 2 * half;
    if constexpr (VEC) {
      ld8(inv_freq, i, f);
      ld8(x, xb + i, x1);
      ld8(x, xb + i + half, x2);
    } else {
      f[0] = inv_freq[i], x1[0] = ld1(x, xb + i), x2[0] = ld1(x, xb + i + half);
    }
#pragma unroll
    for (int k = 0; k < W; ++k) {
      sincosf(p * f[k], &s[k], &c[k]);  // the angle rounded to f32 first, as HF computes it
      if constexpr (BWD) {
        o1[k] = x1[k] * c[k] + x2[k] * s[k];
        o2[k] = x2[k] * c[k] - x1[k] * s[k];
      } else {
        o1[k] = x1[k] * c[k] - x2[k] * s[k];
        o2[k] = x2[k] * c[k] + x1[k] * s[k];
      }
    }
    // Loads of this (token, head, pair slice) all precede its stores, so out may alias x.
    if constexpr (VEC) {
      st8(out, ob + i, o1);
      st8(out, ob + i + half, o2);
    } else {
      st1(out, ob + i, o1[0]);
      st1(out, ob + i + half, o2[0]);
    }
  }
}

template <bool BWD>
void rope(const char* fn, const bf16* x, int64_t ldx, bf16* out, int64_t ldo, const int32_t* positions,
          const float* inv_freq, int64_t T, int64_t heads, int64_t head_dim, cudaStream_t stream) {
  need_size(T, fn, "T");
  need(heads >= 1 && heads <= 65536, fn, "heads must be in [1, 65536], got " + std::to_string(heads));
  need(head_dim >= 2 && head_dim <= 65536 && head_dim % 2 == 0, fn,
       "head_dim must be even and in [2, 65536], got " + std::to_string(head_dim));
  const int64_t width = heads * head_dim;
  need(ldx >= width, fn, "the row stride of the input must be >= heads * head_dim = " + std::to_string(width) +
                             ", got " + std::to_string(ldx));
  need(ldo >= width, fn, "the row stride of the output must be >= heads * head_dim = " + std::to_string(width) +
                             ", got " + std::to_string(ldo));
  if (T == 0) return;
  need_ptr(x, fn, BWD ? "dy" : "x");
  need_ptr(out, fn, BWD ? "dx" : "out");
  need_ptr(positions, fn, "positions");
  need_ptr(inv_freq, fn, "inv_freq");
  const int64_t half = head_dim / 2;
  const bool vec = half % 8 == 0 && ldx % 8 == 0 && ldo % 8 == 0 && aligned16(x) && aligned16(out) && aligned16(inv_freq);
  const int64_t work = T * heads * (vec ? half / 8 : half);
  const unsigned grid = grid_for(work, kThreads, 1 << 16);
  if (vec) rope_kernel<true, BWD><<<grid, kThreads, 0, stream>>>(bits(x), ldx, bits(out), ldo, positions, inv_freq, T, heads, half);
  else rope_kernel<false, BWD><<<grid, kThreads, 0, stream>>>(bits(x), ldx, bits(out), ldo, positions, inv_freq, T, heads, half);
  check_launch(fn);
}

}  // namespace

void rope_fwd(const bf16* x, int64_t ldx, bf16* out, int64_t ldo, const int32_t* positions, const float* inv_freq,
              int64_t T, int64_t heads, int64_t head_dim, cudaStream_t stream) {
  rope<false>("rope_fwd", x, ldx, out, ldo, positions, inv_freq, T, heads, head_dim, stream);
}
void rope_bwd(const bf16* dy, int64_t lddy, bf16* dx, int64_t lddx, const int32_t* positions, const float* inv_freq,
              int64_t T, int64_t heads, int64_t head_dim, cudaStream_t stream) {
  rope<true>("rope_bwd", dy, lddy, dx, lddx, positions, inv_freq, T, heads, head_dim, stream);
}

}  // namespace flashkit::train::cuda
