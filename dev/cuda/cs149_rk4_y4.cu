// Retired from src/kernels/cuda/cs149/rk4.cu (not built): the RK4 stage kernel v3, v1 with 4 rows per thread
// (register blocking in y). H200 run s10-1 (600^3, 10 steps): 101.3 ms against 76.4 ms for v1: at 80-108
// registers only 2 blocks of 256 threads fit an SM (v1: 8 at 32 registers), and ncu of v1 showed it latency- and
// L2-bound, not L1-bound, so the saved y-neighbour loads did not pay for the lost occupancy; see
// docs/worklog/cs149-rk4.md. Kept as the record of the attempt; it needs StageArgs, stage_update and the
// kTX/kTY/kZChunk constants of rk4.cu to compile, launched on a grid of (nx - 8) / 32 x (ny - 8) / 32 x z chunks.

// v3 (Rk4Kernel::stage_l1_y4, an A/B option until measured): v1 with register blocking in y. A thread owns kRows
// consecutive rows of its x column, each with its own z window; the y neighbours of its kRows points come from the
// kRows + 8 rows of the plane around them (kRows of them already in the windows), i.e. 2 loads per point instead
// of 8. The x neighbours and the stage update are v1's, so results are bit-identical to v1.
constexpr int kRows = 4;

template <int kStage>
__global__ void __launch_bounds__(kTX * kTY) rk4_stage_y4_kernel(StageArgs s) {
  constexpr float c0 = float(-205.0 / 72.0), c1 = float(8.0 / 5.0), c2 = float(-1.0 / 5.0),
                  c3 = float(8.0 / 315.0), c4 = float(-1.0 / 560.0);
  const int x = 4 + blockIdx.x * kTX + threadIdx.x;
  const int y0 = 4 + (blockIdx.y * kTY + threadIdx.y) * kRows;
  if (x >= s.nx - 4 || y0 >= s.ny - 4) return;
  const int z_begin = 4 + blockIdx.z * kZChunk;
  const int z_end = min(s.nz - 4, z_begin + kZChunk);
  const int64_t sy = s.nx, sz = int64_t(s.nx) * s.ny;
  const float* in = s.in + int64_t(y0 - 4) * sy + x;  // row y0 - 4 + j of plane z: in + j * sy + z * sz
  // Rows past ny (when y0 + kRows + 3 >= ny) are never a neighbour of an interior point: they stay 0.
  float win[kRows][9];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int j = 0; j < 8; ++j) win[r][j] = y0 + r < s.ny ? __ldg(in + (r + 4) * sy + (z_begin - 4 + j) * sz) : 0.f;
  for (int z = z_begin; z < z_end; ++z) {
    const float* plane = in + int64_t(z) * sz;
    float rows[kRows + 8];  // plane z at rows y0 - 4 .. y0 + kRows + 3
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      win[r][8] = y0 + r < s.ny ? __ldg(plane + (r + 4) * sy + 4 * sz) : 0.f;
      rows[r + 4] = win[r][4];
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      rows[j] = __ldg(plane + j * sy);
      rows[kRows + 4 + j] = y0 + kRows + j < s.ny ? __ldg(plane + (kRows + 4 + j) * sy) : 0.f;
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (y0 + r < s.ny - 4) {
        const float* p = plane + (r + 4) * sy;
        const float center = win[r][4];
        const float uxx = c0 * center + c1 * (__ldg(p + 1) + __ldg(p - 1)) + c2 * (__ldg(p + 2) + __ldg(p - 2)) +
                          c3 * (__ldg(p + 3) + __ldg(p - 3)) + c4 * (__ldg(p + 4) + __ldg(p - 4));
        const float uyy = c0 * center + c1 * (rows[r + 5] + rows[r + 3]) + c2 * (rows[r + 6] + rows[r + 2]) +
                          c3 * (rows[r + 7] + rows[r + 1]) + c4 * (rows[r + 8] + rows[r]);
        const float uzz = c0 * center + c1 * (win[r][5] + win[r][3]) + c2 * (win[r][6] + win[r][2]) +
                          c3 * (win[r][7] + win[r][1]) + c4 * (win[r][8] + win[r][0]);
        const float lap = uxx * s.k.inv_hx2 + uyy * s.k.inv_hy2 + uzz * s.k.inv_hz2;
        stage_update<kStage>(s, int64_t(z) * sz + int64_t(y0 + r) * sy + x, s.k.alpha * lap);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) win[r][j] = win[r][j + 1];
    }
  }
}
