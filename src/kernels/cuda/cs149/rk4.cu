// RK4 heat equation, 8th-order (radius-4) Laplacian, f32 field [nz, ny, nx], interior updated, boundary kept.
// One kernel per RK4 stage fuses the stencil with the stage's updates: it computes k = alpha * Laplacian(stage
// input) and writes the next stage input (u + a dt k) and the running sum k1 + 2 k2 + 2 k3 (stage 4 writes
// u_new = u + dt/6 (sum + k4) directly), so no k field and no separate axpy pass exists.
// A thread owns one (x, y) column and walks a chunk of z planes with the 9 z-neighbours in registers (each plane
// is read once per column). The x and y neighbours come through L1, and each warp starts on a 128-byte boundary
// of its row (v4: 60.0 ms at 600^3 x 10 steps on the H200, run s10-10). Retired to dev/cuda/ after they lost on
// the H200: v1 (warps from x = 4, 77.7-78.1 ms, run s10-10) and v5 (v1 with 32-row blocks, 77.2 ms, run s10-10)
// in cs149_rk4_l1_tall.cu, v2 (x/y neighbours from a shared-memory plane, 141.4 ms vs v1's 77.7 ms, run s8-2),
// v3 (4 rows per thread in registers, 101.3 ms vs v1's 76.4 ms, run s10-1) and v6 (two stages per kernel,
// 125.3 ms, run s10-10).
// Compiled with -fmad=false (src/kernels/cuda/sources.cmake): every multiply and add rounds separately, as the
// course reference's elementwise PyTorch ops do, so results track it to a few ulp.
#include <cuda_runtime.h>

#include <utility>

#include "core/cuda_check.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/cuda/cs149/launch.hpp"

