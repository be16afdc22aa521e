// The CPU training backend's Mamba-1 ops (included by cpu_backend.cpp only): the causal depthwise conv1d + SiLU
// forward and backward as plain loops for both scalar types, and the selective scan: f32 through flashkit's op
// (include/flashkit/ssm.hpp, the CPU forward and backward kernels), f64 as plain loops for the finite-difference
// gradient tests (the op is f32 only). Layouts: backend.hpp. Every reduction runs in a fixed order.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "flashkit/ssm.hpp"
#include "kernels/ssm_math.hpp"
#include "train/backend.hpp"

namespace flashkit::train::cpu_ssm {

template <class T>
inline T* rowp(const Mat& m, int64_t r) { return static_cast<T*>(m.data) + r * m.ld; }
// SiLU and its derivative, on the scan kernels' one sigmoid (kernels/ssm_math.hpp); softplus is theirs too.
template <class T>
inline T silu_of(T x, T* deriv) {
  const T s = kernels::ssm_sigmoid(x);
  if (deriv) *deriv = s * (T(1) + x * (T(1) - s));
  return x * s;
}
using kernels::ssm_softplus;

// Pre-activation of row r, channel c: bias + sum_k w[c, k] x[t - (W-1) + k] inside row r's sequence.
template <class T>
inline T conv_pre(const Mat& x, const Mat& w, const Mat& bias, int64_t r, int64_t c, int64_t seq) {
  const int64_t W = w.cols, t = r % seq;
  T acc = bias.empty() ? T(0) : static_cast<const T*>(bias.data)[c];
  const T* wc = rowp<T>(w, c);
  for (int64_t k = std::max<int64_t>(0, W - 1 - t); k < W; ++k) acc += wc[k] * rowp<T>(x, r - (W - 1) + k)[c];
  return acc;
}

template <class T>
void conv1d_silu_fwd(const Mat& x, const Mat& w, const Mat& bias, const Mat& out, int64_t seq, int threads) {
  const int64_t C = x.cols;
#pragma omp parallel for schedule(static) num_threads(threads) if (x.rows * C > 32768)
  for (int64_t r = 0; r < x.rows; ++r)
    for (int64_t c = 0; c < C; ++c) rowp<T>(out, r)[c] = silu_of<T>(conv_pre<T>(x, w, bias, r, c, seq), nullptr);
}

template <class T>
void conv1d_silu_bwd(const Mat& dout, const Mat& x, const Mat& w, const Mat& bias, const Mat& dx, const Mat& dw,
                     const Mat& dbias, int64_t seq, int threads) {
  const int64_t C = x.cols, R = x.rows, W = w.cols;
  std::vector<T> dpre(static_cast<size_t>(R * C));
#pragma omp parallel for schedule(static) num_threads(threads) if (R * C > 32768)
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      T d;
      silu_of<T>(conv_pre<T>(x, w, bias, r, c, seq), &d);
      dpre[size_t(r * C + c)] = rowp<T>(dout, r)[c] * d;
    }
  // Channels split across threads: each owns its dw row and dbias entry, rows summed in order.
#pragma omp parallel for schedule(static) num_threads(threads) if (R * C > 32768)
  for (int64_t c = 0; c < C; ++c) {
    T* dwc = rowp<T>(dw, c);
    T db = 0;
    for (int64_t r = 0; r < R; ++r) {
      const int64_t t = r % seq;
      T acc = 0;  // dx[r] = sum_k w[c, k] dpre[r + (W-1) - k], same sequence
      for (int64_t k = 0; k < W; ++k) {
        const int64_t tt = t + (W - 1) - k;
        if (tt < seq) acc += rowp<T>(w, c)[k] * dpre[size_t((r + (W - 1) - k) * C + c)];
      }
      rowp<T>(dx, r)[c] = acc;
      const T g = dpre[size_t(r * C + c)];
      db += g;
      for (int64_t k = std::max<int64_t>(0, W - 1 - t); k < W; ++k) dwc[k] += g * rowp<T>(x, r - (W - 1) + k)[c];
    }
    if (!dbias.empty()) static_cast<T*>(dbias.data)[c] += db;
  }
}

