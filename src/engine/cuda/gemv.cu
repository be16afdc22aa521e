// Decode-sized GEMV y[T, N] = a[T, K] . W[N, K]^T with W bf16, f32 accumulation, T <= 16 rows per launch.
//
// Row-count independence (what decode-exact verification steps rely on): output (t, n) is the same sum in the same
// order whatever T, R and U: lane l accumulates the chunks l, l + 32, l + 64, ... of row n in order (8 fmaf each,
// into its own accumulator per input row), then the warp reduces the lanes in one fixed butterfly; the prologue
// builds each input row by the same per-row loops and block reductions. So a row of a T-row launch is bitwise the
// one-row launch's result.
//
// Bandwidth-bound: every weight byte is read once with 16-byte loads, each lane keeping R rows x U chunks of
// 16 bytes in flight and the next step's chunks loading while the current ones are multiplied (two register
// buffers; Little's law: ~30 KB per SM covers HBM latency at 4.8 TB/s). A warp owns R consecutive rows
// (R x 2 rows when gated: gate row n and up row N + n, so the gated epilogue stays in registers); a block owns a
// contiguous stripe of rows, so its weights are one contiguous range that thread 0 prefetches into L2, and each warp
// loads its first chunks into registers, before waiting for the previous kernel (PDL). The input rows live in shared
// memory as f32, built by the prologue (residual add / sandwich norm / input norm), which every block recomputes:
// O(T K) reads from L2, cheaper than a separate launch at decode sizes. The grid is one wave (occupancy-sized).
#include "engine/cuda/common.cuh"
#include "engine/gemv_plan.hpp"

#include <algorithm>
#include <utility>

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
  bool vec;                // x / d rows 16-byte (f32) or 8-byte (bf16) aligned: vector loads in the prologue
  bool keep_h;             // h kept in shared memory (after the input rows) for the side output
  bool slice;              // side outputs overlap no input: each block writes its slice (no arrival counter)
};

// Four consecutive activations [i, i + 4) of a row, f32 or bf16; one vector load when `vec`, else four scalar
// loads (still independent of each other).
__device__ __forceinline__ float4 load4(const void* base, bool bf16, bool vec, int64_t i) {
  if (bf16) {
    const uint16_t* b = static_cast<const uint16_t*>(base) + i;
    if (vec) {
      const uint2 u = *reinterpret_cast<const uint2*>(b);
      return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                         __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
    }
    return make_float4(bf2f(b[0]), bf2f(b[1]), bf2f(b[2]), bf2f(b[3]));
  }
  const float* f = static_cast<const float*>(base) + i;
  if (vec) return *reinterpret_cast<const float4*>(f);
  return make_float4(f[0], f[1], f[2], f[3]);
}
__device__ __forceinline__ float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// The prologue's row loops: every thread owns groups of 4 columns, kBatch groups per pass, and issues all of a
// pass's global loads before using any of them. (v2 walked the row one element per thread per iteration, a global
// load and a shared store in each: the compiler could not hoist the loads over the stores, so a K = 2048 row cost
// 8 serialized L2 round trips, twice per launch -- about half of a small GEMV's time.)
constexpr int kBatch = 4;

