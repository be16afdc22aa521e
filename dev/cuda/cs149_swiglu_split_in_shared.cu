// Retired from src/kernels/cuda/cs149/swiglu.cu (not built): the SwiGLU kernel v3 (SwigluKernel::split_in_shared).
// H200 run s10-10 (course shape): 17.83 ms against 13.08 ms for v2 (0.73x), both passing the course check. Not
// profiled. It issues ~1.6x fewer instructions than v2 and still lost, so v2 is not issue-bound as v3 assumed;
// candidates: twice the shared-memory bytes read (pairs), chains of 6 dependent MMAs into one partial (v2: 3).
// See docs/worklog/cs149-swiglu.md. Kept as the record of the attempt; it needs the
// constants, Staged, load_tile, split, mma_tf32, zero, tile_origin and write_output of swiglu.cu to compile.
// Launch (74 KiB of dynamic shared memory, above the 48 KiB default):
//   auto kernel = swiglu_3xtf32_presplit_kernel<vec_a, vec_b>;
//   cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sizeof(SplitTiles)));
//   kernel<<<grid, kThreads, sizeof(SplitTiles), stream>>>(x, w, v, b, c, beta, M, K, N, out);

// v3 (SwigluKernel::split_in_shared, retired after run s10-10): each operand is split into its TF32 (big,
// small) pair once, when its k tile is stored to shared memory (16 splits per thread and k tile instead of v2's
// 48 at every fragment read), and a fragment read is one 64-bit load of the pair. The tensor cores sum the 6
// MMAs of a whole k tile of 16 from zero (k16 partials: 2.5e-7 rms relative in tools/cs149_3xtf32_model.py,
// v2's k8 partials 3.2e-7), which halves the f32 adds into the running sums. Shared rows of (big, small) pairs
// are padded to 4 mod 16 pairs: a half-warp's 64-bit fragment reads then hit 16 distinct 8-byte bank pairs.
constexpr int kPairAStride = kBK + 4;  // pairs per shared A row
constexpr int kPairBStride = kBN + 4;  // pairs per shared B row

struct SplitTiles {
  uint2 a[2][kBM * kPairAStride];
  uint2 w[2][kBK * kPairBStride];
  uint2 v[2][kBK * kPairBStride];
};

__device__ __forceinline__ uint2 split_pair(float x) {
  uint2 p;
  split(x, p.x, p.y);
  return p;
}

// Four consecutive pairs at a 16-byte aligned address as two 16-byte stores.
__device__ __forceinline__ void store_pairs(uint2* dst, float f0, float f1, float f2, float f3) {
  const uint2 p0 = split_pair(f0), p1 = split_pair(f1), p2 = split_pair(f2), p3 = split_pair(f3);
  reinterpret_cast<uint4*>(dst)[0] = make_uint4(p0.x, p0.y, p1.x, p1.y);
  reinterpret_cast<uint4*>(dst)[1] = make_uint4(p2.x, p2.y, p3.x, p3.y);
}

template <bool kVecA, bool kVecB>
__device__ __forceinline__ void store_split_tile(const Staged& s, SplitTiles& sm, int buf) {
  const int t = threadIdx.x;
  if (kVecA) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int f = t + i * kThreads, row = f / 4, col = (f % 4) * 4;  // 16-byte aligned: 160-byte rows
      store_pairs(&sm.a[buf][row * kPairAStride + col], s.a[i * 4], s.a[i * 4 + 1], s.a[i * 4 + 2], s.a[i * 4 + 3]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int e = t + i * kThreads;
      sm.a[buf][(e / kBK) * kPairAStride + e % kBK] = split_pair(s.a[i]);
    }
  }
  if (kVecB) {
    const int row = t / 16, col = (t % 16) * 4;  // 16-byte aligned: 544-byte rows
    store_pairs(&sm.w[buf][row * kPairBStride + col], s.w[0], s.w[1], s.w[2], s.w[3]);
    store_pairs(&sm.v[buf][row * kPairBStride + col], s.v[0], s.v[1], s.v[2], s.v[3]);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int e = t + i * kThreads, at = (e / kBN) * kPairBStride + e % kBN;
      sm.w[buf][at] = split_pair(s.w[i]);
      sm.v[buf][at] = split_pair(s.v[i]);
    }
  }
}

