// Retired from src/kernels/cuda/ssm/scan_v5.cu (not built): v5 of the scan forward, generations 9 (v5_chunked) and
// 10 (v5_chunked_fma2). H200 run s11-9 (batch 8, d_inner 1536, d_state 16): 0.47-0.59x v4 (generation 6) at 1k-16k
// tokens, 14.7-18.8% of the copy ceiling: pass 1 costs what v4 costs. docs/worklog/ssm-scan.md "v5" discusses it.
// Kept as the record of the attempt; it needs its plan (scan_v5_plan.hpp, beside it), scan_v4_block.cuh and the
// declarations it had in ssm_cuda.hpp (launch_scan_v5, run_scan_v5, scan_v5_device_sms) and its ScanKernel entries.
// v5 of the selective scan forward (d_state <= 16; docs/worklog/ssm-scan.md "v5"): the chunked two-pass scan. v4 under
// Nsight Compute ran 11.4 warps per SM (384 blocks at batch 8, d_inner 1536), each a dependent recurrence: the
// scheduler found no ready warp in 44% of cycles. v5 multiplies the independent work by scanning `window` chunks of
// one sequence at once (plan_scan_chunked, scan_v5_plan.hpp), window after window:
//   * pass 1 (chunk_end_kernel), one v4 block per (channel block, sequence, chunk) from a zero state, copying only
//     u, delta and B: the chunk's end state h_end and its sum of dt per channel (the chunk's decay product per state
//     is exp(A * sum dt): one exp per state in the chain instead of storing it per state);
//   * the chain (chain_kernel), one thread per (sequence, channel, state), in order over the window's chunks:
//     start[c] = carry, carry = exp(A * dt_sum[c]) * carry + h_end[c], written over h_end in place; the carry enters
//     from the previous window (or the caller's state, or zero) and leaves into the next (or the caller's state);
//   * pass 2 (chunk_out_kernel), v4's block per chunk from its start state: y exactly as v4 computes it.
// Pass 2 follows pass 1 per window so that the window's u, delta and B (the l2_bytes budget of the plan) are still in
// L2: the re-read then costs L2 bandwidth, not HBM's.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "core/cuda_check.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/cuda/ssm/scan_v4_block.cuh"
#include "kernels/cuda/ssm/ssm_cuda.hpp"
#include "scan_v5_plan.hpp"

namespace flashkit::kernels {
namespace {

using namespace scan_v4_detail;

constexpr int kNpt = 4, kTc = 16, kStages = 4;  // v4_npt4's block (production's v4)
using Block = V4<kNpt, kTc, kStages>;

// The ScanArgs of chunk `chunk` (steps [chunk * len, min(seqlen, (chunk + 1) * len))).
__device__ __forceinline__ ScanArgs chunk_args(const ScanArgs& a, int64_t chunk, int64_t len) {
  ScanArgs c = a;
  const int64_t t0 = chunk * len;
  c.seqlen = a.seqlen - t0 < len ? a.seqlen - t0 : len;
  c.u = a.u + t0 * a.u_t;
  c.delta = a.delta + t0 * a.dl_t;
  c.B = a.B + t0 * a.B_t;
  c.C = a.C + t0 * a.C_t;
  if (a.z) c.z = a.z + t0 * a.z_t;
  if (a.y) c.y = a.y + t0 * a.y_t;
  return c;
}

// grid (channel blocks, batch, chunks of the window); h_end [window, batch, d_inner, d_state], dt_sum [window, batch,
// d_inner]. POLY of a thread's 4 exps on the FMA pipe: pass 1 doubles the scan's exps (the SFU's floor equals HBM's
// in v4, docs/worklog/ssm-scan.md), so generation 10 moves half of pass 1's to the FMA pipe.
template <int POLY>
__global__ void __launch_bounds__(Block::kThreads, 4)
    chunk_end_kernel(ScanArgs a, bool vec, int64_t chunk_len, int64_t first_chunk, float* h_end, float* dt_sum) {
  ScanArgs c = chunk_args(a, first_chunk + blockIdx.z, chunk_len);
  c.z = nullptr;
  c.y = nullptr;
  c.state = h_end + int64_t(blockIdx.z) * a.batch * a.d_inner * a.d_state;
  scan_v4_block<kNpt, kTc, kStages, POLY, true>(c, vec, blockIdx.y, int64_t(blockIdx.x) * kCh,
                                             dt_sum + int64_t(blockIdx.z) * a.batch * a.d_inner);
}

// One thread per (sequence, channel, state): h holds the window's end states and becomes its start states. `init`
// (null: zero) is the state entering the window, `carry_out` receives the state leaving it (they may be the same
// array: each thread reads its element before writing it).
__global__ void chain_kernel(const float* A, int64_t batch, int64_t d_inner, int64_t d_state, int64_t chunks,
                             float* h, const float* dt_sum, const float* init, float* carry_out) {
  const int64_t per_chunk = batch * d_inner * d_state;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= per_chunk) return;
  const int64_t n = i % d_state, bc = i / d_state, ch = bc % d_inner;
  const float A2 = A[ch * d_state + n] * kLog2e;
  float carry = init ? init[i] : 0.f;
  for (int64_t c = 0; c < chunks; ++c) {
    const float end = h[c * per_chunk + i];
    h[c * per_chunk + i] = carry;
    carry = exp2f(A2 * dt_sum[c * batch * d_inner + bc]) * carry + end;
  }
  carry_out[i] = carry;
}

// grid as chunk_end_kernel; h_start as chain_kernel leaves it (pass 2's block writes its chunk's end state back
// there: nobody reads it).
__global__ void __launch_bounds__(Block::kThreads, 4)
    chunk_out_kernel(ScanArgs a, bool vec, int64_t chunk_len, int64_t first_chunk, float* h_start) {
  ScanArgs c = chunk_args(a, first_chunk + blockIdx.z, chunk_len);
  c.state = h_start + int64_t(blockIdx.z) * a.batch * a.d_inner * a.d_state;
  scan_v4_block<kNpt, kTc, kStages, 0>(c, vec, blockIdx.y, int64_t(blockIdx.x) * kCh);
}

template <class K>
void opt_in_smem(K* kernel, std::atomic<uint64_t>& opted_in) {
  int dev = 0;
  check_cuda(cudaGetDevice(&dev), "selective scan v5: cudaGetDevice");
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if (Block::kSmemBytes > 48 * 1024 && !(opted_in.load() & bit)) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Block::kSmemBytes)),
               "selective scan v5: shared memory opt-in");
    opted_in.fetch_or(bit);
  }
}

}  // namespace

