// One consumer warpgroup's part of a Hopper forward tile, shared by both sm_90a forward kernels
// (flash_fwd_sm90.cuh: all threads load, one CTA barrier per key tile; flash_fwd_sm90_ws.cuh: a TMA producer and
// mbarriers). A warpgroup owns 64 query rows of the CTA's BM; its O accumulator and online-softmax state live in
// registers, and a key tile is three steps on shared-memory panels (wgmma.cuh layout):
//   issue_qk   S = Q K^T      SS wgmma, Q and K both K-major (issued, not waited for)
//   softmax    S -> P          scale / softcap, mask, online softmax in log2 units; returns O's rescale factor
//   issue_pv   O += P V        RS wgmma, P from registers, V read transposed (MN-major); issued, not waited for
// and store() writes the normalized O rows and their LSE at the end.
// Accumulator layout (m64nNk16): sacc[4*nt + e] is row g + 8*(e>>1), key 8*nt + 2*t4 + (e&1) of the warp's 16 rows.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/cuda/flash_api.hpp"
#include "kernels/cuda/flash_common.cuh"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/cuda/ws_schedule.hpp"

namespace flashkit::cuda {

// The key tiles a warpgroup's own rows can see, within the CTA's [nb_begin, nb_end) (mask bounds are monotone in
// the query index), and the bounds inside which a tile needs no mask. Empty (wb == we) when its rows are past the end
// or see no key.
struct WarpgroupKeys {
  int wb, we;
  int lo_max, hi_min;  // key indices fit int (nk does)
};
__device__ __forceinline__ WarpgroupKeys warpgroup_keys(const kernels::AttentionMask& mask, const TileRows& trows,
                                                        int64_t w0, int64_t rows, int64_t nk, int BN, int nb_begin,
                                                        int nb_end) {
  WarpgroupKeys k{nb_begin, nb_begin, 0, 0};
  if (w0 >= rows) return k;
  const TileKeys wk = tile_keys(mask, trows, w0, (w0 + 64 < rows ? w0 + 64 : rows) - 1, nk, BN);
  k.lo_max = int(wk.lo_max), k.hi_min = int(wk.hi_min);
  k.wb = wk.nb_begin > nb_begin ? wk.nb_begin : nb_begin;
  k.we = wk.nb_end < nb_end ? wk.nb_end : nb_end;
  if (k.wb >= k.we) k.wb = k.we = nb_begin;
  return k;
}

template <typename T, int D, int BN, int BM>
struct Sm90FwdRows {
  using Op = MmaOp<T>;
  static constexpr int NTILE = BN / 8, DTILE = D / 8, CH = D / 8;

  float o[D / 2];
  float mrow[2], lrow[2];
  int my_lo[2], my_hi[2];  // visible key range of the thread's two rows (g, g + 8)
  int lo_max, hi_min;      // the warpgroup's: a tile inside [lo_max, hi_min) needs no mask
  const kernels::AttentionFwdArgs& a;  // kernel parameters: scale and softcap re-read, not held in registers

  // The thread's place: warpgroup, warp in it, row group and column quad of the m64 accumulator (recomputed where
  // used rather than kept: cheaper than the registers).
  static __device__ __forceinline__ int wg() { return int(threadIdx.x) >> 7; }
  static __device__ __forceinline__ int wq() { return (int(threadIdx.x) >> 5) & 3; }
  static __device__ __forceinline__ int g() { return (int(threadIdx.x) & 31) >> 2; }
  static __device__ __forceinline__ int t4() { return int(threadIdx.x) & 3; }

