// FlashAttention backward for Hopper (sm_90a) at head dim 256, warp-specialized (worklog v24). v16's math and GEMM
// split (flash_bwd_sm90_d256.cuh: BN = 64 keys, BM = 64 queries per step, both consumer warpgroups split every GEMM,
// P^T and dS^T exchanged through shared memory) in v22's structure (flash_bwd_sm90_ws.cuh):
//   warpgroup 2 (producer, 24 registers after setmaxnreg): warp 8's lane 0 loads K and V once (TMA, one mbarrier),
//     then per query step Q and dO (TMA) into a 2-stage ring with full/empty mbarriers. The other warps leave.
//   warpgroups 0-1 (consumers, 240 registers), per step, warpgroup w:
//     S^T = K Q^T, dP^T = V dO^T     SS m64n32: all 64 keys x the step's queries [32w, 32w+32)
//     P^T, dS^T (16-bit) -> shared memory, double-buffered by step parity; fence.proxy.async + one named barrier
//     dQ[:, 128w..]  = dS K          SS m64n128, f32 atomics from registers (as v16)
//     dV[:, 128w..] += P^T dO, dK[:, 128w..] += dS^T Q   SS m64n128
//   The named barrier is the one place the consumers meet (each needs the other's query columns of P^T/dS^T);
//   the parity buffers make it order a buffer's reuse two steps later too (a warpgroup past step s+1's barrier
//   knows the other finished step s, wgmma_wait<0> included), so v16's second CTA barrier per step goes.
//   LSE*log2e and Dsum are staged by the consumers, one step ahead, between the same barriers (bwd_ws_staging.hpp).
// Why dQ keeps v16's atomics (worklog v24): K, V 32 KB each + Q/dO 2 stages x 2 x 32 KB + P^T/dS^T 2 x 2 x 8 KB =
// 224 KB of the 227 KB; v22's [BM][D] f32 dQ tile (64 KB) fits only by giving up the Q/dO double buffer.
// Rows past a sequence in a packed varlen tensor: zeroed in shared memory as v22 does (its bwd_ws_zero_rows).
// No softcap (v16 keeps it, as v6 keeps it beside v22). Included by flash_bwd_sm90_ws_{bf16,f16}_d256.cu only.
#pragma once
#include <atomic>
#include <cstdio>

#include "kernels/cuda/bwd_ws_d256_buffers.hpp"
#include "kernels/cuda/flash_bwd_sm90_ws.cuh"  // read-only: TMA maps, zeroed tails, LSE/Dsum loads, barrier ids

