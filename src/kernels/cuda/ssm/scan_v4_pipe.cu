// Generation 13 of the scan forward (d_state <= 16; docs/worklog/ssm-scan.md "generation 13"): generation 11 (the lean
// v4 block: 32 channels, 128 threads, 4 states per thread) with its chunk phases software-pipelined. Generation 11
// runs each chunk as prologue (softplus: FMA pipe) -> barrier -> recurrence (ex2: MUFU) -> barrier -> epilogue (sums,
// silu: FMA pipe), so within a warp one pipe idles while the other works, and only ~3 warps per scheduler overlap
// them. Here iteration k runs, between the same two points of one barrier, the recurrence of chunk k, the prologue of
// chunk k + 1 and the epilogue of chunk k - 1: one barrier per chunk instead of two, and three independent pieces of
// work in one basic block. Their shared-memory loads come first (into registers), so that the prologue's and the
// epilogue's arithmetic has no memory order against the recurrence's loads and stores and ptxas may interleave it.
// Term and partial-sum tiles are double-buffered; the ring has 5 stages because the epilogue of chunk k - 1 still
// reads its stage while chunk k is scanned (chunks k + 1..k + 3 in flight, as in generation 11).
// Past the ends (chunk -1 at k = 0, chunk `chunks` at the last k) the pieces run on stale tiles and store nothing.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "core/cuda_check.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/cuda/ssm/scan_v4_block.cuh"
#include "kernels/cuda/ssm/ssm_cuda.hpp"

