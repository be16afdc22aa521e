// Device helpers shared by the CUDA attention kernels: mma.sync (m16n8k16, f32 accumulate), ldmatrix,
// cp.async, the XOR-swizzled shared-memory tile layout, and dtype packing.
//
// Shared-memory tiles hold R rows of W 16-bit elements (W a multiple of 64). A row is W/8 16-byte
// chunks; logical chunk c of row r is stored at physical chunk c ^ (r & 7), so the 8 row addresses of
// one ldmatrix 8x8 matrix (same logical chunk, 8 consecutive rows) hit 8 different bank groups.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention_args.hpp"

namespace flashkit::cuda {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kNaN = __builtin_nanf("");

// A row's lse (natural log) from its max m2 (log2 units) and softmax sum l: -inf for a row with no visible key
// (l = 0); NaN when a NaN (or +inf) score made l NaN -- such a row is NaN (attention.hpp), not empty.
__device__ __forceinline__ float row_lse(float m2, float l) {
  return l > 0.f ? (m2 + __log2f(l)) * kLn2 : l == 0.f ? -INFINITY : kNaN;
}

// The backward's base-2 lse of query row i (attention.hpp): a row with no visible key has P = 0 whatever its lse
// holds (+inf); a row that sees keys with a non-finite lse (not the forward's) gets NaN, which the exponent carries
// into its P, so into its dq and its visible keys' dk/dv (masked keys' P is set to 0 explicitly, not by exp).
__device__ __forceinline__ float bwd_row_lse2(const kernels::AttentionMask& mask, float lse, int64_t i, int64_t nq,
                                              int64_t nk) {
  if (mask.hi(i, nq, nk) <= mask.lo(i, nq, nk)) return INFINITY;
  return isfinite(lse) ? lse * kLog2e : __int_as_float(0x7fffffff);
}


__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte asynchronous copy global -> shared; pred=false writes 16 zero bytes (src is not read).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool pred) {
  const int sz = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(sz) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

template <typename T>
struct MmaOp;
template <>
struct MmaOp<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float x, float y) {
    __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    __nv_bfloat162 h = *reinterpret_cast<__nv_bfloat162*>(&u);
    return __bfloat1622float2(h);
  }
  static __device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ __nv_bfloat16 from_f32(float x) { return __float2bfloat16_rn(x); }
};
template <>
struct MmaOp<__half> {
  static __device__ __forceinline__ void run(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float x, float y) {
    __half2 h = __floats2half2_rn(x, y);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    __half2 h = *reinterpret_cast<__half2*>(&u);
    return __half22float2(h);
  }
  static __device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
  static __device__ __forceinline__ __half from_f32(float x) { return __float2half_rn(x); }
};

// Byte offset of (row, logical 16-byte chunk) in a swizzled tile whose rows are W elements.
template <int W>
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  static_assert(W % 64 == 0, "swizzled rows must be a multiple of 64 elements");
  return uint32_t(row * (W * 2) + ((chunk ^ (row & 7)) << 4));
}

// 2^x on the SFU (ex2.approx: about 2 ulp; -inf gives +0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float fast_tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Row index of the flat [batch_slot, heads, seqlen_q] layout shared by lse and the f32 workspaces.
struct RowIndex {
  int64_t bslot, row, h;
};
__host__ __device__ __forceinline__ RowIndex split_row_index(int64_t ridx, int64_t heads, int64_t seqlen_q) {
  RowIndex r;
  r.row = ridx % seqlen_q;
  const int64_t bh = ridx / seqlen_q;
  r.h = bh % heads;
  r.bslot = bh / heads;
  return r;
}

// Rows of a forward tile: query indices of one head, or, with the GQA group packed into the tile (decode),
// r = head-in-group * nq + query.
struct TileRows {
  bool pack;
  int64_t group, nq;
  int hblk, kvh;  // grid.y block (query head, or KV head when packed) and its KV head
  __device__ __forceinline__ void head_query(int64_t r, int64_t& h, int64_t& i) const {
    if (pack) {
      h = int64_t(kvh) * group + r / nq;
      i = r % nq;
    } else {
      h = hblk;
      i = r;
    }
  }
};

// Keys the rows [m0, r_last] of a forward tile can see. A key block of BN keys starting at n0 needs no mask when
// n0 >= lo_max and n0 + BN <= hi_min; the tile visits blocks [nb_begin, nb_end) (empty when no row sees a key).
struct TileKeys {
  int64_t lo_max, hi_min;
  int nb_begin, nb_end;
};
__device__ __forceinline__ TileKeys tile_keys(const kernels::AttentionMask& mask, const TileRows& t, int64_t m0,
                                              int64_t r_last, int64_t nk, int BN) {
  const int64_t nq = t.nq;
  int64_t imin, imax;  // query indices the rows cover (mask bounds are monotone in the query index)
  if (!t.pack) {
    imin = m0;
    imax = r_last;
  } else if (m0 / nq != r_last / nq) {
    imin = 0;
    imax = nq - 1;
  } else {
    imin = m0 % nq;
    imax = r_last % nq;
  }
  const int64_t klo = mask.lo(imin, nq, nk), khi = mask.hi(imax, nq, nk);
  TileKeys k{mask.lo(imax, nq, nk), mask.hi(imin, nq, nk), 0, 0};
  if (khi > klo) {
    k.nb_begin = int(klo / BN);
    k.nb_end = int((khi + BN - 1) / BN);
  }
  return k;
}

