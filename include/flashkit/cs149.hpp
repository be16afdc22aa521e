// The five kernels of the Stanford CS149 GPU assignment (issue 19) as flashkit ops. Each takes the course
// problem's inputs and writes what its reference returns; the fifth problem (attention) is flashkit's attention
// (include/flashkit/attention.hpp) on BHSD strides and has no op here.
//
// All tensors are contiguous row-major buffers on one device (Device::cpu runs the CPU kernels, Device::cuda the
// CUDA kernels on flashkit::cuda_stream()); shapes are given explicitly. Bad arguments throw flashkit::Error
// (Status::invalid_argument) naming the argument; a CUDA request in a build without CUDA is Status::unsupported.
#pragma once
#include <cstdint>

#include "flashkit/tensor.hpp"

namespace flashkit::cs149 {

// histogram: data uint8 [length, channels]; out int32 [channels, num_bins] with out[c][b] = number of rows whose
// value in channel c is b. Values >= num_bins are not counted (the course's bincount(...)[:num_bins]).
struct HistogramArgs {
  const uint8_t* data = nullptr;
  int64_t length = 0;
  int64_t channels = 0;
  int64_t num_bins = 0;
  int32_t* out = nullptr;
  Device device = Device::cpu;
};
void histogram(const HistogramArgs& a);

// SwiGLU, f32: out[m, n] = swish_beta(x W + b)[m, n] * (x V + c)[m, n], swish_beta(g) = g * sigmoid(beta g).
// x [m, k], W and V [k, n], b and c [n], out [m, n]. f32-accurate on every device (no plain TF32).
// Which CUDA kernel runs (a switch for A/B benchmarks of future variants; the CPU ignores it): automatic picks by
// choose_swiglu_kernel; split_per_fragment (v2, 3xTF32 with the running sums outside the tensor cores) splits
// operands into TF32 pairs at every fragment read. Retired and rejected (docs/worklog/cs149-swiglu.md): 1 (v1, all
// of K summed inside the tensor cores, which truncate: it failed the course check) and 3 (v3, split_in_shared:
// 17.83 ms against v2's 13.08 ms on the H200, run s10-10).
enum class SwigluKernel : int32_t { automatic = 0, split_per_fragment = 2 };

struct SwigluArgs {
  const float* x = nullptr;
  const float* w = nullptr;
  const float* v = nullptr;
  const float* b = nullptr;
  const float* c = nullptr;
  float beta = 1.0f;
  int64_t m = 0, k = 0, n = 0;
  float* out = nullptr;
  Device device = Device::cpu;
  SwigluKernel kernel = SwigluKernel::automatic;
};
void swiglu(const SwigluArgs& a);
// The CUDA kernel swiglu runs for these arguments (never automatic): a pure function, unit-tested.
SwigluKernel choose_swiglu_kernel(const SwigluArgs& a);

// RK4 heat equation u_t = alpha * Laplacian(u), 8th-order (radius-4) second differences in x, y, z, f32 field
// [nz, ny, nx]; the 4-point boundary layer keeps its initial values; dt = 0.05 / (alpha (1/hx^2 + 1/hy^2 +
// 1/hz^2)), computed in f32 as the course reference does. out [nz, ny, nx] receives u after n_steps steps (it may
// not alias u0). CUDA calls allocate three field-sized work buffers on the stream.
// Which CUDA stage kernel runs (a switch for A/B benchmarks of future variants): automatic picks by
// choose_rk4_kernel; stage_l1_aligned (v4) reads the x/y neighbours through L1 with each warp's row starting on a
// 128-byte boundary. Retired after they lost on the H200 and rejected (docs/worklog/cs149-rk4.md): 1 (v1,
// stage_l1: warps from x = 4), 2 (v2, a shared-memory plane), 3 (v3, 4 rows per thread), 5 (v5, stage_l1_tall:
// 32-row blocks) and 6 (v6, stage_pair: two stages per kernel).
enum class Rk4Kernel : int32_t {
  automatic = 0,
  stage_l1_aligned = 4,
};

struct Rk4Args {
  const float* u0 = nullptr;
  int64_t nz = 0, ny = 0, nx = 0;
  float alpha = 0, hx = 0, hy = 0, hz = 0;
  int64_t n_steps = 0;
  float* out = nullptr;
  Device device = Device::cpu;
  Rk4Kernel kernel = Rk4Kernel::automatic;
};
void rk4(const Rk4Args& a);
// The CUDA stage kernel rk4 runs for these arguments (never automatic): a pure function, unit-tested.
Rk4Kernel choose_rk4_kernel(const Rk4Args& a);

// The occupancy decoder's head (LayerNorm without affine, then a Linear to one output), fused so the normalised
// rows never reach memory: out[r] = round(sum_j round((x[r, j] - mean_r) * rstd_r) * w[j] + bias), where
// rstd_r = 1 / sqrt(var_r + eps) (biased variance), statistics in f32 and round() to the dtype, as the course's
// `out_proj(ln(x.float()).type_as(x))` rounds. x [rows, width], w [width], bias [1], out [rows]; f32 or f16.
struct LayerNormHeadArgs {
  const void* x = nullptr;
  const void* w = nullptr;
  const void* bias = nullptr;
  float eps = 1e-6f;
  int64_t rows = 0, width = 0;
  DType dtype = DType::f16;
  void* out = nullptr;
  Device device = Device::cpu;
};
void layernorm_head(const LayerNormHeadArgs& a);

// The occupancy decoder's query input layer with its SiLU, fused: h[r, j] = round(silu(round(b[j] +
// sum_i q[r, i] w[j, i]))) for a narrow input (in_dim <= 16; the course has 3 coordinates): the Linear's output
// never reaches memory before the SiLU. q [rows, in_dim], w [width, in_dim] (nn.Linear layout), b [width],
// h [rows, width]; f32 or f16, accumulation in f32, round() to the dtype as the two torch ops round.
struct QueryEmbedArgs {
  const void* q = nullptr;
  const void* w = nullptr;
  const void* b = nullptr;
  int64_t rows = 0, in_dim = 0, width = 0;
  DType dtype = DType::f16;
  void* h = nullptr;
  Device device = Device::cpu;
};
void query_embed(const QueryEmbedArgs& a);

// The scalars of one RK4 step in f32, in the course reference's order of operations (shared by the CPU and CUDA
// kernels so both round the same way).
struct Rk4Coefficients {
  float inv_hx2, inv_hy2, inv_hz2;
  float alpha;
  float half_dt, dt, dt_sixth;
};
Rk4Coefficients rk4_coefficients(float alpha, float hx, float hy, float hz);

}  // namespace flashkit::cs149
