// FP8 (e4m3) FlashAttention forward for Hopper (sm_90a), warp-specialized like flash_fwd_sm90_ws.cuh (whose
// structure, turn protocol and per-warpgroup softmax it reuses): one CTA per (query tile of 128 rows, head,
// sequence); warpgroup 2 is the TMA producer (K tiles, and V^T tiles from the prep kernel's workspace), warpgroups
// 0-1 the consumers (64 rows each).
// What differs from the bf16 kernel (docs/worklog/attention-fp8-cuda.md):
//   - e4m3 wgmma is m64nNk32 with both operands K-major. Q and K keep the 128B-swizzled panels of wgmma.cuh with
//     panels of 128 *elements* (128 bytes); a k32 step is +32 bytes, as a k16 step of bf16.
//   - V is read as V^T [batch, kv_heads, head_dim, keys] (keys contiguous: K-major for the B operand), written once
//     per call by fp8_vt_prep (prep.cu) with the keys of each 32-key chunk permuted (fp8_layout.hpp) so that P goes
//     from the S accumulator into the 8-bit A fragment without shuffles.
//   - q_descale * k_descale is folded into the softmax scale by the launcher (a.scale), v_descale into the epilogue.
//   - O (bf16) is written from registers (the Q buffer is too small to stage it and the K/V ring is still in use).
// Not supported here (src/ops rejects them first): varlen, windows, softcap; GQA is by head (no packing).
#pragma once
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "core/cuda_check.hpp"
#include "kernels/attention_fp8_args.hpp"
#include "kernels/cuda/flash_api.hpp"
#include "kernels/cuda/flash_common.cuh"
#include "kernels/cuda/flash_fwd_sm90_tile.cuh"
#include "kernels/cuda/fp8/fp8_api.hpp"
#include "kernels/cuda/fp8/fp8_layout.hpp"
#include "kernels/cuda/launch.hpp"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace flashkit::cuda {

template <int N>
struct WgmmaE4m3;
#if FK_SM90_ENABLED
#include "kernels/cuda/fp8/wgmma_fp8_ops.inc"
// Two f32 to two e4m3 (round to nearest even, saturating): `lo` in the low byte.
__device__ __forceinline__ uint32_t cvt_e4m3x2(float lo, float hi) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}
#else
template <int N>
struct WgmmaE4m3 {
  static __device__ __forceinline__ void ss(float*, uint64_t, uint64_t, int) { __trap(); }
  static __device__ __forceinline__ void rs(float*, const uint32_t*, uint64_t, int) { __trap(); }
};
__device__ __forceinline__ uint32_t cvt_e4m3x2(float, float) {
  __trap();
  return 0;
}
#endif

template <int D, int BN, int STAGES>
struct Fp8WsCfg {
  static constexpr int BM = 128, kConsumers = 256, NT = kConsumers + 128;
  static constexpr int kProducerWarp = kConsumers / 32;
  static constexpr int kLaunchRegs = 168, kProducerRegs = 24, kConsumerRegs = 240;
  static_assert(kProducerRegs * 128 + kConsumerRegs * kConsumers <= kLaunchRegs * NT, "register budgets exceed the pool");
  static constexpr int kPanel = 128;                               // elements (bytes) per panel row
  // V^T panels per key tile: D rows x 128 keys each. A wide tile (192 keys) takes two, the second loaded whole (its
  // last 64 keys belong to the next tile and are never read): one TMA box and one swizzle for every panel.
  static constexpr int kVtPanels = (BN + kPanel - 1) / kPanel;
  static constexpr uint32_t q_bytes = BM * D, k_bytes = BN * D, vt_bytes = D * kPanel * kVtPanels;
  static constexpr uint32_t bar_off = q_bytes + STAGES * (k_bytes + vt_bytes);
  static constexpr size_t smem = size_t(bar_off) + 4 * STAGES * 8 + 1024;
  static_assert(D % kPanel == 0, "D a multiple of 128 (whole Q/K panels)");
  static_assert(BN % 32 == 0, "P V runs k32 steps: BN a multiple of 32 keys");
  static_assert(q_bytes % 1024 == 0 && k_bytes % 1024 == 0, "panels stay 1024-byte aligned");
  static_assert(D <= 256 && BN <= 256, "a TMA box has at most 256 rows");
};

