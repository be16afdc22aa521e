// The pieces of the scan forward v4 (scan_v4.cu, scan_v4_pipe.cu) that the retired v5 (dev/cuda/ssm/scan_v5.cu, the
// chunked two-pass scan, out of the build) ran too: the tile constants, the cp.async chunk copies, and one block's
// scan of 32 channels over a range of steps (scan_v4_block), which v4 runs over the whole sequence and v5 ran over
// one chunk (its ScanArgs offset to the chunk's first step); and generation 11's leaner copies, softplus and silu
// (scan_v4_block's LEAN). docs/worklog/ssm-scan.md "v4", "v5", "v6".
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/ssm/async_copy.cuh"
#include "kernels/ssm_args.hpp"

namespace flashkit::kernels::scan_v4_detail {

constexpr int kCh = 32;             // channels per block
constexpr int kGroups = kCh / 4;    // 4-channel groups per row: one 16-byte copy / store each
constexpr int kStates = 16;
constexpr float kLog2e = 1.4426950408889634f;

// CPT: channels per thread in the recurrence (1; 2 in the retired generation 12, dev/cuda/ssm/scan_v4_cpt.cu).
template <int NPT, int TC, int STAGES, int CPT = 1>
struct V4 {
  static constexpr int SPLIT = kStates / NPT;                     // threads per channel in the recurrence
  static constexpr int kThreads = kCh * SPLIT / CPT;               // 256 (NPT 2) or 128 (NPT 4); / CPT
  static constexpr int kItems = TC * kGroups;                      // (step, group) items per chunk
  static constexpr int kItemIters = (kItems + kThreads - 1) / kThreads;
  static constexpr int kBCIters = TC * kStates / kThreads;        // B and C elements a thread copies per chunk
  static constexpr int kYRow = kCh + 32 / SPLIT;                   // padded: see the header
  static constexpr int kStageFloats = 3 * TC * kCh + 2 * TC * kStates;  // u, delta, z [TC][32]; B, C [TC][16]
  static constexpr size_t kSmemBytes =
      4 * (size_t(STAGES) * kStageFloats + 2 * size_t(TC) * kCh + size_t(TC) * SPLIT * kYRow);
  static_assert(kThreads % kGroups == 0, "a thread's items share one 4-channel group");
  static_assert(kBCIters >= 1 && TC * kStates % kThreads == 0, "B/C copies split evenly");
  static_assert(STAGES >= 2, "at least one chunk in flight");
  static_assert(kThreads % kStates == 0, "a thread's B / C copies share one state index");
};

__device__ __forceinline__ float softplus_f(float x) { return x > 20.f ? x : log1pf(__expf(x)); }

// 2^x on the FMA pipe, for the states that relieve the SFU (16 ex2 per SM and clock: the scan's second floor, equal to
// HBM's): n = round(x) by adding 1.5 * 2^23 (its low mantissa bits then hold n), f = x - n in [-0.5, 0.5], 2^f by a
// degree-5 polynomial (a Chebyshev fit made for this file: relative error 2.5e-7 in f32 arithmetic, the size of
// ex2.approx's), n added to the exponent field. x is clamped to [-126, 126] (decays below 2^-126 are negligible).
__device__ __forceinline__ float exp2_fma(float x) {
  x = fminf(fmaxf(x, -126.f), 126.f);
  const float r = x + 12582912.f;
  const float f = x - (r - 12582912.f);
  float p = 1.34004327e-3f;
  p = fmaf(p, f, 9.67603736e-3f);
  p = fmaf(p, f, 5.55032715e-2f);
  p = fmaf(p, f, 2.40221068e-1f);
  p = fmaf(p, f, 6.93147182e-1f);
  p = fmaf(p, f, 1.00000012f);
  return __int_as_float(__float_as_int(p) + (__float_as_int(r) << 23));
}

// `live` (0..4) channels of a 4-channel row piece from `src` (16-byte aligned when `vec`); `base`: any valid address
// for the copies that read nothing.
__device__ __forceinline__ void copy_group(float* dst, const float* src, const float* base, int live, bool vec) {
  if (vec) {
    cp_async16(dst, live ? src : base, 4 * live);
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) cp_async4(dst + k, k < live ? src + k : base, k < live ? 4 : 0);
  }
}

