// FlashAttention backward for Hopper (sm_90a), warp-specialized (FlashAttention-3's backward structure; worklog
// v22). Same math and contract as flash_bwd_sm90.cuh (v6): one CTA per (key tile of BN = 128 keys, KV head,
// sequence) walks every query tile of BM rows of every query head of its GQA group in the transposed (key-major)
// formulation, dK/dV in the consumers' registers, dQ summed into the f32 accumulator p.dq_accum (scaled and
// converted by the postprocess kernel). What changes is who waits for what:
//   warpgroup 2 (producer, 32 registers per thread after setmaxnreg):
//     warp 8, the loader: K and V once (TMA, one mbarrier), then per query step Q and dO (TMA) into a
//       STAGES-deep ring, each stage with a full mbarrier (lane 0's arrival announcing the TMA bytes) and an empty
//       one (one arrival per consumer warp).
//     warp 9, the dQ writer: waits for the consumers' dQ tile (f32, shared memory), adds it to p.dq_accum with one
//       bulk reduce-add per query row (cp.reduce.async.bulk .add.f32; no per-thread atomics on the consumers'
//       critical path), and frees the buffer once the bulk copies have read it. Two mbarriers (dq_full, dq_empty).
//   warpgroups 0-1 (consumers, 232 registers): per step exactly v6's products (flash_bwd_sm90.cuh's header):
//     S^T = K Q^T, dP^T = V dO^T, P^T and dS^T, dV += P^T dO, dK += dS^T Q, dS^T to shared memory, dQ = dS K.
//     The one place the two warpgroups meet is the dS^T tile (dQ needs every key of the tile): a named barrier
//     per step after both wrote it. dS^T is double-buffered by step parity, so that barrier also orders a buffer's
//     reuse two steps later (a warpgroup past step s+1's barrier knows the other finished step s). No CTA barrier
//     in the loop: loads never stall on the slower warpgroup, the next step's Q/dO land while this one computes.
//     The rows' LSE*log2e and Dsum (per query, i.e. per accumulator column: staged in shared memory) ride on the
//     same barrier: during step s, once its dV/dK products are issued, the consumers load step s+1's from global
//     memory into slot (s+1)&1 (bwd_ws_staging.hpp), so the barrier of step s orders those stores before step
//     s+1's reads, and the barrier of step s-1 orders step s-1's reads of that slot before them. (v22's first
//     version had the loader warp store them under the stage's mbarriers: correct by the PTX memory model through
//     __syncwarp + one arrival per warp, but compute-sanitizer racecheck reported it (run s14-3); this protocol
//     uses only bar.sync, which racecheck models, and takes the loads off the 32-register producer. Worklog v22.)
// FK_BWD90WS_DQ_ATOMIC (A/B builds only): dQ by the consumers' float4 atomics as v6 does, no dQ buffer or writer.
// Rows past a sequence's end: TMA zero-fills past the tensor's end; inside a packed varlen tensor it reads the next
// sequence's rows. P = dS = 0 there (mask, LSE = +inf), but 0 times a non-finite value of the next sequence would
// still reach this one's dK (Q rows), dV (dO rows) or dQ (K rows) through the products, so the consumers zero those
// rows in shared memory first, as v6's zero fill (varlen only: a sequence's last key tile once, its last query tile
// per head; one extra named barrier each). Included by flash_bwd_sm90_ws_*.cu only.
#pragma once
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <type_traits>

#include "core/cuda_check.hpp"
#include "kernels/cuda/bwd_ws_staging.hpp"
#include "kernels/cuda/flash_api.hpp"
#include "kernels/cuda/flash_bwd_sm90.cuh"
#include "kernels/cuda/flash_common.cuh"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda/launch.hpp"
#include "kernels/cuda/tiles.hpp"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace flashkit::cuda {

#ifdef FK_BWD90WS_DQ_ATOMIC
constexpr bool kBwdWsDqBulk = false;
#else
constexpr bool kBwdWsDqBulk = true;
#endif

