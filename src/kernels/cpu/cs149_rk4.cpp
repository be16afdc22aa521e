// RK4 heat equation on the CPU: one pass per stage that computes k = alpha * Laplacian(stage input) and, in the
// same loop, the next stage input and the running k1 + 2 k2 + 2 k3 (+ k4) sum, in the course reference's order
// of f32 operations. Built without FMA contraction (src/CMakeLists.txt) so it rounds as the reference does.
#include <cstring>
#include <vector>

#include "flashkit/runtime.hpp"
#include "kernels/cpu/cs149.hpp"

namespace flashkit::cs149::cpu {
namespace {

constexpr float kC0 = float(-205.0 / 72.0), kC1 = float(8.0 / 5.0), kC2 = float(-1.0 / 5.0),
                kC3 = float(8.0 / 315.0), kC4 = float(-1.0 / 560.0);

inline float second_difference(const float* p, int64_t s) {
  return kC0 * p[0] + kC1 * (p[s] + p[-s]) + kC2 * (p[2 * s] + p[-2 * s]) + kC3 * (p[3 * s] + p[-3 * s]) +
         kC4 * (p[4 * s] + p[-4 * s]);
}

// stage 0..3 of one step: reads `in` (u for stage 0), u and acc; writes next (the next stage input, or u_new for
// stage 3) and acc on interior points only.
void stage(int st, const float* in, const float* u, float* acc, float* next, int64_t nz, int64_t ny, int64_t nx,
           const Rk4Coefficients& k) {
  const int64_t sy = nx, sz = nx * ny;
#pragma omp parallel for num_threads(num_threads()) schedule(static)
  for (int64_t z = 4; z < nz - 4; ++z)
    for (int64_t y = 4; y < ny - 4; ++y)
      for (int64_t x = 4; x < nx - 4; ++x) {
        const int64_t i = z * sz + y * sy + x;
        const float* p = in + i;
        const float lap = second_difference(p, 1) * k.inv_hx2 + second_difference(p, sy) * k.inv_hy2 +
                          second_difference(p, sz) * k.inv_hz2;
        const float kk = k.alpha * lap;
        switch (st) {
          case 0: acc[i] = kk; next[i] = u[i] + k.half_dt * kk; break;
          case 1: acc[i] = acc[i] + 2.0f * kk; next[i] = u[i] + k.half_dt * kk; break;
          case 2: acc[i] = acc[i] + 2.0f * kk; next[i] = u[i] + k.dt * kk; break;
          default: next[i] = u[i] + k.dt_sixth * (acc[i] + kk); break;
        }
      }
}

}  // namespace

void rk4(const Rk4Args& a) {
  const size_t count = size_t(a.nz * a.ny * a.nx);
  std::memcpy(a.out, a.u0, count * sizeof(float));
  if (a.n_steps == 0 || a.nz < 9 || a.ny < 9 || a.nx < 9) return;  // no interior point: u stays u0
  const Rk4Coefficients k = rk4_coefficients(a.alpha, a.hx, a.hy, a.hz);
  // Boundaries never change: every buffer starts as u0 and only interior points are written.
  std::vector<float> other(a.u0, a.u0 + count), staged(a.u0, a.u0 + count), acc(count);
  float* u = a.out;
  float* u_new = other.data();
  for (int64_t step = 0; step < a.n_steps; ++step) {
    stage(0, u, u, acc.data(), staged.data(), a.nz, a.ny, a.nx, k);
    stage(1, staged.data(), u, acc.data(), u_new, a.nz, a.ny, a.nx, k);  // u_new as scratch stage input
    stage(2, u_new, u, acc.data(), staged.data(), a.nz, a.ny, a.nx, k);
    stage(3, staged.data(), u, acc.data(), u_new, a.nz, a.ny, a.nx, k);
    std::swap(u, u_new);
  }
  if (u != a.out) std::memcpy(a.out, u, count * sizeof(float));
}

}  // namespace flashkit::cs149::cpu
