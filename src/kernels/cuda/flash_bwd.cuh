// FlashAttention-2 backward on mma.sync tensor cores (sm_80+). One CTA per (key tile of BN keys, KV head,
// sequence); it keeps its K/V tile in shared memory and dK/dV in registers while it walks every query tile
// of every query head of its GQA group (so dK/dV are reduced over the group without atomics), recomputing
// P = exp2(S*scale*log2e - LSE*log2e) from the saved LSE. dQ is accumulated in f32 in global memory with
// atomics (dS goes through shared memory so dQ = dS K runs on tensor cores), then scaled and converted by
// a postprocess kernel. Warp w owns 16 keys (and, with DSPLIT > 1, 1/DSPLIT of the head dim of dK/dV).
#pragma once
#include <cmath>

#include "core/cuda_check.hpp"
#include "flashkit/error.hpp"
#include "kernels/cuda/flash_api.hpp"
#include "kernels/cuda/flash_common.cuh"
#include "kernels/cuda/launch.hpp"

namespace flashkit::cuda {

template <int D, int NW, int DSPLIT, int BM, int STAGES>
struct BwdCfg {
  static constexpr int BN = 16 * NW / DSPLIT;
  static constexpr size_t kv_bytes = size_t(BN) * D * 2;
  static constexpr size_t q_bytes = size_t(BM) * D * 2;
  static constexpr size_t ds_bytes = size_t(BM) * BN * 2;
  static constexpr size_t smem = 2 * kv_bytes + 2 * STAGES * q_bytes + ds_bytes + 2 * STAGES * BM * 4;
};

template <typename T, int D, int NW, int DSPLIT, int BM, int STAGES>
__global__ void __launch_bounds__(NW * 32) flash_bwd_kernel(const BwdParams p) {
  using Op = MmaOp<T>;
  using Cfg = BwdCfg<D, NW, DSPLIT, BM, STAGES>;
  constexpr int BN = Cfg::BN, NT = NW * 32, CH = D / 8, DW = D / DSPLIT;
  constexpr int WM = BM / 16, WN = NW / WM, QCOLS = D / WN;
  static_assert(NW % WM == 0 && QCOLS % 16 == 0 && DW % 16 == 0, "bad backward tiling");
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sK = smem_u32(smem);
  const uint32_t sV = sK + uint32_t(Cfg::kv_bytes);
  const uint32_t sQ0 = sV + uint32_t(Cfg::kv_bytes);
  const uint32_t sdO0 = sQ0 + uint32_t(STAGES * Cfg::q_bytes);
  const uint32_t sdS = sdO0 + uint32_t(STAGES * Cfg::q_bytes);
  uint8_t* sdS_ptr = smem + (sdS - sK);
  float* sL = reinterpret_cast<float*>(smem + (sdS - sK) + Cfg::ds_bytes);  // [STAGES][BM]
  float* sDl = sL + STAGES * BM;                                            // [STAGES][BM]

  const kernels::AttentionFwdArgs& a = p.g.fwd;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int kb = warp / DSPLIT, dsi = warp % DSPLIT;
  const kernels::SeqRange sr = kernels::seq_range(a.shape, blockIdx.z);
  const int64_t nq = sr.nq, nk = sr.nk;
  const int64_t n0 = int64_t(blockIdx.x) * BN;
  if (n0 >= nk) return;
  const int kvh = blockIdx.y;
  const int group = int(a.shape.heads / a.shape.kv_heads);
  const int dreal = int(a.shape.head_dim);

  // Query rows that see any key of [n0, n0+BN).
  int mb_lo, nmb;
  key_tile_query_blocks(a.mask, n0, BN, nq, nk, BM, mb_lo, nmb);
  const int nsteps = nmb * group;

  const T* qbase = static_cast<const T*>(p.g.fwd.q.data) + sr.bslot * a.q.stride_b + sr.q0 * a.q.stride_s;
  const T* dobase = static_cast<const T*>(p.g.dout.data) + sr.bslot * p.g.dout.stride_b + sr.q0 * p.g.dout.stride_s;
  const T* kbase = static_cast<const T*>(a.k.data) + sr.bslot * a.k.stride_b + kvh * a.k.stride_h + sr.k0 * a.k.stride_s;
  const T* vbase = static_cast<const T*>(a.v.data) + sr.bslot * a.v.stride_b + kvh * a.v.stride_h + sr.k0 * a.v.stride_s;

  auto step_coords = [&](int sidx, int& h, int64_t& m0) {
    h = kvh * group + sidx / nmb;
    m0 = int64_t(mb_lo + sidx % nmb) * BM;
  };
  auto load_step = [&](int sidx, int st) {
    int h;
    int64_t m0;
    step_coords(sidx, h, m0);
    const uint32_t q_st = sQ0 + st * uint32_t(Cfg::q_bytes), do_st = sdO0 + st * uint32_t(Cfg::q_bytes);
#pragma unroll 2
    for (int idx = tid; idx < BM * CH; idx += NT) {
      const int r = idx / CH, c = idx % CH;
      const int64_t i = m0 + r;
      const bool ok = i < nq && c * 8 < dreal;
      cp_async16(q_st + swz<D>(r, c), ok ? qbase + i * a.q.stride_s + h * a.q.stride_h + c * 8 : qbase, ok);
      cp_async16(do_st + swz<D>(r, c),
                 ok ? dobase + i * p.g.dout.stride_s + h * p.g.dout.stride_h + c * 8 : dobase, ok);
    }
    for (int r = tid; r < BM; r += NT) {
      const int64_t i = m0 + r;
      float L = INFINITY, dd = 0.f;
      if (i < nq) {
        const int64_t ridx = a.lse_index(sr, h, i);
        L = bwd_row_lse2(a.mask, a.lse[ridx], i, nq, nk);
        dd = p.dsum[ridx];
      }
      sL[st * BM + r] = L;
      sDl[st * BM + r] = dd;
    }
  };

  // K, V tile.
  for (int idx = tid; idx < BN * CH; idx += NT) {
    const int r = idx / CH, c = idx % CH;
    const int64_t j = n0 + r;
    const bool ok = j < nk && c * 8 < dreal;
    cp_async16(sK + swz<D>(r, c), ok ? kbase + j * a.k.stride_s + c * 8 : kbase, ok);
    cp_async16(sV + swz<D>(r, c), ok ? vbase + j * a.v.stride_s + c * 8 : vbase, ok);
  }
  if (nsteps > 0) load_step(0, 0);
  cp_async_commit();

  float dk[DW / 8][4], dv[DW / 8][4];
#pragma unroll
  for (int d = 0; d < DW / 8; ++d)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[d][e] = dv[d][e] = 0.f;

  const bool use_cap = a.softcap > 0.f;
  const float sl2 = a.scale * kLog2e;
  const float cap_pre = use_cap ? a.scale / a.softcap : 0.f;
  const float cap_post = a.softcap * kLog2e;

  for (int sidx = 0; sidx < nsteps; ++sidx) {
    const int st = STAGES == 1 ? 0 : (sidx & 1);
    int h;
    int64_t m0;
    step_coords(sidx, h, m0);
    cp_async_wait<0>();
    __syncthreads();
    if constexpr (STAGES == 2) {
      if (sidx + 1 < nsteps) {
        load_step(sidx + 1, st ^ 1);
        cp_async_commit();
      }
    }
    const uint32_t sQ = sQ0 + st * uint32_t(Cfg::q_bytes), sdO = sdO0 + st * uint32_t(Cfg::q_bytes);
    const float* L = sL + st * BM;
    const float* Dl = sDl + st * BM;

    // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys x BM queries.
    float s[BM / 8][4], dp[BM / 8][4];
#pragma unroll
    for (int i = 0; i < BM / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][e] = dp[i][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ak[4], av[4];
      ldsm_x4(sK + swz<D>(kb * 16 + (lane & 15), kk * 2 + (lane >> 4)), ak[0], ak[1], ak[2], ak[3]);
      ldsm_x4(sV + swz<D>(kb * 16 + (lane & 15), kk * 2 + (lane >> 4)), av[0], av[1], av[2], av[3]);
#pragma unroll
      for (int nt2 = 0; nt2 < BM / 16; ++nt2) {
        uint32_t b0, b1, b2, b3;
        const int row = nt2 * 16 + (lane & 7) + ((lane >> 4) << 3), ch = kk * 2 + ((lane >> 3) & 1);
        ldsm_x4(sQ + swz<D>(row, ch), b0, b1, b2, b3);
        Op::run(s[2 * nt2], ak, b0, b1);
        Op::run(s[2 * nt2 + 1], ak, b2, b3);
        ldsm_x4(sdO + swz<D>(row, ch), b0, b1, b2, b3);
        Op::run(dp[2 * nt2], av, b0, b1);
        Op::run(dp[2 * nt2 + 1], av, b2, b3);
      }
    }
    // P and dS (w.r.t. the raw dot product, without the final factor `scale`).
    const bool full = m0 + BM <= nq && n0 + BN <= nk && a.mask.lo(m0 + BM - 1, nq, nk) <= n0 &&
                      a.mask.hi(m0, nq, nk) >= n0 + BN;
#pragma unroll
    for (int nt = 0; nt < BM / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = nt * 8 + 2 * t4 + (e & 1);
        float x = s[nt][e], f = 1.f;
        if (use_cap) {
          const float th = fast_tanh(x * cap_pre);
          x = cap_post * th;
          f = 1.f - th * th;
        } else {
          x *= sl2;
        }
        float P = fast_exp2(x - L[qi]);
        if (!full) {
          const int64_t j = n0 + kb * 16 + g + 8 * (e >> 1), i = m0 + qi;
          if (i >= nq || j >= nk || j < a.mask.lo(i, nq, nk) || j >= a.mask.hi(i, nq, nk)) P = 0.f;
        }
        s[nt][e] = P;
        dp[nt][e] = P * (dp[nt][e] - Dl[qi]) * f;
      }
    // dV += P^T dO, dK += dS^T Q over this warp's DW columns.
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
      uint32_t ap[4], as[4];
      ap[0] = Op::pack(s[2 * kk][0], s[2 * kk][1]);
      ap[1] = Op::pack(s[2 * kk][2], s[2 * kk][3]);
      ap[2] = Op::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      ap[3] = Op::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      as[0] = Op::pack(dp[2 * kk][0], dp[2 * kk][1]);
      as[1] = Op::pack(dp[2 * kk][2], dp[2 * kk][3]);
      as[2] = Op::pack(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
      as[3] = Op::pack(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
#pragma unroll
      for (int dt2 = 0; dt2 < DW / 16; ++dt2) {
        uint32_t b0, b1, b2, b3;
        const int row = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), ch = (dsi * DW) / 8 + dt2 * 2 + (lane >> 4);
        ldsm_x4_t(sdO + swz<D>(row, ch), b0, b1, b2, b3);
        Op::run(dv[2 * dt2], ap, b0, b1);
        Op::run(dv[2 * dt2 + 1], ap, b2, b3);
        ldsm_x4_t(sQ + swz<D>(row, ch), b0, b1, b2, b3);
        Op::run(dk[2 * dt2], as, b0, b1);
        Op::run(dk[2 * dt2 + 1], as, b2, b3);
      }
      if (dsi == 0) {  // dS to shared memory as [query][key] for dQ = dS K
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int qi = (2 * kk + half) * 8 + 2 * t4 + (e & 1);
            const int kl = kb * 16 + g + 8 * (e >> 1);
            *reinterpret_cast<T*>(sdS_ptr + swz<BN>(qi, kl >> 3) + (kl & 7) * 2) = Op::from_f32(dp[2 * kk + half][e]);
          }
      }
    }
    __syncthreads();
    // dQ tile (BM x D) += dS (BM x BN) K (BN x D); warp (wm, wn) owns rows wm*16.. and columns wn*QCOLS..
    {
      const int wm = warp % WM, wn = warp / WM;
      float dq[QCOLS / 8][4];
#pragma unroll
      for (int d = 0; d < QCOLS / 8; ++d) dq[d][0] = dq[d][1] = dq[d][2] = dq[d][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        uint32_t af[4];
        ldsm_x4(sdS + swz<BN>(wm * 16 + (lane & 15), kk * 2 + (lane >> 4)), af[0], af[1], af[2], af[3]);
#pragma unroll
        for (int dt2 = 0; dt2 < QCOLS / 16; ++dt2) {
          uint32_t b0, b1, b2, b3;
          ldsm_x4_t(sK + swz<D>(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), (wn * QCOLS) / 8 + dt2 * 2 + (lane >> 4)),
                    b0, b1, b2, b3);
          Op::run(dq[2 * dt2], af, b0, b1);
          Op::run(dq[2 * dt2 + 1], af, b2, b3);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t i = m0 + wm * 16 + g + 8 * r;
        if (i >= nq) continue;
        float* dst = p.dq_accum + a.lse_index(sr, h, i) * D + wn * QCOLS;
#pragma unroll
        for (int d = 0; d < QCOLS / 8; ++d) {
          const int col = d * 8 + 2 * t4;
          if (wn * QCOLS + col < dreal) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            atomicAdd(reinterpret_cast<float2*>(dst + col), make_float2(dq[d][2 * r], dq[d][2 * r + 1]));
#else
            atomicAdd(dst + col, dq[d][2 * r]);
            atomicAdd(dst + col + 1, dq[d][2 * r + 1]);
#endif
          }
        }
      }
    }
    if constexpr (STAGES == 1) {
      if (sidx + 1 < nsteps) {
        __syncthreads();
        load_step(sidx + 1, 0);
        cp_async_commit();
      }
    }
  }

  cp_async_wait<0>();  // nothing may be in flight at exit (a tile no query sees skips the loop)
  // dK (times scale) and dV.
  T* dkbase = static_cast<T*>(p.g.dk.data) + sr.bslot * p.g.dk.stride_b + kvh * p.g.dk.stride_h + sr.k0 * p.g.dk.stride_s;
  T* dvbase = static_cast<T*>(p.g.dv.data) + sr.bslot * p.g.dv.stride_b + kvh * p.g.dv.stride_h + sr.k0 * p.g.dv.stride_s;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t j = n0 + kb * 16 + g + 8 * r;
    if (j >= nk) continue;
