// AVX2+FMA kernels of the analysis module (kernels_avx2.cpp is compiled with -mavx2 -mfma); callers check
// have_avx2_fma() first, which asks the CPU at run time.
#pragma once
#include <cstdint>

namespace flashkit::analysis {

bool have_avx2_fma();
// 12 independent 8-lane FMA chains, `iters` steps: 2*8*12*iters flops. Returns a value to keep it live.
double fma_chain_avx2(int64_t iters);
// C[M,N] = A[M,K] * B[K,N], row-major with leading dimensions; packed 6x16 micro-kernel.
void gemm_blocked_avx2(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                       float* C, int64_t ldc, int threads);
// y[M] = A[M,K] x[K]
void gemv_avx2(int64_t M, int64_t K, const float* A, int64_t lda, const float* x, float* y, int threads);

// tanh (clamped 13/6 rational, as in demos.cpp) over n floats; and the fused tanh-GELU. OpenMP-parallel.
void tanh_avx2(const float* x, float* y, int64_t n);
void gelu_tanh_fused_avx2(const float* x, float* y, int64_t n);

}  // namespace flashkit::analysis
