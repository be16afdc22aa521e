// Bad arguments to the training kernels' launchers: each throws flashkit::Error(invalid_argument) naming the
// argument, before touching the device (so these run without a GPU, with dummy pointers that are never read).
#include <gtest/gtest.h>

#include <string>

#include "flashkit/error.hpp"
#include "train/cuda/kernels.hpp"

namespace {

namespace tc = flashkit::train::cuda;

template <typename F>
void expect_invalid(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const flashkit::Error& e) {
    EXPECT_EQ(e.status(), flashkit::Status::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Never dereferenced: every call below fails its checks first.
tc::bf16* const kB = reinterpret_cast<tc::bf16*>(uintptr_t(256));
float* const kF = reinterpret_cast<float*>(uintptr_t(256));
int32_t* const kI = reinterpret_cast<int32_t*>(uintptr_t(256));

TEST(TrainCudaArguments, Rejected) {
  expect_invalid([] { tc::embedding_fwd(kI, kB, kB, -1, 10, 8, 1.0f, nullptr); }, "T must be");
  expect_invalid([] { tc::embedding_fwd(nullptr, kB, kB, 4, 10, 8, 1.0f, nullptr); }, "ids is null");
  expect_invalid([] { tc::embedding_bwd(kI, kB, kF, 4, 10, 8, 1.0f, nullptr, 0, nullptr); }, "workspace is null");
  expect_invalid([] { tc::rmsnorm_fwd(kB, 100, kF, kB, 200, kF, 4, 1, 200, 1e-5f, false, nullptr); }, "ldx");
  expect_invalid([] { tc::rmsnorm_fwd(kB, 200, kF, kB, 200, kF, 4, 0, 200, 1e-5f, false, nullptr); }, "groups");
  expect_invalid([] { tc::rmsnorm_fwd(kB, 200, kF, kB, 200, kF, 4, 1, 200, -1.0f, false, nullptr); }, "eps");
  expect_invalid([] { tc::rmsnorm_bwd(kB, 64, kB, 64, kF, kF, kB, 32, false, kF, kF, 4, 1, 64, false, nullptr); },
                 "lddx");
  expect_invalid([] { tc::rmsnorm_bwd(kB, 64, kB, 64, kF, nullptr, kB, 64, false, kF, kF, 4, 1, 64, false, nullptr); },
                 "rstd is null");
  expect_invalid([] { tc::rope_fwd(kB, 66, kB, 66, kI, 0, kF, 4, 2, 33, nullptr); }, "head_dim must be even");
  expect_invalid([] { tc::rope_bwd(kB, 64, kB, 100, kI, 0, kF, 4, 2, 64, nullptr); }, "row stride of the input");
  expect_invalid([] { tc::rope_fwd(kB, 128, kB, 128, nullptr, 0, kF, 4, 2, 64, nullptr); },
                 "seq_len must be >= 1 when positions is null");
  expect_invalid([] { tc::rope_fwd(kB, 128, kB, 128, kI, 0, static_cast<const float*>(nullptr), 4, 2, 64, nullptr); },
                 "inv_freq is null");
  expect_invalid([] { tc::rope_fwd_table(kB, 128, kB, 128, nullptr, 64, kB, kB, 32, 4, 2, 64, nullptr); },
                 "exceeds the table's max_pos");
  expect_invalid([] { tc::rope_bwd_table(kB, 128, kB, 128, kI, 0, kF, nullptr, 32, 4, 2, 64, nullptr); }, "sin is null");
  expect_invalid([] { tc::gated_act_fwd(kB, kB, 4, 8, static_cast<tc::Act>(7), nullptr); }, "act must be");
  expect_invalid([] { tc::gated_act_bwd(nullptr, kB, kB, 4, 8, tc::Act::silu, nullptr); }, "dout is null");
  expect_invalid([] { tc::cross_entropy_chunk_fwd_bwd(kF, 99, kI, kF, nullptr, 4, 100, 1.0f, 0.0f, nullptr); },
                 "ld must be >= V");
  expect_invalid([] { tc::cross_entropy_chunk_fwd_bwd(kF, 100, kI, kF, nullptr, 4, 100, 1.0f, -3.0f, nullptr); },
                 "softcap");
  expect_invalid([] { tc::cross_entropy_chunk_fwd_bwd(kF, 100, kI, kF, nullptr, 4, 0, 1.0f, 0.0f, nullptr); },
                 "V must be");
  expect_invalid([] { tc::adamw_step(kF, kF, kF, kF, nullptr, 10, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0, 1.0f, nullptr); },
                 "step");
  expect_invalid([] { tc::adamw_step(kF, kF, kF, kF, nullptr, 10, 1e-3f, 1.0f, 0.95f, 1e-8f, 0.1f, 1, 1.0f, nullptr); },
                 "beta1");
  expect_invalid([] { tc::adamw_step(kF, nullptr, kF, kF, nullptr, 10, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f, nullptr); },
                 "grad is null");
  expect_invalid([] { tc::global_norm_sq(kF, -5, kF, false, kF, nullptr); }, "n must be");
  expect_invalid([] { tc::sum_f32(kF, 100, kF, false, nullptr, nullptr); }, "scratch is null");
  expect_invalid([] { tc::count_nonfinite(kF, 100, nullptr, false, kF, nullptr); }, "out is null");
  expect_invalid([] { tc::scale_inplace(static_cast<float*>(nullptr), 10, 2.0f, nullptr); }, "x is null");
  expect_invalid([] { tc::cast_f32_to_bf16(kF, nullptr, 10, nullptr); }, "dst is null");
  expect_invalid([] { tc::add_inplace(kB, static_cast<const tc::bf16*>(nullptr), 10, nullptr); }, "x is null");
  auto h = reinterpret_cast<cublasHandle_t>(uintptr_t(256));
  expect_invalid([&] { tc::matmul_bf16(h, kB, 10, false, kB, 20, false, kF, 20, true, 5, 20, 16, 1, 0, nullptr); },
                 "lda must be >= K");
  expect_invalid([&] { tc::matmul_bf16(h, kB, 5, true, kB, 15, true, kF, 20, true, 5, 20, 16, 1, 0, nullptr); },
                 "ldb must be >= K");
  expect_invalid([&] { tc::matmul_bf16(h, kB, 16, false, kB, 20, false, kF, 19, true, 5, 20, 16, 1, 0, nullptr); },
                 "ldc must be >= N");
  expect_invalid([&] { tc::matmul_bf16(h, kB, 16, false, kB, 20, false, kF, 20, true, 5, 20, 0, 1, 0, nullptr); },
                 "K must be");
  expect_invalid([&] { tc::linear_fwd(nullptr, kB, kB, kF, true, 5, 20, 16, nullptr); }, "handle is null");
}

TEST(TrainCudaArguments, EmptyTensorsLaunchNothing) {
  // Size 0: no launch, no device access, no error (the pointers may be null).
  tc::embedding_fwd(nullptr, nullptr, nullptr, 0, 10, 8, 1.0f, nullptr);
  tc::rmsnorm_fwd(nullptr, 8, static_cast<const float*>(nullptr), nullptr, 8, nullptr, 0, 1, 8, 1e-5f, false, nullptr);
  tc::rope_fwd(nullptr, 8, nullptr, 8, nullptr, 1, static_cast<const float*>(nullptr), 0, 1, 8, nullptr);
  tc::gated_act_bwd(nullptr, nullptr, nullptr, 0, 8, tc::Act::gelu_tanh, nullptr);
  tc::cross_entropy_chunk_fwd_bwd(nullptr, 8, nullptr, nullptr, nullptr, 0, 8, 1.0f, 0.0f, nullptr);
  tc::adamw_step(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f, nullptr);
  tc::add_inplace(static_cast<float*>(nullptr), static_cast<const float*>(nullptr), 0, nullptr);
  tc::linear_fwd(nullptr, nullptr, nullptr, nullptr, false, 0, 8, 8, nullptr);
  SUCCEED();
}

}  // namespace
