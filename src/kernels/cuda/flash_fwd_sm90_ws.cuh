// FlashAttention forward for Hopper (sm_90a), warp-specialized (the FA3 structure). One CTA per (query tile of 128
// rows, head, sequence) with three warpgroups:
//   warpgroup 2 (producer, 24 registers per thread): one thread streams K and V tiles with TMA into a STAGES-deep
//     ring of shared-memory buffers, each tracked by mbarriers: full (armed with the tile's byte count, completed by
//     the TMA unit) and empty (one arrival per consumer warp when it no longer reads the buffer). K runs one tile
//     ahead of V, the order in which the consumers need them.
//   warpgroups 0-1 (consumers, 64 query rows and 240 registers each: setmaxnreg moves the producer's registers to
//     them; a 9-warp CTA would be capped at 168 like a 12-warp one, the register file being split by warp slot):
//     Q once with cp.async (GQA packing as in flash_common.cuh),
//     then per key tile k: S_k = Q K_k^T (SS wgmma) and O += P_{k-1} V_{k-1} (RS wgmma) issued together, softmax of
//     S_k while the PV product runs, O rescaled once it is done. No CTA barrier in the loop.
//   Ping-pong (PINGPONG): the warpgroups take turns issuing their products (two named barriers), so one
//     warpgroup's softmax runs under the other's tensor-core work instead of both waiting in lock step.
// Each warpgroup computes only the key tiles its own 64 rows can see (causal diagonal, windows, rows past the end)
// and passes the others by, still taking its turn and releasing their buffers so the protocol stays balanced.
// PERSISTENT (d64/d128 with ping-pong, chosen by ws_persist_ctas in src/ops/attention_choice.cpp): one CTA per SM
// walks the work tiles of a static schedule (ws_schedule.hpp); the ring, the turns and each warpgroup's Q rows run
// on from tile to tile, so the next tile's loads overlap this one's tail and epilogue (docs/worklog v19).
// OVERLAP (persistent only; Tuning::sm90_ws_overlap): each warpgroup issues its next tile's Q loads under its last
// P V and that tile's first QK^T before writing this tile's O, so the O store runs under tensor-core work instead
// of between two of its turns (v23). TMA_O (with OVERLAP; Tuning::sm90_ws_overlap = 2): that store is a TMA store
// from O's own buffer, issued by one thread and not waited for, where the warpgroup's rows are one head's
// consecutive queries inside the sequence (v23b).
// DENSE (persistent only; FwdParams::ws_dense, ws_dense_fwd in src/ops/attention_choice.cpp): the common prefill call
// (fixed-length batch, no window, no softcap, the group not packed, head_dim == D). A tile's place, key range and
// row bounds come from 32-bit arithmetic on divisors prepared on the host (ws_schedule.hpp) instead of the general
// FwdTile walk (int64 divisions and products, per-row head_query), which ran on the consumers' path between tiles;
// the constants (no packing, q0 = 0, dreal = D) fold the general loaders and store to their one-head paths (v27).
// Scores, masking, softcap, online softmax, GQA packing, varlen and padded head dims follow flash_fwd_sm90.cuh.
// Included by flash_fwd_sm90_*.cu only.
#pragma once
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <type_traits>

#include "core/cuda_check.hpp"
#include "kernels/cuda/flash_api.hpp"
#include "kernels/cuda/flash_common.cuh"
#include "kernels/cuda/flash_fwd_sm90_tile.cuh"
#include "kernels/cuda/launch.hpp"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/cuda/ws_schedule.hpp"

namespace flashkit::cuda {

template <int D, int BN, int STAGES, bool PERSISTENT = false>
struct Sm90WsCfg {
  static constexpr int BM = 128, kConsumers = 256, NT = kConsumers + 128;
  static constexpr int kProducerWarp = kConsumers / 32;
  // __launch_bounds__(384, 1) gives 168 registers per thread; the reallocation must fit in that pool exactly.
  static constexpr int kLaunchRegs = 168, kProducerRegs = 24, kConsumerRegs = 240;
  static_assert(kProducerRegs * 128 + kConsumerRegs * kConsumers <= kLaunchRegs * NT,
                "register budgets exceed the pool");
  static constexpr uint32_t q_bytes = BM * D * 2, kv_bytes = BN * D * 2;
  static constexpr uint32_t kv_end = q_bytes + 2 * STAGES * kv_bytes;
  static constexpr uint32_t bar_bytes = 4 * STAGES * 8;  // 4 * STAGES mbarriers after the buffers
  // Persistent: O is staged in a buffer of its own where it fits (d64, d128 at BN 128), so that the next tile's Q
  // loads while this tile's O is written; otherwise in the Q panels, and the next Q loads after the epilogue.
  static constexpr bool own_o = PERSISTENT && kv_end + q_bytes + bar_bytes + 1024 <= 227 * 1024;
  static constexpr uint32_t o_off = own_o ? kv_end : 0;
  static constexpr uint32_t bar_off = kv_end + (own_o ? q_bytes : 0);
  static constexpr size_t smem = size_t(bar_off) + bar_bytes + 1024;  // + alignment slack
  static_assert(q_bytes % 1024 == 0 && kv_bytes % 1024 == 0 && (BN * 128) % 1024 == 0,
                "panels must stay 1024-byte aligned (TMA 128B swizzle and wgmma descriptors)");
  static_assert(BN <= 256, "a TMA box has at most 256 rows");
  static_assert(STAGES >= 2, "K runs one tile ahead of V: the ring needs two stages");
};

// Named barriers (0 is __syncthreads): Q in shared memory (all consumers), per-warpgroup epilogue, turns.
constexpr int kWsBarQ = 1, kWsBarEpi = 2, kWsBarTurn = 4;

// The K/V ring and the turn protocol of one work tile as a consumer warp sees them. Key tile k is ring use
// n0 + k - nb_begin (n0: the uses by a persistent CTA's earlier work tiles), in stage use % STAGES, the
// (use / STAGES)-th time there (its phase parity). The one-tile kernel counts from its tile's first key tile in int,
// the arithmetic it had before the persistent variant, so that its code stays what it was (worklog v19b).
// Every consumer warp waits on every tile's full barriers and arrives once on its empty barriers, reading it or not:
// a release is then never counted towards an earlier use of the buffer.
template <int STAGES, uint32_t KV_BYTES, bool PINGPONG, bool PERSISTENT>
struct WsConsumerRing {
  uint32_t bar0, sK0, sV0;
  int nb_begin, nb_end, lane, wg;
  uint32_t n0;

