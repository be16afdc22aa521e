// SwiGLU on the CPU: the two products by OpenBLAS (f32), in row blocks so the workspace stays small, then the
// SiLU-times-gate epilogue.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cs149.hpp"

namespace flashkit::cs149::cpu {

void swiglu(const SwigluArgs& a) {
  const int64_t M = a.m, K = a.k, N = a.n;
  if (M == 0 || N == 0) return;
  const int64_t rows = std::max<int64_t>(1, std::min<int64_t>(M, (int64_t(1) << 22) / std::max<int64_t>(N, 1)));
  std::vector<float> gate(size_t(rows * N)), value(size_t(rows * N));
  for (int64_t m0 = 0; m0 < M; m0 += rows) {
    const int64_t mb = std::min(rows, M - m0);
    const float* x = a.x + m0 * K;
    if (K == 0) {
      std::fill(gate.begin(), gate.end(), 0.f);
      std::fill(value.begin(), value.end(), 0.f);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(mb), int(N), int(K), 1.f, x, int(K), a.w, int(N),
                  0.f, gate.data(), int(N));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(mb), int(N), int(K), 1.f, x, int(K), a.v, int(N),
                  0.f, value.data(), int(N));
    }
    for (int64_t i = 0; i < mb; ++i)
      for (int64_t j = 0; j < N; ++j) {
        const float g = gate[size_t(i * N + j)] + a.b[j];
        const float v = value[size_t(i * N + j)] + a.c[j];
        a.out[(m0 + i) * N + j] = g / (1.f + std::exp(-a.beta * g)) * v;
      }
  }
}

}  // namespace flashkit::cs149::cpu
