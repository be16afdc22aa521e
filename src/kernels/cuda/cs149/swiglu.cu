// SwiGLU f32 as one fused GEMM: out = swish_beta(x W + b) * (x V + c), x [M, K], W and V [K, N].
// A block computes a 128 x 64 tile of both products in the same k loop (the x tile is loaded once for both),
// with tensor cores in 3xTF32: every f32 operand is split into a TF32 "big" part and a TF32 remainder, and
// a*b ~ a_big*b_big + a_big*b_small + a_small*b_big (the dropped small*small term is below f32 rounding), which
// keeps f32 accuracy where plain TF32 fails the course's tolerance. The running sums over K live outside the
// tensor cores (they truncate), added to with ordinary round-to-nearest f32 adds once per k step of 8. The
// epilogue adds the biases and applies SiLU * gate in registers: the two products never reach HBM.
// Layout: 8 warps as 4 (M) x 2 (N), each warp 32 x 32 of each product = 2 x 4 mma.m16n8k8 tiles per matrix.
// Tiles move global -> registers -> shared memory double buffer (the next k tile's loads are in flight while the
// current one is multiplied). Shared rows are padded so the fragment reads are free of bank conflicts. Blocks are
// rastered in groups of 8 M tiles for L2 reuse. v2 splits each operand at every fragment read and adds each k8
// step's partial sum to the running sums. v3 (split once per k tile into shared memory, k16 partials) lost on the
// H200 (17.83 ms vs 13.08 ms, run s10-10): retired to dev/cuda/cs149_swiglu_split_in_shared.cu.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/cuda/cs149/launch.hpp"

namespace flashkit::cs149::cuda {
namespace {

constexpr int kBM = 128, kBN = 64, kBK = 16, kThreads = 256;
constexpr int kGroupM = 8;
constexpr int kAStride = kBK + 4;  // floats per shared A row: (8 rows x 4 k) fragment reads hit 32 banks
constexpr int kBStride = kBN + 8;  // floats per shared B row: (4 k x 8 cols) fragment reads hit 32 banks

struct Tiles {
  float a[2][kBM * kAStride];
  float w[2][kBK * kBStride];
  float v[2][kBK * kBStride];
};

__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ void split(float x, uint32_t& big, uint32_t& small) {
  big = to_tf32(x);
  small = to_tf32(x - __uint_as_float(big));
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Registers holding one k tile on its way from global to shared memory.
struct Staged {
  float a[8];
  float w[4];
  float v[4];
};

// kVecA: K % 4 == 0 and x 16-byte aligned; kVecB: N % 4 == 0 and W, V 16-byte aligned.
template <bool kVecA, bool kVecB>
__device__ __forceinline__ void load_tile(Staged& s, const float* __restrict__ x, const float* __restrict__ w,
                                          const float* __restrict__ v, int M, int K, int N, int m0, int n0, int k0) {
  const int t = threadIdx.x;
  if (kVecA) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int f = t + i * kThreads, row = f / 4, col = (f % 4) * 4;
      const int gm = m0 + row, gk = k0 + col;
      float4 q = make_float4(0.f, 0.f, 0.f, 0.f);
      if (gm < M && gk < K) q = __ldg(reinterpret_cast<const float4*>(x + int64_t(gm) * K + gk));
      s.a[i * 4 + 0] = q.x; s.a[i * 4 + 1] = q.y; s.a[i * 4 + 2] = q.z; s.a[i * 4 + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int e = t + i * kThreads, row = e / kBK, col = e % kBK;
      const int gm = m0 + row, gk = k0 + col;
      s.a[i] = (gm < M && gk < K) ? __ldg(x + int64_t(gm) * K + gk) : 0.f;
    }
  }
  if (kVecB) {
    const int row = t / 16, col = (t % 16) * 4;
    const int gk = k0 + row, gn = n0 + col;
    float4 qw = make_float4(0.f, 0.f, 0.f, 0.f), qv = qw;
    if (gk < K && gn < N) {
      qw = __ldg(reinterpret_cast<const float4*>(w + int64_t(gk) * N + gn));
      qv = __ldg(reinterpret_cast<const float4*>(v + int64_t(gk) * N + gn));
    }
    s.w[0] = qw.x; s.w[1] = qw.y; s.w[2] = qw.z; s.w[3] = qw.w;
    s.v[0] = qv.x; s.v[1] = qv.y; s.v[2] = qv.z; s.v[3] = qv.w;
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int e = t + i * kThreads, row = e / kBN, col = e % kBN;
      const int gk = k0 + row, gn = n0 + col;
      const bool in = gk < K && gn < N;
      s.w[i] = in ? __ldg(w + int64_t(gk) * N + gn) : 0.f;
      s.v[i] = in ? __ldg(v + int64_t(gk) * N + gn) : 0.f;
    }
  }
}

template <bool kVecA, bool kVecB>
__device__ __forceinline__ void store_tile(const Staged& s, Tiles& sm, int buf) {
  const int t = threadIdx.x;
  if (kVecA) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int f = t + i * kThreads, row = f / 4, col = (f % 4) * 4;  // 16-byte aligned: 80-byte rows
      *reinterpret_cast<float4*>(&sm.a[buf][row * kAStride + col]) =
          make_float4(s.a[i * 4 + 0], s.a[i * 4 + 1], s.a[i * 4 + 2], s.a[i * 4 + 3]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int e = t + i * kThreads;
      sm.a[buf][(e / kBK) * kAStride + e % kBK] = s.a[i];
    }
  }
  if (kVecB) {
    const int row = t / 16, col = (t % 16) * 4;  // 16-byte aligned: 288-byte rows
    *reinterpret_cast<float4*>(&sm.w[buf][row * kBStride + col]) = make_float4(s.w[0], s.w[1], s.w[2], s.w[3]);
    *reinterpret_cast<float4*>(&sm.v[buf][row * kBStride + col]) = make_float4(s.v[0], s.v[1], s.v[2], s.v[3]);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int e = t + i * kThreads;
      sm.w[buf][(e / kBN) * kBStride + e % kBN] = s.w[i];
      sm.v[buf][(e / kBN) * kBStride + e % kBN] = s.v[i];
    }
  }
}