  __device__ __forceinline__ int stage_of(int k) const {
    if constexpr (PERSISTENT) return int((n0 + uint32_t(k - nb_begin)) % STAGES);
    else return (k - nb_begin) % STAGES;
  }
  __device__ __forceinline__ uint32_t parity_of(int k) const {
    if constexpr (PERSISTENT) return ((n0 + uint32_t(k - nb_begin)) / STAGES) & 1u;
    else return uint32_t((k - nb_begin) / STAGES) & 1u;
  }
  __device__ __forceinline__ uint32_t kbuf(int k) const { return sK0 + uint32_t(stage_of(k)) * KV_BYTES; }
  __device__ __forceinline__ uint32_t vbuf(int k) const { return sV0 + uint32_t(stage_of(k)) * KV_BYTES; }
  __device__ __forceinline__ void wait_k(int k) const { mbar_wait(bar0 + 8u * uint32_t(stage_of(k)), parity_of(k)); }
  __device__ __forceinline__ void wait_v(int k) const {
    mbar_wait(bar0 + 8u * uint32_t(STAGES + stage_of(k)), parity_of(k));
  }
  __device__ __forceinline__ void release_k(int k) const {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar0 + 8u * uint32_t(2 * STAGES + stage_of(k)));
  }
  __device__ __forceinline__ void release_v(int k) const {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar0 + 8u * uint32_t(3 * STAGES + stage_of(k)));
  }
  // Slot k in [nb_begin, nb_end] holds this warpgroup's products S_k (k < nb_end) and P_{k-1} V_{k-1}
  // (k > nb_begin), either possibly absent. Each warpgroup takes one turn per slot, warpgroup 0 first: it issues
  // on its own barrier's release and then releases the other's. Warpgroup 1 opens with one arrival and skips its
  // last, so the work tile leaves both turn barriers balanced. Persistent: the turns run on across work tiles
  // (warpgroup 0 takes the next tile's first turn as soon as warpgroup 1 issued its last product of this one):
  // warpgroup 1 opens once and never skips, and warpgroup 0 takes the dangling arrival after its last tile.
  __device__ __forceinline__ void turn_begin() const {
    if constexpr (PINGPONG) named_barrier(kWsBarTurn + wg, 256);
  }
  __device__ __forceinline__ void turn_end(int k) const {
    if constexpr (PINGPONG) {
      if (PERSISTENT || wg == 0 || k < nb_end) named_barrier_arrive(kWsBarTurn + (wg ^ 1), 256);
    }
  }
  __device__ __forceinline__ void idle_slot(int k) const {
    if (k < nb_end) {
      wait_k(k);
      release_k(k);
    }
    if (k > nb_begin) {
      wait_v(k - 1);
      release_v(k - 1);
    }
    turn_begin();
    turn_end(k);
  }
};

