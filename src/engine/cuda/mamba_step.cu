// The Mamba decode mixer step (kernels.hpp, mamba_mixer_step): x_proj, dt_proj and the selective-scan step of one
// row in one launch, in place of two GEMVs and the scan kernel (engine/mamba_fusion.hpp: when the backend uses it).
//
// x_proj: every channel's update needs the whole x_proj output (dt_low, B, C). A block alone would read all of W_x
// (mamba-130m: 80 x 1536 bf16 = 245 KB) from L2, ~2 us at one SM's share of L2 bandwidth -- about what the launch
// it saves costs. So on sm_90 the blocks run as clusters of c (mamba_step_cluster: 8 for mamba-130m's 48 blocks):
// each block computes the rows of its rank (warp w of rank r: rows (r kWarps + w) + c kWarps i) and reads the other
// ranks' rows from their shared memory (DSMEM), so a block reads 1/c of W_x. Elsewhere (sm_80, or clusters that do
// not fit) c = 1: every block computes every row. docs/worklog/mamba-decode-cuda.md has the estimates.
//
// Width: a block carries CH = 32, 16 or 8 channels (16 CH threads; mamba_step_channels: narrower blocks put the
// latency-bound step on more SMs), the cluster size re-chosen for it (mamba_step_cluster). The width changes which
// block computes what, not the order of any sum. CH = 64 (v3, mamba-2.8b's d_inner 5120: 160 blocks of 32 channels
// at one block an SM ran as two waves) carries 8 threads a channel, two states each (s and s + 8): a thread adds
// its two partial outputs in the order the first xor shuffle (offset 8) of the 16-thread version adds them, then
// shuffles 4, 2, 1, so y has the same bits; 80 blocks of 512 threads fit one wave.
//
// Arithmetic: the dot products in the GEMV's order (lane l accumulates the 8-weight chunks l, l + 32, ... with
// fmaf, then warp_sum), the scan step in the scan kernel's (kernels/cuda/ssm/scan.cu at seqlen 1, one state per
// thread, 16 threads a channel, the partial outputs summed by xor shuffles 8, 4, 2, 1), so the outputs equal the
// unfused ops' up to the compiler's contractions.
#include "engine/cuda/common.cuh"
#include "engine/mamba_fusion.hpp"

#if defined(FLASHKIT_WITH_CUDA)  // (tools/cuda_emu: its cuda_runtime.h emulates clusters)
#include <cooperative_groups.h>

#include "core/cuda_device.hpp"
#endif

