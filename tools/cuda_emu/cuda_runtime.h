// CPU emulation of the CUDA subset the SSM and engine kernels use (tools/cuda_emu/run_ssm.sh, run_mamba_step.sh;
// never part of the library): one block (or one thread-block cluster) at a time, one std::thread per CUDA thread,
// __syncthreads as a std::barrier, shuffles through an exchange synchronized per warp (valid where all 32 threads of
// the warp reach the shuffle, as on the GPU with a full mask; warps may run different loop counts), clusters with
// their barrier and distributed shared memory, __shared__ as static storage (so a kernel that runs as clusters keeps
// its shared arrays in dynamic shared memory), dynamic shared memory and device allocations filled with 0xff (NaN).
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

inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
// One running block: its barrier, its warps' barriers and shuffle exchange, its dynamic shared memory. A thread
// reaches its block's through thread_local pointers; the blocks of one cluster run at once (emu_launch_clusters).
struct EmuBlock {
  std::unique_ptr<std::barrier<>> bar;
  std::vector<std::unique_ptr<std::barrier<>>> warp_bars;
  float xchg[1024];
  alignas(16) unsigned char smem[200000];
};
inline thread_local EmuBlock* emu_block = nullptr;
inline thread_local unsigned char* emu_smem_ptr = nullptr;  // emu_block->smem (convert.py: extern __shared__)
inline thread_local std::barrier<>* emu_cluster_bar = nullptr;
inline thread_local EmuBlock* const* emu_cluster_blocks = nullptr;
inline thread_local unsigned emu_cluster_size = 1;
inline void __syncthreads() { emu_block->bar->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int off) {
  std::barrier<>& wb = *emu_block->warp_bars[threadIdx.x / 32];
  emu_block->xchg[threadIdx.x] = v;
  wb.arrive_and_wait();
  const int lane = threadIdx.x % 32;
  const float r = emu_block->xchg[threadIdx.x - lane + (lane ^ off)];
  wb.arrive_and_wait();
  return r;
}
inline float __expf(float x) { return std::exp(x); }
// x / y as documented for the device: 0 when 2^126 < |y| (the reciprocal flushes to zero)
inline float __fdividef(float x, float y) { return std::fabs(y) > 0x1p126f ? x * 0.f : x / y; }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; std::memcpy(&x, &i, 4); return x; }

// Runs the grid as clusters of `cluster` blocks along x (1: blocks one after another), the blocks of a cluster at
// once; shared memory poisoned (0xff) per block; grid.z outermost.
inline void emu_launch_clusters(dim3 grid, dim3 block, unsigned cluster, const std::function<void()>& body) {
  gridDim = grid; blockDim = block;
  for (unsigned bz = 0; bz < grid.z; ++bz)
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx0 = 0; bx0 < grid.x; bx0 += cluster) {
      std::vector<std::unique_ptr<EmuBlock>> blocks;
      std::vector<EmuBlock*> ptrs;
      for (unsigned r = 0; r < cluster; ++r) {
        blocks.push_back(std::make_unique<EmuBlock>());
        EmuBlock& b = *blocks.back();
        std::memset(b.smem, 0xff, sizeof b.smem);  // NaN-ish garbage in shared memory
        b.bar = std::make_unique<std::barrier<>>(std::ptrdiff_t(block.x));
        for (unsigned w0 = 0; w0 < block.x; w0 += 32)
          b.warp_bars.push_back(std::make_unique<std::barrier<>>(std::ptrdiff_t(std::min(32u, block.x - w0))));
        ptrs.push_back(&b);
      }
      std::barrier<> cluster_bar(std::ptrdiff_t(cluster * block.x));
      std::vector<std::thread> ts;
      for (unsigned r = 0; r < cluster; ++r)
        for (unsigned t = 0; t < block.x; ++t)
          ts.emplace_back([&, r, t] {
            threadIdx = dim3(t), blockIdx = dim3(bx0 + r, by, bz);
            emu_block = ptrs[r], emu_smem_ptr = ptrs[r]->smem;
            emu_cluster_bar = &cluster_bar, emu_cluster_blocks = ptrs.data(), emu_cluster_size = cluster;
            body();
          });
      for (auto& th : ts) th.join();
    }
}
inline void emu_launch(dim3 grid, dim3 block, size_t, const std::function<void()>& body) {
  emu_launch_clusters(grid, block, 1, body);
}
// Thread-block clusters (sm_90) as the kernels use them.
namespace cooperative_groups {
struct cluster_group {
  void sync() const { emu_cluster_bar->arrive_and_wait(); }
  unsigned block_rank() const { return blockIdx.x % emu_cluster_size; }
  template <class T>
  T* map_shared_rank(T* p, unsigned rank) const {
    const std::ptrdiff_t off = reinterpret_cast<unsigned char*>(p) - emu_smem_ptr;
    return reinterpret_cast<T*>(emu_cluster_blocks[rank]->smem + off);
  }
};
inline cluster_group this_cluster() { return {}; }
}  // namespace cooperative_groups
