// FlashAttention forward for Hopper (sm_90a): warpgroup MMAs. One CTA per (query tile of 64*NWG rows, head,
// sequence); warpgroup w owns 64 query rows. Q, K and V tiles sit in shared memory in the 128B-swizzled panel
// layout (wgmma.cuh) and K/V stream through a STAGES-deep cp.async pipeline. Per key tile:
//   S = Q K^T    wgmma, A = Q and B = K from shared memory (both K-major),
//   softmax      online, in log2 units, the same per-thread row layout as the sm_80 kernel (flash_fwd.cuh),
//   O += P V     wgmma, A = P from registers (the S accumulators converted in place), B = V from shared memory
//                read transposed (MN-major), so V is never transposed in memory.
// The masking, GQA packing and varlen rules are those of flash_fwd.cuh. Included by flash_fwd_sm90_*.cu only.
#pragma once
#include <cmath>
#include <cstdlib>

#include "core/env.hpp"
#include "core/cuda_check.hpp"
#include "kernels/cuda/flash_api.hpp"
#include "kernels/cuda/flash_common.cuh"
#include "kernels/cuda/launch.hpp"
#include "kernels/cuda/wgmma.cuh"

namespace flashkit::cuda {

template <int D, int BN, int NWG, int STAGES>
struct Sm90FwdCfg {
  static constexpr int BM = 64 * NWG, NT = 128 * NWG;
  static constexpr uint32_t q_bytes = BM * D * 2, kv_bytes = BN * D * 2;
  static constexpr size_t smem = size_t(q_bytes) + 2 * STAGES * size_t(kv_bytes) + 1024;  // + alignment slack
  static_assert(q_bytes % 1024 == 0 && kv_bytes % 1024 == 0, "panels must stay 1024-byte aligned");
};

template <typename T, int D, int BN, int NWG, int STAGES, int MINB>
__global__ void __launch_bounds__(NWG * 128, MINB) flash_fwd_sm90_kernel(const FwdParams p) {
#if FK_SM90_ENABLED
  using Op = MmaOp<T>;
  using Cfg = Sm90FwdCfg<D, BN, NWG, STAGES>;
  constexpr int BM = Cfg::BM, NT = Cfg::NT, CH = D / 8, NTILE = BN / 8, DTILE = D / 8;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  uint8_t* smem = smem_raw + (base - smem_u32(smem_raw));
  const uint32_t sQ = base;
  const uint32_t sK0 = sQ + Cfg::q_bytes;
  const uint32_t sV0 = sK0 + STAGES * Cfg::kv_bytes;

  const kernels::AttentionFwdArgs& a = p.a;
  const int tid = threadIdx.x, wg = tid >> 7, wtid = tid & 127, wq = wtid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int mblocks = gridDim.x;
  const int mb = mblocks - 1 - int(blockIdx.x);  // longest (causal) tiles first
  const kernels::SeqRange sr = kernels::seq_range(a.shape, blockIdx.z);
  const int64_t nq = sr.nq, nk = sr.nk;
  const int group = int(a.shape.heads / a.shape.kv_heads);
  const bool pack = p.pack_gqa;
  const int64_t rows = pack ? group * nq : nq;
  const int64_t m0 = int64_t(mb) * BM;
  if (m0 >= rows) return;
  const int hblk = blockIdx.y;
  const int kvh = pack ? hblk : hblk / group;
  const int dreal = int(a.shape.head_dim);

  const TileRows trows{pack, group, nq, hblk, kvh};
  auto row_head = [&](int64_t r, int64_t& h, int64_t& i) { trows.head_query(r, h, i); };

  // Key blocks this tile needs: the union of its rows' visible ranges.
  const int64_t r_last = (m0 + BM < rows ? m0 + BM : rows) - 1;
  const TileKeys tk = tile_keys(a.mask, trows, m0, r_last, nk, BN);
  const int64_t lo_max = tk.lo_max, hi_min = tk.hi_min;
  int nb_begin = tk.nb_begin, nb_end = tk.nb_end;
  // This warpgroup's own 64 rows see a sub-range of the CTA's key tiles (causal diagonal, windows, rows past the
  // end): it skips its MMAs and softmax outside that range (uniform per warpgroup) but keeps the CTA's pipeline
  // barriers. With BM = 128 and BN = 64, a causal diagonal tile is fully masked for warpgroup 0.
  int wnb_begin = 0, wnb_end = 0;
  int w_lo_max = int(lo_max), w_hi_min = int(hi_min);  // key indices fit int (nk does)
  if (m0 + wg * 64 < rows) {
    const int64_t w0 = m0 + wg * 64;
    const TileKeys wk = tile_keys(a.mask, trows, w0, (w0 + 64 < rows ? w0 + 64 : rows) - 1, nk, BN);
    wnb_begin = wk.nb_begin, wnb_end = wk.nb_end, w_lo_max = int(wk.lo_max), w_hi_min = int(wk.hi_min);
  }

  // Visible key range of the two rows (g, g+8) this thread holds in its warp's 16 rows.
  int my_lo[2], my_hi[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t gr = m0 + wg * 64 + wq * 16 + g + 8 * r;
    my_lo[r] = 0;
    my_hi[r] = int(nk);
    if (gr < rows) {
      int64_t h, i;
      row_head(gr, h, i);
      my_lo[r] = int(a.mask.lo(i, nq, nk));
      my_hi[r] = int(a.mask.hi(i, nq, nk));
    }
  }

  const T* qbase = static_cast<const T*>(a.q.data) + sr.bslot * a.q.stride_b;
  const T* kbase = static_cast<const T*>(a.k.data) + sr.bslot * a.k.stride_b + kvh * a.k.stride_h + sr.k0 * a.k.stride_s;
  const T* vbase = static_cast<const T*>(a.v.data) + sr.bslot * a.v.stride_b + kvh * a.v.stride_h + sr.k0 * a.v.stride_s;

  auto load_kv = [&](int n, int st) {
    constexpr int RSTEP = NT / CH;
    const int c = tid % CH;
    const bool cok = c * 8 < dreal;
    int64_t j = int64_t(n) * BN + tid / CH;
    const T* kp = kbase + j * a.k.stride_s + c * 8;
    const T* vp = vbase + j * a.v.stride_s + c * 8;
    const int64_t kstep = RSTEP * a.k.stride_s, vstep = RSTEP * a.v.stride_s;
#pragma unroll
    for (int r = tid / CH; r < BN; r += RSTEP) {
      const bool ok = cok && j < nk;
      cp_async16(sK0 + st * Cfg::kv_bytes + pswz<BN>(r, c), ok ? kp : kbase, ok);
      cp_async16(sV0 + st * Cfg::kv_bytes + pswz<BN>(r, c), ok ? vp : vbase, ok);
      j += RSTEP;
      kp += kstep;
      vp += vstep;
    }
  };

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};

