// The decode family's paged member (paged.hpp): attention of a batched serving step over paged KV blocks, its split
// combine, the store of the step's k/v rows into their slots and the logit-row gather.
//
// Why this shape: a serving step is many short query rows (one per decoding sequence, a few per prompt chunk), each
// against its own sequence's keys scattered over blocks. Decode is bound by the bytes of K/V read, so the GQA group
// of a KV head sits in one CTA (each key is loaded once for its G query heads) and the lane layout is the engine's
// fused_prologue one: LPK = head_dim / 8 lanes hold a key, 8 dims per lane in one 16-byte load (bf16/f16; two for
// f32), two keys per lane group in flight per iteration. A block-table lookup per key (an L1 hit: a table row is a
// few hundred bytes) replaces the linear row index; the softmax, split ranges and merge work on positions.
//
// The query heads sit in shared memory (not registers: 8 heads x 8 dims would cost 64 registers per thread, and
// the accumulators already take 64); per key every lane adds its 8-dim slice of each head's dot product, the LPK
// lanes of the group sum them by shuffles, and each head runs an online softmax (natural log, as merge.cuh).
#include "kernels/cuda/decode/paged.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>

#include "core/cuda_check.hpp"
#include "core/cuda_launch.hpp"
#include "core/device_math.cuh"
#include "flashkit/error.hpp"
#include "kernels/cuda/decode/merge.cuh"
#include "kernels/cuda/decode/plan.hpp"

namespace flashkit::cuda {

namespace {

constexpr int kThreads = 128, kWarps = kThreads / 32;
constexpr int kGroupMax = kPagedHeadsPerCta;  // q heads per CTA at most (a larger GQA group takes several CTAs)

__device__ __forceinline__ float ld_elem(const void* p, PagedElem t, int64_t i) {
  if (t == PagedElem::bf16) return bf2f(static_cast<const uint16_t*>(p)[i]);
  if (t == PagedElem::f16) return __half2float(static_cast<const __half*>(p)[i]);
  return static_cast<const float*>(p)[i];
}
__device__ __forceinline__ void st_elem(void* p, PagedElem t, int64_t i, float v) {
  if (t == PagedElem::bf16) static_cast<uint16_t*>(p)[i] = f2bf(v);
  else if (t == PagedElem::f16) static_cast<__half*>(p)[i] = __float2half_rn(v);
  else static_cast<float*>(p)[i] = v;
}

// 8 consecutive pool elements starting at element `e` (16-byte aligned: head_dim % 8 == 0). PT: PagedElem as int.
template <int PT>
__device__ __forceinline__ void load8(const void* pool, int64_t e, uint4& a, uint4& b) {
  if constexpr (PT == int(PagedElem::f32)) {
    const uint4* p = reinterpret_cast<const uint4*>(static_cast<const float*>(pool) + e);
    a = __ldcg(p);
    b = __ldcg(p + 1);
  } else {
    a = __ldcg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(pool) + e));
    b = make_uint4(0, 0, 0, 0);
  }
}
template <int PT>
__device__ __forceinline__ void unpack(const uint4& a, const uint4& b, float (&f)[8]) {
  if constexpr (PT == int(PagedElem::f32)) {
    f[0] = __uint_as_float(a.x), f[1] = __uint_as_float(a.y), f[2] = __uint_as_float(a.z), f[3] = __uint_as_float(a.w);
    f[4] = __uint_as_float(b.x), f[5] = __uint_as_float(b.y), f[6] = __uint_as_float(b.z), f[7] = __uint_as_float(b.w);
  } else if constexpr (PT == int(PagedElem::bf16)) {
    unpack8(a, f);
  } else {
    const uint32_t w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 x = __half22float2(*reinterpret_cast<const __half2*>(&w[e]));
      f[2 * e] = x.x, f[2 * e + 1] = x.y;
    }
  }
}

