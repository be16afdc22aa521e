// Retired from src/kernels/cuda/cs149/rk4.cu (not built): the RK4 stage kernels v1 (Rk4Kernel::stage_l1: x from
// 4, kBY = kTY = 8 rows a block, the default until run s10-10) and v5 (Rk4Kernel::stage_l1_tall: v1 with kBY =
// kTallY = 32 rows a block), with v4 (kAligned, now the only stage kernel in rk4.cu) as the template's third form.
// H200 run s10-10 (600^3, 10 steps): v1 77.7-78.1 ms, v5 77.2 ms (1.01x), v4 60.0 ms (1.30x), all bit-identical:
// v4's aligned warps (one L1 wavefront per centre access instead of two) paid; v5's smaller y halo (less L2 ->
// L1 traffic) did not measurably. See docs/worklog/cs149-rk4.md. Kept as the record of the attempts; it needs
// StageArgs, stage_update and the kTX/kTY/kZChunk constants of rk4.cu to compile. Launches:
//   v1: rk4_stage_kernel<stage, false, kTY><<<grid, dim3(kTX, kTY)>>> with grid ((nx - 8) / kTX, (ny - 8) / kTY,
//       (nz - 8) / kZChunk), rounded up;
//   v5: rk4_stage_kernel<stage, false, kTallY><<<dim3(grid.x, (ny - 8) / kTallY rounded up, grid.z),
//       dim3(kTX, kTallY)>>>.

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
