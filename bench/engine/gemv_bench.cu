// The one-row decode GEMV's kernels at decode shapes against the weight-streaming ceiling (docs/worklog/
// mamba-decode-cuda.md v4; tools/gpu/gemv_bulk.sh runs it on the GPU machine):
//   FLASHKIT_GEMVBENCH_OUT=out.json build-gpu/bench/engine/flashkit_gemv_bench
// At each (N, K), in one process: the legacy kernel (FLASHKIT_CUDA_GEMV_PLAN=legacy), the bulk kernel (bulk) with the
// default ring and rings of 64, 96 and 192 KB (Tuning::cuda_gemv_ring_kb), and a plain read-only kernel over the
// same bytes (the ceiling a GEMV can reach; the copy ceiling is 4.24 TB/s on an H200). The GEMVs run as the engine
// runs them (input rms_norm fused, f32 y): launches captured in one CUDA graph (PDL on), weights rotated over
// enough copies (>= 256 MB) that every launch reads HBM, timed with CUDA events, median of the replays. Prints one
// line per shape (us and TB/s of each), checks that the bulk kernel's y is bitwise the legacy kernel's, writes JSON.
// Asserts nothing about speed. Exit status: 0 done, 1 no CUDA device or an error, 2 bits differ.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/cuda/kernels.hpp"
#include "flashkit/runtime.hpp"
#include "flashkit/tuning.hpp"

namespace kc = flashkit::engine::cuda;

