// Test-side GGUF block packer, written from the format's definition value by value (not from the library's
// loops): random logical parameters (f16 scales, sub-block scales/mins, integer quants) are packed into the block
// bytes, and the values they stand for are computed in double. The library's dequantization must give those values.
#pragma once
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "flashkit/dtype.hpp"

namespace fk_test {

enum class QType { q8_0, q4_0, q4_k, q5_k, q6_k };
inline int qtype_values(QType t) { return t == QType::q8_0 || t == QType::q4_0 ? 32 : 256; }
inline int qtype_bytes(QType t) {
  switch (t) {
    case QType::q8_0: return 34;
    case QType::q4_0: return 18;
    case QType::q4_k: return 144;
    case QType::q5_k: return 176;
    case QType::q6_k: return 210;
  }
  return 0;
}
inline uint32_t qtype_ggml(QType t) {
  switch (t) {
    case QType::q8_0: return 8;
    case QType::q4_0: return 2;
    case QType::q4_k: return 12;
    case QType::q5_k: return 13;
    case QType::q6_k: return 14;
  }
  return 0;
}
inline const char* qtype_name(QType t) {
  static const char* n[] = {"Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K"};
  return n[int(t)];
}

// A random f16 scale of magnitude about `mag` (positive); returns its bits, `value` gets the f16's exact value.
inline uint16_t random_half(std::mt19937& rng, double mag, double* value) {
  std::uniform_real_distribution<float> u(0.25f, 1.0f);
  const uint16_t h = flashkit::f32_to_f16(float(mag) * u(rng));
  *value = flashkit::f16_to_f32(h);
  return h;
}

// Appends one random block of `t` to `bytes` and its values (in order) to `values`.
inline void pack_random_block(QType t, std::mt19937& rng, std::string& bytes, std::vector<double>& values) {
  std::vector<uint8_t> b(size_t(qtype_bytes(t)), 0);
  std::vector<double> v(size_t(qtype_values(t)));
  auto put_half = [&](size_t at, uint16_t h) { std::memcpy(&b[at], &h, 2); };
  auto rnd = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  double d = 0, dmin = 0;
  switch (t) {
    case QType::q8_0: {
      put_half(0, random_half(rng, 0.02, &d));
      for (int i = 0; i < 32; ++i) {
        const int q = rnd(-128, 127);
        b[2 + size_t(i)] = uint8_t(int8_t(q));
        v[size_t(i)] = d * q;
      }
      break;
    }
    case QType::q4_0: {  // value i < 16: low nibble of byte i; i >= 16: high nibble of byte i - 16; offset -8
      put_half(0, random_half(rng, 0.1, &d));
      for (int i = 0; i < 32; ++i) {
        const int q = rnd(0, 15);
        b[2 + size_t(i % 16)] |= uint8_t(i < 16 ? q : q << 4);
        v[size_t(i)] = d * (q - 8);
      }
      break;
    }
    case QType::q4_k:
    case QType::q5_k: {
      put_half(0, random_half(rng, 0.01, &d));
      put_half(2, random_half(rng, 0.01, &dmin));
      int sc[8], mn[8];
      for (int j = 0; j < 8; ++j) sc[j] = rnd(0, 63), mn[j] = rnd(0, 63);
      uint8_t* s = &b[4];  // 12 bytes: sub-blocks 0..3 in the low 6 bits of s[j] / s[j + 4]; 4..7 split 4 + 2 bits
      for (int j = 0; j < 4; ++j) {
        s[j] = uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = uint8_t(mn[j] | ((mn[j + 4] >> 4) << 6));
        s[j + 8] = uint8_t((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
      }
      const bool five = t == QType::q5_k;
      uint8_t* qh = &b[16];
      uint8_t* qs = &b[five ? 48 : 16];
      for (int i = 0; i < 256; ++i) {
        const int q = five ? rnd(0, 31) : rnd(0, 15);
        const int g = i / 64, r = i % 64;  // 64 values share 32 bytes: low nibbles first, then high nibbles
        qs[32 * g + r % 32] |= uint8_t(r < 32 ? (q & 15) : (q & 15) << 4);
        if (five) qh[i % 32] |= uint8_t((q >> 4) << (i / 32));  // 5th bit of value i: bit i/32 of qh[i % 32]
        const int sub = i / 32;
        v[size_t(i)] = d * sc[sub] * q - dmin * mn[sub];
      }
      break;
    }
    case QType::q6_k: {
      put_half(208, random_half(rng, 0.002, &d));
      int sc[16];
      for (int j = 0; j < 16; ++j) {
        sc[j] = rnd(-128, 127);
        b[192 + size_t(j)] = uint8_t(int8_t(sc[j]));
      }
      for (int i = 0; i < 256; ++i) {
        const int q = rnd(0, 63);
        const int h = i / 128, k = (i % 128) / 32, l = i % 32;  // half, quarter, lane
        b[size_t(64 * h + l + 32 * (k & 1))] |= uint8_t(k < 2 ? (q & 15) : (q & 15) << 4);
        b[size_t(128 + 32 * h + l)] |= uint8_t((q >> 4) << (2 * k));
        v[size_t(i)] = d * sc[i / 16] * (q - 32);
      }
      break;
    }
  }
  bytes.append(reinterpret_cast<const char*>(b.data()), b.size());
  values.insert(values.end(), v.begin(), v.end());
}

}  // namespace fk_test