template <int D, int BM>
struct Sm90BwdWsCfg {
  static constexpr int NWG = 2, BN = 128, STAGES = 2, kConsumers = 256, NT = kConsumers + 128;
  static constexpr int kLoaderWarp = kConsumers / 32, kDqWarp = kLoaderWarp + 1;
  // __launch_bounds__(384, 1) gives 168 registers per thread; the reallocation must fit in that pool. 32/232 rather
  // than the ws forward's 24/240: at 24 the producer warps spilled (d64), and the consumers fit 232 without spills.
  static constexpr int kLaunchRegs = 168, kProducerRegs = 32, kConsumerRegs = 232;
  static_assert(kProducerRegs * 128 + kConsumerRegs * kConsumers <= kLaunchRegs * NT, "register budgets exceed the pool");
  static constexpr uint32_t kv_bytes = BN * D * 2, q_bytes = BM * D * 2, ds_bytes = BN * BM * 2;
  // dQ split between the warpgroups as in v6: by query rows when BM == 128, else by head-dim columns.
  static constexpr bool dq_rows = BM == 64 * NWG;
  static constexpr int DQ_N = dq_rows ? D : D / NWG;
  // dQ tile [BM][D] f32, rows padded by 32 bytes: a warp's float2 stores (8 rows x 32 bytes) then take two
  // wavefronts, the minimum; rows stay 16-byte aligned for the bulk copies.
  static constexpr uint32_t dq_pitch = D * 4 + 32, dq_bytes = kBwdWsDqBulk ? BM * dq_pitch : 0;
  // Layout (byte offsets from the 1024-aligned base): K, V [BN][D] in panels of BN rows; Q, dO [STAGES][BM][D] in
  // panels of BM rows (TMA boxes of 64 columns x BM rows, 128B swizzle); dS^T [2][BN][BM] in panels of BN rows;
  // dQ; LSE*log2e and Dsum [kBwdWsLseSlots][BM] f32 (written by the consumers); the mbarriers.
  static constexpr uint32_t oK = 0, oV = kv_bytes, oQ = 2 * kv_bytes, odO = oQ + STAGES * q_bytes;
  static constexpr uint32_t odS = odO + STAGES * q_bytes, odQ = odS + 2 * ds_bytes, oL = odQ + dq_bytes;
  static constexpr uint32_t oDs = oL + kBwdWsLseSlots * BM * 4, oBar = oDs + kBwdWsLseSlots * BM * 4;
  // mbarriers: kv_full, full[STAGES], empty[STAGES], dq_full, dq_empty.
  static constexpr uint32_t bytes = oBar + (3 + 2 * STAGES) * 8;
  static constexpr size_t smem = size_t(bytes) + 1024;  // + alignment slack
  static_assert(kv_bytes % 1024 == 0 && q_bytes % 1024 == 0 && ds_bytes % 1024 == 0 && dq_bytes % 1024 == 0,
                "panels must stay 1024-aligned");
  static_assert(BM % 64 == 0 && (dq_rows || BM == 64) && BM <= 256, "unsupported query tile");
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  static_assert(smem <= 227 * 1024, "shared memory per CTA exceeds the opt-in limit");
};

// Named barriers of the consumers (0 is __syncthreads): the dS^T exchange (and the LSE/Dsum slots), and the zeroed
// tails of varlen tiles.
constexpr int kBwdWsBarDs = 1, kBwdWsBarTail = 2;

// LSE in log2 units (bwd_row_lse2; +inf past the end: P = 0) and Dsum of query row r of the step at (h, m0).
struct BwdLseDsum {
  float lse2, dsum;
};
__device__ __forceinline__ BwdLseDsum bwd_ws_load_lse_dsum(const BwdParams& p, const kernels::SeqRange& sr, int h,
                                                           int m0, int r, int nq, int nk) {
  const kernels::AttentionFwdArgs& a = p.g.fwd;
  const int i = m0 + r;
  if (i >= nq) return {INFINITY, 0.f};
  const int64_t ridx = a.lse_index(sr, h, i);
  return {bwd_row_lse2(a.mask, a.lse[ridx], i, nq, nk), p.dsum[ridx]};
}

