// Decode-sized GEMV y[T, N] = a[T, K] . W[N, K]^T with W bf16, f32 accumulation, T <= 8 rows.
//
// Bandwidth-bound: every weight byte is read once with 16-byte loads, each lane keeping R rows x U chunks of
// 16 bytes in flight (Little's law: ~30 KB per SM covers HBM latency at 4.8 TB/s). A warp owns R consecutive rows
// (R x 2 rows when gated: gate row n and up row N + n, so the gated epilogue stays in registers); a block owns a
// contiguous stripe of rows, so its weights are one contiguous range that thread 0 prefetches into L2, and each warp
// loads its first chunks into registers, before waiting for the previous kernel (PDL). The input rows live in shared
// memory as f32, built by the prologue (residual add / sandwich norm / input norm), which every block recomputes:
// O(T K) reads from L2, cheaper than a separate launch at decode sizes. The grid is one wave (occupancy-sized).
#include "engine/cuda/common.cuh"

#include <algorithm>

namespace flashkit::engine::cuda {

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;

struct GemvParams {
  GemvIn in;
  GemvOut out;
  const uint16_t* W;
  int64_t N, K;
  int T;
  int64_t rows_per_block;  // multiple of R
  unsigned int* counter;
  uint32_t prefetch_cap;   // bytes of the block's weight stripe prefetched into L2 (0: none)
  bool ldcs;               // streaming (evict-first) weight loads
};

// Builds a[t, :] (f32, in smem) for t < T; rows T..TT-1 are zeroed. rs_d[t] keeps the post-norm factor of d so
// the last block can recompute h without keeping it.
template <int TT>
__device__ void prologue(const GemvParams& p, float* xs, float* red, float* rs_d) {
  const GemvIn& in = p.in;
  const int64_t K = p.K;
  for (int t = 0; t < TT; ++t) {
    float* row = xs + int64_t(t) * K;
    if (t >= p.T) {
      for (int64_t k = threadIdx.x; k < K; k += blockDim.x) row[k] = 0.0f;
      continue;
    }
    float rd = 1.0f;
    if (in.d && in.post_w) {
      float ss = 0;
      for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
        const float dv = in.d[t * in.ldd + k];
        ss += dv * dv;
      }
      ss = block_sum(ss, red);
      rd = rsqrtf(ss / float(K) + in.eps);
    }
    if (threadIdx.x == 0) rs_d[t] = rd;
    float ss = 0;
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
      float h = ld_any(in.x, in.x_bf16, t * in.ldx + k);
      if (in.d) h += in.d[t * in.ldd + k] * (in.post_w ? rd * in.post_w[k] : 1.0f);
      row[k] = h;
      ss += h * h;
    }
    if (in.norm_w) {
      ss = block_sum(ss, red);
      const float r = rsqrtf(ss / float(K) + in.eps);
      for (int64_t k = threadIdx.x; k < K; k += blockDim.x) row[k] *= r * in.norm_w[k];
    }
  }
  __syncthreads();
}

// The block that arrives last (all others have read x) writes h_out (recomputed from x, d) and a_out.
template <int TT>
__device__ void write_side_outputs(const GemvParams& p, const float* xs, const float* rs_d) {
  const GemvIn& in = p.in;
  if (!in.h_out && !in.a_out) return;
  // h_out / a_out may alias x or d (in-place residual, in-place norm): only the last block to arrive, when every
  // block has its input in shared memory, writes them.
  __shared__ int s_last;
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned prev = atomicAdd(p.counter, 1u);
    s_last = prev == gridDim.x - 1;
    if (s_last) *p.counter = 0u;  // every block has arrived: reset for the next launch (graph replay)
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  const int64_t K = p.K;
  for (int t = 0; t < p.T; ++t) {
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
      if (in.a_out) in.a_out[t * in.lda + k] = xs[int64_t(t) * K + k];
      if (in.h_out) {
        float h = ld_any(in.x, in.x_bf16, t * in.ldx + k);
        if (in.d) h += in.d[t * in.ldd + k] * (in.post_w ? rs_d[t] * in.post_w[k] : 1.0f);
        in.h_out[t * in.ldh + k] = h;
      }
    }
  }
}

