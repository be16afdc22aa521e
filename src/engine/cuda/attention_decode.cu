// Decode attention for the engine: one query token per head at position p read from device memory (graph-safe),
// fused with the per-head q/k RMSNorm, RoPE and the KV-cache append of the new token.
//
// Grid (splits, heads), 256 threads. Every block recomputes the new key/value row (norm + RoPE, O(head_dim)) in
// shared memory, rounded to bf16 exactly as the cache will hold it, so no block depends on the cache write of this
// launch: the key at position p comes from shared memory, all older keys from the cache (for a ring, slot p % cap
// holds position p - cap, which is outside the window, so the concurrent write cannot be observed). One block per
// KV head writes the new row.
//
// Keys: LPK lanes (a power of two, 8 dims each) hold one key; a warp takes 32 / LPK keys per step, two steps per
// iteration so each lane has two 16-byte K loads and two V loads in flight. Online softmax per lane group, a
// shared-memory merge of the groups, then either the output (one split) or an f32 partial (o, lse) that the last
// block of the head to arrive (atomic counter, reset by that block) merges.
#include "engine/cuda/common.cuh"

#include <algorithm>
#include <cmath>

namespace flashkit::engine::cuda {

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;

template <int LPK>
__global__ void __launch_bounds__(kThreads) decode_attn_kernel(DecodeAttnArgs a) {
  constexpr int KPW = 32 / LPK;  // keys per warp step
  constexpr int NG = kWarps * KPW;
  constexpr int DP = LPK * 8;
  __shared__ float qs[DP], ks[DP], vs[DP];
  __shared__ float red[32];
  __shared__ float gm[NG], gl[NG];
  __shared__ float gacc[NG][DP];
  __shared__ int s_last;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int split = blockIdx.x, h = blockIdx.y, S = gridDim.x;
  const int D = a.head_dim, G = a.heads / a.kv_heads, kvh = h / G;
  const int64_t kvd = int64_t(a.kv_heads) * D;
  const bool CBF16 = a.cache_bf16;  // uniform branch (one instantiation per LPK keeps the build small)

  pdl_trigger();
  pdl_wait();
  const int64_t p = *a.pos0;

  // ---- the query row and the new key/value row, in f32
  for (int i = tid; i < DP; i += kThreads) {
    qs[i] = i < D ? ld_any(a.q, a.in_bf16, int64_t(h) * D + i) : 0.0f;
    ks[i] = i < D ? ld_any(a.k, a.in_bf16, int64_t(kvh) * D + i) : 0.0f;
    vs[i] = i < D ? ld_any(a.v, a.in_bf16, int64_t(kvh) * D + i) : 0.0f;
  }
  __syncthreads();
  if (a.q_norm_w) {
    float ss = 0;
    for (int i = tid; i < D; i += kThreads) ss += qs[i] * qs[i];
    ss = block_sum(ss, red);
    const float r = rsqrtf(ss / float(D) + a.eps);
    for (int i = tid; i < D; i += kThreads) qs[i] *= r * a.q_norm_w[i];
  }
  if (a.k_norm_w) {
    float ss = 0;
    for (int i = tid; i < D; i += kThreads) ss += ks[i] * ks[i];
    ss = block_sum(ss, red);
    const float r = rsqrtf(ss / float(D) + a.eps);
    for (int i = tid; i < D; i += kThreads) ks[i] *= r * a.k_norm_w[i];
  }
  __syncthreads();
  if (a.inv_freq) {
    const int half = D / 2;
    for (int i = tid; i < half; i += kThreads) {
      float sn, cs;
      sincosf(float(p) * a.inv_freq[i], &sn, &cs);
      cs *= a.attn_scaling, sn *= a.attn_scaling;
      const float q1 = qs[i], q2 = qs[i + half], k1 = ks[i], k2 = ks[i + half];
      qs[i] = q1 * cs - q2 * sn, qs[i + half] = q2 * cs + q1 * sn;
      ks[i] = k1 * cs - k2 * sn, ks[i + half] = k2 * cs + k1 * sn;
    }
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

  // ---- visible keys: positions [start, p]; this split takes indices [lo, hi) of that range
  int64_t start = 0;
  if (a.window > 0) start = max(start, p - a.window + 1);
  if (a.ring) start = max(start, p - a.capacity + 1);
  const int64_t n = p - start + 1;
  int64_t chunk = (n + S - 1) / S;
  chunk = (chunk + 7) / 8 * 8;
  const int64_t lo = min(n, int64_t(split) * chunk), hi = min(n, lo + chunk);

  const int sl = lane % LPK, g = warp * KPW + lane / LPK;
  const bool dim_ok = sl * 8 < D;
  float qr[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) qr[j] = dim_ok ? qs[sl * 8 + j] : 0.0f;
  float m = -INFINITY, l = 0.0f, acc[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j] = 0.0f;
  const int64_t coff = int64_t(kvh) * D + sl * 8;

  for (int64_t base = lo + int64_t(warp) * KPW; base < hi; base += 2 * NG) {  // warp-uniform loop
    float kf[2][8], vf[2][8];
    bool ok[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int64_t idx = base + int64_t(u) * NG + lane / LPK;
      ok[u] = idx < hi;
      const int64_t j = start + idx;
      if (ok[u] && j == p) {
#pragma unroll
        for (int e = 0; e < 8; ++e) kf[u][e] = dim_ok ? ks[sl * 8 + e] : 0.0f, vf[u][e] = dim_ok ? vs[sl * 8 + e] : 0.0f;
      } else {
        const bool ld = ok[u] && dim_ok;
        const int64_t row = ld ? (a.ring ? j % a.capacity : j) : 0;
        if (CBF16) {
          uint4 kk = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
          if (ld) {
            kk = __ldcg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(a.k_cache) + row * kvd + coff));
            vv = __ldcg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(a.v_cache) + row * kvd + coff));
          }
          unpack8(kk, kf[u]);
          unpack8(vv, vf[u]);
        } else {
          float4 k0 = make_float4(0, 0, 0, 0), k1 = k0, v0 = k0, v1 = k0;
          if (ld) {
            const float4* kp = reinterpret_cast<const float4*>(static_cast<const float*>(a.k_cache) + row * kvd + coff);
            const float4* vp = reinterpret_cast<const float4*>(static_cast<const float*>(a.v_cache) + row * kvd + coff);
            k0 = __ldcg(kp), k1 = __ldcg(kp + 1), v0 = __ldcg(vp), v1 = __ldcg(vp + 1);
          }
          kf[u][0] = k0.x, kf[u][1] = k0.y, kf[u][2] = k0.z, kf[u][3] = k0.w;
          kf[u][4] = k1.x, kf[u][5] = k1.y, kf[u][6] = k1.z, kf[u][7] = k1.w;
          vf[u][0] = v0.x, vf[u][1] = v0.y, vf[u][2] = v0.z, vf[u][3] = v0.w;
          vf[u][4] = v1.x, vf[u][5] = v1.y, vf[u][6] = v1.z, vf[u][7] = v1.w;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      float s = 0;
#pragma unroll
      for (int e = 0; e < 8; ++e) s = fmaf(qr[e], kf[u][e], s);
#pragma unroll
      for (int o = LPK / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (!ok[u]) continue;
      if (a.softcap > 0.0f) s = a.softcap * tanhf(s / a.softcap);
      const float mn = fmaxf(m, s);
      const float corr = __expf(m - mn), pe = __expf(s - mn);
      l = l * corr + pe;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] = fmaf(pe, vf[u][e], acc[e] * corr);
      m = mn;
    }
  }

