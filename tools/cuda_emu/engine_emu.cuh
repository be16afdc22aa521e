// Stands in for src/engine/cuda/common.cuh when an engine kernel runs on the CPU emulation (cuda_runtime.h here;
// tools/cuda_emu/run_mamba_step.sh): the helpers the kernel uses, with the launch through emu_launch. Never part of
// the library.
#pragma once
#define cudaStream_t emu_stream_t  // kernels.hpp declares the real type; the emulation's is a void*
#include "cuda_runtime.h"
#undef cudaStream_t
#include "engine/cuda/kernels.hpp"
#include "flashkit/dtype.hpp"
#include "flashkit/error.hpp"

#include <condition_variable>
#include <map>
#include <mutex>

struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
using std::max;
using std::min;
inline uint4 __ldcs(const uint4* p) { return *p; }
inline void __threadfence() {}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  const unsigned old = __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
  return old;
}
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr, int) { *v = 232448; return cudaSuccess; }
template <class F>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F, int, size_t) { *n = 2; return cudaSuccess; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint4 __ldg(const uint4* p) { return *p; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
#define __noinline__
inline void __trap() { std::abort(); }
inline void __syncwarp() { emu_block->warp_bars[threadIdx.x / 32]->arrive_and_wait(); }
struct cudaFuncAttributes { int binaryVersion = 0, ptxVersion = 0; };
template <class F>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F) { a->binaryVersion = a->ptxVersion = 90; return cudaSuccess; }

namespace flashkit::engine::cuda {
using flashkit::fail;
using flashkit::Status;
inline float bf2f(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }
inline uint16_t f2bf(float f) { return flashkit::f32_to_bf16(f); }
inline void pdl_trigger() {}
inline void pdl_wait() {}
inline void unpack8(const uint4& u, float* f) {
  f[0] = __uint_as_float(u.x << 16), f[1] = __uint_as_float(u.x & 0xffff0000u);
  f[2] = __uint_as_float(u.y << 16), f[3] = __uint_as_float(u.y & 0xffff0000u);
  f[4] = __uint_as_float(u.z << 16), f[5] = __uint_as_float(u.z & 0xffff0000u);
  f[6] = __uint_as_float(u.w << 16), f[7] = __uint_as_float(u.w & 0xffff0000u);
}
inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
inline float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) red[w] = v;
  __syncthreads();
  float t = lane < nw ? red[lane] : 0.0f;
  return warp_sum(t);
}
inline float act_fn(Act a, float g) {
  if (a == Act::silu) return g / (1.0f + std::exp(-g));
  const float u = 0.7978845608028654f * (g + 0.044715f * g * g * g);
  return 0.5f * g * (1.0f + std::tanh(u));
}
inline void prefetch_l2(const void*, uint32_t) {}
// The bulk GEMV's mbarriers and 1-D bulk copies (common.cuh, sm_90). A copy is queued on its barrier and lands only
// when a thread waits on that barrier, so a stage read before its wait reads the poisoned (0xff) shared memory.
// A wait for parity P returns once the number of completed phases has the other parity (the hardware's rule: the
// phase of parity P, the current one or the one before it, has completed).
struct EmuMbar {
  uint32_t expected = 0, arrived = 0, completed = 0;
  int64_t tx = 0;
  std::vector<std::function<void()>> copies;
};
inline std::mutex emu_mbar_mu;
inline std::condition_variable emu_mbar_cv;
inline std::map<const void*, EmuMbar> emu_mbars;
inline void emu_mbar_check(EmuMbar& b) {
  if (b.arrived == b.expected && b.tx == 0) b.completed++, b.arrived = 0, emu_mbar_cv.notify_all();
}
inline void mbar_init(uint64_t* bar, uint32_t count) {
  std::lock_guard<std::mutex> l(emu_mbar_mu);
  emu_mbars[bar] = EmuMbar{count};
}
inline void mbar_fence_init() {}
inline void mbar_arrive(uint64_t* bar) {
  std::lock_guard<std::mutex> l(emu_mbar_mu);
  EmuMbar& b = emu_mbars.at(bar);
  b.arrived++;
  emu_mbar_check(b);
}
inline void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  std::lock_guard<std::mutex> l(emu_mbar_mu);
  EmuMbar& b = emu_mbars.at(bar);
  b.tx += bytes, b.arrived++;
  emu_mbar_check(b);
}
inline void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar, bool) {
  if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | bytes) & 15u) std::abort();
  std::lock_guard<std::mutex> l(emu_mbar_mu);
  EmuMbar& b = emu_mbars.at(bar);
  b.copies.push_back([dst, src, bytes, &b] {
    std::memcpy(dst, src, bytes);
    b.tx -= bytes;
  });
  emu_mbar_cv.notify_all();  // a waiter lands it
}
inline void mbar_wait(uint64_t* bar, uint32_t parity) {
  std::unique_lock<std::mutex> l(emu_mbar_mu);
  EmuMbar& b = emu_mbars.at(bar);
  for (;;) {
    if (!b.copies.empty()) {
      for (auto& c : b.copies) c();
      b.copies.clear();
      emu_mbar_check(b);
    }
    if ((b.completed & 1u) != parity) return;
    emu_mbar_cv.wait(l);
  }
}
// The launch settings the GEMV reads (device.cpp on the GPU): a small machine, so grids are a few blocks.
inline int sm_count() { return 3; }
inline bool gemv_prefetch_enabled() { return false; }
inline bool gemv_streaming_loads() { return true; }
inline void check_cuda(cudaError_t, const char*) {}
inline const char* emu_last_launch = "";  // the name of the last kernel launched (harnesses check the plan's choice)
template <class K, class... A>
void launch(const char* name, K kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t, A... args) {
  emu_last_launch = name;
  if (smem > sizeof(EmuBlock::smem)) std::abort();  // more dynamic shared memory than the emulation has
  emu_launch(grid, block, smem, [&] { kernel(args...); });
}
template <class K, class... A>
void launch_clustered(const char*, unsigned cluster, K kernel, dim3 grid, dim3 block, size_t, cudaStream_t, A... args) {
  emu_launch_clusters(grid, block, cluster, [&] { kernel(args...); });
}
}  // namespace flashkit::engine::cuda
