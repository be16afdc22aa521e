// FlashAttention backward for Hopper (sm_90a): warpgroup MMAs (wgmma.cuh). Same algorithm and contract as the
// mma.sync kernel (flash_bwd.cuh): one CTA per (key tile of BN = 64*NWG keys, KV head, sequence) keeps K, V
// and dK, dV (registers) while it walks every query tile of BM rows of every query head of its GQA group, so
// dK/dV are reduced over the group without atomics; dQ goes to the f32 accumulator p.dq_accum with atomics
// (scaled and converted by the postprocess kernel in flash_aux.cu). Warpgroup w owns keys [64w, 64w+64) of
// the tile. Per query tile, per warpgroup (all operands in the 128B-swizzled panel layout of wgmma.cuh):
//   S^T  = K Q^T     SS, A = this warpgroup's K rows, B = Q (both K-major: head dim contiguous), N = BM
//   dP^T = V dO^T    SS, same shapes
//   P^T  = exp2(S^T*scale*log2e - LSE*log2e), dS^T = P^T * (dP^T - Dsum) (* softcap chain rule); LSE and
//          Dsum are per query, i.e. per accumulator COLUMN, so they are staged in shared memory
//   dV  += P^T dO    RS, A = P^T from registers (the accumulator converted in place, as the forward does
//                    with P), B = dO read MN-major (the head dim is its contiguous N dimension)
//   dK  += dS^T Q    RS, B = Q read MN-major
//   dS^T (16-bit) -> shared memory [key][query]: 32-bit stores of two adjacent queries straight from the
//          accumulator layout; fence.proxy.async + CTA barrier (dQ needs both warpgroups' keys)
//   dQ   = dS K      SS, A = dS read M-major from the dS^T tile (TransA), B = K read MN-major (TransB);
//          BM == 64*NWG: warpgroup w computes query rows [64w, 64w+64) x all D; BM == 64: all 64 rows x
//          head-dim columns [w*D/NWG, (w+1)*D/NWG). f32 atomics (float4: partner lanes swap halves first).
// Why the transposed (key-major) formulation: K/V/dK/dV stay with the warpgroup that owns the keys, so dK/dV
// accumulate in registers with no cross-warpgroup traffic, and only dQ needs the shared dS tile.
// Q, dO, LSE and Dsum stream through a 2-stage cp.async pipeline. Included by flash_bwd_sm90_*.cu only.
#pragma once
#include <cmath>
#include <cstdlib>

#include "core/cuda_check.hpp"
#include "kernels/cuda/flash_api.hpp"
#include "kernels/cuda/flash_common.cuh"
#include "kernels/cuda/launch.hpp"
#include "kernels/cuda/wgmma.cuh"

namespace flashkit::cuda {

// Shared-memory accesses by 32-bit address (the layout is addressed by offsets, as the wgmma descriptors are).
__device__ __forceinline__ void sts_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void sts_f32(uint32_t addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(addr), "f"(v) : "memory");
}
__device__ __forceinline__ float2 lds_f32x2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}
// x, opaque to the optimizer (see the use in the main loop).
__device__ __forceinline__ uint32_t opaque_u32(uint32_t x) {
  asm volatile("" : "+r"(x));
  return x;
}

// The query rows [q_lo, q_hi) that see key j: key j is visible to query i iff lo(i) <= j < hi(i), i.e.
// q_lo(j) <= i < q_hi(j) with (clamps of lo/hi to [0, nk] change nothing for 0 <= j < nk)
//   q_lo = j - off - window_right (window_right >= 0, else 0),  q_hi = j - off + window_left + 1
//   (window_left >= 0, else nq), both clipped to [0, nq]; a key past the sequence sees nothing (off = nk - nq).
__device__ __forceinline__ void bwd_key_queries(const kernels::AttentionMask& m, int64_t j, int64_t off, int nq, int nk,
                                                int& q_lo, int& q_hi) {
  int64_t lo = m.window_right >= 0 ? j - off - m.window_right : 0;
  int64_t hi = m.window_left >= 0 ? j - off + m.window_left + 1 : nq;
  lo = lo < 0 ? 0 : (lo > nq ? nq : lo);
  hi = hi < 0 ? 0 : (hi > nq ? nq : hi);
  if (j >= nk) hi = 0;
  q_lo = int(lo);
  q_hi = int(hi);
}

