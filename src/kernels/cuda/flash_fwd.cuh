// FlashAttention-2 forward on mma.sync tensor cores (sm_80+): one CTA per (query tile, head, sequence).
// Each warp owns 16 query rows; K/V tiles of BN keys stream through a two-stage cp.async pipeline in
// swizzled shared memory; S = QK^T and O += PV run as m16n8k16 MMAs with f32 accumulators; the softmax is
// online, in log2 units with the scale folded in (one FFMA + ex2 per score). Included by the per-(dtype,
// head_dim) instantiation files only.
#pragma once
#include <cmath>

#include "core/cuda_check.hpp"
#include "flashkit/error.hpp"
#include "kernels/cuda/flash_api.hpp"
#include "kernels/cuda/flash_common.cuh"
#include "kernels/cuda/launch.hpp"

namespace flashkit::cuda {

template <typename T, int D, int BN, int NW, bool QREG, int MT>
__global__ void __launch_bounds__(NW * 32) flash_fwd_kernel(const FwdParams p) {
  using Op = MmaOp<T>;
  constexpr int WR = 16 * MT;  // rows per warp: MT m16 tiles share every K/V fragment read from shared memory
  constexpr int BM = WR * NW, NT = NW * 32, CH = D / 8;
  constexpr int NTILE = BN / 8, DTILE = D / 8;
  constexpr uint32_t kStage = BN * D * 2;
  static_assert(!QREG || MT == 1, "Q in registers only with one m-tile per warp");
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sQ = smem_u32(smem);
  const uint32_t sK0 = sQ + BM * D * 2;
  const uint32_t sV0 = sK0 + 2 * kStage;

  const kernels::AttentionFwdArgs& a = p.a;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int mblocks = gridDim.x / p.num_splits;
  const int split = blockIdx.x / mblocks;
  const int mb = mblocks - 1 - int(blockIdx.x % mblocks);  // longest (causal) tiles first
  const FwdTile t = fwd_tile(a, p.pack_gqa, mb, BM, BN);
  if (t.m0 >= t.rows) return;
  const kernels::SeqRange& sr = t.sr;
  const int64_t nq = sr.nq, nk = sr.nk, rows = t.rows, m0 = t.m0;
  const int kvh = t.kvh, dreal = t.dreal;
  const TileRows& trows = t.trows;
  auto row_head = [&](int64_t r, int64_t& h, int64_t& i) { trows.head_query(r, h, i); };

  // Key blocks this tile needs: the union of its rows' visible ranges.
  const TileKeys& tk = t.keys;
  const int64_t lo_max = tk.lo_max, hi_min = tk.hi_min;
  int nb_begin = tk.nb_begin, nb_end = tk.nb_end;
  if (p.num_splits > 1) {
    const int total = nb_end - nb_begin;
    const int per = (total + p.num_splits - 1) / p.num_splits;
    const int b0 = nb_begin + split * per;
    nb_begin = b0;
    nb_end = nb_end < b0 + per ? nb_end : b0 + per;
    if (nb_end < nb_begin) nb_end = nb_begin;
  }

  // Visible key range [lo, hi) of the rows each thread holds in the accumulator layout: g and g+8 of each of
  // its warp's m-tiles (32-bit: one sequence's length fits; rows past the end see every key, harmlessly).
  int my_lo[MT][2], my_hi[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t gr = m0 + warp * WR + mt * 16 + g + 8 * r;
      my_lo[mt][r] = 0;
      my_hi[mt][r] = int(nk);
      if (gr < rows) {
        int64_t h, i;
        row_head(gr, h, i);
        my_lo[mt][r] = int(a.mask.lo(i, nq, nk));
        my_hi[mt][r] = int(a.mask.hi(i, nq, nk));
      }
    }

  const T* qbase = static_cast<const T*>(a.q.data) + sr.bslot * a.q.stride_b;
  const T* kbase = static_cast<const T*>(a.k.data) + sr.bslot * a.k.stride_b + kvh * a.k.stride_h + sr.k0 * a.k.stride_s;
  const T* vbase = static_cast<const T*>(a.v.data) + sr.bslot * a.v.stride_b + kvh * a.v.stride_h + sr.k0 * a.v.stride_s;

  // Each thread copies the same chunk column of rows r0, r0 + NT/CH, ...: one 64-bit row offset update per row.
  auto load_kv = [&](int n, int st) {
    constexpr int RSTEP = NT / CH > 0 ? NT / CH : 1;
    const int c = tid % CH;
    const bool cok = c * 8 < dreal;
    int64_t j = int64_t(n) * BN + tid / CH;
    const T* kp = kbase + j * a.k.stride_s + c * 8;
    const T* vp = vbase + j * a.v.stride_s + c * 8;
    const int64_t kstep = RSTEP * a.k.stride_s, vstep = RSTEP * a.v.stride_s;
#pragma unroll
    for (int r = tid / CH; r < BN; r += RSTEP) {
      const bool ok = cok && j < nk;
      cp_async16(sK0 + st * kStage + swz<D>(r, c), ok ? kp : kbase, ok);
      cp_async16(sV0 + st * kStage + swz<D>(r, c), ok ? vp : vbase, ok);
      j += RSTEP;
      kp += kstep;
      vp += vstep;
    }
  };

  float o[MT][DTILE][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int d = 0; d < DTILE; ++d) o[mt][d][0] = o[mt][d][1] = o[mt][d][2] = o[mt][d][3] = 0.f;
  float mrow[MT][2], lrow[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) mrow[mt][0] = mrow[mt][1] = -INFINITY, lrow[mt][0] = lrow[mt][1] = 0.f;
  uint32_t qf[QREG ? D / 16 : 1][4];

  const bool use_cap = a.softcap > 0.f;
  const float sl2 = a.scale * kLog2e;
  const float cap_pre = use_cap ? a.scale / a.softcap : 0.f;
  const float cap_post = a.softcap * kLog2e;

  if (nb_begin < nb_end) {
    load_q_tile<T, BM, CH, NT>(sQ, qbase, a.q, sr.q0, trows, m0, rows, dreal,
                               [](int r, int c) { return swz<D>(r, c); });
    load_kv(nb_begin, 0);
    cp_async_commit();
  }

  for (int n = nb_begin; n < nb_end; ++n) {
    const int st = (n - nb_begin) & 1;
    cp_async_wait<0>();
    __syncthreads();
    if constexpr (QREG) {
      if (n == nb_begin) {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
          ldsm_x4(sQ + swz<D>(warp * 16 + (lane & 15), kk * 2 + (lane >> 4)), qf[kk][0], qf[kk][1], qf[kk][2],
                  qf[kk][3]);
      }
    }
    if (n + 1 < nb_end) {
      load_kv(n + 1, st ^ 1);
      cp_async_commit();
    }
    // S = Q K^T for this warp's WR rows x BN keys.
    float s[MT][NTILE][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < NTILE; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.f;
    const uint32_t sK = sK0 + st * kStage;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t af[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (QREG) {
          af[mt][0] = qf[kk][0];
          af[mt][1] = qf[kk][1];
          af[mt][2] = qf[kk][2];
          af[mt][3] = qf[kk][3];
        } else {
          ldsm_x4(sQ + swz<D>(warp * WR + mt * 16 + (lane & 15), kk * 2 + (lane >> 4)), af[mt][0], af[mt][1], af[mt][2],
                  af[mt][3]);
        }
      }
#pragma unroll
      for (int nt2 = 0; nt2 < BN / 16; ++nt2) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4(sK + swz<D>(nt2 * 16 + (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1)), b0, b1, b2, b3);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          Op::run(s[mt][2 * nt2], af[mt], b0, b1);
          Op::run(s[mt][2 * nt2 + 1], af[mt], b2, b3);
        }
      }
    }
    // Scores to log2 units (scale, softcap), mask, online softmax.
    const int64_t n0 = int64_t(n) * BN;
    const bool full = n0 >= lo_max && n0 + BN <= hi_min;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      if (use_cap || !full) {
#pragma unroll
        for (int nt = 0; nt < NTILE; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float x = s[mt][nt][e];
            x = use_cap ? cap_post * fast_tanh(x * cap_pre) : x * sl2;
            const int j = int(n0) + nt * 8 + 2 * t4 + (e & 1);
            const int r = e >> 1;
            if (!full && (j < my_lo[mt][r] || j >= my_hi[mt][r])) x = -INFINITY;
            s[mt][nt][e] = x;
          }
      }
      // Without softcap or mask the scale is folded into the exponent: p = 2^(s*sl2 - m*sl2) (one FFMA).
      const float fold = (use_cap || !full) ? 1.f : sl2;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < NTILE; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
        mx = quad_max(mx) * fold;
        const float mnew = fmaxf(mrow[mt][r], mx);
        const float muse = mnew == -INFINITY ? 0.f : mnew;
        const float alpha = fast_exp2(mrow[mt][r] - muse);
        mrow[mt][r] = mnew;
#pragma unroll
        for (int d = 0; d < DTILE; ++d) {
          o[mt][d][2 * r] *= alpha;
          o[mt][d][2 * r + 1] *= alpha;
        }
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < NTILE; ++nt) {
          const float p0 = fast_exp2(fmaf(s[mt][nt][2 * r], fold, -muse));
          const float p1 = fast_exp2(fmaf(s[mt][nt][2 * r + 1], fold, -muse));
          s[mt][nt][2 * r] = p0;
          s[mt][nt][2 * r + 1] = p1;
          sum += p0 + p1;
        }
        lrow[mt][r] = lrow[mt][r] * alpha + sum;
      }
    }
    // O += P V.
    const uint32_t sV = sV0 + st * kStage;
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t af[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        af[mt][0] = Op::pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        af[mt][1] = Op::pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        af[mt][2] = Op::pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        af[mt][3] = Op::pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dt2 = 0; dt2 < D / 16; ++dt2) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4_t(sV + swz<D>(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), dt2 * 2 + (lane >> 4)), b0, b1, b2, b3);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          Op::run(o[mt][2 * dt2], af[mt], b0, b1);
          Op::run(o[mt][2 * dt2 + 1], af[mt], b2, b3);
        }
      }
    }
  }

  // Epilogue: normalize, write O (staged through this warp's rows of the Q tile) and LSE.
  T* obase = static_cast<T*>(a.o.data) + sr.bslot * a.o.stride_b;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float inv[2], lse[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float l = quad_sum(lrow[mt][r]);
      inv[r] = l > 0.f ? 1.f / l : 0.f;
      lse[r] = row_lse(mrow[mt][r], l);
    }
    if (p.num_splits == 1) {
      __syncwarp();
#pragma unroll
      for (int d = 0; d < DTILE; ++d)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const uint32_t v = Op::pack(o[mt][d][2 * r] * inv[r], o[mt][d][2 * r + 1] * inv[r]);
          *reinterpret_cast<uint32_t*>(smem + swz<D>(warp * WR + mt * 16 + g + 8 * r, d) + t4 * 4) = v;
        }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t gr = m0 + warp * WR + mt * 16 + g + 8 * r;
      if (gr >= rows) continue;
      int64_t h, i;
      row_head(gr, h, i);
      const int64_t ridx = a.lse_index(sr, h, i);
      if (p.num_splits == 1) {
        if (t4 == 0) a.lse[ridx] = lse[r];
      } else {
        float* op = p.o_part + (int64_t(split) * p.num_rows + ridx) * D;
#pragma unroll
        for (int d = 0; d < DTILE; ++d)
          *reinterpret_cast<float2*>(op + d * 8 + 2 * t4) =
              make_float2(o[mt][d][2 * r] * inv[r], o[mt][d][2 * r + 1] * inv[r]);
        if (t4 == 0) p.lse_part[int64_t(split) * p.num_rows + ridx] = lse[r];
      }
    }
  }
  if (p.num_splits == 1) {
    __syncwarp();
    for (int idx = lane; idx < WR * CH; idx += 32) {
      const int rr = idx / CH, c = idx % CH;
      const int64_t gr = m0 + warp * WR + rr;
      if (gr < rows && c * 8 < dreal) {
        int64_t h, i;
        row_head(gr, h, i);
        *reinterpret_cast<uint4*>(obase + (sr.q0 + i) * a.o.stride_s + h * a.o.stride_h + c * 8) =
            *reinterpret_cast<const uint4*>(smem + swz<D>(warp * WR + rr, c));
      }
    }
  }
}


