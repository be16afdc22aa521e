// RK4 heat equation, 8th-order (radius-4) Laplacian, f32 field [nz, ny, nx], interior updated, boundary kept.
// One kernel per RK4 stage fuses the stencil with the stage's updates: it computes k = alpha * Laplacian(stage
// input) and writes the next stage input (u + a dt k) and the running sum k1 + 2 k2 + 2 k3 (stage 4 writes
// u_new = u + dt/6 (sum + k4) directly), so no k field and no separate axpy pass exists.
// A thread owns one (x, y) column and walks a chunk of z planes with the 9 z-neighbours in registers (each plane
// is read once per column). The x and y neighbours come through L1 (v1, the default; v4 starts each warp on a
// 128-byte boundary, v5 uses 32-row blocks, v6 runs two stages per kernel: A/B options). Retired to dev/cuda/
// after they lost on the H200: v2 (x/y neighbours from a shared-memory plane, 141.4 ms vs 77.7 ms, run s8-2) and
// v3 (4 rows per thread in registers, 101.3 ms vs 76.4 ms, run s10-1).
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

// kAligned (v4, Rk4Kernel::stage_l1_aligned, an A/B option until measured): a warp (one row, kTX = 32 columns)
// starts at a 128-byte boundary of its row instead of at x = 4, so its centre accesses (the z window, u, the k sum
// read and write, the stage output) are one L1 wavefront each instead of two: ~41 -> ~36 wavefronts per warp and
// plane. The x- and y-neighbour loads stay two (rows of the course shape, 600 floats, start at 24-float steps mod
// 32, so the neighbour rows have other offsets). Idle lanes: ~8% at nx = 600 (v1: ~3%). A probe of whether L1
// wavefronts bound v1: bit-identical results, only the thread-to-column map changes.
// kBY = kTallY (v5, Rk4Kernel::stage_l1_tall, an A/B option until measured): blocks of 32 x 32 threads instead of
// 32 x 8. ncu of v1 (run s10-1): L1 28-45%, DRAM 40-59%, L2 68-92% of peak with a 59-75% L2 hit rate: the y
// neighbours of a block's 8 rows span 16 rows, half of them other blocks' rows that come from L2. With 32 rows per
// block the y halo is 40 rows per 32 (L2 -> L1 traffic of the stencil input ~20 -> ~12.5 B per point); 32
// registers per thread keep 2 blocks (64 warps) per SM.
constexpr int kTallY = 32;