namespace flashkit::engine::cuda {

namespace {

// Threads per channel: one state each (16), or two (8) in the 64-channel block.
template <int CH>
constexpr int split_of() { return int(mamba_step_threads(CH) / CH); }
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kPre = 8;  // x_proj chunks per lane loaded before the PDL wait (a whole row when d_inner <= 2048)

__device__ __forceinline__ float softplus_f(float x) { return x > 20.f ? x : log1pf(__expf(x)); }

// acc += the 8 weights of chunk w times x[0..8) (x 16-byte aligned, in shared memory), in the GEMV's order.
__device__ __forceinline__ float fma_chunk(uint4 w, const float* x, float acc) {
  float wf[8];
  unpack8(w, wf);
  const float4 xa = reinterpret_cast<const float4*>(x)[0], xb = reinterpret_cast<const float4*>(x)[1];
  acc = fmaf(wf[0], xa.x, acc), acc = fmaf(wf[1], xa.y, acc), acc = fmaf(wf[2], xa.z, acc);
  acc = fmaf(wf[3], xa.w, acc), acc = fmaf(wf[4], xb.x, acc), acc = fmaf(wf[5], xb.y, acc);
  acc = fmaf(wf[6], xb.z, acc), acc = fmaf(wf[7], xb.w, acc);
  return acc;
}

// CH channels per block, clusters of CL blocks. At most 128 registers a thread at every width (the widest block's
// budget), so narrower blocks may share an SM (a cluster of 16 narrow blocks on fewer SMs).
template <int CH, int CL>
__global__ void __launch_bounds__(mamba_step_threads(CH), int(kMambaStepMaxThreads / mamba_step_threads(CH)))
    mamba_step_kernel(MambaStepArgs a) {
  constexpr int kSplit = split_of<CH>(), kPer = int(kMambaStepMaxState) / kSplit;  // states per thread: 1 or 2
  constexpr int kThreads = CH * kSplit, kWarps = kThreads / 32, kChannels = CH;
  extern __shared__ float4 smem4[];
  const int64_t Di = a.d_inner, KC = Di / 8;
  const int R = a.dt_rank, N = a.d_state, rows = R + 2 * N;
  float* xs = reinterpret_cast<float*>(smem4);  // [Di]
  float* sdbc = xs + (Di + 3) / 4 * 4;          // [rows]: dt_low, B, C
  float* sdt = sdbc + (rows + 3) / 4 * 4;        // [kChannels]: the block's dt
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int s = threadIdx.x % kSplit;
  const int64_t c0 = int64_t(blockIdx.x) * kChannels, c = c0 + threadIdx.x / kSplit;
  const bool live = c < Di;
  bool on[kPer];  // thread s carries states s (and s + kSplit)
#pragma unroll
  for (int q = 0; q < kPer; ++q) on[q] = live && s + q * kSplit < N;

  pdl_trigger();
  // Constants before waiting for the previous kernel (the conv GEMV that writes xc and z), as the GEMV does: the
  // warp's first x_proj row (all of it when K <= 32 kPre chunks of 8) and its first channel's first dt_proj chunk go
  // into registers, so the weights' HBM latency overlaps the previous kernel.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int rank = CL > 1 ? int(cooperative_groups::this_cluster().block_rank()) : 0;
#else
  const int rank = 0;  // (CL > 1 traps below: the launcher never runs clusters here)
#endif
  const uint4* Wx = reinterpret_cast<const uint4*>(a.w_x);
  const uint4* Wd = reinterpret_cast<const uint4*>(a.w_dt);
  const int RC = R / 8;
  const int j0 = rank * kWarps + warp;
  uint4 wpre[kPre];
#pragma unroll
  for (int q = 0; q < kPre; ++q) {
    const int64_t ch = lane + 32 * q;
    wpre[q] = j0 < rows && ch < KC ? __ldg(Wx + int64_t(j0) * KC + ch) : make_uint4(0, 0, 0, 0);
  }
  const uint4 wdpre = c0 + warp < Di && lane < RC ? __ldg(Wd + (c0 + warp) * RC + lane) : make_uint4(0, 0, 0, 0);
  float A2[kPer];  // exp(dt * A) = exp2(dt * A * log2(e)), as the scan
#pragma unroll
  for (int q = 0; q < kPer; ++q) A2[q] = on[q] ? a.A[c * N + s + q * kSplit] * kLog2e : 0.f;
  const float Dc = live && a.D ? a.D[c] : 0.f;
  pdl_wait();
  for (int64_t k = threadIdx.x; k < Di; k += kThreads) xs[k] = a.xc[k];
  float h[kPer];
#pragma unroll
  for (int q = 0; q < kPer; ++q) h[q] = on[q] ? a.state[c * N + s + q * kSplit] : 0.f;
  const float u = live ? a.xc[c] : 0.f, zz = live ? a.z[c] : 0.f;
  __syncthreads();

  // x_proj: warp w of cluster rank r owns rows r kWarps + w + CL kWarps i (rank 0 alone: all rows).
  for (int j = j0; j < rows; j += CL * kWarps) {
    const uint4* wrow = Wx + int64_t(j) * KC;
    float acc = 0.f;
    int64_t ch = lane;
    if (j == j0) {  // the preloaded chunks first (the same order: lane, lane + 32, ...)
#pragma unroll
      for (int q = 0; q < kPre; ++q)
        if (lane + 32 * q < KC) acc = fma_chunk(wpre[q], xs + (lane + 32 * q) * 8, acc);
      ch = lane + 32 * kPre;
    }
    // The rest in batches of kRest chunks, every load of a batch issued before its first use (v3: mamba-2.8b's rows
    // are 20 chunks a lane, 12 after the preloaded 8: two dependent round trips instead of three in fours; 8 a
    // batch would spill).
    constexpr int kRest = 6;
    for (; ch < KC; ch += 32 * kRest) {
      uint4 wq[kRest];
#pragma unroll
      for (int q = 0; q < kRest; ++q) wq[q] = ch + 32 * q < KC ? __ldg(wrow + ch + 32 * q) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int q = 0; q < kRest; ++q)
        if (ch + 32 * q < KC) acc = fma_chunk(wq[q], xs + (ch + 32 * q) * 8, acc);
    }
    acc = warp_sum(acc);
    if (lane == 0) sdbc[j] = acc;
  }
  // The warp's dt_proj chunks (first chunk of each of its channels) load now, in flight over the cluster exchange;
  // before, each channel after the first was a dependent round trip after it.
  constexpr int kDtPer = (kChannels + kWarps - 1) / kWarps;
  uint4 wd[kDtPer];
  wd[0] = wdpre;
#pragma unroll
  for (int i = 1; i < kDtPer; ++i) {
    const int64_t cc = c0 + warp + i * kWarps;
    wd[i] = warp + i * kWarps < kChannels && cc < Di && lane < RC ? __ldg(Wd + cc * RC + lane)
                                                                  : make_uint4(0, 0, 0, 0);
  }
  if constexpr (CL > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    const cg::cluster_group cl = cg::this_cluster();
    cl.sync();  // every rank's rows are in its shared memory, visible to the cluster
    for (int j = threadIdx.x; j < rows; j += kThreads) {
      const int owner = (j / kWarps) % CL;
      if (owner != rank) sdbc[j] = cl.map_shared_rank(sdbc, owner)[j];
    }
    cl.sync();  // no rank exits (its shared memory goes) while another still reads its rows
#else
    __trap();  // the launcher runs clusters only where the device and the code allow them
#endif
  } else {
    __syncthreads();
  }
  if (blockIdx.x == 0)
    for (int j = threadIdx.x; j < rows; j += kThreads) a.dbc[j] = sdbc[j];