// The visible keys of a row: positions [start, p], n of them; the row uses S of the grid's splits.
struct RowKeys {
  int64_t p, start, n;
  int S;
};
__device__ __forceinline__ RowKeys row_keys(const PagedDecodeArgs& a, int r) {
  RowKeys k;
  k.p = a.positions[r];
  k.start = a.window > 0 ? max(int64_t(0), k.p - a.window + 1) : int64_t(0);
  k.n = k.p - k.start + 1;
  k.S = paged_row_splits(a.splits, k.n);
  return k;
}

// HPC: the q heads a CTA holds, 4 or kGroupMax (a group of <= 4, Llama's and Qwen's, keeps 32 fewer registers
// of accumulators: more CTAs per SM). The grid is laid out for kGroupMax heads per CTA either way.
template <int LPK, int PT, int HPC>
__global__ void __launch_bounds__(kThreads) paged_decode_kernel(const PagedDecodeArgs a) {
  constexpr int KPW = 32 / LPK;     // keys per warp step
  constexpr int NG = kWarps * KPW;  // lane groups of the CTA
  constexpr int DP = LPK * 8;       // head_dim padded to the lanes
  __shared__ __align__(16) float qs[HPC][DP];
  __shared__ float gm[HPC][NG], gl[HPC][NG];
  __shared__ float gacc[NG][DP];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int split = blockIdx.x, r = blockIdx.z;
  const int G = a.heads / a.kv_heads, hgroups = (G + kGroupMax - 1) / kGroupMax;
  const int kvh = int(blockIdx.y) / hgroups, hg = int(blockIdx.y) % hgroups;
  const int h0 = kvh * G + hg * kGroupMax;          // first query head of this CTA
  const int H = min(kGroupMax, G - hg * kGroupMax);  // its heads (<= HPC: the host picks HPC from G)
  const int D = a.head_dim;
  const int64_t kvd = int64_t(a.kv_heads) * D;
  const RowKeys rk = row_keys(a, r);
  if (split >= rk.S) return;  // a short row uses fewer splits (uniform over the CTA)
  const int64_t chunk = (rk.n + rk.S - 1) / rk.S;
  const int64_t lo = min(rk.n, int64_t(split) * chunk), hi = min(rk.n, lo + chunk);
  const int32_t* table = a.block_tables + int64_t(a.row_seq[r]) * a.max_blocks;
  const int64_t bs = a.block_size;

  for (int i = tid; i < H * D; i += kThreads) {
    const int hh = i / D, d = i % D;
    qs[hh][d] = ld_elem(a.q, a.q_type, int64_t(r) * a.ldq + int64_t(h0 + hh) * D + d) * a.scale;
  }
  __syncthreads();

  const int sl = lane % LPK, g = warp * KPW + lane / LPK;
  const bool dim_ok = sl * 8 < D;
  const int64_t coff = int64_t(kvh) * D + sl * 8;
  // The running max starts at -FLT_MAX, not -inf: a -inf score (attention.hpp: it weighs 0) then gives
  // e^(-inf + FLT_MAX) = 0 and keeps m, where from -inf it gave e^(-inf - -inf) = NaN; a group that saw only -inf
  // scores ends with l = 0, the merge's empty answer. Same instructions in the loop.
  float m[HPC], l[HPC], acc[HPC][8];
#pragma unroll
  for (int hh = 0; hh < HPC; ++hh) {
    m[hh] = -FLT_MAX, l[hh] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[hh][e] = 0.0f;
  }

  auto load = [&](int64_t idx, uint4 (&kr)[2], uint4 (&vr)[2]) {
    if (idx < hi && dim_ok) {
      const int64_t j = rk.start + idx;
      const int64_t e = (int64_t(table[j / bs]) * bs + j % bs) * kvd + coff;
      load8<PT>(a.k_pool, e, kr[0], kr[1]);
      load8<PT>(a.v_pool, e, vr[0], vr[1]);
    } else {
      kr[0] = kr[1] = vr[0] = vr[1] = make_uint4(0, 0, 0, 0);
    }
  };
  auto consume = [&](int64_t idx, const uint4 (&kr)[2], const uint4 (&vr)[2]) {
    float kf[8], vf[8];
    unpack<PT>(kr[0], kr[1], kf);
    unpack<PT>(vr[0], vr[1], vf);
    float s[HPC];
#pragma unroll
    for (int hh = 0; hh < HPC; ++hh) {
      float x = 0.0f;
      if (hh < H && dim_ok) {
        const float4 q0 = *reinterpret_cast<const float4*>(&qs[hh][sl * 8]);
        const float4 q1 = *reinterpret_cast<const float4*>(&qs[hh][sl * 8 + 4]);
        x = q0.x * kf[0] + q0.y * kf[1] + q0.z * kf[2] + q0.w * kf[3] + q1.x * kf[4] + q1.y * kf[5] + q1.z * kf[6] +
            q1.w * kf[7];
      }
      s[hh] = x;
    }
    // Every lane takes part in the shuffles (whole warp), then lanes past the range drop out.
#pragma unroll
    for (int o = LPK / 2; o > 0; o >>= 1)
#pragma unroll
      for (int hh = 0; hh < HPC; ++hh) s[hh] += __shfl_xor_sync(0xffffffffu, s[hh], o);
    if (idx >= hi) return;
#pragma unroll
    for (int hh = 0; hh < HPC; ++hh) {
      if (hh >= H) break;
      float x = s[hh];
      if (a.softcap > 0.0f) x = a.softcap * tanhf(x / a.softcap);
      const float mn = fmaxf(m[hh], x);
      const float corr = __expf(m[hh] - mn), pe = __expf(x - mn);
      l[hh] = l[hh] * corr + pe;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[hh][e] = fmaf(pe, vf[e], acc[hh][e] * corr);
      m[hh] = mn;
    }
  };
  // Lane group g of warp w takes keys lo + w * KPW + lane / LPK + k * NG, two per step (i and i + NG). Two register
  // buffers: the next step's four loads are issued before this step's keys are used, so a lane has up to four K and
  // four V loads in flight (each behind its block-table load). Loop bounds are warp-uniform (the shuffles need the
  // whole warp); lane groups past `hi` load nothing and drop out after the shuffles.
  const int64_t base0 = lo + int64_t(warp) * KPW, sub = lane / LPK;
  uint4 kA0[2], vA0[2], kA1[2], vA1[2], kB0[2], vB0[2], kB1[2], vB1[2];
  if (base0 < hi) {
    load(base0 + sub, kA0, vA0);
    load(base0 + sub + NG, kA1, vA1);
  }
  for (int64_t base = base0; base < hi; base += 4 * NG) {
    const int64_t nb = base + 2 * NG;
    if (nb < hi) {
      load(nb + sub, kB0, vB0);
      load(nb + sub + NG, kB1, vB1);
    }
    consume(base + sub, kA0, vA0);
    consume(base + sub + NG, kA1, vA1);
    if (nb >= hi) break;
    const int64_t na = base + 4 * NG;
    if (na < hi) {
      load(na + sub, kA0, vA0);
      load(na + sub + NG, kA1, vA1);
    }
    consume(nb + sub, kB0, vB0);
    consume(nb + sub + NG, kB1, vB1);
  }

  // ---- merge the lane groups, one head at a time (gacc is reused); then the output or this split's partial.
  if (sl == 0) {
#pragma unroll
    for (int hh = 0; hh < HPC; ++hh) gm[hh][g] = m[hh], gl[hh][g] = l[hh];
  }
  const int64_t rows_heads = int64_t(a.rows) * a.heads;
#pragma unroll
  for (int hh = 0; hh < HPC; ++hh) {
    if (hh >= H) break;  // uniform over the CTA
    __syncthreads();     // gm/gl visible; the previous head's readers of gacc are done
    if (dim_ok) {
#pragma unroll
      for (int e = 0; e < 8; ++e) gacc[g][sl * 8 + e] = acc[hh][e];
    }
    __syncthreads();
    float M = -INFINITY;
#pragma unroll
    for (int i = 0; i < NG; ++i) M = fmaxf(M, gm[hh][i]);
    float L = 0.0f;
    if (M != -INFINITY) {
#pragma unroll
      for (int i = 0; i < NG; ++i) L += gl[hh][i] * __expf(gm[hh][i] - M);
    }
    const int head = h0 + hh;
    const int64_t rh = int64_t(r) * a.heads + head;
    for (int d = tid; d < D; d += kThreads) {
      float o = 0.0f;
      if (L > 0.0f) {
#pragma unroll
        for (int i = 0; i < NG; ++i) o += gacc[i][d] * __expf(gm[hh][i] - M);
      }
      o = L > 0.0f ? o / L : L == 0.0f ? 0.0f : __builtin_nanf("");
      if (rk.S == 1) st_elem(a.out, a.out_type, int64_t(r) * a.ldo + int64_t(head) * D + d, o);
      else a.part[(rh * a.splits + split) * D + d] = o;
    }
    if (rk.S > 1 && tid == 0)
      a.part[rows_heads * a.splits * D + rh * a.splits + split] = L > 0.0f ? M + __logf(L) : L == 0.0f ? -INFINITY : __builtin_nanf("");
  }
}

