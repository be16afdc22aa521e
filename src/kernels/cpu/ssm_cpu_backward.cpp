// CPU backward of the selective scan, f32: the reference's reverse-mode (kernels/reference/ssm_reference.cpp) with
// OpenMP over channels. A channel's forward states are recomputed into a thread-local [seqlen + 1][d_state] buffer,
// then the state gradient is carried backwards through them. Per-channel gradients (dA, dD, ddelta_bias) are owned by
// the thread that owns the channel (batch is the inner loop); dB and dC sum over channels, so each thread accumulates
// its own [batch, seqlen, d_state] pair and the pairs are added at the end.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/ssm_args.hpp"
#include "kernels/ssm_math.hpp"

namespace flashkit::kernels {
void selective_scan_backward_cpu(const ScanArgs& a, const ScanGradArgs& g) {
  const int64_t L = a.seqlen, N = a.d_state, Di = a.d_inner, Bt = a.batch;
  const size_t per = size_t(Bt * L * N);
  // Threads: at most one per channel, and few enough that the partial dB/dC pairs stay under 256 MB.
  const int64_t by_memory = std::max<int64_t>(1, (int64_t(256) << 20) / int64_t(std::max<size_t>(1, per * 8)));
  const int threads = int(std::max<int64_t>(1, std::min<int64_t>({int64_t(a.threads), Di, by_memory})));
  std::vector<float> part(size_t(threads) * per * 2, 0.f);  // per thread: dB, then dC
#pragma omp parallel num_threads(threads)
  {
    float* pdB = part.data() + size_t(omp_get_thread_num()) * per * 2;
    float* pdC = pdB + per;
    const size_t ns = static_cast<size_t>(N), ls = static_cast<size_t>(L);
    std::vector<float> hs((ls + 1) * ns), dts(ls), dy0(ls), gs(ns), A(ns);
    std::vector<double> dA(ns);
#pragma omp for schedule(static)  // a fixed channel -> thread map: the dB / dC partials, and so their sum, repeat
    for (int64_t c = 0; c < Di; ++c) {
      for (int64_t n = 0; n < N; ++n) A[n] = a.A[c * N + n], dA[n] = 0.0;
      double dD = 0.0, dbias = 0.0;
      const float bias = a.delta_bias ? a.delta_bias[c] : 0.f;
      for (int64_t b = 0; b < Bt; ++b) {
        std::fill(hs.begin(), hs.begin() + N, 0.f);
        for (int64_t t = 0; t < L; ++t) {  // forward, keeping every state
          const float u = a.u[b * a.u_b + t * a.u_t + c];
          float dt = a.delta[b * a.dl_b + t * a.dl_t + c] + bias;
          if (a.softplus) dt = ssm_softplus(dt);
          dts[t] = dt;
          const float* Bv = a.B + b * a.B_b + t * a.B_t;
          const float* Cv = a.C + b * a.C_b + t * a.C_t;
          float y = 0.f;
          for (int64_t n = 0; n < N; ++n) {
            const float h = std::exp(dt * A[n]) * hs[t * N + n] + dt * Bv[n] * u;
            hs[(t + 1) * N + n] = h;
            y += Cv[n] * h;
          }
          if (a.D) y += a.D[c] * u;
          const float dout = g.dout[b * g.dout_b + t * g.dout_t + c];
          if (a.z) {
            const float z = a.z[b * a.z_b + t * a.z_t + c], s = ssm_sigmoid(z);
            g.dz[(b * L + t) * Di + c] = dout * y * s * (1.f + z * (1.f - s));
            dy0[t] = dout * z * s;
          } else {
            dy0[t] = dout;
          }
        }
        std::fill(gs.begin(), gs.end(), 0.f);
        for (int64_t t = L - 1; t >= 0; --t) {  // backward: the state gradient g_{t-1} = a_t g_t + dy_{t-1} C_{t-1}
          const float u = a.u[b * a.u_b + t * a.u_t + c], dt = dts[t], dy = dy0[t];
          const float* Bv = a.B + b * a.B_b + t * a.B_t;
          const float* Cv = a.C + b * a.C_b + t * a.C_t;
          float* dBt = pdB + (b * L + t) * N;
          float* dCt = pdC + (b * L + t) * N;
          float du = a.D ? dy * a.D[c] : 0.f, ddt = 0.f;
          if (a.D) dD += double(dy) * u;
          for (int64_t n = 0; n < N; ++n) {
            dCt[n] += dy * hs[(t + 1) * N + n];
            gs[n] += dy * Cv[n];
            const float decay = std::exp(dt * A[n]), hprev = hs[t * N + n];
            dA[n] += double(gs[n]) * hprev * decay * dt;
            ddt += gs[n] * (hprev * decay * A[n] + Bv[n] * u);
            dBt[n] += gs[n] * dt * u;
            du += gs[n] * dt * Bv[n];
            gs[n] *= decay;
          }
          if (a.softplus) {
            const float raw = a.delta[b * a.dl_b + t * a.dl_t + c] + bias;
            if (raw <= 20.f) ddt *= ssm_sigmoid(raw);
          }
          g.du[(b * L + t) * Di + c] = du;
          g.ddelta[(b * L + t) * Di + c] = ddt;
          dbias += ddt;
        }
      }
      for (int64_t n = 0; n < N; ++n) g.dA[c * N + n] = float(dA[n]);
      if (g.dD) g.dD[c] = float(dD);
      if (g.ddelta_bias) g.ddelta_bias[c] = float(dbias);
    }
  }
  // dB, dC: the threads' partial sums in thread order (with the static schedule: bit-identical for a given thread
  // count, which resumed training runs rely on).
  for (size_t i = 0; i < per; ++i) {
    float sb = 0.f, sc = 0.f;
    for (int th = 0; th < threads; ++th) sb += part[size_t(th) * per * 2 + i], sc += part[size_t(th) * per * 2 + per + i];
    g.dB[i] = sb;
    g.dC[i] = sc;
  }
}

}  // namespace flashkit::kernels