namespace flashkit::cuda {

struct Sm90BwdWsD256Cfg {
  static constexpr int D = 256, BM = 64, BN = 64, STAGES = 2, kConsumers = 256, NT = kConsumers + 128;
  static constexpr int QW = 32;   // query columns of S^T / dP^T per warpgroup
  static constexpr int DW = 128;  // head-dim columns of dK, dV, dQ per warpgroup
  static constexpr int kLoaderWarp = kConsumers / 32;
  // __launch_bounds__(384, 1): 168 registers per thread. 24/240 uses the whole pool (24 x 128 + 240 x 256 =
  // 168 x 384): the producer only runs the loader (no dQ writer warp), the consumers hold 128 dK/dV + 64 dQ.
  static constexpr int kLaunchRegs = 168, kProducerRegs = 24, kConsumerRegs = 240;
  static_assert(kProducerRegs * 128 + kConsumerRegs * kConsumers <= kLaunchRegs * NT, "register budgets exceed the pool");
  static constexpr uint32_t kv_bytes = BN * D * 2, q_bytes = BM * D * 2, p_bytes = BN * BM * 2;
  static constexpr uint32_t kPanel = 64 * 128;  // one 64-row x 64-column panel (K, V, Q, dO, P^T, dS^T)
  // Byte offsets from the 1024-aligned base: K, V [64][256]; Q, dO [STAGES][64][256]; P^T, dS^T [2][64 keys][64
  // queries] (bwd_ws_d256_buffers.hpp); LSE*log2e and Dsum [kBwdWsLseSlots][64] f32; mbarriers kv_full, full[STAGES], empty[STAGES].
  static constexpr uint32_t oK = 0, oV = kv_bytes, oQ = 2 * kv_bytes, odO = oQ + STAGES * q_bytes;
  static constexpr uint32_t oP = odO + STAGES * q_bytes, odS = oP + kBwdWsPdsBuffers * p_bytes;
  static constexpr uint32_t oL = odS + kBwdWsPdsBuffers * p_bytes;
  static constexpr uint32_t oDs = oL + kBwdWsLseSlots * BM * 4, oBar = oDs + kBwdWsLseSlots * BM * 4;
  static constexpr uint32_t bytes = oBar + (1 + 2 * STAGES) * 8;
  static constexpr size_t smem = size_t(bytes) + 1024;  // + alignment slack
  static_assert(kv_bytes % 1024 == 0 && q_bytes % 1024 == 0 && p_bytes % 1024 == 0, "panels must stay 1024-aligned");
  static_assert(smem <= 227 * 1024, "shared memory per CTA exceeds the opt-in limit");
};

template <typename T>
__global__ void __launch_bounds__(Sm90BwdWsD256Cfg::NT, 1)
    flash_bwd_sm90_ws_d256_kernel(const BwdParams p, const __grid_constant__ CUtensorMap tmap_q,
                                  const __grid_constant__ CUtensorMap tmap_do, const __grid_constant__ CUtensorMap tmap_k,
                                  const __grid_constant__ CUtensorMap tmap_v) {
#if FK_SM90_ENABLED
  using Op = MmaOp<T>;
  using Cfg = Sm90BwdWsD256Cfg;
  constexpr int D = Cfg::D, BM = Cfg::BM, BN = Cfg::BN, STAGES = Cfg::STAGES, QW = Cfg::QW, DW = Cfg::DW;
  constexpr uint32_t kPanel = Cfg::kPanel;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t bar_kv = base + Cfg::oBar;
  auto bar_full = [&](int st) { return base + Cfg::oBar + 8u * uint32_t(1 + st); };
  auto bar_empty = [&](int st) { return base + Cfg::oBar + 8u * uint32_t(1 + STAGES + st); };

  const kernels::AttentionFwdArgs& a = p.g.fwd;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const kernels::SeqRange sr = kernels::seq_range(a.shape, blockIdx.z);
  const int nq = int(sr.nq), nk = int(sr.nk);
  const int n0 = int(blockIdx.x) * BN;
  if (n0 >= nk) return;  // the whole CTA: before any barrier
  const int kvh = blockIdx.y;
  const int group = int(a.shape.heads / a.shape.kv_heads);
  int mb_lo, nmb;
  key_tile_query_blocks(a.mask, n0, BN, nq, nk, BM, mb_lo, nmb);
  const int nsteps = nmb * group;
  // Step s: query head kvh*group + s/nmb, rows [m0, m0+BM) with m0 = (mb_lo + s%nmb)*BM, walked without division.
  struct StepWalk {
    int h, m0, mi;
    __device__ void next(int nmb_, int mb_lo_) {
      if (++mi == nmb_) mi = 0, ++h;
      m0 = (mb_lo_ + mi) * BM;
    }
  };
  const StepWalk walk0{kvh * group, mb_lo * BM, 0};

  if (tid == 0) {
    mbar_init(bar_kv, 1);
#pragma unroll
    for (int st = 0; st < STAGES; ++st) {
      mbar_init(bar_full(st), 1);                      // the loader, arming the TMA bytes
      mbar_init(bar_empty(st), Cfg::kConsumers / 32);  // one arrival per consumer warp
    }
    fence_mbar_init();
  }
  __syncthreads();  // the only CTA-wide barrier

  if (tid >= Cfg::kConsumers) {
    setmaxnreg_dec<Cfg::kProducerRegs>();  // the whole warpgroup, before its other warps leave
    if (warp == Cfg::kLoaderWarp && nsteps > 0 && lane == 0) {
      const int bslot = int(sr.bslot);
      prefetch_tmap(&tmap_q);
      prefetch_tmap(&tmap_do);
      mbar_arrive_expect_tx(bar_kv, 2 * Cfg::kv_bytes);
#pragma unroll
      for (int pnl = 0; pnl < D / 64; ++pnl) {
        tma_load_4d(base + Cfg::oK + pnl * kPanel, &tmap_k, bar_kv, 64 * pnl, int(sr.k0) + n0, kvh, bslot);
        tma_load_4d(base + Cfg::oV + pnl * kPanel, &tmap_v, bar_kv, 64 * pnl, int(sr.k0) + n0, kvh, bslot);
      }
      StepWalk w = walk0;
      for (int sidx = 0; sidx < nsteps; ++sidx, w.next(nmb, mb_lo)) {
        const int st = sidx % STAGES;
        if (sidx >= STAGES) mbar_wait(bar_empty(st), uint32_t(sidx / STAGES - 1) & 1u);
        const uint32_t full = bar_full(st);
        mbar_arrive_expect_tx(full, 2 * Cfg::q_bytes);
        const int row = int(sr.q0) + w.m0;
#pragma unroll
        for (int pnl = 0; pnl < D / 64; ++pnl) {
          tma_load_4d(base + Cfg::oQ + st * Cfg::q_bytes + pnl * kPanel, &tmap_q, full, 64 * pnl, row, w.h, bslot);
          tma_load_4d(base + Cfg::odO + st * Cfg::q_bytes + pnl * kPanel, &tmap_do, full, 64 * pnl, row, w.h, bslot);
        }
      }
    }
    return;
  }

  // ---- consumers ----
  setmaxnreg_inc<Cfg::kConsumerRegs>();
  const int wg = tid >> 7, wq = (tid >> 5) & 3;
  const int g = lane >> 2, t4 = lane & 3;
  const int dreal = int(a.shape.head_dim);
  const int64_t off = int64_t(nk) - nq;

  // Queries that see each of this thread's two keys (rows g, g+8 of its warp's 16; both warpgroups: all 64 keys).
  int q_lo[2], q_hi[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) bwd_key_queries(a.mask, n0 + wq * 16 + g + 8 * r, off, nq, nk, q_lo[r], q_hi[r]);

  // Accumulators (m64nN layout, wgmma.cuh): x[4i + e] is row 16*wq + g + 8*(e>>1), column 8i + 2*t4 + (e&1).
  float dk[DW / 2], dv[DW / 2];  // rows: the tile's 64 keys; columns: head dims [128*wg, 128*wg + 128)
#pragma unroll
  for (int i = 0; i < DW / 2; ++i) dk[i] = dv[i] = 0.f;
  const float sl2 = a.scale * kLog2e;
  const int qw0 = wg * QW;                           // this warpgroup's first query column of the step
  const uint32_t d_off = uint32_t(wg) * 2 * kPanel;  // its 128 head-dim columns: two panels in

  const bool varlen = a.shape.varlen();
  const int lse_row = bwd_ws_lse_row<BM>(tid);  // rows [32w, 32w+32): the columns this warpgroup reads
  auto stage_lse_dsum = [&](int slot, BwdLseDsum v) {
    sts_f32(base + Cfg::oL + uint32_t(slot * BM + lse_row) * 4, v.lse2);
    sts_f32(base + Cfg::oDs + uint32_t(slot * BM + lse_row) * 4, v.dsum);
  };
  if (nsteps > 0) {
    if (lse_row >= 0)
      stage_lse_dsum(bwd_ws_lse_slot(0), bwd_ws_load_lse_dsum(p, sr, walk0.h, walk0.m0, lse_row, nq, nk));
    named_barrier(kBwdWsBarDs, Cfg::kConsumers);
    mbar_wait(bar_kv, 0);
    if (varlen && n0 + BN > nk) {  // the next sequence's keys: zero (dQ = dS K would carry 0 * their values)
      bwd_ws_zero_rows<BN, D>(base + Cfg::oK, nk - n0, tid);
      fence_proxy_async();
      named_barrier(kBwdWsBarTail, Cfg::kConsumers);
    }
  }

  StepWalk w = walk0;
  for (int sidx = 0; sidx < nsteps; ++sidx, w.next(nmb, mb_lo)) {
    const int st = sidx % STAGES;
    const int h = w.h, m0 = w.m0;
    mbar_wait(bar_full(st), uint32_t(sidx / STAGES) & 1u);  // Q, dO (TMA) of the step
    if (varlen && m0 + BM > nq) {  // the next sequence's query rows: zero (dK, dV would carry 0 * their values)
      bwd_ws_zero_rows<BM, D>(base + Cfg::oQ + st * Cfg::q_bytes, nq - m0, tid);
      bwd_ws_zero_rows<BM, D>(base + Cfg::odO + st * Cfg::q_bytes, nq - m0, tid);
      fence_proxy_async();
      named_barrier(kBwdWsBarTail, Cfg::kConsumers);
    }
    const uint32_t sb = opaque_u32(base);
    const uint32_t pbuf = uint32_t(bwd_ws_pds_buffer(sidx)) * Cfg::p_bytes;
    const uint32_t sK = sb + Cfg::oK, sV = sb + Cfg::oV, sP = sb + Cfg::oP + pbuf, sdS = sb + Cfg::odS + pbuf;
    const uint32_t sQ = sb + Cfg::oQ + st * Cfg::q_bytes, sdO = sb + Cfg::odO + st * Cfg::q_bytes;
    const uint32_t lslot = uint32_t(bwd_ws_lse_slot(sidx)) * (BM * 4);
    const uint32_t sLq = sb + Cfg::oL + lslot + (qw0 + 2 * t4) * 4;
    const uint32_t sDq = sb + Cfg::oDs + lslot + (qw0 + 2 * t4) * 4;

    // S^T = K Q^T and dP^T = V dO^T over the full head dim (v16): B = the 32 query rows [qw0, qw0+32) of the
    // Q / dO panels (4096 bytes in: still 1024-aligned, the swizzle holds).
    float s[QW / 2], dp[QW / 2];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t koff = (kk >> 2) * kPanel + (kk & 3) * 32;
      const uint32_t qoff = (kk >> 2) * kPanel + qw0 * 128 + (kk & 3) * 32;
      Wgmma<T, QW>::template ss<0, 0>(s, smem_desc(sK + koff, 16, 1024), smem_desc(sQ + qoff, 16, 1024), kk > 0);
    }
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t koff = (kk >> 2) * kPanel + (kk & 3) * 32;
      const uint32_t qoff = (kk >> 2) * kPanel + qw0 * 128 + (kk & 3) * 32;
      Wgmma<T, QW>::template ss<0, 0>(dp, smem_desc(sV + koff, 16, 1024), smem_desc(sdO + qoff, 16, 1024), kk > 0);
    }
    wgmma_commit();
    // The next step's LSE/Dsum into the other slot while the products run: every consumer read that slot (step
    // sidx-1) before the previous barrier, and this step's barrier orders these stores before step sidx+1's reads.
    if (lse_row >= 0 && sidx + 1 < nsteps) {
      StepWalk wn = w;
      wn.next(nmb, mb_lo);
      stage_lse_dsum(bwd_ws_lse_slot(sidx + 1), bwd_ws_load_lse_dsum(p, sr, wn.h, wn.m0, lse_row, nq, nk));
    }