// One CTA per (row, head): merges the row's S partials (merge.cuh); rows with one split were written directly.
__global__ void __launch_bounds__(kThreads) paged_combine_kernel(const PagedDecodeArgs a) {
  __shared__ float w[kPagedMaxSplits];
  __shared__ float red[kWarps];
  const int64_t rh = blockIdx.x;
  const int r = int(rh / a.heads), head = int(rh % a.heads);
  const int S = row_keys(a, r).S;
  if (S == 1) return;
  const int D = a.head_dim;
  const int64_t rows_heads = int64_t(a.rows) * a.heads;
  const float* lse = a.part + rows_heads * a.splits * D + rh * a.splits;
  const float2 ms = merge::split_weights<kThreads, false>(lse, 1, S, w, red);
  const float* po = a.part + rh * a.splits * D;
  for (int d = threadIdx.x; d < D; d += kThreads) {
    float o = 0.0f;
    for (int s = 0; s < S; ++s) o += w[s] * __ldcg(po + int64_t(s) * D + d);
    o = ms.y > 0.0f ? o / ms.y : ms.y == 0.0f ? 0.0f : __builtin_nanf("");
    st_elem(a.out, a.out_type, int64_t(r) * a.ldo + int64_t(head) * D + d, o);
  }
}

__global__ void paged_store_kernel(const PagedStoreArgs a) {
  const int t = blockIdx.y;
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= a.kvd) return;
  const int64_t p = a.positions[t], bs = a.block_size;
  const int32_t* table = a.block_tables + int64_t(a.row_seq[t]) * a.max_blocks;
  const int64_t row = int64_t(table[p / bs]) * bs + p % bs;
  st_elem(a.k_pool, a.pool_type, row * a.kvd + c, ld_elem(a.k, a.src_type, int64_t(t) * a.ldk + c));
  st_elem(a.v_pool, a.pool_type, row * a.kvd + c, ld_elem(a.v, a.src_type, int64_t(t) * a.ldv + c));
}

