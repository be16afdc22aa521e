// The decode family's fused_prologue member (fused_prologue.hpp): the engine's decode attention, one query token
// per head at position p read from device memory (graph-safe), fused with the per-head q/k RMSNorm, RoPE and the
// KV-cache append of the new token.
//
// Grid (splits, heads), 256 threads. Every block recomputes the new key/value row (norm + RoPE, O(head_dim)) in
// shared memory, rounded to bf16 exactly as the cache will hold it, so no block depends on the cache write of this
// launch: the key at position p comes from shared memory, all older keys from the cache (for a ring, slot p % cap
// holds position p - cap, which is outside the window, so the concurrent write cannot be observed). One block per
// KV head writes the new row.
//
// Keys: LPK lanes (a power of two, 8 dims each) hold one key; a warp takes 32 / LPK keys per step, two steps per
// iteration so each lane has two 16-byte K loads and two V loads in flight. Online softmax per lane group, a
// shared-memory merge of the groups, then one of three ends (merge.cuh): the output (one split); on sm_90, when the
// grid is launched as clusters along the splits and the splits used fit in the first cluster, a merge through
// distributed shared memory (no global partials, fence or counter: at short contexts the chain of dependent global
// round trips is the whole cost); otherwise an f32 partial (o, lse) that the last block of the head to arrive
// (atomic counter, reset by that block) merges. The grid's split count is fixed per launch site (graph capture);
// how many of those splits work, and so which merge runs, is decided in the kernel from the visible-key count.
#include "kernels/cuda/decode/fused_prologue.hpp"

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <type_traits>
#include <map>
#include <mutex>
#include <utility>

#include "core/cuda_check.hpp"
#include "core/cuda_launch.hpp"
#include "core/device_math.cuh"
#include "core/pdl.cuh"
#include "flashkit/error.hpp"
#include "kernels/cuda/decode/merge.cuh"
#include "kernels/cuda/tiles.hpp"