// Issues the copies this thread owns for the chunk starting at t0 into `stage` (one commit group is the caller's).
template <int NPT, int TC, int STAGES, bool WITH_C = true>
__device__ __forceinline__ void issue_chunk(const ScanArgs& a, bool vec, int64_t b, int64_t c0, int64_t t0,
                                            float* stage) {
  using P = V4<NPT, TC, STAGES>;
  const int tid = threadIdx.x;
  float* su = stage;
  float* sd = su + TC * kCh;
  float* sz = sd + TC * kCh;
  float* sB = sz + TC * kCh;
  float* sC = sB + TC * kStates;
#pragma unroll
  for (int j = 0; j < P::kItemIters; ++j) {
    const int g = tid + j * P::kThreads;
    if (P::kItems % P::kThreads != 0 && g >= P::kItems) break;
    const int tt = g / kGroups, q = g % kGroups;
    const int64_t t = t0 + tt, c = c0 + 4 * q;
    const int64_t left = a.d_inner - c;
    const int live = t < a.seqlen ? int(left < 0 ? 0 : left > 4 ? 4 : left) : 0;
    const int o = tt * kCh + 4 * q;
    copy_group(su + o, a.u + b * a.u_b + t * a.u_t + c, a.u, live, vec);
    copy_group(sd + o, a.delta + b * a.dl_b + t * a.dl_t + c, a.delta, live, vec);
    if (a.z) copy_group(sz + o, a.z + b * a.z_b + t * a.z_t + c, a.z, live, vec);
  }
#pragma unroll
  for (int j = 0; j < P::kBCIters; ++j) {
    const int e = tid + j * P::kThreads, tt = e / kStates, n = e % kStates;
    const int64_t t = t0 + tt;
    const bool on = t < a.seqlen && n < a.d_state;
    cp_async4(sB + e, on ? a.B + b * a.B_b + t * a.B_t + n : a.B, on ? 4 : 0);
    if (WITH_C) cp_async4(sC + e, on ? a.C + b * a.C_b + t * a.C_t + n : a.C, on ? 4 : 0);
  }
}

// Generation 11 (v4_npt4_lean; docs/worklog/ssm-scan.md "v6"): the per-chunk overhead v4's SASS showed (~700 of
// ~1,070 instructions per thread and 16-step chunk) cut. softplus(x) = max(x, 0) + log1p(w), w = e^-|x| in (0, 1]:
// log1p(w) = 2 atanh(s), s = w / (2 + w) in (0, 1/3], by its series to s^13 (truncation < 1.5e-8 relative), so the
// only SFU work is one ex2 and one reciprocal, both with relative error ~2^-22 (__logf's is absolute near 1: too
// coarse for dt ~ 1e-3). Past 15, log1p(e^-x) < 3.1e-7 is below x's last bit.
__device__ __forceinline__ float softplus_lean(float x) {
  const float w = __expf(-fabsf(x));
  const float s = __fdividef(w, 2.f + w), s2 = s * s;
  float p = 1.f / 13.f;
  p = fmaf(p, s2, 1.f / 11.f);
  p = fmaf(p, s2, 1.f / 9.f);
  p = fmaf(p, s2, 1.f / 7.f);
  p = fmaf(p, s2, 1.f / 5.f);
  p = fmaf(p, s2, 1.f / 3.f);
  p = fmaf(p, s2, 1.f);
  return x > 15.f ? x : fmaxf(x, 0.f) + 2.f * s * p;  // a select, not a branch: both sides are cheap
}

