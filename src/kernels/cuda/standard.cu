// The IO-unaware CUDA baseline: S = QK^T (cuBLAS, f32 out) and P = softmax(S) (a row kernel) are written
// to device memory, then O = PV (cuBLAS). The backward recomputes S and P the same way and runs dV = P^T dO,
// dP = dO V^T, dS = P (dP - rowsum(dO O)), dQ = dS K, dK = dS^T Q as cuBLAS GEMMs with two row kernels.
// Each product is one batched GEMM over all (sequence, head) pairs of a work unit (pointer arrays): units split
// only to keep the materialized matrices under a few GB, and per sequence when varlen (different sizes).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "core/cuda_check.hpp"
#include "flashkit/error.hpp"
#include "kernels/cuda/flash_api.hpp"
#include "kernels/cuda/flash_common.cuh"

namespace flashkit::cuda {

namespace {

constexpr double kChunkBytes = 4.0e9;  // materialized-matrix budget per GEMM chunk

void cb(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) fail(Status::device_error, std::string(what) + ": cuBLAS status " + std::to_string(int(s)));
}

cublasHandle_t handle(int device) {
  static std::mutex mu;
  static std::vector<cublasHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  if (int(handles.size()) <= device) handles.resize(device + 1, nullptr);
  if (!handles[device]) cb(cublasCreate(&handles[device]), "cublasCreate");
  return handles[device];
}

struct DevBuf {
  void* p = nullptr;
  cudaStream_t s = nullptr;
  DevBuf(size_t bytes, cudaStream_t stream) : s(stream) {
    if (bytes) check_cuda(cudaMallocAsync(&p, bytes, stream), "cudaMallocAsync(standard attention workspace)");
  }
  ~DevBuf() {
    if (p) cudaFreeAsync(p, s);
  }
};

cudaDataType_t cuda_type(DType t) { return t == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F; }

template <typename T>
unsigned grid_for(int64_t n) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, 132 * 16)));
}

// Scores (f32, raw dot products) -> P (T) and lse; one block per row.
template <typename T>
__global__ void softmax_fwd_kernel(const float* S, T* P, float* lse, int64_t lse_base, int64_t lse_hstride, int64_t nq,
                                   int64_t nk, float scale, float softcap, kernels::AttentionMask mask) {
  const int64_t row = blockIdx.x;  // hh * nq + i
  const int64_t hh = row / nq, i = row % nq;
  const float* s = S + row * nk;
  T* p = P + row * nk;
  const int64_t lo = mask.lo(i, nq, nk), hi = mask.hi(i, nq, nk);
  __shared__ float red[32];
  auto xval = [&](int64_t j) {
    // __fmul_rn: not contracted into fma(s, scale, -m) below, which would subtract m from the unrounded product and,
    // at scores near 1e20, leave the rounding error (~1e13) in the exponent: e^+-1e13 (run s11-2's overflow cases).
    const float x = __fmul_rn(s[j], scale);
    return softcap > 0.f ? softcap * tanhf(x / softcap) : x;
  };
  float m = -INFINITY;
  for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) m = fmaxf(m, xval(j));
  for (int w = 16; w > 0; w >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, w));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
  __syncthreads();
  m = -INFINITY;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) m = fmaxf(m, red[w]);
  __syncthreads();
  // Every visible score -inf (or none visible): exponents against 0, so P = 0 and lse = -inf (attention.hpp, the
  // answer of a row with no visible key) instead of e^(-inf - -inf) = NaN.
  if (m == -INFINITY) m = 0.f;
  float sum = 0.f;
  for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) sum += __expf(xval(j) - m);
  for (int w = 16; w > 0; w >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, w);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = sum;
  __syncthreads();
  sum = 0.f;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) sum += red[w];
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  for (int64_t j = threadIdx.x; j < nk; j += blockDim.x)
    p[j] = MmaOp<T>::from_f32(j >= lo && j < hi ? __expf(xval(j) - m) * inv : 0.f);
  if (threadIdx.x == 0) lse[lse_base + hh * lse_hstride + i] = sum > 0.f ? m + __logf(sum) : sum == 0.f ? -INFINITY : kNaN;
}

