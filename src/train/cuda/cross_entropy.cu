// Cross-entropy over a chunk of lm_head logits (f32 [R, ld]), loss per row and dloss/dlogits written in place.
// One block per row, two passes: pass 1 keeps a per-thread online (max, sum of exp) over the row (16-byte loads
// when ld and the pointer allow) and merges the pairs across the block with a fixed tree; pass 2 re-reads the row
// (mostly from L2: a 50k-vocab row is 200 KB) and writes scale * (softmax - onehot), through the softcap
// derivative when softcap > 0. Floor: 8 bytes per logit (read, write; 10 with the bf16 copy), plus the re-read
// where it misses L2.
#include <cmath>

#include "train/cuda/common.cuh"

namespace flashkit::train::cuda {

namespace {

constexpr int kThreads = 512;

struct MaxSum {
  float m, s;  // running max and sum of exp(l - m)
};
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}
__device__ __forceinline__ MaxSum block_merge(MaxSum v, float* sm, float* ss) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = merge(v, {__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)});
  if (lane == 0) sm[w] = v.m, ss[w] = v.s;
  __syncthreads();
  if (w == 0) {
    v = lane < nw ? MaxSum{sm[lane], ss[lane]} : MaxSum{-INFINITY, 0.0f};
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      v = merge(v, {__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)});
    if (lane == 0) sm[0] = v.m, ss[0] = v.s;
  }
  __syncthreads();
  return {sm[0], ss[0]};
}

template <bool CAP>
__device__ __forceinline__ float capped(float z, float cap) {
  if constexpr (CAP) return cap * tanhf(z / cap);
  else return z;
}

template <bool VEC, bool CAP>
__global__ void cross_entropy_kernel(float* logits, int64_t ld, const int32_t* targets, float* loss, uint16_t* dbf,
                                     int64_t V, float scale, float cap) {
  __shared__ float sm[32], ss[32];
  const int64_t r = blockIdx.x;
  float* row = logits + r * ld;
  uint16_t* brow = dbf ? dbf + r * ld : nullptr;
  const int32_t tgt = targets[r];
  const int tid = threadIdx.x, nt = blockDim.x;
  if (tgt < 0 || tgt >= V) {  // ignored (-1) or invalid: no gradient; the loss says which
    for (int64_t c = tid; c < ld; c += nt) {
      row[c] = 0.0f;
      if (brow) brow[c] = 0;
    }
    if (tid == 0) loss[r] = tgt == -1 ? 0.0f : __int_as_float(0x7fc00000);
    return;
  }
  // Pass 1: online max / sum of exp.
  MaxSum a{-INFINITY, 0.0f};
  int64_t done = 0;
  if constexpr (VEC) {
    const int64_t nv = V / 4;
    for (int64_t j = tid; j < nv; j += nt) {
      const float4 z = reinterpret_cast<const float4*>(row)[j];
      const float l0 = capped<CAP>(z.x, cap), l1 = capped<CAP>(z.y, cap), l2 = capped<CAP>(z.z, cap),
                  l3 = capped<CAP>(z.w, cap);
      const float mx = fmaxf(fmaxf(l0, l1), fmaxf(l2, l3));
      if (mx > a.m) a.s *= expf(a.m - mx), a.m = mx;
      a.s += (expf(l0 - a.m) + expf(l1 - a.m)) + (expf(l2 - a.m) + expf(l3 - a.m));
    }
    done = nv * 4;
  }
  for (int64_t c = done + tid; c < V; c += nt) {
    const float l = capped<CAP>(row[c], cap);
    if (l > a.m) a.s = a.s * expf(a.m - l) + 1.0f, a.m = l;
    else a.s += expf(l - a.m);
  }
  const float lt = tid == 0 ? capped<CAP>(row[tgt], cap) : 0.0f;  // read before the barrier in block_merge
  a = block_merge(a, sm, ss);
  const float M = a.m, inv_s = 1.0f / a.s;
  if (tid == 0) loss[r] = logf(a.s) + M - lt;
  // Pass 2: dz = scale * (softmax(l) - onehot) * dl/dz.
  auto grad = [&](float z, int64_t c) {
    const float l = capped<CAP>(z, cap);
    float d = expf(l - M) * inv_s - (c == tgt ? 1.0f : 0.0f);
    if constexpr (CAP) {
      const float th = l / cap;
      d *= 1.0f - th * th;
    }
    return d * scale;
  };
  if constexpr (VEC) {
    const int64_t nv = V / 4;
    for (int64_t j = tid; j < nv; j += nt) {
      float4 z = reinterpret_cast<const float4*>(row)[j];
      z.x = grad(z.x, 4 * j), z.y = grad(z.y, 4 * j + 1), z.z = grad(z.z, 4 * j + 2), z.w = grad(z.w, 4 * j + 3);
      reinterpret_cast<float4*>(row)[j] = z;
      if (brow) reinterpret_cast<uint2*>(brow)[j] = make_uint2(pack2(z.x, z.y), pack2(z.z, z.w));
    }
  }
  for (int64_t c = done + tid; c < V; c += nt) {
    const float d = grad(row[c], c);
    row[c] = d;
    if (brow) brow[c] = f2bf(d);
  }
  for (int64_t c = V + tid; c < ld; c += nt) {  // vocabulary padding
    row[c] = 0.0f;
    if (brow) brow[c] = 0;
  }
}

}  // namespace

void cross_entropy_chunk_fwd_bwd(float* logits, int64_t ld, const int32_t* targets, float* loss, bf16* dlogits_bf16,
                                 int64_t R, int64_t V, float scale, float softcap, cudaStream_t stream) {
  const char* fn = "cross_entropy_chunk_fwd_bwd";
  need_size(R, fn, "R");
  need(V >= 1 && V <= std::numeric_limits<int32_t>::max(), fn, "V must be in [1, 2^31), got " + std::to_string(V));
  need(ld >= V, fn, "ld must be >= V = " + std::to_string(V) + ", got " + std::to_string(ld));
  need(softcap >= 0.0f && std::isfinite(softcap), fn, "softcap must be >= 0 (0 = off), got " + std::to_string(softcap));
  if (R == 0) return;
  need_ptr(logits, fn, "logits");
  need_ptr(targets, fn, "targets");
  need_ptr(loss, fn, "loss");
  uint16_t* dbf = dlogits_bf16 ? bits(dlogits_bf16) : nullptr;
  const bool vec = ld % 4 == 0 && aligned16(logits) && (reinterpret_cast<uintptr_t>(dbf) & 7u) == 0;
  const bool cap = softcap > 0.0f;
  auto kern = vec ? (cap ? cross_entropy_kernel<true, true> : cross_entropy_kernel<true, false>)
                  : (cap ? cross_entropy_kernel<false, true> : cross_entropy_kernel<false, false>);
  kern<<<unsigned(R), kThreads, 0, stream>>>(logits, ld, targets, loss, dbf, V, scale, softcap);
  check_launch(fn);
}

}  // namespace flashkit::train::cuda