// One consumer warpgroup's rows: the bf16 kernel's state, mask and online softmax (Sm90FwdRows, instantiated for
// bf16 only for those), with the e4m3 products, the P packing and a register epilogue. RESCALE (worklog v4): 0 O
// rescaled after every tile; 1 a warp whose 16 rows all kept their max (alpha == 1 exactly) skips O's rescale
// (x * 1.0f == x: bit-identical to 0); 2 also the lazy max (kFp8LazyRescaleTau), so that rows keep m far more often.
template <int D, int BN, int BM, int RESCALE>
struct Fp8Rows : Sm90FwdRows<__nv_bfloat16, D, BN, BM> {
  using Base = Sm90FwdRows<__nv_bfloat16, D, BN, BM>;
  using Base::Base;
  static_assert(RESCALE >= 0 && RESCALE <= 2, "RESCALE: 0, 1 or 2");

  __device__ __forceinline__ void softmax(float (&sacc)[BN / 2], int n, float (&alpha)[2]) {
    Base::template softmax<RESCALE == 2 ? kernels::kFp8LazyRescaleTau : 0>(sacc, n, alpha);
  }

  // O *= alpha; RESCALE 1/2: not at all when every row of the warp has alpha == 1 (a warp-uniform branch).
  __device__ __forceinline__ void rescale_o(const float (&alpha)[2]) {
    if constexpr (RESCALE == 0) {
      Base::rescale_o(alpha);
    } else {
      if (!__all_sync(0xffffffffu, alpha[0] == 1.f && alpha[1] == 1.f)) Base::rescale_o(alpha);
    }
  }

  // S = Q K^T: k32 steps of 32 bytes inside 128-byte panels.
  __device__ __forceinline__ void issue_qk(float (&sacc)[BN / 2], uint32_t sQ, uint32_t sK) const {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 32; ++kk) {
      const uint64_t da = smem_desc(sQ + (kk >> 2) * (BM * 128) + Base::wg() * (64 * 128) + (kk & 3) * 32, 16, 1024);
      const uint64_t db = smem_desc(sK + (kk >> 2) * (BN * 128) + (kk & 3) * 32, 16, 1024);
      WgmmaE4m3<BN>::ss(sacc, da, db, kk > 0);
    }
    wgmma_commit();
  }

  // P (f32 in [0, 1]) to the 8-bit A fragments, one per 32-key chunk (fp8_layout.hpp).
  static __device__ __forceinline__ void pack_p(const float (&sacc)[BN / 2], uint32_t (&pa)[BN / 32][4]) {
#pragma unroll
    for (int c = 0; c < BN / 32; ++c)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        auto el = [&](int b) { return sacc[4 * (4 * c + fp8_p_tile(r, b)) + fp8_p_elem(r, b)]; };
        pa[c][r] = cvt_e4m3x2(el(0), el(1)) | (cvt_e4m3x2(el(2), el(3)) << 16);
      }
  }

  // O += P V^T-tile: B is the D x BN V^T tile (keys contiguous, 128-key panels of D rows), K-major; chunk c of 32
  // keys is in panel c / 4 at byte c % 4 * 32.
  __device__ __forceinline__ void issue_pv(uint32_t (&pa)[BN / 32][4], uint32_t sVt) {
    wgmma_fence_regs<D / 2>(this->o);
    wgmma_fence_regs<BN / 8>(&pa[0][0]);
    wgmma_fence();
#pragma unroll
    for (int c = 0; c < BN / 32; ++c) {
      const uint64_t db = smem_desc(sVt + (c >> 2) * (D * 128) + (c & 3) * 32, 16, 1024);
      WgmmaE4m3<D>::rs(this->o, pa[c], db, 1);
    }
    wgmma_commit();
  }

  // Normalize (v_descale / l), write O rows as bf16 pairs straight from the accumulator, and the LSE.
  __device__ __forceinline__ void store(const kernels::SeqRange& sr, const TileRows& trows, int64_t m0, int64_t rows,
                                        float v_descale) const {
    const kernels::AttentionFwdArgs& a = this->a;
    const int wg = Base::wg(), wq = Base::wq(), g = Base::g(), t4 = Base::t4();
    __nv_bfloat16* obase = static_cast<__nv_bfloat16*>(a.o.data) + sr.bslot * a.o.stride_b;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float l = quad_sum(this->lrow[r]);
      const float inv = l > 0.f ? v_descale / l : 0.f;
      const float lse = row_lse(this->mrow[r], l);
      const int64_t gr = m0 + wg * 64 + wq * 16 + g + 8 * r;
      if (gr >= rows) continue;
      int64_t h, i;
      trows.head_query(gr, h, i);
      if (t4 == 0) a.lse[a.lse_index(sr, h, i)] = lse;
      __nv_bfloat16* orow = obase + (sr.q0 + i) * a.o.stride_s + h * a.o.stride_h;
#pragma unroll
      for (int d = 0; d < D / 8; ++d) {
        const uint32_t v = MmaOp<__nv_bfloat16>::pack(this->o[4 * d + 2 * r] * inv, this->o[4 * d + 2 * r + 1] * inv);
        *reinterpret_cast<uint32_t*>(orow + 8 * d + 2 * t4) = v;
      }
    }
  }
};