  const bool use_cap = a.softcap > 0.f;
  const float sl2 = a.scale * kLog2e;
  const float cap_pre = use_cap ? a.scale / a.softcap : 0.f;
  const float cap_post = a.softcap * kLog2e;

  // S = Q K^T for this warpgroup's 64 rows x BN keys of the tile in stage `st` (issued, not waited for).
  auto issue_qk = [&](float (&sacc)[BN / 2], int st) {
    const uint32_t sK = sK0 + st * Cfg::kv_bytes;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint64_t da = smem_desc(sQ + (kk >> 2) * (BM * 128) + wg * (64 * 128) + (kk & 3) * 32, 16, 1024);
      const uint64_t db = smem_desc(sK + (kk >> 2) * (BN * 128) + (kk & 3) * 32, 16, 1024);
      Wgmma<T, BN>::template ss<0, 0>(sacc, da, db, kk > 0);
    }
    wgmma_commit();
  };

  // Scores of key tile n to log2 units (scale, softcap), mask, online softmax: leaves P in sacc and the factor
// O must be rescaled by in alpha
  // (accumulator layout: sacc[4*nt + e] is row g + 8*(e>>1), key 8*nt + 2*t4 + (e&1)).
  auto softmax = [&](float (&sacc)[BN / 2], int n, float (&alpha)[2]) {
    const int64_t n0 = int64_t(n) * BN;
    const bool full = int(n0) >= w_lo_max && int(n0) + BN <= w_hi_min;
    if (use_cap || !full) {
#pragma unroll
      for (int nt = 0; nt < NTILE; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = sacc[4 * nt + e];
          x = use_cap ? cap_post * fast_tanh(x * cap_pre) : x * sl2;
          const int j = int(n0) + nt * 8 + 2 * t4 + (e & 1);
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
      const float mnew = fmaxf(mrow[r], mx);
      const float muse = mnew == -INFINITY ? 0.f : mnew;
      alpha[r] = fast_exp2(mrow[r] - muse);
      mrow[r] = mnew;
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
  };
  // O *= alpha (per row) before the next P V accumulates into it.
  auto rescale_o = [&](const float (&alpha)[2]) {
#pragma unroll
    for (int d = 0; d < DTILE; ++d)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[4 * d + e] *= alpha[e >> 1];
  };

  // O += P V with P as the register A operand: the m64k16 fragment of keys 16kk..16kk+15 is the accumulator
  // layout of key octets 2kk and 2kk+1. V is read transposed (MN-major) from its panels. Issued, not waited for.
  auto pack_p = [&](const float (&sacc)[BN / 2], uint32_t (&pa)[BN / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      pa[kk][0] = Op::pack(sacc[8 * kk + 0], sacc[8 * kk + 1]);
      pa[kk][1] = Op::pack(sacc[8 * kk + 2], sacc[8 * kk + 3]);
      pa[kk][2] = Op::pack(sacc[8 * kk + 4], sacc[8 * kk + 5]);
      pa[kk][3] = Op::pack(sacc[8 * kk + 6], sacc[8 * kk + 7]);
    }
  };
  auto issue_pv = [&](uint32_t (&pa)[BN / 16][4], int st) {
    const uint32_t sV = sV0 + st * Cfg::kv_bytes;
    wgmma_fence_regs<D / 2>(o);
    wgmma_fence_regs<BN / 4>(&pa[0][0]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint64_t db = smem_desc(sV + kk * 2048, BN * 128, 1024);
      Wgmma<T, D>::template rs<1>(o, pa[kk], db, 1);
    }
    wgmma_commit();
  };

  // Every thread copies part of the tile; after the wait, a fence (cp.async writes -> the tensor cores' async
  // proxy) and a barrier make all of it visible. The barrier also tells the loaders that every warpgroup is done
  // with the stage they refill next.
  auto tile_ready = [&]() {
    fence_proxy_async();
    __syncthreads();
  };

  if (nb_begin < nb_end) {
    load_q_tile<T, BM, CH, NT>(sQ, qbase, a.q, sr.q0, trows, m0, rows, dreal,
                               [](int r, int c) { return pswz<BM>(r, c); });
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {
      if (nb_begin + st < nb_end) load_kv(nb_begin + st, st);
      cp_async_commit();
    }
  }

  float alpha[2];
  uint32_t pa[BN / 16][4];
  float s[BN / 2];
  for (int n = nb_begin; n < nb_end; ++n) {
    const int st = (n - nb_begin) % STAGES;
    cp_async_wait<STAGES - 2>();
    tile_ready();
    if (n + STAGES - 1 < nb_end) load_kv(n + STAGES - 1, (n - nb_begin + STAGES - 1) % STAGES);
    cp_async_commit();
    if (n < wnb_begin || n >= wnb_end) continue;
    issue_qk(s, st);
    wgmma_wait<0>();
    wgmma_fence_regs<BN / 2>(s);
    softmax(s, n, alpha);
    rescale_o(alpha);
    pack_p(s, pa);
    issue_pv(pa, st);
    wgmma_wait<0>();
    wgmma_fence_regs<D / 2>(o);
  }
  cp_async_wait<0>();

  // Epilogue: normalize; stage this warpgroup's O rows in its part of the Q tile (panel layout); write O, LSE.
  float inv[2], lse[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_sum(lrow[r]);
    inv[r] = l > 0.f ? 1.f / l : 0.f;
    lse[r] = l > 0.f ? (mrow[r] + __log2f(l)) * kLn2 : -INFINITY;
  }
  named_barrier(1 + wg, 128);  // every warp of this warpgroup is past its last wgmma reading Q
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
    row_head(gr, h, i);
    a.lse[a.lse_index(sr, h, i)] = lse[r];
  }
  named_barrier(1 + wg, 128);
  T* obase = static_cast<T*>(a.o.data) + sr.bslot * a.o.stride_b;
  for (int idx = wtid; idx < 64 * CH; idx += 128) {
    const int rr = wg * 64 + idx / CH, c = idx % CH;
    const int64_t gr = m0 + rr;
    if (gr < rows && c * 8 < dreal) {
      int64_t h, i;
      row_head(gr, h, i);
      *reinterpret_cast<uint4*>(obase + (sr.q0 + i) * a.o.stride_s + h * a.o.stride_h + c * 8) =
          *reinterpret_cast<const uint4*>(smem + pswz<BM>(rr, c));
    }
  }
#else
  __trap();
#endif
}

