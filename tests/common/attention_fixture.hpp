// Shared helpers for attention tests: random (never zero) inputs, poisoned outputs, relative errors.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "flashkit/e4m3.hpp"
#include "flashkit/flashkit.hpp"

namespace fk_test {

using flashkit::DType;
using flashkit::TensorView;

// Host storage for one tensor of any dtype, with a view.
struct HostTensor {
  std::vector<uint8_t> bytes;
  TensorView view;
  HostTensor() = default;
  HostTensor(DType dt, std::initializer_list<int64_t> shape) {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    bytes.resize(size_t(std::max<int64_t>(n, 1) * flashkit::dtype_size(dt)));
    view = TensorView::contiguous(bytes.data(), dt, shape);
  }
  int64_t numel() const { return view.numel(); }
  double get(int64_t i) const;
  void set(int64_t i, double v);
  void fill_random(std::mt19937& rng, double lo = -1.0, double hi = 1.0);
  void poison();  // NaN everywhere: any element a kernel forgets to write shows up
};

inline double HostTensor::get(int64_t i) const {
  switch (view.dtype) {
    case DType::f32: return reinterpret_cast<const float*>(bytes.data())[i];
    case DType::bf16: return flashkit::bf16_to_f32(reinterpret_cast<const uint16_t*>(bytes.data())[i]);
    case DType::f16: return flashkit::f16_to_f32(reinterpret_cast<const uint16_t*>(bytes.data())[i]);
    case DType::f64: return reinterpret_cast<const double*>(bytes.data())[i];
    case DType::e4m3: return flashkit::e4m3_to_f32(bytes[size_t(i)]);
    default: return 0;
  }
}
inline void HostTensor::set(int64_t i, double v) {
  switch (view.dtype) {
    case DType::f32: reinterpret_cast<float*>(bytes.data())[i] = float(v); break;
    case DType::bf16: reinterpret_cast<uint16_t*>(bytes.data())[i] = flashkit::f32_to_bf16(float(v)); break;
    case DType::f16: reinterpret_cast<uint16_t*>(bytes.data())[i] = flashkit::f32_to_f16(float(v)); break;
    case DType::f64: reinterpret_cast<double*>(bytes.data())[i] = v; break;
    case DType::e4m3: bytes[size_t(i)] = flashkit::f32_to_e4m3(float(v)); break;
    default: break;
  }
}
inline void HostTensor::fill_random(std::mt19937& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < numel(); ++i) {
    double v = u(rng);
    if (v == 0.0) v = 1e-3;
    set(i, v);
  }
}
inline void HostTensor::poison() {
  for (int64_t i = 0; i < numel(); ++i) set(i, std::numeric_limits<double>::quiet_NaN());
}

// Cumulative offsets (cu_seqlens) of a varlen batch from (nq, nk) per sequence.
inline void varlen_offsets(const std::vector<std::pair<int, int>>& lens, std::vector<int32_t>* cu_q,
                           std::vector<int32_t>* cu_k) {
  *cu_q = {0};
  *cu_k = {0};
  for (auto [nq, nk] : lens) {
    cu_q->push_back(cu_q->back() + nq);
    cu_k->push_back(cu_k->back() + nk);
  }
}

// ||a - b|| / ||b|| over all elements; NaN in `a` gives +inf (so a poisoned, unwritten output fails).
inline double rel_error(const HostTensor& a, const HostTensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    double x = a.get(i), y = b.get(i);
    if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<double>::infinity();
    if (std::isinf(x) || std::isinf(y)) {  // lse of a row with no visible key is -inf: must match exactly
      if (x != y) return std::numeric_limits<double>::infinity();
      continue;
    }
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

}  // namespace fk_test