// One consumer warpgroup's slots of a work tile, Q already in shared memory: idle turns before and after its own key
// tiles [wk.wb, wk.we), whose products and online softmax accumulate into w.o. S accumulates in s.
// pre (persistent, OVERLAP): the first own slot's S = Q K^T is in s already, issued and waited for by the caller
// with its wait for K and its turn (only when that slot is the work tile's first, wk.wb == r.nb_begin).
// last_pv(): called once the warpgroup's last product is issued (every QK^T of its rows complete), before it is
// waited for. Returns whether it was called (not when the warpgroup has no key tile of its own).
// SET_O (DENSE): O was not zeroed; the first P V writes it (scale-d = 0).
template <int D, int BN, bool SET_O = false, typename Rows, typename Ring, typename LastPv>
__device__ __forceinline__ bool ws_consume_slots_with(Rows& w, const WarpgroupKeys& wk, const Ring& r, uint32_t sQ,
                                                      float (&s)[BN / 2], bool pre, LastPv&& last_pv) {
  float alpha[2];
  uint32_t pa[BN / 16][4];
  int k = r.nb_begin;
  bool called = false;
  for (; k < wk.wb; ++k) r.idle_slot(k);
  if (wk.wb < wk.we) {
    // First tile: S only (V_{k-1}, if any, is not this warpgroup's).
    if (!pre) r.wait_k(k);
    if (k > r.nb_begin) {
      r.wait_v(k - 1);
      r.release_v(k - 1);
    }
    if (!pre) {  // (waited for inside the branch: ptxas serializes every wgmma when one is in flight at a join)
      r.turn_begin();
      w.issue_qk(s, sQ, r.kbuf(k));
      r.turn_end(k);
      wgmma_wait<0>();
    }
    wgmma_fence_regs<BN / 2>(s);
    r.release_k(k);
    w.softmax(s, k, alpha);  // O is still zero: nothing to rescale
    Rows::pack_p(s, pa);
    // Steady state: S_k and P_{k-1} V_{k-1} in one turn; the softmax of S_k runs while P V does.
    for (++k; k < wk.we; ++k) {
      r.wait_k(k);
      r.turn_begin();
      w.issue_qk(s, sQ, r.kbuf(k));
      r.wait_v(k - 1);
      w.issue_pv(pa, r.vbuf(k - 1), SET_O ? int(k - 1 > wk.wb) : 1);
      r.turn_end(k);
      wgmma_wait<1>();
      wgmma_fence_regs<BN / 2>(s);
      r.release_k(k);
      w.softmax(s, k, alpha);
      wgmma_wait<0>();
      wgmma_fence_regs<D / 2>(w.o);
      wgmma_fence_regs<BN / 4>(&pa[0][0]);
      r.release_v(k - 1);
      w.rescale_o(alpha);
      Rows::pack_p(s, pa);
    }
    // Last product P_{we-1} V_{we-1}, in slot we (K_we, if any, is not this warpgroup's).
    if (k < r.nb_end) {
      r.wait_k(k);
      r.release_k(k);
    }
    r.wait_v(k - 1);
    r.turn_begin();
    w.issue_pv(pa, r.vbuf(k - 1), SET_O ? int(k - 1 > wk.wb) : 1);
    r.turn_end(k);
    last_pv();
    called = true;
    wgmma_wait<0>();
    wgmma_fence_regs<D / 2>(w.o);
    r.release_v(k - 1);
    ++k;
  }
  for (; k <= r.nb_end; ++k) r.idle_slot(k);
  return called;
}
template <int D, int BN, bool SET_O = false, typename Rows, typename Ring>
__device__ __forceinline__ void ws_consume_slots(Rows& w, const WarpgroupKeys& wk, const Ring& r, uint32_t sQ) {
  float s[BN / 2];
  ws_consume_slots_with<D, BN, SET_O>(w, wk, r, sQ, s, false, [] {});
}

// PERSISTENT: gridDim.x CTAs (one per SM) walk the work tiles in the static order of ws_schedule.hpp. Barrier init,
// tensor-map prefetch and setmaxnreg happen once; the K/V ring's stage and phase run on a count of key tiles that
// continues across work tiles, so the producer loads the next tile's K/V as soon as the ring frees a buffer (under
// the current tile's last products and epilogue); each consumer warpgroup loads its next Q rows during its
// epilogue (own_o) or right after it, and the turns continue, so warpgroup 0 starts the next tile while warpgroup
// 1 finishes this one. Otherwise one CTA per work tile (grid: query tiles x heads x batch): the two share the ring,
// the turns and the slot loop above, and the persistent machinery is absent from the one-tile kernel (if constexpr).
// tmap_o: O's TMA map (encode_o_tmap), read only with TMA_O.
template <typename T, int D, int BN, int STAGES, bool PINGPONG, bool PERSISTENT, bool OVERLAP = false,
          bool TMA_O = false, bool DENSE = false>