template <typename T, int D, int BN, int NWG, int STAGES, int MINB>
bool launch_fwd_sm90_cfg(const FwdParams& p, cudaStream_t stream, TileShape* tile) {
  using Cfg = Sm90FwdCfg<D, BN, NWG, STAGES>;
  static_assert(Cfg::smem * MINB <= 228 * 1024, "MINB CTAs per SM do not fit in shared memory");
  auto kern = flash_fwd_sm90_kernel<T, D, BN, NWG, STAGES, MINB>;
  if (!sm90_kernel_usable(kern)) return false;
  set_max_dynamic_smem(kern, Cfg::smem, "cudaFuncSetAttribute(flash forward sm90)");
  *tile = TileShape{Cfg::BM, BN};
  const auto& sh = p.a.shape;
  const int64_t group = sh.heads / sh.kv_heads;
  const int64_t rows = p.pack_gqa ? group * sh.max_seqlen_q : sh.max_seqlen_q;
  const int64_t mblocks = (rows + Cfg::BM - 1) / Cfg::BM;
  if (mblocks == 0) return true;
  dim3 grid(unsigned(mblocks), unsigned(p.pack_gqa ? sh.kv_heads : sh.heads), unsigned(sh.batch));
  kern<<<grid, Cfg::NT, Cfg::smem, stream>>>(p);
  check_cuda(cudaGetLastError(), "flash forward (sm90) launch");
  return true;
}