// Consumers (256 threads): zero rows [r0, R) of the panels of an R-row operand of D columns in shared memory (whole
// 128-byte panel rows, so the swizzle does not matter), made visible to the tensor cores, all consumers past it.
template <int R, int D>
__device__ __forceinline__ void bwd_ws_zero_rows(uint32_t panels, int r0, int tid) {
  constexpr int kChunks = R * (D / 8);  // 16-byte chunks: row r, chunk c of panel c / 8 at pnl * R * 128 + r * 128
  for (int k = tid; k < kChunks; k += 256) {
    const int r = k / (D / 8), c = k % (D / 8);
    if (r >= r0) {
      const uint32_t addr = panels + uint32_t(c / 8) * (R * 128) + uint32_t(r) * 128 + uint32_t(c % 8) * 16;
      asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr), "r"(0u) : "memory");
    }
  }
}

__device__ __forceinline__ void sts_f32x2(uint32_t addr, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(x), "f"(y) : "memory");
}

#if FK_SM90_ENABLED
// dst[0 .. bytes) += src (f32), by the bulk-copy unit; bytes and both addresses multiples of 16.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// This thread's committed bulk copies have finished reading shared memory (the source may be overwritten).
__device__ __forceinline__ void bulk_wait_read0() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
// ... and have completed.
__device__ __forceinline__ void bulk_wait0() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
#else
__device__ __forceinline__ void bulk_reduce_add_f32(float*, uint32_t, uint32_t) { __trap(); }
__device__ __forceinline__ void bulk_commit() { __trap(); }
__device__ __forceinline__ void bulk_wait_read0() { __trap(); }
__device__ __forceinline__ void bulk_wait0() { __trap(); }
#endif

