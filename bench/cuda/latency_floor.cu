// The latency floor of a decode step: what one dependency level costs on this GPU, however little it computes.
// A batch-1 decode step is a chain of levels (a GEMV needs the whole input vector, attention needs the whole q/k/v
// of its head, ...); gemma-3-270m has ~5 per layer and 18 layers. This program times a level four ways, each as
// the engine would run it (many levels captured in one CUDA graph, replayed, median of the replays):
//   empty       an empty kernel per level (launch-to-launch distance of graph kernel nodes)
//   empty_pdl   the same with programmatic dependent launch (trigger at entry, wait before the body)
//   level_pdl   a kernel per level that does the minimum real work of a decode level: wait for the previous kernel,
//               read the 640-float vector it wrote (L2), a block reduction, write this block's slice of the next
//               vector (the GEMV prologue/epilogue skeleton without weights)
//   level_pdl_arrive  the same plus the "last block to arrive" atomic counter the fused GEMVs use for side outputs
//   persistent  one cooperative kernel running every level, a grid barrier (cooperative_groups) between levels
// Build and run (tools/gpu/engine.sh floor does this):
//   nvcc -O3 -std=c++17 -arch=sm_90a -o latency_floor bench/cuda/latency_floor.cu && ./latency_floor out.json
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "check_cuda.cuh"

namespace cg = cooperative_groups;

constexpr int kThreads = 256;
constexpr int kVec = 640;  // gemma-3-270m's hidden size

__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

__device__ float block_sum(float v) {
  __shared__ float red[kThreads / 32];
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float s = 0.f;
  for (int i = 0; i < kThreads / 32; ++i) s += red[i];
  __syncthreads();
  return s;
}

// One level's work: the whole input vector x (written by the previous level), an RMS statistic over it, and this
// block's slice of the output vector y.
__device__ void level_body(const float* x, float* y, int block, int nblocks) {
  float ss = 0.f, v[3] = {0.f, 0.f, 0.f};
#pragma unroll
  for (int u = 0; u < 3; ++u) {
    const int i = threadIdx.x + u * kThreads;
    v[u] = i < kVec ? __ldcg(x + i) : 0.f;
    ss += v[u] * v[u];
  }
  const float r = rsqrtf(block_sum(ss) / kVec + 1e-6f);
  const int per = (kVec + nblocks - 1) / nblocks, i0 = block * per;
  for (int i = i0 + int(threadIdx.x); i < min(kVec, i0 + per); i += kThreads) y[i] = __ldcg(x + i) * r + 1.0f;
}

__global__ void empty_kernel() {}
__global__ void empty_pdl_kernel() {
  pdl_trigger();
  pdl_wait();
}
__global__ void level_pdl_kernel(const float* x, float* y) {
  pdl_trigger();
  pdl_wait();
  level_body(x, y, blockIdx.x, gridDim.x);
}
__global__ void level_pdl_arrive_kernel(const float* x, float* y, unsigned* counter, float* side) {
  pdl_trigger();
  pdl_wait();
  level_body(x, y, blockIdx.x, gridDim.x);
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(counter, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (last) {  // the side output, then the counter back to 0 for the next launch
    if (threadIdx.x == 0) *counter = 0;
    for (int i = threadIdx.x; i < kVec; i += kThreads) side[i] = __ldcg(x + i);
  }
}
__global__ void persistent_kernel(float* a, float* b, int levels) {
  cg::grid_group grid = cg::this_grid();
  for (int l = 0; l < levels; ++l) {
    level_body(l & 1 ? b : a, l & 1 ? a : b, blockIdx.x, gridDim.x);
    grid.sync();
  }
}

template <class Launch>
double time_graph_us(cudaStream_t st, int launches, int reps, Launch launch) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < launches; ++i) launch(i);
  CHECK(cudaStreamEndCapture(st, &g));
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  for (int w = 0; w < 3; ++w) CHECK(cudaGraphLaunch(ge, st));
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaEventRecord(e0, st));
    CHECK(cudaGraphLaunch(ge, st));
    CHECK(cudaEventRecord(e1, st));
    CHECK(cudaEventSynchronize(e1));
    float t = 0.f;
    CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  return 1000.0 * ms[ms.size() / 2] / launches;
}

