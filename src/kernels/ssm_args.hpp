// Validated arguments of the SSM kernels (src/ops/ssm.cpp builds them). Pointers and element strides; the last
// dimension of every tensor is contiguous, A / D / delta_bias / state / weights are contiguous.
#pragma once
#include <cstdint>

#include "flashkit/tuning.hpp"

namespace flashkit::kernels {

struct ScanArgs {
  int64_t batch = 0, seqlen = 0, d_inner = 0, d_state = 0;
  const float *u = nullptr, *delta = nullptr, *A = nullptr, *B = nullptr, *C = nullptr;
  const float *D = nullptr, *z = nullptr, *delta_bias = nullptr;  // optional
  float* state = nullptr;                                           // optional [batch, d_inner, d_state]
  float* y = nullptr;
  // strides (elements) of dimensions 0 (batch) and 1 (time)
  int64_t u_b = 0, u_t = 0, dl_b = 0, dl_t = 0, B_b = 0, B_t = 0, C_b = 0, C_t = 0, z_b = 0, z_t = 0, y_b = 0, y_t = 0;
  bool softplus = true;
  int threads = 1;
};

// Gradients, contiguous: du, ddelta, dz [batch, seqlen, d_inner]; dB, dC [batch, seqlen, d_state]; dA [d_inner,
// d_state]; dD, ddelta_bias [d_inner]. Optional ones are null where the forward had no D / z / delta_bias.
struct ScanGradArgs {
  const float* dout = nullptr;  // strides dout_b, dout_t
  int64_t dout_b = 0, dout_t = 0;
  float *du = nullptr, *ddelta = nullptr, *dA = nullptr, *dB = nullptr, *dC = nullptr;
  float *dD = nullptr, *dz = nullptr, *ddelta_bias = nullptr;
};

struct ConvArgs {
  int64_t batch = 0, seqlen = 0, channels = 0, width = 0;
  const float *x = nullptr, *weight = nullptr, *bias = nullptr;
  float* state = nullptr;  // optional [batch, channels, width]
  float* out = nullptr;
  int64_t x_b = 0, x_t = 0, o_b = 0, o_t = 0;
  bool silu = true;
  int threads = 1;
};

// Kernel entry points (only src/ops/ssm.cpp calls them).
void selective_scan_reference(const ScanArgs& a);
void selective_scan_backward_reference(const ScanArgs& a, const ScanGradArgs& g);
void causal_conv1d_reference(const ConvArgs& a);
// The f32 CPU kernels at the widest instruction set this CPU has within `cap` (kernels/cpu/ssm_cpu.cpp).
void selective_scan_cpu(const ScanArgs& a, CpuIsaCap cap);
void selective_scan_backward_cpu(const ScanArgs& a, const ScanGradArgs& g);
void causal_conv1d_cpu(const ConvArgs& a, CpuIsaCap cap);
// One instruction set each (kernels/cpu/ssm_cpu.inc).
namespace scalar {
void selective_scan(const ScanArgs& a);
void causal_conv1d(const ConvArgs& a);
}  // namespace scalar
namespace avx2 {
void selective_scan(const ScanArgs& a);
void causal_conv1d(const ConvArgs& a);
}  // namespace avx2
namespace avx512 {
void selective_scan(const ScanArgs& a);
void causal_conv1d(const ConvArgs& a);
}  // namespace avx512

}  // namespace flashkit::kernels
