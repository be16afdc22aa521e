// The IO-unaware CUDA baseline: S = QK^T (cuBLAS, f32 out) and P = softmax(S) (a row kernel) are written
// to device memory, then O = PV (cuBLAS). The backward recomputes S and P the same way and runs dV = P^T dO,
// dP = dO V^T, dS = P (dP - rowsum(dO O)), dQ = dS K, dK = dS^T Q as cuBLAS GEMMs with two row kernels.
// Heads are processed in chunks so the materialized matrices stay under a few GB.
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
#include "kernels/cuda/nonfinite_row.cuh"

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

// C(col-major) = alpha * op(A) op(B) + beta * C, batched with element strides.
void gemm(cublasHandle_t h, bool ta, bool tb, int m, int n, int k, float alpha, const void* A, cudaDataType_t at,
          int64_t lda, int64_t sa, const void* B, cudaDataType_t bt, int64_t ldb, int64_t sb, float beta, void* C,
          cudaDataType_t ct, int64_t ldc, int64_t sc, int batch) {
  cb(cublasGemmStridedBatchedEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, A,
                                at, int(lda), sa, B, bt, int(ldb), sb, &beta, C, ct, int(ldc), sc, batch,
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
     "cublasGemmStridedBatchedEx");
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
    const float x = s[j] * scale;
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
    float x = S[row * nk + j] * scale, f = 1.f;
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

struct Seq {
  int64_t bslot, q0, nq, k0, nk;
};
std::vector<Seq> sequences(const kernels::AttentionShape& s, const int32_t* host_cu) {
  std::vector<Seq> out;
  for (int64_t b = 0; b < s.batch; ++b) {
    if (s.varlen()) {
      const int32_t* cq = host_cu;
      const int32_t* ckk = host_cu + s.batch + 1;
      out.push_back({0, cq[b], cq[b + 1] - cq[b], ckk[b], ckk[b + 1] - ckk[b]});
    } else {
      out.push_back({b, 0, s.seqlen_q, 0, s.seqlen_k});
    }
  }
  return out;
}

// Heads per chunk: a multiple of the GQA group (whole KV heads), under the byte budget.
int64_t heads_per_chunk(const kernels::AttentionShape& s, double bytes_per_head) {
  const int64_t group = s.group();
  int64_t kv = std::max<int64_t>(1, int64_t(kChunkBytes / std::max(1.0, bytes_per_head * group)));
  kv = std::min<int64_t>(kv, s.kv_heads);
  return kv * group;
}

template <typename T>
unsigned grid_for(int64_t n) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, 132 * 16)));
}

// The contract's answer for non-finite input (attention.hpp) on the cuBLAS path: a post-pass, one warp per row, that
// recomputes in f64 (nonfinite_row.cuh) each row that sees keys and whose lse or o is not finite (NaN/+inf scores
// make the softmax sum NaN, all -inf scores make it 0, non-finite v and masked keys' NaN v times P = 0 reach o).
// It reads o once more: this is the baseline path, not a fast one. Grid (row blocks of 8 rows, heads, sequences).
template <typename T>
__global__ void __launch_bounds__(256) fix_nonfinite_rows_kernel(const kernels::AttentionFwdArgs a) {
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const kernels::SeqRange sr = kernels::seq_range(a.shape, blockIdx.z);
  const int64_t i = int64_t(blockIdx.x) * 8 + warp, h = blockIdx.y;
  if (i >= sr.nq || a.mask.hi(i, sr.nq, sr.nk) <= a.mask.lo(i, sr.nq, sr.nk)) return;
  T* o = static_cast<T*>(a.o.data) + sr.bslot * a.o.stride_b + (sr.q0 + i) * a.o.stride_s + h * a.o.stride_h;
  bool ok = isfinite(a.lse[a.lse_index(sr, h, i)]);
  for (int c = lane; c < int(a.shape.head_dim); c += 32) ok = ok && isfinite(nonfinite_to_f64(o[c]));
  if (__all_sync(0xffffffffu, ok)) return;
  const float lse = recompute_row_f64<T, 256>(f64_row<T>(a, sr, h, i),
                                              [=](int c, double x) { o[c] = nonfinite_from_f64<T>(x); });
  if (lane == 0) a.lse[a.lse_index(sr, h, i)] = lse;
}