template <typename T, int D, int BM>
__global__ void __launch_bounds__(Sm90BwdWsCfg<D, BM>::NT, 1)
    flash_bwd_sm90_ws_kernel(const BwdParams p, const __grid_constant__ CUtensorMap tmap_q,
                             const __grid_constant__ CUtensorMap tmap_do, const __grid_constant__ CUtensorMap tmap_k,
                             const __grid_constant__ CUtensorMap tmap_v) {
#if FK_SM90_ENABLED
  using Op = MmaOp<T>;
  using Cfg = Sm90BwdWsCfg<D, BM>;
  constexpr int BN = Cfg::BN, STAGES = Cfg::STAGES, DQ_N = Cfg::DQ_N;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t bar_kv = base + Cfg::oBar;
  auto bar_full = [&](int st) { return base + Cfg::oBar + 8u * uint32_t(1 + st); };
  auto bar_empty = [&](int st) { return base + Cfg::oBar + 8u * uint32_t(1 + STAGES + st); };
  const uint32_t bar_dq_full = base + Cfg::oBar + 8u * uint32_t(1 + 2 * STAGES);
  const uint32_t bar_dq_empty = bar_dq_full + 8u;

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
  // Step s covers query head kvh*group + s/nmb, query rows [m0, m0+BM) with m0 = (mb_lo + s%nmb)*BM, walked
  // incrementally (v6's per-step division by nmb showed in its profile: I2F/MUFU.RCP waiting at the barrier).
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
      mbar_init(bar_full(st), 1);                      // the loader's lane 0, arming the TMA bytes
      mbar_init(bar_empty(st), Cfg::kConsumers / 32);  // one arrival per consumer warp
    }
    mbar_init(bar_dq_full, Cfg::kConsumers / 32);
    mbar_init(bar_dq_empty, 1);  // the dQ writer, once its bulk copies have read the tile
    fence_mbar_init();
  }
  __syncthreads();  // the only CTA-wide barrier

  if (tid >= Cfg::kConsumers) {
    setmaxnreg_dec<Cfg::kProducerRegs>();  // the whole warpgroup, before its other warps leave
    if (warp == Cfg::kLoaderWarp && nsteps > 0 && lane == 0) {  // one thread issues every TMA load
      const int bslot = int(sr.bslot);
      prefetch_tmap(&tmap_q);
      prefetch_tmap(&tmap_do);
      mbar_arrive_expect_tx(bar_kv, 2 * Cfg::kv_bytes);
#pragma unroll
      for (int pnl = 0; pnl < D / 64; ++pnl) {
        tma_load_4d(base + Cfg::oK + pnl * (BN * 128), &tmap_k, bar_kv, 64 * pnl, int(sr.k0) + n0, kvh, bslot);
        tma_load_4d(base + Cfg::oV + pnl * (BN * 128), &tmap_v, bar_kv, 64 * pnl, int(sr.k0) + n0, kvh, bslot);
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
          tma_load_4d(base + Cfg::oQ + st * Cfg::q_bytes + pnl * (BM * 128), &tmap_q, full, 64 * pnl, row, w.h, bslot);
          tma_load_4d(base + Cfg::odO + st * Cfg::q_bytes + pnl * (BM * 128), &tmap_do, full, 64 * pnl, row, w.h,
                      bslot);
        }
      }
    } else if (kBwdWsDqBulk && warp == Cfg::kDqWarp && nsteps > 0) {
      // Per step: the consumers' dQ tile -> one bulk reduce-add per valid query row (lanes take rows in turn).
      constexpr uint32_t row_bytes = D * 4;
      StepWalk w = walk0;
      for (int sidx = 0; sidx < nsteps; ++sidx, w.next(nmb, mb_lo)) {
        const int h = w.h, m0 = w.m0;
        mbar_wait(bar_dq_full, uint32_t(sidx) & 1u);
        float* const dst0 = p.dq_accum + a.lse_index(sr, h, m0) * D;
        const int rows = nq - m0 < BM ? nq - m0 : BM;
        for (int r = lane; r < rows; r += 32)
          bulk_reduce_add_f32(dst0 + r * D, base + Cfg::odQ + uint32_t(r) * Cfg::dq_pitch, row_bytes);
        bulk_commit();
        bulk_wait_read0();  // this lane's copies have read the tile
        __syncwarp();
        if (lane == 0) mbar_arrive(bar_dq_empty);
      }
      bulk_wait0();  // complete before the CTA's shared memory goes away
    }
    return;
  }

  // ---- consumers ----
  setmaxnreg_inc<Cfg::kConsumerRegs>();
  const int wg = tid >> 7, wq = (tid >> 5) & 3;
  const int g = lane >> 2, t4 = lane & 3;
  const int dreal = int(a.shape.head_dim);
  const int64_t off = int64_t(nk) - nq;
  const int kw0 = n0 + 64 * wg;  // this warpgroup's first key

  // Queries that see each of this thread's two keys (accumulator rows g and g+8 of its warp's 16).
  int q_lo[2], q_hi[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) bwd_key_queries(a.mask, kw0 + wq * 16 + g + 8 * r, off, nq, nk, q_lo[r], q_hi[r]);

  float dk[D / 2], dv[D / 2];  // rows: this warpgroup's keys; columns: head dim
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;
  const float sl2 = a.scale * kLog2e;

  constexpr uint32_t kPanelK = BN * 128;  // bytes of one 64-column panel of K or of dS^T
  const uint32_t dq_a_off = Cfg::dq_rows ? wg * kPanelK : 0u;
  const int dq_col0 = Cfg::dq_rows ? 0 : wg * DQ_N;
  const uint32_t dq_b_off = uint32_t(dq_col0 / 64) * kPanelK + uint32_t(dq_col0 % 64) * 2;

  const bool varlen = a.shape.varlen();
  // LSE/Dsum staging (header): this thread's row of each step (or none), slot 0 for step 0 before the loop.
  const int lse_row = bwd_ws_lse_row<BM>(tid);
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
  // The next step's LSE/Dsum from global memory into its slot (every consumer read that slot, step sidx-1, before
  // the previous barrier), after the dV/dK products are issued: the load latency hides under them (the dQ product
  // after the barrier queues behind them anyway), and S^T/dP^T are dead (no registers held across those MMAs).
  // ptxas: no spills, no serialized wgmmas (the FK_BWD90WS_DQ_ATOMIC build: 4 bytes of spill at d128). Staged
  // before the dV/dK issue instead, ptxas serialized d64's wgmmas (C7512, registers).
  StepWalk w = walk0;
  int sidx = 0;
  auto stage_next_lse_dsum = [&] {
    if (lse_row >= 0 && sidx + 1 < nsteps) {
      StepWalk wn = w;
      wn.next(nmb, mb_lo);
      stage_lse_dsum(bwd_ws_lse_slot(sidx + 1), bwd_ws_load_lse_dsum(p, sr, wn.h, wn.m0, lse_row, nq, nk));
    }
  };
  for (; sidx < nsteps; ++sidx, w.next(nmb, mb_lo)) {
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
    const uint32_t sK = sb + Cfg::oK, sV = sb + Cfg::oV, sdS = sb + Cfg::odS + uint32_t(sidx & 1) * Cfg::ds_bytes;
    const uint32_t sQ = sb + Cfg::oQ + st * Cfg::q_bytes, sdO = sb + Cfg::odO + st * Cfg::q_bytes;
    const uint32_t lslot = uint32_t(bwd_ws_lse_slot(sidx)) * (BM * 4);  // this step's LSE/Dsum slot
    const uint32_t sLq = sb + Cfg::oL + lslot + t4 * 8;   // LSE of this thread's columns 2*t4, +1
    const uint32_t sDq = sb + Cfg::oDs + lslot + t4 * 8;  // Dsum of the same

    float s[BM / 2], dp[BM / 2];  // rows: keys; columns: the step's queries
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t koff = (kk >> 2) * kPanelK + wg * (64 * 128) + (kk & 3) * 32;
      const uint32_t qoff = (kk >> 2) * (BM * 128) + (kk & 3) * 32;
      Wgmma<T, BM>::template ss<0, 0>(s, smem_desc(sK + koff, 16, 1024), smem_desc(sQ + qoff, 16, 1024), kk > 0);
    }
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t koff = (kk >> 2) * kPanelK + wg * (64 * 128) + (kk & 3) * 32;
      const uint32_t qoff = (kk >> 2) * (BM * 128) + (kk & 3) * 32;
      Wgmma<T, BM>::template ss<0, 0>(dp, smem_desc(sV + koff, 16, 1024), smem_desc(sdO + qoff, 16, 1024), kk > 0);
    }
    wgmma_commit();

    const bool full = m0 + BM <= nq && kw0 + 64 <= nk && a.mask.lo(m0 + BM - 1, nq, nk) <= kw0 &&
                      a.mask.hi(m0, nq, nk) >= kw0 + 64;
    const int vlo[2] = {q_lo[0] - m0 - 2 * t4, q_lo[1] - m0 - 2 * t4};
    const int vhi[2] = {q_hi[0] - m0 - 2 * t4, q_hi[1] - m0 - 2 * t4};
    wgmma_wait<1>();  // S^T is in
    wgmma_fence_regs<BM / 2>(s);
