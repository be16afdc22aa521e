// Random selective-scan problems for the SSM tests (CPU and CUDA): host buffers, views in the op's layouts, and a
// relative error. Inputs are random (never zeros); outputs are poisoned with NaN before each call.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "flashkit/ssm.hpp"

namespace ssm_test {

using flashkit::DType;
using flashkit::TensorView;

inline TensorView view(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(v.data(), DType::f32, shape);
}

inline void poison(std::vector<float>& v) { std::fill(v.begin(), v.end(), std::numeric_limits<float>::quiet_NaN()); }

// max |a - b| / max(max |b|, tiny): NaN anywhere gives +inf.
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    num = std::max(num, std::fabs(double(a[i]) - b[i]));
    den = std::max(den, std::fabs(double(b[i])));
  }
  return num / den;
}

struct ScanProblem {
  int64_t batch, seqlen, d_inner, d_state;
  bool with_D, with_z, with_bias;
  std::vector<float> u, delta, A, B, C, D, z, bias, y;
  ScanProblem(int64_t b, int64_t l, int64_t di, int64_t n, bool d = true, bool zz = true, bool bi = true,
              uint32_t seed = 1)
      : batch(b), seqlen(l), d_inner(di), d_state(n), with_D(d), with_z(zz), with_bias(bi) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> sym(-1.f, 1.f), pos(0.1f, 1.f);
    auto fill = [&](std::vector<float>& v, size_t n_, auto& dist) {
      v.resize(n_);
      for (auto& x : v) x = dist(rng);
    };
    fill(u, b * l * di, sym);
    fill(delta, b * l * di, sym);
    A.resize(di * n);
    for (auto& x : A) x = -std::exp(sym(rng) * 1.5f);  // -exp(A_log)
    fill(B, b * l * n, sym);
    fill(C, b * l * n, sym);
    fill(D, di, sym);
    fill(z, b * l * di, sym);
    fill(bias, di, sym);
    y.assign(b * l * di, 0.f);
    poison(y);
  }
  // Without delta_softplus the caller must keep dt = delta + bias positive (else exp(dt * A) grows without bound).
  void positive_delta() {
    for (auto& d : delta) d = 0.05f + 0.5f * std::fabs(d);
    for (auto& d : bias) d = 0.1f * std::fabs(d);
  }
  flashkit::SelectiveScanArgs args() {
    flashkit::SelectiveScanArgs a;
    a.u = view(u, {batch, seqlen, d_inner});
    a.delta = view(delta, {batch, seqlen, d_inner});
    a.A = view(A, {d_inner, d_state});
    a.B = view(B, {batch, seqlen, d_state});
    a.C = view(C, {batch, seqlen, d_state});
    if (with_D) a.D = view(D, {d_inner});
    if (with_z) a.z = view(z, {batch, seqlen, d_inner});
    if (with_bias) a.delta_bias = view(bias, {d_inner});
    a.y = view(y, {batch, seqlen, d_inner});
    return a;
  }
};

}  // namespace ssm_test