// Builds a[t, :] (f32, in smem) for t < T (shared memory holds T rows). rs_d[t] keeps the post-norm factor of d.
// With keep_h, h[t, :] (pre-norm) also stays in smem at hs for the side output.
// kB: groups of 4 a thread loads per pass (kBatch; fewer in the lean instantiations, whose 80 registers the
// batch would spill). A thread's groups are summed in the same order whatever kB (k = 4 tid + j 4 kThreads,
// j = 0, 1, ...), so kB never changes the result.
template <int TT, int kB = kBatch>
__device__ void prologue(const GemvParams& p, float* xs, float* hs, float* red, float* rs_d) {
  const GemvIn& in = p.in;
  const int64_t K = p.K;
  constexpr int64_t kStep = int64_t(kThreads) * 4;
  for (int t = 0; t < TT; ++t) {
    if (t >= p.T) break;
    float* row = xs + int64_t(t) * K;
    const float* drow = in.d ? in.d + t * in.ldd : nullptr;
    const void* xrow = in.x_bf16 ? static_cast<const void*>(static_cast<const uint16_t*>(in.x) + t * in.ldx)
                                 : static_cast<const void*>(static_cast<const float*>(in.x) + t * in.ldx);
    float rd = 1.0f;
    if (drow && in.post_w) {  // rms of d first (Gemma's sandwich norm)
      float ss = 0;
      for (int64_t k0 = int64_t(threadIdx.x) * 4; k0 < K; k0 += kStep * kB) {
        float4 dv[kB];
#pragma unroll
        for (int b = 0; b < kB; ++b)
          dv[b] = k0 + b * kStep < K ? load4(drow, false, p.vec, k0 + b * kStep) : make_float4(0, 0, 0, 0);
#pragma unroll
        for (int b = 0; b < kB; ++b) ss += dot4(dv[b], dv[b]);
      }
      ss = block_sum(ss, red);
      rd = rsqrtf(ss / float(K) + in.eps);
    }
    if (threadIdx.x == 0) rs_d[t] = rd;
    float ss = 0;
    // When the row fits one pass (K <= 4096), the norm weights load with it and stay in registers.
    const bool one_pass = K <= kStep * kB;
    float4 nw[kB];
    for (int64_t k0 = int64_t(threadIdx.x) * 4; k0 < K; k0 += kStep * kB) {
      float4 xv[kB], dv[kB], pw[kB];
#pragma unroll
      for (int b = 0; b < kB; ++b) {
        const int64_t k = k0 + b * kStep;
        const bool ok = k < K;
        xv[b] = ok ? load4(xrow, in.x_bf16, p.vec, k) : make_float4(0, 0, 0, 0);
        dv[b] = ok && drow ? load4(drow, false, p.vec, k) : make_float4(0, 0, 0, 0);
        pw[b] = ok && drow && in.post_w ? load4(in.post_w, false, p.vec, k) : make_float4(1, 1, 1, 1);
        nw[b] = ok && one_pass && in.norm_w ? load4(in.norm_w, false, p.vec, k) : make_float4(1, 1, 1, 1);
      }
#pragma unroll
      for (int b = 0; b < kB; ++b) {
        const int64_t k = k0 + b * kStep;
        if (k >= K) break;
        const float f = drow && in.post_w ? rd : 1.0f;
        float4 h;
        h.x = xv[b].x + dv[b].x * f * pw[b].x, h.y = xv[b].y + dv[b].y * f * pw[b].y;
        h.z = xv[b].z + dv[b].z * f * pw[b].z, h.w = xv[b].w + dv[b].w * f * pw[b].w;
        *reinterpret_cast<float4*>(row + k) = h;
        if (p.keep_h) *reinterpret_cast<float4*>(hs + int64_t(t) * K + k) = h;
        ss += dot4(h, h);
      }
    }
    if (in.norm_w) {
      ss = block_sum(ss, red);
      const float r = rsqrtf(ss / float(K) + in.eps);
      if (one_pass) {
#pragma unroll
        for (int b = 0; b < kB; ++b) {
          const int64_t k = int64_t(threadIdx.x) * 4 + b * kStep;
          if (k >= K) break;
          float4 v = *reinterpret_cast<float4*>(row + k);
          v.x *= r * nw[b].x, v.y *= r * nw[b].y, v.z *= r * nw[b].z, v.w *= r * nw[b].w;
          *reinterpret_cast<float4*>(row + k) = v;
        }
      } else {
        for (int64_t k = int64_t(threadIdx.x) * 4; k < K; k += kStep) {
          const float4 w = load4(in.norm_w, false, p.vec, k);
          float4 v = *reinterpret_cast<float4*>(row + k);
          v.x *= r * w.x, v.y *= r * w.y, v.z *= r * w.z, v.w *= r * w.w;
          *reinterpret_cast<float4*>(row + k) = v;
        }
      }
    }
  }
  __syncthreads();
}

