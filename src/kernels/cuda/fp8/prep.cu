// The fp8 forward's helper kernels: the V^T prep (V's keys made contiguous and permuted for the P-from-registers
// product, fp8_layout.hpp) and the device side of quantize_e4m3 (amax, then the rounding of e4m3.hpp: the same
// code as the CPU, so both backends give the same bytes).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda_check.hpp"
#include "flashkit/e4m3.hpp"
#include "kernels/cuda/fp8/fp8_api.hpp"
#include "kernels/cuda/fp8/fp8_layout.hpp"

namespace flashkit::cuda {

namespace {

constexpr int kPrepKeys = 64, kPrepDims = 64, kPrepThreads = 256;

// One block: 64 keys x 64 head-dim columns of one (batch, kv head), transposed through shared memory. Reads are
// 4-byte words along head_dim; writes are 4-byte words along the (permuted) keys.
__global__ void __launch_bounds__(kPrepThreads) fp8_vt_prep_kernel(const kernels::AttnOperand v, int64_t seqlen_k,
                                                                   int64_t kv_heads, int64_t head_dim, int64_t keys,
                                                                   uint8_t* vt) {
  __shared__ uint8_t tile[kPrepKeys][kPrepDims + 4];
  const int64_t key0 = int64_t(blockIdx.x) * kPrepKeys, d0 = int64_t(blockIdx.y) * kPrepDims;
  const int64_t bh = blockIdx.z, b = bh / kv_heads, h = bh % kv_heads;
  const uint8_t* vbase = static_cast<const uint8_t*>(v.data) + b * v.stride_b + h * v.stride_h;
  for (int idx = threadIdx.x; idx < kPrepKeys * kPrepDims / 4; idx += kPrepThreads) {
    const int kr = idx / (kPrepDims / 4), c4 = idx % (kPrepDims / 4);
    const int64_t key = key0 + kr, d = d0 + 4 * c4;
    uint32_t w = 0;
    if (key < seqlen_k && d < head_dim) w = *reinterpret_cast<const uint32_t*>(vbase + key * v.stride_s + d);
    *reinterpret_cast<uint32_t*>(&tile[kr][4 * c4]) = w;
  }
  __syncthreads();
  uint8_t* out = vt + bh * head_dim * keys;
  for (int idx = threadIdx.x; idx < kPrepDims * kPrepKeys / 4; idx += kPrepThreads) {
    const int dr = idx / (kPrepKeys / 4), k4 = idx % (kPrepKeys / 4);
    const int64_t d = d0 + dr, slot = key0 + 4 * k4;
    if (d >= head_dim || slot >= keys) continue;
    uint32_t w = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int src = int(fp8_vt_source_key(4 * k4 + i));  // blocks start on 32-key chunks: offsets are local
      w |= uint32_t(tile[src][dr]) << (8 * i);
    }
    *reinterpret_cast<uint32_t*>(out + d * keys + slot) = w;
  }
}

__device__ __forceinline__ float load_f32(const void* src, DType dt, int64_t i) {
  switch (dt) {
    case DType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(src)[i]);
    case DType::f16: return __half2float(static_cast<const __half*>(src)[i]);
    default: return static_cast<const float*>(src)[i];
  }
}

// |x| as f32 bits orders like the values (non-negative floats); NaN bits sort above +inf, so a NaN wins.
__global__ void fp8_amax_kernel(const void* src, DType dt, int64_t n, float* amax) {
  float m = 0.f;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float x = fabsf(load_f32(src, dt, i));
    m = (isnan(x) || x > m) ? x : m;
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float y = __shfl_xor_sync(0xffffffffu, m, o);
    m = (isnan(y) || y > m) ? y : m;
  }
  if ((threadIdx.x & 31) == 0) atomicMax(reinterpret_cast<unsigned int*>(amax), __float_as_uint(m));
}

__global__ void fp8_quantize_kernel(const void* src, DType dt, int64_t n, float descale, uint8_t* dst) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = f32_to_e4m3(load_f32(src, dt, i) / descale);
}

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + 255) / 256;
  return unsigned(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

}  // namespace

void launch_fp8_vt_prep(const kernels::AttnOperand& v, const kernels::AttentionShape& sh, int key_tile, uint8_t* vt,
                        cudaStream_t stream) {
  // keys: a multiple of the tile (128, 192), so of 64 today; a tile of 32 x odd keys would end in a partial block,
  // which stops at keys.
  const int64_t keys = fp8_vt_keys(sh.seqlen_k, key_tile);
  const dim3 grid(unsigned((keys + kPrepKeys - 1) / kPrepKeys), unsigned((sh.head_dim + kPrepDims - 1) / kPrepDims),
                  unsigned(sh.batch * sh.kv_heads));
  fp8_vt_prep_kernel<<<grid, kPrepThreads, 0, stream>>>(v, sh.seqlen_k, sh.kv_heads, sh.head_dim, keys, vt);
  check_cuda(cudaGetLastError(), "fp8 V^T prep launch");
}

void launch_fp8_amax(const void* src, DType dt, int64_t n, float* amax_dev, cudaStream_t stream) {
  if (n == 0) return;
  fp8_amax_kernel<<<grid_for(n), 256, 0, stream>>>(src, dt, n, amax_dev);
  check_cuda(cudaGetLastError(), "quantize_e4m3 amax launch");
}

void launch_fp8_quantize(const void* src, DType dt, int64_t n, float descale, uint8_t* dst, cudaStream_t stream) {
  if (n == 0) return;
  fp8_quantize_kernel<<<grid_for(n), 256, 0, stream>>>(src, dt, n, descale, dst);
  check_cuda(cudaGetLastError(), "quantize_e4m3 launch");
}

}  // namespace flashkit::cuda