// Grouped raster: consecutive blocks walk kGroupM M tiles before moving along N, so one wave (~132 blocks)
// touches 8 x 128 rows of x and ~16 x 64 columns of W and V (24 MB, L2-resident) instead of all of W and V.
__device__ __forceinline__ void tile_origin(int M, int N, int& m0, int& n0) {
  const int tiles_m = (M + kBM - 1) / kBM, tiles_n = (N + kBN - 1) / kBN;
  const int pid = blockIdx.x;
  const int first_m = (pid / (kGroupM * tiles_n)) * kGroupM;
  const int group_m = min(tiles_m - first_m, kGroupM);
  m0 = (first_m + (pid % (kGroupM * tiles_n)) % group_m) * kBM;
  n0 = ((pid % (kGroupM * tiles_n)) / group_m) * kBN;
}

__device__ __forceinline__ void zero(float (&acc)[2][4][4]) {
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;
}

// Epilogue: biases, SiLU and the product on a warp's accumulators. Fragment element r sits at row g (+8 for
// r >= 2), column 2*tig (+1 for odd r).
__device__ __forceinline__ void write_output(const float (&acc_w)[2][4][4], const float (&acc_v)[2][4][4],
                                             const float* __restrict__ bias_w, const float* __restrict__ bias_v,
                                             float beta, int M, int N, int m0, int n0, float* __restrict__ out) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, tig = lane % 4;
  const int warp_m = warp / 2, warp_n = warp % 2;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int gm = m0 + warp_m * 32 + mt * 16 + g + (r >= 2 ? 8 : 0);
        const int gn = n0 + warp_n * 32 + nt * 8 + 2 * tig + (r & 1);
        if (gm < M && gn < N) {
          const float gate = acc_w[mt][nt][r] + bias_w[gn];
          const float value = acc_v[mt][nt][r] + bias_v[gn];
          out[int64_t(gm) * N + gn] = gate / (1.0f + expf(-beta * gate)) * value;
        }
      }
}

