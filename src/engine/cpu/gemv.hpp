// CPU matrix kernels of the engine: y[T, N] = x[T, K] . W[N, K]^T with W stored as f32 or bf16 (bf16 widened to
// f32 in registers), f32 accumulation. Small T runs a multi-row GEMV (weights stream once for up to 8 rows of x);
// larger T uses OpenBLAS sgemm (bf16 weights are widened panel by panel). OpenMP over output rows.
#pragma once
#include <cstdint>

#include "flashkit/dtype.hpp"
#include "flashkit/tuning.hpp"

namespace flashkit::engine::cpu {

enum class Isa { scalar, avx2, avx512 };
Isa detect_isa(CpuIsaCap cap);  // flashkit::cpu_isa(cap) (the backend's Tuning::cpu_isa); AVX-512 needs avx512f+bw
const char* isa_name(Isa isa);

// out[t * ldo + n] = sum_k x[t * ldx + k] * W[n * K + k]   for t < T, n < N.
// q8: W is GGUF Q8_0 blocks (per row K / 32 blocks of an f16 scale and 32 int8; K % 32 == 0), wtype ignored.
void matmul(Isa isa, int threads, const float* x, int64_t ldx, int64_t T, const void* W, DType wtype, int64_t N,
            int64_t K, float* out, int64_t ldo, bool q8 = false);

// out[t, f] = act(gu[t, f]) * gu[t, F + f] for t < T, f < F; act = silu (x * sigmoid(x)) or gelu_tanh, computed as
// x * sigmoid(2 * sqrt(2/pi) * (x + 0.044715 x^3)) (= 0.5 x (1 + tanh(...)), exactly, without tanh's cancellation).
// The AVX2 path uses a degree-7 polynomial exp (relative error ~1e-7).
void gated_act(Isa isa, int threads, const float* gu, int64_t ldg, float* out, int64_t ldo, int64_t T, int64_t F,
               bool silu);

}  // namespace flashkit::engine::cpu
