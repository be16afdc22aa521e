// The library's decode attention (seqlen_q <= 16 against a long KV cache): the `mma` member of the decode family
// (plan.hpp), v7 of docs/worklog/attention-cuda.md, and the `one_warp` member's launch (flash_fwd.cuh's forward with
// one warp per CTA, for devices whose shared memory cannot hold this kernel's CTA). Included by the
// per-(dtype, head_dim) instantiation files only, after flash_fwd.cuh.
//
// Why a kernel of its own: decode is bound by HBM bandwidth (each K/V byte is used by group * seqlen_q <= 16 rows),
// so what matters is bytes in flight per SM and the fixed cost per call. v1 ran the prefill kernel with one warp
// per CTA: at batch 1 the few (sequence, KV head) tiles were cut into many one-warp CTAs, each with a 2-stage
// pipeline of 32-64 keys (3-6 CTAs per SM: ~16-48 KB in flight), then a second launch merged the splits.
//
// Design (one CTA per (split, m-tile, KV head, sequence); DecodeCfg<D> in tiles.hpp gives the shape):
//  - the CTA holds one m16 tile of packed query rows: row r = head-in-group * nq + query (GQA/MQA packing as in
//    v1); group * nq > 16 takes several m-tiles in grid.x (K/V re-reads across them hit L2: they run together);
//  - its key range (16-key blocks, the visible range of the tile's rows cut into num_splits balanced parts) is
//    dealt out round-robin to NW warps (8 for d64/d128, 4 for d256). Every warp runs its OWN cp.async pipeline
//    over its blocks (ST stages of 16 keys of K and V in its own shared memory; no CTA barrier in the main loop)
//    and its own online softmax (mma.sync m16n8k16 for QK^T and PV, log2 units with the scale folded in, exactly
//    as flash_fwd.cuh). One CTA per SM (130-200 KB of shared memory) keeps NW * (ST-1) stages = 96-128 KB per
//    SM in flight. The narrow CTA (DecodePlan::narrow, head_dim <= 128: 4 warps, 66-100 KB, 3 or 2 an SM, the same
//    stages per SM) lets a batch-1 grid fill every SM in one wave (v28: 264 CTAs of 33 splits at 8 KV heads);
//  - at the end the warps meet in shared memory (an LSE-weighted merge: per row M = max_w m_w, each warp's O
//    scaled by 2^(m_w - M), L = sum_w l_w 2^(m_w - M)); one split writes o/lse directly, several write f32
//    partials (same layout as v1: [split, row, Dpad] and [split, row]);
//  - split merge (merge.cuh): launch_split_combine runs after the kernel (PDL), spread over rows and columns; or
//    (p.decode_counters, DecodeMergeKind::counter, v31) the last CTA of each tile to write its partial, found with an
//    arrival counter, merges the tile's partials in the kernel: one launch a call (v10's version of it lost to the
//    combine launch, before PDL and the L2 prefetch);
//  - cluster split merge (sm_90, p.cluster = num_splits <= kMaxDecodeCluster, Tuning::decode_combine = cluster): the
//    S splits of one (m-tile, KV head, sequence) are one thread-block cluster along grid.x (x = m-tile * S + split,
//    rank = split). Each CTA keeps its partial (per row the natural-log LSE and the normalized O, f32) in its own
//    shared memory; after a cluster barrier every rank merges a slice of the tile's (row, 4 columns) items over the
//    S ranks in rank order through distributed shared memory and writes o/lse; a second barrier keeps each CTA's
//    shared memory alive until all ranks have read it (merge::merge_cluster_item). No HBM partials. Every CTA of a cluster
//    reaches both barriers: the only early exit (a tile past the sequence's rows) depends on the m-tile and the
//    sequence alone, so it is taken by the whole cluster or by none of it.
//
// Index walk-through (checked by hand): nk = 100, nq = 1, causal, window_left 30, 3 splits, one row group.
// lo(0) = 0 + (100 - 1) - 30 = 69, hi(0) = 0 + 99 + 0 + 1 = 100: klo 69, khi 100 -> blocks nb0 = 69/16 = 4,
// nb1 = ceil(100/16) = 7, total 3. Split s takes [4 + 3s/3, 4 + 3(s+1)/3): block 4 (keys 64-79), 5 (80-95),
// 6 (96-111). In each CTA warp 0 gets its block (n = b0 + warp + i*NW), warps 1-7 none (their m = -inf, l = 0
// drop out of the merge with weight 0). Block 4: n0 = 64 < lo_max = 69 -> masked: keys 64-68 get -inf, 69-79
// count. Block 6: n0 + 16 > hi_min = 100 -> masked: keys 100-111 (zero-filled, j >= nk) get -inf. Keys seen:
// 69-79 | 80-95 | 96-99 = [69, 100). With total = 2 and 3 splits: [0,0), [0,1), [1,2): split 0 is empty and
// writes lse -inf and o 0, which the merge weighs 0. A tile whose rows see no key at all: every split is empty,
// M = -inf everywhere -> o = 0, lse = -inf.
#pragma once
#include <cooperative_groups.h>