template <class... Args>
void launch_pdl(cudaStream_t st, int blocks, void (*kern)(Args...), Args... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(kThreads);
  cfg.stream = st;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&cfg, kern, args...));
}

int main(int argc, char** argv) {
  const char* out = argc > 1 ? argv[1] : nullptr;
  int dev = 0, sms = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, dev));
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  float *a, *b, *side;
  unsigned* counter;
  CHECK(cudaMalloc(&a, kVec * sizeof(float)));
  CHECK(cudaMalloc(&b, kVec * sizeof(float)));
  CHECK(cudaMalloc(&side, kVec * sizeof(float)));
  CHECK(cudaMalloc(&counter, sizeof(unsigned)));
  CHECK(cudaMemset(counter, 0, sizeof(unsigned)));
  std::vector<float> init(kVec, 0.5f);
  CHECK(cudaMemcpy(a, init.data(), kVec * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, init.data(), kVec * sizeof(float), cudaMemcpyHostToDevice));

  const int levels = 90, reps = 50;  // ~ a gemma-3-270m step: 18 layers x 5 levels
  std::string json = "{\"device\": \"" + std::string(prop.name) + "\", \"sms\": " + std::to_string(sms) +
                     ", \"levels_per_graph\": " + std::to_string(levels) + ", \"us_per_level\": {";
  bool first = true;
  auto report = [&](const std::string& name, int blocks, double us) {
    std::printf("[floor] %-18s blocks %4d  %.3f us per level\n", name.c_str(), blocks, us);
    json += std::string(first ? "" : ", ") + "\"" + name + "@" + std::to_string(blocks) + "\": " + std::to_string(us);
    first = false;
  };
  for (int blocks : {sms, 2 * sms, 4 * sms}) {
    report("empty", blocks, time_graph_us(st, levels, reps, [&](int) {
             empty_kernel<<<blocks, kThreads, 0, st>>>();
             CHECK(cudaGetLastError());
           }));
    report("empty_pdl", blocks,
           time_graph_us(st, levels, reps, [&](int) { launch_pdl(st, blocks, empty_pdl_kernel); }));
    report("level_pdl", blocks, time_graph_us(st, levels, reps, [&](int i) {
             launch_pdl(st, blocks, level_pdl_kernel, (const float*)(i & 1 ? b : a), i & 1 ? a : b);
           }));
    report("level_pdl_arrive", blocks, time_graph_us(st, levels, reps, [&](int i) {
             launch_pdl(st, blocks, level_pdl_arrive_kernel, (const float*)(i & 1 ? b : a), i & 1 ? a : b, counter,
                        side);
           }));
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_kernel, kThreads, 0));
    if (blocks <= per_sm * sms) {
      int lv = levels;
      void* args[] = {&a, &b, &lv};
      // Not captured (a cooperative launch in a graph needs a newer toolkit path); one launch runs all levels, so
      // its launch cost is spread over them.
      cudaEvent_t e0, e1;
      CHECK(cudaEventCreate(&e0));
      CHECK(cudaEventCreate(&e1));
      std::vector<float> ms;
      for (int r = 0; r < reps + 3; ++r) {
        CHECK(cudaEventRecord(e0, st));
        CHECK(cudaLaunchCooperativeKernel((void*)persistent_kernel, dim3(blocks), dim3(kThreads), args, 0, st));
        CHECK(cudaEventRecord(e1, st));
        CHECK(cudaEventSynchronize(e1));
        float t = 0.f;
        CHECK(cudaEventElapsedTime(&t, e0, e1));
        if (r >= 3) ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      CHECK(cudaEventDestroy(e0));
      CHECK(cudaEventDestroy(e1));
      report("persistent", blocks, 1000.0 * ms[ms.size() / 2] / levels);
    }
  }
  json += "}}\n";
  if (out) {
    FILE* f = std::fopen(out, "w");
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", out);
      return 1;
    }
    std::fputs(json.c_str(), f);
    std::fclose(f);
  }
  CHECK(cudaDeviceSynchronize());
  return 0;
}