// Backward, first pass: S (f32) -> P (T) from the saved lse; S is overwritten with P * dx/ds_raw-factor.
template <typename T>
__global__ void softmax_bwd_p_kernel(float* S, T* P, const float* lse, int64_t lse_base, int64_t lse_hstride,
                                     int64_t nq, int64_t nk, float scale, float softcap, kernels::AttentionMask mask) {
  const int64_t row = blockIdx.x;
  const int64_t hh = row / nq, i = row % nq;
  const int64_t lo = mask.lo(i, nq, nk), hi = mask.hi(i, nq, nk);
  // A row that sees keys with a non-finite lse gets NaN probabilities (attention.hpp); an empty row P = 0.
  const float L0 = lse[lse_base + hh * lse_hstride + i];
  const float L = hi <= lo ? INFINITY : isfinite(L0) ? L0 : __int_as_float(0x7fffffff);
  for (int64_t j = threadIdx.x; j < nk; j += blockDim.x) {
    float x = __fmul_rn(S[row * nk + j], scale), f = 1.f;  // not contracted with the lse subtraction (forward's note)
    if (softcap > 0.f) {
      const float th = tanhf(x / softcap);
      x = softcap * th;
      f = 1.f - th * th;
    }
    const float pv = (j >= lo && j < hi) ? __expf(x - L) : 0.f;
    P[row * nk + j] = MmaOp<T>::from_f32(pv);
    S[row * nk + j] = pv * f;
  }
}

// Backward, second pass: dS = (P f) (dP - D_i), as T.
template <typename T>
__global__ void softmax_bwd_ds_kernel(const float* PF, const float* dP, T* dS, const float* dsum, int64_t lse_base,
                                      int64_t lse_hstride, int64_t nq, int64_t nk) {
  const int64_t row = blockIdx.x;
  const int64_t hh = row / nq, i = row % nq;
  const float Di = dsum[lse_base + hh * lse_hstride + i];
  for (int64_t j = threadIdx.x; j < nk; j += blockDim.x)
    dS[row * nk + j] = MmaOp<T>::from_f32(PF[row * nk + j] * (dP[row * nk + j] - Di));
}

template <typename T>
__global__ void f32_to_operand_kernel(const float* src, T* dst, int64_t stride_s, int64_t nrows, int64_t D,
                                      int64_t ld) {
  const int64_t n = nrows * D;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / D, c = e % D;
    dst[r * stride_s + c] = MmaOp<T>::from_f32(src[r * ld + c]);
  }
}

// Work units: ranges of (sequence, head) pairs that share nq and nk, processed with one batched GEMM per matrix
// product (pointer arrays, so a unit spans heads and, without varlen, sequences: GPT-2-medium's backward went from
// one cuBLAS launch per (sequence, head, product) to one per product). A unit holds whole GQA groups and stays
// under the materialized-matrix budget.
struct Unit {
  int64_t p0, count;      // pairs p in [p0, p0 + count): sequence p / heads (non-varlen), head p % heads
  int64_t bslot, q0, k0;  // varlen: the unit's one sequence (batch slot 0, token offsets); else 0
  int64_t nq, nk;
};
std::vector<Unit> units(const kernels::AttentionShape& s, const int32_t* host_cu, double bytes_per_pair) {
  const int64_t group = s.group();
  const int64_t per_seq = s.heads;
  int64_t cap = std::max<int64_t>(1, int64_t(kChunkBytes / std::max(1.0, bytes_per_pair * group))) * group;
  std::vector<Unit> out;
  if (!s.varlen()) {
    const int64_t total = s.batch * per_seq;
    cap = std::min(cap, std::max<int64_t>(total, 1));
    for (int64_t p0 = 0; p0 < total; p0 += cap)
      out.push_back({p0, std::min(cap, total - p0), 0, 0, 0, s.seqlen_q, s.seqlen_k});
    return out;
  }
  const int32_t* cq = host_cu;
  const int32_t* ckk = host_cu + s.batch + 1;
  cap = std::min(cap, per_seq);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h0 = 0; h0 < per_seq; h0 += cap)
      out.push_back({h0, std::min(cap, per_seq - h0), 0, cq[b], ckk[b], cq[b + 1] - cq[b], ckk[b + 1] - ckk[b]});
  return out;
}