__global__ void __launch_bounds__(Sm90WsCfg<D, BN, STAGES, PERSISTENT>::NT, 1)
    flash_fwd_sm90_ws_kernel(const FwdParams p, const __grid_constant__ CUtensorMap tmap_k,
                             const __grid_constant__ CUtensorMap tmap_v, const __grid_constant__ CUtensorMap tmap_o) {
#if FK_SM90_ENABLED
  using Cfg = Sm90WsCfg<D, BN, STAGES, PERSISTENT>;
  using Rows = Sm90FwdRows<T, D, BN, Cfg::BM>;
  using Ring = WsConsumerRing<STAGES, Cfg::kv_bytes, PINGPONG, PERSISTENT>;
  constexpr int BM = Cfg::BM, CH = D / 8;
  static_assert(!OVERLAP || (PERSISTENT && PINGPONG && Cfg::own_o),
                "the epilogue overlap needs the persistent grid's turns and O in a buffer of its own");
  static_assert(!TMA_O || OVERLAP, "the TMA store of O is a variant of the epilogue overlap");
  static_assert(!DENSE || PERSISTENT, "the dense bookkeeping is the persistent grid's");
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  uint8_t* smem = smem_raw + (base - smem_u32(smem_raw));
  const uint32_t sQ = base;
  const uint32_t sK0 = sQ + Cfg::q_bytes;
  const uint32_t sV0 = sK0 + STAGES * Cfg::kv_bytes;
  const uint32_t bar0 = base + Cfg::bar_off;
  auto full_k = [&](int st) { return bar0 + 8u * uint32_t(st); };
  auto full_v = [&](int st) { return bar0 + 8u * uint32_t(STAGES + st); };
  auto empty_k = [&](int st) { return bar0 + 8u * uint32_t(2 * STAGES + st); };
  auto empty_v = [&](int st) { return bar0 + 8u * uint32_t(3 * STAGES + st); };

  const kernels::AttentionFwdArgs& a = p.a;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  auto init_barriers = [&](bool needed) {
    if (needed && tid == 0) {
#pragma unroll
      for (int st = 0; st < STAGES; ++st) {
        mbar_init(full_k(st), 1);  // the producer's arrive.expect_tx; the TMA bytes complete the phase
        mbar_init(full_v(st), 1);
        mbar_init(empty_k(st), Cfg::kConsumers / 32);  // one arrival per consumer warp
        mbar_init(empty_v(st), Cfg::kConsumers / 32);
      }
      fence_mbar_init();
    }
    __syncthreads();  // the last CTA-wide barrier: the producer warpgroup leaves after its loads
  };

  if constexpr (!PERSISTENT) {
    const int mb = int(gridDim.x) - 1 - int(blockIdx.x);  // longest (causal) tiles first
    const FwdTile t = fwd_tile(a, p.pack_gqa, mb, BM, BN);
    if (t.m0 >= t.rows) return;
    const kernels::SeqRange& sr = t.sr;
    const int64_t nq = sr.nq, nk = sr.nk, rows = t.rows, m0 = t.m0;
    const int kvh = t.kvh, dreal = t.dreal;
    const TileRows& trows = t.trows;
    // Key tiles of the CTA: the union of its rows' visible ranges (both warpgroups walk all of them).
    const int nb_begin = t.keys.nb_begin, nb_end = t.keys.nb_end, ntiles = nb_end - nb_begin;
    init_barriers(ntiles > 0);

    if (tid >= Cfg::kConsumers) {
      setmaxnreg_dec<Cfg::kProducerRegs>();  // the whole warpgroup, before its other warps leave
      if (warp == Cfg::kProducerWarp && lane == 0 && ntiles > 0) {
        prefetch_tmap(&tmap_k);
        prefetch_tmap(&tmap_v);
        const int bslot = int(sr.bslot);
        // Waits until every consumer warp released the buffer's previous use, then loads key tile k (D/64 boxes
        // of 64 columns x BN keys, one panel each) and arms its full barrier with the byte count.
        auto load = [&](const CUtensorMap* map, uint32_t buf0, uint32_t full, uint32_t empty, int k) {
          const int u = k - nb_begin;
          if (u >= STAGES) mbar_wait(empty, uint32_t(u / STAGES - 1) & 1u);
          mbar_arrive_expect_tx(full, Cfg::kv_bytes);
          const uint32_t dst = buf0 + uint32_t(u % STAGES) * Cfg::kv_bytes;
          const int row = int(sr.k0) + k * BN;
#pragma unroll
          for (int pnl = 0; pnl < D / 64; ++pnl)
            tma_load_4d(dst + pnl * (BN * 128), map, full, 64 * pnl, row, kvh, bslot);
        };
        for (int k = nb_begin; k <= nb_end; ++k) {
          if (k < nb_end) load(&tmap_k, sK0, full_k((k - nb_begin) % STAGES), empty_k((k - nb_begin) % STAGES), k);
          if (k > nb_begin)
            load(&tmap_v, sV0, full_v((k - 1 - nb_begin) % STAGES), empty_v((k - 1 - nb_begin) % STAGES), k - 1);
        }
      }
      return;
    }

    // ---- consumers ----
    setmaxnreg_inc<Cfg::kConsumerRegs>();
    const int wg = tid >> 7;
    // This warpgroup's own key tiles [wk.wb, wk.we) and its rows' state (flash_fwd_sm90_tile.cuh).
    const WarpgroupKeys wk = warpgroup_keys(a.mask, trows, m0 + 64 * wg, rows, nk, BN, nb_begin, nb_end);
    Rows w(a, trows, m0, rows, nq, nk, wk);
    const Ring r{bar0, sK0, sV0, nb_begin, nb_end, lane, wg, 0u};
    if (ntiles > 0) {
      const T* qbase = static_cast<const T*>(a.q.data) + sr.bslot * a.q.stride_b;
      load_q_tile<T, BM, CH, Cfg::kConsumers>(sQ, qbase, a.q, sr.q0, trows, m0, rows, dreal,
                                              [](int rr, int c) { return pswz<BM>(rr, c); });
      cp_async_commit();
      cp_async_wait<0>();
      fence_proxy_async();  // cp.async writes -> the tensor cores' async proxy
      named_barrier(kWsBarQ, Cfg::kConsumers);
      if constexpr (PINGPONG) {
        if (wg == 1) named_barrier_arrive(kWsBarTurn + 0, 256);  // warpgroup 0 takes the first turn
      }
      ws_consume_slots<D, BN>(w, wk, r, sQ);
    }
    // Epilogue (every warp of this warpgroup is past its last wgmma reading Q before O is staged there).
    w.store(sr, trows, smem, m0, rows, dreal, kWsBarEpi + wg);
  } else {
    uint8_t* const sO = smem + Cfg::o_off;  // the Q panels unless own_o
    // Work tiles by a linear tile index (ws_schedule.hpp; fewer than kWsMaxTiles tiles, the choice's condition).
    // Only the index is carried from tile to tile: the tile's place is recomputed from it where needed (carrying
    // FwdTile across the main loop spills the consumers' registers).
    const WsDenseGeom& dg = p.ws_dense_geom;
    auto tile_at = [&](int i) -> FwdTile {
      if constexpr (DENSE) {
        // Every field a constant or 32-bit (widened where FwdTile is int64): pack, q0 and dreal fold downstream.
        const WsDenseTile c = ws_dense_tile(dg, i);
        FwdTile t;
        t.sr = kernels::SeqRange{c.b, 0, dg.seqlen_q, 0, dg.seqlen_k};
        const int m0 = c.mb * BM, r1 = (m0 + BM < dg.seqlen_q ? m0 + BM : dg.seqlen_q) - 1;
        t.rows = dg.seqlen_q;
        t.m0 = m0;
        t.kvh = c.kvh;
        t.dreal = D;
        t.trows = TileRows{false, 1, dg.seqlen_q, c.h, c.kvh};
        const WsDenseKeys k = ws_dense_keys(dg, a.mask.causal, m0, r1, BN);
        t.keys = TileKeys{k.lo_max, k.hi_min, k.nb_begin, k.nb_end};
        return t;
      }
      const int hblocks = int(p.pack_gqa ? a.shape.kv_heads : a.shape.heads);
      const int64_t rows = p.pack_gqa ? a.shape.heads / a.shape.kv_heads * a.shape.max_seqlen_q : a.shape.max_seqlen_q;
      const WsTileCoord c = ws_tile_coord(i, int((rows + BM - 1) / BM), hblocks);
      return fwd_tile_at(a, p.pack_gqa, c.mb, c.hblk, c.bslot, BM, BN);
    };
    // The CTA's next work tile with rows (-1: none left). Every thread walks the same sequence.
    int round = 0;
    auto next_index = [&]() -> int {
      if constexpr (DENSE) {  // every tile has rows (fixed length): the first of the CTA's rounds inside the grid
        const int ctas = int(gridDim.x);
        for (; round * ctas < dg.total; ++round) {
          const int i = ws_tile_of(int(blockIdx.x), round, ctas);
          if (i < dg.total) {
            ++round;
            return i;
          }
        }
        return -1;
      }
      const int64_t rows = p.pack_gqa ? a.shape.heads / a.shape.kv_heads * a.shape.max_seqlen_q : a.shape.max_seqlen_q;
      const int total = int((rows + BM - 1) / BM) * int(p.pack_gqa ? a.shape.kv_heads : a.shape.heads) *
                        int(a.shape.batch);
      const int ctas = int(gridDim.x);
      for (; round * ctas < total; ++round) {
        const int i = ws_tile_of(int(blockIdx.x), round, ctas);
        if (i >= total) continue;
        const FwdTile t = tile_at(i);
        if (t.m0 < t.rows) {
          ++round;
          return i;
        }
      }
      return -1;
    };
    // The compiler may not merge a tile's recomputation with an earlier one (that would carry it again).
    auto opaque = [](int i) {
      asm volatile("" : "+r"(i));
      return i;
    };
    int cur = next_index();
    if (cur < 0) return;
    FwdTile t = tile_at(cur);
    init_barriers(true);

    uint32_t n0 = 0;  // ring uses before the current work tile (WsConsumerRing)
    if (tid >= Cfg::kConsumers) {
      setmaxnreg_dec<Cfg::kProducerRegs>();  // the whole warpgroup, before its other warps leave
      if (warp == Cfg::kProducerWarp && lane == 0) {
        prefetch_tmap(&tmap_k);
        prefetch_tmap(&tmap_v);
        for (; cur >= 0; cur = next_index()) {
          const FwdTile t = tile_at(cur);
          const int nb_begin = t.keys.nb_begin, nb_end = t.keys.nb_end;
          const int bslot = int(t.sr.bslot), kvh = t.kvh;
          const int64_t k0 = t.sr.k0;
          // Waits until every consumer warp released the buffer's previous use, then loads key tile k (D/64 boxes
          // of 64 columns x BN keys, one panel each) and arms its full barrier with the byte count.
          auto load = [&](const CUtensorMap* map, uint32_t buf0, bool is_k, int k) {
            const uint32_t n = n0 + uint32_t(k - nb_begin);
            const int st = int(n % STAGES);
            if (n >= STAGES) mbar_wait(is_k ? empty_k(st) : empty_v(st), (n / STAGES - 1) & 1u);
            const uint32_t full = is_k ? full_k(st) : full_v(st);
            mbar_arrive_expect_tx(full, Cfg::kv_bytes);
            const uint32_t dst = buf0 + uint32_t(st) * Cfg::kv_bytes;
            const int row = int(k0) + k * BN;
#pragma unroll
            for (int pnl = 0; pnl < D / 64; ++pnl)
              tma_load_4d(dst + pnl * (BN * 128), map, full, 64 * pnl, row, kvh, bslot);
          };
          if (nb_begin < nb_end) {
            for (int k = nb_begin; k <= nb_end; ++k) {
              if (k < nb_end) load(&tmap_k, sK0, true, k);
              if (k > nb_begin) load(&tmap_v, sV0, false, k - 1);
            }
            n0 += uint32_t(nb_end - nb_begin);
          }
        }
      }
      return;
    }

    // ---- consumers ----
    setmaxnreg_inc<Cfg::kConsumerRegs>();
    const int wg = tid >> 7;
    // Q of a work tile into this warpgroup's 64 rows of the panels (the only ones its QK^T and epilogue touch;
    // cp.async, committed; the caller waits), and the barrier after which it is there (or after which the rows may
    // be written): per warpgroup, so neither waits for the other at a tile boundary.
    auto issue_q = [&](const FwdTile& u) {
      const T* qbase = static_cast<const T*>(a.q.data) + u.sr.bslot * a.q.stride_b;
      bool done = false;
      if constexpr (OVERLAP || DENSE) {  // (DENSE: the serial epilogue's tiles too)
        // One head's consecutive queries (the group not packed): each thread's chunks through one source pointer
        // stepped by 128 / CH rows (the general loader's per-chunk head_query and int64 products are ~45
        // instructions a chunk, on the warpgroup's path between tiles; v23). Rows past the end are zero-filled.
        if (!u.trows.pack) {
          constexpr int kStep = 128 / CH;
          const int wtid = tid & 127, c = wtid % CH, r0 = wtid / CH;
          const int64_t g0 = u.m0 + 64 * wg + r0;
          const T* src = qbase + (u.sr.q0 + g0) * a.q.stride_s + int64_t(u.trows.hblk) * a.q.stride_h + c * 8;
          const int64_t step = int64_t(kStep) * a.q.stride_s;
          const bool col_ok = c * 8 < u.dreal;
#pragma unroll
          for (int j = 0; j < 64 / kStep; ++j) {
            const bool ok = col_ok && g0 + j * kStep < u.rows;
            cp_async16(sQ + pswz<BM>(64 * wg + r0 + j * kStep, c), ok ? src + j * step : qbase, ok);
          }
          done = true;
        }
      }
      if (!done)
        load_q_rows<T, 64, CH, 128>(tid & 127, sQ, qbase, a.q, u.sr.q0, u.trows, u.m0 + 64 * wg, u.rows, u.dreal,
                                    [wg](int rr, int c) { return pswz<BM>(64 * wg + rr, c); });
      cp_async_commit();
    };
    auto q_barrier = [&]() { named_barrier(kWsBarEpi + wg, 128); };
    bool q_issued = false;  // the current tile's Q was issued during the previous tile's epilogue
    bool opened = false;    // warpgroup 1 gave warpgroup 0 its first turn
    // Q of the current tile in shared memory for every warp of this warpgroup; warpgroup 1 opens the turns once.
    auto q_ready = [&]() {
      cp_async_wait<0>();
      fence_proxy_async();  // cp.async writes -> the tensor cores' async proxy
      q_barrier();
      if constexpr (PINGPONG) {
        if (wg == 1 && !opened) named_barrier_arrive(kWsBarTurn + 0, 256);  // warpgroup 0 first
      }
      opened = true;
    };
    // OVERLAP (v23): S of the next tile's first key tile is issued before this tile's epilogue, into s_pre, so the
    // epilogue runs under that product and the other warpgroup's turn instead of between them; the next tile's Q
    // rows are issued as soon as this warpgroup's last product is (its last QK^T is complete by then).
    float s_pre[BN / 2];
    bool pre = false;  // s_pre holds the current tile's first S, issued with its turn
    // This warpgroup's own key tiles of a work tile [wb, we) and its rows' state (flash_fwd_sm90_tile.cuh); DENSE:
    // the same from ws_dense_keys and the rows' causal bound, in int.
    auto wg_keys = [&](const FwdTile& u) -> WarpgroupKeys {
      if constexpr (DENSE) {
        const int w0 = int(u.m0) + 64 * wg, nb_begin = u.keys.nb_begin, nb_end = u.keys.nb_end;
        WarpgroupKeys k{nb_begin, nb_begin, 0, 0};
        if (w0 >= dg.seqlen_q) return k;
        const WsDenseKeys d =
            ws_dense_keys(dg, a.mask.causal, w0, (w0 + 64 < dg.seqlen_q ? w0 + 64 : dg.seqlen_q) - 1, BN);
        k.lo_max = d.lo_max, k.hi_min = d.hi_min;
        k.wb = d.nb_begin > nb_begin ? d.nb_begin : nb_begin;
        k.we = d.nb_end < nb_end ? d.nb_end : nb_end;
        if (k.wb >= k.we) k.wb = k.we = nb_begin;
        return k;
      } else {
        return warpgroup_keys(a.mask, u.trows, u.m0 + 64 * wg, u.rows, u.sr.nk, BN, u.keys.nb_begin, u.keys.nb_end);
      }
    };
    auto make_rows = [&](const FwdTile& u, const WarpgroupKeys& wk) -> Rows {
      if constexpr (DENSE) return Rows(typename Rows::Dense{}, a, dg, a.mask.causal, int(u.m0), wk);
      else return Rows(a, u.trows, u.m0, u.rows, u.sr.nq, u.sr.nk, wk);
    };
    while (cur >= 0) {
      t = tile_at(opaque(cur));
      // Key tiles of the work tile: the union of its rows' visible ranges (both warpgroups walk all of them).
      const int nb_begin = t.keys.nb_begin, nb_end = t.keys.nb_end, ntiles = nb_end - nb_begin;
      // This warpgroup's own key tiles [wk.wb, wk.we) and its rows' state (flash_fwd_sm90_tile.cuh).
      const WarpgroupKeys wk = wg_keys(t);
      Rows w = make_rows(t, wk);
      const Ring r{bar0, sK0, sV0, nb_begin, nb_end, lane, wg, n0};
      // The next work tile and whether it has key tiles; its Q rows are issued once this warpgroup's Q rows are
      // free: all its warps past their last QK^T of this tile and, when O is staged there, past reading it back.
      int next = -1;
      bool next_q = false;
      auto find_next = [&]() {
        next = next_index();
        const FwdTile nt = tile_at(next < 0 ? cur : next);
        next_q = next >= 0 && nt.keys.nb_end > nt.keys.nb_begin;
        return nt;
      };
      // OVERLAP: whether this warpgroup's first slot of the next tile is one of its own key tiles (then its S is
      // issued before this tile's epilogue), and that tile's key tiles; decided with the next tile's Q, under the
      // last product, so that only three ints wait for the epilogue.
      bool pre_next = false;
      int nb_begin_next = 0, nb_end_next = 0;
      auto plan_next = [&]() {
        const FwdTile nt = find_next();
        q_barrier();
        if (next_q) {
          issue_q(nt);
          const WarpgroupKeys nwk = wg_keys(nt);
          pre_next = nwk.wb == nt.keys.nb_begin && nwk.wb < nwk.we;
          nb_begin_next = nt.keys.nb_begin, nb_end_next = nt.keys.nb_end;
        }
      };
      bool found = false;
      if (ntiles > 0) {
        if (!pre) {
          if (!q_issued) issue_q(t);
          q_ready();
        }
        if constexpr (OVERLAP) {
          found = ws_consume_slots_with<D, BN, DENSE>(w, wk, r, sQ, s_pre, pre, plan_next);
        } else {
          ws_consume_slots<D, BN, DENSE>(w, wk, r, sQ);
        }
      }
      n0 += uint32_t(ntiles);

      // Epilogue (when not issued above: the next tile's Q during it when O has its own buffer, after it otherwise).
      if constexpr (OVERLAP) {
        if (!found) plan_next();
      } else {
        const FwdTile nt = find_next();
        if constexpr (Cfg::own_o) {
          q_barrier();
          if (next_q) issue_q(nt);
        }
      }
      // The staging buffer's rows of this warpgroup are free once every warp of it is past its last QK^T (Q
      // panels) or past its reads of the previous tile's O (own_o): the named barrier in store().
      auto epilogue = [&]() {
        const FwdTile te = tile_at(opaque(cur));
        w.template store<OVERLAP || DENSE, TMA_O>(te.sr, te.trows, sO, te.m0, te.rows, te.dreal, kWsBarEpi + wg,
                                                  &tmap_o);
      };
      pre = false;
      if constexpr (OVERLAP) {
        // The next tile's first S, with its turn, when its first key tile is this warpgroup's own (not: idle slots
        // come first, or no keys at all); this warpgroup's epilogue runs under it and it is waited for after, in
        // the same branch (an accumulator in flight across a join would make ptxas serialize every wgmma).
        if (pre_next) {
          q_ready();
          const Ring nr{bar0, sK0, sV0, nb_begin_next, nb_end_next, lane, wg, n0};
          nr.wait_k(nb_begin_next);
          nr.turn_begin();
          w.issue_qk(s_pre, sQ, nr.kbuf(nb_begin_next));
          nr.turn_end(nb_begin_next);
          epilogue();
          wgmma_wait<0>();
          pre = true;
        } else {
          epilogue();
        }
      } else {
        epilogue();
      }
      if constexpr (!Cfg::own_o) {
        q_barrier();
        if (next_q) issue_q(tile_at(opaque(next)));
      }
      q_issued = next_q;
      cur = next;
    }
    if constexpr (TMA_O) {
      if ((tid & 127) == 0) bulk_wait_group<0>();  // O written before the CTA (and its shared memory) goes
    }
    if constexpr (PINGPONG) {
      if (wg == 0 && opened) named_barrier(kWsBarTurn + 0, 256);  // warpgroup 1's arrival after its last turn
    }
  }
#else
  __trap();
#endif
}