// ---- f64 scan (gradient tests) ----
struct ScanIo {
  const Mat *u, *delta, *A_log, *Bm, *Cm, *D, *z, *delta_bias;
};
inline void scan_fwd_f64(const ScanIo& io, const Mat& y, int64_t seq, int threads) {
  const int64_t Di = io.u->cols, N = io.Bm->cols, Bt = io.u->rows / seq;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t c = 0; c < Di; ++c) {
    std::vector<double> h(static_cast<size_t>(N));
    for (int64_t b = 0; b < Bt; ++b) {
      std::fill(h.begin(), h.end(), 0.0);
      for (int64_t t = 0; t < seq; ++t) {
        const int64_t r = b * seq + t;
        const double u = rowp<double>(*io.u, r)[c];
        const double dt = ssm_softplus(rowp<double>(*io.delta, r)[c] + rowp<double>(*io.delta_bias, 0)[c]);
        double acc = 0;
        for (int64_t n = 0; n < N; ++n) {
          const double A = -std::exp(rowp<double>(*io.A_log, c)[n]);
          h[size_t(n)] = std::exp(dt * A) * h[size_t(n)] + dt * rowp<double>(*io.Bm, r)[n] * u;
          acc += rowp<double>(*io.Cm, r)[n] * h[size_t(n)];
        }
        acc += rowp<double>(*io.D, 0)[c] * u;
        rowp<double>(y, r)[c] = acc * silu_of<double>(rowp<double>(*io.z, r)[c], nullptr);
      }
    }
  }
}
// Reverse mode over the saved states; single-threaded (dBm / dCm sum over channels, the shapes are tiny).
inline void scan_bwd_f64(const ScanIo& io, const Mat& dy, const Mat& du, const Mat& ddelta, const Mat& dBm,
                         const Mat& dCm, const Mat& dz, const Mat& dA_log, const Mat& dD, const Mat& ddb, int64_t seq) {
  const int64_t Di = io.u->cols, N = io.Bm->cols, R = io.u->rows, Bt = R / seq;
  for (int64_t r = 0; r < R; ++r) {
    std::memset(rowp<double>(dBm, r), 0, size_t(N) * 8);
    std::memset(rowp<double>(dCm, r), 0, size_t(N) * 8);
  }
  std::vector<double> hs(static_cast<size_t>((seq + 1) * N)), dh(static_cast<size_t>(N)), A(static_cast<size_t>(N));
  for (int64_t c = 0; c < Di; ++c) {
    for (int64_t n = 0; n < N; ++n) A[size_t(n)] = -std::exp(rowp<double>(*io.A_log, c)[n]);
    const double bias = rowp<double>(*io.delta_bias, 0)[c], Dc = rowp<double>(*io.D, 0)[c];
    for (int64_t b = 0; b < Bt; ++b) {
      std::fill(hs.begin(), hs.begin() + N, 0.0);
      for (int64_t t = 0; t < seq; ++t) {
        const int64_t r = b * seq + t;
        const double u = rowp<double>(*io.u, r)[c], dt = ssm_softplus(rowp<double>(*io.delta, r)[c] + bias);
        for (int64_t n = 0; n < N; ++n)
          hs[size_t((t + 1) * N + n)] = std::exp(dt * A[size_t(n)]) * hs[size_t(t * N + n)] + dt * rowp<double>(*io.Bm, r)[n] * u;
      }
      std::fill(dh.begin(), dh.end(), 0.0);
      for (int64_t t = seq - 1; t >= 0; --t) {
        const int64_t r = b * seq + t;
        const double u = rowp<double>(*io.u, r)[c], pre = rowp<double>(*io.delta, r)[c] + bias;
        const double dt = ssm_softplus(pre), z = rowp<double>(*io.z, r)[c];
        const double* h = &hs[size_t((t + 1) * N)];
        const double* hp = &hs[size_t(t * N)];
        double y0 = Dc * u;
        for (int64_t n = 0; n < N; ++n) y0 += rowp<double>(*io.Cm, r)[n] * h[n];
        double dsilu;
        const double gate = silu_of<double>(z, &dsilu), g = rowp<double>(dy, r)[c];
        rowp<double>(dz, r)[c] = g * y0 * dsilu;
        const double dy0 = g * gate;
        double du_acc = dy0 * Dc, ddt = 0;
        rowp<double>(dD, 0)[c] += dy0 * u;
        for (int64_t n = 0; n < N; ++n) {
          rowp<double>(dCm, r)[n] += dy0 * h[n];
          dh[size_t(n)] += dy0 * rowp<double>(*io.Cm, r)[n];
          const double a = std::exp(dt * A[size_t(n)]), Bn = rowp<double>(*io.Bm, r)[n];
          ddt += dh[size_t(n)] * (A[size_t(n)] * a * hp[n] + Bn * u);
          rowp<double>(dA_log, c)[n] += dh[size_t(n)] * dt * a * hp[n] * A[size_t(n)];  // dA/dA_log = A
          rowp<double>(dBm, r)[n] += dh[size_t(n)] * dt * u;
          du_acc += dh[size_t(n)] * dt * Bn;
          dh[size_t(n)] *= a;
        }
        rowp<double>(du, r)[c] = du_acc;
        const double dpre = pre > 20 ? ddt : ddt / (1 + std::exp(-pre));  // softplus' = sigmoid
        rowp<double>(ddelta, r)[c] = dpre;
        rowp<double>(ddb, 0)[c] += dpre;
      }
    }
  }
}