// z sigmoid(z) with the fast reciprocal. e^-z is capped at e^88 (< 2^128, finite): for z < -87.3 the denominator
// exceeds 2^126, where __fdividef returns 0, the limit (|z sigmoid(z)| < 1e-36 there); for z > 88 e^-z flushes to 0.
__device__ __forceinline__ float silu_lean(float z) { return __fdividef(z, 1.f + __expf(fminf(-z, 88.f))); }

// The lean block's copy sources: what issue_chunk recomputes per copy and chunk (64-bit address products, the
// channel part of the zero-fill count), computed once per block; each issue advances them by one chunk (TC steps).
template <int NPT, int TC, int STAGES, bool WITH_C, int CPT = 1>
struct ChunkSources {
  using P = V4<NPT, TC, STAGES, CPT>;
  const float* u[P::kItemIters];
  const float* dl[P::kItemIters];
  const float* z[P::kItemIters];
  const float* B[P::kBCIters];
  const float* C[P::kBCIters];
  int chan_live[P::kItemIters];  // the item's channels inside d_inner (0..4); 0 also for items past kItems
  bool n_on;                     // this thread's B / C state index is inside d_state
  int64_t left;                  // steps from the next chunk to issue to the end: its row tt is live when tt < left
  int64_t u_step, dl_step, z_step, B_step, C_step;  // one chunk (TC steps) of each source, in elements

  __device__ __forceinline__ void init(const ScanArgs& a, int64_t b, int64_t c0) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int j = 0; j < P::kItemIters; ++j) {
      const int g = tid + j * P::kThreads, tt = g / kGroups, q = g % kGroups;
      const int64_t c = c0 + 4 * q, ch = a.d_inner - c;
      chan_live[j] = P::kItems % P::kThreads != 0 && g >= P::kItems ? 0 : int(ch < 0 ? 0 : ch > 4 ? 4 : ch);
      u[j] = a.u + b * a.u_b + tt * a.u_t + c;
      dl[j] = a.delta + b * a.dl_b + tt * a.dl_t + c;
      z[j] = a.z ? a.z + b * a.z_b + tt * a.z_t + c : a.z;
    }
    const int n = tid % kStates;
    n_on = n < a.d_state;
#pragma unroll
    for (int j = 0; j < P::kBCIters; ++j) {
      const int tt = (tid + j * P::kThreads) / kStates;
      B[j] = a.B + b * a.B_b + tt * a.B_t + n;
      C[j] = a.C + b * a.C_b + tt * a.C_t + n;
    }
    left = a.seqlen;
    u_step = TC * a.u_t, dl_step = TC * a.dl_t, z_step = TC * a.z_t, B_step = TC * a.B_t, C_step = TC * a.C_t;
  }

  // The copies of the next chunk into `stage` (the caller commits), then one chunk on.
  __device__ __forceinline__ void issue(const ScanArgs& a, bool vec, float* stage) {
    const int tid = threadIdx.x;
    float* su = stage;
    float* sd = su + TC * kCh;
    float* sz = sd + TC * kCh;
    float* sB = sz + TC * kCh;
    float* sC = sB + TC * kStates;
#pragma unroll
    for (int j = 0; j < P::kItemIters; ++j) {
      const int g = tid + j * P::kThreads;
      if (P::kItems % P::kThreads != 0 && g >= P::kItems) break;
      const int tt = g / kGroups, o = tt * kCh + 4 * (g % kGroups);
      const int live = tt < left ? chan_live[j] : 0;
      copy_group(su + o, u[j], a.u, live, vec);
      copy_group(sd + o, dl[j], a.delta, live, vec);
      if (a.z) copy_group(sz + o, z[j], a.z, live, vec);
      u[j] += u_step, dl[j] += dl_step;
      if (a.z) z[j] += z_step;
    }
#pragma unroll
    for (int j = 0; j < P::kBCIters; ++j) {
      const int e = tid + j * P::kThreads;
      const bool on = n_on && e / kStates < left;
      cp_async4(sB + e, on ? B[j] : a.B, on ? 4 : 0);
      if (WITH_C) cp_async4(sC + e, on ? C[j] : a.C, on ? 4 : 0);
      B[j] += B_step, C[j] += C_step;
    }
    left -= TC;
  }
};

