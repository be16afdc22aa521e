// One lane's share of a row . x dot product over GGUF blocks (layouts: model/quant.hpp), the inner loop of the
// quantized decode GEMV (gemv_quant.cu). Host-and-device code: the CPU tests run it lane by lane
// (tests/engine/test_quant_lanes.cpp) against f64, so the index arithmetic is checked without a GPU.
//
// Lane mapping: a warp (32 lanes) walks one row; each lane takes 8 values per step, loaded as whole 16- or 32-bit
// words (one coalesced 64..128-byte access per warp instead of one byte per lane), applies the block scale once per
// group of values, and folds the K-quants' minimum through a sum of x (sum x (d s q - m) = d s (x . q) - m sum x):
//   Q4_K / Q5_K  one block (256 values) per warp step; lane l reads qs word l: 4 values of sub-block 2g (low
//                nibbles) and 4 of 2g + 1 (high nibbles), g = l / 8. Q5_K adds bit s of qh[v % 32].
//   Q6_K         one block per step; lane l reads 4 ql bytes (two 16-bit loads: the 210-byte blocks are only
//                2-byte aligned) holding 4 values of quarter k and 4 of k + 2, and the matching qh bytes.
//   Q4_0         8 blocks per step, 4 lanes per block, 4 qs bytes each (values j and j + 16).
//   Q8_0         4 blocks per step, 8 lanes per block, 4 quants each.
// Alignment: blocks of Q4_K / Q5_K must be 4-byte aligned (the backend aligns every segment to 16 bytes); the others
// need 2 bytes, which every block offset gives.
#pragma once
#include <cstdint>
#include <cstring>

#include "model/weights.hpp"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define FK_QHD __host__ __device__ __forceinline__
#define FK_QUNROLL _Pragma("unroll")
#define FK_QUNROLL_BLOCKS _Pragma("unroll 4")  // a few blocks' loads in flight per warp
#else
#include "flashkit/dtype.hpp"
#define FK_QHD inline
#define FK_QUNROLL
#define FK_QUNROLL_BLOCKS
#endif

namespace flashkit::engine::cuda::quant {

using model::WeightType;

template <WeightType TYPE>
struct Layout;
template <>
struct Layout<WeightType::q8_0> {
  static constexpr int kValues = 32, kBytes = 34, kBlocksPerStep = 4;
};
template <>
struct Layout<WeightType::q4_0> {
  static constexpr int kValues = 32, kBytes = 18, kBlocksPerStep = 8;
};
template <>
struct Layout<WeightType::q4_k> {
  static constexpr int kValues = 256, kBytes = 144, kBlocksPerStep = 1;
};
template <>
struct Layout<WeightType::q5_k> {
  static constexpr int kValues = 256, kBytes = 176, kBlocksPerStep = 1;
};
template <>
struct Layout<WeightType::q6_k> {
  static constexpr int kValues = 256, kBytes = 210, kBlocksPerStep = 1;
};

FK_QHD uint32_t ld_u16(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint16_t*>(p);
#else
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
#endif
}
FK_QHD uint32_t ld_u32(const uint8_t* p) {  // p 4-byte aligned
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#endif
}
// Four bytes from a 2-byte aligned address.
FK_QHD uint32_t ld_u32_a2(const uint8_t* p) { return ld_u16(p) | (ld_u16(p + 2) << 16); }

FK_QHD float half_at(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(static_cast<unsigned short>(ld_u16(p))));
#else
  return flashkit::f16_to_f32(uint16_t(ld_u16(p)));
#endif
}

