// The f64 oracle of the selective scan (forward and analytic backward) and of the causal conv1d: plain loops in
// the order the contract (include/flashkit/ssm.hpp) states them.
#include <cmath>
#include <vector>

#include "kernels/ssm_args.hpp"
#include "kernels/ssm_math.hpp"

namespace flashkit::kernels {
void selective_scan_reference(const ScanArgs& a) {
  const int64_t N = a.d_state;
  std::vector<double> h(N);
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t c = 0; c < a.d_inner; ++c) {
      for (int64_t n = 0; n < N; ++n) h[n] = a.state ? a.state[(b * a.d_inner + c) * N + n] : 0.0;
      for (int64_t t = 0; t < a.seqlen; ++t) {
        const double u = a.u[b * a.u_b + t * a.u_t + c];
        double dt = double(a.delta[b * a.dl_b + t * a.dl_t + c]) + (a.delta_bias ? a.delta_bias[c] : 0.0);
        if (a.softplus) dt = ssm_softplus(dt);
        const float* Bt = a.B + b * a.B_b + t * a.B_t;
        const float* Ct = a.C + b * a.C_b + t * a.C_t;
        double y = 0;
        for (int64_t n = 0; n < N; ++n) {
          h[n] = std::exp(dt * a.A[c * N + n]) * h[n] + dt * Bt[n] * u;
          y += Ct[n] * h[n];
        }
        if (a.D) y += double(a.D[c]) * u;
        if (a.z) {
          const double z = a.z[b * a.z_b + t * a.z_t + c];
          y *= z * ssm_sigmoid(z);
        }
        a.y[b * a.y_b + t * a.y_t + c] = float(y);
      }
      if (a.state)
        for (int64_t n = 0; n < N; ++n) a.state[(b * a.d_inner + c) * N + n] = float(h[n]);
    }
}

// Reverse-mode through the recurrence: the forward states are recomputed and kept per channel, then the state
// gradient g is carried backwards (g_{t-1} = a_t * g_t + dy_{t-1} * C_{t-1}).
void selective_scan_backward_reference(const ScanArgs& a, const ScanGradArgs& g) {
  const int64_t L = a.seqlen, N = a.d_state, Di = a.d_inner;
  std::vector<double> dA(Di * N, 0.0), dD(Di, 0.0), dbias(Di, 0.0);
  std::vector<double> dB(a.batch * L * N, 0.0), dC(a.batch * L * N, 0.0);
  std::vector<double> hs((L + 1) * N), dts(L), dy0(L), gs(N);
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t c = 0; c < Di; ++c) {
      std::vector<double> A(N);
      for (int64_t n = 0; n < N; ++n) A[n] = a.A[c * N + n];
      for (int64_t n = 0; n < N; ++n) hs[n] = 0.0;
      for (int64_t t = 0; t < L; ++t) {
        const double u = a.u[b * a.u_b + t * a.u_t + c];
        double dt = double(a.delta[b * a.dl_b + t * a.dl_t + c]) + (a.delta_bias ? a.delta_bias[c] : 0.0);
        if (a.softplus) dt = ssm_softplus(dt);
        dts[t] = dt;
        const float* Bt = a.B + b * a.B_b + t * a.B_t;
        const float* Ct = a.C + b * a.C_b + t * a.C_t;
        double y = 0;
        for (int64_t n = 0; n < N; ++n) {
          hs[(t + 1) * N + n] = std::exp(dt * A[n]) * hs[t * N + n] + dt * Bt[n] * u;
          y += Ct[n] * hs[(t + 1) * N + n];
        }
        if (a.D) y += double(a.D[c]) * u;
        const double dout = g.dout[b * g.dout_b + t * g.dout_t + c];
        if (a.z) {
          const double z = a.z[b * a.z_b + t * a.z_t + c], s = ssm_sigmoid(z);
          g.dz[(b * L + t) * Di + c] = float(dout * y * s * (1.0 + z * (1.0 - s)));
          dy0[t] = dout * z * s;
        } else {
          dy0[t] = dout;
        }
      }
      for (int64_t n = 0; n < N; ++n) gs[n] = 0.0;
      for (int64_t t = L - 1; t >= 0; --t) {
        const double u = a.u[b * a.u_b + t * a.u_t + c], dt = dts[t];
        const float* Bt = a.B + b * a.B_b + t * a.B_t;
        const float* Ct = a.C + b * a.C_b + t * a.C_t;
        double du = a.D ? dy0[t] * a.D[c] : 0.0, ddt = 0.0;
        if (a.D) dD[c] += dy0[t] * u;
        for (int64_t n = 0; n < N; ++n) {
          dC[(b * L + t) * N + n] += dy0[t] * hs[(t + 1) * N + n];
          gs[n] += dy0[t] * Ct[n];
          const double decay = std::exp(dt * A[n]), hprev = hs[t * N + n];
          dA[c * N + n] += gs[n] * hprev * decay * dt;
          ddt += gs[n] * (hprev * decay * A[n] + Bt[n] * u);
          dB[(b * L + t) * N + n] += gs[n] * dt * u;
          du += gs[n] * dt * Bt[n];
          gs[n] *= decay;
        }
        if (a.softplus) {
          const double raw = double(a.delta[b * a.dl_b + t * a.dl_t + c]) + (a.delta_bias ? a.delta_bias[c] : 0.0);
          if (raw <= 20.0) ddt *= ssm_sigmoid(raw);
        }
        g.du[(b * L + t) * Di + c] = float(du);
        g.ddelta[(b * L + t) * Di + c] = float(ddt);
        dbias[c] += ddt;
      }
    }
  for (int64_t i = 0; i < Di * N; ++i) g.dA[i] = float(dA[i]);
  for (int64_t i = 0; i < a.batch * L * N; ++i) {
    g.dB[i] = float(dB[i]);
    g.dC[i] = float(dC[i]);
  }
  if (g.dD)
    for (int64_t c = 0; c < Di; ++c) g.dD[c] = float(dD[c]);
  if (g.ddelta_bias)
    for (int64_t c = 0; c < Di; ++c) g.ddelta_bias[c] = float(dbias[c]);
}

void causal_conv1d_reference(const ConvArgs& a) {
  const int64_t W = a.width;
  std::vector<double> hist(W);
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t c = 0; c < a.channels; ++c) {
      // hist holds the last W inputs, newest at W-1.
      for (int64_t k = 0; k < W; ++k) hist[k] = a.state ? a.state[(b * a.channels + c) * W + k] : 0.0;
      for (int64_t t = 0; t < a.seqlen; ++t) {
        for (int64_t k = 0; k + 1 < W; ++k) hist[k] = hist[k + 1];
        hist[W - 1] = a.x[b * a.x_b + t * a.x_t + c];
        double s = a.bias ? a.bias[c] : 0.0;
        for (int64_t k = 0; k < W; ++k) s += double(a.weight[c * W + k]) * hist[k];
        if (a.silu) s *= 1.0 / (1.0 + std::exp(-s));
        a.out[b * a.o_b + t * a.o_t + c] = float(s);
      }
      if (a.state)
        for (int64_t k = 0; k < W; ++k) a.state[(b * a.channels + c) * W + k] = float(hist[k]);
    }
}

}  // namespace flashkit::kernels