// One thread per 8 elements of a gathered row (16 bytes of bf16 out), grid-stride over (row, 8-element column).
template <int PT>
__global__ void paged_gather_kernel(const PagedGatherArgs a) {
  const int64_t per_row = a.kvd / 8, total = a.n * per_row, bs = a.block_size;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, c = (i % per_row) * 8, j = a.first + r;
    const int64_t e = (int64_t(a.table[j / bs]) * bs + j % bs) * a.kvd + c;
    uint4 k0, k1, v0, v1;
    load8<PT>(a.k_pool, e, k0, k1);
    load8<PT>(a.v_pool, e, v0, v1);
    if constexpr (PT != int(PagedElem::bf16)) {
      float kf[8], vf[8];
      unpack<PT>(k0, k1, kf);
      unpack<PT>(v0, v1, vf);
      k0 = make_uint4(pack2(kf[0], kf[1]), pack2(kf[2], kf[3]), pack2(kf[4], kf[5]), pack2(kf[6], kf[7]));
      v0 = make_uint4(pack2(vf[0], vf[1]), pack2(vf[2], vf[3]), pack2(vf[4], vf[5]), pack2(vf[6], vf[7]));
    }
    *reinterpret_cast<uint4*>(a.k_out + r * a.kvd + c) = k0;
    *reinterpret_cast<uint4*>(a.v_out + r * a.kvd + c) = v0;
  }
}