// TMA maps (encode_rows_tmap, tma.cuh) of K or V with a box of one panel, 64 columns x BN keys, ...
template <typename T>
bool encode_kv_tmap(CUtensorMap* map, const kernels::AttnOperand& t, const kernels::AttentionShape& sh, int bn) {
  return encode_rows_tmap<T>(map, t, sh.varlen() ? 1 : sh.batch, sh.seqlen_k, sh.kv_heads, sh.head_dim, bn);
}

// ... and of O for the store of whole 64-row blocks of one head (box: 64 columns x 64 rows).
template <typename T>
bool encode_o_tmap(CUtensorMap* map, const kernels::AttnOperand& t, const kernels::AttentionShape& sh) {
  return encode_rows_tmap<T>(map, t, sh.varlen() ? 1 : sh.batch, sh.seqlen_q, sh.heads, sh.head_dim, 64);
}

// A call the kernel could have run but for TMA or the register count: said once on stderr, since the caller falls
// back to another kernel silently (tests and benchmarks would otherwise measure the wrong one).
inline void sm90_ws_note_fallback(const char* why) {
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) std::fprintf(stderr, "flashkit: warp-specialized Hopper forward not used: %s\n", why);
}

template <typename T, int D, int BN, int STAGES, bool PINGPONG, bool PERSISTENT = false, bool OVERLAP = false,
          bool TMA_O = false, bool DENSE = false>
