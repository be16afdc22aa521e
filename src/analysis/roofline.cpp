#include "roofline.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include "flashkit/tuning.hpp"
#include "flashkit/runtime.hpp"
#include "kernels_avx2.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace flashkit::analysis {

namespace {
using clk = std::chrono::steady_clock;
double now() { return std::chrono::duration<double>(clk::now().time_since_epoch()).count(); }

// Scalar fallback for the FMA chain (the compiler vectorizes none of this across chains reliably; it is a
// floor, used only on CPUs without AVX2).
double fma_chain_scalar(int64_t iters) {
  float a[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  const float m = 0.9999999f, c = 1e-7f;
  for (int64_t i = 0; i < iters; ++i)
    for (float& x : a) x = x * m + c;
  float s = 0;
  for (float x : a) s += x;
  return s;  // flops = 2 * 8 * iters
}
}  // namespace

double measure_cpu_fma_gflops(double seconds, int threads) {
  if (threads <= 0) threads = num_threads();
  const bool avx2 = have_avx2_fma();
  const int64_t chunk = 1 << 20;
  // flops per chunk per thread: avx2: 2 (FMA) * 8 lanes * 12 chains * chunk; scalar: 2 * 8 * chunk
  const double flops_per_chunk = avx2 ? 2.0 * 8 * 12 * chunk : 2.0 * 8 * chunk;
  double best = 0;
  const double t_end = now() + seconds;
  volatile double sink = 0;
  while (now() < t_end) {
    const double t0 = now();
    double acc = 0;
#pragma omp parallel num_threads(threads) reduction(+ : acc)
    { acc += avx2 ? fma_chain_avx2(chunk) : fma_chain_scalar(chunk); }
    const double dt = now() - t0;
    sink = sink + acc;
    best = std::max(best, flops_per_chunk * threads / dt);
  }
  (void)sink;
  return best / 1e9;
}

double measure_triad_gbs(double seconds, int threads, double array_mb) {
  if (threads <= 0) threads = num_threads();
  const size_t n = size_t(std::max(1.0, array_mb) * 1e6 / 4);
  std::unique_ptr<float[]> a(new float[n]), b(new float[n]), c(new float[n]);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < int64_t(n); ++i) {
    a[i] = 0;
    b[i] = 1;
    c[i] = 2;
  }
  float* pa = a.get();
  const float* pb = b.get();
  const float* pc = c.get();
  const float s = 0.5f;
  double best = 0;
  const double t_end = now() + seconds;
  int reps = 0;
  while (now() < t_end || reps < 2) {
    const double t0 = now();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < int64_t(n); ++i) pa[i] = pb[i] + s * pc[i];
    const double dt = now() - t0;
    if (reps > 0) best = std::max(best, 3.0 * 4.0 * double(n) / dt);  // first pass warms pages
    ++reps;
  }
  return best / 1e9;
}

CpuMeasurement measure_cpu(double seconds, int threads, double triad_array_mb) {
  CpuMeasurement m;
  m.threads = threads > 0 ? threads : num_threads();
  m.isa = have_avx2_fma() ? "avx2" : "scalar";
  m.fma_peak_gflops = measure_cpu_fma_gflops(seconds * 0.4, m.threads);
  m.triad_array_mb = triad_array_mb;
  m.triad_gbs = measure_triad_gbs(seconds * 0.6, m.threads, triad_array_mb);
  return m;
}

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return line.substr(p + 2);
    }
  return "unknown CPU";
}

DeviceSpec local_cpu_spec() {
  static const DeviceSpec spec = [] {
    DeviceSpec d;
    d.name = "cpu";
    // FLASHKIT_CPU_PEAK_GFLOPS and FLASHKIT_CPU_BW_GBS pin the roof (skipping the measurement): for a shared
    // machine, where a 0.4 s measurement can catch other jobs, and for fast deterministic tests.
    CpuMeasurement m;
    const Tuning t = default_tuning();  // set from the environment at the CLI's boundary
    const double pk = t.cpu_peak_gflops, bw = t.cpu_bw_gbs;
    if (pk > 0 && bw > 0) {
      m.fma_peak_gflops = pk;
      m.triad_gbs = bw;
      m.threads = num_threads();
      m.isa = "pinned by FLASHKIT_CPU_PEAK_GFLOPS/FLASHKIT_CPU_BW_GBS";
    } else {
      m = measure_cpu(0.4);
    }
    d.full_name = cpu_model_name() + " (" + std::to_string(m.threads) + " threads, measured)";
    d.fp32_tflops = m.fma_peak_gflops / 1e3;
    d.mem_bw_gbs = m.triad_gbs;
    d.mem_gb = double(physical_memory_bytes()) / 1e9;
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE), l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    d.l2_mb = double(l3 > 0 ? l3 : std::max(l2, 0L)) / 1e6;
    d.smem_per_sm_kb = l2 > 0 ? double(l2) / 1024 : 512;
    d.sms = m.threads;
    d.source = pk && bw ? m.isa
                        : "measured by this process: " + m.isa + " FMA chains and a " +
                              std::to_string(int(m.triad_array_mb)) + " MB-per-array triad (noisy on a shared machine)";
    return d;
  }();
  return spec;
}

}  // namespace flashkit::analysis