    const int qa = m0 + qw0;  // first query of this warpgroup's columns
    const bool full = qa + QW <= nq && n0 + BN <= nk && a.mask.lo(qa + QW - 1, nq, nk) <= n0 &&
                      a.mask.hi(qa, nq, nk) >= n0 + BN;
    const int vlo[2] = {q_lo[0] - qa - 2 * t4, q_lo[1] - qa - 2 * t4};
    const int vhi[2] = {q_hi[0] - qa - 2 * t4, q_hi[1] - qa - 2 * t4};
    wgmma_wait<1>();  // S^T is in
    wgmma_fence_regs<QW / 2>(s);
#pragma unroll
    for (int nt = 0; nt < QW / 8; ++nt) {
      const float2 L2 = lds_f32x2(sLq + nt * 32);
#pragma unroll
      for (int e = 0; e < 4; ++e) s[4 * nt + e] = fast_exp2(s[4 * nt + e] * sl2 - ((e & 1) ? L2.y : L2.x));
    }
    wgmma_wait<0>();  // dP^T is in
    wgmma_fence_regs<QW / 2>(dp);
#pragma unroll
    for (int nt = 0; nt < QW / 8; ++nt) {
      const float2 D2 = lds_f32x2(sDq + nt * 32);
#pragma unroll
      for (int e = 0; e < 4; ++e) dp[4 * nt + e] = s[4 * nt + e] * (dp[4 * nt + e] - ((e & 1) ? D2.y : D2.x));
    }
    if (!full) {  // P = dS = 0 outside the mask (assigned: a masked key's non-finite S or dP does not survive)
#pragma unroll
      for (int nt = 0; nt < QW / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qc = nt * 8 + (e & 1), r = e >> 1;
          if (qc < vlo[r] || qc >= vhi[r]) s[4 * nt + e] = dp[4 * nt + e] = 0.f;
        }
    }

