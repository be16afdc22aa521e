// The CS149 op checks shared by the CPU tests (test_cs149.cpp) and the CUDA tests (test_cs149_cuda.cpp): random
// inputs (never zeros), NaN-poisoned outputs, results against plain f64 references (cs149_reference.hpp). The
// device's memory comes through `Memory`, so the same checks run on either device.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cs149_reference.hpp"
#include "flashkit/cs149.hpp"
#include "flashkit/dtype.hpp"

namespace cs149_test {

using flashkit::Device;

// Device memory for one test: allocations live until the Memory is destroyed.
struct Memory {
  virtual ~Memory() = default;
  virtual Device device() const = 0;
  virtual void* alloc(size_t bytes) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  template <typename T>
  T* put(const std::vector<T>& v) {
    T* p = static_cast<T*>(alloc(std::max<size_t>(1, v.size()) * sizeof(T)));
    upload(p, v.data(), v.size() * sizeof(T));
    return p;
  }
  template <typename T>
  std::vector<T> get(const T* p, size_t n) {
    std::vector<T> v(n);
    download(v.data(), p, n * sizeof(T));
    return v;
  }
};

inline std::vector<float> randn(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = d(rng);
    if (x == 0.f) x = 1e-3f;
  }
  return v;
}

// Values in [0, value_range), so value_range > num_bins also checks that out-of-range values are not counted.
inline void check_histogram(Memory& mem, int64_t length, int64_t channels, int64_t num_bins, int value_range,
                            uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, value_range - 1);
  std::vector<uint8_t> data(size_t(length * channels));
  if (value_range == 256) {  // four bytes per draw: the course shape has 512 M values
    for (size_t i = 0; i + 4 <= data.size(); i += 4) {
      const uint32_t r = uint32_t(rng());
      std::memcpy(&data[i], &r, 4);
    }
    for (size_t i = data.size() / 4 * 4; i < data.size(); ++i) data[i] = uint8_t(d(rng));
  } else {
    for (auto& x : data) x = uint8_t(d(rng));
  }
  std::vector<int32_t> poison(size_t(channels * num_bins), -7);
  flashkit::cs149::HistogramArgs a;
  a.data = mem.put(data);
  a.length = length; a.channels = channels; a.num_bins = num_bins;
  a.out = mem.put(poison);
  a.device = mem.device();
  flashkit::cs149::histogram(a);
  const auto got = mem.get(a.out, poison.size());
  const auto want = reference::histogram(data, length, channels, num_bins);
  int64_t wrong = 0;
  for (size_t i = 0; i < want.size(); ++i) wrong += got[i] != want[i];
  EXPECT_EQ(wrong, 0) << "length " << length << " channels " << channels << " bins " << num_bins;
}

// rows: check only these rows of out against the f64 reference (all rows when empty), for full-size shapes.
inline void check_swiglu(Memory& mem, int64_t m, int64_t k, int64_t n, float beta, uint32_t seed, double tol,
                         int64_t check_rows = -1,
                         flashkit::cs149::SwigluKernel kernel = flashkit::cs149::SwigluKernel::automatic) {
  std::mt19937 rng(seed);
  const auto x = randn(size_t(m * k), rng), w = randn(size_t(k * n), rng), v = randn(size_t(k * n), rng);
  const auto b = randn(size_t(n), rng), c = randn(size_t(n), rng);
  std::vector<float> poison(size_t(m * n), std::numeric_limits<float>::quiet_NaN());
  flashkit::cs149::SwigluArgs a;
  a.x = mem.put(x); a.w = mem.put(w); a.v = mem.put(v); a.b = mem.put(b); a.c = mem.put(c);
  a.beta = beta; a.m = m; a.k = k; a.n = n; a.kernel = kernel;
  a.out = mem.put(poison);
  a.device = mem.device();
  flashkit::cs149::swiglu(a);
  const auto got = mem.get(a.out, poison.size());
  std::vector<int64_t> rows;
  if (check_rows < 0 || check_rows >= m) {
    for (int64_t r = 0; r < m; ++r) rows.push_back(r);
  } else {
    std::uniform_int_distribution<int64_t> pick(0, m - 1);
    rows = {0, m - 1};
    while (int64_t(rows.size()) < check_rows) rows.push_back(pick(rng));
  }
  // Relative error per row against the f64 reference, scaled by the row's norm: f32 accuracy is ~1e-6.
  // Also the course's own check, element by element: allclose(rtol = 1e-2, atol = 1e-2). At K = 2048 the outputs
  // are ~2000, so near their zeros atol asks for ~5e-6 of the scale: a biased accumulation fails it (run s8-2).
  double worst = 0;
  int64_t nan_count = 0, course_bad = 0;
  for (int64_t r : rows) {
    const auto want = reference::swiglu_row(x, w, v, b, c, beta, r, k, n);
    double num = 0, den = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double g = got[size_t(r * n + j)];
      if (!std::isfinite(g)) ++nan_count;
      course_bad += !(std::abs(g - want[size_t(j)]) <= 1e-2 + 1e-2 * std::abs(want[size_t(j)]));
      num += (g - want[size_t(j)]) * (g - want[size_t(j)]);
      den += want[size_t(j)] * want[size_t(j)];
    }
    worst = std::max(worst, std::sqrt(num / std::max(den, 1e-300)));
  }
  EXPECT_EQ(nan_count, 0);
  EXPECT_EQ(course_bad, 0) << "outside the course's allclose; m " << m << " k " << k << " n " << n;
  EXPECT_LE(worst, tol) << "m " << m << " k " << k << " n " << n;
}