// Side outputs h_out and a_out, from shared memory (h recomputed from x and d when it was not kept).
//  - slice mode (p.slice: neither output overlaps x or d): every block writes its own slice of the columns at once.
//  - otherwise (in-place residual or norm): only the block that arrives last, when every block has read its input,
//    writes them. The arrival (an atomic round trip, then the whole write by one block) keeps the kernel from
//    completing ~1.2 us longer (bench/cuda/latency_floor.cu, H200), so the backend avoids in-place residual updates
//    where it can (residual ping-pong, cuda_backend.cpp).
template <int TT>
__device__ void write_side_outputs(const GemvParams& p, const float* xs, const float* hs, const float* rs_d) {
  const GemvIn& in = p.in;
  if (!in.h_out && !in.a_out) return;
  const int64_t K = p.K;
  if (p.slice) {
    const int64_t per = (K + gridDim.x - 1) / gridDim.x, kb = min(K, int64_t(blockIdx.x) * per), ke = min(K, kb + per);
    for (int t = 0; t < p.T; ++t) {
      const float* row = xs + int64_t(t) * K;
      for (int64_t k = kb + threadIdx.x; k < ke; k += blockDim.x) {
        if (in.a_out) in.a_out[t * in.lda + k] = row[k];
        if (!in.h_out) continue;
        float h;
        if (!in.norm_w) h = row[k];  // a == h
        else if (p.keep_h) h = hs[int64_t(t) * K + k];
        else {
          const float x = in.x_bf16 ? bf2f(static_cast<const uint16_t*>(in.x)[t * in.ldx + k])
                                    : static_cast<const float*>(in.x)[t * in.ldx + k];
          float d = in.d ? in.d[t * in.ldd + k] : 0.0f;
          if (in.d && in.post_w) d = d * rs_d[t] * in.post_w[k];  // (d * r) * w, as the prologue rounds it
          h = x + d;
        }
        in.h_out[t * in.ldh + k] = h;
      }
    }
    return;
  }
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
  for (int t = 0; t < p.T; ++t) {
    const float* row = xs + int64_t(t) * K;
    if (in.a_out)
      for (int64_t k = threadIdx.x; k < K; k += blockDim.x) in.a_out[t * in.lda + k] = row[k];
    if (!in.h_out) continue;
    if (!in.norm_w) row = xs + int64_t(t) * K;  // a == h
    else if (p.keep_h) row = hs + int64_t(t) * K;
    else row = nullptr;
    if (row) {
      for (int64_t k = threadIdx.x; k < K; k += blockDim.x) in.h_out[t * in.ldh + k] = row[k];
      continue;
    }
    // h not kept (shared memory too small for it): recompute from x and d, loads batched as in the prologue.
    constexpr int64_t kStep = int64_t(kThreads) * 4;
    const float* drow = in.d ? in.d + t * in.ldd : nullptr;
    const void* xrow = in.x_bf16 ? static_cast<const void*>(static_cast<const uint16_t*>(in.x) + t * in.ldx)
                                 : static_cast<const void*>(static_cast<const float*>(in.x) + t * in.ldx);
    const float f = drow && in.post_w ? rs_d[t] : 1.0f;
    for (int64_t k0 = int64_t(threadIdx.x) * 4; k0 < K; k0 += kStep * kBatch) {
      float4 xv[kBatch], dv[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int64_t k = k0 + b * kStep;
        xv[b] = k < K ? load4(xrow, in.x_bf16, p.vec, k) : make_float4(0, 0, 0, 0);
        dv[b] = k < K && drow ? load4(drow, false, p.vec, k) : make_float4(0, 0, 0, 0);
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int64_t k = k0 + b * kStep;
        if (k >= K) break;
        for (int e = 0; e < 4; ++e) {
          const float pw = drow && in.post_w ? in.post_w[k + e] : 1.0f;
          in.h_out[t * in.ldh + k + e] = (&xv[b].x)[e] + (&dv[b].x)[e] * f * pw;
        }
      }
    }
  }
}

