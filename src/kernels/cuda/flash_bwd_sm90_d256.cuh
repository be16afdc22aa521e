// FlashAttention backward for Hopper (sm_90a) at head dim 256. Same contract as flash_bwd_sm90.cuh (one CTA per
// (key tile, KV head, sequence) walks every query tile of its GQA group; dK/dV in registers, dQ by f32 atomics into
// p.dq_accum), but the d64/d128 split -- each warpgroup owns 64 keys and all D columns of their dK and dV -- needs
// 2 x 64 x 256 f32 accumulators = 256 registers per thread at D = 256. Here the two warpgroups share one tile of
// BN = 64 keys and split every GEMM evenly instead (the FA3 hdim-256 structure, in this file's transposed form):
//   S^T  = K Q^T     SS m64n32: warpgroup w computes all 64 keys x the step's queries [32w, 32w+32)
//   dP^T = V dO^T    SS m64n32, same split
//   P^T, dS^T (16-bit) -> shared memory [key][query] (the exp and mask code is that of flash_bwd_sm90.cuh);
//          fence.proxy.async + CTA barrier (each warpgroup needs the other's query columns)
//   dV[:, 128w..] += P^T dO[:, 128w..]   SS m64n128, A = P^T K-major, B = dO MN-major
//   dK[:, 128w..] += dS^T Q[:, 128w..]   SS m64n128, same
//   dQ[:, 128w..]  = dS K[:, 128w..]     SS m64n128, A = dS M-major from the dS^T tile, B = K MN-major; f32 atomics
// so no product is computed twice (5 GEMM units per tile, where a head-dim split over two CTAs costs 7), and each
// thread holds 64 + 64 registers of dK/dV plus the 64 of dQ (only while P/dS are in shared memory, not in
// registers). Shared memory: K, V 32 KB each, Q and dO 2 stages x 32 KB each, P^T and dS^T 8 KB each: 210 KB,
// one CTA of 256 threads per SM. Included by flash_bwd_sm90_{bf16,f16}_d256.cu only.
#pragma once
#include "kernels/cuda/flash_bwd_sm90.cuh"

