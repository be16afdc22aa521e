// Device queries shared by the attention dispatch and the engine (cuda_device.hpp), and the runtime glue of the
// public API (device count, the calling thread's stream, checked copies). CUDA builds only.
#include "core/cuda_device.hpp"

#include <cuda_runtime.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "core/cuda_check.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"

namespace flashkit {

std::string cuda_use_device(int index) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();  // clear the sticky error of a machine without a driver or device
    fail(Status::unsupported, "device cuda: no CUDA device is visible");
  }
  if (index < 0 || index >= n)
    fail(Status::invalid_argument,
         "device cuda:" + std::to_string(index) + ": only " + std::to_string(n) + " CUDA device(s) visible");
  check_cuda(cudaSetDevice(index), "cudaSetDevice");
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  return "cuda:" + std::to_string(index) + " " + prop.name;
}

int cuda_current_device() {
  int dev = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  return dev;
}

DeviceInfo cuda_device_info() {
  static std::mutex mu;
  static std::vector<DeviceInfo> infos;
  const int dev = cuda_current_device();
  std::lock_guard<std::mutex> lock(mu);
  if (int(infos.size()) <= dev) infos.resize(dev + 1);
  DeviceInfo& d = infos[dev];
  if (d.sms == 0) {
    DeviceInfo n;
    check_cuda(cudaDeviceGetAttribute(&n.smem_per_block_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
               "cudaDeviceGetAttribute");
    check_cuda(cudaDeviceGetAttribute(&n.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev),
               "cudaDeviceGetAttribute");
    check_cuda(cudaDeviceGetAttribute(&n.sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
    check_cuda(cudaDeviceGetAttribute(&n.cc_major, cudaDevAttrComputeCapabilityMajor, dev), "cudaDeviceGetAttribute");
    check_cuda(cudaDeviceGetAttribute(&n.cc_minor, cudaDevAttrComputeCapabilityMinor, dev), "cudaDeviceGetAttribute");
#ifdef FLASHKIT_HAVE_SM90A
    n.sm90a = n.cc_major == 9;
#endif
    if (n.sms < 1) n.sms = 1;
    d = n;
  }
  return d;
}

ClusterResidency query_cluster_residency(const void* kern, int threads, size_t smem) {
  ClusterResidency res{};
  // The first call may come inside a graph capture on this thread: these queries enqueue nothing, but a strict
  // capture mode could count one as an unsafe call and invalidate the capture, so relax it around them.
  struct RelaxCapture {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    RelaxCapture() { cudaThreadExchangeStreamCaptureMode(&mode); }
    ~RelaxCapture() { cudaThreadExchangeStreamCaptureMode(&mode); }
  } relax;
  int dev = 0, major = 0;
  cudaFuncAttributes fa{};
  // Clusters need sm_90 and code built for it: not the sm_80 binary, nor sm_80 PTX JIT-compiled for a newer chip
  // (binary AND ptx version >= 90).
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess || major < 9 ||
      cudaFuncGetAttributes(&fa, kern) != cudaSuccess || fa.binaryVersion < 90 || fa.ptxVersion < 90 ||
      (smem > 0 && cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess)) {
    cudaGetLastError();  // "no clusters", not a sticky error
    return res;
  }
  const bool nonportable = cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
  if (!nonportable) cudaGetLastError();
  for (int c = 2; c <= 16 && (c <= 8 || nonportable); ++c) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(unsigned(c), 1, 1);
    cfg.blockDim = dim3(unsigned(threads), 1, 1);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = unsigned(c), attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, kern, &cfg) != cudaSuccess) {
      cudaGetLastError();
      n = 0;
    }
    res[c] = n;
  }
  return res;
}

namespace {
thread_local cudaStream_t g_stream = nullptr;
}  // namespace

int cuda_device_count() {
  // Devices do not go away while the process runs: once seen, the count is kept (every CUDA attention call asks).
  static std::atomic<int> known{0};
  if (const int k = known.load(std::memory_order_relaxed); k > 0) return k;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  known.store(n, std::memory_order_relaxed);
  return n;
}

// The calling thread's stream for flashkit CUDA launches (nullptr: the legacy default stream). Used by
// python/flashkit/torch.py, through fk_cuda_set_stream, to honour torch.cuda.current_stream().
void set_cuda_stream(void* stream) { g_stream = static_cast<cudaStream_t>(stream); }
void* cuda_stream() { return g_stream; }

}  // namespace flashkit