#pragma unroll
    for (int nt = 0; nt < BM / 8; ++nt) {
      const float2 L2 = lds_f32x2(sLq + nt * 32);
#pragma unroll
      for (int e = 0; e < 4; ++e) s[4 * nt + e] = fast_exp2(s[4 * nt + e] * sl2 - ((e & 1) ? L2.y : L2.x));
    }
    wgmma_wait<0>();  // dP^T is in
    wgmma_fence_regs<BM / 2>(dp);
#pragma unroll
    for (int nt = 0; nt < BM / 8; ++nt) {
      const float2 D2 = lds_f32x2(sDq + nt * 32);
#pragma unroll
      for (int e = 0; e < 4; ++e) dp[4 * nt + e] = s[4 * nt + e] * (dp[4 * nt + e] - ((e & 1) ? D2.y : D2.x));
    }
    if (!full) {  // P = dS = 0 outside the mask
#pragma unroll
      for (int nt = 0; nt < BM / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qc = nt * 8 + (e & 1), r = e >> 1;
          if (qc < vlo[r] || qc >= vhi[r]) s[4 * nt + e] = dp[4 * nt + e] = 0.f;
        }
    }

    uint32_t pa[BM / 16][4], sa[BM / 16][4];
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        pa[kk][q] = Op::pack(s[8 * kk + 2 * q], s[8 * kk + 2 * q + 1]);
        sa[kk][q] = Op::pack(dp[8 * kk + 2 * q], dp[8 * kk + 2 * q + 1]);
      }
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int key = wg * 64 + wq * 16 + g + 8 * (q & 1);
        sts_u32(sdS + pswz<BN>(key, 2 * kk + (q >> 1)) + 4 * t4, sa[kk][q]);
      }

    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk)
      Wgmma<T, D>::template rs<1>(dv, pa[kk], smem_desc(sdO + kk * 2048, BM * 128, 1024), 1);
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk)
      Wgmma<T, D>::template rs<1>(dk, sa[kk], smem_desc(sQ + kk * 2048, BM * 128, 1024), 1);
    wgmma_commit();
    stage_next_lse_dsum();

    // Both warpgroups' dS^T stores visible to the async proxy before either's dQ reads them; the next step's
    // LSE/Dsum stores before its reads (bar.sync orders the generic proxy).
    fence_proxy_async();
    named_barrier(kBwdWsBarDs, Cfg::kConsumers);

    float dq[DQ_N / 2];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
      Wgmma<T, DQ_N>::template ss<1, 1>(dq, smem_desc(sdS + dq_a_off + kk * 2048, kPanelK, 1024),
                                        smem_desc(sK + dq_b_off + kk * 2048, kPanelK, 1024), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();  // dV, dK and dQ: the stage's Q and dO are no longer read
    wgmma_fence_regs<D / 2>(dv);
    wgmma_fence_regs<D / 2>(dk);
    wgmma_fence_regs<DQ_N / 2>(dq);
    __syncwarp();
    if (lane == 0) mbar_arrive(bar_empty(st));

    if constexpr (kBwdWsDqBulk) {
      // dQ into the tile buffer once the writer's bulk copies have read the previous step's (phase sidx-1 of
      // dq_empty), then visible to the bulk copies (async proxy) and announced, one arrival per warp.
      if (sidx > 0) mbar_wait(bar_dq_empty, uint32_t(sidx - 1) & 1u);
      const int row0 = (Cfg::dq_rows ? wg * 64 : 0) + wq * 16 + g;
      const uint32_t sdQ = sb + Cfg::odQ + uint32_t(row0) * Cfg::dq_pitch + uint32_t(dq_col0 + 2 * t4) * 4;
#pragma unroll
      for (int c = 0; c < DQ_N / 8; ++c) {
        sts_f32x2(sdQ + c * 32, dq[4 * c], dq[4 * c + 1]);
        sts_f32x2(sdQ + 8 * Cfg::dq_pitch + c * 32, dq[4 * c + 2], dq[4 * c + 3]);
      }
      fence_proxy_async();
      __syncwarp();
      if (lane == 0) mbar_arrive(bar_dq_full);
    } else {
      // v6's dQ atomics, 16 bytes each: lanes t4 and t4^1 swap halves (flash_bwd_sm90.cuh).
      const int odd = t4 & 1;
      const int qrow = (Cfg::dq_rows ? wg * 64 : 0) + wq * 16 + g + 8 * odd;
      const int i = m0 + qrow;
      float* dst = p.dq_accum + (i < nq ? a.lse_index(sr, h, i) : 0) * D + dq_col0 + 2 * (t4 & 2);
#pragma unroll
      for (int c = 0; c < DQ_N / 8; ++c) {
        const float x0 = odd ? dq[4 * c] : dq[4 * c + 2], x1 = odd ? dq[4 * c + 1] : dq[4 * c + 3];
        const float y0 = __shfl_xor_sync(0xffffffffu, x0, 1), y1 = __shfl_xor_sync(0xffffffffu, x1, 1);
        const float4 v = odd ? make_float4(y0, y1, dq[4 * c + 2], dq[4 * c + 3])
                             : make_float4(dq[4 * c], dq[4 * c + 1], y0, y1);
        if (i < nq) atomicAdd(reinterpret_cast<float4*>(dst + 8 * c), v);
      }
    }
  }

  // dK (times scale) and dV, as v6.
  T* dkbase = static_cast<T*>(p.g.dk.data) + sr.bslot * p.g.dk.stride_b + kvh * p.g.dk.stride_h + sr.k0 * p.g.dk.stride_s;
  T* dvbase = static_cast<T*>(p.g.dv.data) + sr.bslot * p.g.dv.stride_b + kvh * p.g.dv.stride_h + sr.k0 * p.g.dv.stride_s;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = kw0 + wq * 16 + g + 8 * r;
    if (j >= nk) continue;