// Q rows into the panels (16-byte chunks, rows past the tile's end zero-filled).
template <int D, int BM, int NT>
__device__ __forceinline__ void fp8_load_q(uint32_t sQ, const uint8_t* qbase, const kernels::AttnOperand& q,
                                           int64_t q0, const TileRows& trows, int64_t m0, int64_t rows) {
  constexpr int CH = D / 16;
  for (int idx = threadIdx.x; idx < BM * CH; idx += NT) {
    const int r = idx / CH, c = idx % CH;
    const int64_t gr = m0 + r;
    const bool ok = gr < rows;
    const uint8_t* src = qbase;
    if (ok) {
      int64_t h, i;
      trows.head_query(gr, h, i);
      src = qbase + (q0 + i) * q.stride_s + h * q.stride_h + c * 16;
    }
    cp_async16(sQ + pswz<BM>(r, c), src, ok);
  }
}

template <int D, int BN, int STAGES, bool PINGPONG, int RESCALE>
__global__ void __launch_bounds__(Fp8WsCfg<D, BN, STAGES>::NT, 1)
    flash_fwd_fp8_sm90_kernel(const Fp8FwdParams p, const __grid_constant__ CUtensorMap tmap_k,
                              const __grid_constant__ CUtensorMap tmap_vt) {
#if FK_SM90_ENABLED
  using Cfg = Fp8WsCfg<D, BN, STAGES>;
  using Rows = Fp8Rows<D, BN, Cfg::BM, RESCALE>;
  constexpr int BM = Cfg::BM;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t sQ = base;
  const uint32_t sK0 = sQ + Cfg::q_bytes;
  const uint32_t sV0 = sK0 + STAGES * Cfg::k_bytes;
  const uint32_t bar0 = base + Cfg::bar_off;
  auto full_k = [&](int st) { return bar0 + 8u * uint32_t(st); };
  auto full_v = [&](int st) { return bar0 + 8u * uint32_t(STAGES + st); };
  auto empty_k = [&](int st) { return bar0 + 8u * uint32_t(2 * STAGES + st); };
  auto empty_v = [&](int st) { return bar0 + 8u * uint32_t(3 * STAGES + st); };

  const kernels::AttentionFwdArgs& a = p.a;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int mb = int(gridDim.x) - 1 - int(blockIdx.x);  // longest (causal) tiles first
  const FwdTile t = fwd_tile(a, false, mb, BM, BN);
  if (t.m0 >= t.rows) return;
  const kernels::SeqRange& sr = t.sr;
  const int64_t nq = sr.nq, nk = sr.nk, rows = t.rows, m0 = t.m0;
  const int kvh = t.kvh;
  const TileRows& trows = t.trows;
  const TileKeys& tk = t.keys;
  const int nb_begin = tk.nb_begin, nb_end = tk.nb_end, ntiles = nb_end - nb_begin;

  if (ntiles > 0 && tid == 0) {
#pragma unroll
    for (int st = 0; st < STAGES; ++st) {
      mbar_init(full_k(st), 1);
      mbar_init(full_v(st), 1);
      mbar_init(empty_k(st), Cfg::kConsumers / 32);
      mbar_init(empty_v(st), Cfg::kConsumers / 32);
    }
    fence_mbar_init();
  }
  __syncthreads();

  auto stage_of = [&](int k) { return (k - nb_begin) % STAGES; };
  auto parity_of = [&](int k) { return uint32_t((k - nb_begin) / STAGES) & 1u; };

  if (tid >= Cfg::kConsumers) {
    setmaxnreg_dec<Cfg::kProducerRegs>();
    if (warp == Cfg::kProducerWarp && lane == 0 && ntiles > 0) {
      prefetch_tmap(&tmap_k);
      prefetch_tmap(&tmap_vt);
      const int bslot = int(sr.bslot);
      auto wait_free = [&](uint32_t empty, int k) {
        const int t = k - nb_begin;
        if (t >= STAGES) mbar_wait(empty, uint32_t(t / STAGES - 1) & 1u);
      };
      for (int k = nb_begin; k <= nb_end; ++k) {
        if (k < nb_end) {  // K tile k: D/128 boxes of 128 columns x BN keys
          const int st = stage_of(k);
          wait_free(empty_k(st), k);
          mbar_arrive_expect_tx(full_k(st), Cfg::k_bytes);
          const uint32_t dst = sK0 + uint32_t(st) * Cfg::k_bytes;
#pragma unroll
          for (int pnl = 0; pnl < D / 128; ++pnl)
            tma_load_4d(dst + pnl * (BN * 128), &tmap_k, full_k(st), 128 * pnl, k * BN, kvh, bslot);
        }
        if (k > nb_begin) {  // V^T tile k-1: one box of 128 keys x D rows per panel (starts < keys: fp8_vt_keys)
          const int st = stage_of(k - 1);
          wait_free(empty_v(st), k - 1);
          mbar_arrive_expect_tx(full_v(st), Cfg::vt_bytes);
          const uint32_t dst = sV0 + uint32_t(st) * Cfg::vt_bytes;
#pragma unroll
          for (int pnl = 0; pnl < Cfg::kVtPanels; ++pnl)
            tma_load_4d(dst + pnl * (D * 128), &tmap_vt, full_v(st), (k - 1) * BN + 128 * pnl, 0, kvh, bslot);
        }
      }
    }
    return;
  }

  // ---- consumers (the protocol of flash_fwd_sm90_ws.cuh) ----
  setmaxnreg_inc<Cfg::kConsumerRegs>();
  const int wg = tid >> 7;
  const WarpgroupKeys wk = warpgroup_keys(a.mask, trows, m0 + 64 * wg, rows, nk, BN, nb_begin, nb_end);
  Rows w(a, trows, m0, rows, nq, nk, wk);
  auto kbuf = [&](int k) { return sK0 + uint32_t(stage_of(k)) * Cfg::k_bytes; };
  auto vbuf = [&](int k) { return sV0 + uint32_t(stage_of(k)) * Cfg::vt_bytes; };
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
  auto turn_begin = [&]() {
    if constexpr (PINGPONG) named_barrier(kWsBarTurnFp8 + wg, 256);
  };
  auto turn_end = [&](int k) {
    if constexpr (PINGPONG) {
      if (wg == 0 || k < nb_end) named_barrier_arrive(kWsBarTurnFp8 + (wg ^ 1), 256);
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
    const uint8_t* qbase = static_cast<const uint8_t*>(a.q.data) + sr.bslot * a.q.stride_b;
    fp8_load_q<D, BM, Cfg::kConsumers>(sQ, qbase, a.q, sr.q0, trows, m0, rows);
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();
    named_barrier(kWsBarQFp8, Cfg::kConsumers);
    if constexpr (PINGPONG) {
      if (wg == 1) named_barrier_arrive(kWsBarTurnFp8 + 0, 256);
    }

    float alpha[2];
    uint32_t pa[BN / 32][4];
    float s[BN / 2];
    int k = nb_begin;
    for (; k < wk.wb; ++k) idle_slot(k);
    if (wk.wb < wk.we) {
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
      w.softmax(s, k, alpha);
      Rows::pack_p(s, pa);
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
        wgmma_fence_regs<BN / 8>(&pa[0][0]);
        release_v(k - 1);
        w.rescale_o(alpha);
        Rows::pack_p(s, pa);
      }
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
  w.store(sr, trows, m0, rows, p.v_descale);
#else
  __trap();
#endif
}

// 4-D TMA map of e4m3 bytes (dim 0 contiguous), 128B swizzle, zero fill out of bounds; false when TMA cannot
// describe it (alignment, strides) or the driver refuses.
inline bool encode_fp8_tmap_4d(CUtensorMap* map, const void* base, const cuuint64_t (&dims)[4],
                               const cuuint64_t (&stride_bytes)[3], const cuuint32_t (&box)[4]) {
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) return false;
  for (cuuint64_t d : dims)
    if (d == 0 || d > (cuuint64_t(1) << 32)) return false;
  for (cuuint64_t s : stride_bytes)
    if (s == 0 || s % 16 != 0 || s >= (cuuint64_t(1) << 40)) return false;
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (!encode) return false;
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, const_cast<void*>(base), dims, stride_bytes, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int D, int BN, int STAGES, bool PINGPONG, int RESCALE>
Fp8LaunchResult launch_fwd_fp8_sm90_cfg(const Fp8FwdParams& p, const uint8_t* vt, cudaStream_t stream) {
  using Cfg = Fp8WsCfg<D, BN, STAGES>;
  static_assert(Cfg::smem <= 227 * 1024, "shared memory per CTA exceeds the opt-in limit");
  auto kern = flash_fwd_fp8_sm90_kernel<D, BN, STAGES, PINGPONG, RESCALE>;
  if (!sm90_kernel_usable(kern)) return {false, "the fp8 kernel has no sm_90a code for this device"};
  // setmaxnreg needs the launch's register count (kernel_has_regs, launch.hpp).
  const bool regs_ok = kernel_has_regs(kern, Cfg::kLaunchRegs);
  if (!regs_ok) return {false, "the fp8 kernel was not built with 168 registers per thread (setmaxnreg budget)"};
  const auto& sh = p.a.shape;
  // cp.async reads Q in 16-byte chunks; O is written in 4-byte pairs.
  const auto aligned = [](const kernels::AttnOperand& t, int align, int es) {
    return reinterpret_cast<uintptr_t>(t.data) % align == 0 && (t.stride_s * es) % align == 0 &&
           (t.stride_h * es) % align == 0 && (t.stride_b * es) % align == 0;
  };
  if (!aligned(p.a.q, 16, 1)) return {false, "q: the fp8 kernel needs a 16-byte aligned base and strides"};
  if (!aligned(p.a.o, 4, 2)) return {false, "o: the fp8 kernel needs a 4-byte aligned base and even strides"};
  // K: [batch, seqlen_k, kv_heads, D] with its strides; V^T: [batch, kv_heads, D, keys] contiguous.
  const cuuint64_t kdims[4] = {cuuint64_t(D), cuuint64_t(sh.seqlen_k), cuuint64_t(sh.kv_heads), cuuint64_t(sh.batch)};
  const int64_t es[3] = {p.a.k.stride_s, p.a.k.stride_h, p.a.k.stride_b};
  cuuint64_t kstr[3];
  for (int i = 0; i < 3; ++i) {
    if (kdims[i + 1] == 1) kstr[i] = cuuint64_t(D);  // a size-1 dimension's stride is never used
    else if (es[i] <= 0) return {false, "k: no TMA map (a stride is not positive)"};
    else kstr[i] = cuuint64_t(es[i]);
  }
  const cuuint32_t kbox[4] = {128, cuuint32_t(BN), 1, 1};
  const int64_t keys = fp8_vt_keys(sh.seqlen_k, BN);
  const cuuint64_t vdims[4] = {cuuint64_t(keys), cuuint64_t(D), cuuint64_t(sh.kv_heads), cuuint64_t(sh.batch)};
  const cuuint64_t vstr[3] = {cuuint64_t(keys), cuuint64_t(keys) * D, cuuint64_t(keys) * D * cuuint64_t(sh.kv_heads)};
  const cuuint32_t vbox[4] = {cuuint32_t(Cfg::kPanel), cuuint32_t(D), 1, 1};
  CUtensorMap tmap_k, tmap_vt;
  if (!encode_fp8_tmap_4d(&tmap_k, p.a.k.data, kdims, kstr, kbox))
    return {false, "k: no TMA map (the base address and the seq/head/batch strides must be multiples of 16 bytes)"};
  if (!encode_fp8_tmap_4d(&tmap_vt, vt, vdims, vstr, vbox)) return {false, "no TMA map for the V^T workspace"};
  set_max_dynamic_smem(kern, Cfg::smem, "cudaFuncSetAttribute(flash forward fp8 sm90)");
  const int64_t mblocks = (sh.max_seqlen_q + Cfg::BM - 1) / Cfg::BM;
  if (mblocks == 0) return {true, ""};
  dim3 grid(unsigned(mblocks), unsigned(sh.heads), unsigned(sh.batch));
  kern<<<grid, Cfg::NT, Cfg::smem, stream>>>(p, tmap_k, tmap_vt);
  check_cuda(cudaGetLastError(), "flash forward (fp8 sm90) launch");
  return {true, ""};
}

template <int D, int RESCALE, int BN>
Fp8LaunchResult launch_flash_fwd_fp8_sm90(const Fp8FwdParams& p, const uint8_t* vt, bool pingpong, cudaStream_t stream) {
  // d128: 16 KB of Q + 3 x (16 KB K + 16 KB V^T) = 112 KB (BN 192: 3 x (24 + 32 KB) + 16 = 184 KB);
  // d256: 32 KB + 2 x (32 KB + 32 KB) = 160 KB.
  constexpr int STAGES = D == 128 ? 3 : 2;
  return pingpong ? launch_fwd_fp8_sm90_cfg<D, BN, STAGES, true, RESCALE>(p, vt, stream)
                  : launch_fwd_fp8_sm90_cfg<D, BN, STAGES, false, RESCALE>(p, vt, stream);
}

}  // namespace flashkit::cuda