#include <array>
#include <cmath>

#include "core/cuda_check.hpp"
#include "core/cuda_device.hpp"
#include "core/pdl.cuh"
#include "flashkit/error.hpp"
#include "kernels/cuda/flash_api.hpp"
#include "kernels/cuda/flash_common.cuh"
#include "kernels/cuda/launch.hpp"
#include "kernels/cuda/flash_fwd.cuh"
#include "kernels/cuda/decode/merge.cuh"

namespace flashkit::cuda {



// NW: warps a CTA (DecodeCfg<D>::kWarps, one CTA an SM; or kNarrowWarps, the narrow CTA: 2 an SM at d128, 3 at d64,
// which the plan's slots assume and the launch bound holds the registers to: 180 / 160 used, nvcc 13).
template <typename T, int D, int NW = DecodeCfg<D>::kWarps>
__global__ void __launch_bounds__(NW * 32, NW == DecodeCfg<D>::kWarps ? 1 : (D == 64 ? 3 : 2))
    flash_decode_kernel(const FwdParams p) {
  using Op = MmaOp<T>;
  constexpr int ST = DecodeCfg<D>::kStages, NT = NW * 32;
  constexpr size_t kSmemBytes = DecodeCfg<D>::smem(NW);
  constexpr int CH = D / 8, DTILE = D / 8, DP = D + 8;  // DP: f32 row pitch of the merge buffer (no bank conflicts)
  constexpr bool QREG = D <= 128;                         // Q fragments in registers (d256: re-read from smem)
  constexpr uint32_t kTile = 16 * D * 2;                  // a 16-row tile of Q, K or V
  constexpr uint32_t kStage = 2 * kTile;                  // K then V
  static_assert(kSmemBytes == size_t(kTile) * (1 + NW * ST * 2), "the layout DecodeCfg<D> sizes");
  static_assert(size_t(NW * 32 + NW * 16 * DP) * 4 <= kSmemBytes, "warp merge buffer must fit");
  static_assert(CH <= 32 && 32 % CH == 0, "a warp copies whole rows");
  static_assert(size_t(NW * 32 + NW * 16 * DP + 16 * D + 16) * 4 <= kSmemBytes, "cluster partial must fit");
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sQ = smem_u32(smem);

  // Launched with PDL (p.pdl): wait for the previous grid (it may write Q or the cache), then let the split
  // combine start launching; it waits for this whole grid before it reads a partial. With p.decode_prefetch the
  // wait comes later, after this warp's first blocks of K and V are asked into L2 (below).
  if (!p.decode_prefetch) {
    pdl_wait();
    pdl_trigger();
  }
  const kernels::AttentionFwdArgs& a = p.a;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int S = p.num_splits;
  const bool clustered = p.cluster > 1;  // uniform over the grid; then p.cluster == S (the host checks)
  const int mtiles = int(gridDim.x) / S;
  // Without clusters the m-tiles of a split sit side by side; with them the S splits of an m-tile (one cluster).
  const int split = clustered ? int(blockIdx.x) % S : int(blockIdx.x) / mtiles;
  const int mt = clustered ? int(blockIdx.x) / S : int(blockIdx.x) % mtiles;
  const kernels::SeqRange sr = kernels::seq_range(a.shape, blockIdx.z);
  const int64_t nq = sr.nq, nk = sr.nk;
  const int group = int(a.shape.heads / a.shape.kv_heads);
  const int64_t rows = int64_t(group) * nq;
  const int64_t m0 = int64_t(mt) * 16;
  // Uniform over the tile's splits: a cluster (the splits of one m-tile of one sequence) exits whole, so no CTA
  // waits at a cluster barrier for one that left.
  if (m0 >= rows) return;
  const int kvh = blockIdx.y;
  const int nrows = int(rows - m0 < 16 ? rows - m0 : 16);
  const int dreal = int(a.shape.head_dim);
  // Tile row r -> query head h and query index i (packed GQA rows). In 32 bits: decode has nq <= 16 queries a
  // sequence, so the packed rows (group * nq) fit an int; one query (every batch-1 step) needs no division at all.
  // (int64 division is a software routine on the GPU; these run before the first load is issued.)
  const int nq32 = int(nq), m032 = int(m0);
  auto row_hi = [&](int r, int64_t& h, int64_t& i) {
    const int gr = m032 + r;
    const int hq = nq32 == 1 ? gr : gr / nq32;
    h = int64_t(kvh) * group + hq;
    i = gr - hq * nq32;
  };

  // Key blocks of the tile: the union of its rows' visible ranges (lo, hi are non-decreasing in i).
  int64_t imin, imax;
  if (nq32 == 1) {
    imin = imax = 0;
  } else if (m032 / nq32 != (m032 + nrows - 1) / nq32) {
    imin = 0;
    imax = nq - 1;
  } else {
    imin = m032 % nq32;
    imax = (m032 + nrows - 1) % nq32;
  }
  const int64_t klo = a.mask.lo(imin, nq, nk), khi = a.mask.hi(imax, nq, nk);
  const int64_t lo_max = a.mask.lo(imax, nq, nk), hi_min = a.mask.hi(imin, nq, nk);
  int64_t nb0 = 0, nb1 = 0;
  if (khi > klo) {
    nb0 = klo / 16;
    nb1 = (khi + 15) / 16;
  }
  // This split's blocks: balanced parts (sizes differ by at most one block; some are empty when blocks < splits).
  const int64_t total = nb1 - nb0;
  const int64_t b0 = nb0 + total * split / S, b1 = nb0 + total * (split + 1) / S;
  // This warp's blocks: b0 + warp, b0 + warp + NW, ...
  const int nblk = b1 - b0 > warp ? int((b1 - b0 - warp + NW - 1) / NW) : 0;
  const int64_t wb0 = b0 + warp;

  // Visible key range [lo, hi) of the two rows (g, g + 8) this thread holds in the accumulator layout (32-bit:
  // one sequence's length fits; padding rows see every key, harmlessly).
  int my_lo[2], my_hi[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    my_lo[r] = 0;
    my_hi[r] = int(nk);
    if (g + 8 * r < nrows) {
      int64_t h, i;
      row_hi(g + 8 * r, h, i);
      my_lo[r] = int(a.mask.lo(i, nq, nk));
      my_hi[r] = int(a.mask.hi(i, nq, nk));
    }
  }

  const T* qbase = static_cast<const T*>(a.q.data) + sr.bslot * a.q.stride_b;
  const T* kbase = static_cast<const T*>(a.k.data) + sr.bslot * a.k.stride_b + kvh * a.k.stride_h + sr.k0 * a.k.stride_s;
  const T* vbase = static_cast<const T*>(a.v.data) + sr.bslot * a.v.stride_b + kvh * a.v.stride_h + sr.k0 * a.v.stride_s;

  // This warp's stages, and its share of a 16-key block copy: lane copies chunk lc of rows lr0, lr0 + RS, ...
  const uint32_t sW = sQ + kTile + uint32_t(warp) * ST * kStage;
  constexpr int RS = 32 / CH;  // rows per step of the warp: d64 4, d128 2, d256 1
  const int lc = lane % CH, lr0 = lane / CH;
  const bool cok = lc * 8 < dreal;
  const int64_t kstep = RS * a.k.stride_s, vstep = RS * a.v.stride_s;
  auto load_kv = [&](int64_t n, int st) {
    int64_t j = n * 16 + lr0;
    const T* kp = kbase + j * a.k.stride_s + lc * 8;
    const T* vp = vbase + j * a.v.stride_s + lc * 8;
    const uint32_t dk = sW + uint32_t(st) * kStage, dv = dk + kTile;
#pragma unroll
    for (int k = 0; k < 16 / RS; ++k) {
      const int r = lr0 + k * RS;
      const bool ok = cok && j < nk;
      cp_async16(dk + swz<D>(r, lc), ok ? kp : kbase, ok);
      cp_async16(dv + swz<D>(r, lc), ok ? vp : vbase, ok);
      j += RS;
      kp += kstep;
      vp += vstep;
    }
  };
  // p.decode_prefetch (PDL, fixed-length batches: everything above is arithmetic on the launch's parameters): before
  // waiting for the previous grid, ask this warp's first ST-1 blocks of K and V into L2, one prefetch per 128-byte
  // line, so their HBM round trip overlaps the previous grid's tail and its memory flush. Safe whatever that grid
  // writes: L2 is the point of coherence, a prefetch fills neither L1 nor shared memory, and every load below comes
  // after the wait.
  if (p.decode_prefetch) {
    if ((lc & 7) == 0 && cok) {
#pragma unroll
      for (int s = 0; s < ST - 1; ++s) {
        if (s >= nblk) break;
        int64_t j = (wb0 + int64_t(s) * NW) * 16 + lr0;
#pragma unroll
        for (int k = 0; k < 16 / RS; ++k, j += RS) {
          if (j >= nk) break;
          asm volatile("prefetch.global.L2 [%0];" ::"l"(kbase + j * a.k.stride_s + lc * 8));
          asm volatile("prefetch.global.L2 [%0];" ::"l"(vbase + j * a.v.stride_s + lc * 8));
        }
      }
    }
    pdl_wait();
    pdl_trigger();
  }
  // Q tile (rows past nrows and columns past head_dim zero-filled), one cp.async group of its own.
  for (int idx = tid; idx < 16 * CH; idx += NT) {
    const int r = idx / CH, c = idx % CH;
    const bool ok = r < nrows && c * 8 < dreal;
    const T* src = qbase;
    if (ok) {
      int64_t h, i;
      row_hi(r, h, i);
      src = qbase + (sr.q0 + i) * a.q.stride_s + h * a.q.stride_h + c * 8;
    }
    cp_async16(sQ + swz<D>(r, c), src, ok);
  }
  cp_async_commit();
  // Prologue: ST-1 blocks in flight per warp (a group is committed even when empty, so counts stay uniform).
#pragma unroll
  for (int s = 0; s < ST - 1; ++s) {
    if (s < nblk) load_kv(wb0 + int64_t(s) * NW, s);
    cp_async_commit();
  }
  cp_async_wait<ST - 1>();  // the Q group (the oldest) has landed for this thread ...
  __syncthreads();          // ... and for every thread

  uint32_t qf[QREG ? D / 16 : 1][4];
  if constexpr (QREG) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      ldsm_x4(sQ + swz<D>(lane & 15, kk * 2 + (lane >> 4)), qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
  }

  float o[DTILE][4];
#pragma unroll
  for (int d = 0; d < DTILE; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
  float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};

  const bool use_cap = a.softcap > 0.f;
  const float sl2 = a.scale * kLog2e;
  const float cap_pre = use_cap ? a.scale / a.softcap : 0.f;
  const float cap_post = a.softcap * kLog2e;

  int st = 0;  // stage of block i (i % ST)
  for (int i = 0; i < nblk; ++i) {
    // Groups committed so far: Q, ST-1 prologue groups, one per earlier iteration; at most ST-2 pending means
    // block i has landed (this thread's copies); __syncwarp makes every lane's copies visible to the warp and
    // orders iteration i-1's reads of the stage refilled below before the refill.
    cp_async_wait<ST - 2>();
    __syncwarp();
    {
      const int nx = i + ST - 1;
      if (nx < nblk) load_kv(wb0 + int64_t(nx) * NW, st == 0 ? ST - 1 : st - 1);  // (i + ST - 1) % ST
      cp_async_commit();
    }
    const uint32_t sK = sW + uint32_t(st) * kStage, sV = sK + kTile;
    const int64_t n0 = (wb0 + int64_t(i) * NW) * 16;

    // S = Q K^T: 16 rows x 16 keys.
    float s[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t af[4];
      if constexpr (QREG) {
        af[0] = qf[kk][0];
        af[1] = qf[kk][1];
        af[2] = qf[kk][2];
        af[3] = qf[kk][3];
      } else {
        ldsm_x4(sQ + swz<D>(lane & 15, kk * 2 + (lane >> 4)), af[0], af[1], af[2], af[3]);
      }
      uint32_t b0, b1, b2, b3;
      ldsm_x4(sK + swz<D>((lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1)), b0, b1, b2, b3);
      Op::run(s[0], af, b0, b1);
      Op::run(s[1], af, b2, b3);
    }
    // Scores to log2 units (scale, softcap), mask, online softmax (as flash_fwd.cuh, one 16-key tile).
    const bool full = n0 >= lo_max && n0 + 16 <= hi_min;
    if (use_cap || !full) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = s[nt][e];
          x = use_cap ? cap_post * fast_tanh(x * cap_pre) : x * sl2;
          const int j = int(n0) + nt * 8 + 2 * t4 + (e & 1);
          const int r = e >> 1;
          if (!full && (j < my_lo[r] || j >= my_hi[r])) x = -INFINITY;
          s[nt][e] = x;
        }
    }
    const float fold = (use_cap || !full) ? 1.f : sl2;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = fmaxf(fmaxf(s[0][2 * r], s[0][2 * r + 1]), fmaxf(s[1][2 * r], s[1][2 * r + 1]));
      mx = quad_max(mx) * fold;
      const float mnew = fmaxf(mrow[r], mx);
      const float muse = mnew == -INFINITY ? 0.f : mnew;
      const float alpha = fast_exp2(mrow[r] - muse);
      mrow[r] = mnew;
#pragma unroll
      for (int d = 0; d < DTILE; ++d) {
        o[d][2 * r] *= alpha;
        o[d][2 * r + 1] *= alpha;
      }
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const float p0 = fast_exp2(fmaf(s[nt][2 * r], fold, -muse));
        const float p1 = fast_exp2(fmaf(s[nt][2 * r + 1], fold, -muse));
        s[nt][2 * r] = p0;
        s[nt][2 * r + 1] = p1;
        sum += p0 + p1;
      }
      lrow[r] = lrow[r] * alpha + sum;
    }
    // O += P V (P: the 16 x 16 A fragment straight from the score registers).
    uint32_t pa[4];
    pa[0] = Op::pack(s[0][0], s[0][1]);
    pa[1] = Op::pack(s[0][2], s[0][3]);
    pa[2] = Op::pack(s[1][0], s[1][1]);
    pa[3] = Op::pack(s[1][2], s[1][3]);