// The weight rows of one warp step and their 16-byte chunks [c0, c0 + 32 U) for this lane (zeros past the end).
template <int RR, int R, int U, bool GATED>
__device__ __forceinline__ void setup_rows(const uint4* W4, int64_t N, int64_t KC, int64_t r0, int64_t row_end,
                                           const uint4* (&wrow)[RR], bool (&rok)[RR]) {
#pragma unroll
  for (int i = 0; i < RR; ++i) {
    const int64_t n = r0 + (i % R);
    rok[i] = n < row_end;
    const int64_t wr = (GATED && i >= R) ? N + n : n;
    wrow[i] = W4 + (rok[i] ? wr : 0) * KC;
  }
}
template <int RR, int U>
__device__ __forceinline__ void load_chunks(const uint4* const (&wrow)[RR], const bool (&rok)[RR], int64_t KC,
                                            int64_t c0, int lane, bool ldcs, uint4 (&w)[RR][U]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t c = c0 + lane + 32 * u;
#pragma unroll
    for (int i = 0; i < RR; ++i)
      w[i][u] = (rok[i] && c < KC) ? (ldcs ? __ldcs(wrow[i] + c) : __ldg(wrow[i] + c)) : make_uint4(0, 0, 0, 0);
  }
}

template <int TT, int R, int U, bool GATED>
__global__ void __launch_bounds__(kThreads) gemv_kernel(GemvParams p) {
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);
  __shared__ float red[32];
  __shared__ float rs_d[TT];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t N = p.N, K = p.K, KC = K / 8;
  const int64_t row_begin = int64_t(blockIdx.x) * p.rows_per_block;
  const int64_t row_end = min(N, row_begin + p.rows_per_block);
  constexpr int RR = GATED ? 2 * R : R;  // weight rows per warp step
  const uint4* W4 = reinterpret_cast<const uint4*>(p.W);

  pdl_trigger();
  // Weights are constant: start streaming them before waiting for the previous kernel. The block's stripe goes to
  // L2 (bulk prefetch), and each warp's first chunks go straight into registers.
  if (threadIdx.x == 0 && row_begin < row_end && p.prefetch_cap) {
    const uint32_t cap = p.prefetch_cap;
    const uint64_t bytes = uint64_t(row_end - row_begin) * uint64_t(K) * 2u;
    const uint32_t b = uint32_t(bytes < cap ? bytes : cap);
    prefetch_l2(p.W + row_begin * K, b);
    if (GATED) prefetch_l2(p.W + (N + row_begin) * K, b);
  }
  int64_t r0 = row_begin + int64_t(warp) * R;
  const uint4* wrow[RR];
  bool rok[RR];
  uint4 w[RR][U];
  bool preloaded = false;
  if (r0 < row_end) {
    setup_rows<RR, R, U, GATED>(W4, N, KC, r0, row_end, wrow, rok);
    load_chunks<RR, U>(wrow, rok, KC, 0, lane, p.ldcs, w);
    preloaded = true;
  }
  pdl_wait();
  prologue<TT>(p, xs, red, rs_d);

  for (; r0 < row_end; r0 += int64_t(kWarps) * R) {
    float acc[RR][TT];
#pragma unroll
    for (int i = 0; i < RR; ++i)
#pragma unroll
      for (int t = 0; t < TT; ++t) acc[i][t] = 0.0f;
    if (!preloaded) setup_rows<RR, R, U, GATED>(W4, N, KC, r0, row_end, wrow, rok);
    for (int64_t c0 = 0; c0 < KC; c0 += 32 * U) {
      if (!preloaded) load_chunks<RR, U>(wrow, rok, KC, c0, lane, p.ldcs, w);
      preloaded = false;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = c0 + lane + 32 * u;
        if (c >= KC) break;
#pragma unroll
        for (int t = 0; t < TT; ++t) {
          const float4* xp = reinterpret_cast<const float4*>(xs + int64_t(t) * K + c * 8);
          const float4 xa = xp[0], xb = xp[1];
#pragma unroll
          for (int i = 0; i < RR; ++i) {
            float wf[8];
            unpack8(w[i][u], wf);
            float s = acc[i][t];
            s = fmaf(wf[0], xa.x, s), s = fmaf(wf[1], xa.y, s), s = fmaf(wf[2], xa.z, s), s = fmaf(wf[3], xa.w, s);
            s = fmaf(wf[4], xb.x, s), s = fmaf(wf[5], xb.y, s), s = fmaf(wf[6], xb.z, s), s = fmaf(wf[7], xb.w, s);
            acc[i][t] = s;
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < RR; ++i)
#pragma unroll
      for (int t = 0; t < TT; ++t) acc[i][t] = warp_sum(acc[i][t]);
    // epilogue: lane (r * TT + t) % 32 writes output (t, r0 + r)
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int t = 0; t < TT; ++t) {
        const int64_t n = r0 + r;
        if (lane != (r * TT + t) % 32 || t >= p.T || n >= row_end) continue;
        const GemvOut& o = p.out;
        float v = acc[r][t];
        if (o.bias) v += o.bias[n];
        if constexpr (GATED) {
          float up = acc[R + r][t];
          if (o.bias) up += o.bias[N + n];
          if (o.gu_out) {
            o.gu_out[t * o.ldgu + n] = v;
            o.gu_out[t * o.ldgu + N + n] = up;
          }
          v = act_fn(o.act, v) * up;
        }
        if (o.softcap > 0.0f) v = o.softcap * tanhf(v / o.softcap);
        if (o.residual) v += o.residual[t * o.ldr + n];
        if (o.y_bf16) static_cast<uint16_t*>(o.y)[t * o.ldy + n] = f2bf(v);
        else static_cast<float*>(o.y)[t * o.ldy + n] = v;
      }
    }
  }
  // Side outputs last, off the critical path: every block read its input in the prologue, long before it arrives.
  write_side_outputs<TT>(p, xs, rs_d);
}

