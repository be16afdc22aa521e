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

#include "core/cuda_check.hpp"
#include "kernels/cuda/flash_api.hpp"
#include "kernels/cuda/flash_common.cuh"
#include "kernels/cuda/flash_fwd_sm90_tile.cuh"
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
  using Cfg = Sm90FwdCfg<D, BN, NWG, STAGES>;
  using Rows = Sm90FwdRows<T, D, BN, Cfg::BM>;
  constexpr int BM = Cfg::BM, NT = Cfg::NT, CH = D / 8;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  uint8_t* smem = smem_raw + (base - smem_u32(smem_raw));
  const uint32_t sQ = base;
  const uint32_t sK0 = sQ + Cfg::q_bytes;
  const uint32_t sV0 = sK0 + STAGES * Cfg::kv_bytes;

  const kernels::AttentionFwdArgs& a = p.a;
  const int tid = threadIdx.x, wg = tid >> 7;
  const int mb = int(gridDim.x) - 1 - int(blockIdx.x);  // longest (causal) tiles first
  const FwdTile t = fwd_tile(a, p.pack_gqa, mb, BM, BN);
  if (t.m0 >= t.rows) return;
  const kernels::SeqRange& sr = t.sr;
  const int64_t nq = sr.nq, nk = sr.nk, rows = t.rows, m0 = t.m0;
  const int kvh = t.kvh, dreal = t.dreal;
  const TileRows& trows = t.trows;
  // Key blocks this tile needs: the union of its rows' visible ranges. Each warpgroup's own 64 rows see a
  // sub-range (causal diagonal, windows, rows past the end): it skips its MMAs and softmax outside it (uniform per
  // warpgroup) but keeps the CTA's pipeline barriers. With BM = 128 and BN = 64, a causal diagonal tile is fully
  // masked for warpgroup 0.
  const int nb_begin = t.keys.nb_begin, nb_end = t.keys.nb_end;
  const WarpgroupKeys wk = warpgroup_keys(a.mask, trows, m0 + wg * 64, rows, nk, BN, nb_begin, nb_end);
  Rows w(a, trows, m0, rows, nq, nk, wk);

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
    if (n < wk.wb || n >= wk.we) continue;
    w.issue_qk(s, sQ, sK0 + st * Cfg::kv_bytes);
    wgmma_wait<0>();
    wgmma_fence_regs<BN / 2>(s);
    w.softmax(s, n, alpha);
    w.rescale_o(alpha);
    Rows::pack_p(s, pa);
    w.issue_pv(pa, sV0 + st * Cfg::kv_bytes);
    wgmma_wait<0>();
    wgmma_fence_regs<D / 2>(w.o);
  }
  cp_async_wait<0>();
  // every warp of this warpgroup is past its last wgmma reading Q before O is staged there
  w.store(sr, trows, smem, m0, rows, dreal, 1 + wg);
#else
  __trap();
#endif
}

template <typename T, int D, int BN, int NWG, int STAGES, int MINB>
bool launch_fwd_sm90_cfg(const FwdParams& p, cudaStream_t stream) {
  using Cfg = Sm90FwdCfg<D, BN, NWG, STAGES>;
  static_assert(Cfg::smem * MINB <= 228 * 1024, "MINB CTAs per SM do not fit in shared memory");
  auto kern = flash_fwd_sm90_kernel<T, D, BN, NWG, STAGES, MINB>;
  if (!sm90_kernel_usable(kern)) return false;
  set_max_dynamic_smem(kern, Cfg::smem, "cudaFuncSetAttribute(flash forward sm90)");
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

// Configuration 1 or 2 of tiles.hpp (chosen by src/ops/attention_choice.cpp).
template <typename T, int D>
bool launch_flash_fwd_sm90(const FwdParams& p, int config, cudaStream_t stream) {
  if (p.num_splits != 1) return false;
  if constexpr (D == 64 || D == 128) {
    constexpr Sm90FwdTile c1 = sm90_fwd_tile(D, 1), c2 = sm90_fwd_tile(D, 2);
    if (config == 2) return launch_fwd_sm90_cfg<T, D, c2.bn, c2.warpgroups, c2.stages, c2.min_blocks>(p, stream);
    return launch_fwd_sm90_cfg<T, D, c1.bn, c1.warpgroups, c1.stages, c1.min_blocks>(p, stream);
  } else {
    (void)config, (void)stream;
    return false;
  }
}

}  // namespace flashkit::cuda