template <bool kVecA, bool kVecB>
__global__ void __launch_bounds__(kThreads) swiglu_3xtf32_presplit_kernel(const float* __restrict__ x,
                                                                          const float* __restrict__ w,
                                                                          const float* __restrict__ v,
                                                                          const float* __restrict__ bias_w,
                                                                          const float* __restrict__ bias_v,
                                                                          float beta, int M, int K, int N,
                                                                          float* __restrict__ out) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  SplitTiles& sm = *reinterpret_cast<SplitTiles*>(smem_raw);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, tig = lane % 4;
  const int warp_m = warp / 2, warp_n = warp % 2;
  int m0, n0;
  tile_origin(M, N, m0, n0);

  float acc_w[2][4][4], acc_v[2][4][4];
  zero(acc_w);
  zero(acc_v);

  const int k_tiles = (K + kBK - 1) / kBK;
  Staged st;
  load_tile<kVecA, kVecB>(st, x, w, v, M, K, N, m0, n0, 0);
  store_split_tile<kVecA, kVecB>(st, sm, 0);
  __syncthreads();

  for (int kt = 0; kt < k_tiles; ++kt) {
    const int buf = kt & 1;
    const bool more = kt + 1 < k_tiles;
    if (more) load_tile<kVecA, kVecB>(st, x, w, v, M, K, N, m0, n0, (kt + 1) * kBK);
    const uint2* As = sm.a[buf];
    const uint2* Ws = sm.w[buf];
    const uint2* Vs = sm.v[buf];
    // The warp's A fragments of both k8 steps of the tile: [step][mt][register], each a (big, small) pair.
    uint2 af[2][2][4];
#pragma unroll
    for (int ks = 0; ks < 2; ++ks)
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const int r = warp_m * 32 + mt * 16 + g, kk = ks * 8;
        af[ks][mt][0] = As[r * kPairAStride + kk + tig];
        af[ks][mt][1] = As[(r + 8) * kPairAStride + kk + tig];
        af[ks][mt][2] = As[r * kPairAStride + kk + tig + 4];
        af[ks][mt][3] = As[(r + 8) * kPairAStride + kk + tig + 4];
      }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int c = warp_n * 32 + nt * 8 + g;
      uint2 wf[2][2], vf[2][2];  // [step][b0, b1]
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
        const int kk = ks * 8;
        wf[ks][0] = Ws[(kk + tig) * kPairBStride + c];
        wf[ks][1] = Ws[(kk + tig + 4) * kPairBStride + c];
        vf[ks][0] = Vs[(kk + tig) * kPairBStride + c];
        vf[ks][1] = Vs[(kk + tig + 4) * kPairBStride + c];
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        // The k tile's partial sums start from zero in the tensor cores (they truncate: see v2) and reach the
        // running sums through round-to-nearest f32 adds.
        float pw[4] = {0.f, 0.f, 0.f, 0.f}, pv[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {
          const uint32_t a_big[4] = {af[ks][mt][0].x, af[ks][mt][1].x, af[ks][mt][2].x, af[ks][mt][3].x};
          const uint32_t a_small[4] = {af[ks][mt][0].y, af[ks][mt][1].y, af[ks][mt][2].y, af[ks][mt][3].y};
          mma_tf32(pw, a_small, wf[ks][0].x, wf[ks][1].x);
          mma_tf32(pw, a_big, wf[ks][0].y, wf[ks][1].y);
          mma_tf32(pw, a_big, wf[ks][0].x, wf[ks][1].x);
          mma_tf32(pv, a_small, vf[ks][0].x, vf[ks][1].x);
          mma_tf32(pv, a_big, vf[ks][0].y, vf[ks][1].y);
          mma_tf32(pv, a_big, vf[ks][0].x, vf[ks][1].x);
        }
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          acc_w[mt][nt][r] += pw[r];
          acc_v[mt][nt][r] += pv[r];
        }
      }
    }
    if (more) store_split_tile<kVecA, kVecB>(st, sm, buf ^ 1);
    __syncthreads();
  }
  write_output(acc_w, acc_v, bias_w, bias_v, beta, M, N, m0, n0, out);
}