template <int NPT> struct Vec;
template <> struct Vec<2> { using T = float2; };
template <> struct Vec<4> { using T = float4; };

// One block's scan of 32 channels [c0, c0 + 32) of sequence b over a.seqlen steps (v4's kernel body; the retired v5's
// passes ran it on one chunk's ScanArgs). END_STATE (v5's pass 1): from a zero state, no C, z or y: the block's end
// state goes to a.state and each channel's sum of dt over the steps to dt_sum[b * d_inner + channel]. POLY: how many of
// a thread's NPT states take exp2_fma instead of ex2.approx. LEAN (generation 11): the copy addresses, zero-fill counts
// and y address carried across chunks (ChunkSources) and the fast softplus / silu above; the recurrence is the same.
template <int NPT, int TC, int STAGES, int POLY, bool END_STATE = false, bool LEAN = false>
__device__ __forceinline__ void scan_v4_block(const ScanArgs& a, bool vec, int64_t b, int64_t c0,
                                              float* dt_sum = nullptr) {
  using P = V4<NPT, TC, STAGES>;
  constexpr int SPLIT = P::SPLIT;
  extern __shared__ float4 smem4[];  // float4: 16-byte aligned
  float* smem = reinterpret_cast<float*>(smem4);
  float2* sTerm = reinterpret_cast<float2*>(smem + STAGES * P::kStageFloats);  // [TC][32] {dt, dt u}
  float* sY = smem + STAGES * P::kStageFloats + 2 * TC * kCh;                    // [TC][SPLIT][kYRow]
  const int tid = threadIdx.x, N = int(a.d_state);
  // The recurrence: channel rc, states s * NPT .. s * NPT + NPT - 1.
  const int rc = tid / SPLIT, s = tid % SPLIT;
  float A2[NPT], h[NPT];
#pragma unroll
  for (int i = 0; i < NPT; ++i) {
    const int n = s * NPT + i;
    const bool on = c0 + rc < a.d_inner && n < N;
    A2[i] = on ? a.A[(c0 + rc) * N + n] * kLog2e : 0.f;
    h[i] = on && !END_STATE && a.state ? a.state[(b * a.d_inner + c0 + rc) * N + n] : 0.f;
  }
  // The items: every item of this thread is in 4-channel group q.
  const int q = tid % kGroups;
  float bias[4], Dc[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int64_t c = c0 + 4 * q + k;
    bias[k] = c < a.d_inner && a.delta_bias ? a.delta_bias[c] : 0.f;
    Dc[k] = c < a.d_inner && a.D ? a.D[c] : 0.f;
  }

  float dt_total = 0.f;  // END_STATE: this channel's sum of dt
  const int64_t chunks = (a.seqlen + TC - 1) / TC;
  // LEAN: the sources of the next chunk to issue; the y row piece of this thread's (first) item and its live channels
  ChunkSources<NPT, TC, STAGES, !END_STATE> src;
  float* y_out = nullptr;
  int y_live = 0;
  bool dt_chan[4];  // LEAN: channel c0 + 4 q + kk inside d_inner (dt past it is 0)
  if constexpr (LEAN) {
    src.init(a, b, c0);
    const int64_t c = c0 + 4 * q, ch = a.d_inner - c;
    y_live = int(ch < 0 ? 0 : ch > 4 ? 4 : ch);
    if constexpr (!END_STATE) y_out = a.y + b * a.y_b + (tid / kGroups) * a.y_t + c;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) dt_chan[kk] = kk < y_live;
  }