  // dt_proj for the block's channels: warp w owns channels w, w + kWarps, ... (dt_rank / 8 chunks, usually < 32).
#pragma unroll
  for (int i = 0; i < kDtPer; ++i) {
    const int cl = warp + i * kWarps;
    const int64_t cc = c0 + cl;
    if (cl >= kChannels || cc >= Di) break;  // (warp-uniform)
    float acc = 0.f;
    if (lane < RC) acc = fma_chunk(wd[i], sdbc + lane * 8, acc);
    for (int ch = lane + 32; ch < RC; ch += 32) acc = fma_chunk(__ldg(Wd + cc * RC + ch), sdbc + ch * 8, acc);
    acc = warp_sum(acc);
    if (lane == 0) {
      if (a.dt_bias) acc += a.dt_bias[cc];
      sdt[cl] = acc;
      a.dt[cc] = acc;
    }
  }
  __syncthreads();

  // The scan step (scan.cu's kernel at seqlen 1): thread s of the channel carries state s (and s + 8).
  const float dt = softplus_f(live ? sdt[threadIdx.x / kSplit] : 0.f);
  const float du = dt * u;
  float yq[kPer];
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int sq = s + q * kSplit;
    yq[q] = 0.f;
    if (on[q]) {
      h[q] = exp2f(dt * A2[q]) * h[q] + du * sdbc[R + sq];
      yq[q] += sdbc[R + N + sq] * h[q];
    }
  }
  // Two states a thread: y_s + y_{s+8} is what the 16-thread version's first shuffle (offset 8) adds (rounded
  // alone: no contraction into the products).
  float y = kPer == 2 ? __fadd_rn(yq[0], yq[kPer - 1]) : yq[0];
#pragma unroll
  for (int off = kSplit / 2; off > 0; off /= 2) y += __shfl_xor_sync(0xffffffffu, y, off);
  if (s == 0 && live) {
    y += Dc * u;
    y *= zz / (1.f + expf(-zz));
    a.y[c] = y;
  }
#pragma unroll
  for (int q = 0; q < kPer; ++q)
    if (on[q]) a.state[c * N + s + q * kSplit] = h[q];
}

int width_index(int ch) { return ch == 32 ? 0 : ch == 16 ? 1 : ch == 8 ? 2 : 3; }

}  // namespace

