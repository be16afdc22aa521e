// The scalar functions of the selective scan's CPU kernels and f64 reference (include/flashkit/ssm.hpp): softplus
// with its x > 20 cut to x (as transformers' Mamba), and the logistic sigmoid; float for the kernels, double for the
// reference.
#pragma once
#include <cmath>

namespace flashkit::kernels {

template <typename T>
inline T ssm_softplus(T x) { return x > T(20) ? x : std::log1p(std::exp(x)); }
template <typename T>
inline T ssm_sigmoid(T x) { return T(1) / (T(1) + std::exp(-x)); }

}  // namespace flashkit::kernels
