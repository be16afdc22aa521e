// CPU selective scan and causal conv1d, f32. OpenMP over (batch, block of 8 channels); each task keeps its
// [d_state x 8] carry on the stack (registers for d_state <= 16) and walks time once: u, delta, z read once, B/C rows
// shared by the 8 channels, y written once. The 8 channels are contiguous in memory, so the lane loop vectorizes.
#include <algorithm>
#include <cmath>

#include "kernels/ssm_args.hpp"

namespace flashkit::kernels {
namespace {

constexpr int64_t kLanes = 8;
constexpr int64_t kMaxState = 256;  // src/ops/ssm.cpp rejects larger d_state

inline float softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }

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
      dt[l] = a.softplus ? softplus(d) : d;
      du[l] = dt[l] * uv[l];
      y[l] = D[l] * uv[l];
    }
    for (int64_t n = 0; n < N; ++n) {
      const float bn = Bt[n], cn = Ct[n];
#pragma omp simd
      for (int64_t l = 0; l < kLanes; ++l) {
        h[n][l] = std::exp(dt[l] * A[n][l]) * h[n][l] + du[l] * bn;
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
