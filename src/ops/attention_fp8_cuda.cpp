// The CUDA side of the fp8 attention forward (ops/attention_fp8_cuda.hpp), CUDA builds only: checks that this
// device and head dim have the sm_90a kernel (attention_fp8_choice.hpp), writes V^T once (fp8_vt_prep, a workspace
// from the stream-ordered pool), runs the warp-specialized e4m3 kernel, and the device side of quantize_e4m3.
#include <cuda_runtime.h>

#include <mutex>
#include <string>
#include <vector>

#include "core/cuda_check.hpp"
#include "core/cuda_device.hpp"
#include "flashkit/e4m3.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/cuda/fp8/fp8_api.hpp"
#include "kernels/cuda/fp8/fp8_layout.hpp"
#include "kernels/registry.hpp"
#include "ops/attention_fp8_choice.hpp"
#include "ops/attention_fp8_cuda.hpp"

namespace flashkit {

namespace {

struct DeviceBuffer {
  void* p = nullptr;
  cudaStream_t s;
  DeviceBuffer(size_t bytes, cudaStream_t stream, const char* what) : s(stream) {
    if (bytes) check_cuda(cudaMallocAsync(&p, bytes, stream), what);
  }
  ~DeviceBuffer() {
    if (p) cudaFreeAsync(p, s);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// Keeps freed workspace in the device's stream-ordered pool (as the bf16 dispatch does, attention_cuda.cpp): with the
// default release threshold of 0 every synchronization returns the V^T workspace to the driver and the next call
// maps it again (~100 us).
void keep_pool(int dev) {
  static std::mutex mu;
  static std::vector<bool> done;
  std::lock_guard<std::mutex> lock(mu);
  if (int(done.size()) <= dev) done.resize(size_t(dev) + 1, false);
  if (done[size_t(dev)]) return;
  cudaMemPool_t pool;
  check_cuda(cudaDeviceGetDefaultMemPool(&pool, dev), "cudaDeviceGetDefaultMemPool");
  uint64_t keep = UINT64_MAX;
  check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute");
  done[size_t(dev)] = true;
}

bool aligned16(const kernels::AttnOperand& t) {
  return reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && t.stride_s % 16 == 0 && t.stride_h % 16 == 0 &&
         t.stride_b % 16 == 0;
}

}  // namespace

void cuda_attention_forward_fp8(const kernels::AttentionFp8Args& args, const Tuning& tuning, OpCost* cost) {
  const kernels::AttentionShape& sh = args.fwd.shape;
  const std::string why = fp8_cuda_unsupported_reason(cuda_device_info(), sh.head_dim);
  if (!why.empty()) fail(Status::unsupported, why);
  if (sh.batch > 65535 || sh.heads > 65535 || sh.batch * sh.kv_heads > 65535)
    fail(Status::unsupported, "attention_forward_fp8: at most 65535 sequences, 65535 heads and 65535 (sequence, kv "
                              "head) pairs per CUDA call, got batch " + std::to_string(sh.batch) + ", heads " +
                              std::to_string(sh.heads) + ", kv_heads " + std::to_string(sh.kv_heads) + "; split the call");
  for (auto [t, name] : {std::pair{&args.fwd.q, "q"}, std::pair{&args.fwd.k, "k"}, std::pair{&args.fwd.v, "v"}})
    if (!aligned16(*t))
      fail(Status::invalid_argument, std::string("attention_forward_fp8: ") + name + ": on CUDA the base address and "
                                     "the batch/seq/head strides must be multiples of 16 bytes (elements)");
  keep_pool(cuda_current_device());
  const cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream());
  const int rescale = fp8_rescale(sh.head_dim, tuning);
  const int bn = fp8_key_tile(sh.head_dim, rescale, sh.seqlen_k, tuning);
  const int64_t keys = cuda::fp8_vt_keys(sh.seqlen_k, bn);
  const size_t vt_bytes = size_t(sh.batch * sh.kv_heads * sh.head_dim * keys);
  DeviceBuffer vt(vt_bytes, stream, "cudaMallocAsync(fp8 V^T workspace)");
  cuda::launch_fp8_vt_prep(args.fwd.v, sh, bn, static_cast<uint8_t*>(vt.p), stream);
  cuda::Fp8FwdParams p;
  p.a = args.fwd;
  p.a.scale = args.fwd.scale * args.q_descale * args.k_descale;
  p.v_descale = args.v_descale;
  const auto* vtp = static_cast<const uint8_t*>(vt.p);
  const bool pp = tuning.sm90_ws_pingpong;
  const bool d256 = sh.head_dim == 256;
  const cuda::Fp8LaunchResult r =
      bn == 192 ? cuda::launch_flash_fwd_fp8_sm90<128, 1, 192>(p, vtp, pp, stream)  // d128 r1 only (fp8_key_tile)
      : rescale == 1 ? (d256 ? cuda::launch_flash_fwd_fp8_sm90<256, 1, 128>(p, vtp, pp, stream)
                             : cuda::launch_flash_fwd_fp8_sm90<128, 1, 128>(p, vtp, pp, stream))
      : rescale == 2 ? cuda::launch_flash_fwd_fp8_sm90<128, 2, 128>(p, vtp, pp, stream)  // d128 only (fp8_rescale)
                     : (d256 ? cuda::launch_flash_fwd_fp8_sm90<256, 0, 128>(p, vtp, pp, stream)
                             : cuda::launch_flash_fwd_fp8_sm90<128, 0, 128>(p, vtp, pp, stream));
  if (!r.launched) fail(Status::unsupported, std::string("attention_forward_fp8: ") + r.why_not);
  if (!cost) return;
  OpCost c = kernels::attention_forward_fp8_cost(args, "");
  c.kernel = fp8_kernel_name(sh.head_dim, rescale, bn);
  c.flops = 4.0 * kernels::attention_tiled_pairs(sh, args.fwd.mask, 128, bn) * double(sh.head_dim);
  c.bytes_read += double(vt_bytes);     // the kernel reads V^T (the prep read V: bytes_read already has it)
  c.bytes_written += double(vt_bytes);  // the prep writes it
  c.workspace_bytes = double(vt_bytes);
  c.model = "q, k, v (1 byte each) read once, V^T written and read once (prep), o (bf16) and lse written once";
  *cost = c;
}

void cuda_quantize_e4m3(const TensorView& src, const TensorView& dst, int64_t n, float* descale) {
  check_cuda(cudaSetDevice(src.device_index), "cudaSetDevice");
  const cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream());
  DeviceBuffer amax(sizeof(float), stream, "cudaMallocAsync(quantize_e4m3 amax)");
  check_cuda(cudaMemsetAsync(amax.p, 0, sizeof(float), stream), "cudaMemsetAsync(amax)");
  cuda::launch_fp8_amax(src.data, src.dtype, n, static_cast<float*>(amax.p), stream);
  float host_amax = 0;
  check_cuda(cudaMemcpyAsync(&host_amax, amax.p, sizeof(float), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync(amax)");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize(quantize_e4m3)");
  // NaN/inf input: a NaN/inf descale, which attention_forward_fp8 rejects (the header says so).
  const float s = (host_amax > 0 || host_amax != host_amax) ? float(double(host_amax) / double(kE4m3Max)) : 1.0f;
  cuda::launch_fp8_quantize(src.data, src.dtype, n, s, static_cast<uint8_t*>(dst.data), stream);
  *descale = s;
}

}  // namespace flashkit