#pragma unroll
    for (int dt2 = 0; dt2 < D / 16; ++dt2) {
      uint32_t b0, b1, b2, b3;
      ldsm_x4_t(sV + swz<D>((lane & 7) + (((lane >> 3) & 1) << 3), dt2 * 2 + (lane >> 4)), b0, b1, b2, b3);
      Op::run(o[2 * dt2], pa, b0, b1);
      Op::run(o[2 * dt2 + 1], pa, b2, b3);
    }
    st = st == ST - 1 ? 0 : st + 1;
  }

  // ---- merge the warps (shared memory, reusing the stages once every copy has landed and every warp is done).
  cp_async_wait<0>();
  __syncthreads();
  float* ml = reinterpret_cast<float*>(smem);  // [NW][16][2]: m (log2 units, scaled), l
  float* ob = ml + NW * 32;                    // [NW][16][DP]: each warp's O scaled to the common max
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_sum(lrow[r]);
    if (t4 == 0) {
      ml[(warp * 16 + g + 8 * r) * 2] = mrow[r];
      ml[(warp * 16 + g + 8 * r) * 2 + 1] = l;
    }
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = g + 8 * r;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < NW; ++w) M = fmaxf(M, ml[(w * 16 + row) * 2]);
    const float sc = M == -INFINITY ? 0.f : fast_exp2(mrow[r] - M);
    float* dst = ob + (warp * 16 + row) * DP + 2 * t4;