namespace flashkit::cuda {

namespace {

using DecodeAttnArgs = FusedDecodeArgs;
constexpr int kThreads = kFusedDecodeThreads, kWarps = kThreads / 32;
constexpr int kMaxSplits = kFusedDecodeMaxSplits;

// The cluster merge is only compiled for sm_90 and later; other builds of the kernel merge through global memory
// whether or not they were launched as clusters.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr bool kClusterMerge = true;
#else
constexpr bool kClusterMerge = false;
#endif

// The merge of head h's S split partials in its first cluster of C >= S blocks (block rank = split index). Every
// block of that cluster calls it, idle ones too: the first barrier publishes the partials (each active block's lse
// and normalized output row, in its shared memory), then block r merges dims [r * per, (r + 1) * per) of the S
// active blocks through distributed shared memory (merge.cuh) and writes them; the second barrier keeps every
// block, and so its shared memory, alive until all ranks have read it.
__device__ __forceinline__ void cluster_merge(const DecodeAttnArgs& a, int S, int C, int h, const float* clse,
                                              const float* cacc) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  const cg::cluster_group cl = cg::this_cluster();
  cl.sync();
  const int D = a.head_dim, per = (D + C - 1) / C;
  const int d = int(cl.block_rank()) * per + int(threadIdx.x);
  const bool mine = int(threadIdx.x) < per && d < D;
  float o = 0.0f;
  if (mine) merge::merge_cluster_item<kMaxDecodeCluster>(merge::smem_addr(clse), merge::smem_addr(cacc + d), S, o);
  // The remote values are consumed above, so this block's reads are complete when it arrives.
  cl.barrier_arrive();
  if (mine) {
    const int64_t i = int64_t(h) * D + d;
    if (a.out_bf16) static_cast<uint16_t*>(a.out)[i] = f2bf(o);
    else static_cast<float*>(a.out)[i] = o;
  }
  cl.barrier_wait();
#else
  (void)a, (void)S, (void)C, (void)h, (void)clse, (void)cacc;
#endif
}

// csize: the cluster size along x the grid was launched with (1: none).
template <int LPK>
__global__ void __launch_bounds__(kThreads) decode_attn_kernel(DecodeAttnArgs a, int csize) {
  constexpr int KPW = 32 / LPK;  // keys per warp step
  constexpr int NG = kWarps * KPW;
  constexpr int DP = LPK * 8;
  __shared__ float qs[DP], ks[DP], vs[DP];
  __shared__ float red[32];
  __shared__ float gm[NG], gl[NG];
  __shared__ float gacc[NG][DP];
  __shared__ float clse;      // cluster merge: this block's partial lse
  __shared__ float cacc[DP];  // and its normalized output row

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int split = blockIdx.x, h = blockIdx.y;
  const int D = a.head_dim, G = a.heads / a.kv_heads, kvh = h / G;
  const int64_t kvd = int64_t(a.kv_heads) * D;
  const bool CBF16 = a.cache_bf16;  // uniform branch (one instantiation per LPK keeps the build small)

  // One thread per head dimension (head_dim <= 256 = kThreads). The norm weights and RoPE frequencies are constants:
  // load them before waiting for the previous kernel.
  const bool in_d = tid < D;
  const float qnw = a.q_norm_w && in_d ? a.q_norm_w[tid] : 1.0f;
  const float knw = a.k_norm_w && in_d ? a.k_norm_w[tid] : 1.0f;
  const float invf = a.inv_freq && tid < D / 2 ? a.inv_freq[tid] : 0.0f;
  pdl_trigger();
  // The position and (for row 0) the cached keys of earlier positions are read BEFORE waiting for the previous kernel: no
  // kernel of this step writes them. The step buffer is uploaded (a stream-ordered copy, which waits for every
  // earlier kernel) before the step's first kernel, and cache row j < p was written by an earlier step; this
  // launch's own row p comes from shared memory. Only q/k/v, written by the previous kernel, wait.
  const int64_t p = int64_t(*a.pos0) + a.row;
  // Visible keys: positions [start, p], n of them. The grid has a.splits splits (fixed: the launch is captured
  // once; gridDim.x may be larger, rounded up to whole clusters), but a short context only uses S of them, each
  // with at least kMinKeys keys (two loop iterations): a split costs a memory round trip or two whatever its
  // length, and every extra split is one more partial to merge. Blocks past S leave at once (block 0 always
  // stays: it appends the new key/value row), except the idle members of a merging cluster.
  int64_t start = 0;
  if (a.window > 0) start = max(start, p - a.window + 1);
  if (a.ring) start = max(start, p - a.capacity + 1);
  const int64_t n = p - start + 1;
  constexpr int64_t kMinKeys = 4 * NG;
  const int S = int(min(int64_t(a.splits), max(int64_t(1), (n + kMinKeys - 1) / kMinKeys)));
  // Uniform over the grid (S depends on p only), so whole clusters agree on which merge runs.
  const bool cmerge = kClusterMerge && csize > 1 && S > 1 && S <= csize;
  if (split >= S) {
    if (cmerge && split < csize) {  // an idle block of the merging cluster: the barriers, and its slice of the dims
      pdl_wait();                   // it writes output
      cluster_merge(a, S, csize, h, &clse, cacc);
    }
    return;
  }

  // ---- this split takes indices [lo, hi) of the visible range [start, p]
  int64_t chunk = (n + S - 1) / S;
  chunk = (chunk + 7) / 8 * 8;
  const int64_t lo = min(n, int64_t(split) * chunk), hi = min(n, lo + chunk);
  const int sl = lane % LPK, g = warp * KPW + lane / LPK;
  const bool dim_ok = sl * 8 < D;
  const int64_t coff = int64_t(kvh) * D + sl * 8;

  // Raw cache chunks of one loop iteration (two keys per lane group, 8 dims each): one uint4 per key and tensor for
  // a bf16 cache, two for f32. Key p (the new one) is not loaded: it comes from shared memory when consumed.
  auto load_iter = [&](int64_t base, uint4 (&kr)[2][2], uint4 (&vr)[2][2]) {
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int64_t idx = base + int64_t(u) * NG + lane / LPK;
      const int64_t j = start + idx;
      const bool ld = idx < hi && dim_ok && j != p;
      const int64_t row = ld ? (a.ring ? j % a.capacity : j) : 0;
      const uint4 z = make_uint4(0, 0, 0, 0);
      if (CBF16) {
        kr[u][0] = ld ? __ldcg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(a.k_cache) + row * kvd + coff)) : z;
        vr[u][0] = ld ? __ldcg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(a.v_cache) + row * kvd + coff)) : z;
      } else {
        const uint4* kp = reinterpret_cast<const uint4*>(static_cast<const float*>(a.k_cache) + row * kvd + coff);
        const uint4* vp = reinterpret_cast<const uint4*>(static_cast<const float*>(a.v_cache) + row * kvd + coff);
        kr[u][0] = ld ? __ldcg(kp) : z, kr[u][1] = ld ? __ldcg(kp + 1) : z;
        vr[u][0] = ld ? __ldcg(vp) : z, vr[u][1] = ld ? __ldcg(vp + 1) : z;
      }
    }
  };
  // The first iteration's keys depend only on p: load them now, so their memory latency overlaps the q/k prologue.
  const int64_t base0 = lo + int64_t(warp) * KPW;
  uint4 kA[2][2], vA[2][2], kB[2][2], vB[2][2];
  if (a.row > 0) pdl_wait();  // a verification row: earlier rows of this step are written by earlier launches
  if (base0 < hi) load_iter(base0, kA, vA);
  pdl_wait();
  float qv = in_d ? ld_any(a.q, a.in_bf16, int64_t(h) * D + tid) : 0.0f;
  float kv = in_d ? ld_any(a.k, a.in_bf16, int64_t(kvh) * D + tid) : 0.0f;
  float vv = in_d ? ld_any(a.v, a.in_bf16, int64_t(kvh) * D + tid) : 0.0f;

  // ---- the query row and the new key/value row, in f32: per-head RMSNorm, then RoPE (pairs i, i + D/2)
  if (a.q_norm_w) qv *= rsqrtf(block_sum(qv * qv, red) / float(D) + a.eps) * qnw;
  if (a.k_norm_w) kv *= rsqrtf(block_sum(kv * kv, red) / float(D) + a.eps) * knw;
  if (tid < DP) qs[tid] = qv, ks[tid] = kv, vs[tid] = vv;
  __syncthreads();
  if (a.inv_freq && tid < D / 2) {
    const int i = tid, half = D / 2;
    float sn, cs;
    sincosf(float(p) * invf, &sn, &cs);
    cs *= a.attn_scaling, sn *= a.attn_scaling;
    const float q1 = qs[i], q2 = qs[i + half], k1 = ks[i], k2 = ks[i + half];
    qs[i] = q1 * cs - q2 * sn, qs[i + half] = q2 * cs + q1 * sn;
    ks[i] = k1 * cs - k2 * sn, ks[i + half] = k2 * cs + k1 * sn;
  }
  __syncthreads();
  for (int i = tid; i < D; i += kThreads) {
    qs[i] *= a.scale;
    if (CBF16) {
      ks[i] = bf2f(f2bf(ks[i]));  // as the cache holds it
      vs[i] = bf2f(f2bf(vs[i]));
    }
  }
  __syncthreads();

  const int64_t slot = a.ring ? p % a.capacity : p;
  if (split == 0 && h % G == 0 && slot >= 0 && slot < a.capacity) {
    for (int i = tid; i < D; i += kThreads) {
      const int64_t o = slot * kvd + int64_t(kvh) * D + i;
      if (CBF16) {
        static_cast<uint16_t*>(a.k_cache)[o] = f2bf(ks[i]);
        static_cast<uint16_t*>(a.v_cache)[o] = f2bf(vs[i]);
      } else {
        static_cast<float*>(a.k_cache)[o] = ks[i];
        static_cast<float*>(a.v_cache)[o] = vs[i];
      }
    }
  }

  float qr[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) qr[j] = dim_ok ? qs[sl * 8 + j] : 0.0f;
  // The running max starts at -FLT_MAX (attention.hpp, contract B): a -inf score then weighs e^-inf = 0 instead of
  // giving e^(-inf - -inf) = NaN as a lane group's first key; a group that saw only -inf scores keeps l = 0.
  float m = -FLT_MAX, l = 0.0f, acc[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j] = 0.0f;

  // Online softmax over one iteration's two keys per lane group.
  auto consume = [&](int64_t base, const uint4 (&kr)[2][2], const uint4 (&vr)[2][2]) {
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int64_t idx = base + int64_t(u) * NG + lane / LPK;
      const bool ok = idx < hi;
      float kf[8], vf[8];
      if (ok && start + idx == p) {
#pragma unroll
        for (int e = 0; e < 8; ++e) kf[e] = dim_ok ? ks[sl * 8 + e] : 0.0f, vf[e] = dim_ok ? vs[sl * 8 + e] : 0.0f;
      } else if (CBF16) {
        unpack8(kr[u][0], kf);
        unpack8(vr[u][0], vf);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          kf[e] = __uint_as_float((&kr[u][0].x)[e]), kf[4 + e] = __uint_as_float((&kr[u][1].x)[e]);
          vf[e] = __uint_as_float((&vr[u][0].x)[e]), vf[4 + e] = __uint_as_float((&vr[u][1].x)[e]);
        }
      }
      float s = 0;
