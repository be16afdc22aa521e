// CPU selective scan and causal conv1d, f32. OpenMP over (batch, block of 8 channels); each task keeps its
// [d_state x 8] carry on the stack (registers for d_state <= 16) and walks time once: u, delta, z read once, B/C rows
// shared by the 8 channels, y written once. The 8 channels are contiguous in memory, so the lane loop vectorizes.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "kernels/ssm_args.hpp"
#include "kernels/ssm_math.hpp"

namespace flashkit::kernels {
namespace {

constexpr int64_t kLanes = 8;
constexpr int64_t kMaxState = 256;  // src/ops/ssm.cpp rejects larger d_state


// exp(x) in a form the lane loop vectorizes (std::exp is a libm call per element there, ~7 ns per state update):
// 2^(x log2 e) = 2^n * 2^f. n = round(x log2 e) by the 1.5 * 2^23 addition (its bits hold n), |f| <= 1/2, 2^f by its
// Taylor series to degree 7 (relative error < 1e-8 there, below f32 rounding), 2^n written into the exponent bits with
// n clamped to [-126, 127] (integer selects: float compares would keep GCC from vectorizing). So exp of x < -87
// gives ~1e-38 instead of 0 and of x > 88 ~1.7e38 instead of inf; the scan has x = dt * A <= 0 with softplus.
inline float exp_lane(float x) {
  const float k = x * 1.44269504088896341f;
  const float r = k + 12582912.0f;
  int32_t n = int32_t(std::bit_cast<uint32_t>(r) - 0x4B400000u);  // unsigned: no overflow when r is far off
  n = n < -126 ? -126 : n;
  n = n > 127 ? 127 : n;
  const float f = k - (r - 12582912.0f);
  float p = 1.5252733804059841e-5f;  // ln2^7 / 7!, then Horner down to ln2^0 / 0!
  p = p * f + 1.5403530393381609e-4f;
  p = p * f + 1.3333558146428443e-3f;
  p = p * f + 9.6181291076284772e-3f;
  p = p * f + 5.5504108664821580e-2f;
  p = p * f + 2.4022650695910071e-1f;
  p = p * f + 6.9314718055994531e-1f;
  p = p * f + 1.0f;
  return p * std::bit_cast<float>((n + 127) << 23);
}

void scan_block(const ScanArgs& a, int64_t b, int64_t c0) {
  const int64_t N = a.d_state, nl = std::min(kLanes, a.d_inner - c0);
  float h[kMaxState][kLanes];
  float A[kMaxState][kLanes];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t l = 0; l < kLanes; ++l) {
      const bool live = l < nl;
      A[n][l] = live ? a.A[(c0 + l) * N + n] : 0.f;
      h[n][l] = live && a.state ? a.state[(b * a.d_inner + c0 + l) * N + n] : 0.f;
    }
  float D[kLanes], bias[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) {
    D[l] = a.D && l < nl ? a.D[c0 + l] : 0.f;
    bias[l] = a.delta_bias && l < nl ? a.delta_bias[c0 + l] : 0.f;
  }
  for (int64_t t = 0; t < a.seqlen; ++t) {
    const float* u = a.u + b * a.u_b + t * a.u_t + c0;
    const float* dl = a.delta + b * a.dl_b + t * a.dl_t + c0;
    const float* Bt = a.B + b * a.B_b + t * a.B_t;
    const float* Ct = a.C + b * a.C_b + t * a.C_t;
    float uv[kLanes], dt[kLanes], du[kLanes], y[kLanes];
    for (int64_t l = 0; l < kLanes; ++l) {
      uv[l] = l < nl ? u[l] : 0.f;
      float d = (l < nl ? dl[l] : 0.f) + bias[l];
      dt[l] = a.softplus ? ssm_softplus(d) : d;
      du[l] = dt[l] * uv[l];
      y[l] = D[l] * uv[l];
    }
    for (int64_t n = 0; n < N; ++n) {
      const float bn = Bt[n], cn = Ct[n];
#pragma omp simd
      for (int64_t l = 0; l < kLanes; ++l) {
        h[n][l] = exp_lane(dt[l] * A[n][l]) * h[n][l] + du[l] * bn;
        y[l] += cn * h[n][l];
      }
    }
    float* yo = a.y + b * a.y_b + t * a.y_t + c0;
    if (a.z) {
      const float* z = a.z + b * a.z_b + t * a.z_t + c0;
      for (int64_t l = 0; l < nl; ++l) yo[l] = y[l] * (z[l] / (1.f + std::exp(-z[l])));
    } else {
      for (int64_t l = 0; l < nl; ++l) yo[l] = y[l];
    }
  }
  if (a.state)
    for (int64_t l = 0; l < nl; ++l)
      for (int64_t n = 0; n < N; ++n) a.state[(b * a.d_inner + c0 + l) * N + n] = h[n][l];
}

}  // namespace

void selective_scan_cpu(const ScanArgs& a) {
  const int64_t blocks = (a.d_inner + kLanes - 1) / kLanes, tasks = a.batch * blocks;
#pragma omp parallel for schedule(static) num_threads(a.threads) if (tasks > 1 && a.seqlen * a.d_state > 64)
  for (int64_t i = 0; i < tasks; ++i) scan_block(a, i / blocks, (i % blocks) * kLanes);
}

void causal_conv1d_cpu(const ConvArgs& a) {
  const int64_t W = a.width, tasks = a.batch * a.channels;
#pragma omp parallel for schedule(static) num_threads(a.threads) if (tasks * a.seqlen > 4096)
  for (int64_t i = 0; i < tasks; ++i) {
    const int64_t b = i / a.channels, c = i % a.channels;
    float hist[16];  // width <= 16 (checked in src/ops/ssm.cpp)
    float* st = a.state ? a.state + (b * a.channels + c) * W : nullptr;
    for (int64_t k = 0; k < W; ++k) hist[k] = st ? st[k] : 0.f;
    const float* w = a.weight + c * W;
    const float bias = a.bias ? a.bias[c] : 0.f;
    for (int64_t t = 0; t < a.seqlen; ++t) {
      for (int64_t k = 0; k + 1 < W; ++k) hist[k] = hist[k + 1];
      hist[W - 1] = a.x[b * a.x_b + t * a.x_t + c];
      float s = bias;
      for (int64_t k = 0; k < W; ++k) s += w[k] * hist[k];
      if (a.silu) s = s / (1.f + std::exp(-s));
      a.out[b * a.o_b + t * a.o_t + c] = s;
    }
    if (st)
      for (int64_t k = 0; k < W; ++k) st[k] = hist[k];
  }
}

}  // namespace flashkit::kernels
