// Test helpers for the CUDA training kernels: a fixture that skips without a GPU, device buffers that free
// themselves (bf16 buffers are filled from f32 values rounded to bf16, or poisoned with NaN), random inputs and the
// comparison against f64 references (tests/train/cuda/reference.hpp).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "flashkit/dtype.hpp"
#include "flashkit/error.hpp"
#include "train/cuda/kernels.hpp"

namespace fk_train_test {

namespace tc = flashkit::train::cuda;
using tc::bf16;

inline const float kNaN = std::numeric_limits<float>::quiet_NaN();

inline bool have_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

// Every GPU test derives from this: skipped without a device; `stream` is a fresh non-default stream.
class TrainCuda : public ::testing::Test {
 protected:
  cudaStream_t stream = nullptr;
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  }
  void TearDown() override {
    if (stream) cudaStreamDestroy(stream);
  }
  void sync() {
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  }
};

inline std::vector<float> rnd(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}
inline float bfr(float x) { return flashkit::bf16_to_f32(flashkit::f32_to_bf16(x)); }
inline std::vector<float> bfr(std::vector<float> v) {
  for (auto& x : v) x = bfr(x);
  return v;
}
inline std::vector<double> to_d(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// A device array of n elements of T (float, int32_t, uint16_t bits of bf16).
template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    if (cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)) != cudaSuccess) throw std::runtime_error("cudaMalloc");
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  ~Dev() { cudaFree(p); }
  void put(const std::vector<T>& h) {
    if (h.size() != n) throw std::runtime_error("Dev::put size");
    if (cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess) throw std::runtime_error("H2D");
  }
  std::vector<T> raw() const {
    std::vector<T> h(n);
    if (cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess) throw std::runtime_error("D2H");
    return h;
  }
};

// f32 device buffer: from values, or NaN-poisoned.
struct F32 : Dev<float> {
  explicit F32(size_t count) : Dev<float>(count) { put(std::vector<float>(count, kNaN)); }
  explicit F32(const std::vector<float>& v) : Dev<float>(v.size()) { put(v); }
  std::vector<float> get() const { return raw(); }
};
// bf16 device buffer: from values (rounded to bf16), or NaN-poisoned.
struct BF16 : Dev<uint16_t> {
  explicit BF16(size_t count) : Dev<uint16_t>(count) { put(std::vector<uint16_t>(count, uint16_t(0x7fc0))); }
  explicit BF16(const std::vector<float>& v) : Dev<uint16_t>(v.size()) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = flashkit::f32_to_bf16(v[i]);
    put(h);
  }
  bf16* b() const { return reinterpret_cast<bf16*>(p); }
  std::vector<float> get() const {
    const auto h = raw();
    std::vector<float> v(h.size());
    for (size_t i = 0; i < h.size(); ++i) v[i] = flashkit::bf16_to_f32(h[i]);
    return v;
  }
};
struct I32 : Dev<int32_t> {
  explicit I32(const std::vector<int32_t>& v) : Dev<int32_t>(v.size()) { put(v); }
};

// Over the finite entries only: references mark rows without a defined value (an ignored target, a gap that
// must stay untouched) with NaN, and one NaN must not turn every tolerance into NaN (then nothing compares).
inline double rms(const std::vector<double>& v) {
  double s = 0;
  size_t n = 0;
  for (double x : v)
    if (std::isfinite(x)) s += x * x, ++n;
  return n == 0 ? 0.0 : std::sqrt(s / double(n));
}

// Expects finite values with |got[i] - ref[i]| <= rel * |ref[i]| + tol_abs for every i (idx: the indices to
// compare; all when empty); reports the first few misses.
inline void expect_close_abs(const std::vector<float>& got, const std::vector<double>& ref, double rel,
                             double tol_abs, const std::string& what, const std::vector<size_t>& idx = {}) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  size_t bad = 0, checked = 0;
  auto one = [&](size_t i) {
    ++checked;
    const double d = std::fabs(double(got[i]) - ref[i]);
    if (!std::isfinite(got[i]) || !(d <= rel * std::fabs(ref[i]) + tol_abs)) {
      if (bad < 5)
        ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " expected " << ref[i] << " (|diff| " << d
                      << ")";
      ++bad;
    }
  };
  if (idx.empty())
    for (size_t i = 0; i < got.size(); ++i) one(i);
  else
    for (size_t i : idx) one(i);
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << checked << " elements out of tolerance";
  EXPECT_GT(checked, 0u) << what;
}
// The same with tol_abs = abs_frac * rms(ref).
inline void expect_close(const std::vector<float>& got, const std::vector<double>& ref, double rel, double abs_frac,
                         const std::string& what, const std::vector<size_t>& idx = {}) {
  expect_close_abs(got, ref, rel, abs_frac * rms(ref), what, idx);
}
// bf16 outputs: half an ulp of bf16 is 2^-9 relative; allow twice that plus a little for f32 cancellation.
inline void expect_bf16(const std::vector<float>& got, const std::vector<double>& ref, const std::string& what,
                        const std::vector<size_t>& idx = {}) {
  expect_close(got, ref, 4e-3, 2e-5, what, idx);
}
inline void expect_f32(const std::vector<float>& got, const std::vector<double>& ref, const std::string& what,
                       const std::vector<size_t>& idx = {}) {
  expect_close(got, ref, 1e-5, 1e-6, what, idx);
}
inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace fk_train_test