// Pointer arrays for cublasGemmBatchedEx, written on the device in the call's stream order (a host-side array would
// be overwritten by the next call before the copy ran). Entry i of array a: base + (p / heads) * sb +
// ((p % heads) / div) * sh + i * si bytes, p = p0 + i.
struct PtrSpec {
  const char* base;
  int64_t sb, sh, si, div;
};
constexpr int kMaxPtrArrays = 10;
struct PtrTable {
  PtrSpec a[kMaxPtrArrays];
  int n;
};
__global__ void fill_pointers_kernel(const void** out, const PtrTable t, int64_t p0, int64_t count, int64_t heads) {
  const int64_t n = int64_t(t.n) * count;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t a = e / count, i = e % count, p = p0 + i;
    const PtrSpec& s = t.a[a];
    out[e] = s.base + (p / heads) * s.sb + ((p % heads) / s.div) * s.sh + i * s.si;
  }
}

// A tensor operand's pointer spec: its rows start at token `tok` of the unit's sequence, `div` query heads per head.
PtrSpec operand(const kernels::AttnOperand& t, size_t es, const Unit& u, int64_t tok, int64_t div) {
  const char* base = static_cast<const char*>(t.data) + int64_t(es) * (u.bslot * t.stride_b + tok * t.stride_s);
  return {base, int64_t(es) * t.stride_b, int64_t(es) * t.stride_h, 0, div};
}
// A workspace matrix per pair: `elems` elements of `es` bytes each.
PtrSpec per_pair(const void* base, int64_t elems, size_t es) {
  return {static_cast<const char*>(base), 0, 0, elems * int64_t(es), 1};
}

const void** fill_pointers(const DevBuf& buf, const PtrTable& t, const Unit& u, int64_t heads, cudaStream_t stream) {
  const auto** out = static_cast<const void**>(buf.p);
  const int64_t n = int64_t(t.n) * u.count;
  fill_pointers_kernel<<<unsigned(std::min<int64_t>((n + 255) / 256, 1024)), 256, 0, stream>>>(out, t, u.p0, u.count,
                                                                                                 heads);
  check_cuda(cudaGetLastError(), "pointer-array launch");
  return out;
}

// C_i (col-major) = alpha op(A_i) op(B_i) + beta C_i for the unit's pairs, one launch.
void gemm_batched(cublasHandle_t h, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void** A,
                  cudaDataType_t at, int64_t lda, const void** B, cudaDataType_t bt, int64_t ldb, float beta, const void** C,
                  cudaDataType_t ct, int64_t ldc, int64_t batch) {
  cb(cublasGemmBatchedEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, int(m), int(n), int(k),
                         &alpha, A, at, int(lda), B, bt, int(ldb), &beta, const_cast<void* const*>(C), ct, int(ldc),
                         int(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
     "cublasGemmBatchedEx");
}

int64_t max_unit_pairs(const std::vector<Unit>& us) {
  int64_t m = 0;
  for (const Unit& u : us) m = std::max(m, u.count);
  return m;
}

// Sums each GQA group's per-head f32 dK (or dV) rows into the T operand: dst[kv head] = sum over its `group` heads.
template <typename T>
__global__ void group_sum_kernel(const float* src, T* dst, int64_t stride_b, int64_t stride_s, int64_t stride_h,
                                 int64_t p0, int64_t kv_count, int64_t group, int64_t heads, int64_t nk, int64_t D) {
  const int64_t n = kv_count * nk * D;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = e % D, r = (e / D) % nk, kv = e / (D * nk);
    float acc = 0.f;
    for (int64_t g = 0; g < group; ++g) acc += src[((kv * group + g) * nk + r) * D + c];
    const int64_t p = p0 + kv * group;  // the group's first pair
    dst[(p / heads) * stride_b + ((p % heads) / group) * stride_h + r * stride_s + c] = MmaOp<T>::from_f32(acc);
  }
}

