// The CPU backend's Mamba ops (backend.hpp, "selective state-space"): engine Tensors as batch-1 views handed to the
// library ops of include/flashkit/ssm.hpp (cpu kernels).
#pragma once
#include "engine/backend.hpp"

namespace flashkit::engine::cpu {

void causal_conv1d(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& conv_state, const Tensor& out,
                   int64_t T, int threads);
void selective_scan(const Tensor& u, const Tensor& delta, const Tensor& B, const Tensor& C, const Tensor& z,
                    const Tensor& A, const Tensor& D, const Tensor& state, const Tensor& y, int64_t T, int threads);

}  // namespace flashkit::engine::cpu