template <typename E>
__global__ void gather_rows_kernel(const E* x, int64_t ldx, E* out, int64_t ldo, int64_t cols, const int32_t* index) {
  const int64_t i = blockIdx.y, src = index[i];
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x)
    out[i * ldo + c] = x[src * ldx + c];
}

[[noreturn]] void bad(const std::string& what) { fail(Status::invalid_argument, "paged decode attention: " + what); }

template <int LPK, int HPC>
cudaError_t launch_pool(const PagedDecodeArgs& a, dim3 grid, cudaStream_t stream) {
  switch (a.pool_type) {
    case PagedElem::f32: return launch_ex(paged_decode_kernel<LPK, 0, HPC>, grid, dim3(kThreads), 0, stream, false, 1u, a);
    case PagedElem::bf16: return launch_ex(paged_decode_kernel<LPK, 1, HPC>, grid, dim3(kThreads), 0, stream, false, 1u, a);
    default: return launch_ex(paged_decode_kernel<LPK, 2, HPC>, grid, dim3(kThreads), 0, stream, false, 1u, a);
  }
}
template <int LPK>
void launch_lpk(const PagedDecodeArgs& a, dim3 grid, cudaStream_t stream) {
  const bool small_group = a.heads / a.kv_heads <= 4;
  check_cuda(small_group ? launch_pool<LPK, 4>(a, grid, stream) : launch_pool<LPK, kGroupMax>(a, grid, stream),
             "paged decode attention launch");
}

bool elem_ok(PagedElem t) { return t == PagedElem::f32 || t == PagedElem::bf16 || t == PagedElem::f16; }

}  // namespace

int64_t paged_decode_part_floats(int64_t rows, int64_t heads, int64_t head_dim, int64_t splits) {
  return rows * heads * splits * (head_dim + 1);
}

void paged_decode_attention(const PagedDecodeArgs& a, cudaStream_t stream) {
  if (a.head_dim < 8 || a.head_dim > 256 || a.head_dim % 8)
    bad("head_dim must be a multiple of 8 in [8, 256], got " + std::to_string(a.head_dim));
  if (a.heads < 1 || a.kv_heads < 1 || a.heads % a.kv_heads)
    bad("heads (" + std::to_string(a.heads) + ") must be a positive multiple of kv_heads (" + std::to_string(a.kv_heads) + ")");
  if (a.rows < 0 || a.rows > 65535) bad("rows must be in [0, 65535], got " + std::to_string(a.rows));
  if (a.splits < 1 || a.splits > kPagedMaxSplits)
    bad("splits must be in [1, " + std::to_string(kPagedMaxSplits) + "], got " + std::to_string(a.splits));
  if (a.splits > 1 && !a.part) bad("splits > 1 needs the partial buffer (part)");
  if (a.block_size < 1) bad("block_size must be >= 1");
  if (!elem_ok(a.q_type) || !elem_ok(a.out_type) || !elem_ok(a.pool_type)) bad("element types must be f32, bf16 or f16");
  if (!a.q || !a.out || !a.k_pool || !a.v_pool || !a.block_tables || !a.positions || !a.row_seq) bad("null pointer");
  if (a.rows == 0) return;
  const int G = a.heads / a.kv_heads;
  const int64_t gy = int64_t(a.kv_heads) * ((G + kGroupMax - 1) / kGroupMax);
  if (gy > 65535) bad("too many KV heads");
  const dim3 grid(unsigned(a.splits), unsigned(gy), unsigned(a.rows));
  if (a.head_dim <= 64) launch_lpk<8>(a, grid, stream);
  else if (a.head_dim <= 128) launch_lpk<16>(a, grid, stream);
  else launch_lpk<32>(a, grid, stream);
  if (a.splits > 1)
    check_cuda(launch_ex(paged_combine_kernel, dim3(unsigned(int64_t(a.rows) * a.heads)), dim3(kThreads), 0, stream,
                         false, 1u, a),
               "paged decode combine launch");
}