bool launch_fwd_sm90_ws_cfg(const FwdParams& p0, cudaStream_t stream) {
  using Cfg = Sm90WsCfg<D, BN, STAGES, PERSISTENT>;
  static_assert(Cfg::smem <= 227 * 1024, "shared memory per CTA exceeds the opt-in limit");
  FwdParams p = p0;
  if constexpr (DENSE) {  // the tile grid's divisors and key tiles (ws_schedule.hpp), once per call
    const auto& sh = p.a.shape;
    p.ws_dense_geom = make_ws_dense_geom(sh.batch, sh.heads, sh.kv_heads, sh.seqlen_q, sh.seqlen_k, Cfg::BM, BN);
  }
  // O that TMA cannot describe (alignment, strides): the same kernel with its STG store (O is written either way);
  // said once, since the cost record still names the TMA store.
  CUtensorMap tmap_o{};
  if constexpr (TMA_O) {
    if (!encode_o_tmap<T>(&tmap_o, p.a.o, p.a.shape)) {
      static std::atomic<bool> said{false};
      if (!said.exchange(true))
        std::fprintf(stderr, "flashkit: Hopper forward: no TMA map for O, written without TMA stores\n");
      // (the general kernel, DENSE or not: one instantiation fewer per type and dim for a rare case)
      return launch_fwd_sm90_ws_cfg<T, D, BN, STAGES, PINGPONG, PERSISTENT, OVERLAP, false>(p, stream);
    }
  }
  auto kern = flash_fwd_sm90_ws_kernel<T, D, BN, STAGES, PINGPONG, PERSISTENT, OVERLAP, TMA_O, DENSE>;
  // No keys at all (every row's output is 0): no TMA map to build (K/V may be empty); the other kernel does it.
  if (!sm90_kernel_usable(kern) || p.a.shape.seqlen_k <= 0) return false;
  // setmaxnreg needs the launch's register count (kernel_has_regs, launch.hpp).
  const bool regs_ok = kernel_has_regs(kern, Cfg::kLaunchRegs);
  if (!regs_ok) {
    sm90_ws_note_fallback("the kernel was not built with 168 registers per thread (setmaxnreg budget)");
    return false;
  }
  CUtensorMap tmap_k, tmap_v;
  if (!encode_kv_tmap<T>(&tmap_k, p.a.k, p.a.shape, BN) || !encode_kv_tmap<T>(&tmap_v, p.a.v, p.a.shape, BN)) {
    sm90_ws_note_fallback("no TMA map for K/V (alignment, strides, or the driver refused it)");
    return false;
  }
  set_max_dynamic_smem(kern, Cfg::smem, "cudaFuncSetAttribute(flash forward sm90 ws)");
  const auto& sh = p.a.shape;
  const int64_t group = sh.heads / sh.kv_heads;
  const int64_t rows = p.pack_gqa ? group * sh.max_seqlen_q : sh.max_seqlen_q;
  const int64_t mblocks = (rows + Cfg::BM - 1) / Cfg::BM;
  if (mblocks == 0) return true;
  // Persistent: p.ws_persist_ctas CTAs (the choice's ws_persist_ctas) walk the tiles of the grid below.
  const dim3 grid = PERSISTENT ? dim3(unsigned(p.ws_persist_ctas))
                               : dim3(unsigned(mblocks), unsigned(p.pack_gqa ? sh.kv_heads : sh.heads), unsigned(sh.batch));
  kern<<<grid, Cfg::NT, Cfg::smem, stream>>>(p, tmap_k, tmap_v, tmap_o);
  check_cuda(cudaGetLastError(), "flash forward (sm90 ws) launch");
  return true;
}

