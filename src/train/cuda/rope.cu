// RoPE forward and backward (HF rotate-half: element i pairs with i + head_dim / 2), on bf16 [T, heads, head_dim]
// rows of stride ld. One thread per (token, head, 8 consecutive pair indices) with 16-byte loads when
// head_dim / 2, the strides and the pointers are multiples of 8 elements / 16 bytes; one pair otherwise. The
// rotation comes from inv_freq (sincosf, full precision: angles reach thousands of radians; recomputed per head,
// which costs less than the memory traffic at head_dim 64) or from precomputed cos/sin tables. Floor: 4 bytes per
// element (read x, write out), plus the table rows (2-4 bytes per pair index per token, mostly L2 hits).
#include <type_traits>

#include "train/cuda/common.cuh"

namespace flashkit::train::cuda {

namespace {

constexpr int kThreads = 256;

// cos/sin of W consecutive pair indices i.. at position p.
struct FreqAngles {
  const float* inv_freq;
  template <int W>
  __device__ __forceinline__ bool get(int64_t p, int64_t i, float* c, float* s) const {
    float f[W];
    if constexpr (W == 8) ld8(inv_freq, i, f);
    else f[0] = inv_freq[i];
    const float pf = float(p);
#pragma unroll
    for (int k = 0; k < W; ++k) sincosf(pf * f[k], &s[k], &c[k]);  // the angle rounded to f32 first, as HF does
    return true;
  }
};
template <typename TT>  // float or uint16_t (bf16 bits)
struct TableAngles {
  const TT* cos;
  const TT* sin;
  int64_t half, max_pos;
  template <int W>
  __device__ __forceinline__ bool get(int64_t p, int64_t i, float* c, float* s) const {
    if (p < 0 || p >= max_pos) return false;
    if constexpr (W == 8) {
      ld8(cos, p * half + i, c);
      ld8(sin, p * half + i, s);
    } else {
      c[0] = ld1(cos, p * half + i), s[0] = ld1(sin, p * half + i);
    }
    return true;
  }
};

template <bool VEC, bool BWD, typename Angles>
__global__ void rope_kernel(const uint16_t* x, int64_t ldx, uint16_t* out, int64_t ldo, const int32_t* positions,
                            int64_t seq_len, Angles angles, int64_t T, int64_t heads, int64_t half) {
  constexpr int W = VEC ? 8 : 1;
  const int64_t per_head = half / W, per_row = heads * per_head, n = T * per_row;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n; idx += stride) {
    const int64_t t = idx / per_row, rem = idx - t * per_row, h = rem / per_head, i = (rem - h * per_head) * W;
    const int64_t p = positions ? int64_t(positions[t]) : t % seq_len;
    float c[W], s[W], x1[W], x2[W], o1[W], o2[W];
    const int64_t xb = t * ldx + h * 2 * half, ob = t * ldo + h * 2 * half;
    if constexpr (VEC) {
      ld8(x, xb + i, x1);
      ld8(x, xb + i + half, x2);
    } else {
      x1[0] = ld1(x, xb + i), x2[0] = ld1(x, xb + i + half);
    }
    if (!angles.template get<W>(p, i, c, s)) {  // a position outside the table: NaN, not a stray read
#pragma unroll
      for (int k = 0; k < W; ++k) c[k] = s[k] = __int_as_float(0x7fc00000);
    }
#pragma unroll
    for (int k = 0; k < W; ++k) {
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

// Checks shared by both variants; returns false when there is nothing to do.
bool check(const char* fn, bool bwd, const bf16* x, int64_t ldx, bf16* out, int64_t ldo, const int32_t* positions,
           int64_t seq_len, int64_t T, int64_t heads, int64_t head_dim) {
  need_size(T, fn, "T");
  need(heads >= 1 && heads <= 65536, fn, "heads must be in [1, 65536], got " + std::to_string(heads));
  need(head_dim >= 2 && head_dim <= 65536 && head_dim % 2 == 0, fn,
       "head_dim must be even and in [2, 65536], got " + std::to_string(head_dim));
  const int64_t width = heads * head_dim;
  need(ldx >= width, fn, "the row stride of the input must be >= heads * head_dim = " + std::to_string(width) +
                             ", got " + std::to_string(ldx));
  need(ldo >= width, fn, "the row stride of the output must be >= heads * head_dim = " + std::to_string(width) +
                             ", got " + std::to_string(ldo));
  need(positions || seq_len >= 1, fn, "seq_len must be >= 1 when positions is null, got " + std::to_string(seq_len));
  if (T == 0) return false;
  need_ptr(x, fn, bwd ? "dy" : "x");
  need_ptr(out, fn, bwd ? "dx" : "out");
  return true;
}

template <bool BWD, typename Angles>
void launch(const char* fn, const bf16* x, int64_t ldx, bf16* out, int64_t ldo, const int32_t* positions,
            int64_t seq_len, const Angles& angles, bool angles_vec, int64_t T, int64_t heads, int64_t head_dim,
            cudaStream_t stream) {
  const int64_t half = head_dim / 2;
  const bool vec = angles_vec && half % 8 == 0 && ldx % 8 == 0 && ldo % 8 == 0 && aligned16(x) && aligned16(out);
  const int64_t work = T * heads * (vec ? half / 8 : half);
  const unsigned grid = grid_for(work, kThreads, 1 << 16);
  if (vec) rope_kernel<true, BWD><<<grid, kThreads, 0, stream>>>(bits(x), ldx, bits(out), ldo, positions, seq_len, angles, T, heads, half);
  else rope_kernel<false, BWD><<<grid, kThreads, 0, stream>>>(bits(x), ldx, bits(out), ldo, positions, seq_len, angles, T, heads, half);
  check_launch(fn);
}

template <bool BWD>
void rope_freq(const char* fn, const bf16* x, int64_t ldx, bf16* out, int64_t ldo, const int32_t* positions,
               int64_t seq_len, const float* inv_freq, int64_t T, int64_t heads, int64_t head_dim,
               cudaStream_t stream) {
  if (!check(fn, BWD, x, ldx, out, ldo, positions, seq_len, T, heads, head_dim)) return;
  need_ptr(inv_freq, fn, "inv_freq");
  launch<BWD>(fn, x, ldx, out, ldo, positions, seq_len, FreqAngles{inv_freq}, aligned16(inv_freq), T, heads,
              head_dim, stream);
}

template <bool BWD, typename TT>
void rope_table(const char* fn, const bf16* x, int64_t ldx, bf16* out, int64_t ldo, const int32_t* positions,
                int64_t seq_len, const TT* cos, const TT* sin, int64_t max_pos, int64_t T, int64_t heads,
                int64_t head_dim, cudaStream_t stream) {
  if (!check(fn, BWD, x, ldx, out, ldo, positions, seq_len, T, heads, head_dim)) return;
  need(max_pos >= 1, fn, "max_pos must be >= 1, got " + std::to_string(max_pos));
  need(positions || seq_len <= max_pos, fn, "seq_len (" + std::to_string(seq_len) + ") exceeds the table's max_pos (" +
                                                std::to_string(max_pos) + ")");
  need_ptr(cos, fn, "cos");
  need_ptr(sin, fn, "sin");
  using Bits = std::conditional_t<std::is_same_v<TT, float>, float, uint16_t>;
  const TableAngles<Bits> angles{reinterpret_cast<const Bits*>(cos), reinterpret_cast<const Bits*>(sin), head_dim / 2,
                                 max_pos};
  launch<BWD>(fn, x, ldx, out, ldo, positions, seq_len, angles, aligned16(cos) && aligned16(sin), T, heads, head_dim,
              stream);
}

}  // namespace

void rope_fwd(const bf16* x, int64_t ldx, bf16* out, int64_t ldo, const int32_t* positions, int64_t seq_len,
              const float* inv_freq, int64_t T, int64_t heads, int64_t head_dim, cudaStream_t stream) {
  rope_freq<false>("rope_fwd", x, ldx, out, ldo, positions, seq_len, inv_freq, T, heads, head_dim, stream);
}
void rope_bwd(const bf16* dy, int64_t lddy, bf16* dx, int64_t lddx, const int32_t* positions, int64_t seq_len,
              const float* inv_freq, int64_t T, int64_t heads, int64_t head_dim, cudaStream_t stream) {
  rope_freq<true>("rope_bwd", dy, lddy, dx, lddx, positions, seq_len, inv_freq, T, heads, head_dim, stream);
}
void rope_fwd_table(const bf16* x, int64_t ldx, bf16* out, int64_t ldo, const int32_t* positions, int64_t seq_len,
                    const bf16* cos, const bf16* sin, int64_t max_pos, int64_t T, int64_t heads, int64_t head_dim,
              cudaStream_t stream) {
  rope_table<false>("rope_fwd_table", x, ldx, out, ldo, positions, seq_len, cos, sin, max_pos, T, heads, head_dim, stream);
}
void rope_bwd_table(const bf16* dy, int64_t lddy, bf16* dx, int64_t lddx, const int32_t* positions, int64_t seq_len,
                    const bf16* cos, const bf16* sin, int64_t max_pos, int64_t T, int64_t heads, int64_t head_dim,
              cudaStream_t stream) {
  rope_table<true>("rope_bwd_table", dy, lddy, dx, lddx, positions, seq_len, cos, sin, max_pos, T, heads, head_dim, stream);
}
void rope_fwd_table(const bf16* x, int64_t ldx, bf16* out, int64_t ldo, const int32_t* positions, int64_t seq_len,
                    const float* cos, const float* sin, int64_t max_pos, int64_t T, int64_t heads, int64_t head_dim,
              cudaStream_t stream) {
  rope_table<false>("rope_fwd_table", x, ldx, out, ldo, positions, seq_len, cos, sin, max_pos, T, heads, head_dim, stream);
}
void rope_bwd_table(const bf16* dy, int64_t lddy, bf16* dx, int64_t lddx, const int32_t* positions, int64_t seq_len,
                    const float* cos, const float* sin, int64_t max_pos, int64_t T, int64_t heads, int64_t head_dim,
              cudaStream_t stream) {
  rope_table<true>("rope_bwd_table", dy, lddy, dx, lddx, positions, seq_len, cos, sin, max_pos, T, heads, head_dim, stream);
}

}  // namespace flashkit::train::cuda