template <typename T>
void forward_t(const kernels::AttentionFwdArgs& a, const int32_t* host_cu, cudaStream_t stream) {
  int dev = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  cublasHandle_t h = handle(dev);
  cb(cublasSetStream(h, stream), "cublasSetStream");
  const auto& sh = a.shape;
  const int64_t D = sh.head_dim, group = sh.group(), H = sh.heads;
  const int64_t mq = sh.max_seqlen_q, mk = sh.max_seqlen_k;
  const std::vector<Unit> us = units(sh, host_cu, double(mq) * mk * 6);
  const int64_t hc = max_unit_pairs(us);
  DevBuf S(size_t(hc * mq * mk) * 4, stream), P(size_t(hc * mq * mk) * 2, stream),
      ptrs(size_t(6 * hc) * sizeof(void*), stream);
  const cudaDataType_t dt = cuda_type(a.dtype);
  const size_t es = sizeof(T);
  for (const Unit& u : us) {
    if (u.nq == 0) continue;
    const int64_t nn = u.nq * u.nk;
    // lse [slot, H, seqlen_q]: pair p's row i at p * seqlen_q + q0 + i (varlen: the unit's pairs are heads p0..)
    const int64_t lse_base = u.p0 * sh.seqlen_q + u.q0;
    if (u.nk == 0) {  // no keys: o = 0, lse = -inf, via the softmax kernel on an empty row
      softmax_fwd_kernel<T><<<unsigned(u.count * u.nq), 256, 0, stream>>>(static_cast<float*>(S.p), static_cast<T*>(P.p),
                                                                          a.lse, lse_base, sh.seqlen_q, u.nq, 0, a.scale,
                                                                          a.softcap, a.mask);
      check_cuda(cudaGetLastError(), "softmax launch");
      for (int64_t i = 0; i < u.count; ++i) {
        const int64_t p = u.p0 + i;
        T* op = static_cast<T*>(a.o.data) + (u.bslot + p / H) * a.o.stride_b + u.q0 * a.o.stride_s + (p % H) * a.o.stride_h;
        check_cuda(cudaMemset2DAsync(op, a.o.stride_s * sizeof(T), 0, D * sizeof(T), u.nq, stream), "cudaMemset2DAsync");
      }
      continue;
    }
    PtrTable t{};
    t.a[0] = operand(a.k, es, u, u.k0, group);   // K of the pair's KV head
    t.a[1] = operand(a.q, es, u, u.q0, 1);       // Q
    t.a[2] = per_pair(S.p, nn, 4);               // S
    t.a[3] = operand(a.v, es, u, u.k0, group);   // V
    t.a[4] = per_pair(P.p, nn, 2);               // P
    t.a[5] = operand(a.o, es, u, u.q0, 1);       // O
    t.n = 6;
    const void** pa = fill_pointers(ptrs, t, u, H, stream);
    const int64_t c = u.count;
    // S^T (nk x nq, col-major) = K Q^T
    gemm_batched(h, true, false, u.nk, u.nq, D, 1.f, pa, dt, a.k.stride_s, pa + c, dt, a.q.stride_s, 0.f, pa + 2 * c,
                 CUDA_R_32F, u.nk, c);
    softmax_fwd_kernel<T><<<unsigned(c * u.nq), 256, 0, stream>>>(static_cast<float*>(S.p), static_cast<T*>(P.p), a.lse,
                                                                  lse_base, sh.seqlen_q, u.nq, u.nk, a.scale, a.softcap,
                                                                  a.mask);
    check_cuda(cudaGetLastError(), "softmax launch");
    // O^T (D x nq) = V^T (D x nk) P^T (nk x nq)
    gemm_batched(h, false, false, D, u.nq, u.nk, 1.f, pa + 3 * c, dt, a.v.stride_s, pa + 4 * c, dt, u.nk, 0.f,
                 pa + 5 * c, dt, a.o.stride_s, c);
  }
}