#pragma unroll
    for (int d = 0; d < DTILE; ++d) *reinterpret_cast<float2*>(dst + d * 8) = make_float2(o[d][2 * r] * sc, o[d][2 * r + 1] * sc);
  }
  __syncthreads();

  // ---- this CTA's result: o/lse (one split), the f32 partial of this split in global memory, or (clusters) in
  // this CTA's shared memory past the warp merge buffer: cpart [16][D] (normalized O), clse [16] (natural log).
  // Items: (row, 8 columns).
  T* obase = static_cast<T*>(a.o.data) + sr.bslot * a.o.stride_b;
  float* cpart = ob + NW * 16 * DP;
  float* clse = cpart + 16 * D;
  const int CHR = dreal / 8;  // head_dim is a multiple of 8
  for (int idx = tid; idx < nrows * CHR; idx += NT) {
    const int row = idx / CHR, c = idx % CHR;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < NW; ++w) M = fmaxf(M, ml[(w * 16 + row) * 2]);
    float L = 0.f;
    float acc[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.f;
    if (M != -INFINITY) {
#pragma unroll
      for (int w = 0; w < NW; ++w) {
        L += ml[(w * 16 + row) * 2 + 1] * fast_exp2(ml[(w * 16 + row) * 2] - M);
        const float4 x0 = *reinterpret_cast<const float4*>(ob + (w * 16 + row) * DP + c * 8);
        const float4 x1 = *reinterpret_cast<const float4*>(ob + (w * 16 + row) * DP + c * 8 + 4);
        acc[0] += x0.x, acc[1] += x0.y, acc[2] += x0.z, acc[3] += x0.w;
        acc[4] += x1.x, acc[5] += x1.y, acc[6] += x1.z, acc[7] += x1.w;
      }
    } else {
#pragma unroll
      for (int w = 0; w < NW; ++w) L += ml[(w * 16 + row) * 2 + 1];  // 0, or NaN: a warp saw only NaN scores
    }
    const float inv = L > 0.f ? 1.f / L : L == 0.f ? 0.f : kNaN;
    const float lse = row_lse(M, L);
    int64_t h, i;
    row_hi(row, h, i);
    const int64_t ridx = a.lse_index(sr, h, i);
    if (S == 1) {
      uint4 v;
      v.x = Op::pack(acc[0] * inv, acc[1] * inv);
      v.y = Op::pack(acc[2] * inv, acc[3] * inv);
      v.z = Op::pack(acc[4] * inv, acc[5] * inv);
      v.w = Op::pack(acc[6] * inv, acc[7] * inv);
      *reinterpret_cast<uint4*>(obase + (sr.q0 + i) * a.o.stride_s + h * a.o.stride_h + c * 8) = v;
      if (c == 0) a.lse[ridx] = lse;
    } else if (clustered) {
      float* op = cpart + row * D + c * 8;
      *reinterpret_cast<float4*>(op) = make_float4(acc[0] * inv, acc[1] * inv, acc[2] * inv, acc[3] * inv);
      *reinterpret_cast<float4*>(op + 4) = make_float4(acc[4] * inv, acc[5] * inv, acc[6] * inv, acc[7] * inv);
      if (c == 0) clse[row] = lse;
    } else {
      float* op = p.o_part + (int64_t(split) * p.num_rows + ridx) * D + c * 8;
      *reinterpret_cast<float4*>(op) = make_float4(acc[0] * inv, acc[1] * inv, acc[2] * inv, acc[3] * inv);
      *reinterpret_cast<float4*>(op + 4) = make_float4(acc[4] * inv, acc[5] * inv, acc[6] * inv, acc[7] * inv);
      if (c == 0) p.lse_part[int64_t(split) * p.num_rows + ridx] = lse;
    }
  }
  if (S == 1) return;
  if (clustered) {
    // ---- cluster split merge (sm_90). Only whole clusters get here (see the early exit above).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    const cg::cluster_group cl = cg::this_cluster();
    cl.sync();  // every rank's cpart/clse (written above by its threads) is visible to the whole cluster
    const int CG = dreal / 4;
    // Items (row, 4 columns; at most 16 x 64) dealt out round-robin over the ranks (item idx to rank idx % S, its
    // thread idx / S % NT), so every rank takes ~1/S of them (4 rows of d128: 8 items per rank with S = 16) and the
    // cluster's DSMEM traffic is spread over its SMs. All 2S remote loads of an item are issued before any is used.
    for (int idx = tid * S + split; idx < nrows * CG; idx += NT * S) {
      const int row = idx / CG, c4 = idx % CG;
      float4 acc;
      const float lse = merge::merge_cluster_item<kMaxDecodeCluster>(merge::smem_addr(clse + row),
                                                                      merge::smem_addr(cpart + row * D + c4 * 4), S, acc);
      int64_t h, i;
      row_hi(row, h, i);
      uint2 v;
      v.x = Op::pack(acc.x, acc.y);
      v.y = Op::pack(acc.z, acc.w);
      *reinterpret_cast<uint2*>(obase + (sr.q0 + i) * a.o.stride_s + h * a.o.stride_h + c4 * 4) = v;
      if (c4 == 0) a.lse[a.lse_index(sr, h, i)] = lse;
    }
    cl.sync();  // no CTA leaves (and frees its shared memory) before every rank has read it
#else
    __trap();  // the host never launches clusters with code before sm_90 (decode_cluster_residency is all 0)
#endif
    return;
  }
  if (p.decode_counters == nullptr) return;  // the combine launch merges
  // ---- counter merge (v31): the last CTA of the tile to write its partial merges all S (<= kDecodeCounterMaxSplits)
  // in the kernel. Every split of a tile gets here (the early exit above is uniform over the tile).
  if (!merge::arrive_last(p.decode_counters + (int64_t(blockIdx.z) * gridDim.y + kvh) * mtiles + mt, S)) return;
  float* wsm = reinterpret_cast<float*>(smem);  // [16][kDecodeCounterMaxSplits] split weights (the stages are free)
  float* rsum = wsm + 16 * kDecodeCounterMaxSplits;  // [16] the weights' sum per row
  float* rmax = rsum + 16;                           // [16] the largest lse per row
  // Items (row, 4 columns), thread tid takes tid, tid + NT, ...; its partials in chunks of at most KC loads in
  // flight. The first chunk of the first item is issued before the weights (it does not depend on them), so its L2
  // round trip overlaps the lse round trip.
  constexpr int KC = 17;
  const int C4 = dreal / 4, nitems = nrows * C4;
  const int nch = (S + KC - 1) / KC, cs = (S + nch - 1) / nch;  // balanced chunks (33 splits: 17 + 16)
  const int64_t pstride = p.num_rows * int64_t(D);
  float4 x[KC];
  auto issue = [&](int item, int s0) {
    const int row = item / C4, c4 = item % C4;
    int64_t h, i;
    row_hi(row, h, i);
    const float* src = p.o_part + (int64_t(s0) * p.num_rows + a.lse_index(sr, h, i)) * D + c4 * 4;
#pragma unroll
    for (int j = 0; j < KC; ++j)
      if (j < cs && s0 + j < S) x[j] = __ldcg(reinterpret_cast<const float4*>(src + j * pstride));
  };
  if (tid < nitems) issue(tid, 0);
  // The weights, a warp per row: e^(lse_s - M) as merge::split_weights (an empty split weighs 0, a NaN lse makes the
  // row NaN); S <= 64, two splits a lane.
  for (int row = warp; row < nrows; row += NW) {
    int64_t h, i;
    row_hi(row, h, i);
    const float* l = p.lse_part + a.lse_index(sr, h, i);
    const float l0 = lane < S ? __ldcg(l + int64_t(lane) * p.num_rows) : -INFINITY;
    const float l1 = lane + 32 < S ? __ldcg(l + int64_t(lane + 32) * p.num_rows) : -INFINITY;
    float m = fmaxf(l0, l1);
#pragma unroll
    for (int o2 = 16; o2 > 0; o2 >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o2));
    const float w0 = m == -INFINITY ? (isnan(l0) ? l0 : 0.f) : __expf(l0 - m);
    const float w1 = m == -INFINITY ? (isnan(l1) ? l1 : 0.f) : __expf(l1 - m);
    float sum = w0 + w1;
