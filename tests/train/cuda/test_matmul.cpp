// matmul_bf16 (cuBLAS) against the f64 reference on the same bf16 inputs: every transpose combination, padded
// leading dimensions, bf16 and f32 outputs, beta = 0 over a NaN-poisoned C and beta = 1 accumulation; and the three
// linear-layer wrappers (forward, dX, dW +=).
#include <cublas_v2.h>

#include "helpers.hpp"
#include "reference.hpp"

namespace fk_train_test {
namespace {

class Matmul : public TrainCuda {
 protected:
  cublasHandle_t handle = nullptr;
  void SetUp() override {
    TrainCuda::SetUp();
    if (IsSkipped()) return;
    ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    if (handle) cublasDestroy(handle);
    TrainCuda::TearDown();
  }
};

// f32 results: the products of bf16 values are exact in f32, so only the f32 accumulation over K differs.
void expect_mm_f32(const std::vector<float>& got, const std::vector<double>& ref, const std::string& what,
                   const std::vector<size_t>& idx = {}) {
  expect_close(got, ref, 1e-5, 1e-5, what, idx);
}

TEST_F(Matmul, TransposesAndAccumulation) {
  const int64_t M = 37, N = 45, K = 67;
  uint64_t seed = 1;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (int cf = 0; cf < 2; ++cf)
        for (float beta : {0.0f, 1.0f}) {
          SCOPED_TRACE(std::string("trans_a=") + (ta ? "1" : "0") + " trans_b=" + (tb ? "1" : "0") +
                       (cf ? " C f32" : " C bf16") + " beta=" + std::to_string(beta));
          const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
          const int64_t lda = a_cols + 3, ldb = b_cols + 5, ldc = N + 2;
          const auto A = bfr(rnd(size_t(a_rows * lda), seed++)), B = bfr(rnd(size_t(b_rows * ldb), seed++));
          auto C0 = rnd(size_t(M * ldc), seed++);
          if (!cf) C0 = bfr(C0);
          const float alpha = 0.75f;
          BF16 dA(A), dB(B);
          F32 cF = beta == 0.0f ? F32(size_t(M * ldc)) : F32(C0);
          BF16 cB = beta == 0.0f ? BF16(size_t(M * ldc)) : BF16(C0);
          void* C = cf ? static_cast<void*>(cF.p) : static_cast<void*>(cB.p);
          tc::matmul_bf16(handle, dA.b(), lda, ta != 0, dB.b(), ldb, tb != 0, C, ldc, cf != 0, M, N, K, alpha, beta,
                          stream);
          sync();
          const auto want = ref::matmul(A, lda, ta != 0, B, ldb, tb != 0, C0, ldc, M, N, K, alpha, beta);
          std::vector<size_t> idx;  // the [M, N] part; the ldc padding is not written
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) idx.push_back(size_t(i * ldc + j));
          if (cf) expect_mm_f32(cF.get(), want, "C", idx);
          else expect_bf16(cB.get(), want, "C", idx);
        }
}

TEST_F(Matmul, LinearLayer) {
  const int64_t T = 33, N = 50, K = 24;
  const auto X = bfr(rnd(size_t(T * K), 1)), W = bfr(rnd(size_t(N * K), 2, -0.5f, 0.5f));
  const auto dY = bfr(rnd(size_t(T * N), 3)), dX0 = bfr(rnd(size_t(T * K), 4));
  const auto dW0 = rnd(size_t(N * K), 5);
  BF16 dXd(X), dWd(W), ddY(dY), Y(size_t(T * N)), dX(dX0), dXa(dX0);
  F32 Yf(size_t(T * N)), dW(dW0);
  tc::linear_fwd(handle, dXd.b(), dWd.b(), Y.p, false, T, N, K, stream);
  tc::linear_fwd(handle, dXd.b(), dWd.b(), Yf.p, true, T, N, K, stream);
  tc::linear_bwd_dx(handle, ddY.b(), dWd.b(), dX.b(), false, T, N, K, stream);
  tc::linear_bwd_dx(handle, ddY.b(), dWd.b(), dXa.b(), true, T, N, K, stream);
  tc::linear_bwd_dw(handle, ddY.b(), dXd.b(), dW.p, T, N, K, stream);
  sync();
  const std::vector<float> none_tk(size_t(T * K), 0.0f), none_tn(size_t(T * N), 0.0f);
  const auto y = ref::matmul(X, K, false, W, K, true, none_tn, N, T, N, K, 1.0, 0.0);
  expect_bf16(Y.get(), y, "Y = X W^T");
  expect_mm_f32(Yf.get(), y, "Y = X W^T (f32)");
  expect_bf16(dX.get(), ref::matmul(dY, N, false, W, K, false, none_tk, K, T, K, N, 1.0, 0.0), "dX = dY W");
  expect_bf16(dXa.get(), ref::matmul(dY, N, false, W, K, false, dX0, K, T, K, N, 1.0, 1.0), "dX += dY W");
  expect_mm_f32(dW.get(), ref::matmul(dY, N, true, X, K, false, dW0, K, N, K, T, 1.0, 1.0), "dW += dY^T X");
}

}  // namespace
}  // namespace fk_train_test