template <bool kVecA, bool kVecB>
__global__ void __launch_bounds__(kThreads) swiglu_3xtf32_kernel(const float* __restrict__ x,
                                                                 const float* __restrict__ w,
                                                                 const float* __restrict__ v,
                                                                 const float* __restrict__ bias_w,
                                                                 const float* __restrict__ bias_v, float beta,
                                                                 int M, int K, int N, float* __restrict__ out) {
  __shared__ __align__(16) Tiles sm;
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
  store_tile<kVecA, kVecB>(st, sm, 0);
  __syncthreads();

  for (int kt = 0; kt < k_tiles; ++kt) {
    const int buf = kt & 1;
    const bool more = kt + 1 < k_tiles;
    if (more) load_tile<kVecA, kVecB>(st, x, w, v, M, K, N, m0, n0, (kt + 1) * kBK);
    const float* As = sm.a[buf];
    const float* Ws = sm.w[buf];
    const float* Vs = sm.v[buf];
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 8) {
      uint32_t a_big[2][4], a_small[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const int r = warp_m * 32 + mt * 16 + g;
        split(As[r * kAStride + kk + tig], a_big[mt][0], a_small[mt][0]);
        split(As[(r + 8) * kAStride + kk + tig], a_big[mt][1], a_small[mt][1]);
        split(As[r * kAStride + kk + tig + 4], a_big[mt][2], a_small[mt][2]);
        split(As[(r + 8) * kAStride + kk + tig + 4], a_big[mt][3], a_small[mt][3]);
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int c = warp_n * 32 + nt * 8 + g;
        uint32_t wb0, ws0, wb1, ws1, vb0, vs0, vb1, vs1;
        split(Ws[(kk + tig) * kBStride + c], wb0, ws0);
        split(Ws[(kk + tig + 4) * kBStride + c], wb1, ws1);
        split(Vs[(kk + tig) * kBStride + c], vb0, vs0);
        split(Vs[(kk + tig + 4) * kBStride + c], vb1, vs1);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          // The tensor cores round their sums toward zero: accumulating all of K in them biases the result by
          // ~K/8 ulps (2.8e-5 relative at K = 2048, run s8-2). So each k step's three products (small cross
          // terms first, then big * big) are summed from zero in the tensor core, and that partial sum is
          // added to the running total with round-to-nearest f32 adds (docs/worklog/cs149-swiglu.md, v2).
          float pw[4] = {0.f, 0.f, 0.f, 0.f}, pv[4] = {0.f, 0.f, 0.f, 0.f};
          mma_tf32(pw, a_small[mt], wb0, wb1);
          mma_tf32(pw, a_big[mt], ws0, ws1);
          mma_tf32(pw, a_big[mt], wb0, wb1);
          mma_tf32(pv, a_small[mt], vb0, vb1);
          mma_tf32(pv, a_big[mt], vs0, vs1);
          mma_tf32(pv, a_big[mt], vb0, vb1);
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            acc_w[mt][nt][r] += pw[r];
            acc_v[mt][nt][r] += pv[r];
          }
        }
      }
    }
    if (more) store_tile<kVecA, kVecB>(st, sm, buf ^ 1);
    __syncthreads();
  }

  write_output(acc_w, acc_v, bias_w, bias_v, beta, M, N, m0, n0, out);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void swiglu(const SwigluArgs& a) {
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream());
  const int M = int(a.m), K = int(a.k), N = int(a.n);
  const int64_t tiles = int64_t((M + kBM - 1) / kBM) * ((N + kBN - 1) / kBN);
  if (tiles > int64_t(1) << 30) fail(Status::invalid_argument, "cs149::swiglu: m x n must be at most 2^43");
  const dim3 grid{unsigned(tiles)};
  const bool vec_a = K % 4 == 0 && aligned16(a.x);
  const bool vec_b = N % 4 == 0 && aligned16(a.w) && aligned16(a.v);
  auto kernel = vec_a ? (vec_b ? swiglu_3xtf32_kernel<true, true> : swiglu_3xtf32_kernel<true, false>)
                      : (vec_b ? swiglu_3xtf32_kernel<false, true> : swiglu_3xtf32_kernel<false, false>);
  kernel<<<grid, kThreads, 0, stream>>>(a.x, a.w, a.v, a.b, a.c, a.beta, M, K, N, a.out);
  check_cuda(cudaGetLastError(), "cs149::swiglu: launch");
}

}  // namespace flashkit::cs149::cuda
