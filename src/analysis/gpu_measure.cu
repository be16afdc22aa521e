// GPU ceilings for `flashkit roofline --measure`: device-to-device copy bandwidth and the cuBLAS bf16
// tensor-core GEMM rate (bf16 in, f32 accumulate). Returns available=false, with the reason, when no
// device is present or any CUDA call fails; never throws.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "flashkit/attention.hpp"
#include "flashkit/error.hpp"
#include "roofline.hpp"

namespace flashkit::analysis {

namespace {
struct Fail {
  std::string what;
};
void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Fail{std::string(what) + ": " + cudaGetErrorString(e)};
}
void ckb(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Fail{std::string(what) + ": cuBLAS status " + std::to_string(int(s))};
}
__global__ void fill_bf16(__nv_bfloat16* p, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) p[i] = __float2bfloat16(float((i * 2654435761u) % 1000) / 1000.f - 0.5f);
}
}  // namespace

GpuMeasurement measure_gpu(double seconds) {
  GpuMeasurement m;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    m.error = "no CUDA device";
    return m;
  }
  void *a = nullptr, *b = nullptr;
  __nv_bfloat16 *A = nullptr, *B = nullptr;
  float* C = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  cublasHandle_t h = nullptr;
  try {
    cudaDeviceProp prop{};
    ck(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    m.name = prop.name;
    m.sms = prop.multiProcessorCount;
    m.mem_gb = double(prop.totalGlobalMem) / 1e9;
    ck(cudaEventCreate(&e0), "cudaEventCreate");
    ck(cudaEventCreate(&e1), "cudaEventCreate");
    // Copy bandwidth: 1 GiB (or a quarter of memory) device-to-device; counted as read + write.
    const size_t bytes = std::min<size_t>(size_t(1) << 30, prop.totalGlobalMem / 8);
    ck(cudaMalloc(&a, bytes), "cudaMalloc");
    ck(cudaMalloc(&b, bytes), "cudaMalloc");
    ck(cudaMemset(a, 1, bytes), "cudaMemset");
    ck(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy");
    float best = 1e30f;
    for (int r = 0; r < 10; ++r) {
      ck(cudaEventRecord(e0), "record");
      ck(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync");
      ck(cudaEventRecord(e1), "record");
      ck(cudaEventSynchronize(e1), "sync");
      float ms = 0;
      ck(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
      best = std::min(best, ms);
    }
    m.copy_gbs = 2.0 * double(bytes) / (double(best) * 1e-3) / 1e9;
    cudaFree(a), cudaFree(b);
    a = b = nullptr;
    // bf16 GEMM, M = N = K = 8192.
    const int n = 8192;
    const size_t ne = size_t(n) * n;
    ck(cudaMalloc(&A, ne * 2), "cudaMalloc");
    ck(cudaMalloc(&B, ne * 2), "cudaMalloc");
    ck(cudaMalloc(&C, ne * 4), "cudaMalloc");
    fill_bf16<<<unsigned((ne + 255) / 256), 256>>>(A, ne);
    fill_bf16<<<unsigned((ne + 255) / 256), 256>>>(B, ne);
    ck(cudaGetLastError(), "fill kernel");
    ckb(cublasCreate(&h), "cublasCreate");
    const float one = 1, zero = 0;
    auto gemm = [&] {
      ckb(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, CUDA_R_16BF, n, B, CUDA_R_16BF, n, &zero, C,
                       CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
    };
    gemm();
    ck(cudaDeviceSynchronize(), "sync");
    const int reps = std::max(3, std::min(50, int(seconds * 20)));
    best = 1e30f;
    for (int r = 0; r < reps; ++r) {
      ck(cudaEventRecord(e0), "record");
      gemm();
      ck(cudaEventRecord(e1), "record");
      ck(cudaEventSynchronize(e1), "sync");
      float ms = 0;
      ck(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
      best = std::min(best, ms);
    }
    m.bf16_gemm_tflops = 2.0 * double(n) * n * n / (double(best) * 1e-3) / 1e12;
    m.available = true;
  } catch (const Fail& f) {
    m.error = f.what;
  }
  if (h) cublasDestroy(h);
  if (a) cudaFree(a);
  if (b) cudaFree(b);
  if (A) cudaFree(A);
  if (B) cudaFree(B);
  if (C) cudaFree(C);
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  return m;
}

std::string gpu_name() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return "";
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "";
  return prop.name;
}

namespace {
__global__ void fill_f32(float* p, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) p[i] = float((i * 2654435761u) % 1000) / 1000.f - 0.5f;
}
}  // namespace

double cublas_matmul_seconds(int64_t M, int64_t N, int64_t K, bool bf16, int reps, std::string* error) {
  if (gpu_name().empty()) {
    if (error) *error = "no CUDA device";
    return -1;
  }
  void *A = nullptr, *B = nullptr;
  float* C = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  cublasHandle_t h = nullptr;
  double best = -1;
  try {
    const size_t es = bf16 ? 2 : 4;
    const size_t na = size_t(M) * size_t(K), nb = size_t(K) * size_t(N), nc = size_t(M) * size_t(N);
    ck(cudaMalloc(&A, na * es), "cudaMalloc");
    ck(cudaMalloc(&B, nb * es), "cudaMalloc");
    ck(cudaMalloc(&C, nc * 4), "cudaMalloc");
    if (bf16) {
      fill_bf16<<<unsigned((na + 255) / 256), 256>>>(static_cast<__nv_bfloat16*>(A), na);
      fill_bf16<<<unsigned((nb + 255) / 256), 256>>>(static_cast<__nv_bfloat16*>(B), nb);
    } else {
      fill_f32<<<unsigned((na + 255) / 256), 256>>>(static_cast<float*>(A), na);
      fill_f32<<<unsigned((nb + 255) / 256), 256>>>(static_cast<float*>(B), nb);
    }
    ck(cudaGetLastError(), "fill kernel");
    ckb(cublasCreate(&h), "cublasCreate");
    ck(cudaEventCreate(&e0), "cudaEventCreate");
    ck(cudaEventCreate(&e1), "cudaEventCreate");
    const float one = 1, zero = 0;
    // Row-major C[M,N] = A[M,K] B[K,N] is column-major C^T[N,M] = B^T[N,K] A^T[K,M].
    auto run = [&] {
      if (N == 1 && !bf16) {
        ckb(cublasSgemv(h, CUBLAS_OP_T, int(K), int(M), &one, static_cast<float*>(A), int(K), static_cast<float*>(B), 1,
                        &zero, C, 1),
            "cublasSgemv");
        return;
      }
      const cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
      ckb(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, int(N), int(M), int(K), &one, B, t, int(N), A, t, int(K), &zero, C,
                       CUDA_R_32F, int(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
    };
    run();
    ck(cudaDeviceSynchronize(), "sync");
    for (int r = 0; r < std::max(1, reps); ++r) {
      ck(cudaEventRecord(e0), "record");
      run();
      ck(cudaEventRecord(e1), "record");
      ck(cudaEventSynchronize(e1), "sync");
      float ms = 0;
      ck(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
      if (best < 0 || ms * 1e-3 < best) best = double(ms) * 1e-3;
    }
  } catch (const Fail& f) {
    if (error) *error = f.what;
    best = -1;
  }
  if (h) cublasDestroy(h);
  if (A) cudaFree(A);
  if (B) cudaFree(B);
  if (C) cudaFree(C);
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  return best;
}

GpuAttentionTiming cuda_attention_time(int64_t B, int64_t H, int64_t Hk, int64_t N, int64_t d, bool causal,
                                       bool backward, const std::string& impl_name_in, int reps) {
  GpuAttentionTiming t;
  if (gpu_name().empty()) {
    t.error = "no CUDA device";
    return t;
  }
  AttentionImpl impl;
  if (!parse_impl(impl_name_in, &impl)) {
    t.error = "unknown attention impl '" + impl_name_in + "'";
    return t;
  }
  std::vector<void*> bufs;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  auto alloc = [&](size_t bytes) {
    void* p = nullptr;
    ck(cudaMalloc(&p, bytes), "cudaMalloc");
    bufs.push_back(p);
    return p;
  };
  try {
    const size_t nq = size_t(B * N * H * d), nk = size_t(B * N * Hk * d);
    auto* q = static_cast<__nv_bfloat16*>(alloc(nq * 2));
    auto* k = static_cast<__nv_bfloat16*>(alloc(nk * 2));
    auto* v = static_cast<__nv_bfloat16*>(alloc(nk * 2));
    auto* o = static_cast<__nv_bfloat16*>(alloc(nq * 2));
    auto* lse = static_cast<float*>(alloc(size_t(B * H * N) * 4));
    for (auto* p : {q, k, v}) fill_bf16<<<unsigned(((p == q ? nq : nk) + 255) / 256), 256>>>(p, p == q ? nq : nk);
    ck(cudaGetLastError(), "fill kernel");
    auto view = [&](void* p, DType dt, std::initializer_list<int64_t> shape) {
      return TensorView::contiguous(p, dt, shape, Device::cuda);
    };
    const TensorView Q = view(q, DType::bf16, {B, N, H, d}), K = view(k, DType::bf16, {B, N, Hk, d}),
                     V = view(v, DType::bf16, {B, N, Hk, d}), O = view(o, DType::bf16, {B, N, H, d}),
                     L = view(lse, DType::f32, {B, H, N});
    AttentionOptions opts;
    opts.causal = causal;
    opts.impl = impl;
    opts.check_finite = false;
    ck(cudaEventCreate(&e0), "cudaEventCreate");
    ck(cudaEventCreate(&e1), "cudaEventCreate");
    auto time_it = [&](auto&& f) {
      double best = -1;
      for (int r = 0; r < std::max(1, reps); ++r) {
        ck(cudaDeviceSynchronize(), "sync");
        ck(cudaEventRecord(e0), "record");
        f();
        ck(cudaEventRecord(e1), "record");
        ck(cudaEventSynchronize(e1), "sync");
        float ms = 0;
        ck(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
        if (best < 0 || ms * 1e-3 < best) best = double(ms) * 1e-3;
      }
      return best;
    };
    OpCost c;
    attention_forward(Q, K, V, O, L, opts, &c);  // warm-up, cost
    t.fwd_flops = c.flops, t.fwd_bytes = c.bytes_read + c.bytes_written, t.kernel = c.kernel, t.model = c.model;
    t.fwd_s = time_it([&] { attention_forward(Q, K, V, O, L, opts, nullptr); });
    if (backward) {
      auto* dout = static_cast<__nv_bfloat16*>(alloc(nq * 2));
      fill_bf16<<<unsigned((nq + 255) / 256), 256>>>(dout, nq);
      const TensorView dO = view(dout, DType::bf16, {B, N, H, d}), dQ = view(alloc(nq * 2), DType::bf16, {B, N, H, d}),
                       dK = view(alloc(nk * 2), DType::bf16, {B, N, Hk, d}),
                       dV = view(alloc(nk * 2), DType::bf16, {B, N, Hk, d});
      OpCost cb;
      attention_backward(dO, Q, K, V, O, L, dQ, dK, dV, opts, &cb);
      t.bwd_flops = cb.flops, t.bwd_bytes = cb.bytes_read + cb.bytes_written;
      t.bwd_kernel = cb.kernel, t.bwd_model = cb.model;
      t.bwd_s = time_it([&] { attention_backward(dO, Q, K, V, O, L, dQ, dK, dV, opts, nullptr); });
    }
    t.available = true;
  } catch (const Fail& f) {
    t.error = f.what;
  } catch (const Error& e) {
    t.error = e.what();
  }
  for (void* p : bufs) cudaFree(p);
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  return t;
}

}  // namespace flashkit::analysis
