// The CUDA side of the attention op's dispatch (ops/cuda_dispatch.hpp): takes the validated arguments, asks the
// pure choice functions (attention_choice.hpp) which kernel and configuration to run for this device and the
// call's Tuning, allocates the workspace (split-KV partials, repacked operands) from the stream-ordered pool,
// launches through the kernels' launchers (kernels/cuda/flash_api.hpp) and reports OpCost.
//   impl automatic/flash -> the flash kernels; seqlen_q <= 16 takes the decode family (kernels/cuda/decode/).
//   impl standard        -> the cuBLAS baseline (standard.cu).
// Kernels run on the calling thread's stream (fk_cuda_set_stream; default: the legacy default stream).
// Supported dtypes on CUDA: bf16 and f16. head_dim: any multiple of 8 up to 256, padded up to 64/128/256
// inside the kernels (zero-filled loads, masked stores).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/cuda_check.hpp"
#include "core/cuda_device.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/cuda/flash_api.hpp"
#include "ops/attention_choice.hpp"
#include "ops/cuda_dispatch.hpp"

namespace flashkit {

void cuda_copy_to_host(void* dst, const void* src, size_t bytes, int device_index) {
  check_cuda(cudaSetDevice(device_index), "cudaSetDevice");
  check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy(cu_seqlens)");
}

namespace {

using kernels::AttentionBwdArgs;
using kernels::AttentionFwdArgs;
using kernels::AttentionShape;
using kernels::AttnOperand;

struct Workspace {
  void* p = nullptr;
  cudaStream_t s;
  Workspace(size_t bytes, cudaStream_t stream) : s(stream) {
    if (bytes) check_cuda(cudaMallocAsync(&p, bytes, stream), "cudaMallocAsync(attention workspace)");
  }
  ~Workspace() {
    if (p) cudaFreeAsync(p, s);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
};

// The current device's info; the first call per device also keeps freed workspace in the stream-ordered pool (the
// default release threshold of 0 returns it to the driver at every synchronization, and the next cudaMallocAsync
// maps it again: ~100 us).
DeviceInfo prepare_device() {
  static std::mutex mu;
  static std::vector<bool> pooled;
  const int dev = cuda_current_device();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (int(pooled.size()) <= dev) pooled.resize(dev + 1, false);
    if (!pooled[dev]) {
      cudaMemPool_t pool;
      check_cuda(cudaDeviceGetDefaultMemPool(&pool, dev), "cudaDeviceGetDefaultMemPool");
      uint64_t keep = UINT64_MAX;
      check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute");
      pooled[dev] = true;
    }
  }
  return cuda_device_info();
}

// The counter merge's arrival counters (FwdParams::decode_counters): slices of one zeroed arena per device, kept for
// the process. Every launch puts its tiles' counters back to 0, so a slice stays zero between launches and no memset
// node sits between two PDL-launched calls. A slice is never used by two launches that may run at once: eager calls
// take their stream's slice (calls on one stream are ordered), and each call captured into a graph takes a slice of
// its own (a graph's launches are ordered; two executables instantiated from one graph must not run at once).
// nullptr when the arena is missing during a capture (creating it there would put nodes into the graph) or full:
// the caller merges with the combine launch instead.
unsigned int* decode_counters(cudaStream_t stream, int64_t n) {
  constexpr int64_t kArena = int64_t(1) << 18;  // counters per device (1 MiB)
  struct Arena {
    unsigned int* base = nullptr;
    int64_t used = 0;
    std::map<cudaStream_t, std::pair<int64_t, int64_t>> eager;  // stream -> (offset, size)
  };
  static std::mutex mu;
  static std::map<int, Arena> arenas;
  const int dev = cuda_current_device();
  std::lock_guard<std::mutex> lock(mu);
  Arena& ar = arenas[dev];
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream, &capturing), "cudaStreamIsCapturing(decode counters)");
  const bool captured = capturing != cudaStreamCaptureStatusNone;
  if (!ar.base) {
    if (captured) return nullptr;
    check_cuda(cudaMalloc(&ar.base, size_t(kArena) * sizeof(unsigned int)), "cudaMalloc(decode counters)");
    check_cuda(cudaMemsetAsync(ar.base, 0, size_t(kArena) * sizeof(unsigned int), stream), "cudaMemset(decode counters)");
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize(decode counters)");  // zero for every stream
  }
  if (!captured) {
    const auto it = ar.eager.find(stream);
    if (it != ar.eager.end() && it->second.second >= n) return ar.base + it->second.first;
  }
  const int64_t take = (std::max<int64_t>(n, captured ? 1 : 256) + 31) / 32 * 32;
  if (ar.used + take > kArena) return nullptr;
  const int64_t at = ar.used;
  ar.used += take;
  if (!captured) ar.eager[stream] = {at, take};
  return ar.base + at;
}

