// Hopper (sm_90a) primitives of warp-specialized kernels: mbarriers (transaction-counted shared-memory barriers),
// TMA tensor loads (cp.async.bulk.tensor), register reallocation between warpgroups (setmaxnreg) and named-barrier
// arrival, plus the host-side encoding of a TMA tensor map. As in wgmma.cuh, only the sm_90a build compiles the
// instructions; other targets get stubs that trap (the launchers check sm90_kernel_usable before choosing a Hopper
// kernel).
//
// A TMA box of {64 16-bit elements, R rows} loaded with CU_TENSOR_MAP_SWIZZLE_128B into a 1024-byte aligned
// destination is exactly one panel of wgmma.cuh's layout: the hardware writes 16-byte chunk c of box row r at
// r * 128 + ((c ^ (r & 7)) << 4), the same address bits [4,7) ^ [7,10) swizzle that wgmma reads (pswz<R>).
#pragma once
#include <cuda.h>  // CUtensorMap (the type only: the encoder comes through the runtime, libcuda is not linked)
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/attention_args.hpp"

#include "kernels/cuda/wgmma.cuh"

namespace flashkit::cuda {

#if FK_SM90_ENABLED
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the mbarrier initializations visible to the async proxy (TMA completes transactions on them); a CTA
// barrier must follow before other threads use them.
__device__ __forceinline__ void fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One arrival that also announces `bytes` of TMA transactions: the phase completes when they have landed.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Blocks until the phase of parity `parity` has completed (acquire: the data it guards is then visible).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
// The box of `map` at coordinates (c0 innermost .. c3) into shared memory at `dst`; completes bytes on `bar`.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2,
                                            int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
// The box of `map` at coordinates (c0 innermost .. c3) from shared memory at `src` (1024-byte aligned, the load's
// swizzled layout) to global memory, asynchronously: in the issuing thread's current bulk group. Rows and columns of
// the box outside the tensor are not written. The generic-proxy writes of `src` must be fenced (fence_proxy_async)
// and synchronized with the issuing thread before.
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
// Closes the issuing thread's bulk group of TMA stores.
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Blocks until at most N of the thread's bulk groups are still reading their shared-memory source (the buffer may
// then be written again; the global writes may still be in flight).
template <int N>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// Blocks until at most N of the thread's bulk groups are incomplete (their global writes done).
template <int N>
__device__ __forceinline__ void bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void prefetch_tmap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// Per-thread register budget of the executing warpgroup (every warp of it must execute the same one): .dec returns
// registers to the CTA's pool, .inc blocks until the pool has them. The pool is what the launch allocated
// (registers per thread x threads), so the budgets of all warpgroups must fit in it or .inc never returns.
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
#else
__device__ __forceinline__ void mbar_init(uint32_t, uint32_t) { __trap(); }
__device__ __forceinline__ void fence_mbar_init() { __trap(); }
__device__ __forceinline__ void mbar_arrive(uint32_t) { __trap(); }
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t, uint32_t) { __trap(); }
__device__ __forceinline__ void mbar_wait(uint32_t, uint32_t) { __trap(); }
__device__ __forceinline__ void tma_load_4d(uint32_t, const CUtensorMap*, uint32_t, int, int, int, int) { __trap(); }
__device__ __forceinline__ void tma_store_4d(const CUtensorMap*, uint32_t, int, int, int, int) { __trap(); }
__device__ __forceinline__ void bulk_commit_group() { __trap(); }
template <int N>
__device__ __forceinline__ void bulk_wait_group_read() { __trap(); }
template <int N>
__device__ __forceinline__ void bulk_wait_group() { __trap(); }
__device__ __forceinline__ void prefetch_tmap(const CUtensorMap*) { __trap(); }
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() { __trap(); }
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() { __trap(); }
#endif

// Arrive on named barrier `id` (counted towards `threads`, a multiple of 32) without waiting: the producer half
// of a bar.sync handshake.
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Host: cuTensorMapEncodeTiled from the driver, through the runtime (nullptr when the driver lacks it).
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();  // "not available" is an answer, not a sticky error
      f = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// Host: a 4-D map of 16-bit elements (dim 0 contiguous) with 128B swizzle and zero fill out of bounds. False when
// TMA cannot describe the tensor (base or a stride not 16-byte aligned, a stride >= 2^40, an empty or too large
// dimension) or the driver refuses it; the caller then uses a kernel without TMA.
inline bool encode_tmap_4d(CUtensorMap* map, bool bf16, const void* base, const cuuint64_t (&dims)[4],
                           const cuuint64_t (&stride_bytes)[3], const cuuint32_t (&box)[4]) {
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) return false;
  for (cuuint64_t d : dims)
    if (d == 0 || d > (cuuint64_t(1) << 32)) return false;
  for (cuuint64_t s : stride_bytes)
    if (s == 0 || s % 16 != 0 || s >= (cuuint64_t(1) << 40)) return false;
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (!encode) return false;
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  return encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
                const_cast<void*>(base), dims, stride_bytes, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Host: the TMA map of an attention operand [batch slots, seq, heads, head_dim] as 4-D (head_dim innermost; varlen:
// one slot holding the packed sequences), box 64 columns x `rows` rows: one panel of the kernels' layout (Q/dO, K/V,
// O). Columns past head_dim and rows past the tensor's end read as zero (a store skips them). A size-1 dimension's
// stride is never used; it gets a valid dummy so that views with any stride there still qualify.
template <typename T>
bool encode_rows_tmap(CUtensorMap* map, const kernels::AttnOperand& t, int64_t slots, int64_t seqlen, int64_t heads,
                      int64_t head_dim, int rows) {
  if (seqlen <= 0 || seqlen > (int64_t(1) << 30)) return false;  // non-empty; int32 tile coordinates
  const cuuint64_t dims[4] = {cuuint64_t(head_dim), cuuint64_t(seqlen), cuuint64_t(heads), cuuint64_t(slots)};
  const int64_t es[3] = {t.stride_s, t.stride_h, t.stride_b};
  cuuint64_t strides[3];
  for (int i = 0; i < 3; ++i) {
    if (dims[i + 1] == 1) strides[i] = (cuuint64_t(head_dim) * 2 + 15) / 16 * 16;
    else if (es[i] <= 0) return false;
    else strides[i] = cuuint64_t(es[i]) * 2;
  }
  const cuuint32_t box[4] = {64, cuuint32_t(rows), 1, 1};
  return encode_tmap_4d(map, std::is_same_v<T, __nv_bfloat16>, t.data, dims, strides, box);
}

}  // namespace flashkit::cuda