namespace flashkit::cuda {

struct Sm90BwdD256Cfg {
  static constexpr int D = 256, BM = 64, BN = 64, NT = 256, CH = D / 8;
  static constexpr int QW = 32;        // query columns of S^T / dP^T per warpgroup
  static constexpr int DW = 128;       // head-dim columns of dK, dV, dQ per warpgroup
  static constexpr uint32_t kv_bytes = BN * D * 2, q_bytes = BM * D * 2, p_bytes = BN * BM * 2;
  static constexpr uint32_t kPanel = 64 * 128;  // bytes of one 64-row x 64-column panel (K, V, Q, dO, P^T, dS^T)
  // Byte offsets from the 1024-aligned base: K, V [64][256]; Q, dO [2 stages][64][256]; P^T, dS^T [64 keys][64
  // queries] (one panel each); LSE*log2e and Dsum [2 stages][64] f32.
  static constexpr uint32_t oK = 0, oV = kv_bytes, oQ = 2 * kv_bytes, odO = oQ + 2 * q_bytes, oP = odO + 2 * q_bytes;
  static constexpr uint32_t odS = oP + p_bytes, oL = odS + p_bytes, oDs = oL + 2 * BM * 4, bytes = oDs + 2 * BM * 4;
  static constexpr size_t smem = size_t(bytes) + 1024;  // + alignment slack
  static_assert(kv_bytes % 1024 == 0 && q_bytes % 1024 == 0 && p_bytes % 1024 == 0, "panels must stay 1024-aligned");
  static_assert(smem <= 227 * 1024, "must fit one SM's shared memory");
};

// CAP: softcap > 0 (a separate instantiation, as in flash_bwd_sm90.cuh).
template <typename T, bool CAP>
__global__ void __launch_bounds__(256, 1) flash_bwd_sm90_d256_kernel(const BwdParams p) {
#if FK_SM90_ENABLED
  using Op = MmaOp<T>;
  using Cfg = Sm90BwdD256Cfg;
  constexpr int D = Cfg::D, BM = Cfg::BM, BN = Cfg::BN, NT = Cfg::NT, CH = Cfg::CH, QW = Cfg::QW, DW = Cfg::DW;
  constexpr uint32_t kPanel = Cfg::kPanel;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;

  const kernels::AttentionFwdArgs& a = p.g.fwd;
  const int tid = threadIdx.x, wg = tid >> 7, wq = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const kernels::SeqRange sr = kernels::seq_range(a.shape, blockIdx.z);
  const int nq = int(sr.nq), nk = int(sr.nk);
  const int n0 = int(blockIdx.x) * BN;
  if (n0 >= nk) return;
  const int kvh = blockIdx.y;
  const int group = int(a.shape.heads / a.shape.kv_heads);
  const int dreal = int(a.shape.head_dim);
  const int64_t off = int64_t(nk) - nq;

  int mb_lo, nmb;
  key_tile_query_blocks(a.mask, n0, BN, nq, nk, BM, mb_lo, nmb);
  const int nsteps = nmb * group;

  // Queries that see each of this thread's two keys (rows g, g+8 of its warp's 16), as in flash_bwd_sm90.cuh.
  int q_lo[2], q_hi[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) bwd_key_queries(a.mask, n0 + wq * 16 + g + 8 * r, off, nq, nk, q_lo[r], q_hi[r]);

  const T* qbase = static_cast<const T*>(a.q.data) + sr.bslot * a.q.stride_b + sr.q0 * a.q.stride_s;
  const T* dobase = static_cast<const T*>(p.g.dout.data) + sr.bslot * p.g.dout.stride_b + sr.q0 * p.g.dout.stride_s;
  const T* kbase = static_cast<const T*>(a.k.data) + sr.bslot * a.k.stride_b + kvh * a.k.stride_h + sr.k0 * a.k.stride_s;
  const T* vbase = static_cast<const T*>(a.v.data) + sr.bslot * a.v.stride_b + kvh * a.v.stride_h + sr.k0 * a.v.stride_s;

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
  bwd_load_kv<BN, NT, CH>(base + Cfg::oK, base + Cfg::oV, kbase, vbase, a.k.stride_s, a.v.stride_s, n0, nk, dreal);
  if (nsteps > 0) load_step(0, 0);
  cp_async_commit();

  // Accumulators (m64nN layout, see wgmma.cuh): x[4i + e] is row 16*wq + g + 8*(e>>1), column 8i + 2*t4 + (e&1).
  float dk[DW / 2], dv[DW / 2];  // rows: the tile's 64 keys; columns: head dims [128*wg, 128*wg + 128)
#pragma unroll
  for (int i = 0; i < DW / 2; ++i) dk[i] = dv[i] = 0.f;

  constexpr bool use_cap = CAP;
  const float sl2 = a.scale * kLog2e;
  const float cap_pre = use_cap ? a.scale / a.softcap : 0.f;
  const float cap_post = a.softcap * kLog2e;
  const int qw0 = wg * QW;                          // this warpgroup's first query column of the step
  const uint32_t d_off = uint32_t(wg) * 2 * kPanel;  // its 128 head-dim columns: two panels in

  for (int sidx = 0; sidx < nsteps; ++sidx) {
    const int st = sidx & 1;
    int h, m0;
    step_coords(sidx, h, m0);
    // Stage st landed; the barrier also orders the previous step's reads of stage st^1, P^T and dS^T (all waited
    // on) before they are overwritten.
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
    if (sidx + 1 < nsteps) load_step(sidx + 1, st ^ 1);
    cp_async_commit();
    const uint32_t sb = opaque_u32(base);
    const uint32_t sK = sb + Cfg::oK, sV = sb + Cfg::oV, sP = sb + Cfg::oP, sdS = sb + Cfg::odS;
    const uint32_t sQ = sb + Cfg::oQ + st * Cfg::q_bytes, sdO = sb + Cfg::odO + st * Cfg::q_bytes;
    const uint32_t sLq = sb + Cfg::oL + st * (BM * 4) + (qw0 + 2 * t4) * 4;
    const uint32_t sDq = sb + Cfg::oDs + st * (BM * 4) + (qw0 + 2 * t4) * 4;

    // S^T = K Q^T and dP^T = V dO^T over the full head dim: K-major steps of 32 bytes, a panel per 64. B = the 32
    // query rows [qw0, qw0+32) of the Q / dO panels (4096 bytes in: still 1024-aligned, so the swizzle holds).
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

    const int qa = m0 + qw0;  // first query of this warpgroup's columns
    const bool full = qa + QW <= nq && n0 + BN <= nk && a.mask.lo(qa + QW - 1, nq, nk) <= n0 &&
                      a.mask.hi(qa, nq, nk) >= n0 + BN;
    const int vlo[2] = {q_lo[0] - qa - 2 * t4, q_lo[1] - qa - 2 * t4};
    const int vhi[2] = {q_hi[0] - qa - 2 * t4, q_hi[1] - qa - 2 * t4};
    wgmma_wait<1>();
    wgmma_fence_regs<QW / 2>(s);
    if constexpr (!use_cap) {
#pragma unroll
      for (int nt = 0; nt < QW / 8; ++nt) {
        const float2 L2 = lds_f32x2(sLq + nt * 32);
#pragma unroll
        for (int e = 0; e < 4; ++e) s[4 * nt + e] = fast_exp2(s[4 * nt + e] * sl2 - ((e & 1) ? L2.y : L2.x));
      }
    }
    wgmma_wait<0>();
    wgmma_fence_regs<QW / 2>(dp);
    if constexpr (!use_cap) {
#pragma unroll
      for (int nt = 0; nt < QW / 8; ++nt) {
        const float2 D2 = lds_f32x2(sDq + nt * 32);
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[4 * nt + e] = s[4 * nt + e] * (dp[4 * nt + e] - ((e & 1) ? D2.y : D2.x));
      }
    } else {
#pragma unroll
      for (int nt = 0; nt < QW / 8; ++nt) {
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
    if (!full) {
#pragma unroll
      for (int nt = 0; nt < QW / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qc = nt * 8 + (e & 1), r = e >> 1;
          if (qc < vlo[r] || qc >= vhi[r]) s[4 * nt + e] = dp[4 * nt + e] = 0.f;
        }
    }

    // P^T and dS^T (16-bit) to shared memory: elements 4nt + 2r, +1 are key row 16*wq + g + 8r and queries
    // qw0 + 8nt + 2*t4, +1: one 32-bit word at chunk (qw0 + 8nt)/8 of that key row.
#pragma unroll
    for (int nt = 0; nt < QW / 8; ++nt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t at = pswz<BN>(wq * 16 + g + 8 * r, qw0 / 8 + nt) + 4 * t4;
        sts_u32(sP + at, Op::pack(s[4 * nt + 2 * r], s[4 * nt + 2 * r + 1]));
        sts_u32(sdS + at, Op::pack(dp[4 * nt + 2 * r], dp[4 * nt + 2 * r + 1]));
      }
    fence_proxy_async();
    __syncthreads();

    // dQ slice = dS K (A = dS M-major from dS^T, B = K MN-major: 16 key rows = 2048 bytes per k-step), then
    // dV += P^T dO and dK += dS^T Q (A K-major: +32 bytes per 16 queries; B MN-major: 16 query rows = 2048
    // bytes; LBO = the panel stride). dQ is committed first so its atomics overlap the dK/dV wgmmas.
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

    // dQ atomics, 16 bytes each (as flash_bwd_sm90.cuh): lanes t4 and t4^1 swap halves.
    {
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
    wgmma_wait<0>();  // dV, dK: the next step overwrites P^T, dS^T and this step's Q/dO stage
    wgmma_fence_regs<DW / 2>(dv);
    wgmma_fence_regs<DW / 2>(dk);
  }

  cp_async_wait<0>();  // nothing may be in flight at exit (a tile no query sees skips the loop)
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

template <typename T, bool CAP>
bool launch_bwd_sm90_d256_kernel(const BwdParams& p, cudaStream_t stream) {
  using Cfg = Sm90BwdD256Cfg;
  auto kern = flash_bwd_sm90_d256_kernel<T, CAP>;
  if (!sm90_kernel_usable(kern)) return false;
  set_max_dynamic_smem(kern, Cfg::smem, "cudaFuncSetAttribute(flash backward sm90 d256)");
  const auto& sh = p.g.fwd.shape;
  const int64_t nblocks = (sh.max_seqlen_k + Cfg::BN - 1) / Cfg::BN;
  if (nblocks == 0) return true;
  dim3 grid(unsigned(nblocks), unsigned(sh.kv_heads), unsigned(sh.batch));
  kern<<<grid, Cfg::NT, Cfg::smem, stream>>>(p);
  check_cuda(cudaGetLastError(), "flash backward (sm90 d256) launch");
  return true;
}

// The tile of sm90_bwd_d256_tile() (tiles.hpp).
template <typename T>
bool launch_flash_bwd_sm90_d256(const BwdParams& p, cudaStream_t stream) {
  static_assert(sm90_bwd_d256_tile().bm == Sm90BwdD256Cfg::BM && sm90_bwd_d256_tile().bn == Sm90BwdD256Cfg::BN,
                "tiles.hpp and the kernel disagree");
  return p.g.fwd.softcap > 0.f ? launch_bwd_sm90_d256_kernel<T, true>(p, stream)
                               : launch_bwd_sm90_d256_kernel<T, false>(p, stream);
}

}  // namespace flashkit::cuda