// The flash kernels put sequences on grid.z and heads on grid.y (at most 65535 each).
void check_grid_limits(const AttentionShape& sh) {
  if (sh.batch > 65535)
    fail(Status::unsupported, "CUDA flash attention: at most 65535 sequences per call (batch, or num_seqs when "
                              "varlen), got " + std::to_string(sh.batch) + "; split the call");
  if (sh.heads > 65535)
    fail(Status::unsupported, "CUDA flash attention: at most 65535 heads, got " + std::to_string(sh.heads));
}

int64_t batch_slots(const AttentionShape& s) { return s.varlen() ? 1 : s.batch; }
int64_t num_rows(const AttentionShape& s) { return batch_slots(s) * s.heads * s.seqlen_q; }

// The kernels load and store 16-byte chunks: operands need 16-byte aligned rows. Others are repacked.
bool aligned(const AttnOperand& t) {
  return (reinterpret_cast<uintptr_t>(t.data) % 16 == 0) && t.stride_b % 8 == 0 && t.stride_s % 8 == 0 &&
         t.stride_h % 8 == 0;
}

struct Repack {
  std::vector<Workspace*> bufs;
  ~Repack() {
    for (auto* b : bufs) delete b;
  }
  // Replaces `t` by a contiguous copy when it is not aligned; copy_in copies the data.
  AttnOperand make(const AttnOperand& t, int64_t B, int64_t S, int64_t H, int64_t D, bool copy_in, cudaStream_t st) {
    if (aligned(t)) return t;
    auto* w = new Workspace(size_t(B * S * H * D) * 2, st);
    bufs.push_back(w);
    AttnOperand c{w->p, S * H * D, H * D, D};
    if (copy_in) cuda::copy_operand16(c.data, c, t.data, t, B, S, H, D, st);
    return c;
  }
};

// Key blocks a forward tile of BM rows visits, summed over tiles and sequences (for the FLOP count).
double fwd_tile_pairs(const AttentionShape& sh, const kernels::AttentionMask& m, const std::vector<int32_t>& cu, int BM,
                      int BN) {
  double pairs = 0;
  for (int64_t b = 0; b < sh.batch; ++b) {
    int64_t nq = sh.seqlen_q, nk = sh.seqlen_k;
    if (sh.varlen()) {
      nq = cu[b + 1] - cu[b];
      nk = cu[sh.batch + 1 + b + 1] - cu[sh.batch + 1 + b];
    }
    for (int64_t m0 = 0; m0 < nq; m0 += BM) {
      const int64_t i1 = std::min(m0 + BM, nq) - 1;
      const int64_t lo = m.lo(m0, nq, nk), hi = m.hi(i1, nq, nk);
      if (hi > lo) pairs += double((hi + BN - 1) / BN - lo / BN);
    }
    if (!sh.varlen()) {
      pairs *= double(sh.batch);
      break;
    }
  }
  return pairs;
}

double operand_bytes(const AttentionShape& s, bool kv) {
  return double(batch_slots(s)) * (kv ? s.seqlen_k * s.kv_heads : s.seqlen_q * s.heads) * s.head_dim * 2;
}

}  // namespace