    // P^T and dS^T (16-bit) to this step's buffers: elements 4nt + 2r, +1 are key row 16*wq + g + 8r and queries
    // qw0 + 8nt + 2*t4, +1: one 32-bit word at chunk (qw0 + 8nt)/8 of that key row.
#pragma unroll
    for (int nt = 0; nt < QW / 8; ++nt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t at = pswz<BN>(wq * 16 + g + 8 * r, qw0 / 8 + nt) + 4 * t4;
        sts_u32(sP + at, Op::pack(s[4 * nt + 2 * r], s[4 * nt + 2 * r + 1]));
        sts_u32(sdS + at, Op::pack(dp[4 * nt + 2 * r], dp[4 * nt + 2 * r + 1]));
      }
    // Both warpgroups' P^T/dS^T columns visible to the tensor cores before either's dV/dK/dQ products; the next
    // step's LSE/Dsum stores before its reads.
    fence_proxy_async();
    named_barrier(kBwdWsBarDs, Cfg::kConsumers);

    // dQ slice = dS K (A = dS M-major from dS^T, B = K MN-major: 16 key rows = 2048 bytes per k-step), then
    // dV += P^T dO and dK += dS^T Q (A K-major: +32 bytes per 16 queries; B MN-major, LBO = the panel stride).
    // dQ is committed first so its atomics overlap the dK/dV wgmmas.
    float dq[DW / 2];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
      Wgmma<T, DW>::template ss<1, 1>(dq, smem_desc(sdS + kk * 2048, kPanel, 1024),
                                      smem_desc(sK + d_off + kk * 2048, kPanel, 1024), kk > 0);
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk)
      Wgmma<T, DW>::template ss<0, 1>(dv, smem_desc(sP + kk * 32, 16, 1024),
                                      smem_desc(sdO + d_off + kk * 2048, kPanel, 1024), 1);
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk)
      Wgmma<T, DW>::template ss<0, 1>(dk, smem_desc(sdS + kk * 32, 16, 1024),
                                      smem_desc(sQ + d_off + kk * 2048, kPanel, 1024), 1);
    wgmma_commit();
    wgmma_wait<1>();  // dQ
    wgmma_fence_regs<DW / 2>(dq);
    {  // dQ atomics, 16 bytes each (v16): lanes t4 and t4^1 swap halves.
      const int odd = t4 & 1;
      const int i = m0 + wq * 16 + g + 8 * odd;
      float* dst = p.dq_accum + (i < nq ? a.lse_index(sr, h, i) : 0) * D + wg * DW + 2 * (t4 & 2);
#pragma unroll
      for (int c = 0; c < DW / 8; ++c) {
        const float x0 = odd ? dq[4 * c] : dq[4 * c + 2], x1 = odd ? dq[4 * c + 1] : dq[4 * c + 3];
        const float y0 = __shfl_xor_sync(0xffffffffu, x0, 1), y1 = __shfl_xor_sync(0xffffffffu, x1, 1);
        const float4 v = odd ? make_float4(y0, y1, dq[4 * c + 2], dq[4 * c + 3])
                             : make_float4(dq[4 * c], dq[4 * c + 1], y0, y1);
        if (i < nq) atomicAdd(reinterpret_cast<float4*>(dst + 8 * c), v);
      }
    }
    wgmma_wait<0>();  // dV, dK: the stage's Q and dO and this step's P^T/dS^T are no longer read
    wgmma_fence_regs<DW / 2>(dv);
    wgmma_fence_regs<DW / 2>(dk);
    __syncwarp();
    if (lane == 0) mbar_arrive(bar_empty(st));
  }

  // dK (times scale) and dV, as v16.
  T* dkbase = static_cast<T*>(p.g.dk.data) + sr.bslot * p.g.dk.stride_b + kvh * p.g.dk.stride_h + sr.k0 * p.g.dk.stride_s;
  T* dvbase = static_cast<T*>(p.g.dv.data) + sr.bslot * p.g.dv.stride_b + kvh * p.g.dv.stride_h + sr.k0 * p.g.dv.stride_s;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = n0 + wq * 16 + g + 8 * r;
    if (j >= nk) continue;