// The weights of warp step (r0, c0): rows r0 .. r0 + R - 1 (and their `up` rows N + r when gated), 16-byte chunks
// c0 + lane + 32 u of each (zeros past the row end or the stripe end).
template <int RR, int R, int U, bool GATED>
__device__ __forceinline__ void load_step(const uint4* W4, int64_t N, int64_t KC, int64_t r0, int64_t row_end,
                                          int64_t c0, int lane, bool ldcs, uint4 (&w)[RR][U]) {
#pragma unroll
  for (int i = 0; i < RR; ++i) {
    const int64_t n = r0 + (i % R);
    const bool rok = n < row_end;
    const uint4* wrow = W4 + (rok ? ((GATED && i >= R) ? N + n : n) : 0) * KC;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + lane + 32 * u;
      w[i][u] = (rok && c < KC) ? (ldcs ? __ldcs(wrow + c) : __ldg(wrow + c)) : make_uint4(0, 0, 0, 0);
    }
  }
}

template <int RR, int TT, int U>
__device__ __forceinline__ void fma_step(const uint4 (&w)[RR][U], const float* xs, int64_t K, int64_t KC, int64_t c0,
                                         int lane, int T, float (&acc)[RR][TT]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t c = c0 + lane + 32 * u;
    if (c >= KC) break;
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      if (t >= T) break;  // shared memory holds T rows
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

// The Mamba conv epilogue of x channel c (GemvOut::conv_*): one causal conv1d step on the channel's state row, in
// the order of the library's conv1d kernel (kernels/cuda/ssm/scan.cu: shift, append, bias + taps in order, SiLU).
// (Out of line and with scalar arguments: only the two one-row plain instantiations call it, from one lane per row.)
__device__ __noinline__ void conv_step(const float* __restrict__ w, const float* __restrict__ bias, float* st,
                                       float* out, int width, int64_t c, float x) {
  constexpr int kMaxW = 8;  // engine/mamba_fusion.hpp kMambaConvMaxWidth (checked by gemv_bf16)
  st += c * width, w += c * width;
  float hist[kMaxW];
#pragma unroll
  for (int k = 0; k < kMaxW; ++k) hist[k] = k + 1 < width ? st[k + 1] : (k + 1 == width ? x : 0.f);
  float s = bias ? bias[c] : 0.f;
#pragma unroll
  for (int k = 0; k < kMaxW; ++k)
    if (k < width) s += w[k] * hist[k];
  s = s / (1.f + expf(-s));
  out[c] = s;
#pragma unroll
  for (int k = 0; k < kMaxW; ++k)
    if (k < width) st[k] = hist[k];
}

// Reduces the warp's accumulators of rows r0.. and writes them through the epilogue; zeroes acc.
template <int RR, int R, int TT, bool GATED>
__device__ __forceinline__ void finish_rows(const GemvParams& p, int64_t r0, int64_t row_end, int lane,
                                            float (&acc)[RR][TT]) {
  const int64_t N = p.N;
#pragma unroll
  for (int i = 0; i < RR; ++i)
#pragma unroll
    for (int t = 0; t < TT; ++t) acc[i][t] = warp_sum(acc[i][t]);
  // lane (r * TT + t) % 32 writes output (t, r0 + r)
  float conv_v = 0.f;   // the conv epilogue's input and channel of this lane (one row each: lanes 0..R-1 run
  int64_t conv_n = -1;  // their conv steps together, not one after another: each is a dependent memory round trip)
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
      if constexpr (TT == 1 && !GATED)  // (one row, f32 y: gemv_bf16 checks)
        if (o.conv_out && n < o.conv_channels) conv_v = v, conv_n = n;
    }
  }
  if constexpr (TT == 1 && !GATED)
    if (conv_n >= 0) conv_step(p.out.conv_w, p.out.conv_b, p.out.conv_state, p.out.conv_out, p.out.conv_width, conv_n,
                               conv_v);