int64_t scan_v5_device_sms() {
  int dev = 0, sms = 0;
  check_cuda(cudaGetDevice(&dev), "selective scan v5: cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
             "selective scan v5: multiprocessor count");
  return sms;
}

void launch_scan_v5(const ScanArgs& a, void* stream, const ScanChunkPlan& p, float* workspace,
                    int64_t workspace_bytes, int pass1_fma_exps) {
  const cudaStream_t st = static_cast<cudaStream_t>(stream ? stream : cuda_stream());
  if (a.d_state > kStates)
    throw Error(Status::invalid_argument, "A: the v5 scan keeps at most 16 states per channel, got d_state " +
                                              std::to_string(a.d_state));
  if (p.direct) {
    launch_scan_v4(a, stream, kNpt);
    return;
  }
  if (p.chunk_len <= 0 || p.chunk_len % kTc != 0 || p.window < 1 || p.chunks * p.chunk_len < a.seqlen ||
      p.windows * p.window < p.chunks)
    throw Error(Status::invalid_argument, "plan: the v5 scan needs a chunk length that is a positive multiple of 16 "
                                          "and chunks and windows covering the sequence (make_scan_chunk_plan)");
  const ScanChunkPlan need = make_scan_chunk_plan(a.batch, a.seqlen, a.d_inner, a.d_state, p.chunk_len, p.window);
  if (workspace == nullptr || workspace_bytes < need.workspace_bytes())
    throw Error(Status::invalid_argument,
                "workspace: the v5 scan needs " + std::to_string(need.workspace_bytes()) +
                    " bytes of device workspace (end states and dt sums of a window's chunks, the carried state), got " +
                    (workspace ? std::to_string(workspace_bytes) + " bytes" : std::string("none")));
  static std::atomic<uint64_t> end_opted{0}, end2_opted{0}, out_opted{0};
  auto* end_kernel = pass1_fma_exps == 2 ? chunk_end_kernel<2> : chunk_end_kernel<0>;
  opt_in_smem(end_kernel, pass1_fma_exps == 2 ? end2_opted : end_opted);
  opt_in_smem(chunk_out_kernel, out_opted);
  float* h = workspace;
  float* dt_sum = h + need.state_floats;
  float* carry = dt_sum + need.dt_sum_floats;
  const bool vec = vector_ok(a);
  const int64_t per_chunk = a.batch * a.d_inner * a.d_state;
  const unsigned cblocks = unsigned((a.d_inner + kCh - 1) / kCh);
  for (int64_t w = 0; w < need.windows; ++w) {
    const int64_t first = w * need.window;
    const int64_t count = need.chunks - first < need.window ? need.chunks - first : need.window;
    const dim3 grid(cblocks, unsigned(a.batch), unsigned(count));
    end_kernel<<<grid, Block::kThreads, Block::kSmemBytes, st>>>(a, vec, need.chunk_len, first, h, dt_sum);
    const float* init = w == 0 ? a.state : carry;
    float* out = w + 1 == need.windows && a.state ? a.state : carry;
    chain_kernel<<<unsigned((per_chunk + 255) / 256), 256, 0, st>>>(a.A, a.batch, a.d_inner, a.d_state, count, h,
                                                                    dt_sum, init, out);
    chunk_out_kernel<<<grid, Block::kThreads, Block::kSmemBytes, st>>>(a, vec, need.chunk_len, first, h);
  }
  check_cuda(cudaGetLastError(), "selective scan v5 kernel launch");
}

std::string run_scan_v5(const ScanArgs& a, void* stream, int pass1_fma_exps) {
  const char* name = scan_kernel_name(pass1_fma_exps == 2 ? ScanKernel::v5_chunked_fma2 : ScanKernel::v5_chunked);
  const ScanChunkPlan p = plan_scan_chunked(a.batch, a.seqlen, a.d_inner, a.d_state, int(scan_v5_device_sms()));
  if (p.direct) {
    launch_scan_v5(a, stream, p, nullptr, 0);
    return name;
  }
  const cudaStream_t st = static_cast<cudaStream_t>(stream ? stream : cuda_stream());
  float* ws = nullptr;
  check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&ws), size_t(p.workspace_bytes()), st),
             "cudaMallocAsync(selective scan v5 workspace)");
  launch_scan_v5(a, stream, p, ws, p.workspace_bytes(), pass1_fma_exps);
  check_cuda(cudaFreeAsync(ws, st), "cudaFreeAsync(selective scan v5 workspace)");
  return name;
}

}  // namespace flashkit::kernels