template <typename T, int D, int BN, int NW, bool QREG, int MT>
void launch_fwd_cfg(const FwdParams& p, cudaStream_t stream) {
  constexpr int BM = 16 * NW * MT;
  constexpr size_t smem = size_t(BM * D + 4 * BN * D) * 2;
  auto kern = flash_fwd_kernel<T, D, BN, NW, QREG, MT>;
  set_max_dynamic_smem(kern, smem, "cudaFuncSetAttribute(flash forward)");
  const auto& sh = p.a.shape;
  const int64_t group = sh.heads / sh.kv_heads;
  const int64_t rows = p.pack_gqa ? group * sh.max_seqlen_q : sh.max_seqlen_q;
  const int64_t mblocks = (rows + BM - 1) / BM;
  if (mblocks == 0) return;
  dim3 grid(unsigned(mblocks * p.num_splits), unsigned(p.pack_gqa ? sh.kv_heads : sh.heads), unsigned(sh.batch));
  kern<<<grid, NW * 32, smem, stream>>>(p);
  check_cuda(cudaGetLastError(), "flash forward launch");
}

// The prefill tile of tiles.hpp (see docs/worklog/attention-cuda.md, v2).
template <typename T, int D>
void launch_flash_fwd(const FwdParams& p, cudaStream_t stream) {
  constexpr Sm80FwdTile t = sm80_fwd_tile(D);
  launch_fwd_cfg<T, D, t.bn, t.warps, t.qreg, t.mt>(p, stream);
}

// The decode entry point (launch_flash_decode: the decode family's mma kernel, and one_warp = launch_fwd_cfg with
// one warp per CTA) lives in decode/flash_decode.cuh.

}  // namespace flashkit::cuda