template <typename T>
void forward_t(const kernels::AttentionFwdArgs& a, const int32_t* host_cu, cudaStream_t stream) {
  int dev = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  cublasHandle_t h = handle(dev);
  cb(cublasSetStream(h, stream), "cublasSetStream");
  const auto& sh = a.shape;
  const int64_t D = sh.head_dim, group = sh.group();
  const int64_t mq = sh.max_seqlen_q, mk = sh.max_seqlen_k;
  const int64_t hc = heads_per_chunk(sh, double(mq) * mk * 6);
  DevBuf S(size_t(hc * mq * mk) * 4, stream), P(size_t(hc * mq * mk) * 2, stream);
  const cudaDataType_t dt = cuda_type(a.dtype);
  for (const Seq& q : sequences(sh, host_cu)) {
    if (q.nq == 0) continue;
    for (int64_t h0 = 0; h0 < sh.heads; h0 += hc) {
      const int64_t nh = std::min(hc, sh.heads - h0);
      const T* qp = static_cast<const T*>(a.q.data) + q.bslot * a.q.stride_b + q.q0 * a.q.stride_s + h0 * a.q.stride_h;
      T* op = static_cast<T*>(a.o.data) + q.bslot * a.o.stride_b + q.q0 * a.o.stride_s + h0 * a.o.stride_h;
      const int64_t lse_base = (q.bslot * sh.heads + h0) * sh.seqlen_q + q.q0;
      if (q.nk == 0) {  // no keys: o = 0, lse = -inf, via the softmax kernel on an empty row
        softmax_fwd_kernel<T><<<unsigned(nh * q.nq), 256, 0, stream>>>(static_cast<float*>(S.p), static_cast<T*>(P.p), a.lse,
                                                                       lse_base, sh.seqlen_q, q.nq, 0, a.scale,
                                                                       a.softcap, a.mask);
        check_cuda(cudaGetLastError(), "softmax launch");
        for (int64_t hh = 0; hh < nh; ++hh) check_cuda(cudaMemset2DAsync(op + hh * a.o.stride_h, a.o.stride_s * sizeof(T), 0, D * sizeof(T), q.nq, stream), "cudaMemset2DAsync");
        continue;
      }
      // Process each KV head's group of query heads with one batched GEMM (K stride 0 inside the group).
      for (int64_t g0 = 0; g0 < nh; g0 += group) {
        const int64_t kvh = (h0 + g0) / group;
        const T* kp = static_cast<const T*>(a.k.data) + q.bslot * a.k.stride_b + q.k0 * a.k.stride_s + kvh * a.k.stride_h;
        float* Sp = static_cast<float*>(S.p) + g0 * q.nq * q.nk;
        // S^T (nk x nq, col-major) = K Q^T
        gemm(h, true, false, int(q.nk), int(q.nq), int(D), 1.f, kp, dt, a.k.stride_s, 0, qp + g0 * a.q.stride_h, dt,
             a.q.stride_s, a.q.stride_h, 0.f, Sp, CUDA_R_32F, q.nk, q.nq * q.nk, int(group));
      }
      softmax_fwd_kernel<T><<<unsigned(nh * q.nq), 256, 0, stream>>>(static_cast<float*>(S.p), static_cast<T*>(P.p), a.lse,
                                                                     lse_base, sh.seqlen_q, q.nq, q.nk, a.scale,
                                                                     a.softcap, a.mask);
      check_cuda(cudaGetLastError(), "softmax launch");
      for (int64_t g0 = 0; g0 < nh; g0 += group) {
        const int64_t kvh = (h0 + g0) / group;
        const T* vp = static_cast<const T*>(a.v.data) + q.bslot * a.v.stride_b + q.k0 * a.v.stride_s + kvh * a.v.stride_h;
        const T* Pp = static_cast<const T*>(P.p) + g0 * q.nq * q.nk;
        // O^T (D x nq) = V^T (D x nk) P^T (nk x nq)
        gemm(h, false, false, int(D), int(q.nq), int(q.nk), 1.f, vp, dt, a.v.stride_s, 0, Pp, dt, q.nk, q.nq * q.nk,
             0.f, op + g0 * a.o.stride_h, dt, a.o.stride_s, a.o.stride_h, int(group));
      }
    }
  }
  if (sh.max_seqlen_q > 0 && sh.heads > 0 && sh.batch > 0) {
    const dim3 grid(unsigned((sh.max_seqlen_q + 7) / 8), unsigned(sh.heads), unsigned(sh.batch));
    fix_nonfinite_rows_kernel<T><<<grid, 256, 0, stream>>>(a);
    check_cuda(cudaGetLastError(), "attention forward non-finite rows launch");
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
  const int64_t D = sh.head_dim, group = sh.group();
  const int64_t mq = sh.max_seqlen_q, mk = sh.max_seqlen_k;
  const int64_t hc = heads_per_chunk(sh, double(mq) * mk * 10);
  const int64_t rows = (sh.varlen() ? 1 : sh.batch) * sh.heads * sh.seqlen_q;
  DevBuf S(size_t(hc * mq * mk) * 4, stream), dP(size_t(hc * mq * mk) * 4, stream), P(size_t(hc * mq * mk) * 2, stream);
  DevBuf dsum(size_t(rows) * 4, stream), dK32(size_t(hc / group * mk * D) * 4, stream), dV32(size_t(hc / group * mk * D) * 4, stream);
  BwdParams bp;
  bp.g = g;
  bp.dsum = static_cast<float*>(dsum.p);
  bp.num_rows = rows;
  launch_bwd_preprocess(bp, stream);
  const cudaDataType_t dt = cuda_type(a.dtype);
  for (const Seq& q : sequences(sh, host_cu)) {
    for (int64_t h0 = 0; h0 < sh.heads; h0 += hc) {
      const int64_t nh = std::min(hc, sh.heads - h0);
      const int64_t kv0 = h0 / group, nkv = nh / group;
      T* dqp = static_cast<T*>(g.dq.data) + q.bslot * g.dq.stride_b + q.q0 * g.dq.stride_s + h0 * g.dq.stride_h;
      if (q.nk > 0) check_cuda(cudaMemsetAsync(dK32.p, 0, size_t(nkv * q.nk * D) * 4, stream), "cudaMemsetAsync");
      if (q.nk > 0) check_cuda(cudaMemsetAsync(dV32.p, 0, size_t(nkv * q.nk * D) * 4, stream), "cudaMemsetAsync");
      if (q.nk == 0 || q.nq == 0) {
        if (q.nq > 0)
          for (int64_t hh = 0; hh < nh; ++hh)
            check_cuda(cudaMemset2DAsync(dqp + hh * g.dq.stride_h, g.dq.stride_s * sizeof(T), 0, D * sizeof(T), q.nq, stream), "cudaMemset2DAsync");
      } else {
        const int64_t lse_base = (q.bslot * sh.heads + h0) * sh.seqlen_q + q.q0;
        const int64_t nn = q.nq * q.nk;
        for (int64_t g0 = 0; g0 < nh; g0 += group) {
          const int64_t kvh = (h0 + g0) / group;
          const T* kp = static_cast<const T*>(a.k.data) + q.bslot * a.k.stride_b + q.k0 * a.k.stride_s + kvh * a.k.stride_h;
          const T* vp = static_cast<const T*>(a.v.data) + q.bslot * a.v.stride_b + q.k0 * a.v.stride_s + kvh * a.v.stride_h;
          const T* qp = static_cast<const T*>(a.q.data) + q.bslot * a.q.stride_b + q.q0 * a.q.stride_s + (h0 + g0) * a.q.stride_h;
          const T* dop = static_cast<const T*>(g.dout.data) + q.bslot * g.dout.stride_b + q.q0 * g.dout.stride_s + (h0 + g0) * g.dout.stride_h;
          gemm(h, true, false, int(q.nk), int(q.nq), int(D), 1.f, kp, dt, a.k.stride_s, 0, qp, dt, a.q.stride_s,
               a.q.stride_h, 0.f, static_cast<float*>(S.p) + g0 * nn, CUDA_R_32F, q.nk, nn, int(group));
          // dP^T (nk x nq) = V dO^T
          gemm(h, true, false, int(q.nk), int(q.nq), int(D), 1.f, vp, dt, a.v.stride_s, 0, dop, dt, g.dout.stride_s,
               g.dout.stride_h, 0.f, static_cast<float*>(dP.p) + g0 * nn, CUDA_R_32F, q.nk, nn, int(group));
        }
        softmax_bwd_p_kernel<T><<<unsigned(nh * q.nq), 256, 0, stream>>>(static_cast<float*>(S.p), static_cast<T*>(P.p), a.lse,
                                                                         lse_base, sh.seqlen_q, q.nq, q.nk, a.scale,
                                                                         a.softcap, a.mask);
        check_cuda(cudaGetLastError(), "softmax backward launch");
        for (int64_t g0 = 0; g0 < nh; g0 += group) {
          const int64_t kvl = g0 / group;
          for (int64_t hh = 0; hh < group; ++hh) {  // dV^T (D x nk) += dO^T (D x nq) P (nq x nk), summed over the group
            const T* dop = static_cast<const T*>(g.dout.data) + q.bslot * g.dout.stride_b + q.q0 * g.dout.stride_s + (h0 + g0 + hh) * g.dout.stride_h;
            gemm(h, false, true, int(D), int(q.nk), int(q.nq), 1.f, dop, dt, g.dout.stride_s, 0,
                 static_cast<const T*>(P.p) + (g0 + hh) * nn, dt, q.nk, 0, 1.f,
                 static_cast<float*>(dV32.p) + kvl * q.nk * D, CUDA_R_32F, D, 0, 1);
          }
        }
        softmax_bwd_ds_kernel<T><<<unsigned(nh * q.nq), 256, 0, stream>>>(static_cast<const float*>(S.p), static_cast<const float*>(dP.p),
                                                                          static_cast<T*>(P.p), bp.dsum, lse_base,
                                                                          sh.seqlen_q, q.nq, q.nk);
        check_cuda(cudaGetLastError(), "softmax backward launch");
        for (int64_t g0 = 0; g0 < nh; g0 += group) {
          const int64_t kvh = (h0 + g0) / group, kvl = g0 / group;
          const T* kp = static_cast<const T*>(a.k.data) + q.bslot * a.k.stride_b + q.k0 * a.k.stride_s + kvh * a.k.stride_h;
          // dQ^T (D x nq) = scale K^T (D x nk) dS^T (nk x nq)
          gemm(h, false, false, int(D), int(q.nq), int(q.nk), a.scale, kp, dt, a.k.stride_s, 0,
               static_cast<const T*>(P.p) + g0 * nn, dt, q.nk, nn, 0.f, dqp + g0 * g.dq.stride_h, dt, g.dq.stride_s,
               g.dq.stride_h, int(group));
          for (int64_t hh = 0; hh < group; ++hh) {  // dK^T (D x nk) += scale Q^T (D x nq) dS (nq x nk)
            const T* qp = static_cast<const T*>(a.q.data) + q.bslot * a.q.stride_b + q.q0 * a.q.stride_s + (h0 + g0 + hh) * a.q.stride_h;
            gemm(h, false, true, int(D), int(q.nk), int(q.nq), a.scale, qp, dt, a.q.stride_s, 0,
                 static_cast<const T*>(P.p) + (g0 + hh) * nn, dt, q.nk, 0, 1.f,
                 static_cast<float*>(dK32.p) + kvl * q.nk * D, CUDA_R_32F, D, 0, 1);
          }
        }
      }
      if (q.nk == 0) continue;
      for (int64_t kv = 0; kv < nkv; ++kv) {
        T* dkp = static_cast<T*>(g.dk.data) + q.bslot * g.dk.stride_b + q.k0 * g.dk.stride_s + (kv0 + kv) * g.dk.stride_h;
        T* dvp = static_cast<T*>(g.dv.data) + q.bslot * g.dv.stride_b + q.k0 * g.dv.stride_s + (kv0 + kv) * g.dv.stride_h;
        f32_to_operand_kernel<T><<<grid_for<T>(q.nk * D), 256, 0, stream>>>(static_cast<float*>(dK32.p) + kv * q.nk * D, dkp,
                                                                           g.dk.stride_s, q.nk, D, D);
        f32_to_operand_kernel<T><<<grid_for<T>(q.nk * D), 256, 0, stream>>>(static_cast<float*>(dV32.p) + kv * q.nk * D, dvp,
                                                                           g.dv.stride_s, q.nk, D, D);
        check_cuda(cudaGetLastError(), "dK/dV conversion launch");
      }
    }
  }
}

}  // namespace

double standard_workspace_bytes(const kernels::AttentionShape& s, bool backward) {
  const double per_head = double(s.max_seqlen_q) * s.max_seqlen_k * (backward ? 10 : 6);
  const double hc = double(heads_per_chunk(s, per_head));
  double b = hc * per_head;
  if (backward)
    b += double((s.varlen() ? 1 : s.batch) * s.heads * s.seqlen_q) * 4 + 2.0 * (hc / s.group()) * s.max_seqlen_k * s.head_dim * 4;
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