// ---- f32 scan through flashkit's op ----
inline TensorView view3(const Mat& m, int64_t seq) {
  TensorView t;
  t.data = m.data;
  t.dtype = DType::f32;
  t.ndim = 3;
  t.shape = {m.rows / seq, seq, m.cols, 0};
  t.strides = {seq * m.ld, m.ld, 1, 0};
  return t;
}
inline TensorView vec1(const Mat& m) { return TensorView::contiguous(m.data, DType::f32, {m.cols}); }

inline SelectiveScanArgs scan_args_f32(const ScanIo& io, std::vector<float>& A, int64_t seq, int threads) {
  const int64_t Di = io.A_log->rows, N = io.A_log->cols;
  A.resize(size_t(Di * N));
  for (int64_t c = 0; c < Di; ++c)
    for (int64_t n = 0; n < N; ++n) A[size_t(c * N + n)] = -std::exp(rowp<float>(*io.A_log, c)[n]);
  SelectiveScanArgs a;
  a.u = view3(*io.u, seq);
  a.delta = view3(*io.delta, seq);
  a.A = TensorView::contiguous(A.data(), DType::f32, {Di, N});
  a.B = view3(*io.Bm, seq);
  a.C = view3(*io.Cm, seq);
  a.D = vec1(*io.D);
  a.z = view3(*io.z, seq);
  a.delta_bias = vec1(*io.delta_bias);
  a.delta_softplus = true;
  a.impl = SsmImpl::cpu;
  a.threads = threads;
  return a;
}
inline void scan_fwd_f32(const ScanIo& io, const Mat& y, int64_t seq, int threads) {
  std::vector<float> A;
  SelectiveScanArgs a = scan_args_f32(io, A, seq, threads);
  a.y = view3(y, seq);
  selective_scan_forward(a);
}
inline void scan_bwd_f32(const ScanIo& io, const Mat& dy, const Mat& du, const Mat& ddelta, const Mat& dBm,
                         const Mat& dCm, const Mat& dz, const Mat& dA_log, const Mat& dD, const Mat& ddb, int64_t seq,
                         int threads) {
  std::vector<float> A;
  SelectiveScanArgs a = scan_args_f32(io, A, seq, threads);
  const int64_t R = io.u->rows, Di = io.u->cols, N = io.Bm->cols, Bt = R / seq;
  // The op writes contiguous gradients: scratch, then copied into the (strided) destinations.
  const size_t rd = static_cast<size_t>(R * Di), rn = static_cast<size_t>(R * N), dn = static_cast<size_t>(Di * N),
               d = static_cast<size_t>(Di);
  std::vector<float> s_du(rd), s_dd(rd), s_dz(rd), s_dB(rn), s_dC(rn), s_dA(dn), s_dD(d), s_db(d), s_y(rd);
  a.y = TensorView::contiguous(s_y.data(), DType::f32, {Bt, seq, Di});  // validated by the op, not used
  auto c3 = [&](std::vector<float>& v, int64_t cols) { return TensorView::contiguous(v.data(), DType::f32, {Bt, seq, cols}); };
  SelectiveScanGrads g;
  g.du = c3(s_du, Di);
  g.ddelta = c3(s_dd, Di);
  g.dz = c3(s_dz, Di);
  g.dB = c3(s_dB, N);
  g.dC = c3(s_dC, N);
  g.dA = TensorView::contiguous(s_dA.data(), DType::f32, {Di, N});
  g.dD = TensorView::contiguous(s_dD.data(), DType::f32, {Di});
  g.ddelta_bias = TensorView::contiguous(s_db.data(), DType::f32, {Di});
  selective_scan_backward(a, view3(dy, seq), g);
  auto put = [&](const Mat& dst, const std::vector<float>& src) {
    for (int64_t r = 0; r < dst.rows; ++r) std::memcpy(rowp<float>(dst, r), src.data() + r * dst.cols, size_t(dst.cols) * 4);
  };
  put(du, s_du);
  put(ddelta, s_dd);
  put(dz, s_dz);
  put(dBm, s_dB);
  put(dCm, s_dC);
  for (int64_t c = 0; c < Di; ++c) {
    for (int64_t n = 0; n < N; ++n) rowp<float>(dA_log, c)[n] += s_dA[size_t(c * N + n)] * A[size_t(c * N + n)];
    rowp<float>(dD, 0)[c] += s_dD[size_t(c)];
    rowp<float>(ddb, 0)[c] += s_db[size_t(c)];
  }
}

}  // namespace flashkit::train::cpu_ssm