// The Hopper backwards' cp.async copies (d64/d128 here, d256 in flash_bwd_sm90_d256.cuh). Every thread copies the
// 16-byte chunk column tid % CH of rows tid / CH + k * (NT / CH); head-dim columns past dreal and rows past the
// sequence are zero-filled. K and V of the CTA's BN keys from n0 (kbase, vbase: the sequence's first key of this KV
// head) into their BN-row panels:
template <int BN, int NT, int CH, typename T>
__device__ __forceinline__ void bwd_load_kv(uint32_t sK, uint32_t sV, const T* kbase, const T* vbase, int64_t k_stride,
                                            int64_t v_stride, int n0, int nk, int dreal) {
  constexpr int RSTEP = NT / CH;
  static_assert(NT % CH == 0 && BN % RSTEP == 0, "bad copy tiling");
  const int tid = threadIdx.x, cc = tid % CH, rr0 = tid / CH;
  const bool c_ok = cc * 8 < dreal;
#pragma unroll
  for (int k = 0; k < BN / RSTEP; ++k) {
    const int r = rr0 + k * RSTEP;
    const int j = n0 + r;
    const bool ok = c_ok && j < nk;
    cp_async16(sK + pswz<BN>(r, cc), ok ? kbase + j * k_stride + cc * 8 : kbase, ok);
    cp_async16(sV + pswz<BN>(r, cc), ok ? vbase + j * v_stride + cc * 8 : vbase, ok);
  }
}
// and one query step: the Q and dO rows [m0, m0 + BM) of query head h into a stage's BM-row panels (qbase, dobase:
// the sequence's first query), with the rows' LSE (log2 units, bwd_row_lse2) and Dsum into sL / sDs [BM] f32.
template <int BM, int NT, int CH, typename T>
__device__ __forceinline__ void bwd_load_q_step(const BwdParams& p, const kernels::SeqRange& sr, uint32_t sQ,
                                                uint32_t sdO, uint32_t sL, uint32_t sDs, const T* qbase,
                                                const T* dobase, int h, int m0, int nq, int nk, int dreal) {
  constexpr int RSTEP = NT / CH;
  static_assert(NT % CH == 0 && BM % RSTEP == 0, "bad copy tiling");
  const kernels::AttentionFwdArgs& a = p.g.fwd;
  const int tid = threadIdx.x, cc = tid % CH, rr0 = tid / CH;
  const bool c_ok = cc * 8 < dreal;
#pragma unroll
  for (int k = 0; k < BM / RSTEP; ++k) {
    const int r = rr0 + k * RSTEP;
    const int i = m0 + r;
    const bool ok = c_ok && i < nq;
    cp_async16(sQ + pswz<BM>(r, cc), ok ? qbase + i * a.q.stride_s + h * a.q.stride_h + cc * 8 : qbase, ok);
    cp_async16(sdO + pswz<BM>(r, cc), ok ? dobase + i * p.g.dout.stride_s + h * p.g.dout.stride_h + cc * 8 : dobase,
               ok);
  }
  if (tid < BM) {
    const int i = m0 + tid;
    float L = INFINITY, dd = 0.f;
    if (i < nq) {
      const int64_t ridx = a.lse_index(sr, h, i);
      L = bwd_row_lse2(a.mask, a.lse[ridx], i, nq, nk);
      dd = p.dsum[ridx];
    }
    sts_f32(sL + tid * 4, L);
    sts_f32(sDs + tid * 4, dd);
  }
}