// pingpong = false (Tuning::sm90_ws_pingpong) lets the two consumer warpgroups issue freely (for measuring the
// ping-pong). p.ws_persist_ctas > 0: the persistent grid (d64/d128 with ping-pong; the choice asks for no other),
// with p.ws_overlap_epilogue its epilogue under the next tile's first product (v23), and with p.ws_tma_store_o that
// epilogue's O written by TMA (v23b); p.ws_dense the DENSE variant of the serial and the TMA-store epilogues
// (ws_dense_fwd asks for no other; v27).
template <typename T, int D>
bool launch_flash_fwd_sm90_ws(const FwdParams& p, int bn, bool pingpong, cudaStream_t stream) {
  if (p.num_splits != 1) return false;
  if constexpr (D == 64 || D == 128) {
    constexpr Sm90WsTile w = sm90_ws_wide_tile(D);
    if (bn == w.bn)
      return pingpong ? launch_fwd_sm90_ws_cfg<T, D, w.bn, w.stages, true>(p, stream)
                      : launch_fwd_sm90_ws_cfg<T, D, w.bn, w.stages, false>(p, stream);
  }
  if constexpr (D == 64 || D == 128 || D == 256) {
    // <T, D, BN, stages, ping-pong>: 112 KB (d64), 160 KB (d128) and 224 KB (d256) of shared memory, one CTA per SM.
    constexpr Sm90WsTile w = sm90_ws_tile(D);
    static_assert(w.bm == Sm90WsCfg<D, w.bn, w.stages>::BM, "tiles.hpp and the kernel agree on the row tile");
    if (bn != w.bn) return false;
    if constexpr (D != 256) {
      if (p.ws_persist_ctas > 0 && pingpong && p.ws_dense) {
        if (!p.ws_overlap_epilogue)
          return launch_fwd_sm90_ws_cfg<T, D, w.bn, w.stages, true, true, false, false, true>(p, stream);
        if (p.ws_tma_store_o)
          return launch_fwd_sm90_ws_cfg<T, D, w.bn, w.stages, true, true, true, true, true>(p, stream);
      }
      if (p.ws_persist_ctas > 0 && pingpong)
        return p.ws_overlap_epilogue
                   ? (p.ws_tma_store_o ? launch_fwd_sm90_ws_cfg<T, D, w.bn, w.stages, true, true, true, true>(p, stream)
                                       : launch_fwd_sm90_ws_cfg<T, D, w.bn, w.stages, true, true, true>(p, stream))
                   : launch_fwd_sm90_ws_cfg<T, D, w.bn, w.stages, true, true>(p, stream);
    }
    return pingpong ? launch_fwd_sm90_ws_cfg<T, D, w.bn, w.stages, true>(p, stream)
                    : launch_fwd_sm90_ws_cfg<T, D, w.bn, w.stages, false>(p, stream);
  } else {
    (void)bn, (void)pingpong, (void)stream;
    return false;
  }
}

}  // namespace flashkit::cuda