#pragma unroll
  for (int i = 0; i < RR; ++i)
#pragma unroll
    for (int t = 0; t < TT; ++t) acc[i][t] = 0.0f;
}

// The conv epilogue's operands of the rows r0 .. r0 + R - 1 (state row, taps, bias; lane i: row r0 + i) into L1
// when a warp starts the row group, so the epilogue's loads hit L1 rather than paying an HBM round trip in the middle
// of the weight stream. (After the PDL wait: the state was written by this kernel's previous launch.)
template <int TT, int R, bool GATED>
__device__ __forceinline__ void prefetch_conv(const GemvOut& o, int64_t r0, int lane) {
  if constexpr (TT == 1 && !GATED) {
#if defined(__CUDA_ARCH__)
    const int64_t n = r0 + lane;
    if (!o.conv_out || lane >= R || n >= o.conv_channels) return;
    const float* st = o.conv_state + n * o.conv_width;
    const float* w = o.conv_w + n * o.conv_width;
    asm volatile("prefetch.global.L1 [%0];" ::"l"(st));
    asm volatile("prefetch.global.L1 [%0];" ::"l"(st + o.conv_width - 1));  // (a row may cross a 128-byte line)
    asm volatile("prefetch.global.L1 [%0];" ::"l"(w));
    asm volatile("prefetch.global.L1 [%0];" ::"l"(w + o.conv_width - 1));
    if (o.conv_b) asm volatile("prefetch.global.L1 [%0];" ::"l"(o.conv_b + n));
#else
    (void)o, (void)r0, (void)lane;
#endif
  }
}

// Main loop: a warp walks its steps (row group, chunk range) in order with two register buffers, the loads of step
// s + 1 in flight while step s is multiplied (v3; v2 loaded a step, waited, multiplied, so every step paid a full
// memory round trip and the memory pipe drained between steps).
// MINB: blocks per SM the registers must allow (2: up to 128 registers; 3: the lean one-row shapes of the
// balanced plan, up to 80).
template <int TT, int R, int U, bool GATED, int MINB = 2>
__global__ void __launch_bounds__(kThreads, MINB) gemv_kernel(GemvParams p) {
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);
  float* hs = xs + int64_t(p.T) * p.K;
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
  // L2 (bulk prefetch), and each warp's first step goes straight into registers.
  if (threadIdx.x == 0 && row_begin < row_end && p.prefetch_cap) {
    const uint32_t cap = p.prefetch_cap;
    const uint64_t bytes = uint64_t(row_end - row_begin) * uint64_t(K) * 2u;
    const uint32_t b = uint32_t(bytes < cap ? bytes : cap);
    prefetch_l2(p.W + row_begin * K, b);
    if (GATED) prefetch_l2(p.W + (N + row_begin) * K, b);
  }
  // Steps of this warp: row groups r0 = row_begin + R (warp + kWarps j), each in chunk ranges c0 = 0, 32 U, ... < KC.
  auto advance = [&](int64_t& r, int64_t& c) {
    c += 32 * U;
    if (c >= KC) c = 0, r += int64_t(kWarps) * R;
  };
  int64_t r0 = row_begin + int64_t(warp) * R, c0 = 0;
  uint4 wa[RR][U], wb[RR][U];
  if (r0 < row_end) load_step<RR, R, U, GATED>(W4, N, KC, r0, row_end, 0, lane, p.ldcs, wa);
  pdl_wait();
  if (r0 < row_end) prefetch_conv<TT, R, GATED>(p.out, r0, lane);
  prologue<TT, MINB >= 3 ? 2 : kBatch>(p, xs, hs, red, rs_d);

  float acc[RR][TT];
#pragma unroll
  for (int i = 0; i < RR; ++i)