template <int D, int BM, int NWG>
struct Sm90BwdCfg {
  static constexpr int BN = 64 * NWG, NT = 128 * NWG;
  static constexpr uint32_t kv_bytes = BN * D * 2, q_bytes = BM * D * 2, ds_bytes = BN * BM * 2;
  // dQ split between the warpgroups: by query rows when there is one 64-row slice per warpgroup, else by
  // head-dim columns (BM == 64).
  static constexpr bool dq_rows = BM == 64 * NWG;
  static constexpr int DQ_N = dq_rows ? D : D / NWG;  // dQ columns per warpgroup (wgmma N)
  // Shared-memory layout (byte offsets from the 1024-aligned base): K, V [BN][D] in panels of BN rows; Q, dO
  // [2 stages][BM][D] in panels of BM rows; dS^T [BN keys][BM queries] in panels of BN rows; LSE*log2e and
  // Dsum [2 stages][BM] f32.
  static constexpr uint32_t oK = 0, oV = kv_bytes, oQ = 2 * kv_bytes, odO = oQ + 2 * q_bytes, odS = odO + 2 * q_bytes;
  static constexpr uint32_t oL = odS + ds_bytes, oDs = oL + 2 * BM * 4, bytes = oDs + 2 * BM * 4;
  static constexpr size_t smem = size_t(bytes) + 1024;  // + alignment slack
  static_assert(kv_bytes % 1024 == 0 && q_bytes % 1024 == 0 && ds_bytes % 1024 == 0, "panels must stay 1024-aligned");
  static_assert(BM % 64 == 0 && (dq_rows || BM == 64), "unsupported dQ split");
  static_assert(DQ_N % 32 == 0 && (DQ_N >= 64 || 64 % DQ_N == 0), "dQ column slice must not straddle a panel");
};