template <typename T>
void backward_t(const kernels::AttentionBwdArgs& g, const int32_t* host_cu, cudaStream_t stream) {
  const auto& a = g.fwd;
  int dev = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  cublasHandle_t h = handle(dev);
  cb(cublasSetStream(h, stream), "cublasSetStream");
  const auto& sh = a.shape;
  const int64_t D = sh.head_dim, group = sh.group(), H = sh.heads;
  const int64_t mq = sh.max_seqlen_q, mk = sh.max_seqlen_k;
  const std::vector<Unit> us = units(sh, host_cu, double(mq) * mk * 10 + 2.0 * mk * D * 4);
  const int64_t hc = max_unit_pairs(us);
  const int64_t rows = (sh.varlen() ? 1 : sh.batch) * sh.heads * sh.seqlen_q;
  DevBuf S(size_t(hc * mq * mk) * 4, stream), dP(size_t(hc * mq * mk) * 4, stream), P(size_t(hc * mq * mk) * 2, stream);
  // per-pair f32 dK and dV ([pair][nk][D]); each GQA group is summed into the operand afterwards
  DevBuf dsum(size_t(rows) * 4, stream), dK32(size_t(hc * mk * D) * 4, stream), dV32(size_t(hc * mk * D) * 4, stream);
  DevBuf ptrs(size_t(kMaxPtrArrays * hc) * sizeof(void*), stream);
  BwdParams bp;
  bp.g = g;
  bp.dsum = static_cast<float*>(dsum.p);
  bp.num_rows = rows;
  launch_bwd_preprocess(bp, stream);
  const cudaDataType_t dt = cuda_type(a.dtype);
  const size_t es = sizeof(T);
  for (const Unit& u : us) {
    const int64_t c = u.count;
    if (u.nq == 0 && u.nk == 0) continue;
    if (u.nk == 0) {  // no keys: dq = 0 (dk, dv have no rows)
      for (int64_t i = 0; i < c; ++i) {
        const int64_t p = u.p0 + i;
        T* dqp = static_cast<T*>(g.dq.data) + (u.bslot + p / H) * g.dq.stride_b + u.q0 * g.dq.stride_s + (p % H) * g.dq.stride_h;
        check_cuda(cudaMemset2DAsync(dqp, g.dq.stride_s * sizeof(T), 0, D * sizeof(T), u.nq, stream), "cudaMemset2DAsync");
      }
      continue;
    }
    const int64_t nn = u.nq * u.nk;
    const int64_t kv_count = c / group;
    if (u.nq > 0) {
      const int64_t lse_base = u.p0 * sh.seqlen_q + u.q0;
      PtrTable t{};
      t.a[0] = operand(a.k, es, u, u.k0, group);    // K
      t.a[1] = operand(a.q, es, u, u.q0, 1);        // Q
      t.a[2] = per_pair(S.p, nn, 4);                // S, then P f
      t.a[3] = operand(a.v, es, u, u.k0, group);    // V
      t.a[4] = operand(g.dout, es, u, u.q0, 1);     // dO
      t.a[5] = per_pair(dP.p, nn, 4);               // dP
      t.a[6] = per_pair(P.p, nn, 2);                // P, then dS
      t.a[7] = per_pair(dV32.p, u.nk * D, 4);       // dV of the pair (f32)
      t.a[8] = operand(g.dq, es, u, u.q0, 1);       // dQ
      t.a[9] = per_pair(dK32.p, u.nk * D, 4);       // dK of the pair (f32)
      t.n = 10;
      const void** pa = fill_pointers(ptrs, t, u, H, stream);
      const void** K = pa;
      const void** Q = pa + c;
      const void** Sa = pa + 2 * c;
      const void** V = pa + 3 * c;
      const void** dO = pa + 4 * c;
      const void** dPa = pa + 5 * c;
      const void** Pa = pa + 6 * c;
      const void** dV = pa + 7 * c;
      const void** dQ = pa + 8 * c;
      const void** dK = pa + 9 * c;
      // S^T (nk x nq) = K Q^T; dP^T (nk x nq) = V dO^T
      gemm_batched(h, true, false, u.nk, u.nq, D, 1.f, K, dt, a.k.stride_s, Q, dt, a.q.stride_s, 0.f, Sa, CUDA_R_32F,
                   u.nk, c);
      gemm_batched(h, true, false, u.nk, u.nq, D, 1.f, V, dt, a.v.stride_s, dO, dt, g.dout.stride_s, 0.f, dPa,
                   CUDA_R_32F, u.nk, c);
      softmax_bwd_p_kernel<T><<<unsigned(c * u.nq), 256, 0, stream>>>(static_cast<float*>(S.p), static_cast<T*>(P.p),
                                                                      a.lse, lse_base, sh.seqlen_q, u.nq, u.nk, a.scale,
                                                                      a.softcap, a.mask);
      check_cuda(cudaGetLastError(), "softmax backward launch");
      // dV^T (D x nk) = dO^T (D x nq) P (nq x nk), per pair
      gemm_batched(h, false, true, D, u.nk, u.nq, 1.f, dO, dt, g.dout.stride_s, Pa, dt, u.nk, 0.f, dV, CUDA_R_32F, D, c);
      softmax_bwd_ds_kernel<T><<<unsigned(c * u.nq), 256, 0, stream>>>(static_cast<const float*>(S.p),
                                                                       static_cast<const float*>(dP.p),
                                                                       static_cast<T*>(P.p), bp.dsum, lse_base,
                                                                       sh.seqlen_q, u.nq, u.nk);
      check_cuda(cudaGetLastError(), "softmax backward launch");
      // dQ^T (D x nq) = scale K^T (D x nk) dS^T (nk x nq); dK^T (D x nk) = scale Q^T (D x nq) dS (nq x nk), per pair
      gemm_batched(h, false, false, D, u.nq, u.nk, a.scale, K, dt, a.k.stride_s, Pa, dt, u.nk, 0.f, dQ, dt,
                   g.dq.stride_s, c);
      gemm_batched(h, false, true, D, u.nk, u.nq, a.scale, Q, dt, a.q.stride_s, Pa, dt, u.nk, 0.f, dK, CUDA_R_32F, D,
                   c);
    } else {  // keys but no queries: dk = dv = 0
      check_cuda(cudaMemsetAsync(dK32.p, 0, size_t(c * u.nk * D) * 4, stream), "cudaMemsetAsync");
      check_cuda(cudaMemsetAsync(dV32.p, 0, size_t(c * u.nk * D) * 4, stream), "cudaMemsetAsync");
    }
    const unsigned blocks = grid_for<T>(kv_count * u.nk * D);
    T* dk = static_cast<T*>(g.dk.data) + u.bslot * g.dk.stride_b + u.k0 * g.dk.stride_s;
    T* dv = static_cast<T*>(g.dv.data) + u.bslot * g.dv.stride_b + u.k0 * g.dv.stride_s;
    group_sum_kernel<T><<<blocks, 256, 0, stream>>>(static_cast<const float*>(dK32.p), dk, g.dk.stride_b, g.dk.stride_s,
                                                    g.dk.stride_h, u.p0, kv_count, group, H, u.nk, D);
    group_sum_kernel<T><<<blocks, 256, 0, stream>>>(static_cast<const float*>(dV32.p), dv, g.dv.stride_b, g.dv.stride_s,
                                                    g.dv.stride_h, u.p0, kv_count, group, H, u.nk, D);
    check_cuda(cudaGetLastError(), "dK/dV group-sum launch");
  }
}

}  // namespace

