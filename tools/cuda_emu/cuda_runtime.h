// CPU emulation of the CUDA subset the SSM kernels use (tools/cuda_emu/run_ssm.sh; never part of the library): one
// block at a time, one std::thread per CUDA thread, __syncthreads as a std::barrier, shuffles through an exchange
// synchronized per warp (valid where all 32 threads of the warp reach the shuffle, as on the GPU with a full mask;
// warps may run different loop counts), __shared__ as static storage (blocks run
// one after another), dynamic shared memory and device allocations filled with 0xff (NaN) first.
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>
#include <cstdint>

enum cudaError_t { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };
typedef void* cudaStream_t;
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t) { return "emu error"; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaMallocAsync(void** p, size_t n, cudaStream_t) {
  *p = std::malloc(n ? n : 1);
  std::memset(*p, 0xff, n);
  return cudaSuccess;
}
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t) { std::free(p); return cudaSuccess; }
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) { std::memset(p, v, n); return cudaSuccess; }
template <class F> cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) { return cudaSuccess; }

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

inline thread_local dim3 threadIdx;
inline dim3 blockIdx, blockDim, gridDim;
inline std::barrier<>* emu_bar = nullptr;
inline std::vector<std::unique_ptr<std::barrier<>>> emu_warp_bars;  // one per warp of the running block
inline float emu_xchg[1024];
alignas(16) inline unsigned char emu_dyn_smem[200000];
inline void __syncthreads() { emu_bar->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int off) {
  std::barrier<>& wb = *emu_warp_bars[threadIdx.x / 32];
  emu_xchg[threadIdx.x] = v;
  wb.arrive_and_wait();
  const int lane = threadIdx.x % 32;
  const float r = emu_xchg[threadIdx.x - lane + (lane ^ off)];
  wb.arrive_and_wait();
  return r;
}
inline float __expf(float x) { return std::exp(x); }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; std::memcpy(&x, &i, 4); return x; }

inline void emu_launch(dim3 grid, dim3 block, size_t, const std::function<void()>& body) {
  gridDim = grid; blockDim = block;
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      blockIdx = dim3(bx, by);
      std::memset(emu_dyn_smem, 0xff, sizeof emu_dyn_smem);  // NaN-ish garbage in shared memory
      std::barrier<> bar(block.x);
      emu_bar = &bar;
      emu_warp_bars.clear();
      for (unsigned w0 = 0; w0 < block.x; w0 += 32)
        emu_warp_bars.push_back(std::make_unique<std::barrier<>>(std::ptrdiff_t(std::min(32u, block.x - w0))));
      std::vector<std::thread> ts;
      for (unsigned t = 0; t < block.x; ++t) ts.emplace_back([&, t] { threadIdx = dim3(t); body(); });
      for (auto& th : ts) th.join();
    }
}