namespace flashkit::kernels {
namespace {

using namespace scan_v4_detail;

constexpr int kTC = 16, kPipeStages = 5;

// on ? x : y as one selp that computes both sides: a plain ?: lets the compiler sink x's computation into a branch,
// and a branch ends the basic block in which ptxas may interleave the chunk's three pieces of work.
__device__ __forceinline__ float select_f(bool on, float x, float y) {
#ifdef __CUDA_ARCH__
  float r;
  asm("{\n .reg .pred p;\n setp.ne.u32 p, %3, 0;\n selp.f32 %0, %1, %2, p;\n}" : "=f"(r) : "f"(x), "f"(y), "r"(unsigned(on)));
  return r;
#else
  return on ? x : y;
#endif
}

// softplus_lean (scan_v4_block.cuh) with its x > 15 cut as select_f: nvcc turns that ?: into a branch around the
// series.
__device__ __forceinline__ float softplus_sel(float x) {
  const float w = __expf(-fabsf(x));
  const float s = __fdividef(w, 2.f + w), s2 = s * s;
  float p = 1.f / 13.f;
  p = fmaf(p, s2, 1.f / 11.f);
  p = fmaf(p, s2, 1.f / 9.f);
  p = fmaf(p, s2, 1.f / 7.f);
  p = fmaf(p, s2, 1.f / 5.f);
  p = fmaf(p, s2, 1.f / 3.f);
  p = fmaf(p, s2, 1.f);
  return select_f(x > 15.f, x, fmaxf(x, 0.f) + 2.f * s * p);
}

template <int NPT>
struct Pipe {
  using P = V4<NPT, kTC, kPipeStages>;
  static constexpr int kTermFloats = 2 * kTC * kCh;                 // [TC][32] {dt, dt u}
  static constexpr int kYFloats = kTC * P::SPLIT * P::kYRow;        // [TC][SPLIT][kYRow]
  static constexpr size_t kSmemBytes = 4 * (size_t(kPipeStages) * P::kStageFloats + 2 * kTermFloats + 2 * kYFloats);
};

// 3 blocks per SM: 68 KB of dynamic shared memory each.
template <int NPT>
__global__ void __launch_bounds__(V4<NPT, kTC, kPipeStages>::kThreads, 3) scan_v4_pipe_kernel(ScanArgs a, bool vec) {
  using P = V4<NPT, kTC, kPipeStages>;
  using Q = Pipe<NPT>;
  constexpr int TC = kTC, S = kPipeStages, SPLIT = P::SPLIT;
  static_assert(P::kItemIters == 1 && P::kItems == P::kThreads, "one (step, 4-channel group) item per thread");
  extern __shared__ float4 smem4[];  // float4: 16-byte aligned
  float* smem = reinterpret_cast<float*>(smem4);
  float* term_tiles = smem + S * P::kStageFloats;
  float* y_tiles = term_tiles + 2 * Q::kTermFloats;
  const int64_t b = blockIdx.y, c0 = int64_t(blockIdx.x) * kCh;
  const int tid = threadIdx.x, N = int(a.d_state);
  const int rc = tid / SPLIT, s = tid % SPLIT;  // the recurrence: channel c0 + rc, states s NPT ..
  float A2[NPT], h[NPT];
#pragma unroll
  for (int i = 0; i < NPT; ++i) {
    const int n = s * NPT + i;
    const bool on = c0 + rc < a.d_inner && n < N;
    A2[i] = on ? a.A[(c0 + rc) * N + n] * kLog2e : 0.f;
    h[i] = on && a.state ? a.state[(b * a.d_inner + c0 + rc) * N + n] : 0.f;
  }
  // This thread's item: step tt of every chunk, channels c0 + 4 q .. + 3.
  const int q = tid % kGroups, tt = tid / kGroups, o = tt * kCh + 4 * q;
  const int64_t cq = c0 + 4 * q, ch_left = a.d_inner - cq;
  const int y_live = int(ch_left < 0 ? 0 : ch_left > 4 ? 4 : ch_left);
  float bias[4], Dc[4];
  bool dt_chan[4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    dt_chan[kk] = kk < y_live;
    bias[kk] = dt_chan[kk] && a.delta_bias ? a.delta_bias[cq + kk] : 0.f;
    Dc[kk] = dt_chan[kk] && a.D ? a.D[cq + kk] : 0.f;
  }
  const int64_t chunks = (a.seqlen + TC - 1) / TC;
  ChunkSources<NPT, TC, S, true> src;
  src.init(a, b, c0);
  // Stage slot of chunk k + j from k's slot sk (j in -1..S-2): no 64-bit remainder per iteration.
  auto stage = [&](int sk, int j) {
    const int x = sk + j;
    return smem + (x < 0 ? x + S : x >= S ? x - S : x) * P::kStageFloats;
  };
  auto term_tile = [&](int64_t kc) { return reinterpret_cast<float2*>(term_tiles + (kc & 1) * Q::kTermFloats); };
  auto y_tile = [&](int64_t kc) { return y_tiles + (kc & 1) * Q::kYFloats; };

  // The prologue of chunk kc from its u and delta (this thread's own copies): {dt, dt u} into kc's term tile.
  auto terms = [&](int64_t kc, float4 u4, float4 d4) {
    const float u[4] = {u4.x, u4.y, u4.z, u4.w}, dl[4] = {d4.x, d4.y, d4.z, d4.w};
    const bool t_on = kc * TC + tt < a.seqlen;
    float term[8];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const float x = dl[kk] + bias[kk];
      const float dt = select_f(t_on & dt_chan[kk], select_f(a.softplus, softplus_sel(x), x), 0.f);  // past the
                                                                                           // end: h unchanged
      term[2 * kk] = dt;
      term[2 * kk + 1] = dt * u[kk];
    }
    float4* dst = reinterpret_cast<float4*>(term_tile(kc) + o);
    dst[0] = make_float4(term[0], term[1], term[2], term[3]);
    dst[1] = make_float4(term[4], term[5], term[6], term[7]);
  };
  // The recurrence of chunk kc: its terms and B / C (visible after the last barrier), partials into kc's y tile.
  auto recurrence = [&](int64_t kc, const float* st) {
    const float2* sTerm = term_tile(kc);
    const float* sB = st + 3 * TC * kCh;
    const float* sC = sB + TC * kStates;
    float* sY = y_tile(kc);
#pragma unroll
    for (int r = 0; r < TC; ++r) {
      const float2 term = sTerm[r * kCh + rc];
      const typename Vec<NPT>::T bv = *reinterpret_cast<const typename Vec<NPT>::T*>(sB + r * kStates + s * NPT);
      const typename Vec<NPT>::T cv = *reinterpret_cast<const typename Vec<NPT>::T*>(sC + r * kStates + s * NPT);
      const float* Bn = reinterpret_cast<const float*>(&bv);
      const float* Cn = reinterpret_cast<const float*>(&cv);
      float acc = 0.f;
#pragma unroll
      for (int i = 0; i < NPT; ++i) {
        h[i] = ex2_approx(term.x * A2[i]) * h[i] + term.y * Bn[i];
        acc = i == 0 ? Cn[0] * h[0] : acc + Cn[i] * h[i];
      }
      sY[(r * SPLIT + s) * P::kYRow + rc] = acc;
    }
  };
  // The epilogue of chunk kc from its partials, u and z (loaded before): y's row piece, stored where the step exists.
  float* y_out = a.y + b * a.y_b + int64_t(tt) * a.y_t + cq - int64_t(TC) * a.y_t;  // chunk -1's row piece
  auto outputs = [&](int64_t kc, const float4 (&part)[SPLIT], float4 u4, float4 z4) {
    float4 acc = part[0];
#pragma unroll
    for (int r = 1; r < SPLIT; ++r) acc.x += part[r].x, acc.y += part[r].y, acc.z += part[r].z, acc.w += part[r].w;
    const float u[4] = {u4.x, u4.y, u4.z, u4.w}, zz[4] = {z4.x, z4.y, z4.z, z4.w};
    float y[4] = {acc.x, acc.y, acc.z, acc.w};
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      y[kk] = (y[kk] + Dc[kk] * u[kk]) * select_f(a.z != nullptr, silu_lean(zz[kk]), 1.f);
    }
    const int64_t t = kc * TC + tt;
    const bool t_on = t >= 0 && t < a.seqlen;
    if (t_on && vec && y_live == 4) {
      *reinterpret_cast<float4*>(y_out) = make_float4(y[0], y[1], y[2], y[3]);
    } else if (t_on) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        if (kk < y_live) y_out[kk] = y[kk];
    }
    y_out += TC * a.y_t;
  };
  auto load_outputs_inputs = [&](int64_t kc, const float* st, float4 (&part)[SPLIT], float4& u4, float4& z4) {
    const float* sY = y_tile(kc);
#pragma unroll
    for (int r = 0; r < SPLIT; ++r) part[r] = *reinterpret_cast<const float4*>(sY + (tt * SPLIT + r) * P::kYRow + 4 * q);
    u4 = *reinterpret_cast<const float4*>(st + o);
    z4 = *reinterpret_cast<const float4*>(st + 2 * TC * kCh + o);  // stale without z: outputs() selects 1, not silu
  };