double standard_workspace_bytes(const kernels::AttentionShape& s, bool backward) {
  // Per pair of the largest work unit: S, P (and dP) materialized; backward adds the pair's f32 dK and dV.
  const double per_pair = double(s.max_seqlen_q) * s.max_seqlen_k * (backward ? 10 : 6) +
                          (backward ? 2.0 * s.max_seqlen_k * s.head_dim * 4 : 0.0);
  const int64_t group = s.group();
  int64_t cap = std::max<int64_t>(1, int64_t(kChunkBytes / std::max(1.0, per_pair * group))) * group;
  cap = std::min<int64_t>(cap, std::max<int64_t>(1, (s.varlen() ? 1 : s.batch) * s.heads));
  double b = double(cap) * (per_pair + (backward ? kMaxPtrArrays : 6) * sizeof(void*));
  if (backward) b += double((s.varlen() ? 1 : s.batch) * s.heads * s.seqlen_q) * 4;
  return b;
}

double standard_forward(const kernels::AttentionFwdArgs& a, const int32_t* host_cu, cudaStream_t stream) {
  if (a.dtype == DType::bf16) forward_t<__nv_bfloat16>(a, host_cu, stream);
  else forward_t<__half>(a, host_cu, stream);
  return standard_workspace_bytes(a.shape, false);
}

double standard_backward(const kernels::AttentionBwdArgs& g, const int32_t* host_cu, cudaStream_t stream) {
  if (g.fwd.dtype == DType::bf16) backward_t<__nv_bfloat16>(g, host_cu, stream);
  else backward_t<__half>(g, host_cu, stream);
  return standard_workspace_bytes(g.fwd.shape, true);
}

}  // namespace flashkit::cuda