#pragma unroll
      for (int e = 0; e < 8; ++e) s = fmaf(qr[e], kf[e], s);
#pragma unroll
      for (int o = LPK / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (!ok) continue;
      if (a.softcap > 0.0f) s = a.softcap * tanhf(s / a.softcap);
      const float mn = fmaxf(m, s);
      const float corr = __expf(m - mn), pe = __expf(s - mn);
      l = l * corr + pe;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] = fmaf(pe, vf[e], acc[e] * corr);
      m = mn;
    }
  };
  // Two register buffers: the next iteration's keys load while this one's are used.
  for (int64_t base = base0; base < hi; base += 4 * NG) {  // warp-uniform loop
    if (base + 2 * NG < hi) load_iter(base + 2 * NG, kB, vB);
    consume(base, kA, vA);
    if (base + 2 * NG >= hi) break;
    if (base + 4 * NG < hi) load_iter(base + 4 * NG, kA, vA);
    consume(base + 2 * NG, kB, vB);
  }

  // ---- merge the lane groups of the block
  if (sl == 0) gm[g] = m, gl[g] = l;
#pragma unroll
  for (int e = 0; e < 8; ++e) gacc[g][sl * 8 + e] = acc[e];
  __syncthreads();
  float M = -FLT_MAX;
  for (int i = 0; i < NG; ++i) M = fmaxf(M, gm[i]);
  // L is 0 for a row with no visible key or only -inf scores (o = 0, lse = -inf), NaN for a NaN or +inf score (a NaN
  // row: the tests below are `L != 0`, not `L > 0`, so that a NaN L reaches o and lse).
  float L = 0;
  for (int i = 0; i < NG; ++i) L += gl[i] * __expf(gm[i] - M);
  const int64_t hD = int64_t(h) * D;
  if (S == 1) {
    for (int d = tid; d < D; d += kThreads) {
      float o = 0;
      if (L != 0)
        for (int i = 0; i < NG; ++i) o += gacc[i][d] * __expf(gm[i] - M);
      o = L != 0 ? o / L : 0.0f;
      if (a.out_bf16) static_cast<uint16_t*>(a.out)[hD + d] = f2bf(o);
      else static_cast<float*>(a.out)[hD + d] = o;
    }
    return;
  }
  if (cmerge) {
    for (int d = tid; d < D; d += kThreads) {
      float o = 0;
      if (L != 0)
        for (int i = 0; i < NG; ++i) o += gacc[i][d] * __expf(gm[i] - M);
      cacc[d] = L != 0 ? o / L : 0.0f;
    }
    if (tid == 0) clse = L != 0 ? M + __logf(L) : -INFINITY;
    cluster_merge(a, S, csize, h, &clse, cacc);  // its first barrier also orders these shared-memory writes
    return;
  }
  const int64_t SG = a.splits;  // the buffer is laid out for the launch site's splits
  float* po = a.part + (int64_t(h) * SG + split) * D;                  // [heads][SG][D]
  float* plse = a.part + int64_t(a.heads) * SG * D + int64_t(h) * SG;  // [heads][SG]
  for (int d = tid; d < D; d += kThreads) {
    float o = 0;
    if (L != 0)
      for (int i = 0; i < NG; ++i) o += gacc[i][d] * __expf(gm[i] - M);
    po[d] = L != 0 ? o / L : 0.0f;
  }
  if (tid == 0) plse[split] = L != 0 ? M + __logf(L) : -INFINITY;
  if (!merge::arrive_last(a.counters + h, S)) return;
  // ---- last block of head h: merge the S partials (merge.cuh). The S log-sum-exps are loaded at once into shared
  // memory and the partial rows with 8 loads in flight per thread: a serial walk over the splits put one L2 round
  // trip per split on the critical path (v1: ~8 us of a 12 us launch at 16 splits).
  const float* ph = a.part + int64_t(h) * SG * D;
  const float* lh = a.part + int64_t(a.heads) * SG * D + int64_t(h) * SG;
  __shared__ float wsplit[kMaxSplits];
  const float den = merge::split_weights<kThreads, true>(lh, 1, S, wsplit, red).y;
  for (int d = tid; d < D; d += kThreads) {
    float o = 0;
#pragma unroll 8
    for (int s2 = 0; s2 < S; ++s2) o += wsplit[s2] * __ldcg(ph + int64_t(s2) * D + d);
    o = den > 0 ? o / den : den == 0 ? 0.0f : __builtin_nanf("");  // NaN: a split saw a NaN score
    if (a.out_bf16) static_cast<uint16_t*>(a.out)[hD + d] = f2bf(o);
    else static_cast<float*>(a.out)[hD + d] = o;
  }
}

}  // namespace