namespace flashkit::cs149::cuda {
namespace {

constexpr int kTX = 32, kTY = 8, kZChunk = 32;

struct StageArgs {
  const float* in;   // stage input (u for stage 0)
  const float* u;    // u_n
  float* acc;        // k1 + 2 k2 + 2 k3
  float* next;       // next stage input, or u_{n+1} after stage 3
  int nz, ny, nx;
  Rk4Coefficients k;
};

// The stage's writes at point i given k = alpha * Laplacian there, in the reference's order of operations.
template <int kStage>
__device__ __forceinline__ void stage_update(const StageArgs& s, int64_t i, float kk) {
  const float u = __ldcs(s.u + i);
  if (kStage == 0) {
    s.acc[i] = kk;
    s.next[i] = u + s.k.half_dt * kk;
  } else if (kStage == 1) {
    s.acc[i] = s.acc[i] + 2.0f * kk;
    s.next[i] = u + s.k.half_dt * kk;
  } else if (kStage == 2) {
    s.acc[i] = s.acc[i] + 2.0f * kk;
    s.next[i] = u + s.k.dt * kk;
  } else {
    s.next[i] = u + s.k.dt_sixth * (s.acc[i] + kk);
  }
}

// v4 (Rk4Kernel::stage_l1_aligned, the only stage kernel since run s10-10: 60.0 ms against v1's 77.7-78.1 ms):
// a warp (one row, kTX = 32 columns) starts at a 128-byte boundary of its row instead of at x = 4, so its centre
// accesses (the z window, u, the k sum read and write, the stage output) are one L1 wavefront each instead of two:
// ~41 -> ~36 wavefronts per warp and plane. The x- and y-neighbour loads stay two (rows of the course shape, 600
// floats, start at 24-float steps mod 32, so the neighbour rows have other offsets). Idle lanes: ~8% at nx = 600
// (v1: ~3%). Bit-identical to v1: only the thread-to-column map changes.
template <int kStage>
__global__ void __launch_bounds__(kTX * kTY) rk4_stage_kernel(StageArgs s) {
  constexpr float c0 = float(-205.0 / 72.0), c1 = float(8.0 / 5.0), c2 = float(-1.0 / 5.0),
                  c3 = float(8.0 / 315.0), c4 = float(-1.0 / 560.0);
  const int y = 4 + blockIdx.y * kTY + threadIdx.y;
  // Floats from row y's start (plane 0 of the stage input) back to the previous 128-byte boundary.
  const int shift = int((reinterpret_cast<uintptr_t>(s.in + int64_t(y) * s.nx) / sizeof(float)) % kTX);
  const int x = int(blockIdx.x) * kTX + int(threadIdx.x) - shift;
  if (x < 4 || x >= s.nx - 4 || y >= s.ny - 4) return;
  const int z_begin = 4 + blockIdx.z * kZChunk;
  const int z_end = min(s.nz - 4, z_begin + kZChunk);
  const int64_t sy = s.nx, sz = int64_t(s.nx) * s.ny;
  const int64_t col = int64_t(y) * sy + x;
  const float* in = s.in + col;
  float win[9];
#pragma unroll
  for (int j = 0; j < 8; ++j) win[j] = __ldg(in + (z_begin - 4 + j) * sz);
  for (int z = z_begin; z < z_end; ++z) {
    win[8] = __ldg(in + (z + 4) * sz);
    const float* p = in + z * sz;
    const float center = win[4];
    const float uxx = c0 * center + c1 * (__ldg(p + 1) + __ldg(p - 1)) + c2 * (__ldg(p + 2) + __ldg(p - 2)) +
                      c3 * (__ldg(p + 3) + __ldg(p - 3)) + c4 * (__ldg(p + 4) + __ldg(p - 4));
    const float uyy = c0 * center + c1 * (__ldg(p + sy) + __ldg(p - sy)) +
                      c2 * (__ldg(p + 2 * sy) + __ldg(p - 2 * sy)) + c3 * (__ldg(p + 3 * sy) + __ldg(p - 3 * sy)) +
                      c4 * (__ldg(p + 4 * sy) + __ldg(p - 4 * sy));
    const float uzz = c0 * center + c1 * (win[5] + win[3]) + c2 * (win[6] + win[2]) + c3 * (win[7] + win[1]) +
                      c4 * (win[8] + win[0]);
    const float lap = uxx * s.k.inv_hx2 + uyy * s.k.inv_hy2 + uzz * s.k.inv_hz2;
    stage_update<kStage>(s, col + z * sz, s.k.alpha * lap);
#pragma unroll
    for (int j = 0; j < 8; ++j) win[j] = win[j + 1];
  }
}

}  // namespace

void rk4(const Rk4Args& a) {
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream());
  const size_t bytes = sizeof(float) * size_t(a.nz * a.ny * a.nx);
  check_cuda(cudaMemcpyAsync(a.out, a.u0, bytes, cudaMemcpyDeviceToDevice, stream), "cs149::rk4: copy u0");
  if (a.n_steps == 0 || a.nz < 9 || a.ny < 9 || a.nx < 9) return;
  const int nz = int(a.nz), ny = int(a.ny), nx = int(a.nx);
  // Work buffers: u_new (ping-pong with out), the stage input, the k sum. Boundaries never change, so the first
  // two start as u0 and only interior points are ever written.
  if ((ny - 8 + kTY - 1) / kTY > 65535 || (nz - 8 + kZChunk - 1) / kZChunk > 65535)
    fail(Status::invalid_argument, "cs149::rk4: ny must be at most 524288 and nz at most 2097152 on CUDA");
  float* work = nullptr;
  check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&work), 3 * bytes, stream), "cs149::rk4: work buffers");
  const size_t n = bytes / sizeof(float);
  float* other = work;
  float* staged = work + n;
  float* acc = work + 2 * n;
  check_cuda(cudaMemcpyAsync(other, a.u0, bytes, cudaMemcpyDeviceToDevice, stream), "cs149::rk4: copy u0");
  check_cuda(cudaMemcpyAsync(staged, a.u0, bytes, cudaMemcpyDeviceToDevice, stream), "cs149::rk4: copy u0");
  const Rk4Coefficients k = rk4_coefficients(a.alpha, a.hx, a.hy, a.hz);
  const dim3 block(kTX, kTY);
  // Aligned rows start up to 31 columns before x = 4: columns [-31, nx - 4) in blocks of kTX.
  const dim3 grid(unsigned((nx - 4 + 31 + kTX - 1) / kTX), unsigned((ny - 8 + kTY - 1) / kTY),
                  unsigned((nz - 8 + kZChunk - 1) / kZChunk));
  float* u = a.out;
  float* u_new = other;
  for (int64_t step = 0; step < a.n_steps; ++step) {
    rk4_stage_kernel<0><<<grid, block, 0, stream>>>(StageArgs{u, u, acc, staged, nz, ny, nx, k});
    rk4_stage_kernel<1><<<grid, block, 0, stream>>>(StageArgs{staged, u, acc, u_new, nz, ny, nx, k});
    rk4_stage_kernel<2><<<grid, block, 0, stream>>>(StageArgs{u_new, u, acc, staged, nz, ny, nx, k});
    rk4_stage_kernel<3><<<grid, block, 0, stream>>>(StageArgs{staged, u, acc, u_new, nz, ny, nx, k});
    check_cuda(cudaGetLastError(), "cs149::rk4: launch");
    std::swap(u, u_new);
  }
  if (u != a.out) check_cuda(cudaMemcpyAsync(a.out, u, bytes, cudaMemcpyDeviceToDevice, stream), "cs149::rk4: copy");
  check_cuda(cudaFreeAsync(work, stream), "cs149::rk4: free");
}

}  // namespace flashkit::cs149::cuda