#pragma unroll
    for (int d = 0; d < D / 8; ++d) {
      const int col = d * 8 + 2 * t4;
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

// The backward's four maps: Q and dO in boxes of `bm` rows, K and V in boxes of `bn` rows.
template <typename T>
bool encode_bwd_tmaps(const BwdParams& p, int bm, int bn, CUtensorMap* tq, CUtensorMap* tdo, CUtensorMap* tk,
                      CUtensorMap* tv) {
  const auto& a = p.g.fwd;
  const auto& sh = a.shape;
  const int64_t slots = sh.varlen() ? 1 : sh.batch;
  return encode_rows_tmap<T>(tq, a.q, slots, sh.seqlen_q, sh.heads, sh.head_dim, bm) &&
         encode_rows_tmap<T>(tdo, p.g.dout, slots, sh.seqlen_q, sh.heads, sh.head_dim, bm) &&
         encode_rows_tmap<T>(tk, a.k, slots, sh.seqlen_k, sh.kv_heads, sh.head_dim, bn) &&
         encode_rows_tmap<T>(tv, a.v, slots, sh.seqlen_k, sh.kv_heads, sh.head_dim, bn);
}

// A call the kernel could have run but for TMA or the register count: said once on stderr (the caller falls back
// to v6 silently otherwise, and a benchmark would measure the wrong kernel).
inline void sm90_bwd_ws_note_fallback(const char* why) {
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) std::fprintf(stderr, "flashkit: warp-specialized Hopper backward not used: %s\n", why);
}

