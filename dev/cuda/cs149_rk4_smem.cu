// Retired from src/kernels/cuda/cs149/rk4.cu (not built): the RK4 stage kernel v2, x/y neighbours from a
// shared-memory plane. H200 run s8-2 (600^3, 10 steps): 141.4 ms against 77.7 ms for v1 (L1), see
// docs/worklog/cs149-rk4.md. Kept as the record of the attempt; it needs StageArgs, stage_update and the kTX/kTY/
// kZChunk constants of rk4.cu to compile.

__device__ __forceinline__ float second_difference(float center, float p1, float m1, float p2, float m2, float p3,
                                                   float m3, float p4, float m4) {
  constexpr float c0 = float(-205.0 / 72.0), c1 = float(8.0 / 5.0), c2 = float(-1.0 / 5.0),
                  c3 = float(8.0 / 315.0), c4 = float(-1.0 / 560.0);
  return c0 * center + c1 * (p1 + m1) + c2 * (p2 + m2) + c3 * (p3 + m3) + c4 * (p4 + m4);
}

// v2: the x and y neighbours from a shared-memory copy of the plane (tile plus a 4-point halo, loaded with
// coalesced rows starting at a multiple of 32 floats from the row start), the z neighbours from the per-thread
// register window as in v1.
// v1 reads the 16 x/y neighbours through L1 with misaligned rows (two wavefronts per warp load); here they are
// conflict-free shared loads.
template <int kStage>
__global__ void __launch_bounds__(kTX * kTY) rk4_stage_smem_kernel(StageArgs s) {
  constexpr int kW = kTX + 8, kH = kTY + 8;
  __shared__ float plane[kH][kW];
  const int x = 4 + blockIdx.x * kTX + threadIdx.x;
  const int y = 4 + blockIdx.y * kTY + threadIdx.y;
  const bool active = x < s.nx - 4 && y < s.ny - 4;
  const int z_begin = 4 + blockIdx.z * kZChunk;
  const int z_end = min(s.nz - 4, z_begin + kZChunk);
  const int64_t sy = s.nx, sz = int64_t(s.nx) * s.ny;
  const int64_t col = int64_t(y) * sy + x;
  const float* in = s.in + col;
  const int x0 = blockIdx.x * kTX, y0 = blockIdx.y * kTY;  // the tile's halo corner (x - 4, y - 4 of thread 0)
  const int tid = threadIdx.y * kTX + threadIdx.x;
  float win[9];
#pragma unroll
  for (int j = 0; j < 8; ++j) win[j] = active ? __ldg(in + (z_begin - 4 + j) * sz) : 0.f;
  for (int z = z_begin; z < z_end; ++z) {
    __syncthreads();  // the previous plane's readers are done
    const float* src = s.in + z * sz;
    for (int e = tid; e < kH * kW; e += kTX * kTY) {
      const int hx = e % kW, hy = e / kW;
      const int gx = x0 + hx, gy = y0 + hy;
      plane[hy][hx] = (gx < s.nx && gy < s.ny) ? __ldg(src + int64_t(gy) * sy + gx) : 0.f;
    }
    __syncthreads();
    win[8] = active ? __ldg(in + (z + 4) * sz) : 0.f;
    if (active) {
      const int px = threadIdx.x + 4, py = threadIdx.y + 4;
      const float center = plane[py][px];
      const float uxx = second_difference(center, plane[py][px + 1], plane[py][px - 1], plane[py][px + 2],
                                          plane[py][px - 2], plane[py][px + 3], plane[py][px - 3],
                                          plane[py][px + 4], plane[py][px - 4]);
      const float uyy = second_difference(center, plane[py + 1][px], plane[py - 1][px], plane[py + 2][px],
                                          plane[py - 2][px], plane[py + 3][px], plane[py - 3][px],
                                          plane[py + 4][px], plane[py - 4][px]);
      const float uzz = second_difference(center, win[5], win[3], win[6], win[2], win[7], win[1], win[8], win[0]);
      const float lap = uxx * s.k.inv_hx2 + uyy * s.k.inv_hy2 + uzz * s.k.inv_hz2;
      stage_update<kStage>(s, col + z * sz, s.k.alpha * lap);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) win[j] = win[j + 1];
  }
}