#pragma unroll
    for (int t = 0; t < TT; ++t) acc[i][t] = 0.0f;
  while (r0 < row_end) {  // two steps per iteration, the buffers swapping roles
    int64_t r1 = r0, c1 = c0;
    advance(r1, c1);
    if (r1 < row_end) load_step<RR, R, U, GATED>(W4, N, KC, r1, row_end, c1, lane, p.ldcs, wb);
    if (c1 == 0 && r1 < row_end) prefetch_conv<TT, R, GATED>(p.out, r1, lane);
    fma_step<RR, TT, U>(wa, xs, K, KC, c0, lane, p.T, acc);
    if (c1 == 0) finish_rows<RR, R, TT, GATED>(p, r0, row_end, lane, acc);
    if (r1 >= row_end) break;
    int64_t r2 = r1, c2 = c1;
    advance(r2, c2);
    if (r2 < row_end) load_step<RR, R, U, GATED>(W4, N, KC, r2, row_end, c2, lane, p.ldcs, wa);
    if (c2 == 0 && r2 < row_end) prefetch_conv<TT, R, GATED>(p.out, r2, lane);
    fma_step<RR, TT, U>(wb, xs, K, KC, c1, lane, p.T, acc);
    if (c2 == 0) finish_rows<RR, R, TT, GATED>(p, r1, row_end, lane, acc);
    r0 = r2, c0 = c2;
  }
  // Side outputs last, off the critical path: every block read its input in the prologue, long before it arrives.
  write_side_outputs<TT>(p, xs, hs, rs_d);
}

// Dynamic shared memory a GEMV block may use: what the device allows a block (opt-in; 227 KB on H100/H200, 163 KB
// on A100) less room for the static arrays, at most 200 KB.
int64_t max_smem() {
  static thread_local int dev_cached = -1;
  static thread_local int64_t bytes = 0;
  int dev = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  if (dev != dev_cached) {
    int optin = 0;
    check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "cudaDeviceGetAttribute");
    bytes = std::min<int64_t>(200 * 1024, int64_t(optin) - 2048);
    dev_cached = dev;
  }
  return bytes;
}

size_t gemv_smem(const GemvParams& p) { return size_t(p.T) * size_t(p.K) * sizeof(float) * (p.keep_h ? 2 : 1); }

// Blocks of this instantiation one SM holds with p's shared memory (after opting in to more dynamic shared memory:
// static + dynamic may pass 48 KB even when dynamic alone does not; once per instantiation and device).
template <int TT, int R, int U, bool GATED, int MINB = 2>
int resident_blocks(const GemvParams& p) {
  auto kern = gemv_kernel<TT, R, U, GATED, MINB>;
  static thread_local int done_for = -1;
  int dev = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  if (done_for != dev) {
    check_cuda(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(max_smem())),
               "cudaFuncSetAttribute(gemv smem)");
    done_for = dev;
  }
  int occ = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, kThreads, gemv_smem(p)), "gemv occupancy");
  return occ;
}

// Tuning::cuda_gemv_plan (FLASHKIT_CUDA_GEMV_PLAN): auto, legacy or balanced (A/B runs).
int gemv_plan_mode() { return launch_tuning().cuda_gemv_plan; }

// A one-row ungated launch as planned (engine/gemv_plan.hpp).
template <int R, int U, int MINB>
void run_planned(const GemvParams& p0, const GemvPlan& plan, cudaStream_t stream) {
  GemvParams p = p0;
  p.rows_per_block = plan.rows_per_block;
  launch("gemv_bf16", gemv_kernel<1, R, U, false, MINB>, dim3(unsigned(plan.blocks)), dim3(kThreads), gemv_smem(p),
         stream, p);
}

