// bf16 matmuls of the training step through cuBLAS (cublasGemmEx: bf16 A and B, f32 accumulation, bf16 or f32 C).
// cuBLAS is column-major: a row-major C[M, N] is a column-major C^T[N, M] = op(B)^T op(A)^T, and a row-major
// matrix with row stride ld is its column-major transpose with leading dimension ld, so the call swaps A and B,
// swaps M and N, and keeps each operand's transpose flag and leading dimension as given.
#include <cublas_v2.h>

#include "train/cuda/common.cuh"

namespace flashkit::train::cuda {

namespace {

void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    fail(s == CUBLAS_STATUS_ALLOC_FAILED ? Status::out_of_memory : Status::device_error,
         std::string(what) + ": " + cublasGetStatusString(s));
}

}  // namespace

void matmul_bf16(cublasHandle_t handle, const bf16* A, int64_t lda, bool trans_a, const bf16* B, int64_t ldb,
                 bool trans_b, void* C, int64_t ldc, bool c_f32, int64_t M, int64_t N, int64_t K, float alpha,
                 float beta, cudaStream_t stream) {
  const char* fn = "matmul_bf16";
  need_size(M, fn, "M");
  need_size(N, fn, "N");
  need(K >= 1 && K <= std::numeric_limits<int32_t>::max(), fn, "K must be in [1, 2^31), got " + std::to_string(K));
  const int64_t a_cols = trans_a ? M : K, b_cols = trans_b ? K : N;
  need(lda >= std::max<int64_t>(a_cols, 1) && lda <= std::numeric_limits<int32_t>::max(), fn,
       std::string("lda must be >= ") + (trans_a ? "M" : "K") + " = " + std::to_string(a_cols) + ", got " +
           std::to_string(lda));
  need(ldb >= std::max<int64_t>(b_cols, 1) && ldb <= std::numeric_limits<int32_t>::max(), fn,
       std::string("ldb must be >= ") + (trans_b ? "K" : "N") + " = " + std::to_string(b_cols) + ", got " +
           std::to_string(ldb));
  need(ldc >= std::max<int64_t>(N, 1) && ldc <= std::numeric_limits<int32_t>::max(), fn,
       "ldc must be >= N = " + std::to_string(N) + ", got " + std::to_string(ldc));
  if (M == 0 || N == 0) return;
  need_ptr(handle, fn, "handle");
  need_ptr(A, fn, "A");
  need_ptr(B, fn, "B");
  need_ptr(C, fn, "C");
  check_cublas(cublasSetStream(handle, stream), "matmul_bf16: cublasSetStream");
  check_cublas(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST), "matmul_bf16: cublasSetPointerMode");
  check_cublas(cublasGemmEx(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, int(N),
                            int(M), int(K), &alpha, B, CUDA_R_16BF, int(ldb), A, CUDA_R_16BF, int(lda), &beta, C,
                            c_f32 ? CUDA_R_32F : CUDA_R_16BF, int(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "matmul_bf16: cublasGemmEx");
}

void linear_fwd(cublasHandle_t handle, const bf16* X, const bf16* W, void* Y, bool y_f32, int64_t T, int64_t N,
                int64_t K, cudaStream_t stream) {
  matmul_bf16(handle, X, K, false, W, K, true, Y, N, y_f32, T, N, K, 1.0f, 0.0f, stream);
}
void linear_bwd_dx(cublasHandle_t handle, const bf16* dY, const bf16* W, bf16* dX, bool accumulate, int64_t T,
                   int64_t N, int64_t K, cudaStream_t stream) {
  matmul_bf16(handle, dY, N, false, W, K, false, dX, K, false, T, K, N, 1.0f, accumulate ? 1.0f : 0.0f, stream);
}
void linear_bwd_dw(cublasHandle_t handle, const bf16* dY, const bf16* X, float* dW, int64_t T, int64_t N, int64_t K,
                   cudaStream_t stream) {
  if (T == 0) return;  // dW += nothing
  matmul_bf16(handle, dY, N, true, X, K, false, dW, K, true, N, K, T, 1.0f, 1.0f, stream);
}

}  // namespace flashkit::train::cuda