void cuda_attention_forward(const AttentionFwdArgs& a0, const std::vector<int32_t>& host_cu, AttentionImpl impl,
                            const Tuning& tuning, OpCost* cost) {
  const DeviceInfo dev = prepare_device();
  const cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream());
  const AttentionShape& sh = a0.shape;
  const std::vector<int32_t>& cu = host_cu;  // validated host copy from src/ops
  const double qb = operand_bytes(sh, false), kvb = operand_bytes(sh, true);
  const double rows = double(num_rows(sh));
  OpCost c;
  if (impl == AttentionImpl::standard) {
    c.workspace_bytes = cuda::standard_forward(a0, cu.data(), stream);
    double nn = 0;
    for (int64_t b = 0; b < sh.batch; ++b)
      nn += sh.varlen() ? double(cu[b + 1] - cu[b]) * double(cu[sh.batch + 2 + b] - cu[sh.batch + 1 + b])
                        : double(sh.seqlen_q) * double(sh.seqlen_k);
    nn *= double(sh.heads);
    c.flops = 4.0 * nn * double(sh.head_dim);
    c.bytes_read = qb + 2 * kvb + nn * 4 /*S*/ + nn * 2 /*P*/;
    c.bytes_written = qb + rows * 4 + nn * 4 + nn * 2;
    c.model = "cuda standard: q,k,v read once, o,lse written once, S (f32) and P (16-bit) each written and read once";
    c.kernel = "cuda.standard.cublas";
    if (cost) *cost = c;
    return;
  }
  if (sh.max_seqlen_q == 0) {
    if (cost) *cost = c;
    return;
  }
  check_grid_limits(sh);
  AttentionFwdArgs a = a0;
  Repack rp;
  const int64_t B = batch_slots(sh);
  a.q = rp.make(a0.q, B, sh.seqlen_q, sh.heads, sh.head_dim, true, stream);
  a.k = rp.make(a0.k, B, sh.seqlen_k, sh.kv_heads, sh.head_dim, true, stream);
  a.v = rp.make(a0.v, B, sh.seqlen_k, sh.kv_heads, sh.head_dim, true, stream);
  a.o = rp.make(a0.o, B, sh.seqlen_q, sh.heads, sh.head_dim, false, stream);

  const int dpad = cuda::padded_head_dim(sh.head_dim);
  // The decode plan reads the decode kernel's cluster residency only when a cluster merge is in question.
  const ClusterResidency res =
      fwd_needs_decode_residency(sh, dev, tuning)
          ? cuda::decode_cluster_residency(a.dtype, dpad, cuda::decode_residency_is_narrow(dpad, tuning))
          : ClusterResidency{};
  FwdChoice choice = choose_fwd(sh, a.mask, dev, tuning, res);
  const int D = choice.dpad;

  cuda::FwdParams p;
  p.a = a;
  p.num_rows = num_rows(sh);
  std::unique_ptr<Workspace> part;
  if (choice.kernel == CudaKernel::decode) {
    p.pack_gqa = true;
    p.decode_kernel = choice.decode.kernel;
    p.num_splits = choice.decode.splits;
    p.cluster = choice.decode.cluster;
    p.pdl = choice.decode.pdl;
    p.decode_narrow = choice.decode.narrow;
    p.decode_prefetch = choice.decode.prefetch;
    if (choice.decode.merge == cuda::DecodeMergeKind::counter) {
      p.decode_counters = decode_counters(stream, choice.decode.mtiles);
      if (!p.decode_counters) {  // no counters (a capture before the arena exists, or a full arena): the combine
        choice.decode.merge = cuda::DecodeMergeKind::combine;
        choice.decode.prefetch = p.decode_prefetch = false;
      }
    }
    if (cuda::decode_merge_uses_hbm_partials(choice.decode.merge)) {
      const size_t part_bytes = size_t(p.num_splits) * size_t(p.num_rows) * (D * 4 + 4);
      part = std::make_unique<Workspace>(part_bytes, stream);
      p.o_part = static_cast<float*>(part->p);
      p.lse_part = p.o_part + size_t(p.num_splits) * p.num_rows * D;
    }
    cuda::launch_decode(a.dtype, D, p, stream);
    if (choice.decode.merge == cuda::DecodeMergeKind::combine) cuda::launch_split_combine(p, D, stream);
  } else {
    // A Hopper launcher may decline: the ws kernel when TMA cannot describe K/V (or K is empty), either when its
    // sm_90a code does not run on this device. Then the choice is asked again without it.
    bool launched = false;
    if (choice.kernel == CudaKernel::fwd_sm90_ws) {
      p.ws_persist_ctas = choice.persist_ctas;
      p.ws_overlap_epilogue = choice.overlap_epilogue;
      p.ws_tma_store_o = choice.tma_store_o;
      choice.dense = ws_dense_fwd(sh, a.mask, a.softcap, choice, tuning);
      p.ws_dense = choice.dense;
      launched = cuda::launch_fwd_sm90_ws(a.dtype, D, choice.tile_n, choice.pingpong, p, stream);
      if (!launched) choice = choose_fwd(sh, a.mask, dev, tuning, res, /*allow_ws=*/false);
    }
    if (!launched && choice.kernel == CudaKernel::fwd_sm90) {
      launched = cuda::launch_fwd_sm90(a.dtype, D, choice.config, p, stream);
      if (!launched) {
        DeviceInfo no_sm90 = dev;
        no_sm90.sm90a = false;
        choice = choose_fwd(sh, a.mask, no_sm90, tuning, res);
      }
    }
    if (!launched) cuda::launch_fwd_sm80(a.dtype, D, p, stream);
  }
  if (a.o.data != a0.o.data) cuda::copy_operand16(a0.o.data, a0.o, a.o.data, a.o, B, sh.seqlen_q, sh.heads, sh.head_dim, stream);
  if (!cost) return;  // the cost model below (strings, a tile walk) is host time a decode call need not pay

  const bool decode = choice.kernel == CudaKernel::decode;
  const double pairs = decode ? 0 : fwd_tile_pairs(sh, a.mask, cu, choice.tile_m, choice.tile_n);
  c.flops = decode ? 4.0 * double(sh.batch) * sh.kv_heads * double((sh.group() * sh.max_seqlen_q + 15) / 16 * 16) *
                         double(sh.max_seqlen_k) * D
                   : 4.0 * pairs * sh.heads * choice.tile_m * choice.tile_n * D;
  c.bytes_read = qb + 2 * kvb;
  c.bytes_written = qb + rows * 4;
  const bool hbm_partials = decode && cuda::decode_merge_uses_hbm_partials(choice.decode.merge);
  if (hbm_partials) {
    const double pb = double(p.num_splits) * rows * (D * 4 + 4);
    c.bytes_written += pb;
    c.bytes_read += pb;
    c.workspace_bytes = pb;
  }
  c.model = "cuda flash: q,k,v read once and o,lse written once (K/V re-reads across query tiles assumed served by L2)" +
            std::string(hbm_partials ? "; plus split-KV partials (f32) written and read once"
                        : decode && p.cluster ? "; split-KV partials merged through distributed shared memory (clusters)"
                                              : "");
  c.kernel = kernel_name(choice, a.dtype);
  *cost = c;
}