int64_t fused_decode_part_floats(int heads, int head_dim, int splits) {
  return int64_t(heads) * splits * (head_dim + 1);
}

namespace {

int lanes_per_key(int head_dim) {  // head_dim 8 runs on the 2-lane variant (the second lane idles)
  const int c = head_dim / 8;     // 16-byte chunks per row
  return c <= 2 ? 2 : c <= 4 ? 4 : c <= 8 ? 8 : c <= 16 ? 16 : 32;
}

// Calls f(std::integral_constant<int, LPK>{}) for the head dim's lanes per key.
template <typename F>
auto by_lanes(int head_dim, F&& f) {
  switch (lanes_per_key(head_dim)) {
    case 2: return f(std::integral_constant<int, 2>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 8: return f(std::integral_constant<int, 8>{});
    case 16: return f(std::integral_constant<int, 16>{});
    default: return f(std::integral_constant<int, 32>{});
  }
}

}  // namespace

// A newer chip running the sm_80 PTX (JIT-compiled, no cluster merge in it) reports no clusters (core/cuda_device).
ClusterResidency fused_decode_cluster_residency(int head_dim) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, ClusterResidency> memo;  // (lanes per key, device)
  const int lpk = lanes_per_key(head_dim), dev = cuda_current_device();
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = memo.find({lpk, dev});
    if (it != memo.end()) return it->second;
  }
  const void* kern = by_lanes(head_dim, [](auto l) {
    return reinterpret_cast<const void*>(decode_attn_kernel<decltype(l)::value>);
  });
  const ClusterResidency res = query_cluster_residency(kern, kThreads, 0);
  std::lock_guard<std::mutex> lock(mu);
  memo[{lpk, dev}] = res;
  return res;
}

void launch_fused_decode(const DecodeAttnArgs& a, const DecodePlan& plan, cudaStream_t stream) {
  const int c = plan.cluster > 1 ? plan.cluster : 1;
  const unsigned gx = unsigned((a.splits + c - 1) / c * c);
  if (gx == 0 || a.heads == 0) return;
  by_lanes(a.head_dim, [&](auto l) {
    check_cuda(launch_ex(decode_attn_kernel<decltype(l)::value>, dim3(gx, unsigned(a.heads)), dim3(kThreads), 0,
                         stream, plan.pdl, unsigned(c), a, c),
               "decode_attention");
    return 0;
  });
}

}  // namespace flashkit::cuda