// The boundary layer must equal u0 exactly; interior points within tol of the f64 scheme.
inline void check_rk4(Memory& mem, int64_t nz, int64_t ny, int64_t nx, int64_t steps, uint32_t seed, double tol,
                      flashkit::cs149::Rk4Kernel kernel = flashkit::cs149::Rk4Kernel::automatic) {
  std::mt19937 rng(seed);
  const auto u0 = randn(size_t(nz * ny * nx), rng);
  std::uniform_real_distribution<float> ua(0.1f, 5.0f), uh(0.5f, 2.0f);
  flashkit::cs149::Rk4Args a;
  a.alpha = ua(rng); a.hx = uh(rng); a.hy = uh(rng); a.hz = uh(rng);
  a.u0 = mem.put(u0);
  a.nz = nz; a.ny = ny; a.nx = nx; a.n_steps = steps; a.kernel = kernel;
  std::vector<float> poison(u0.size(), std::numeric_limits<float>::quiet_NaN());
  a.out = mem.put(poison);
  a.device = mem.device();
  flashkit::cs149::rk4(a);
  const auto got = mem.get(a.out, u0.size());
  const auto want = reference::rk4(u0, nz, ny, nx, a.alpha, a.hx, a.hy, a.hz, steps);
  double worst = 0;
  int64_t boundary_wrong = 0;
  for (int64_t z = 0; z < nz; ++z)
    for (int64_t y = 0; y < ny; ++y)
      for (int64_t x = 0; x < nx; ++x) {
        const size_t i = size_t((z * ny + y) * nx + x);
        const bool interior = z >= 4 && z < nz - 4 && y >= 4 && y < ny - 4 && x >= 4 && x < nx - 4;
        if (!interior) {
          boundary_wrong += !(got[i] == u0[i]);
        } else {
          const double e = std::abs(got[i] - want[i]) / (1.0 + std::abs(want[i]));
          worst = std::isfinite(e) ? std::max(worst, e) : 1e30;
        }
      }
  EXPECT_EQ(boundary_wrong, 0);
  EXPECT_LE(worst, tol) << nz << "x" << ny << "x" << nx << " steps " << steps;
}