#pragma unroll
  for (int k = 0; k < STAGES - 1; ++k) {
    if constexpr (LEAN) {
      if (k < chunks) src.issue(a, vec, smem + k * P::kStageFloats);
    } else {
      if (k < chunks) issue_chunk<NPT, TC, STAGES, !END_STATE>(a, vec, b, c0, int64_t(k) * TC, smem + k * P::kStageFloats);
    }
    cp_async_commit();  // one group per chunk slot, empty ones too: the wait below counts groups
  }
  for (int64_t k = 0; k < chunks; ++k) {  // (a 32-bit index measured 16 PTX instructions more per chunk)
    const int64_t t0 = k * TC;
    const float* st = smem + (k % STAGES) * P::kStageFloats;
    const float *su = st, *sd = st + TC * kCh, *sz = st + 2 * TC * kCh;
    const float *sB = st + 3 * TC * kCh, *sC = sB + TC * kStates;
    cp_async_wait<STAGES - 2>();  // this thread's copies of chunk k have landed (the thread reads only those next)
#pragma unroll
    for (int j = 0; j < P::kItemIters; ++j) {
      const int g = tid + j * P::kThreads;
      if (P::kItems % P::kThreads != 0 && g >= P::kItems) break;
      const int tt = g / kGroups, o = tt * kCh + 4 * q;
      const float4 u4 = *reinterpret_cast<const float4*>(su + o), d4 = *reinterpret_cast<const float4*>(sd + o);
      const float u[4] = {u4.x, u4.y, u4.z, u4.w}, dl[4] = {d4.x, d4.y, d4.z, d4.w};
      float term[8];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        float dt = dl[kk] + bias[kk];
        if constexpr (LEAN) {
          if (a.softplus) dt = softplus_lean(dt);
          dt = t0 + tt < a.seqlen && dt_chan[kk] ? dt : 0.f;
        } else {
          if (a.softplus) dt = softplus_f(dt);
          dt = t0 + tt < a.seqlen && c0 + 4 * q + kk < a.d_inner ? dt : 0.f;  // past the end: h unchanged
        }
        term[2 * kk] = dt;
        term[2 * kk + 1] = dt * u[kk];
      }
      float4* dst = reinterpret_cast<float4*>(sTerm + o);
      dst[0] = make_float4(term[0], term[1], term[2], term[3]);
      dst[1] = make_float4(term[4], term[5], term[6], term[7]);
    }
    __syncthreads();  // chunk k's terms and B/C (every thread waited for its copies) are visible; chunk k-1 is done
    if (k + STAGES - 1 < chunks) {  // into the stage chunk k-1 used
      if constexpr (LEAN)
        src.issue(a, vec, smem + ((k + STAGES - 1) % STAGES) * P::kStageFloats);
      else
        issue_chunk<NPT, TC, STAGES, !END_STATE>(a, vec, b, c0, (k + STAGES - 1) * TC,
                                                 smem + ((k + STAGES - 1) % STAGES) * P::kStageFloats);
    }
    cp_async_commit();