namespace {

#define CK(x)                                                                                         \
  do {                                                                                                \
    cudaError_t e_ = (x);                                                                             \
    if (e_ != cudaSuccess) throw std::runtime_error(std::string(#x) + ": " + cudaGetErrorString(e_)); \
  } while (0)

// Deterministic pseudo-random bf16 in about [-0.05, 0.05] (f32 in [-1, 1] when !bf16): a hash of the index.
__global__ void fill_kernel(void* dst, size_t n, bool bf16, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed ^ uint32_t(i >> 32) * 40503u;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    const float u = float(h >> 8) * (1.0f / 8388608.0f) - 1.0f;  // [-1, 1)
    if (bf16) {
      float f = 0.05f * u;
      uint32_t b;
      std::memcpy(&b, &f, 4);
      static_cast<uint16_t*>(dst)[i] = uint16_t(b >> 16);
    } else {
      static_cast<float*>(dst)[i] = u;
    }
  }
}

// The ceiling: every 16-byte chunk of [p, p + n16) read once (streaming loads, 4 in flight per thread per
// iteration), folded into a value that is stored only when impossible (so the loads are not dead).
__global__ void __launch_bounds__(512) read_only_kernel(const uint4* __restrict__ p, size_t n16, unsigned* sink) {
  uint32_t acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = __ldcs(p + i + j * stride);
#pragma unroll
    for (int j = 0; j < 4; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  for (; i < n16; i += stride) {
    const uint4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

struct DevMem {
  void* p = nullptr;
  explicit DevMem(size_t bytes) { CK(cudaMalloc(&p, bytes)); }
  ~DevMem() { cudaFree(p); }
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// Median per-launch time (us) of `launches` calls of body(i) captured in one graph, over `reps` replays.
template <class F>
double time_graph(cudaStream_t st, int launches, int reps, F body) {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < launches; ++i) body(i);
  CK(cudaStreamEndCapture(st, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int w = 0; w < 3; ++w) CK(cudaGraphLaunch(ge, st));
  std::vector<double> ts;
  for (int r = 0; r < reps; ++r) {
    CK(cudaEventRecord(a, st));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaEventRecord(b, st));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    ts.push_back(ms * 1e3 / launches);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  CK(cudaGetLastError());
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

struct Shape {
  const char* name;
  int64_t N, K;
};
const Shape kShapes[] = {{"mamba-2.8b in_proj", 10240, 2560},
                         {"mamba-2.8b out_proj", 2560, 5120},
                         {"5120 x 2560", 5120, 2560},
                         {"Llama-8B-like gate/up", 14336, 4096}};

struct Variant {
  const char* name;
  int plan, ring_kb;  // plan -1: the read-only kernel
};
const Variant kVariants[] = {{"legacy", 1, 0},  {"bulk", 3, 0},     {"bulk_r64", 3, 64},
                             {"bulk_r96", 3, 96}, {"bulk_r192", 3, 192}, {"read", -1, 0}};

int run_benchmark() {
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  nlohmann::json out;
  out["device"] = prop.name;
  out["rows"] = nlohmann::json::array();
  const int64_t kMaxK = 8192;
  DevMem x(kMaxK * 4), nw(kMaxK * 4), y(size_t(16384) * 4), y_ref(size_t(16384) * 4), counter(4), sink(4);
  CK(cudaMemset(counter.p, 0, 4));
  fill_kernel<<<64, 256, 0, st>>>(x.p, kMaxK, false, 11);
  fill_kernel<<<64, 256, 0, st>>>(nw.p, kMaxK, false, 12);
  CK(cudaGetLastError());
  const size_t kRotateBytes = size_t(256) << 20;
  int rc = 0;
  for (const Shape& s : kShapes) {
    const size_t wbytes = size_t(s.N * s.K) * 2;
    const int copies = int(std::clamp<size_t>((kRotateBytes + wbytes - 1) / wbytes, 2, 64));
    DevMem W(wbytes * copies);
    fill_kernel<<<1024, 256, 0, st>>>(W.p, size_t(s.N * s.K) * copies, true, 7);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(st));
    const int launches = std::max(copies, 16);
    auto gemv = [&](int i, void* yo) {
      kc::GemvIn in;
      in.x = x.p, in.ldx = s.K, in.norm_w = nw.as<float>(), in.eps = 1e-5f;
      kc::GemvOut o;
      o.y = yo, o.ldy = s.N;
      kc::gemv_bf16(in, reinterpret_cast<const uint16_t*>(W.as<char>() + wbytes * (i % copies)), s.N, s.K, 1, o,
                    counter.as<unsigned>(), st);
    };
    nlohmann::json row = {{"shape", s.name}, {"N", s.N}, {"K", s.K}, {"bytes", wbytes}};
    std::string line;
    char buf[160];
    for (const Variant& v : kVariants) {
      double us = 0;
      if (v.plan < 0) {
        us = time_graph(st, launches, 30, [&](int i) {
          read_only_kernel<<<prop.multiProcessorCount * 4, 512, 0, st>>>(
              reinterpret_cast<const uint4*>(W.as<char>() + wbytes * (i % copies)), wbytes / 16, sink.as<unsigned>());
        });
      } else {
        flashkit::Tuning t = flashkit::default_tuning();
        t.cuda_gemv_plan = v.plan, t.cuda_gemv_ring_kb = v.ring_kb;
        kc::ScopedLaunchTuning scope(t);
        us = time_graph(st, launches, 30, [&](int i) { gemv(i, y.p); });
        if (v.plan == 1) {  // the reference bits: copy 0 through the legacy kernel
          gemv(0, y_ref.p);
        } else {
          CK(cudaMemsetAsync(y.p, 0xff, size_t(s.N) * 4, st));
          gemv(0, y.p);
          std::vector<float> a(size_t(s.N)), b(size_t(s.N));
          CK(cudaStreamSynchronize(st));
          CK(cudaMemcpy(a.data(), y_ref.p, a.size() * 4, cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(b.data(), y.p, b.size() * 4, cudaMemcpyDeviceToHost));
          const bool same = std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
          row[std::string(v.name) + "_bitwise_legacy"] = same;
          if (!same) {
            std::printf("[gemvbench] %s: %s y differs from the legacy kernel's\n", s.name, v.name);
            rc = 2;
          }
        }
      }
      const double tbs = wbytes / (us * 1e-6) / 1e12;
      row[std::string(v.name) + "_us"] = us;
      row[std::string(v.name) + "_TBps"] = tbs;
      std::snprintf(buf, sizeof buf, " | %s %.2f us %.2f TB/s", v.name, us, tbs);
      line += buf;
    }
    row["bulk_vs_legacy"] = row["legacy_us"].get<double>() / row["bulk_us"].get<double>();
    row["bulk_of_read"] = row["read_us"].get<double>() / row["bulk_us"].get<double>();
    std::printf("[gemvbench] %-22s N %5lld K %5lld %6.2f MB%s | bulk vs legacy %.3fx, bulk at %.0f%% of read\n",
                s.name, (long long)s.N, (long long)s.K, wbytes / 1e6, line.c_str(), row["bulk_vs_legacy"].get<double>(),
                100 * row["bulk_of_read"].get<double>());
    out["rows"].push_back(row);
  }
  if (const char* p = std::getenv("FLASHKIT_GEMVBENCH_OUT"); p && *p) {
    std::ofstream f(p);
    if (!f) throw std::runtime_error(std::string("cannot write ") + p);
    f << out.dump(1) << "\n";
  }
  return rc;
}

}  // namespace

int main() {
  if (flashkit::cuda_device_count() <= 0) {
    std::fprintf(stderr, "flashkit_gemv_bench: no CUDA device\n");
    return 1;
  }
  try {
    return run_benchmark();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashkit_gemv_bench: %s\n", e.what());
    return 1;
  }
}
