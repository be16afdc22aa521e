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

namespace flashkit::cuda {

template <int D, int BN, int STAGES>
struct Sm90WsCfg {
  static constexpr int BM = 128, kConsumers = 256, NT = kConsumers + 128;
  static constexpr int kProducerWarp = kConsumers / 32;
  // __launch_bounds__(384, 1) gives 168 registers per thread; the reallocation must fit in that pool exactly.
  static constexpr int kLaunchRegs = 168, kProducerRegs = 24, kConsumerRegs = 240;
  static_assert(kProducerRegs * 128 + kConsumerRegs * kConsumers <= kLaunchRegs * NT,
                "register budgets exceed the pool");
  static constexpr uint32_t q_bytes = BM * D * 2, kv_bytes = BN * D * 2;
  static constexpr uint32_t bar_off = q_bytes + 2 * STAGES * kv_bytes;  // 4 * STAGES mbarriers after the buffers
  static constexpr size_t smem = size_t(bar_off) + 4 * STAGES * 8 + 1024;  // + alignment slack
  static_assert(q_bytes % 1024 == 0 && kv_bytes % 1024 == 0 && (BN * 128) % 1024 == 0,
                "panels must stay 1024-byte aligned (TMA 128B swizzle and wgmma descriptors)");
  static_assert(BN <= 256, "a TMA box has at most 256 rows");
  static_assert(STAGES >= 2, "K runs one tile ahead of V: the ring needs two stages");
};

// Named barriers (0 is __syncthreads): Q in shared memory (all consumers), per-warpgroup epilogue, turns.
constexpr int kWsBarQ = 1, kWsBarEpi = 2, kWsBarTurn = 4;

template <typename T, int D, int BN, int STAGES, bool PINGPONG>
__global__ void __launch_bounds__(Sm90WsCfg<D, BN, STAGES>::NT, 1)
    flash_fwd_sm90_ws_kernel(const FwdParams p, const __grid_constant__ CUtensorMap tmap_k,
                             const __grid_constant__ CUtensorMap tmap_v) {
#if FK_SM90_ENABLED
  using Cfg = Sm90WsCfg<D, BN, STAGES>;
  using Rows = Sm90FwdRows<T, D, BN, Cfg::BM>;
  constexpr int BM = Cfg::BM, CH = D / 8;
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
  const int mb = int(gridDim.x) - 1 - int(blockIdx.x);  // longest (causal) tiles first
  const FwdTile t = fwd_tile(a, p.pack_gqa, mb, BM, BN);
  if (t.m0 >= t.rows) return;
  const kernels::SeqRange& sr = t.sr;
  const int64_t nq = sr.nq, nk = sr.nk, rows = t.rows, m0 = t.m0;
  const int kvh = t.kvh, dreal = t.dreal;
  const TileRows& trows = t.trows;
  // Key tiles of the CTA: the union of its rows' visible ranges (both warpgroups walk all of them).
  const TileKeys& tk = t.keys;
  const int nb_begin = tk.nb_begin, nb_end = tk.nb_end, ntiles = nb_end - nb_begin;

  if (ntiles > 0 && tid == 0) {
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

  // Tile k (absolute key-tile index) of the ring: stage and the parity of its use of that stage.
  auto stage_of = [&](int k) { return (k - nb_begin) % STAGES; };
  auto parity_of = [&](int k) { return uint32_t((k - nb_begin) / STAGES) & 1u; };

  if (tid >= Cfg::kConsumers) {
    setmaxnreg_dec<Cfg::kProducerRegs>();  // the whole warpgroup, before its other warps leave
    if (warp == Cfg::kProducerWarp && lane == 0 && ntiles > 0) {
      prefetch_tmap(&tmap_k);
      prefetch_tmap(&tmap_v);
      const int bslot = int(sr.bslot);
      // Waits until every consumer warp released the buffer's previous tile, then loads tile k (D/64 boxes of 64
      // columns x BN keys, one panel each) and arms its full barrier with the byte count.
      auto load = [&](const CUtensorMap* map, uint32_t buf0, uint32_t full, uint32_t empty, int k) {
        const int t = k - nb_begin;
        if (t >= STAGES) mbar_wait(empty, uint32_t(t / STAGES - 1) & 1u);
        mbar_arrive_expect_tx(full, Cfg::kv_bytes);
        const uint32_t dst = buf0 + uint32_t(stage_of(k)) * Cfg::kv_bytes;
        const int row = int(sr.k0) + k * BN;
#pragma unroll
        for (int pnl = 0; pnl < D / 64; ++pnl)
          tma_load_4d(dst + pnl * (BN * 128), map, full, 64 * pnl, row, kvh, bslot);
      };
      for (int k = nb_begin; k <= nb_end; ++k) {
        if (k < nb_end) load(&tmap_k, sK0, full_k(stage_of(k)), empty_k(stage_of(k)), k);
        if (k > nb_begin) load(&tmap_v, sV0, full_v(stage_of(k - 1)), empty_v(stage_of(k - 1)), k - 1);
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
  auto kbuf = [&](int k) { return sK0 + uint32_t(stage_of(k)) * Cfg::kv_bytes; };
  auto vbuf = [&](int k) { return sV0 + uint32_t(stage_of(k)) * Cfg::kv_bytes; };

  // Pipeline and turn protocol. Every consumer warp waits on every tile's full barriers and arrives once on its
  // empty barriers, reading it or not: a release is then never counted towards an earlier use of the buffer.
  auto wait_k = [&](int k) { mbar_wait(full_k(stage_of(k)), parity_of(k)); };
  auto wait_v = [&](int k) { mbar_wait(full_v(stage_of(k)), parity_of(k)); };
  auto release_k = [&](int k) {
    __syncwarp();
    if (lane == 0) mbar_arrive(empty_k(stage_of(k)));
  };
  auto release_v = [&](int k) {
    __syncwarp();
    if (lane == 0) mbar_arrive(empty_v(stage_of(k)));
  };
  // Slot k in [nb_begin, nb_end] holds this warpgroup's products S_k (k < nb_end) and P_{k-1} V_{k-1} (k > nb_begin),
  // either possibly absent. Each warpgroup takes one turn per slot, warpgroup 0 first: it issues on its own
  // barrier's release and then releases the other's. Warpgroup 1 opens with one arrival and skips its last.
  auto turn_begin = [&]() {
    if constexpr (PINGPONG) named_barrier(kWsBarTurn + wg, 256);
  };
  auto turn_end = [&](int k) {
    if constexpr (PINGPONG) {
      if (wg == 0 || k < nb_end) named_barrier_arrive(kWsBarTurn + (wg ^ 1), 256);
    }
  };
  auto idle_slot = [&](int k) {
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
  };

  if (ntiles > 0) {
    const T* qbase = static_cast<const T*>(a.q.data) + sr.bslot * a.q.stride_b;
    load_q_tile<T, BM, CH, Cfg::kConsumers>(sQ, qbase, a.q, sr.q0, trows, m0, rows, dreal,
                                            [](int r, int c) { return pswz<BM>(r, c); });
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();  // cp.async writes -> the tensor cores' async proxy
    named_barrier(kWsBarQ, Cfg::kConsumers);
    if constexpr (PINGPONG) {
      if (wg == 1) named_barrier_arrive(kWsBarTurn + 0, 256);  // warpgroup 0 takes the first turn
    }

    float alpha[2];
    uint32_t pa[BN / 16][4];
    float s[BN / 2];
    int k = nb_begin;
    for (; k < wk.wb; ++k) idle_slot(k);
    if (wk.wb < wk.we) {
      // First tile: S only (V_{k-1}, if any, is not this warpgroup's).
      wait_k(k);
      if (k > nb_begin) {
        wait_v(k - 1);
        release_v(k - 1);
      }
      turn_begin();
      w.issue_qk(s, sQ, kbuf(k));
      turn_end(k);
      wgmma_wait<0>();
      wgmma_fence_regs<BN / 2>(s);
      release_k(k);
      w.softmax(s, k, alpha);  // O is still zero: nothing to rescale
      Rows::pack_p(s, pa);
      // Steady state: S_k and P_{k-1} V_{k-1} in one turn; the softmax of S_k runs while P V does.
      for (++k; k < wk.we; ++k) {
        wait_k(k);
        turn_begin();
        w.issue_qk(s, sQ, kbuf(k));
        wait_v(k - 1);
        w.issue_pv(pa, vbuf(k - 1));
        turn_end(k);
        wgmma_wait<1>();
        wgmma_fence_regs<BN / 2>(s);
        release_k(k);
        w.softmax(s, k, alpha);
        wgmma_wait<0>();
        wgmma_fence_regs<D / 2>(w.o);
        wgmma_fence_regs<BN / 4>(&pa[0][0]);
        release_v(k - 1);
        w.rescale_o(alpha);
        Rows::pack_p(s, pa);
      }
      // Last product P_{we-1} V_{we-1}, in slot we (K_we, if any, is not this warpgroup's).
      if (k < nb_end) {
        wait_k(k);
        release_k(k);
      }
      wait_v(k - 1);
      turn_begin();
      w.issue_pv(pa, vbuf(k - 1));
      turn_end(k);
      wgmma_wait<0>();
      wgmma_fence_regs<D / 2>(w.o);
      release_v(k - 1);
      ++k;
    }
    for (; k <= nb_end; ++k) idle_slot(k);
  }

  // Epilogue (every warp of this warpgroup is past its last wgmma reading Q before O is staged there).
  w.store(sr, trows, smem, m0, rows, dreal, kWsBarEpi + wg);
#else
  __trap();
#endif
}

// TMA map of a K or V operand [batch slots, seq, kv_heads, head_dim] as 4-D (head_dim innermost, then seq, kv
// heads, batch slot; varlen: one slot holding the packed sequences) with a box of one panel: 64 columns x BN keys.
// Columns past head_dim and rows past the tensor's end read as zero. A size-1 dimension's stride is never used;
// it gets a valid dummy so that views with any stride there still qualify.
template <typename T>
bool encode_kv_tmap(CUtensorMap* map, const kernels::AttnOperand& t, const kernels::AttentionShape& sh, int bn) {
  const int64_t slots = sh.varlen() ? 1 : sh.batch;
  if (sh.seqlen_k <= 0 || sh.seqlen_k > (int64_t(1) << 30)) return false;  // non-empty; int32 tile coordinates
  const cuuint64_t dims[4] = {cuuint64_t(sh.head_dim), cuuint64_t(sh.seqlen_k), cuuint64_t(sh.kv_heads),
                              cuuint64_t(slots)};
  const int64_t es[3] = {t.stride_s, t.stride_h, t.stride_b};
  cuuint64_t strides[3];
  for (int i = 0; i < 3; ++i) {
    if (dims[i + 1] == 1) strides[i] = (cuuint64_t(sh.head_dim) * 2 + 15) / 16 * 16;
    else if (es[i] <= 0) return false;
    else strides[i] = cuuint64_t(es[i]) * 2;
  }
  const cuuint32_t box[4] = {64, cuuint32_t(bn), 1, 1};
  return encode_tmap_4d(map, std::is_same_v<T, __nv_bfloat16>, t.data, dims, strides, box);
}

// A call the kernel could have run but for TMA or the register count: said once on stderr, since the caller falls
// back to another kernel silently (tests and benchmarks would otherwise measure the wrong one).
inline void sm90_ws_note_fallback(const char* why) {
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) std::fprintf(stderr, "flashkit: warp-specialized Hopper forward not used: %s\n", why);
}

template <typename T, int D, int BN, int STAGES, bool PINGPONG>
bool launch_fwd_sm90_ws_cfg(const FwdParams& p, cudaStream_t stream) {
  using Cfg = Sm90WsCfg<D, BN, STAGES>;
  static_assert(Cfg::smem <= 227 * 1024, "shared memory per CTA exceeds the opt-in limit");
  auto kern = flash_fwd_sm90_ws_kernel<T, D, BN, STAGES, PINGPONG>;
  // No keys at all (every row's output is 0): no TMA map to build (K/V may be empty); the other kernel does it.
  if (!sm90_kernel_usable(kern) || p.a.shape.seqlen_k <= 0) return false;
  // The consumers' setmaxnreg.inc waits for registers the launch must have allocated: with any other count (a
  // toolchain that did not pin it at the launch bound) it could wait forever, so use the other kernel.
  const bool regs_ok = once_per_kernel_device<bool>(reinterpret_cast<const void*>(kern), [&](int) {
    cudaFuncAttributes attr{};
    const bool ok = cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(kern)) == cudaSuccess &&
                    attr.numRegs == Cfg::kLaunchRegs;
    if (!ok) cudaGetLastError();
    return ok;
  });
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
  dim3 grid(unsigned(mblocks), unsigned(p.pack_gqa ? sh.kv_heads : sh.heads), unsigned(sh.batch));
  kern<<<grid, Cfg::NT, Cfg::smem, stream>>>(p, tmap_k, tmap_v);
  check_cuda(cudaGetLastError(), "flash forward (sm90 ws) launch");
  return true;
}

// pingpong = false (Tuning::sm90_ws_pingpong) lets the two consumer warpgroups issue freely (for measuring the
// ping-pong).
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
    return pingpong ? launch_fwd_sm90_ws_cfg<T, D, w.bn, w.stages, true>(p, stream)
                    : launch_fwd_sm90_ws_cfg<T, D, w.bn, w.stages, false>(p, stream);
  } else {
    (void)bn, (void)pingpong, (void)stream;
    return false;
  }
}

}  // namespace flashkit::cuda