// A forward CTA's place: its sequence (varlen slot), its query rows [m0, m0 + BM) of the `rows` of its (head,
// sequence) (a GQA group's heads packed into rows when pack: grid.y is then the KV head), its KV head, and the key
// tiles its rows can see. Nothing to do when m0 >= rows.
struct FwdTile {
  kernels::SeqRange sr;
  int64_t rows, m0;
  int kvh, dreal;
  TileRows trows;
  TileKeys keys;
};
// The tile of query block mb, head block hblk (grid.y) and batch slot bslot (grid.z); fwd_tile: this CTA's. Both fill
// the tile from its sequence range with fwd_tile_from; fwd_tile reads grid.y after the range, as the one-tile kernels
// always have (their code stays what it was before fwd_tile_at: worklog attention-cuda v19b).
__device__ __forceinline__ void fwd_tile_from(FwdTile& t, const kernels::AttentionFwdArgs& a, bool pack, int mb,
                                              int group, int hblk, int BM, int BN) {
  t.rows = pack ? group * t.sr.nq : t.sr.nq;
  t.m0 = int64_t(mb) * BM;
  t.kvh = pack ? hblk : hblk / group;
  t.dreal = int(a.shape.head_dim);
  t.trows = TileRows{pack, group, t.sr.nq, hblk, t.kvh};
  t.keys = TileKeys{0, 0, 0, 0};
  if (t.m0 < t.rows) t.keys = tile_keys(a.mask, t.trows, t.m0, (t.m0 + BM < t.rows ? t.m0 + BM : t.rows) - 1, t.sr.nk, BN);
}
__device__ __forceinline__ FwdTile fwd_tile_at(const kernels::AttentionFwdArgs& a, bool pack, int mb, int hblk,
                                               int bslot, int BM, int BN) {
  FwdTile t;
  t.sr = kernels::seq_range(a.shape, bslot);
  fwd_tile_from(t, a, pack, mb, int(a.shape.heads / a.shape.kv_heads), hblk, BM, BN);
  return t;
}
__device__ __forceinline__ FwdTile fwd_tile(const kernels::AttentionFwdArgs& a, bool pack, int mb, int BM, int BN) {
  FwdTile t;
  t.sr = kernels::seq_range(a.shape, blockIdx.z);
  const int group = int(a.shape.heads / a.shape.kv_heads), hblk = int(blockIdx.y);
  fwd_tile_from(t, a, pack, mb, group, hblk, BM, BN);
  return t;
}

// Copies BM query rows [m0, m0 + BM) into shared memory with cp.async, thread t of NT (16-byte chunks; rows past the
// tile's end and chunks past the head dim are zero-filled); smem_off(r, c) is the byte offset of row r, chunk c.
// load_q_tile: a forward tile's rows by the CTA's first NT threads.
template <typename T, int BM, int CH, int NT, typename SmemOff>
__device__ __forceinline__ void load_q_rows(int t, uint32_t sQ, const T* qbase, const kernels::AttnOperand& q,
                                            int64_t q0, const TileRows& trows, int64_t m0, int64_t rows, int dreal,
                                            SmemOff smem_off) {
  for (int idx = t; idx < BM * CH; idx += NT) {
    const int r = idx / CH, c = idx % CH;
    const int64_t gr = m0 + r;
    const bool ok = gr < rows && c * 8 < dreal;
    const T* src = qbase;
    if (ok) {
      int64_t h, i;
      trows.head_query(gr, h, i);
      src = qbase + (q0 + i) * q.stride_s + h * q.stride_h + c * 8;
    }
    cp_async16(sQ + smem_off(r, c), src, ok);
  }
}
template <typename T, int BM, int CH, int NT, typename SmemOff>
__device__ __forceinline__ void load_q_tile(uint32_t sQ, const T* qbase, const kernels::AttnOperand& q, int64_t q0,
                                            const TileRows& trows, int64_t m0, int64_t rows, int dreal,
                                            SmemOff smem_off) {
  load_q_rows<T, BM, CH, NT>(int(threadIdx.x), sQ, qbase, q, q0, trows, m0, rows, dreal, smem_off);
}

// Backward: the query blocks of BM rows that see any key of [n0, n0 + BN) (first block, count).
__device__ __forceinline__ void key_tile_query_blocks(const kernels::AttentionMask& mask, int64_t n0, int BN,
                                                      int64_t nq, int64_t nk, int BM, int& mb_lo, int& nmb) {
  const int64_t off = nk - nq;
  const int64_t nlast = (n0 + BN < nk ? n0 + BN : nk) - 1;
  int64_t i_min = 0, i_max = nq - 1;
  if (mask.window_right >= 0) i_min = n0 - off - mask.window_right;
  if (mask.window_left >= 0) i_max = nlast - off + mask.window_left;
  if (i_min < 0) i_min = 0;
  if (i_max > nq - 1) i_max = nq - 1;
  mb_lo = 0;
  nmb = 0;
  if (i_min <= i_max) {
    mb_lo = int(i_min / BM);
    nmb = int(i_max / BM) - mb_lo + 1;
  }
}

}  // namespace flashkit::cuda