// f16 rounds the normalised values and the result (as the course reference does): a few 1e-3 relative.
inline void check_layernorm_head(Memory& mem, int64_t rows, int64_t width, flashkit::DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  auto xs = randn(size_t(rows * width), rng, 2.0f), ws = randn(size_t(width), rng, 0.05f), bs = randn(1, rng);
  for (auto& v : xs) v += 0.5f;  // a non-zero mean, so the centring is tested
  const bool half = dtype == flashkit::DType::f16;
  auto pack = [&](std::vector<float>& v) {  // the values as the device sees them, and their bytes
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      h[i] = flashkit::f32_to_f16(v[i]);
      if (half) v[i] = flashkit::f16_to_f32(h[i]);
    }
    return h;
  };
  const auto xh = pack(xs), wh = pack(ws), bh = pack(bs);
  flashkit::cs149::LayerNormHeadArgs a;
  a.rows = rows; a.width = width; a.dtype = dtype; a.eps = 1e-6f; a.device = mem.device();
  if (half) {
    a.x = mem.put(xh); a.w = mem.put(wh); a.bias = mem.put(bh);
    a.out = mem.put(std::vector<uint16_t>(size_t(rows), 0x7e00));  // NaN
  } else {
    a.x = mem.put(xs); a.w = mem.put(ws); a.bias = mem.put(bs);
    a.out = mem.put(std::vector<float>(size_t(rows), std::numeric_limits<float>::quiet_NaN()));
  }
  flashkit::cs149::layernorm_head(a);
  std::vector<double> got(static_cast<size_t>(rows));
  if (half) {
    const auto h = mem.get(static_cast<const uint16_t*>(a.out), size_t(rows));
    for (size_t i = 0; i < h.size(); ++i) got[i] = flashkit::f16_to_f32(h[i]);
  } else {
    const auto f = mem.get(static_cast<const float*>(a.out), size_t(rows));
    for (size_t i = 0; i < f.size(); ++i) got[i] = f[i];
  }
  const auto want = reference::layernorm_head(std::vector<double>(xs.begin(), xs.end()),
                                              std::vector<double>(ws.begin(), ws.end()), bs[0], 1e-6, rows, width);
  const double tol = half ? 5e-3 : 1e-5;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += !(std::abs(got[i] - want[i]) <= tol * (1.0 + std::abs(want[i])));
  EXPECT_EQ(bad, 0) << "rows " << rows << " width " << width << (half ? " f16" : " f32");
}

inline void check_query_embed(Memory& mem, int64_t rows, int64_t in_dim, int64_t width, flashkit::DType dtype,
                              uint32_t seed) {
  std::mt19937 rng(seed);
  auto qs = randn(size_t(rows * in_dim), rng), ws = randn(size_t(width * in_dim), rng, 0.5f);
  auto bs = randn(size_t(width), rng, 0.1f);
  const bool half = dtype == flashkit::DType::f16;
  auto pack = [&](std::vector<float>& v) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      h[i] = flashkit::f32_to_f16(v[i]);
      if (half) v[i] = flashkit::f16_to_f32(h[i]);
    }
    return h;
  };
  const auto qh = pack(qs), wh = pack(ws), bh = pack(bs);
  flashkit::cs149::QueryEmbedArgs a;
  a.rows = rows; a.in_dim = in_dim; a.width = width; a.dtype = dtype; a.device = mem.device();
  const size_t n = size_t(rows * width);
  if (half) {
    a.q = mem.put(qh); a.w = mem.put(wh); a.b = mem.put(bh);
    a.h = mem.put(std::vector<uint16_t>(n, 0x7e00));
  } else {
    a.q = mem.put(qs); a.w = mem.put(ws); a.b = mem.put(bs);
    a.h = mem.put(std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()));
  }
  flashkit::cs149::query_embed(a);
  std::vector<double> got(n);
  if (half) {
    const auto h = mem.get(static_cast<const uint16_t*>(a.h), n);
    for (size_t i = 0; i < n; ++i) got[i] = flashkit::f16_to_f32(h[i]);
  } else {
    const auto f = mem.get(static_cast<const float*>(a.h), n);
    for (size_t i = 0; i < n; ++i) got[i] = f[i];
  }
  const auto want = reference::query_embed(std::vector<double>(qs.begin(), qs.end()),
                                           std::vector<double>(ws.begin(), ws.end()),
                                           std::vector<double>(bs.begin(), bs.end()), rows, in_dim, width);
  const double tol = half ? 3e-3 : 1e-5;
  int64_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += !(std::abs(got[i] - want[i]) <= tol * (1.0 + std::abs(want[i])));
  EXPECT_EQ(bad, 0) << "rows " << rows << " in_dim " << in_dim << " width " << width << (half ? " f16" : " f32");
}

}  // namespace cs149_test