// CAP: softcap > 0 (a separate instantiation: the softcap code in the loop costs registers even when unused).
template <typename T, int D, int BM, int NWG, bool CAP>
__global__ void __launch_bounds__(NWG * 128, 1) flash_bwd_sm90_kernel(const BwdParams p) {
#if FK_SM90_ENABLED
  using Op = MmaOp<T>;
  using Cfg = Sm90BwdCfg<D, BM, NWG>;
  constexpr int BN = Cfg::BN, NT = Cfg::NT, CH = D / 8, DQ_N = Cfg::DQ_N;
  extern __shared__ uint8_t smem_raw[];
  // Shared addresses are 32-bit offsets from `base` (layout in Sm90BwdCfg). The main loop re-derives them
  // from an opaque copy of base each step, so the compiler recomputes them (one add each) instead of
  // keeping dozens of loop-invariant addresses and descriptors in registers.
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;

  const kernels::AttentionFwdArgs& a = p.g.fwd;
  const int tid = threadIdx.x, wg = tid >> 7, wq = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const kernels::SeqRange sr = kernels::seq_range(a.shape, blockIdx.z);
  // Token indices in int (sequence lengths < 2^31); element offsets in int64.
  const int nq = int(sr.nq), nk = int(sr.nk);
  const int n0 = int(blockIdx.x) * BN;
  if (n0 >= nk) return;
  const int kvh = blockIdx.y;
  const int group = int(a.shape.heads / a.shape.kv_heads);
  const int dreal = int(a.shape.head_dim);
  const int64_t off = int64_t(nk) - nq;
  const int kw0 = n0 + 64 * wg;  // this warpgroup's first key

  // Query rows that see any key of [n0, n0+BN) (as flash_bwd.cuh).
  int mb_lo, nmb;
  key_tile_query_blocks(a.mask, n0, BN, nq, nk, BM, mb_lo, nmb);
  const int nsteps = nmb * group;

  // Queries that see each of this thread's two keys (accumulator rows g and g+8 of its warp's 16).
  int q_lo[2], q_hi[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) bwd_key_queries(a.mask, kw0 + wq * 16 + g + 8 * r, off, nq, nk, q_lo[r], q_hi[r]);

  const T* qbase = static_cast<const T*>(a.q.data) + sr.bslot * a.q.stride_b + sr.q0 * a.q.stride_s;
  const T* dobase = static_cast<const T*>(p.g.dout.data) + sr.bslot * p.g.dout.stride_b + sr.q0 * p.g.dout.stride_s;
  const T* kbase = static_cast<const T*>(a.k.data) + sr.bslot * a.k.stride_b + kvh * a.k.stride_h + sr.k0 * a.k.stride_s;
  const T* vbase = static_cast<const T*>(a.v.data) + sr.bslot * a.v.stride_b + kvh * a.v.stride_h + sr.k0 * a.v.stride_s;

  // Step s covers query head kvh*group + s/nmb, query rows [m0, m0+BM) with m0 = (mb_lo + s%nmb)*BM.
  auto step_coords = [&](int sidx, int& h, int& m0) {
    h = kvh * group + sidx / nmb;
    m0 = (mb_lo + sidx % nmb) * BM;
  };
  auto load_step = [&](int sidx, int st) {
    int h, m0;
    step_coords(sidx, h, m0);
    bwd_load_q_step<BM, NT, CH>(p, sr, base + Cfg::oQ + st * Cfg::q_bytes, base + Cfg::odO + st * Cfg::q_bytes,
                                base + Cfg::oL + st * BM * 4, base + Cfg::oDs + st * BM * 4, qbase, dobase, h, m0, nq,
                                nk, dreal);
  };

  // K, V tile, and the first query step, in one cp.async group.
  bwd_load_kv<BN, NT, CH>(base + Cfg::oK, base + Cfg::oV, kbase, vbase, a.k.stride_s, a.v.stride_s, n0, nk, dreal);
  if (nsteps > 0) load_step(0, 0);
  cp_async_commit();

  // Accumulators (m64nN layout, see wgmma.cuh): x[4i + e] is row 16*wq + g + 8*(e>>1), column 8i + 2*t4 + (e&1).
  float dk[D / 2], dv[D / 2];  // rows: this warpgroup's keys; columns: head dim
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;

  constexpr bool use_cap = CAP;
  const float sl2 = a.scale * kLog2e;
  const float cap_pre = use_cap ? a.scale / a.softcap : 0.f;
  const float cap_post = a.softcap * kLog2e;

  // dQ operand offsets of this warpgroup (see the header comment).
  constexpr uint32_t kPanelK = BN * 128;  // bytes of one 64-column panel of K or of dS^T
  const uint32_t dq_a_off = Cfg::dq_rows ? wg * kPanelK : 0u;
  const int dq_col0 = Cfg::dq_rows ? 0 : wg * DQ_N;
  // A 32-column slice (D = 64, BM = 64) starts 64 bytes into the panel rows: the swizzle XOR acts on absolute
  // address bits, as for the +32-byte K steps of K-major operands.
  const uint32_t dq_b_off = uint32_t(dq_col0 / 64) * kPanelK + uint32_t(dq_col0 % 64) * 2;

  for (int sidx = 0; sidx < nsteps; ++sidx) {
    const int st = sidx & 1;
    int h, m0;
    step_coords(sidx, h, m0);
    // Stage st landed (this thread's copies; fence: visible to wgmma; barrier: everyone's). The barrier also
    // orders the previous step's reads of stage st^1 and of dS^T (all waited on) before they are overwritten.
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
    if (sidx + 1 < nsteps) load_step(sidx + 1, st ^ 1);
    cp_async_commit();
    const uint32_t sb = opaque_u32(base);
    const uint32_t sK = sb + Cfg::oK, sV = sb + Cfg::oV, sdS = sb + Cfg::odS;
    const uint32_t sQ = sb + Cfg::oQ + st * Cfg::q_bytes, sdO = sb + Cfg::odO + st * Cfg::q_bytes;
    const uint32_t sLq = sb + Cfg::oL + st * (BM * 4) + t4 * 8;   // LSE of this thread's columns 2*t4, +1
    const uint32_t sDq = sb + Cfg::oDs + st * (BM * 4) + t4 * 8;  // Dsum of the same

    // S^T = K Q^T and dP^T = V dO^T: K dim = head dim, 16 per wgmma; K-major steps of 32 bytes, a panel per 64.
    // Declared here, uninitialized (the first wgmma overwrites them): not live across steps.
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

    // Whether every (query, key) pair of this warpgroup's 64 keys x BM queries is visible (no masking).
    const bool full = m0 + BM <= nq && kw0 + 64 <= nk && a.mask.lo(m0 + BM - 1, nq, nk) <= kw0 &&
                      a.mask.hi(m0, nq, nk) >= kw0 + 64;
    // Visible columns of this thread's key rows, relative to its column 2*t4: qi - 2*t4 in [vlo, vhi).
    const int vlo[2] = {q_lo[0] - m0 - 2 * t4, q_lo[1] - m0 - 2 * t4};
    const int vhi[2] = {q_hi[0] - m0 - 2 * t4, q_hi[1] - m0 - 2 * t4};
    // P = exp2(S*scale*log2e - LSE*log2e), dS = P (dP - Dsum) (times 1 - tanh^2 with softcap: the scores are
    // softcap*tanh(scale*S/softcap), and the common factor `scale` is applied to dK here at the end and to dQ
    // by the postprocess). Masking comes after, as a separate pass. The two variants are separate loops
    // (a per-element `if (use_cap)` gets if-converted into computing both, which costs registers).
    wgmma_wait<1>();  // S^T is in
    wgmma_fence_regs<BM / 2>(s);
    if constexpr (!use_cap) {  // P now, overlapping the dP^T wgmmas
#pragma unroll
      for (int nt = 0; nt < BM / 8; ++nt) {
        const float2 L2 = lds_f32x2(sLq + nt * 32);
#pragma unroll
        for (int e = 0; e < 4; ++e) s[4 * nt + e] = fast_exp2(s[4 * nt + e] * sl2 - ((e & 1) ? L2.y : L2.x));
      }
    }
    wgmma_wait<0>();  // dP^T is in
    wgmma_fence_regs<BM / 2>(dp);
    if constexpr (!use_cap) {
#pragma unroll
      for (int nt = 0; nt < BM / 8; ++nt) {
        const float2 D2 = lds_f32x2(sDq + nt * 32);
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[4 * nt + e] = s[4 * nt + e] * (dp[4 * nt + e] - ((e & 1) ? D2.y : D2.x));
      }
    } else {  // softcap: P and dS in one pass (dS needs 1 - tanh^2)
#pragma unroll
      for (int nt = 0; nt < BM / 8; ++nt) {
        const float2 L2 = lds_f32x2(sLq + nt * 32), D2 = lds_f32x2(sDq + nt * 32);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float th = fast_tanh(s[4 * nt + e] * cap_pre);
          const float P = fast_exp2(cap_post * th - ((e & 1) ? L2.y : L2.x));
          s[4 * nt + e] = P;
          dp[4 * nt + e] = P * (dp[4 * nt + e] - ((e & 1) ? D2.y : D2.x)) * (1.f - th * th);
        }
      }
    }
    if (!full) {  // P = dS = 0 outside the mask (a separate pass: keeps the predicates out of the loops above)
#pragma unroll
      for (int nt = 0; nt < BM / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qc = nt * 8 + (e & 1), r = e >> 1;  // column - 2*t4, row half
          if (qc < vlo[r] || qc >= vhi[r]) s[4 * nt + e] = dp[4 * nt + e] = 0.f;
        }
    }

    // 16-bit A fragments of P^T and dS^T: k-step kk (queries 16kk..16kk+15) is accumulator columns
    // 16kk..16kk+15, i.e. elements 8kk..8kk+7 (the mma.sync m16n8k16 A layout per warp).
    uint32_t pa[BM / 16][4], sa[BM / 16][4];
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        pa[kk][q] = Op::pack(s[8 * kk + 2 * q], s[8 * kk + 2 * q + 1]);
        sa[kk][q] = Op::pack(dp[8 * kk + 2 * q], dp[8 * kk + 2 * q + 1]);
      }
    // dS^T to shared memory: sa[kk][q] holds row (key) 16*wq + g + 8*(q&1) and queries 8*(2kk + (q>>1)) + 2*t4
    // + {0,1}: one 32-bit word at chunk 2kk + (q>>1) of that key row. Written before the RS wgmmas below are
    // issued (their A registers must not be touched while they run).
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int key = wg * 64 + wq * 16 + g + 8 * (q & 1);
        sts_u32(sdS + pswz<BN>(key, 2 * kk + (q >> 1)) + 4 * t4, sa[kk][q]);
      }

    // dV += P^T dO and dK += dS^T Q: K dim = the step's queries; B MN-major (rows = queries, N = head dim
    // contiguous): LBO = panel stride BM*128, SBO = 8 rows, 16 query rows = 2048 bytes per k-step.
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk)
      Wgmma<T, D>::template rs<1>(dv, pa[kk], smem_desc(sdO + kk * 2048, BM * 128, 1024), 1);
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk)
      Wgmma<T, D>::template rs<1>(dk, sa[kk], smem_desc(sQ + kk * 2048, BM * 128, 1024), 1);
    wgmma_commit();