#pragma unroll
    for (int o2 = 16; o2 > 0; o2 >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o2);
    if (lane < S) wsm[row * kDecodeCounterMaxSplits + lane] = w0;
    if (lane + 32 < S) wsm[row * kDecodeCounterMaxSplits + lane + 32] = w1;
    if (lane == 0) rsum[row] = sum, rmax[row] = m;
  }
  __syncthreads();
  for (int item = tid; item < nitems; item += NT) {
    const int row = item / C4, c4 = item % C4;
    const float* w = wsm + row * kDecodeCounterMaxSplits;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = 0; s0 < S; s0 += cs) {
      if (item != tid || s0 != 0) issue(item, s0);
#pragma unroll
      for (int j = 0; j < KC; ++j)
        if (j < cs && s0 + j < S) merge::axpy(w[s0 + j], x[j], acc);
    }
    const float2 m_sum = make_float2(rmax[row], rsum[row]);
    int64_t h, i;
    row_hi(row, h, i);
    if (m_sum.x == -INFINITY && m_sum.y == 0.f) acc = make_float4(0.f, 0.f, 0.f, 0.f);  // every split empty
    else acc = make_float4(acc.x / m_sum.y, acc.y / m_sum.y, acc.z / m_sum.y, acc.w / m_sum.y);  // NaN sum: NaN row
    uint2 v;
    v.x = Op::pack(acc.x, acc.y);
    v.y = Op::pack(acc.z, acc.w);
    *reinterpret_cast<uint2*>(obase + (sr.q0 + i) * a.o.stride_s + h * a.o.stride_h + c4 * 4) = v;
    if (c4 == 0) a.lse[a.lse_index(sr, h, i)] = merge::merged_lse(m_sum);
  }
}