void cuda_attention_backward(const AttentionBwdArgs& g0, const std::vector<int32_t>& host_cu, AttentionImpl impl,
                             const Tuning& tuning, OpCost* cost) {
  const DeviceInfo dev = prepare_device();
  const cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream());
  const AttentionShape& sh = g0.fwd.shape;
  const std::vector<int32_t>& cu = host_cu;  // validated host copy from src/ops
  const double qb = operand_bytes(sh, false), kvb = operand_bytes(sh, true);
  const double rows = double(num_rows(sh));
  OpCost c;
  if (impl == AttentionImpl::standard) {
    c.workspace_bytes = cuda::standard_backward(g0, cu.data(), stream);
    double nn = 0;
    for (int64_t b = 0; b < sh.batch; ++b)
      nn += sh.varlen() ? double(cu[b + 1] - cu[b]) * double(cu[sh.batch + 2 + b] - cu[sh.batch + 1 + b])
                        : double(sh.seqlen_q) * double(sh.seqlen_k);
    nn *= double(sh.heads);
    c.flops = 10.0 * nn * double(sh.head_dim);
    c.bytes_read = 3 * qb + 2 * kvb + rows * 4 + nn * (4 + 4 + 4 + 4 + 2 + 2 + 2);
    c.bytes_written = qb + 2 * kvb + nn * (4 + 4 + 2 + 4 + 2);
    c.model = "cuda standard backward: inputs read once, grads written once, S/dP (f32) and P/dS (16-bit) "
              "materialized and re-read by each consumer";
    c.kernel = "cuda.standard.cublas";
    if (cost) *cost = c;
    return;
  }
  check_grid_limits(sh);
  BwdChoice choice = choose_bwd(sh, g0.fwd.softcap, dev, tuning);
  const int D = choice.dpad;
  AttentionBwdArgs g = g0;
  Repack rp;
  const int64_t B = batch_slots(sh);
  g.fwd.q = rp.make(g0.fwd.q, B, sh.seqlen_q, sh.heads, sh.head_dim, true, stream);
  g.fwd.k = rp.make(g0.fwd.k, B, sh.seqlen_k, sh.kv_heads, sh.head_dim, true, stream);
  g.fwd.v = rp.make(g0.fwd.v, B, sh.seqlen_k, sh.kv_heads, sh.head_dim, true, stream);
  g.fwd.o = rp.make(g0.fwd.o, B, sh.seqlen_q, sh.heads, sh.head_dim, true, stream);
  g.dout = rp.make(g0.dout, B, sh.seqlen_q, sh.heads, sh.head_dim, true, stream);
  g.dq = rp.make(g0.dq, B, sh.seqlen_q, sh.heads, sh.head_dim, false, stream);
  g.dk = rp.make(g0.dk, B, sh.seqlen_k, sh.kv_heads, sh.head_dim, false, stream);
  g.dv = rp.make(g0.dv, B, sh.seqlen_k, sh.kv_heads, sh.head_dim, false, stream);

  cuda::BwdParams p;
  p.g = g;
  p.num_rows = num_rows(sh);
  const size_t acc_bytes = size_t(p.num_rows) * D * 4, dsum_bytes = size_t(p.num_rows) * 4;
  Workspace ws(acc_bytes + dsum_bytes, stream);
  p.dq_accum = static_cast<float*>(ws.p);
  p.dsum = reinterpret_cast<float*>(static_cast<char*>(ws.p) + acc_bytes);
  if (acc_bytes) check_cuda(cudaMemsetAsync(p.dq_accum, 0, acc_bytes, stream), "cudaMemsetAsync(dq accumulator)");
  cuda::launch_bwd_preprocess(p, stream);
  bool launched = false;
  if (choice.kernel == CudaKernel::bwd_sm90_ws) {
    launched = cuda::launch_bwd_sm90_ws(g.fwd.dtype, D, p, stream);
    // Declined (no TMA map for these operands, another register budget: said once on stderr; no sm_90a code): v6.
    if (!launched) choice = choose_bwd(sh, g0.fwd.softcap, dev, tuning, /*allow_ws=*/false);
  }
  if (!launched && choice.kernel == CudaKernel::bwd_sm90) {
    launched = cuda::launch_bwd_sm90(g.fwd.dtype, D, choice.config, p, stream);
    if (!launched) {  // its sm_90a code does not run on this device
      DeviceInfo no_sm90 = dev;
      no_sm90.sm90a = false;
      choice = choose_bwd(sh, g0.fwd.softcap, no_sm90, tuning);
    }
  }
  if (!launched) cuda::launch_bwd_sm80(g.fwd.dtype, D, p, stream);
  cuda::launch_bwd_postprocess(p, D, stream);
  if (g.dq.data != g0.dq.data) cuda::copy_operand16(g0.dq.data, g0.dq, g.dq.data, g.dq, B, sh.seqlen_q, sh.heads, sh.head_dim, stream);
  if (g.dk.data != g0.dk.data) cuda::copy_operand16(g0.dk.data, g0.dk, g.dk.data, g.dk, B, sh.seqlen_k, sh.kv_heads, sh.head_dim, stream);
  if (g.dv.data != g0.dv.data) cuda::copy_operand16(g0.dv.data, g0.dv, g.dv.data, g.dv, B, sh.seqlen_k, sh.kv_heads, sh.head_dim, stream);

  // FLOPs counted on the sm_80 backward's tiles whichever kernel ran (the numbers benchmarks compare over time).
  const auto bt = cuda::sm80_bwd_tile(D);
  const int BM = 64, BN = bt.bn();
  const double pairs = fwd_tile_pairs(sh, g.fwd.mask, cu, BM, BN);
  c.flops = 10.0 * pairs * sh.heads * BM * BN * D;  // 5 GEMMs of 2 flops per MAC
  c.bytes_read = 3 * qb + 2 * kvb + rows * 4 + qb /*o in preprocess*/ + rows * D * 4 /*dq accum*/;
  c.bytes_written = qb + 2 * kvb + rows * 4 /*dsum*/ + rows * D * 4 /*dq accumulator, atomics assumed L2-merged*/;
  c.workspace_bytes = double(acc_bytes + dsum_bytes);
  c.model = "cuda flash backward: q,k,v,o,dout,lse read once, dq,dk,dv written once, plus the f32 dq accumulator "
            "(written once, read once) and rowsum(dO*O); K/V-tile re-reads and dq atomics assumed served by L2";
  c.kernel = kernel_name(choice, g.fwd.dtype);
  if (cost) *cost = c;
}

}  // namespace flashkit