// Tile configurations, measured on the H200 (docs/worklog/attention-cuda.md, v6): short sequences want several
// small CTAs per SM (their prologues and epilogues overlap other CTAs' main loops), long ones the larger key
// tile. FLASHKIT_SM90_CFG=1..3 forces one configuration (3: the warp-specialized TMA kernel of
// flash_fwd_sm90_ws.cuh; for tuning; read once).
inline int sm90_fwd_cfg() {
  static const int v = int(env::integer("FLASHKIT_SM90_CFG", 0, 0, 3));
  return v;
}

template <typename T, int D>
bool launch_flash_fwd_sm90(const FwdParams& p, cudaStream_t stream, TileShape* tile) {
  if (p.num_splits != 1) return false;
  const int64_t sq = p.a.shape.max_seqlen_q;
  const bool causal = p.a.mask.causal;
  int cfg = sm90_fwd_cfg();
  // The warp-specialized TMA kernel (flash_fwd_sm90_ws.cuh) wins at d128 everywhere measured and at d64 from 2k
  // tokens (causal: 4k); short d64 sequences keep the small multi-CTA tiles (run s5-6, attention-cuda.md v9).
  const bool ws_default = D == 128 || (D == 64 && sq >= (causal ? 4096 : 2048));
  if ((cfg == 3 || (cfg == 0 && ws_default)) && launch_flash_fwd_sm90_ws<T, D>(p, stream, tile)) return true;
  if constexpr (D == 64) {
    if (cfg < 1 || cfg > 2) cfg = causal && sq <= 1024 ? 2 : 1;
    // <T, D, BN, warpgroups, stages, CTAs per SM>
    if (cfg == 2) return launch_fwd_sm90_cfg<T, 64, 64, 1, 2, 4>(p, stream, tile);
    return launch_fwd_sm90_cfg<T, 64, 128, 2, 2, 2>(p, stream, tile);
  } else if constexpr (D == 128) {
    if (cfg < 1 || cfg > 2) cfg = sq <= 2048 ? 1 : 2;
    if (cfg == 2) return launch_fwd_sm90_cfg<T, 128, 128, 2, 2, 1>(p, stream, tile);
    return launch_fwd_sm90_cfg<T, 128, 64, 2, 2, 2>(p, stream, tile);
  } else {
    return false;
  }
}

}  // namespace flashkit::cuda
