// The selective state-space (Mamba-1) contract: the selective scan and the causal depthwise conv1d in front of it.
// One set of semantics, several implementations:
//   reference : f64 loops, the oracle (forward and the analytic backward).
//   cpu       : f32, OpenMP over batch x channels, the d_state carry in registers; the backward OpenMP over channels.
//   cuda      : one fused pass (src/kernels/cuda/ssm): u, delta, B, C, z read once, y written once, the state never
//               leaves the chip; a separate decode-step kernel for seqlen 1; the backward recomputes the states
//               chunk by chunk from one stored state per 16 steps.
//
// Layouts (f32; last dimension contiguous, other strides free, so column slices of one projection output work):
//   u, delta, z, y  [batch, seqlen, d_inner]     B, C  [batch, seqlen, d_state]
//   A [d_inner, d_state] (A = -exp(A_log), negative), D [d_inner], delta_bias [d_inner]: contiguous, D / bias / z
//   optional (data == nullptr). state [batch, d_inner, d_state] contiguous, optional.
// Semantics, per batch b and channel c, for t = 0..seqlen-1 (h = state[b, c, :] when given, else 0):
//   dt   = delta[b,t,c] + delta_bias[c];  with delta_softplus: dt = log(1 + exp(dt))  (dt itself when dt > 20)
//   h[n] = exp(dt * A[c,n]) * h[n] + dt * B[b,t,n] * u[b,t,c]
//   y[b,t,c] = (sum_n C[b,t,n] * h[n] + D[c] * u[b,t,c]) * (z ? silu(z[b,t,c]) : 1)
// and the final h is written back to `state` when given (chunked prefill: pass the state of the previous chunk).
// Decode is the same op with seqlen 1 (selective_scan_step is that call on [batch, d_inner] rows).
//
// Causal depthwise conv1d, x / out [batch, seqlen, channels] (last dim contiguous), weight [channels, width]
// contiguous, bias [channels] optional, conv_state [batch, channels, width] optional (contiguous):
//   out[b,t,c] = act(bias[c] + sum_k weight[c,k] * x[b, t - (width-1) + k, c]),  act = silu when `silu`, else identity,
// where x at negative times is conv_state[b, c, k'] (the last `width` inputs of the previous chunk, newest at
// width-1; zero without a state). With conv_state, the last `width` inputs are written back to it.
//
// Errors: invalid_argument naming the tensor and what was expected (shape, dtype, device, stride); unsupported for
// a device/implementation this build does not have. Non-finite inputs propagate by IEEE arithmetic (no check).
#pragma once
#include <cstdint>
#include <string>

#include "flashkit/attention.hpp"  // OpCost
#include "flashkit/tensor.hpp"

namespace flashkit {

enum class SsmImpl : int32_t { automatic = 0, reference = 1, cpu = 2, cuda = 3 };

struct SelectiveScanArgs {
  TensorView u, delta, A, B, C;
  TensorView D, z, delta_bias;  // optional
  TensorView state;             // optional: initial state in, final state out
  TensorView y;
  bool delta_softplus = true;
  SsmImpl impl = SsmImpl::automatic;
  int threads = 0;  // CPU: 0 = num_threads()
};

void selective_scan_forward(const SelectiveScanArgs& a, OpCost* cost = nullptr);

// One token per sequence: u, delta, z, y [batch, d_inner]; B, C [batch, d_state]; state required.
void selective_scan_step(const SelectiveScanArgs& a, OpCost* cost = nullptr);

// Gradients of the scan (no initial state; `state` must be empty). dout like y. Outputs du, ddelta [batch, seqlen,
// d_inner], dA [d_inner, d_state], dB, dC [batch, seqlen, d_state], dD / dz / ddelta_bias where the forward had D / z
// / delta_bias (else empty). All f32, contiguous, on u's device; they are overwritten. CPU tensors: the f32 kernel
// (OpenMP over channels), or the f64 reference with impl = reference. CUDA tensors (d_state <= 64): the fused backward
// (src/kernels/cuda/ssm/scan_backward.cu; deterministic, stream-ordered on the calling thread's stream) with a
// workspace of one state per 16 steps plus per-block dB/dC partials, checked against max_workspace_bytes() first
// (out_of_memory naming the size).
struct SelectiveScanGrads {
  TensorView du, ddelta, dA, dB, dC, dD, dz, ddelta_bias;
};
void selective_scan_backward(const SelectiveScanArgs& a, const TensorView& dout, const SelectiveScanGrads& g);

struct CausalConv1dArgs {
  TensorView x, weight, bias, conv_state, out;  // bias, conv_state optional
  bool silu = true;
  SsmImpl impl = SsmImpl::automatic;
  int threads = 0;
};
void causal_conv1d_forward(const CausalConv1dArgs& a);
// One token: x / out [batch, channels]; conv_state required (shifted by one, x appended, then the dot product).
void causal_conv1d_step(const CausalConv1dArgs& a);

}  // namespace flashkit
