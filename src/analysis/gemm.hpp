// GEMM and GEMV on the roofline: three CPU implementations (naive triple loop, cache-blocked AVX2, BLAS),
// their minimum-traffic cost model, and a timed sweep that says which roof binds.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "hardware.hpp"

namespace flashkit::analysis {

enum class GemmImpl { naive, blocked, blas };
const char* gemm_impl_name(GemmImpl i);
GemmImpl parse_gemm_impl(const std::string& s);  // throws invalid_argument listing valid names

// C[M,N] = A[M,K] B[K,N], f32 row-major contiguous. N == 1 with impl != naive uses the GEMV path.
void gemm(GemmImpl impl, int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C, int threads = 0);
void gemv(GemmImpl impl, int64_t M, int64_t K, const float* A, const float* x, float* y, int threads = 0);
std::string gemm_kernel_variant(GemmImpl impl);  // e.g. "blocked.avx2" or "blocked.scalar"

struct MatmulCost {
  double macs = 0, flops = 0;
  double min_bytes = 0;   // each operand read once, C written once (compulsory traffic)
  double intensity = 0;   // flops / min_bytes
};
MatmulCost matmul_cost(int64_t M, int64_t N, int64_t K, double elem_bytes);

// The N at which a square N x N x N GEMM (elem_bytes operands) reaches the ridge point of `roof`:
// 2N^3 / (3 N^2 e) = ridge  =>  N = 1.5 e ridge.
double square_gemm_ridge_n(const Roof& roof, double elem_bytes);

struct MatmulResult {
  std::string op;        // "gemm" or "gemv"
  std::string impl;      // naive | blocked | blas
  std::string kernel;    // variant that ran
  int64_t M = 0, N = 0, K = 0;
  MatmulCost cost;
  double seconds = 0;    // best of the repetitions
  int reps = 0;
  double gflops = 0, gbs = 0;   // achieved (bandwidth uses min_bytes)
  std::string bound;     // roof that binds at this intensity on the given roof
  double floor_seconds = 0;     // roofline time floor
  double pct_of_roof = 0;       // attainable / achieved, percent
};
// Times one (M,N,K) (N == 1: GEMV). Repeats until `seconds` of wall time or `max_reps`, at least once.
MatmulResult time_matmul(GemmImpl impl, int64_t M, int64_t N, int64_t K, const Roof& roof, double seconds = 0.3,
                         int max_reps = 20, int threads = 0);

}  // namespace flashkit::analysis