#pragma unroll
    for (int d = 0; d < DW / 8; ++d) {
      const int col = wg * DW + d * 8 + 2 * t4;
      if (col < dreal) {
        *reinterpret_cast<uint32_t*>(dkbase + j * p.g.dk.stride_s + col) =
            Op::pack(dk[4 * d + 2 * r] * a.scale, dk[4 * d + 2 * r + 1] * a.scale);
        *reinterpret_cast<uint32_t*>(dvbase + j * p.g.dv.stride_s + col) = Op::pack(dv[4 * d + 2 * r], dv[4 * d + 2 * r + 1]);
      }
    }
  }
#else
  __trap();
#endif
}

// A call the kernel could have run but for TMA or the register count: said once on stderr (the caller falls back
// to v16), in v22's words so the GPU scripts' fallback count sees it.
inline void sm90_bwd_ws_d256_note_fallback(const char* why) {
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) std::fprintf(stderr, "flashkit: warp-specialized Hopper backward not used (d256): %s\n", why);
}

// The tile of sm90_bwd_d256_tile() (tiles.hpp), no softcap. False: not launched (no sm_90a code, softcap, a
// register budget other than 168, no TMA map for Q/dO/K/V); the dispatch runs v16 then.
template <typename T>
bool launch_flash_bwd_sm90_ws_d256(const BwdParams& p, cudaStream_t stream) {
  using Cfg = Sm90BwdWsD256Cfg;
  static_assert(sm90_bwd_d256_tile().bm == Cfg::BM && sm90_bwd_d256_tile().bn == Cfg::BN,
                "tiles.hpp and the kernel disagree");
  auto kern = flash_bwd_sm90_ws_d256_kernel<T>;
  const auto& sh = p.g.fwd.shape;
  if (p.g.fwd.softcap > 0.f || !sm90_kernel_usable(kern) || sh.seqlen_k <= 0 || sh.seqlen_q <= 0) return false;
  // setmaxnreg needs the launch's register count (kernel_has_regs, launch.hpp).
  const bool regs_ok = kernel_has_regs(kern, Cfg::kLaunchRegs);
  if (!regs_ok) {
    sm90_bwd_ws_d256_note_fallback("the kernel was not built with 168 registers per thread (setmaxnreg budget)");
    return false;
  }
  CUtensorMap tq, tdo, tk, tv;
  if (!encode_bwd_tmaps<T>(p, Cfg::BM, Cfg::BN, &tq, &tdo, &tk, &tv)) {
    sm90_bwd_ws_d256_note_fallback("no TMA map for Q/dO/K/V (alignment, strides, or the driver refused it)");
    return false;
  }
  set_max_dynamic_smem(kern, Cfg::smem, "cudaFuncSetAttribute(flash backward sm90 ws d256)");
  const int64_t nblocks = (sh.max_seqlen_k + Cfg::BN - 1) / Cfg::BN;
  if (nblocks == 0) return true;
  dim3 grid(unsigned(nblocks), unsigned(sh.kv_heads), unsigned(sh.batch));
  kern<<<grid, Cfg::NT, Cfg::smem, stream>>>(p, tq, tdo, tk, tv);
  check_cuda(cudaGetLastError(), "flash backward (sm90 ws d256) launch");
  return true;
}

}  // namespace flashkit::cuda