void paged_kv_store(const PagedStoreArgs& a, cudaStream_t stream) {
  if (a.rows <= 0 || a.kvd <= 0) return;
  if (a.rows > 65535) fail(Status::invalid_argument, "paged_kv_store: rows must be <= 65535");
  const int th = 128;
  const dim3 grid(unsigned((a.kvd + th - 1) / th), unsigned(a.rows));
  check_cuda(launch_ex(paged_store_kernel, grid, dim3(th), 0, stream, false, 1u, a), "paged_kv_store launch");
}

void paged_gather_kv(const PagedGatherArgs& a, cudaStream_t stream) {
  if (a.n <= 0) return;
  if (a.kvd <= 0 || a.kvd % 8) fail(Status::invalid_argument, "paged_gather_kv: kvd must be a positive multiple of 8");
  if (a.block_size < 1 || a.first < 0) fail(Status::invalid_argument, "paged_gather_kv: block_size >= 1, first >= 0");
  if (!elem_ok(a.pool_type)) fail(Status::invalid_argument, "paged_gather_kv: pool elements must be f32, bf16 or f16");
  if (!a.k_pool || !a.v_pool || !a.table || !a.k_out || !a.v_out) fail(Status::invalid_argument, "paged_gather_kv: null pointer");
  const int th = 256;
  const int64_t items = a.n * (a.kvd / 8);
  const dim3 grid(unsigned(std::min<int64_t>((items + th - 1) / th, 132 * 16)));
  cudaError_t e;
  switch (a.pool_type) {
    case PagedElem::f32: e = launch_ex(paged_gather_kernel<0>, grid, dim3(th), 0, stream, false, 1u, a); break;
    case PagedElem::bf16: e = launch_ex(paged_gather_kernel<1>, grid, dim3(th), 0, stream, false, 1u, a); break;
    default: e = launch_ex(paged_gather_kernel<2>, grid, dim3(th), 0, stream, false, 1u, a); break;
  }
  check_cuda(e, "paged_gather_kv launch");
}

void gather_rows(const void* x, int64_t ldx, void* out, int64_t ldo, int64_t cols, int elem_bytes,
                 const int32_t* index, int64_t n, cudaStream_t stream) {
  if (n <= 0 || cols <= 0) return;
  if (n > 65535) fail(Status::invalid_argument, "gather_rows: at most 65535 rows");
  const int th = 256;
  const dim3 grid(unsigned(std::min<int64_t>((cols + th - 1) / th, 64)), unsigned(n));
  cudaError_t e;
  if (elem_bytes == 4)
    e = launch_ex(gather_rows_kernel<float>, grid, dim3(th), 0, stream, false, 1u, static_cast<const float*>(x), ldx,
                  static_cast<float*>(out), ldo, cols, index);
  else if (elem_bytes == 2)
    e = launch_ex(gather_rows_kernel<uint16_t>, grid, dim3(th), 0, stream, false, 1u, static_cast<const uint16_t*>(x),
                  ldx, static_cast<uint16_t*>(out), ldo, cols, index);
  else
    fail(Status::invalid_argument, "gather_rows: elem_bytes must be 2 or 4");
  check_cuda(e, "gather_rows launch");
}

}  // namespace flashkit::cuda