template <int kStage, bool kAligned, int kBY>
__global__ void __launch_bounds__(kTX * kBY) rk4_stage_kernel(StageArgs s) {
  constexpr float c0 = float(-205.0 / 72.0), c1 = float(8.0 / 5.0), c2 = float(-1.0 / 5.0),
                  c3 = float(8.0 / 315.0), c4 = float(-1.0 / 560.0);
  const int y = 4 + blockIdx.y * kBY + threadIdx.y;
  // Floats from row y's start (plane 0 of the stage input) back to the previous 128-byte boundary.
  const int shift = kAligned ? int((reinterpret_cast<uintptr_t>(s.in + int64_t(y) * s.nx) / sizeof(float)) % kTX) : 0;
  const int x = kAligned ? int(blockIdx.x) * kTX + int(threadIdx.x) - shift : 4 + blockIdx.x * kTX + threadIdx.x;
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


// v6 (Rk4Kernel::stage_pair, an A/B option until measured): two RK4 stages per kernel, the step's first stage
// pair (1, 2) and second (3, 4), so the intermediate stage input never reaches memory. ncu of v1 (run s10-1): L2-
// and latency-bound with 74 B of DRAM traffic per point and step; a pair kernel reads the first stage's input and
// u and writes two fields, ~40 B per point and step. A block owns a 32 x 16 output tile and a chunk of kPairZ
// planes; each of its threads owns one column of the tile plus a 4-point halo (40 x 24 columns) and walks z:
// - first stage at plane c (v1's stencil: x/y neighbours through L1, z from a 9-plane register window of the
//   input): its output g (the second stage's input) goes into a second 9-plane register window, and its k-sum
//   contribution into a 5-plane window;
// - second stage at plane c - 4, on the tile's columns only: the z neighbours from the g window, the x/y
//   neighbours from the g plane that every thread writes to shared memory (double-buffered, one barrier a plane).
// The halo costs 1.875x the first stage's stencils in x/y and 1.25x in z (40 first-stage planes per 32 outputs).
// Every value is computed by v1's operations in v1's order, so the fields are bit-identical to v1's.
constexpr int kPairTX = 32, kPairTY = 16, kPairZ = 32;
constexpr int kPairRX = kPairTX + 8, kPairRY = kPairTY + 8;  // the first stage's columns: tile + 4-point halo
constexpr int kPairThreads = 1024;                           // >= kPairRX * kPairRY = 960

__device__ __forceinline__ float second_difference(float center, float p1, float m1, float p2, float m2, float p3,
                                                   float m3, float p4, float m4) {
  constexpr float c0 = float(-205.0 / 72.0), c1 = float(8.0 / 5.0), c2 = float(-1.0 / 5.0),
                  c3 = float(8.0 / 315.0), c4 = float(-1.0 / 560.0);
  return c0 * center + c1 * (p1 + m1) + c2 * (p2 + m2) + c3 * (p3 + m3) + c4 * (p4 + m4);
}

// kPair 0: stages 1 and 2 (in = u; writes the k sum k1 + 2 k2 and the third stage's input to next).
// kPair 1: stages 3 and 4 (in = the third stage's input; reads the k sum; writes u_{n+1} to next).
template <int kPair>
__global__ void __launch_bounds__(kPairThreads) rk4_pair_kernel(StageArgs s) {
  __shared__ float g_plane[2][kPairRY][kPairRX];
  const int t = threadIdx.x;
  const int rx = t % kPairRX, ry = t / kPairRX;
  const int x = int(blockIdx.x) * kPairTX + rx, y = int(blockIdx.y) * kPairTY + ry;  // tile origin (4, 4) + 32 b
  const bool in_domain = t < kPairRX * kPairRY && x < s.nx && y < s.ny;
  const bool interior_xy = in_domain && x >= 4 && x < s.nx - 4 && y >= 4 && y < s.ny - 4;
  const bool output = interior_xy && rx >= 4 && rx < 4 + kPairTX && ry >= 4 && ry < 4 + kPairTY;
  const int64_t sy = s.nx, sz = int64_t(s.nx) * s.ny;
  const int64_t col = in_domain ? int64_t(y) * sy + x : 0;
  const int z_out0 = 4 + int(blockIdx.z) * kPairZ, z_out1 = min(s.nz - 4, z_out0 + kPairZ);
  const float* in = s.in + col;
  float fw[9], gw[9], aw[5];  // planes c - 4 .. c + 4 of the input, c - 8 .. c of g, c - 4 .. c of the k sum
#pragma unroll
  for (int j = 0; j < 9; ++j) gw[j] = 0.f;
#pragma unroll
  for (int j = 0; j < 5; ++j) aw[j] = 0.f;
  const int c0 = z_out0 - 4;  // first-stage planes c0 .. z_out1 + 3, all inside [0, nz)
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int p = c0 - 4 + j;
    fw[j] = in_domain && p >= 0 ? __ldg(in + p * sz) : 0.f;
  }
  int buf = 0;
  for (int c = c0; c < z_out1 + 4; ++c) {
    fw[8] = in_domain && c + 4 < s.nz ? __ldg(in + (c + 4) * sz) : 0.f;
    // First stage at plane c. Boundary points keep their value: there g equals the input (both are u0 there).
    float g = fw[4], a = 0.f;
    if (interior_xy && c >= 4 && c < s.nz - 4) {
      const float* p = in + c * sz;
      const float center = fw[4];
      const float uxx = second_difference(center, __ldg(p + 1), __ldg(p - 1), __ldg(p + 2), __ldg(p - 2),
                                          __ldg(p + 3), __ldg(p - 3), __ldg(p + 4), __ldg(p - 4));
      const float uyy = second_difference(center, __ldg(p + sy), __ldg(p - sy), __ldg(p + 2 * sy),
                                          __ldg(p - 2 * sy), __ldg(p + 3 * sy), __ldg(p - 3 * sy),
                                          __ldg(p + 4 * sy), __ldg(p - 4 * sy));
      const float uzz = second_difference(center, fw[5], fw[3], fw[6], fw[2], fw[7], fw[1], fw[8], fw[0]);
      const float lap = uxx * s.k.inv_hx2 + uyy * s.k.inv_hy2 + uzz * s.k.inv_hz2;
      const float kk = s.k.alpha * lap;
      const int64_t i = col + c * sz;
      const float u = kPair == 0 ? fw[4] : __ldg(s.u + i);  // the first pair's input is u itself
      if (kPair == 0) {
        a = kk;
        g = u + s.k.half_dt * kk;
      } else {
        if (output) a = s.acc[i] + 2.0f * kk;
        g = u + s.k.dt * kk;
      }
    }
    gw[8] = g;
    aw[4] = a;
    const int c2 = c - 4;  // the second stage's plane
    if (c2 >= z_out0) {    // uniform over the block: the barrier below is reached by every thread
      if (t < kPairRX * kPairRY) g_plane[buf][ry][rx] = gw[4];
      __syncthreads();
      if (output) {
        const float center = gw[4];
        const float(*gp)[kPairRX] = g_plane[buf];
        const float uxx = second_difference(center, gp[ry][rx + 1], gp[ry][rx - 1], gp[ry][rx + 2], gp[ry][rx - 2],
                                            gp[ry][rx + 3], gp[ry][rx - 3], gp[ry][rx + 4], gp[ry][rx - 4]);
        const float uyy = second_difference(center, gp[ry + 1][rx], gp[ry - 1][rx], gp[ry + 2][rx], gp[ry - 2][rx],
                                            gp[ry + 3][rx], gp[ry - 3][rx], gp[ry + 4][rx], gp[ry - 4][rx]);
        const float uzz = second_difference(center, gw[5], gw[3], gw[6], gw[2], gw[7], gw[1], gw[8], gw[0]);
        const float lap = uxx * s.k.inv_hx2 + uyy * s.k.inv_hy2 + uzz * s.k.inv_hz2;
        const float kk = s.k.alpha * lap;
        const int64_t i = col + c2 * sz;
        const float u = kPair == 0 ? fw[0] : __ldcs(s.u + i);  // fw[0] is plane c - 4 of the input, u for pair 0
        if (kPair == 0) {
          s.acc[i] = aw[0] + 2.0f * kk;
          s.next[i] = u + s.k.half_dt * kk;
        } else {
          s.next[i] = u + s.k.dt_sixth * (aw[0] + kk);
        }
      }
      buf ^= 1;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      fw[j] = fw[j + 1];
      gw[j] = gw[j + 1];
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) aw[j] = aw[j + 1];
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
  const dim3 grid(unsigned((nx - 8 + kTX - 1) / kTX), unsigned((ny - 8 + kTY - 1) / kTY),
                  unsigned((nz - 8 + kZChunk - 1) / kZChunk));
  // Aligned rows start up to 31 columns before x = 4: columns [-31, nx - 4) in blocks of kTX.
  const dim3 grid_aligned(unsigned((nx - 4 + 31 + kTX - 1) / kTX), grid.y, grid.z);
  const dim3 grid_tall(grid.x, unsigned((ny - 8 + kTallY - 1) / kTallY), grid.z);
  const Rk4Kernel chosen = choose_rk4_kernel(a);
  auto stage = [&](auto kernel_l1, auto kernel_aligned, auto kernel_tall, const StageArgs& args) {
    if (chosen == Rk4Kernel::stage_l1_aligned) kernel_aligned<<<grid_aligned, block, 0, stream>>>(args);
    else if (chosen == Rk4Kernel::stage_l1_tall) kernel_tall<<<grid_tall, dim3(kTX, kTallY), 0, stream>>>(args);
    else kernel_l1<<<grid, block, 0, stream>>>(args);
  };
  float* u = a.out;
  float* u_new = other;
  if (chosen == Rk4Kernel::stage_pair) {
    const dim3 grid_pair(unsigned((nx - 8 + kPairTX - 1) / kPairTX), unsigned((ny - 8 + kPairTY - 1) / kPairTY),
                         unsigned((nz - 8 + kPairZ - 1) / kPairZ));
    for (int64_t step = 0; step < a.n_steps; ++step) {
      rk4_pair_kernel<0><<<grid_pair, kPairThreads, 0, stream>>>(StageArgs{u, u, acc, staged, nz, ny, nx, k});
      rk4_pair_kernel<1><<<grid_pair, kPairThreads, 0, stream>>>(StageArgs{staged, u, acc, u_new, nz, ny, nx, k});
      check_cuda(cudaGetLastError(), "cs149::rk4: launch");
      std::swap(u, u_new);
    }
  }
  for (int64_t step = 0; step < a.n_steps && chosen != Rk4Kernel::stage_pair; ++step) {
    stage(rk4_stage_kernel<0, false, kTY>, rk4_stage_kernel<0, true, kTY>, rk4_stage_kernel<0, false, kTallY>,
          StageArgs{u, u, acc, staged, nz, ny, nx, k});
    stage(rk4_stage_kernel<1, false, kTY>, rk4_stage_kernel<1, true, kTY>, rk4_stage_kernel<1, false, kTallY>,
          StageArgs{staged, u, acc, u_new, nz, ny, nx, k});
    stage(rk4_stage_kernel<2, false, kTY>, rk4_stage_kernel<2, true, kTY>, rk4_stage_kernel<2, false, kTallY>,
          StageArgs{u_new, u, acc, staged, nz, ny, nx, k});
    stage(rk4_stage_kernel<3, false, kTY>, rk4_stage_kernel<3, true, kTY>, rk4_stage_kernel<3, false, kTallY>,
          StageArgs{staged, u, acc, u_new, nz, ny, nx, k});
    check_cuda(cudaGetLastError(), "cs149::rk4: launch");
    std::swap(u, u_new);
  }
  if (u != a.out) check_cuda(cudaMemcpyAsync(a.out, u, bytes, cudaMemcpyDeviceToDevice, stream), "cs149::rk4: copy");
  check_cuda(cudaFreeAsync(work, stream), "cs149::rk4: free");
}

}  // namespace flashkit::cs149::cuda