  // ---- merge the lane groups of the block
  if (sl == 0) gm[g] = m, gl[g] = l;
#pragma unroll
  for (int e = 0; e < 8; ++e) gacc[g][sl * 8 + e] = acc[e];
  __syncthreads();
  float M = -INFINITY;
  for (int i = 0; i < NG; ++i) M = fmaxf(M, gm[i]);
  float L = 0;
  if (M != -INFINITY)
    for (int i = 0; i < NG; ++i) L += gl[i] * __expf(gm[i] - M);
  const int64_t hD = int64_t(h) * D;
  if (S == 1) {
    for (int d = tid; d < D; d += kThreads) {
      float o = 0;
      if (L > 0)
        for (int i = 0; i < NG; ++i) o += gacc[i][d] * __expf(gm[i] - M);
      o = L > 0 ? o / L : 0.0f;
      if (a.out_bf16) static_cast<uint16_t*>(a.out)[hD + d] = f2bf(o);
      else static_cast<float*>(a.out)[hD + d] = o;
    }
    return;
  }
  float* po = a.part + (int64_t(h) * S + split) * D;                 // [heads][S][D]
  float* plse = a.part + int64_t(a.heads) * S * D + int64_t(h) * S;  // [heads][S]
  for (int d = tid; d < D; d += kThreads) {
    float o = 0;
    if (L > 0)
      for (int i = 0; i < NG; ++i) o += gacc[i][d] * __expf(gm[i] - M);
    po[d] = L > 0 ? o / L : 0.0f;
  }
  if (tid == 0) plse[split] = L > 0 ? M + __logf(L) : -INFINITY;
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    const unsigned prev = atomicAdd(a.counters + h, 1u);
    s_last = prev == unsigned(S) - 1;
    if (s_last) a.counters[h] = 0u;
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  // ---- last block of head h: merge the S partials
  const float* ph = a.part + int64_t(h) * S * D;
  const float* lh = a.part + int64_t(a.heads) * S * D + int64_t(h) * S;
  float LM = -INFINITY;
  for (int s2 = 0; s2 < S; ++s2) LM = fmaxf(LM, __ldcg(lh + s2));
  for (int d = tid; d < D; d += kThreads) {
    float o = 0, den = 0;
    if (LM != -INFINITY)
      for (int s2 = 0; s2 < S; ++s2) {
        const float wgt = __expf(__ldcg(lh + s2) - LM);
        den += wgt;
        o += wgt * __ldcg(ph + int64_t(s2) * D + d);
      }
    o = den > 0 ? o / den : 0.0f;
    if (a.out_bf16) static_cast<uint16_t*>(a.out)[hD + d] = f2bf(o);
    else static_cast<float*>(a.out)[hD + d] = o;
  }
}

}  // namespace