// For c = 2..kMaxDecodeCluster: how many clusters of c CTAs of flash_decode_kernel<T, D, NW> can be resident at once
// on the current device; all 0 where the cluster merge cannot run (core/cuda_device.hpp). Once per (kernel, device);
// safe to call first inside a graph capture.
template <typename T, int D, int NW>
ClusterResidency decode_cluster_residency() {
  const void* k = reinterpret_cast<const void*>(flash_decode_kernel<T, D, NW>);
  return once_per_kernel_device<ClusterResidency>(
      k, [&](int) { return query_cluster_residency(k, NW * 32, DecodeCfg<D>::smem(NW)); });
}

template <typename T, int D>
void launch_decode_mma(const FwdParams& p, cudaStream_t stream) {
  if constexpr (D <= 128) {
    if (p.decode_narrow) {  // the narrow CTA (plan.hpp DecodePlan::narrow): no clusters, several CTAs an SM
      constexpr int NW = DecodeCfg<D>::kNarrowWarps;
      constexpr size_t smem = DecodeCfg<D>::smem(NW);
      auto kern = flash_decode_kernel<T, D, NW>;
      set_max_dynamic_smem(kern, smem, "cudaFuncSetAttribute(flash decode, narrow)");
      if (p.num_splits < 1 || p.num_splits > kMaxDecodeSplits)
        fail(Status::internal, "flash decode (narrow): bad split count");
      // Clusters as the wide kernel's, sized by the narrow kernel's own residency.
      if (p.cluster > 1 && (p.cluster != p.num_splits || p.cluster > kMaxDecodeCluster ||
                            decode_cluster_residency<T, D, NW>()[p.cluster] < 1))
        fail(Status::internal, "flash decode (narrow): bad cluster size");
      const auto& sh = p.a.shape;
      const int64_t mtiles = (sh.heads / sh.kv_heads * sh.max_seqlen_q + 15) / 16;
      if (mtiles == 0) return;
      dim3 grid(unsigned(mtiles * p.num_splits), unsigned(sh.kv_heads), unsigned(sh.batch));
      check_cuda(launch_ex(kern, grid, dim3(NW * 32), smem, stream, p.pdl, p.cluster > 1 ? unsigned(p.cluster) : 1u, p),
                 p.cluster > 1 ? "flash decode launch (narrow, clusters)" : "flash decode launch (narrow)");
      return;
    }
  }
  constexpr size_t smem = DecodeCfg<D>::kSmem;
  auto kern = flash_decode_kernel<T, D>;
  set_max_dynamic_smem(kern, smem, "cudaFuncSetAttribute(flash decode)");
  if (p.num_splits < 1 || p.num_splits > kMaxDecodeSplits) fail(Status::internal, "flash decode: bad split count");
  const auto& sh = p.a.shape;
  const int64_t mtiles = (sh.heads / sh.kv_heads * sh.max_seqlen_q + 15) / 16;
  if (mtiles == 0) return;
  dim3 grid(unsigned(mtiles * p.num_splits), unsigned(sh.kv_heads), unsigned(sh.batch));
  // The splits of an m-tile as one cluster (grid.x = m-tiles x S, a multiple of the cluster size). The caller
  // picks a size decode_cluster_residency<T, D>() reported resident (which also set the kernel's attributes).
  if (p.cluster > 1 &&
      (p.cluster != p.num_splits || p.cluster > kMaxDecodeCluster || decode_cluster_residency<T, D>()[p.cluster] < 1))
    fail(Status::internal, "flash decode: bad cluster size");
  check_cuda(launch_ex(kern, grid, dim3(DecodeCfg<D>::kWarps * 32), smem, stream, p.pdl,
                       p.cluster > 1 ? unsigned(p.cluster) : 1u, p),
             p.cluster > 1 ? "flash decode launch (clusters)" : "flash decode launch");
}

// Decode entry point of the library op: the plan's member (p.decode_kernel: this file's kernel, or flash_fwd.cuh's
// forward with one warp per CTA and the group packed in its m16 tile, tiles.hpp), with the plan's splits, cluster
// and PDL; the caller (src/ops/attention_cuda.cpp) runs launch_split_combine after it when the plan merges so.
template <typename T, int D>
void launch_flash_decode(const FwdParams& p, cudaStream_t stream) {
  if (p.decode_kernel == DecodeKernel::mma) {
    launch_decode_mma<T, D>(p, stream);
    return;
  }
  constexpr Sm80FwdTile t = sm80_decode_tile(D);
  launch_fwd_cfg<T, D, t.bn, t.warps, t.qreg, t.mt>(p, stream);
}

}  // namespace flashkit::cuda