  __device__ __forceinline__ Sm90FwdRows(const kernels::AttentionFwdArgs& args, const TileRows& trows, int64_t m0,
                                         int64_t rows, int64_t nq, int64_t nk, const WarpgroupKeys& wk)
      : lo_max(wk.lo_max), hi_min(wk.hi_min), a(args) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t gr = m0 + wg() * 64 + wq() * 16 + g() + 8 * r;
      my_lo[r] = 0;
      my_hi[r] = int(nk);
      if (gr < rows) {
        int64_t h, i;
        trows.head_query(gr, h, i);
        my_lo[r] = int(a.mask.lo(i, nq, nk));
        my_hi[r] = int(a.mask.hi(i, nq, nk));
      }
      mrow[r] = -INFINITY, lrow[r] = 0.f;
    }
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  }

  // DENSE (v27; ws_schedule.hpp): rows of one head's consecutive queries, under a causal mask or none. Every row
  // sees keys from 0 up to ws_dense_hi: the same bounds as above without head_query or int64 mask arithmetic.
  // O is zeroed only where the warpgroup has no key tile (its rows are stored as 0): otherwise the first P V
  // writes it (issue_pv with accumulate = 0, wgmma's scale-d), which saves D / 2 moves a tile.
  struct Dense {};
  __device__ __forceinline__ Sm90FwdRows(Dense, const kernels::AttentionFwdArgs& args, const WsDenseGeom& geom,
                                         bool causal, int m0, const WarpgroupKeys& wk)
      : lo_max(wk.lo_max), hi_min(wk.hi_min), a(args) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int gr = m0 + wg() * 64 + wq() * 16 + g() + 8 * r;
      my_lo[r] = 0;
      my_hi[r] = gr < geom.seqlen_q ? ws_dense_hi(geom, causal, gr) : geom.seqlen_k;
      mrow[r] = -INFINITY, lrow[r] = 0.f;
    }
    if (wk.wb == wk.we) {
#pragma unroll
      for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    }
  }

  // S = Q K^T for the warpgroup's 64 rows x BN keys (sQ: the CTA's BM-row Q panels; sK: one BN-row K buffer).
  __device__ __forceinline__ void issue_qk(float (&sacc)[BN / 2], uint32_t sQ, uint32_t sK) const {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint64_t da = smem_desc(sQ + (kk >> 2) * (BM * 128) + wg() * (64 * 128) + (kk & 3) * 32, 16, 1024);
      const uint64_t db = smem_desc(sK + (kk >> 2) * (BN * 128) + (kk & 3) * 32, 16, 1024);
      Wgmma<T, BN>::template ss<0, 0>(sacc, da, db, kk > 0);
    }
    wgmma_commit();
  }

  // Scores of key tile n to log2 units (scale, softcap), mask, online softmax: leaves P in sacc and the factor O
  // must be rescaled by in alpha. LAZY_TAU > 0 (the fp8 forward's lazy rescale, worklog attention-fp8-cuda v4): a
  // row's running max m moves only when the tile's max exceeds it by more than LAZY_TAU (log2 units), so that
  // p = 2^(s - m) <= 2^LAZY_TAU; a row that keeps m gets alpha = 1 exactly (a select: with the exp2 under a branch
  // the d256 fp8 kernel spilled). l, O and the final LSE all use the same m: exact in real arithmetic. 0: today's
  // eager max (the bf16 kernels).
  template <int LAZY_TAU = 0>
  __device__ __forceinline__ void softmax(float (&sacc)[BN / 2], int n, float (&alpha)[2]) {
    const int n0 = n * BN;
    const bool full = n0 >= lo_max && n0 + BN <= hi_min;
    const bool use_cap = a.softcap > 0.f;
    const float sl2 = a.scale * kLog2e;
    const float cap_pre = use_cap ? a.scale / a.softcap : 0.f, cap_post = a.softcap * kLog2e;
    const int t4 = Sm90FwdRows::t4();
    if (use_cap || !full) {
#pragma unroll
      for (int nt = 0; nt < NTILE; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = sacc[4 * nt + e];
          x = use_cap ? cap_post * fast_tanh(x * cap_pre) : x * sl2;
          const int j = n0 + nt * 8 + 2 * t4 + (e & 1);
          const int r = e >> 1;
          if (!full && (j < my_lo[r] || j >= my_hi[r])) x = -INFINITY;
          sacc[4 * nt + e] = x;
        }
    }
    // Without softcap or mask the scale is folded into the exponent: p = 2^(s*sl2 - m*sl2) (one FFMA).
    const float fold = (use_cap || !full) ? 1.f : sl2;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < NTILE; ++nt) mx = fmaxf(mx, fmaxf(sacc[4 * nt + 2 * r], sacc[4 * nt + 2 * r + 1]));
      mx = quad_max(mx) * fold;
      float muse;
      if constexpr (LAZY_TAU > 0) {
        const bool move = mx > mrow[r] + float(LAZY_TAU);  // m = -inf: the row's first visible tile moves it
        const float mnew = move ? mx : mrow[r];
        muse = mnew == -INFINITY ? 0.f : mnew;
        const float e = fast_exp2(mrow[r] - muse);
        alpha[r] = move ? e : 1.f;  // exactly 1 for a row that kept m (not left to ex2.approx of 0)
        mrow[r] = mnew;
      } else {
        const float mnew = fmaxf(mrow[r], mx);
        muse = mnew == -INFINITY ? 0.f : mnew;
        alpha[r] = fast_exp2(mrow[r] - muse);
        mrow[r] = mnew;
      }
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < NTILE; ++nt) {
        const float p0 = fast_exp2(fmaf(sacc[4 * nt + 2 * r], fold, -muse));
        const float p1 = fast_exp2(fmaf(sacc[4 * nt + 2 * r + 1], fold, -muse));
        sacc[4 * nt + 2 * r] = p0;
        sacc[4 * nt + 2 * r + 1] = p1;
        sum += p0 + p1;
      }
      lrow[r] = lrow[r] * alpha[r] + sum;
    }
  }

  // O *= alpha (per row) before the next P V accumulates into it.
  __device__ __forceinline__ void rescale_o(const float (&alpha)[2]) {
#pragma unroll
    for (int d = 0; d < DTILE; ++d)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[4 * d + e] *= alpha[e >> 1];
  }

  // P as the register A operand of O += P V: the m64k16 fragment of keys 16kk..16kk+15 is the accumulator layout
  // of key octets 2kk and 2kk+1.
  static __device__ __forceinline__ void pack_p(const float (&sacc)[BN / 2], uint32_t (&pa)[BN / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      pa[kk][0] = Op::pack(sacc[8 * kk + 0], sacc[8 * kk + 1]);
      pa[kk][1] = Op::pack(sacc[8 * kk + 2], sacc[8 * kk + 3]);
      pa[kk][2] = Op::pack(sacc[8 * kk + 4], sacc[8 * kk + 5]);
      pa[kk][3] = Op::pack(sacc[8 * kk + 6], sacc[8 * kk + 7]);
    }
  }

  // O += P V with V of one BN-row buffer read transposed (MN-major) from its panels; accumulate = 0: O = P V (the
  // first product of rows whose O was not zeroed: wgmma's scale-d ignores the accumulator's old contents).
  __device__ __forceinline__ void issue_pv(uint32_t (&pa)[BN / 16][4], uint32_t sV, int accumulate = 1) {
    wgmma_fence_regs<D / 2>(o);
    wgmma_fence_regs<BN / 4>(&pa[0][0]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint64_t db = smem_desc(sV + kk * 2048, BN * 128, 1024);
      Wgmma<T, D>::template rs<1>(o, pa[kk], db, kk > 0 ? 1 : accumulate);
    }
    wgmma_commit();
  }

  // Epilogue: normalize, stage the warpgroup's O rows in its part of the Q panels (smem: the CTA's Q tile, no longer
  // read once every warp of the warpgroup is past its last QK^T: named barrier `bar`), then write O and LSE.
  // STEPPED (the persistent ws forward's epilogue overlap, v23): when the rows are one head's consecutive queries
  // (the GQA group not packed), each thread's row chunks are written through one pointer stepped by 128 / CH rows,
  // without the per-chunk head_query and int64 address arithmetic of the general loop.
  // TMA (v23b; smem: a buffer of its own, 1024-byte aligned; tmap_o: O as [slots, seq, heads, head_dim], boxes of
  // 64 columns x 64 rows): where the warpgroup's 64 rows are one head's consecutive queries inside the sequence, its
  // first thread writes them from the staging buffer with asynchronous TMA stores (one bulk group per tile), so
  // that no consumer thread waits for the global writes; the group is waited for (its reads of the buffer) before
  // the buffer is written again, here, and completely by the caller at the end of the kernel. Other tiles (packed
  // GQA groups, a sequence's last partial tile) take the loops below.
  template <bool STEPPED = false, bool TMA = false>
  __device__ __forceinline__ void store(const kernels::SeqRange& sr,
                                        const TileRows& trows, uint8_t* smem, int64_t m0, int64_t rows, int dreal,
                                        int bar, const CUtensorMap* tmap_o = nullptr) {
    const int wg = Sm90FwdRows::wg(), wq = Sm90FwdRows::wq(), g = Sm90FwdRows::g(), t4 = Sm90FwdRows::t4();
    const int wtid = int(threadIdx.x) & 127;
    float inv[2], lse[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float l = quad_sum(lrow[r]);
      inv[r] = l > 0.f ? 1.f / l : 0.f;
      lse[r] = row_lse(mrow[r], l);
    }
    if constexpr (TMA) {
      if (wtid == 0) bulk_wait_group_read<0>();  // the previous tile's stores no longer read the buffer
    }
    named_barrier(bar, 128);
#pragma unroll
    for (int d = 0; d < DTILE; ++d)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t v = Op::pack(o[4 * d + 2 * r] * inv[r], o[4 * d + 2 * r + 1] * inv[r]);
        *reinterpret_cast<uint32_t*>(smem + pswz<BM>(wg * 64 + wq * 16 + g + 8 * r, d) + t4 * 4) = v;
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t gr = m0 + wg * 64 + wq * 16 + g + 8 * r;
      if (gr >= rows || t4 != 0) continue;
      int64_t h, i;
      trows.head_query(gr, h, i);
      a.lse[a.lse_index(sr, h, i)] = lse[r];
    }
    if constexpr (TMA) {
      if (!trows.pack && m0 + wg * 64 + 64 <= rows) {  // the same for every thread of the warpgroup
        fence_proxy_async();  // the staged O (generic-proxy writes) -> the TMA unit's reads
        named_barrier(bar, 128);
        if (wtid == 0) {
          const uint32_t src = smem_u32(smem) + uint32_t(wg * 64 * 128);
          const int row = int(sr.q0 + m0) + wg * 64;
#pragma unroll
          for (int pnl = 0; pnl < D / 64; ++pnl)
            tma_store_4d(tmap_o, src + uint32_t(pnl * BM * 128), 64 * pnl, row, int(trows.hblk), int(sr.bslot));
          bulk_commit_group();
        }
        return;
      }
    }
    named_barrier(bar, 128);
    T* obase = static_cast<T*>(a.o.data) + sr.bslot * a.o.stride_b;
    if constexpr (STEPPED) {
      if (!trows.pack) {
        constexpr int kStep = 128 / CH;  // rows per pass of the warpgroup's 128 threads
        static_assert(128 % CH == 0 && 64 % kStep == 0, "whole rows per pass");
        const int c = wtid % CH, r0 = wtid / CH;
        const int64_t g0 = m0 + wg * 64 + r0;  // the row of pass 0: its query index (one head)
        if (c * 8 >= dreal) return;
        T* dst = obase + (sr.q0 + g0) * a.o.stride_s + int64_t(trows.hblk) * a.o.stride_h + c * 8;
        const int64_t step = int64_t(kStep) * a.o.stride_s;
#pragma unroll
        for (int j = 0; j < 64 / kStep; ++j)
          if (g0 + j * kStep < rows)
            *reinterpret_cast<uint4*>(dst + j * step) =
                *reinterpret_cast<const uint4*>(smem + pswz<BM>(wg * 64 + r0 + j * kStep, c));
        return;
      }
    }
    for (int idx = wtid; idx < 64 * CH; idx += 128) {
      const int rr = wg * 64 + idx / CH, c = idx % CH;
      const int64_t gr = m0 + rr;
      if (gr < rows && c * 8 < dreal) {
        int64_t h, i;
        trows.head_query(gr, h, i);
        *reinterpret_cast<uint4*>(obase + (sr.q0 + i) * a.o.stride_s + h * a.o.stride_h + c * 8) =
            *reinterpret_cast<const uint4*>(smem + pswz<BM>(rr, c));
      }
    }
  }
};

}  // namespace flashkit::cuda