int64_t decode_attention_part_floats(int heads, int head_dim, int splits) {
  return int64_t(heads) * splits * (head_dim + 1);
}

int decode_attention_splits(int heads, int64_t max_keys) {
  // Enough blocks to cover the machine about twice, each with at least ~32 keys; at most 64 partials to merge.
  const int64_t want = std::max<int64_t>(1, 2 * int64_t(sm_count()) / std::max(heads, 1));
  const int64_t by_keys = std::max<int64_t>(1, (max_keys + 31) / 32);
  return int(std::clamp<int64_t>(std::min(want, by_keys), 1, 64));
}

void decode_attention(const DecodeAttnArgs& a, cudaStream_t stream) {
  const int D = a.head_dim;
  if (D <= 0 || D % 8 || D > 256 || a.heads <= 0 || a.kv_heads <= 0 || a.heads % a.kv_heads)
    fail(Status::invalid_argument, "decode_attention: head_dim must be a multiple of 8 up to 256, heads a multiple of kv_heads");
  if (a.splits < 1 || (a.splits > 1 && (!a.part || !a.counters)))
    fail(Status::invalid_argument, "decode_attention: splits > 1 needs the partial buffer and counters");
  if (a.heads > 65535) fail(Status::invalid_argument, "decode_attention: too many heads");
  const int c = D / 8;  // 16-byte chunks per row
  const int lpk = c <= 1 ? 1 : c <= 2 ? 2 : c <= 4 ? 4 : c <= 8 ? 8 : c <= 16 ? 16 : 32;
  const dim3 grid{unsigned(a.splits), unsigned(a.heads)};
  switch (lpk) {  // head_dim 8 runs on the 2-lane variant (the second lane idles)
    case 1:
    case 2: launch("decode_attention", decode_attn_kernel<2>, grid, dim3(kThreads), 0, stream, a); break;
    case 4: launch("decode_attention", decode_attn_kernel<4>, grid, dim3(kThreads), 0, stream, a); break;
    case 8: launch("decode_attention", decode_attn_kernel<8>, grid, dim3(kThreads), 0, stream, a); break;
    case 16: launch("decode_attention", decode_attn_kernel<16>, grid, dim3(kThreads), 0, stream, a); break;
    default: launch("decode_attention", decode_attn_kernel<32>, grid, dim3(kThreads), 0, stream, a); break;
  }
}

}  // namespace flashkit::engine::cuda
