// Retired from src/kernels/cuda/cs149/rk4.cu (not built): the RK4 kernel v6 (Rk4Kernel::stage_pair), two RK4
// stages per kernel. H200 run s10-10 (600^3, 10 steps): 125.3 ms against 77.7-78.1 ms for v1 and 60.0 ms for v4
// (0.62x of v1), bit-identical to v1. Not profiled; the likely causes: the 4-point halo's extra first-stage work
// (1.875x in x/y, 1.25x in z), a 1024-thread block with one barrier a plane, and 1 block per SM; see
// docs/worklog/cs149-rk4.md. Kept as the record of the attempt; it needs StageArgs and the constants of rk4.cu
// to compile. Launch, per step (u, u_new ping-pong; staged and acc work buffers as rk4.cu's):
//   const dim3 grid_pair((nx - 8 + kPairTX - 1) / kPairTX, (ny - 8 + kPairTY - 1) / kPairTY,
//                        (nz - 8 + kPairZ - 1) / kPairZ);
//   rk4_pair_kernel<0><<<grid_pair, kPairThreads, 0, stream>>>(StageArgs{u, u, acc, staged, nz, ny, nx, k});
//   rk4_pair_kernel<1><<<grid_pair, kPairThreads, 0, stream>>>(StageArgs{staged, u, acc, u_new, nz, ny, nx, k});

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
