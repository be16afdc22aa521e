// The read ceiling of a batch-1 decode call's bytes (issue 20 Required 5): how fast can any kernel read a 32k-key
// KV cache of 8 KV heads x d128 (bf16, 134 MB of K and V) on this GPU, per layout and grid? The decode kernel
// (src/kernels/cuda/decode/flash_decode.cuh) reads it at 3.57 TB/s (38 us a call, 83% of the 4.24 TB/s copy
// ceiling); this separates what the access pattern and the grid allow from what the kernel's own structure costs.
//   layout  bshd: [keys, heads, d] (a head's 16-key block is 16 rows of 256 B at a 2 KB stride; the engine's and
//           the benchmark's cache), bhsd: [heads, keys, d] (a head's keys contiguous)
//   grid    splits x heads CTAs of 256 threads, each streaming its head's key range of K and V; `depth` 16-byte
//           loads of each of K and V per thread in flight (independent, summed into a register at the end)
// Each configuration: 10 launches back to back in a CUDA graph, median of 30 replays; the buffers exceed L2.
//   nvcc -O3 -std=c++17 -arch=sm_90a -o kv_read_ceiling bench/cuda/kv_read_ceiling.cu && ./kv_read_ceiling
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check_cuda.cuh"

constexpr int kKeys = 32768, kHeads = 8, kD = 128, kChunks = kD / 8;  // 16-byte chunks a row
constexpr int kThreads = 256, kRowsPerPass = kThreads / kChunks;      // 16 rows of one head per pass

template <bool BSHD, int DEPTH>
__global__ void __launch_bounds__(kThreads) read_kv(const uint4* __restrict__ k, const uint4* __restrict__ v,
                                                    int splits, unsigned* sink) {
  const int split = blockIdx.x, h = blockIdx.y;
  const int j0 = int(int64_t(kKeys) * split / splits), j1 = int(int64_t(kKeys) * (split + 1) / splits);
  const int c = threadIdx.x % kChunks, r = threadIdx.x / kChunks;
  auto at = [&](int j) -> int64_t {
    return BSHD ? (int64_t(j) * kHeads + h) * kChunks + c : (int64_t(h) * kKeys + j) * kChunks + c;
  };
  unsigned acc = 0;
  for (int j = j0 + r; j < j1; j += kRowsPerPass * DEPTH) {
    uint4 a[DEPTH], b[DEPTH];
#pragma unroll
    for (int i = 0; i < DEPTH; ++i) {
      const int jj = j + i * kRowsPerPass;
      a[i] = jj < j1 ? __ldcs(k + at(jj)) : make_uint4(0, 0, 0, 0);
      b[i] = jj < j1 ? __ldcs(v + at(jj)) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < DEPTH; ++i) acc ^= a[i].x ^ a[i].w ^ b[i].y ^ b[i].z;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads; (practically) never taken
}

template <bool BSHD, int DEPTH>
float time_us(const uint4* k, const uint4* v, int splits, unsigned* sink) {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const dim3 grid(splits, kHeads);
  for (int i = 0; i < 3; ++i) read_kv<BSHD, DEPTH><<<grid, kThreads, 0, s>>>(k, v, splits, sink);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  constexpr int kCalls = 10;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kCalls; ++i) read_kv<BSHD, DEPTH><<<grid, kThreads, 0, s>>>(k, v, splits, sink);
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  std::vector<float> t;
  for (int rep = 0; rep < 30; ++rep) {
    CHECK(cudaEventRecord(e0, s));
    CHECK(cudaGraphLaunch(ge, s));
    CHECK(cudaEventRecord(e1, s));
    CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms * 1000.f / kCalls);
  }
  std::sort(t.begin(), t.end());
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaStreamDestroy(s));
  return t[t.size() / 2];
}

int main() {
  const size_t n = size_t(kKeys) * kHeads * kChunks;  // uint4 per tensor
  uint4 *k, *v;
  unsigned* sink;
  CHECK(cudaMalloc(&k, n * 16));
  CHECK(cudaMalloc(&v, n * 16));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMemset(k, 1, n * 16));
  CHECK(cudaMemset(v, 2, n * 16));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const double bytes = 2.0 * double(n) * 16;
  auto report = [&](const char* layout, int depth, int splits, float us) {
    std::printf("kv_read_ceiling layout=%s depth=%d splits=%d ctas=%d sms=%d: %.2f us, %.3f TB/s (%.1f%% of 4.24)\n",
                layout, depth, splits, splits * kHeads, sms, us, bytes / us * 1e-6, 100.0 * bytes / us * 1e-6 / 4.24);
  };
  for (int splits : {16, 17, 33, 66, 132}) {
    report("bshd", 4, splits, time_us<true, 4>(k, v, splits, sink));
    report("bshd", 8, splits, time_us<true, 8>(k, v, splits, sink));
    report("bhsd", 4, splits, time_us<false, 4>(k, v, splits, sink));
    report("bhsd", 8, splits, time_us<false, 8>(k, v, splits, sink));
  }
  CHECK(cudaGetLastError());
  return 0;
}
