// Measuring the machine at hand: CPU f32 FMA peak, a STREAM-like triad for main-memory bandwidth, and
// (in CUDA builds, with a device present) device copy bandwidth and a bf16 tensor-core GEMM rate.
#pragma once
#include <cstdint>
#include <string>

#include "hardware.hpp"

namespace flashkit::analysis {

struct CpuMeasurement {
  double fma_peak_gflops = 0;   // f32, all threads, register-resident FMA chains
  double triad_gbs = 0;         // a[i] = b[i] + s*c[i]; 3 arrays x 4 bytes per element counted (STREAM rule)
  double triad_array_mb = 0;    // size of each array
  int threads = 0;
  std::string isa;              // "avx2" or "scalar"
};

// Bounded by `seconds` in total (split between the two). Deterministic enough for a ceiling; run on a
// loaded machine it reports what this process actually got.
CpuMeasurement measure_cpu(double seconds = 1.0, int threads = 0, double triad_array_mb = 64);
double measure_cpu_fma_gflops(double seconds, int threads);
double measure_triad_gbs(double seconds, int threads, double array_mb);

// The local CPU as a DeviceSpec: peak and bandwidth measured once per process (about 0.4 s), L2 and core
// count from sysconf. Cached.
DeviceSpec local_cpu_spec();
std::string cpu_model_name();

struct GpuMeasurement {
  bool available = false;
  std::string name;             // cudaGetDeviceProperties name
  std::string error;            // why not available
  double copy_gbs = 0;          // device-to-device cudaMemcpy, (read + write) bytes / time
  double bf16_gemm_tflops = 0;  // cublasGemmEx bf16 in, f32 accumulate, M=N=K=8192 (or smaller to fit `seconds`)
  int sms = 0;
  double mem_gb = 0;
};
GpuMeasurement measure_gpu(double seconds = 2.0);  // gpu_measure.cu; stub without CUDA

// cuBLAS GEMM (N > 1) or GEMV (N == 1) on device 0, timed with CUDA events: best of `reps` in seconds.
// bf16 = true: bf16 operands, f32 accumulate and output (cublasGemmEx); false: f32 SGEMM/SGEMV.
// Returns a negative value, with the reason in *error, when there is no CUDA build or device.
double cublas_matmul_seconds(int64_t M, int64_t N, int64_t K, bool bf16, int reps, std::string* error);
std::string gpu_name();  // "" without a device

// flashkit attention on GPU 0 (bf16 q/k/v/o, f32 lse), timed with CUDA events around each call: best of
// `reps`, with the OpCost the call reported. available=false with the reason without CUDA or a device.
struct GpuAttentionTiming {
  bool available = false;
  std::string error;
  double fwd_s = 0, bwd_s = 0;
  double fwd_flops = 0, fwd_bytes = 0, bwd_flops = 0, bwd_bytes = 0;
  std::string kernel, model;          // forward call's OpCost
  std::string bwd_kernel, bwd_model;  // backward call's OpCost
};
GpuAttentionTiming cuda_attention_time(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seqlen, int64_t head_dim,
                                       bool causal, bool backward, const std::string& impl, int reps);

}  // namespace flashkit::analysis