#pragma unroll
  for (int k = 0; k < S - 2; ++k) {  // chunks 0..S-3; iteration k issues chunk k + S - 2
    if (k < chunks) src.issue(a, vec, stage(0, k));
    cp_async_commit();  // one group per chunk slot, empty ones too: the waits count groups
  }
  cp_async_wait<S - 3>();  // chunk 0 (this thread's copies)
  terms(0, *reinterpret_cast<const float4*>(smem + o), *reinterpret_cast<const float4*>(smem + TC * kCh + o));
  __syncthreads();  // chunk 0's terms and B / C are visible
  int sk = 0;  // k % S
  for (int64_t k = 0; k < chunks; ++k) {
    if (k + S - 2 < chunks) src.issue(a, vec, stage(sk, S - 2));  // the slot of chunk k - 2: free since the barrier
    cp_async_commit();
    cp_async_wait<S - 3>();  // this thread's copies of chunk k + 1 have landed
    const float* nx = stage(sk, 1);
    const float4 nu = *reinterpret_cast<const float4*>(nx + o), nd = *reinterpret_cast<const float4*>(nx + TC * kCh + o);
    float4 part[SPLIT], pu, pz;
    load_outputs_inputs(k - 1, stage(sk, -1), part, pu, pz);
    recurrence(k, stage(sk, 0));
    terms(k + 1, nu, nd);
    outputs(k - 1, part, pu, pz);
    __syncthreads();  // chunk k's partials, chunk k + 1's terms and B / C are visible; chunk k - 1's stage is free
    sk = sk + 1 == S ? 0 : sk + 1;
  }
  {
    float4 part[SPLIT], pu, pz;
    load_outputs_inputs(chunks - 1, stage(sk, -1), part, pu, pz);
    outputs(chunks - 1, part, pu, pz);
  }
  cp_async_wait<0>();  // no copy outlives the block (the trailing groups are empty)
  if (a.state)
#pragma unroll
    for (int i = 0; i < NPT; ++i) {
      const int n = s * NPT + i;
      if (c0 + rc < a.d_inner && n < N) a.state[(b * a.d_inner + c0 + rc) * N + n] = h[i];
    }
}

template <int NPT>
void launch(const ScanArgs& a, cudaStream_t s) {
  void (*kernel)(ScanArgs, bool) = scan_v4_pipe_kernel<NPT>;
  constexpr size_t smem = Pipe<NPT>::kSmemBytes;
  // Above 48 KB of dynamic shared memory needs an opt-in, once per device (not a stream operation: allowed while a
  // CUDA graph is being captured).
  static std::atomic<uint64_t> opted_in{0};
  int dev = 0;
  check_cuda(cudaGetDevice(&dev), "selective scan v4 pipe: cudaGetDevice");
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if (smem > 48 * 1024 && !(opted_in.load() & bit)) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
               "selective scan v4 pipe: shared memory opt-in");
    opted_in.fetch_or(bit);
  }
  const dim3 grid(unsigned((a.d_inner + kCh - 1) / kCh), unsigned(a.batch));
  constexpr int threads = V4<NPT, kTC, kPipeStages>::kThreads;
  kernel<<<grid, threads, smem, s>>>(a, vector_ok(a));
}

}  // namespace

void launch_scan_v4_pipe(const ScanArgs& a, void* stream) {
  launch<4>(a, static_cast<cudaStream_t>(stream ? stream : cuda_stream()));
  check_cuda(cudaGetLastError(), "selective scan v4 pipe kernel launch");
}

}  // namespace flashkit::kernels
