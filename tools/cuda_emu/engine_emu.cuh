// Stands in for src/engine/cuda/common.cuh when an engine kernel runs on the CPU emulation (cuda_runtime.h here;
// tools/cuda_emu/run_mamba_step.sh): the helpers the kernel uses, with the launch through emu_launch. Never part of
// the library.
#pragma once
#define cudaStream_t emu_stream_t  // kernels.hpp declares the real type; the emulation's is a void*
#include "cuda_runtime.h"
#undef cudaStream_t
#include "engine/cuda/kernels.hpp"
#include "flashkit/error.hpp"

struct alignas(16) uint4 { unsigned x, y, z, w; };
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint4 __ldg(const uint4* p) { return *p; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
#define __noinline__
inline void __trap() { std::abort(); }

namespace flashkit::engine::cuda {
using flashkit::fail;
using flashkit::Status;
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
template <class K, class... A>
void launch(const char*, K kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t, A... args) {
  emu_launch(grid, block, smem, [&] { kernel(args...); });
}
// Clusters are not emulated: a clustered kernel reaches __trap (the emulated launcher never chooses them).
template <class K, class... A>
void launch_clustered(const char* name, unsigned, K kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                      A... args) {
  launch(name, kernel, grid, block, smem, s, args...);
}
}  // namespace flashkit::engine::cuda