template <typename T, int D>
bool launch_flash_bwd_sm90_ws(const BwdParams& p, cudaStream_t stream) {
  if constexpr (D == 64 || D == 128) {
    constexpr Sm90BwdTile tile = sm90_bwd_ws_tile(D);
    constexpr int BM = tile.bm;
    using Cfg = Sm90BwdWsCfg<D, BM>;
    static_assert(tile.bn() == Cfg::BN, "tiles.hpp and the kernel agree on the key tile");
    auto kern = flash_bwd_sm90_ws_kernel<T, D, BM>;
    const auto& sh = p.g.fwd.shape;
    if (!sm90_kernel_usable(kern) || sh.seqlen_k <= 0 || sh.seqlen_q <= 0) return false;
    // setmaxnreg needs the launch's register count (kernel_has_regs, launch.hpp).
    if (!kernel_has_regs(kern, Cfg::kLaunchRegs)) {
      sm90_bwd_ws_note_fallback("the kernel was not built with 168 registers per thread (setmaxnreg budget)");
      return false;
    }
    CUtensorMap tq, tdo, tk, tv;
    if (!encode_bwd_tmaps<T>(p, BM, Cfg::BN, &tq, &tdo, &tk, &tv)) {
      sm90_bwd_ws_note_fallback("no TMA map for Q/dO/K/V (alignment, strides, or the driver refused it)");
      return false;
    }
    set_max_dynamic_smem(kern, Cfg::smem, "cudaFuncSetAttribute(flash backward sm90 ws)");
    const int64_t nblocks = (sh.max_seqlen_k + Cfg::BN - 1) / Cfg::BN;
    if (nblocks == 0) return true;
    dim3 grid(unsigned(nblocks), unsigned(sh.kv_heads), unsigned(sh.batch));
    kern<<<grid, Cfg::NT, Cfg::smem, stream>>>(p, tq, tdo, tk, tv);
    check_cuda(cudaGetLastError(), "flash backward (sm90 ws) launch");
    return true;
  } else {
    (void)p, (void)stream;
    return false;
  }
}

}  // namespace flashkit::cuda