#pragma unroll
    for (int d = 0; d < DW / 8; ++d) {
      const int col = dsi * DW + d * 8 + 2 * t4;
      if (col < dreal) {
        *reinterpret_cast<uint32_t*>(dkbase + j * p.g.dk.stride_s + col) =
            Op::pack(dk[d][2 * r] * a.scale, dk[d][2 * r + 1] * a.scale);
        *reinterpret_cast<uint32_t*>(dvbase + j * p.g.dv.stride_s + col) = Op::pack(dv[d][2 * r], dv[d][2 * r + 1]);
      }
    }
  }
}

template <typename T, int D, int NW, int DSPLIT, int BM, int STAGES>
void launch_bwd_cfg(const BwdParams& p, cudaStream_t stream) {
  using Cfg = BwdCfg<D, NW, DSPLIT, BM, STAGES>;
  auto kern = flash_bwd_kernel<T, D, NW, DSPLIT, BM, STAGES>;
  set_max_dynamic_smem(kern, Cfg::smem, "cudaFuncSetAttribute(flash backward)");
  const auto& sh = p.g.fwd.shape;
  const int64_t nblocks = (sh.max_seqlen_k + Cfg::BN - 1) / Cfg::BN;
  if (nblocks == 0) return;
  dim3 grid(unsigned(nblocks), unsigned(sh.kv_heads), unsigned(sh.batch));
  kern<<<grid, NW * 32, Cfg::smem, stream>>>(p);
  check_cuda(cudaGetLastError(), "flash backward launch");
}

// The tile of tiles.hpp: 8 warps of 16 keys (d256: pairs of warps splitting the head dim).
template <typename T, int D>
void launch_flash_bwd(const BwdParams& p, cudaStream_t stream) {
  constexpr Sm80BwdTile t = sm80_bwd_tile(D);
  launch_bwd_cfg<T, D, t.warps, t.dsplit, t.bm, t.stages>(p, stream);
}

}  // namespace flashkit::cuda
