// GGUF block-quantized weight types (llama.cpp's ggml block layouts), dequantized one block at a time so that
// kernels can expand a block into registers / L1 and never materialise the whole matrix in f32.
//
// Layouts (little-endian, f16 = IEEE half):
//   Q8_0  32 values, 34 bytes: f16 d, int8 q[32];                       w = d * q
//   Q4_0  32 values, 18 bytes: f16 d, u8 qs[16];                        w[j] = d * ((qs[j] & 15) - 8),
//                                                                       w[j + 16] = d * ((qs[j] >> 4) - 8)
//   Q4_K 256 values, 144 bytes: f16 d, f16 dmin, u8 scales[12], u8 qs[128]
//   Q5_K 256 values, 176 bytes: f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]
//   Q6_K 256 values, 210 bytes: u8 ql[128], u8 qh[64], int8 scales[16], f16 d
// K-quants split a block into sub-blocks (Q4_K/Q5_K: 8 of 32 values with a 6-bit scale and a 6-bit min packed into
// `scales`; Q6_K: 16 of 16 values with an int8 scale); see quant.cpp for the bit positions.
#pragma once
#include <cstddef>
#include <cstdint>

#include "model/weights.hpp"

namespace flashkit::model {

struct QuantBlock {
  int64_t values = 1;  // values per block (1 for the plain float types)
  int64_t bytes = 0;   // bytes per block
};

// True for the block-quantized types (q8_0, q4_0, q4_k, q5_k, q6_k).
bool is_quantized(WeightType t);
// Block geometry of a type; plain types give {1, element size}.
QuantBlock quant_block(WeightType t);
// Expands `blocks` consecutive blocks of quantized type `t` at `src` into blocks * quant_block(t).values floats.
void dequantize_blocks(WeightType t, const uint8_t* src, int64_t blocks, float* out);

}  // namespace flashkit::model
