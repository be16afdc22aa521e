// Plain f64 references of the CS149 ops (loops, no tricks), the oracles of tests/cs149.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace cs149_test::reference {

inline std::vector<int32_t> histogram(const std::vector<uint8_t>& data, int64_t length, int64_t channels,
                                      int64_t num_bins) {
  std::vector<int32_t> out(size_t(channels * num_bins), 0);
  for (int64_t r = 0; r < length; ++r)
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t v = data[size_t(r * channels + c)];
      if (v < num_bins) ++out[size_t(c * num_bins + v)];
    }
  return out;
}

inline std::vector<double> swiglu_row(const std::vector<float>& x, const std::vector<float>& w,
                                      const std::vector<float>& v, const std::vector<float>& b,
                                      const std::vector<float>& c, double beta, int64_t row, int64_t k, int64_t n) {
  std::vector<double> g(size_t(n), 0.0), h(size_t(n), 0.0);
  for (int64_t i = 0; i < k; ++i) {
    const double xi = x[size_t(row * k + i)];
    for (int64_t j = 0; j < n; ++j) {
      g[size_t(j)] += xi * w[size_t(i * n + j)];
      h[size_t(j)] += xi * v[size_t(i * n + j)];
    }
  }
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    const double gate = g[size_t(j)] + b[size_t(j)], value = h[size_t(j)] + c[size_t(j)];
    out[size_t(j)] = gate / (1.0 + std::exp(-beta * gate)) * value;
  }
  return out;
}

// The course's scheme in f64 (dt from the f32 inputs as the reference derives it, then kept in f64).
inline std::vector<double> rk4(const std::vector<float>& u0, int64_t nz, int64_t ny, int64_t nx, double alpha,
                               double hx, double hy, double hz, int64_t steps) {
  const double cf[5] = {-205.0 / 72.0, 8.0 / 5.0, -1.0 / 5.0, 8.0 / 315.0, -1.0 / 560.0};
  const double ix = 1 / (hx * hx), iy = 1 / (hy * hy), iz = 1 / (hz * hz);
  const double dt = 0.05 / (alpha * (ix + iy + iz));
  const int64_t sy = nx, sz = nx * ny;
  std::vector<double> u(u0.begin(), u0.end());
  auto lap = [&](const std::vector<double>& f, int64_t i) {
    double dx = cf[0] * f[size_t(i)], dy = dx, dz = dx;
    for (int r = 1; r <= 4; ++r) {
      dx += cf[r] * (f[size_t(i + r)] + f[size_t(i - r)]);
      dy += cf[r] * (f[size_t(i + r * sy)] + f[size_t(i - r * sy)]);
      dz += cf[r] * (f[size_t(i + r * sz)] + f[size_t(i - r * sz)]);
    }
    return alpha * (dx * ix + dy * iy + dz * iz);
  };
  if (nz < 9 || ny < 9 || nx < 9) return u;
  std::vector<int64_t> interior;
  for (int64_t z = 4; z < nz - 4; ++z)
    for (int64_t y = 4; y < ny - 4; ++y)
      for (int64_t x = 4; x < nx - 4; ++x) interior.push_back(z * sz + y * sy + x);
  std::vector<double> k1(u.size()), k2(u.size()), k3(u.size()), k4(u.size()), s(u.size());
  for (int64_t step = 0; step < steps; ++step) {
    s = u;
    for (int64_t i : interior) k1[size_t(i)] = lap(u, i);
    for (int64_t i : interior) s[size_t(i)] = u[size_t(i)] + 0.5 * dt * k1[size_t(i)];
    for (int64_t i : interior) k2[size_t(i)] = lap(s, i);
    for (int64_t i : interior) s[size_t(i)] = u[size_t(i)] + 0.5 * dt * k2[size_t(i)];
    for (int64_t i : interior) k3[size_t(i)] = lap(s, i);
    for (int64_t i : interior) s[size_t(i)] = u[size_t(i)] + dt * k3[size_t(i)];
    for (int64_t i : interior) k4[size_t(i)] = lap(s, i);
    for (int64_t i : interior)
      u[size_t(i)] += dt / 6.0 * (k1[size_t(i)] + 2 * k2[size_t(i)] + 2 * k3[size_t(i)] + k4[size_t(i)]);
  }
  return u;
}

inline std::vector<double> layernorm_head(const std::vector<double>& x, const std::vector<double>& w, double bias,
                                          double eps, int64_t rows, int64_t width) {
  std::vector<double> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0, dot = 0;
    for (int64_t j = 0; j < width; ++j) mean += x[size_t(r * width + j)];
    mean /= double(width);
    for (int64_t j = 0; j < width; ++j) var += (x[size_t(r * width + j)] - mean) * (x[size_t(r * width + j)] - mean);
    const double rstd = 1.0 / std::sqrt(var / double(width) + eps);
    for (int64_t j = 0; j < width; ++j) dot += (x[size_t(r * width + j)] - mean) * rstd * w[size_t(j)];
    out[size_t(r)] = dot + bias;
  }
  return out;
}

inline std::vector<double> query_embed(const std::vector<double>& q, const std::vector<double>& w,
                                       const std::vector<double>& b, int64_t rows, int64_t in_dim, int64_t width) {
  std::vector<double> h(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < width; ++j) {
      double x = b[size_t(j)];
      for (int64_t i = 0; i < in_dim; ++i) x += q[size_t(r * in_dim + i)] * w[size_t(j * in_dim + i)];
      h[size_t(r * width + j)] = x / (1.0 + std::exp(-x));
    }
  return h;
}

}  // namespace cs149_test::reference