void run_one_row(const GemvParams& p, cudaStream_t stream) {
  // The lean kernels' residency only when their (balanced) plan may be chosen: every eager launch pays for each
  // occupancy query, and the automatic plan is the legacy one.
  const GemvPlanMode mode = GemvPlanMode(gemv_plan_mode());
  const bool lean = mode == GemvPlanMode::balanced;
  const int resident[4] = {resident_blocks<1, 2, 4, false>(p), resident_blocks<1, 1, 8, false>(p),
                           lean ? resident_blocks<1, 1, 4, false, 3>(p) : 0,
                           lean ? resident_blocks<1, 1, 5, false, 3>(p) : 0};
  const GemvPlan plan = gemv_plan(p.N, p.K, sm_count(), resident, mode);
  switch (plan.step) {
    case GemvStep::r2u4: return run_planned<2, 4, 2>(p, plan, stream);
    case GemvStep::r1u8: return run_planned<1, 8, 2>(p, plan, stream);
    case GemvStep::r1u4_lean: return run_planned<1, 4, 3>(p, plan, stream);
    case GemvStep::r1u5_lean: return run_planned<1, 5, 3>(p, plan, stream);
  }
}

template <int TT, int R, int U, bool GATED>
void run(const GemvParams& p0, cudaStream_t stream) {
  GemvParams p = p0;
  const int sms = sm_count();
  const int64_t groups = (p.N + R - 1) / R;  // row groups of one warp
  const size_t smem = gemv_smem(p);
  auto kern = gemv_kernel<TT, R, U, GATED>;
  // One wave: as many blocks as can be resident (registers / shared memory), at most 4 per SM (half the threads,
  // so the next kernel's blocks can become resident under PDL).
  const int occ = resident_blocks<TT, R, U, GATED>(p);
  const int64_t max_blocks = int64_t(sms) * std::clamp(occ, 1, 4);
  int64_t blocks = std::min<int64_t>((groups + kWarps - 1) / kWarps, max_blocks);
  blocks = std::max<int64_t>(blocks, 1);
  const int64_t groups_per_block = (groups + blocks - 1) / blocks;
  p.rows_per_block = groups_per_block * R;
  blocks = (p.N + p.rows_per_block - 1) / p.rows_per_block;
  launch("gemv_bf16", kern, dim3(unsigned(blocks)), dim3(kThreads), smem, stream, p);
}

}  // namespace

namespace {
bool aligned(const void* ptr, size_t bytes) { return (reinterpret_cast<uintptr_t>(ptr) & (bytes - 1)) == 0; }

// Rows [t0, t0 + T) of a call: every row-indexed pointer moved by t0 rows.
void shift_rows(GemvIn& in, GemvOut& out, int64_t t0) {
  if (t0 == 0) return;
  in.x = in.x_bf16 ? static_cast<const void*>(static_cast<const uint16_t*>(in.x) + t0 * in.ldx)
                   : static_cast<const void*>(static_cast<const float*>(in.x) + t0 * in.ldx);
  if (in.d) in.d += t0 * in.ldd;
  if (in.h_out) in.h_out += t0 * in.ldh;
  if (in.a_out) in.a_out += t0 * in.lda;
  out.y = out.y_bf16 ? static_cast<void*>(static_cast<uint16_t*>(out.y) + t0 * out.ldy)
                     : static_cast<void*>(static_cast<float*>(out.y) + t0 * out.ldy);
  if (out.gu_out) out.gu_out += t0 * out.ldgu;
  if (out.residual) out.residual += t0 * out.ldr;
}
}  // namespace

