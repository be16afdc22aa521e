// Exp2 throughput on one GPU, per SM and clock: the SFU's ex2 (f32, f16x2, bf16x2) against a degree-3 polynomial
// on the FMA pipe. The question it answers for the softmax kernels (docs/worklog/attention-fp8-cuda.md): is a packed
// ex2 one MUFU operation for two values on this GPU, and what does an exp2 cost when emulated with FFMAs?
// Every thread runs 8 independent chains (x = 2^-x keeps x in [-1, -0.5]); 8 blocks of 256 threads per SM.
//   nvcc -O3 -std=c++17 -arch=sm_90a -o sfu_rates bench/cuda/sfu_rates.cu && ./sfu_rates
// then `cuobjdump -sass sfu_rates | grep -c MUFU` per kernel says how many MUFU instructions each loop issues.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                         \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

constexpr int kChains = 8, kIters = 4096;

__device__ __forceinline__ float ex2_f32(float x) {
  float y;
  asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ uint32_t ex2_f16x2(uint32_t x) {
  uint32_t y;
  asm volatile("ex2.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}
__device__ __forceinline__ uint32_t ex2_bf16x2(uint32_t x) {
  uint32_t y;
  asm volatile("ex2.approx.ftz.bf16x2 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}
// 2^x for x <= 0 on the FMA pipe: round to the nearest integer j by the 1.5 * 2^23 add, 2^(x - j) by a cubic,
// j added to the exponent bits.
__device__ __forceinline__ float ex2_poly3(float x) {
  x = fmaxf(x, -125.f);
  const float t = x + 12582912.f;
  const float f = x - (t - 12582912.f);
  float p = fmaf(fmaf(fmaf(0.0555041f, f, 0.2402265f), f, 0.6931472f), f, 1.0f);
  return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));
}

template <int KIND>
__global__ void __launch_bounds__(256) rate_kernel(float* out, long long* cycles) {
  float xf[kChains];
  uint32_t xh[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) {
    xf[c] = -0.5f - 0.01f * float(c) - 1e-5f * float(threadIdx.x);
    xh[c] = 0xB800B800u + c;  // f16x2 (-0.5, -0.5); bf16x2 reads it as ~(-0.0004, -0.0004)
  }
  __syncthreads();
  const long long t0 = clock64();
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if (KIND == 0) xf[c] = -ex2_f32(xf[c]);
      if (KIND == 1) xh[c] = ex2_f16x2(xh[c]) ^ 0x80008000u;
      if (KIND == 2) xh[c] = ex2_bf16x2(xh[c]) ^ 0x80008000u;
      if (KIND == 3) xf[c] = -ex2_poly3(xf[c]);
    }
  }
  const long long t1 = clock64();
  float acc = 0.f;
#pragma unroll
  for (int c = 0; c < kChains; ++c) acc += xf[c] + __uint_as_float(xh[c]);
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

template <int KIND>
void measure(const char* name, int values_per_op, int sms) {
  const int blocks = sms * 8, threads = 256;
  float* out;
  long long* cyc;
  CK(cudaMalloc(&out, sizeof(float) * blocks * threads));
  CK(cudaMalloc(&cyc, sizeof(long long) * blocks));
  rate_kernel<KIND><<<blocks, threads>>>(out, cyc);  // warm-up
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a));
  rate_kernel<KIND><<<blocks, threads>>>(out, cyc);
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  std::vector<long long> c(blocks);
  CK(cudaMemcpy(c.data(), cyc, sizeof(long long) * blocks, cudaMemcpyDeviceToHost));
  long long mx = 0;
  for (long long v : c) mx = v > mx ? v : mx;
  const double values = double(blocks) * threads * kIters * kChains * values_per_op;
  // 8 co-resident blocks per SM: per-SM values / the longest block's cycles.
  std::printf("sfu_rates %-10s %7.2f exp2 per SM per clock  %8.1f G exp2/s  (%.3f ms, max block %lld cycles)\n", name,
              values / sms / double(mx), values / (ms * 1e6), ms, mx);
  CK(cudaFree(out));
  CK(cudaFree(cyc));
}

int main() {
  cudaDeviceProp p{};
  CK(cudaGetDeviceProperties(&p, 0));
  std::printf("sfu_rates on %s, %d SMs\n", p.name, p.multiProcessorCount);
  measure<0>("ex2.f32", 1, p.multiProcessorCount);
  measure<1>("ex2.f16x2", 2, p.multiProcessorCount);
  measure<2>("ex2.bf16x2", 2, p.multiProcessorCount);
  measure<3>("poly3.fma", 1, p.multiProcessorCount);
  return 0;
}
