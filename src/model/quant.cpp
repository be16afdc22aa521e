// Block dequantization of GGUF's quantized types; the layouts are summarised in quant.hpp.
#include "model/quant.hpp"

#include <cstring>

#include "flashkit/dtype.hpp"

namespace flashkit::model {
namespace {

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

void q8_0_block(const uint8_t* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < 32; ++j) y[j] = d * float(int8_t(b[2 + j]));
}

void q4_0_block(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float(int(qs[j] & 15) - 8);
    y[j + 16] = d * float(int(qs[j] >> 4) - 8);
  }
}

// Q4_K / Q5_K: 12 bytes hold eight 6-bit scales and eight 6-bit mins. Sub-blocks 0..3 keep theirs in the low 6 bits
// of bytes 0..3 (scale) and 4..7 (min); sub-blocks 4..7 take their low 4 bits from the nibbles of bytes 8..11 and
// their top 2 bits from the top 2 bits of bytes 0..3 (scale) and 4..7 (min).
inline void k_scale_min(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K: each group of 64 values is 32 bytes of qs: the low nibbles are sub-block 2g, the high nibbles 2g + 1;
// value = d * scale * q - dmin * min.
void q4_k_block(const uint8_t* b, float* y) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t* s = b + 4;
  const uint8_t* qs = b + 16;
  for (int g = 0; g < 4; ++g) {
    int sc0, m0, sc1, m1;
    k_scale_min(s, 2 * g, &sc0, &m0);
    k_scale_min(s, 2 * g + 1, &sc1, &m1);
    const float d0 = d * float(sc0), o0 = dmin * float(m0), d1 = d * float(sc1), o1 = dmin * float(m1);
    const uint8_t* q = qs + 32 * g;
    for (int l = 0; l < 32; ++l) {
      y[64 * g + l] = d0 * float(q[l] & 15) - o0;
      y[64 * g + 32 + l] = d1 * float(q[l] >> 4) - o1;
    }
  }
}

// Q5_K: as Q4_K, plus a fifth bit per value from qh: sub-block k (0..7) reads bit k of qh[l].
void q5_k_block(const uint8_t* b, float* y) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t* s = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int g = 0; g < 4; ++g) {
    int sc0, m0, sc1, m1;
    k_scale_min(s, 2 * g, &sc0, &m0);
    k_scale_min(s, 2 * g + 1, &sc1, &m1);
    const float d0 = d * float(sc0), o0 = dmin * float(m0), d1 = d * float(sc1), o1 = dmin * float(m1);
    const uint8_t* q = qs + 32 * g;
    for (int l = 0; l < 32; ++l) {
      const int lo = (q[l] & 15) | (((qh[l] >> (2 * g)) & 1) << 4);
      const int hi = (q[l] >> 4) | (((qh[l] >> (2 * g + 1)) & 1) << 4);
      y[64 * g + l] = d0 * float(lo) - o0;
      y[64 * g + 32 + l] = d1 * float(hi) - o1;
    }
  }
}

// Q6_K: two halves of 128 values; in half h, value 32 * i + l (i = 0..3, l = 0..31) has its low 4 bits in
// ql[64h + l + 32 * (i & 1)] (low nibble for i < 2, high for i >= 2), its top 2 bits at bits 2i of qh[32h + l],
// and is offset by -32; the int8 scale of its 16-value sub-block is scales[8h + 2i + l / 16].
void q6_k_block(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half_at(b + 208);
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 4; ++i)
      for (int l = 0; l < 32; ++l) {
        const uint8_t lowbyte = ql[64 * h + l + 32 * (i & 1)];
        const int low = i < 2 ? (lowbyte & 15) : (lowbyte >> 4);
        const int q = (low | (((qh[32 * h + l] >> (2 * i)) & 3) << 4)) - 32;
        y[128 * h + 32 * i + l] = d * float(sc[8 * h + 2 * i + l / 16]) * float(q);
      }
}

}  // namespace

bool is_quantized(WeightType t) {
  switch (t) {
    case WeightType::q8_0:
    case WeightType::q4_0:
    case WeightType::q4_k:
    case WeightType::q5_k:
    case WeightType::q6_k: return true;
    default: return false;
  }
}

QuantBlock quant_block(WeightType t) {
  switch (t) {
    case WeightType::f32: return {1, 4};
    case WeightType::f16:
    case WeightType::bf16: return {1, 2};
    case WeightType::q8_0: return {32, 34};
    case WeightType::q4_0: return {32, 18};
    case WeightType::q4_k: return {256, 144};
    case WeightType::q5_k: return {256, 176};
    case WeightType::q6_k: return {256, 210};
  }
  return {1, 1};
}

void dequantize_blocks(WeightType t, const uint8_t* src, int64_t blocks, float* out) {
  const QuantBlock qb = quant_block(t);
  void (*one)(const uint8_t*, float*) = nullptr;
  switch (t) {
    case WeightType::q8_0: one = q8_0_block; break;
    case WeightType::q4_0: one = q4_0_block; break;
    case WeightType::q4_k: one = q4_k_block; break;
    case WeightType::q5_k: one = q5_k_block; break;
    case WeightType::q6_k: one = q6_k_block; break;
    default: return;
  }
  for (int64_t b = 0; b < blocks; ++b) one(src + b * qb.bytes, out + b * qb.values);
}

}  // namespace flashkit::model