#ifdef FK_BWD90_RETIRE_DKV
    // Retire them before dQ (frees the P^T/dS^T fragments before the dQ accumulator is live; for A/B runs).
    wgmma_wait<0>();
#endif

    // Both warpgroups' dS^T stores visible to the async proxy before dQ reads them.
    fence_proxy_async();
    __syncthreads();

    // dQ slice = dS K: K dim = the tile's BN keys. A = dS (M = queries) read from dS^T, whose rows are keys
    // and whose contiguous dimension is the query: M-major (TransA). B = K (N = head dim contiguous):
    // MN-major (TransB). Both step 16 key rows = 2048 bytes.
    float dq[DQ_N / 2];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
      Wgmma<T, DQ_N>::template ss<1, 1>(dq, smem_desc(sdS + dq_a_off + kk * 2048, kPanelK, 1024),
                                        smem_desc(sK + dq_b_off + kk * 2048, kPanelK, 1024), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();  // dV, dK and dQ
    wgmma_fence_regs<D / 2>(dv);
    wgmma_fence_regs<D / 2>(dk);
    wgmma_fence_regs<DQ_N / 2>(dq);

    // dQ atomics, 16 bytes each: lanes t4 and t4^1 swap halves so the even lane holds row g, columns
    // 8i + 2*(t4&2) .. +3 and the odd lane the same columns of row g+8. Padded head-dim columns carry zeros
    // (K is zero-filled there) into dq_accum's own padding.
    {
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

  cp_async_wait<0>();  // nothing may be in flight at exit (a tile no query sees skips the loop)
  // dK (times scale) and dV.
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

template <typename T, int D, int BM, int NWG, bool CAP>
bool launch_bwd_sm90_kernel(const BwdParams& p, cudaStream_t stream) {
  using Cfg = Sm90BwdCfg<D, BM, NWG>;
  auto kern = flash_bwd_sm90_kernel<T, D, BM, NWG, CAP>;
  if (!sm90_kernel_usable(kern)) return false;
  set_max_dynamic_smem(kern, Cfg::smem, "cudaFuncSetAttribute(flash backward sm90)");
  const auto& sh = p.g.fwd.shape;
  const int64_t nblocks = (sh.max_seqlen_k + Cfg::BN - 1) / Cfg::BN;
  if (nblocks == 0) return true;
  dim3 grid(unsigned(nblocks), unsigned(sh.kv_heads), unsigned(sh.batch));
  kern<<<grid, Cfg::NT, Cfg::smem, stream>>>(p);
  check_cuda(cudaGetLastError(), "flash backward (sm90) launch");
  return true;
}

template <typename T, int D, int BM, int NWG>
bool launch_bwd_sm90_cfg(const BwdParams& p, cudaStream_t stream) {
  return p.g.fwd.softcap > 0.f ? launch_bwd_sm90_kernel<T, D, BM, NWG, true>(p, stream)
                               : launch_bwd_sm90_kernel<T, D, BM, NWG, false>(p, stream);
}

// The tile of sm90_bwd_tile(D, config, softcap) (tiles.hpp; config = Tuning::sm90_bwd_config).
template <typename T, int D>
bool launch_flash_bwd_sm90(const BwdParams& p, int config, cudaStream_t stream) {
  if constexpr (D == 64 || D == 128) {
    constexpr Sm90BwdTile narrow = sm90_bwd_tile(D, 1, true), wide = sm90_bwd_tile(D, 0, false);
    const Sm90BwdTile t = sm90_bwd_tile(D, config, p.g.fwd.softcap > 0.f);
    // The softcap instantiation is separate (its loop code costs registers even when unused); BM 128 only without.
    if (t.bm == narrow.bm) return launch_bwd_sm90_cfg<T, D, narrow.bm, narrow.warpgroups>(p, stream);
    return launch_bwd_sm90_kernel<T, D, wide.bm, wide.warpgroups, false>(p, stream);
  } else {
    (void)config, (void)stream;
    return false;
  }
}

}  // namespace flashkit::cuda
