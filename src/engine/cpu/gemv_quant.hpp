// CPU matrix kernels over GGUF block-quantized weights (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K): y[T, N] = x[T, K] . W[N, K]^T
// with W kept as its blocks (0.56 .. 1.06 bytes per weight). Small T (decode): with AVX2 the quants of a sub-block
// are converted to f32 in registers and multiplied with every row of x (scales and mins applied per sub-block, the
// mins through per-sub-block sums of x), so the weights stream once; the scalar ISA expands a block at a time into
// an L1 buffer. Larger T (prefill) expands a panel of rows per thread and runs sgemm on it. Q8_0 goes to gemv.hpp's
// dedicated kernel. Work log: docs/worklog/gguf-quant-cpu.md.
#pragma once
#include <cstdint>

#include "engine/cpu/gemv.hpp"
#include "model/weights.hpp"

namespace flashkit::engine::cpu {

// out[t * ldo + n] = sum_k x[t * ldx + k] * dequant(W)[n, k] for t < T, n < N; W holds N rows of K / block values
// blocks of `type` (K a multiple of the type's block size; the caller checks).
void matmul_quant(Isa isa, int threads, const float* x, int64_t ldx, int64_t T, const uint8_t* W,
                  model::WeightType type, int64_t N, int64_t K, float* out, int64_t ldo);

}  // namespace flashkit::engine::cpu
