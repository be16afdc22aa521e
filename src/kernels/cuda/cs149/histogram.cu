// Per-channel histogram of uint8 data [length, channels] -> int32 [channels, num_bins].
// Each block owns a group of up to 64 channels and a slice of rows; it counts into shared-memory bins private to
// the block (64 channels x 256 bins x 4 B = 64 KiB), reading the rows with 16-byte loads when the row length
// allows, then adds its bins to the output with one global atomic per non-zero bin. The output is zeroed first.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/cuda_check.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/cuda/cs149/launch.hpp"

namespace flashkit::cs149::cuda {
namespace {

constexpr int kGroup = 64;     // channels per block
constexpr int kThreads = 512;

// kVec: channels % 16 == 0 and data 16-byte aligned, so each row of the group is read as uint4 words.
template <bool kVec>
__global__ void __launch_bounds__(kThreads) histogram_kernel(const uint8_t* __restrict__ data, int64_t length,
                                                              int channels, int num_bins, int32_t* __restrict__ out,
                                                              int64_t rows_per_block) {
  extern __shared__ uint32_t bins[];  // [kGroup][256]
  const int c0 = blockIdx.y * kGroup;
  const int group = min(kGroup, channels - c0);
  for (int i = threadIdx.x; i < group * 256; i += blockDim.x) bins[i] = 0;
  __syncthreads();
  const int64_t r0 = int64_t(blockIdx.x) * rows_per_block;
  const int64_t r1 = min(length, r0 + rows_per_block);
  if (kVec) {
    const int words = group / 16;  // uint4 words per row of the group
    const int64_t items = (r1 - r0) * words;
    for (int64_t it = threadIdx.x; it < items; it += blockDim.x) {
      const int64_t r = r0 + it / words;
      const int w = int(it % words);
      const uint4 q = __ldcs(reinterpret_cast<const uint4*>(data + r * channels + c0) + w);
      const uint32_t parts[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int p = 0; p < 4; ++p)
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const uint32_t val = (parts[p] >> (8 * b)) & 0xffu;
          atomicAdd(&bins[(w * 16 + p * 4 + b) * 256 + val], 1u);
        }
    }
  } else {
    const int64_t items = (r1 - r0) * group;
    for (int64_t it = threadIdx.x; it < items; it += blockDim.x) {
      const int64_t r = r0 + it / group;
      const int c = int(it % group);
      atomicAdd(&bins[c * 256 + data[r * channels + c0 + c]], 1u);
    }
  }
  __syncthreads();
  const int counted = min(num_bins, 256);
  for (int i = threadIdx.x; i < group * counted; i += blockDim.x) {
    const int c = i / counted, b = i % counted;
    const uint32_t n = bins[c * 256 + b];
    if (n != 0) atomicAdd(out + int64_t(c0 + c) * num_bins + b, int32_t(n));
  }
}

}  // namespace

void histogram(const HistogramArgs& a) {
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream());
  check_cuda(cudaMemsetAsync(a.out, 0, sizeof(int32_t) * size_t(a.channels * a.num_bins), stream),
             "cs149::histogram: cudaMemsetAsync(out)");
  if (a.length == 0) return;
  int device = 0, sms = 0;
  check_cuda(cudaGetDevice(&device), "cs149::histogram: cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cs149::histogram: SM count");
  const int groups = int((a.channels + kGroup - 1) / kGroup);
  // About three resident blocks per SM over all channel groups; each slice at least 64 rows.
  const int64_t slices = std::max<int64_t>(1, std::min<int64_t>((3 * sms + groups - 1) / groups, (a.length + 63) / 64));
  const int64_t rows_per_block = (a.length + slices - 1) / slices;
  const dim3 grid(unsigned((a.length + rows_per_block - 1) / rows_per_block), unsigned(groups));
  const size_t smem = sizeof(uint32_t) * kGroup * 256;
  const bool vec = a.channels % 16 == 0 && reinterpret_cast<uintptr_t>(a.data) % 16 == 0;
  auto kernel = vec ? histogram_kernel<true> : histogram_kernel<false>;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
             "cs149::histogram: shared memory size");
  kernel<<<grid, kThreads, smem, stream>>>(a.data, a.length, int(a.channels), int(a.num_bins), a.out,
                                           rows_per_block);
  check_cuda(cudaGetLastError(), "cs149::histogram: launch");
}

}  // namespace flashkit::cs149::cuda
