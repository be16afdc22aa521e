// Decode GEMV over GGUF block-quantized weights on CUDA: out[t, n] = sum_k x[t, k] * dequant(W)[n, k] for T <= 8
// rows of f32 x, W kept as its blocks on the device (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K; layouts in model/quant.hpp).
// One warp per output row walks the row's blocks; each lane expands the values it needs straight into registers
// (no dequantized copy anywhere; the lane mapping is quant_dot.cuh) and the warp reduces at the end. Beside it, the two other kernels a backend that
// keeps the blocks needs: a row-panel dequantization into bf16 (prefill: the panel feeds cuBLAS) and the embedding
// gather from a quantized table. Plain C++ declarations, as kernels.hpp.
#pragma once
#include <cstdint>

#include "engine/cuda/kernels.hpp"
#include "model/weights.hpp"

typedef struct CUstream_st* cudaStream_t;

namespace flashkit::engine::cuda {

// x: [T, K] f32 rows of stride ldx; W: N rows of K / block-size blocks of `type`; out: [T, N] f32, stride ldo.
// 1 <= T <= 8 and K a multiple of the block size (the caller checks); W 4-byte aligned for Q4_K / Q5_K, 2-byte for
// the others; throws flashkit::Error on a failed launch.
// What a decode GEMV can fuse around itself (all optional; f32 buffers, none overlapping x or out):
//   norm_w: x is the raw row, the GEMV multiplies rms_norm(x) * norm_w (mean over the K columns, + eps), computed in
//           the kernel; norm_out (if set): the normed rows are also written there (stride ld_norm_out), as the
//           unfused rms_norm would.
//   add_to: also add_to[t, n] += out[t, n] (the residual add that follows an o / down projection).
struct QuantGemvFusion {
  const float* norm_w = nullptr;
  float eps = 0;
  float* norm_out = nullptr;
  int64_t ld_norm_out = 0;
  float* add_to = nullptr;
  int64_t ld_add = 0;
};
void gemv_quant(const float* x, int64_t ldx, int T, const uint8_t* W, model::WeightType type, int64_t N, int64_t K,
                float* out, int64_t ldo, cudaStream_t stream, const QuantGemvFusion& fusion = {});

// out[r * K + k] = bf16(dequant(W)[r, k]) for r < rows (W: `rows` rows of K / block-size blocks), contiguous.
// The gate|up projection of a decode step (T = 1) with its gated activation as the epilogue: one warp per f < F
// multiplies row f of W_gate and row f of W_up (both `type`, F rows of K values) with x and writes
// gu[f] = gate, gu[F + f] = up (what the unfused linear writes) and act_out[f] = act(gate) * up. fusion: the
// norm prologue as above (add_to unused).
void gemv_quant_gated(const float* x, const uint8_t* W_gate, const uint8_t* W_up, model::WeightType type, int64_t F,
                      int64_t K, float* gu, float* act_out, Act act, cudaStream_t stream,
                      const QuantGemvFusion& fusion = {});

void dequantize_bf16(const uint8_t* W, model::WeightType type, int64_t rows, int64_t K, uint16_t* out,
                     cudaStream_t stream);

// out[t, :] = dequant(W)[tokens[t], :] * scale for t < T (W: vocab rows of K values; an id outside [0, vocab) gives
// NaN rows, as the plain embed kernel does). tokens is the device step buffer (graph rule); out f32 or bf16.
void embed_quant(const uint8_t* W, model::WeightType type, int64_t vocab, int64_t K, const int32_t* tokens, int64_t T,
                 void* out, bool out_bf16, int64_t ldo, float scale, cudaStream_t stream);

}  // namespace flashkit::engine::cuda