void mamba_mixer_step(const MambaStepArgs& a, cudaStream_t stream) {
  MambaStepShape sh;
  sh.rows = 1, sh.d_inner = a.d_inner, sh.conv_width = 1, sh.dt_rank = a.dt_rank, sh.d_state = a.d_state;
  sh.bf16_weights = ((reinterpret_cast<uintptr_t>(a.w_x) | reinterpret_cast<uintptr_t>(a.w_dt)) & 15u) == 0;
  if (!mamba_mixer_step_ok(sh) || !a.xc || !a.z || !a.A || !a.state || !a.dbc || !a.dt || !a.y)
    fail(Status::invalid_argument,
         "mamba_mixer_step: needs d_inner a multiple of 8 up to " + std::to_string(kMambaStepMaxInner) +
             ", dt_rank a multiple of 8, d_state in [1, " + std::to_string(kMambaStepMaxState) +
             "], 16-byte aligned weights and every buffer; got d_inner " + std::to_string(a.d_inner) + ", dt_rank " +
             std::to_string(a.dt_rank) + ", d_state " + std::to_string(a.d_state));
  if (a.channels != 0 && !mamba_step_width_ok(a.channels))
    fail(Status::invalid_argument,
         "mamba_mixer_step: channels per block must be 8, 16, 32 or 64 (0: automatic), got " + std::to_string(a.channels));
  const int* resident = nullptr;
  int sms = 0;
#if defined(FLASHKIT_WITH_CUDA)
  sms = cuda_device_info().sms;
  // Which cluster sizes fit, per width and device (queried with the largest shared memory the kernel takes, so it
  // holds for every shape); entry c from the instantiation of cluster size c.
  static thread_local int dev_cached = -1;
  static thread_local ClusterResidency res[4];  // widths 32, 16, 8, 64
  int dev = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  if (dev != dev_cached) {
    auto query = [](auto kern2, auto kern4, auto kern8, auto kern16, int ch) {
      const int threads = int(mamba_step_threads(ch));
      const size_t most = size_t(mamba_step_smem_bytes(kMambaStepMaxInner, kMambaStepMaxProjRows - 32, 16, ch));
      ClusterResidency r{};
      r[2] = query_cluster_residency(reinterpret_cast<const void*>(kern2), threads, most)[2];
      r[4] = query_cluster_residency(reinterpret_cast<const void*>(kern4), threads, most)[4];
      r[8] = query_cluster_residency(reinterpret_cast<const void*>(kern8), threads, most)[8];
      r[16] = query_cluster_residency(reinterpret_cast<const void*>(kern16), threads, most)[16];
      return r;
    };
    res[0] = query(mamba_step_kernel<32, 2>, mamba_step_kernel<32, 4>, mamba_step_kernel<32, 8>,
                   mamba_step_kernel<32, 16>, 32);
    res[1] = query(mamba_step_kernel<16, 2>, mamba_step_kernel<16, 4>, mamba_step_kernel<16, 8>,
                   mamba_step_kernel<16, 16>, 16);
    res[2] = query(mamba_step_kernel<8, 2>, mamba_step_kernel<8, 4>, mamba_step_kernel<8, 8>,
                   mamba_step_kernel<8, 16>, 8);
    res[3] = query(mamba_step_kernel<64, 2>, mamba_step_kernel<64, 4>, mamba_step_kernel<64, 8>,
                   mamba_step_kernel<64, 16>, 64);
    dev_cached = dev;
  }
  const int ch = mamba_step_channels(a.d_inner, sms, a.channels);
  resident = res[width_index(ch)].data();
#else
  const int ch = mamba_step_channels(a.d_inner, sms, a.channels);
#if defined(FLASHKIT_CUDA_EMU)  // the CPU emulation (tools/cuda_emu/run_mamba_step.sh) runs every cluster size
  static const int emu_resident[17] = {0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  resident = emu_resident;
#endif
#endif
  const int proj_rows = a.dt_rank + 2 * a.d_state;
  const int cl = a.cluster > 0 ? a.cluster : mamba_step_cluster(a.d_inner, ch, proj_rows, resident);
  if (cl != 1 && cl != 2 && cl != 4 && cl != 8 && cl != 16)
    fail(Status::invalid_argument, "mamba_mixer_step: cluster must be 1, 2, 4, 8 or 16, got " + std::to_string(cl));
  if (cl > 1 && (!resident || resident[cl] <= 0))
    fail(Status::invalid_argument, "mamba_mixer_step: clusters of " + std::to_string(cl) + " blocks of " +
                                       std::to_string(ch) + " channels do not run here");
  const size_t smem = size_t(mamba_step_smem_bytes(a.d_inner, a.dt_rank, a.d_state, ch));
  const int64_t blocks = (mamba_step_blocks(a.d_inner, ch) + cl - 1) / cl * cl;
  using Kernel = void (*)(MambaStepArgs);
  static const Kernel kernels[4][5] = {
      {mamba_step_kernel<32, 1>, mamba_step_kernel<32, 2>, mamba_step_kernel<32, 4>, mamba_step_kernel<32, 8>,
       mamba_step_kernel<32, 16>},
      {mamba_step_kernel<16, 1>, mamba_step_kernel<16, 2>, mamba_step_kernel<16, 4>, mamba_step_kernel<16, 8>,
       mamba_step_kernel<16, 16>},
      {mamba_step_kernel<8, 1>, mamba_step_kernel<8, 2>, mamba_step_kernel<8, 4>, mamba_step_kernel<8, 8>,
       mamba_step_kernel<8, 16>},
      {mamba_step_kernel<64, 1>, mamba_step_kernel<64, 2>, mamba_step_kernel<64, 4>, mamba_step_kernel<64, 8>,
       mamba_step_kernel<64, 16>}};
  const int log2cl = cl == 1 ? 0 : cl == 2 ? 1 : cl == 4 ? 2 : cl == 8 ? 3 : 4;
  const Kernel kern = kernels[width_index(ch)][log2cl];
  launch_clustered("mamba_mixer_step", unsigned(cl), kern, dim3(unsigned(blocks), 1, 1),
                   dim3(unsigned(mamba_step_threads(ch))), smem, stream, a);
}

}  // namespace flashkit::engine::cuda