void gemv_bf16(const GemvIn& in, const uint16_t* W, int64_t N, int64_t K, int T, const GemvOut& out,
               unsigned int* counter, cudaStream_t stream) {
  if (T < 1) fail(Status::invalid_argument, "gemv_bf16: T must be positive, got " + std::to_string(T));
  if (K % 8 != 0 || K <= 0 || (reinterpret_cast<uintptr_t>(W) & 15u))
    fail(Status::invalid_argument, "gemv_bf16: K must be a positive multiple of 8 and W 16-byte aligned");
  if (out.conv_out && (T != 1 || out.act != Act::none || out.y_bf16 || out.conv_width < 1 || out.conv_width > 8 ||
                       out.conv_channels > N || !out.conv_w || !out.conv_state))
    fail(Status::invalid_argument, "gemv_bf16: the conv epilogue needs T == 1, no gate, f32 y, conv_width in [1, 8], "
                                   "conv_channels <= N and conv weights and state");
  const int64_t smem_cap = max_smem();
  if (K * 4 > smem_cap)
    fail(Status::invalid_argument, "gemv_bf16: K = " + std::to_string(K) + " too large for shared memory (K * 4 > " +
                                       std::to_string(smem_cap) + " bytes)");
  // Side outputs that overlap an input the prologue reads (in place) are written by the last block to arrive, which
  // needs the counter; others are written by every block, a slice each.
  // Byte ranges of T rows of K elements: do two row sets overlap?
  auto overlap = [&](const void* p, int64_t lp, size_t sp, const void* q, int64_t lq, size_t sq) {
    if (!p || !q) return false;
    const char* p0 = static_cast<const char*>(p);
    const char* q0 = static_cast<const char*>(q);
    return p0 < q0 + (int64_t(T - 1) * lq + K) * int64_t(sq) && q0 < p0 + (int64_t(T - 1) * lp + K) * int64_t(sp);
  };
  const size_t xsz = in.x_bf16 ? 2 : 4;
  bool slice = true;
  for (auto [o, lo] : {std::pair<const float*, int64_t>{in.h_out, in.ldh}, {in.a_out, in.lda}})
    slice = slice && !overlap(o, lo, 4, in.x, in.ldx, xsz) && !overlap(o, lo, 4, in.d, in.ldd, 4);
  slice = slice && !overlap(in.h_out, in.ldh, 4, in.a_out, in.lda, 4);
  if ((in.h_out || in.a_out) && !slice && !counter)
    fail(Status::invalid_argument, "gemv_bf16: in-place h_out/a_out need a counter");
  if (N <= 0) return;
  // Vector loads in the prologue when every activation row and norm weight allows them.
  const size_t xa = in.x_bf16 ? 8 : 16;
  const bool vec = aligned(in.x, xa) && in.ldx % 4 == 0 && (!in.d || (aligned(in.d, 16) && in.ldd % 4 == 0)) &&
                   (!in.post_w || aligned(in.post_w, 16)) && (!in.norm_w || aligned(in.norm_w, 16));
  const bool gated = out.act != Act::none;
  const int sms = sm_count();
  // Two rows per warp when there are enough rows to fill the machine that way, else one.
  const bool r2 = N >= int64_t(sms) * kWarps * 4;
  // Shared memory holds the T input rows (and h when it must be written back after a norm): calls with more rows
  // than fit run as several launches of fewer rows (rows are independent).
  const int64_t row_bytes = K * 4;
  const int tc = int(std::min<int64_t>({T, smem_cap / row_bytes, kGemvMaxRowsPerLaunch}));
  for (int t0 = 0; t0 < T; t0 += tc) {
    GemvIn ci = in;
    GemvOut co = out;
    shift_rows(ci, co, t0);
    const int Tc = std::min(tc, T - t0);
    const bool keep_h = ci.h_out && ci.norm_w && 2 * int64_t(Tc) * row_bytes <= smem_cap;
    GemvParams p{ci, co, W, N, K, Tc, 0, counter, gemv_prefetch_enabled() ? (48u << 10) : 0u, gemv_streaming_loads(),
                 vec, keep_h, slice};
    // Register budget: two weight buffers of RR x U 16-byte chunks per lane (RR = R, or 2R when gated) <= 16.
    if (Tc == 1) {
      if (gated) {
        if (r2) run<1, 2, 2, true>(p, stream);
        else run<1, 1, 4, true>(p, stream);
      } else {
        run_one_row(p, stream);  // (engine/gemv_plan.hpp: the legacy plan is the r2 rule above)
      }
    } else if (Tc <= 8) {
      if (gated) run<8, 1, 2, true>(p, stream);
      else run<8, 1, 4, false>(p, stream);
    } else {  // decode-exact verification steps of 9..16 rows (the weights still read once)
      if (gated) run<16, 1, 2, true>(p, stream);
      else run<16, 1, 4, false>(p, stream);
    }
  }
}

}  // namespace flashkit::engine::cuda