template <int TT, int R, int U, bool GATED>
void run(const GemvParams& p0, cudaStream_t stream) {
  GemvParams p = p0;
  const int sms = sm_count();
  const int64_t groups = (p.N + R - 1) / R;  // row groups of one warp
  const size_t smem = size_t(TT) * size_t(p.K) * sizeof(float);
  auto kern = gemv_kernel<TT, R, U, GATED>;
  if (smem > 48 * 1024) {  // opt in to more dynamic shared memory, once per instantiation and device
    static thread_local int done_for = -1;
    int dev = 0;
    check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
    if (done_for != dev) {
      check_cuda(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024),
                 "cudaFuncSetAttribute(gemv smem)");
      done_for = dev;
    }
  }
  // One wave: as many blocks as can be resident (registers / shared memory), at most 4 per SM (half the threads,
  // so the next kernel's blocks can become resident under PDL).
  int occ = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, kThreads, smem), "gemv occupancy");
  const int64_t max_blocks = int64_t(sms) * std::clamp(occ, 1, 4);
  int64_t blocks = std::min<int64_t>((groups + kWarps - 1) / kWarps, max_blocks);
  blocks = std::max<int64_t>(blocks, 1);
  const int64_t groups_per_block = (groups + blocks - 1) / blocks;
  p.rows_per_block = groups_per_block * R;
  blocks = (p.N + p.rows_per_block - 1) / p.rows_per_block;
  launch("gemv_bf16", kern, dim3(unsigned(blocks)), dim3(kThreads), smem, stream, p);
}

}  // namespace

void gemv_bf16(const GemvIn& in, const uint16_t* W, int64_t N, int64_t K, int T, const GemvOut& out,
               unsigned int* counter, cudaStream_t stream) {
  if (T < 1 || T > 8) fail(Status::invalid_argument, "gemv_bf16: T must be in 1..8, got " + std::to_string(T));
  if (K % 8 != 0 || K <= 0 || (reinterpret_cast<uintptr_t>(W) & 15u))
    fail(Status::invalid_argument, "gemv_bf16: K must be a positive multiple of 8 and W 16-byte aligned");
  if (int64_t(T) * K * 4 > 200 * 1024) fail(Status::invalid_argument, "gemv_bf16: T*K too large for shared memory");
  if ((in.h_out || in.a_out) && !counter) fail(Status::invalid_argument, "gemv_bf16: h_out/a_out need a counter");
  if (N <= 0) return;
  GemvParams p{in, out, W, N, K, T, 0, counter, gemv_prefetch_enabled() ? (48u << 10) : 0u, gemv_streaming_loads()};
  const bool gated = out.act != Act::none;
  const int sms = sm_count();
  // Two rows per warp when there are enough rows to fill the machine that way, else one.
  const bool r2 = N >= int64_t(sms) * kWarps * 4;
  if (T == 1) {
    if (gated) {
      if (r2) run<1, 2, 4, true>(p, stream);
      else run<1, 1, 4, true>(p, stream);
    } else {
      if (r2) run<1, 2, 4, false>(p, stream);
      else run<1, 1, 8, false>(p, stream);
    }
  } else {
    if (gated) run<8, 1, 2, true>(p, stream);
    else run<8, 1, 4, false>(p, stream);
  }
}

}  // namespace flashkit::engine::cuda