#pragma unroll
    for (int tt = 0; tt < TC; ++tt) {
      const float2 term = sTerm[tt * kCh + rc];
      const typename Vec<NPT>::T bv = *reinterpret_cast<const typename Vec<NPT>::T*>(sB + tt * kStates + s * NPT);
      const float* Bn = reinterpret_cast<const float*>(&bv);
      if constexpr (END_STATE) {
        dt_total += term.x;
#pragma unroll
        for (int i = 0; i < NPT; ++i)
          h[i] = (i < POLY ? exp2_fma(term.x * A2[i]) : ex2_approx(term.x * A2[i])) * h[i] + term.y * Bn[i];
        continue;
      }
      const typename Vec<NPT>::T cv = *reinterpret_cast<const typename Vec<NPT>::T*>(sC + tt * kStates + s * NPT);
      const float* Cn = reinterpret_cast<const float*>(&cv);
      float acc = 0.f;
#pragma unroll
      for (int i = 0; i < NPT; ++i) {
        const float decay = i < POLY ? exp2_fma(term.x * A2[i]) : ex2_approx(term.x * A2[i]);
        h[i] = decay * h[i] + term.y * Bn[i];
        acc += Cn[i] * h[i];
      }
      sY[(tt * SPLIT + s) * P::kYRow + rc] = acc;
    }
    __syncthreads();  // the partial sums are complete (and, for END_STATE, this chunk's terms are read)
    if constexpr (!END_STATE) {  // the outputs
#pragma unroll
      for (int j = 0; j < P::kItemIters; ++j) {
        const int g = tid + j * P::kThreads;
        if (P::kItems % P::kThreads != 0 && g >= P::kItems) break;
        const int tt = g / kGroups, o = tt * kCh + 4 * q;
        const int64_t t = t0 + tt;
        if (t >= a.seqlen) continue;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        if constexpr (LEAN) acc = *reinterpret_cast<const float4*>(sY + tt * SPLIT * P::kYRow + 4 * q);  // not 0 + x
#pragma unroll
        for (int p = LEAN ? 1 : 0; p < SPLIT; ++p) {
          const float4 v = *reinterpret_cast<const float4*>(sY + (tt * SPLIT + p) * P::kYRow + 4 * q);
          acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
        }
        const float4 u4 = *reinterpret_cast<const float4*>(su + o);
        const float u[4] = {u4.x, u4.y, u4.z, u4.w};
        float y[4] = {acc.x, acc.y, acc.z, acc.w};
        float zz[4] = {0.f, 0.f, 0.f, 0.f};
        if (a.z) {
          const float4 z4 = *reinterpret_cast<const float4*>(sz + o);
          zz[0] = z4.x, zz[1] = z4.y, zz[2] = z4.z, zz[3] = z4.w;
        }
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          y[kk] += Dc[kk] * u[kk];
          if constexpr (LEAN) {
            if (a.z) y[kk] *= silu_lean(zz[kk]);
          } else {
            if (a.z) y[kk] *= zz[kk] / (1.f + __expf(-zz[kk]));
          }
        }
        if constexpr (LEAN) {
          static_assert(!LEAN || P::kItemIters == 1, "LEAN carries one item's y address");
          if (vec && y_live == 4) {
            *reinterpret_cast<float4*>(y_out) = make_float4(y[0], y[1], y[2], y[3]);
          } else {
#pragma unroll
            for (int kk = 0; kk < 4; ++kk)
              if (kk < y_live) y_out[kk] = y[kk];
          }
          continue;
        }
        const int64_t c = c0 + 4 * q;
        float* out = a.y + b * a.y_b + t * a.y_t + c;
        if (vec && c + 4 <= a.d_inner) {
          *reinterpret_cast<float4*>(out) = make_float4(y[0], y[1], y[2], y[3]);
        } else {
#pragma unroll
          for (int kk = 0; kk < 4; ++kk)
            if (c + kk < a.d_inner) out[kk] = y[kk];
        }
      }
      if constexpr (LEAN) y_out += TC * a.y_t;
    }
  }
  cp_async_wait<0>();  // no copy outlives the block (the trailing groups are empty)
#pragma unroll
  for (int i = 0; i < NPT; ++i) {
    const int n = s * NPT + i;
    if (a.state && c0 + rc < a.d_inner && n < N) a.state[(b * a.d_inner + c0 + rc) * N + n] = h[i];
  }
  if (END_STATE && s == 0 && c0 + rc < a.d_inner) dt_sum[b * a.d_inner + c0 + rc] = dt_total;
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// 16-byte copies and stores need every row piece 16-byte aligned: the pointers and the batch / time strides.
inline bool vector_ok(const ScanArgs& a) {
  bool ok = aligned16(a.u) && aligned16(a.delta) && aligned16(a.y) && (!a.z || aligned16(a.z));
  for (int64_t st : {a.u_b, a.u_t, a.dl_b, a.dl_t, a.y_b, a.y_t}) ok = ok && st % 4 == 0;
  if (a.z) ok = ok && a.z_b % 4 == 0 && a.z_t % 4 == 0;
  return ok;
}

}  // namespace flashkit::kernels::scan_v4_detail