// Q4_K / Q5_K: sub-block j's 6-bit scale and min from the 12 packed bytes (model/quant.cpp explains the packing).
FK_QHD void k_scale_min(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Byte j (0..3) of a word.
FK_QHD int byte_of(uint32_t w, int j) { return int((w >> (8 * j)) & 255u); }

// Value k of row t of x as the dot product sees it: x itself, or with NORM (the RMSNorm prologue) x * nw[k], with
// x^2 summed into sq[t] (every value of a row is read by exactly one lane of the warp, so the warp's sum of sq[t] is
// the row's sum of squares; the norm's scalar 1 / rms is applied to the finished dot product).
template <bool NORM>
struct XIn {
  const float* x;
  int64_t ldx;
  const float* nw = nullptr;  // NORM: the norm weight [K]
  float* sq = nullptr;        // NORM: [T] partial sums of x^2
  FK_QHD float operator()(int t, int64_t k) const {
    const float v = x[t * ldx + k];
    if constexpr (NORM) {
      sq[t] += v * v;
      return v * nw[k];
    } else {
      return v;
    }
  }
};

// acc[t] += lane `lane`'s share of sum_k xin(t, k) * dequant(row)[k] over the row's K values (nb blocks).
template <WeightType TYPE, int T, bool NORM>
FK_QHD void lane_dot(const uint8_t* row, int64_t nb, const XIn<NORM>& xin, int lane, float* acc) {
  using L = Layout<TYPE>;
  if constexpr (TYPE == WeightType::q4_k || TYPE == WeightType::q5_k) {
    constexpr bool kFive = TYPE == WeightType::q5_k;
    const int g = lane / 8, m = lane % 8, s0 = 2 * g, s1 = 2 * g + 1;
    FK_QUNROLL_BLOCKS
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + b * L::kBytes;
      const uint32_t qs = ld_u32(blk + (kFive ? 48 : 16) + 32 * g + 4 * m);
      uint32_t qh = 0;
      if constexpr (kFive) qh = ld_u32(blk + 16 + 4 * m);
      int sc0, mn0, sc1, mn1;
      k_scale_min(blk + 4, s0, &sc0, &mn0);
      k_scale_min(blk + 4, s1, &sc1, &mn1);
      const float d = half_at(blk), dmin = half_at(blk + 2);
      const float a0 = d * float(sc0), a1 = d * float(sc1), b0 = dmin * float(mn0), b1 = dmin * float(mn1);
      const int64_t k0 = b * 256 + 64 * g + 4 * m;  // low nibbles: values k0 .. k0 + 3; high: k0 + 32 ..
      FK_QUNROLL
      for (int t = 0; t < T; ++t) {
        float dot0 = 0, dot1 = 0, xs0 = 0, xs1 = 0;
        FK_QUNROLL
        for (int j = 0; j < 4; ++j) {
          int q0 = byte_of(qs, j) & 15, q1 = byte_of(qs, j) >> 4;
          if constexpr (kFive) {
            q0 |= ((byte_of(qh, j) >> s0) & 1) << 4;
            q1 |= ((byte_of(qh, j) >> s1) & 1) << 4;
          }
          const float x0 = xin(t, k0 + j), x1 = xin(t, k0 + 32 + j);
          dot0 += x0 * float(q0), xs0 += x0;
          dot1 += x1 * float(q1), xs1 += x1;
        }
        acc[t] += a0 * dot0 - b0 * xs0 + a1 * dot1 - b1 * xs1;
      }
    }
  } else if constexpr (TYPE == WeightType::q6_k) {
    const int h = lane / 16, p = 4 * (lane % 16);  // ql bytes 64h + p .. + 3
    const int klo = p < 32 ? 0 : 1, khi = klo + 2, li = p % 32;
    FK_QUNROLL_BLOCKS
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + b * L::kBytes;
      const uint32_t ql = ld_u32_a2(blk + 64 * h + p);
      const uint32_t qh = ld_u32_a2(blk + 128 + 32 * h + li);
      const int i_lo = 128 * h + 32 * klo + li, i_hi = 128 * h + 32 * khi + li;
      const float d = half_at(blk + 208);
      const float a_lo = d * float(int8_t(blk[192 + i_lo / 16])), a_hi = d * float(int8_t(blk[192 + i_hi / 16]));
      FK_QUNROLL
      for (int t = 0; t < T; ++t) {
        const int64_t kb = b * 256;
        float dlo = 0, dhi = 0;
        FK_QUNROLL
        for (int j = 0; j < 4; ++j) {
          const int hb = byte_of(qh, j);
          const int qlo = ((byte_of(ql, j) & 15) | (((hb >> (2 * klo)) & 3) << 4)) - 32;
          const int qhi = ((byte_of(ql, j) >> 4) | (((hb >> (2 * khi)) & 3) << 4)) - 32;
          dlo += xin(t, kb + i_lo + j) * float(qlo);
          dhi += xin(t, kb + i_hi + j) * float(qhi);
        }
        acc[t] += a_lo * dlo + a_hi * dhi;
      }
    }
  } else if constexpr (TYPE == WeightType::q4_0) {
    const int sub = lane / 4, p = 4 * (lane % 4);  // block `sub` of the step, qs bytes p .. p + 3
    FK_QUNROLL_BLOCKS
    for (int64_t b = sub; b < nb; b += L::kBlocksPerStep) {
      const uint8_t* blk = row + b * L::kBytes;
      const uint32_t qs = ld_u32_a2(blk + 2 + p);
      const float d = half_at(blk);
      FK_QUNROLL
      for (int t = 0; t < T; ++t) {
        const int64_t kb = b * 32 + p;
        float dot = 0, xs = 0;
        FK_QUNROLL
        for (int j = 0; j < 4; ++j) {
          const float x0 = xin(t, kb + j), x1 = xin(t, kb + 16 + j);
          dot += x0 * float(byte_of(qs, j) & 15) + x1 * float(byte_of(qs, j) >> 4);
          xs += x0 + x1;
        }
        acc[t] += d * (dot - 8.0f * xs);
      }
    }
  } else {  // Q8_0
    const int sub = lane / 8, p = 4 * (lane % 8);
    FK_QUNROLL_BLOCKS
    for (int64_t b = sub; b < nb; b += L::kBlocksPerStep) {
      const uint8_t* blk = row + b * L::kBytes;
      const uint32_t qs = ld_u32_a2(blk + 2 + p);
      const float d = half_at(blk);
      FK_QUNROLL
      for (int t = 0; t < T; ++t) {
        const int64_t kb = b * 32 + p;
        float dot = 0;
        FK_QUNROLL
        for (int j = 0; j < 4; ++j) dot += xin(t, kb + j) * float(int8_t(byte_of(qs, j)));
        acc[t] += d * dot;
      }
    }
  }
}

// The plain dot product (no norm).
template <WeightType TYPE, int T>
FK_QHD void lane_dot(const uint8_t* row, int64_t nb, const float* x, int64_t ldx, int lane, float* acc) {
  lane_dot<TYPE, T, false>(row, nb, XIn<false>{x, ldx}, lane, acc);
}

}  // namespace flashkit::engine::cuda::quant

#undef FK_QHD
#undef FK_QUNROLL
#undef FK_QUNROLL_BLOCKS
