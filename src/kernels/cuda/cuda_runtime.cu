// CUDA runtime glue: device discovery, checked copies, and the CUDA entry points of ops dispatch.
//   impl automatic/flash -> FlashAttention-2 kernels (flash_fwd.cuh, flash_bwd.cuh); seqlen_q <= 16 takes the
//                           split-KV decode path (flash-decoding) with the GQA group packed into the row tile.
//   impl standard        -> the cuBLAS baseline (standard.cu).
// Kernels run on the calling thread's stream (fk_cuda_set_stream; default: the legacy default stream).
// check_finite is not implemented on CUDA (it would cost a pass over q/k/v); CUDA calls ignore it.
// Supported dtypes on CUDA: bf16 and f16. head_dim: any multiple of 8 up to 256, padded up to 64/128/256
// inside the kernels (zero-filled loads, masked stores).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/env.hpp"
#include "core/cuda_check.hpp"
#include "flashkit/error.hpp"
#include "flashkit/flashkit.h"
#include "flashkit/runtime.hpp"
#include "kernels/cuda/flash_api.hpp"

#ifndef FK_FWD_MT
#define FK_FWD_MT 2  // keep in step with flash_fwd.cuh
#endif
#ifndef FK_BWD_NW
#define FK_BWD_NW 8  // keep in step with flash_bwd.cuh
#endif
#include "ops/cuda_dispatch.hpp"

namespace flashkit {

namespace {
thread_local cudaStream_t g_stream = nullptr;
}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

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

// What the dispatch needs to know about a device, read once per device.
struct DeviceInfo {
  int sms = 0;               // multiprocessors
  int smem_block_optin = 0;  // largest dynamic shared memory one CTA may opt into
  int smem_per_sm = 0;
  int cc_major = 0;          // compute capability
};

// Once per device: keep freed workspace in the stream-ordered pool (the default release threshold of 0
// returns it to the driver at every synchronization, and the next cudaMallocAsync maps it again: ~100 us), and
// read the attributes the dispatch uses. Returns them for the current device.
DeviceInfo prepare_device() {
  static std::mutex mu;
  static std::vector<DeviceInfo> infos;
  int dev = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mu);
  if (int(infos.size()) <= dev) infos.resize(dev + 1);
  DeviceInfo& d = infos[dev];
  if (d.sms == 0) {
    cudaMemPool_t pool;
    check_cuda(cudaDeviceGetDefaultMemPool(&pool, dev), "cudaDeviceGetDefaultMemPool");
    uint64_t keep = UINT64_MAX;
    check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute");
    DeviceInfo n;
    check_cuda(cudaDeviceGetAttribute(&n.smem_block_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
               "cudaDeviceGetAttribute");
    check_cuda(cudaDeviceGetAttribute(&n.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev),
               "cudaDeviceGetAttribute");
    check_cuda(cudaDeviceGetAttribute(&n.sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
    check_cuda(cudaDeviceGetAttribute(&n.cc_major, cudaDevAttrComputeCapabilityMajor, dev), "cudaDeviceGetAttribute");
    d = n;
  }
  return d;
}

// Upper bound on split-KV splits: `dflt` (decode v1: 128, v2: kMaxDecodeSplits) unless FLASHKIT_DECODE_MAX_SPLITS
// overrides it, for tuning (clamped to 1..kMaxDecodeSplits).
int64_t decode_max_splits(int64_t dflt) {
  static const int64_t v = env::integer("FLASHKIT_DECODE_MAX_SPLITS", 0, 1, cuda::kMaxDecodeSplits);
  return v ? v : dflt;
}

// FLASHKIT_SM90=0 keeps the portable sm_80 kernels on Hopper (for A/B runs and as an escape hatch).
bool sm90_allowed() {
  static const bool v = env::flag("FLASHKIT_SM90", true);
  return v;
}

// Resident clusters of each size for decode v2's kernel of this dtype and padded head dim (flash_decode.cuh).
std::array<int, cuda::kMaxDecodeCluster + 1> cluster_residency(DType dt, int dpad) {
  if (dt == DType::bf16)
    return dpad == 64    ? cuda::decode_cluster_residency<__nv_bfloat16, 64>()
           : dpad == 128 ? cuda::decode_cluster_residency<__nv_bfloat16, 128>()
                         : cuda::decode_cluster_residency<__nv_bfloat16, 256>();
  return dpad == 64    ? cuda::decode_cluster_residency<__half, 64>()
         : dpad == 128 ? cuda::decode_cluster_residency<__half, 128>()
                       : cuda::decode_cluster_residency<__half, 256>();
}

// The flash kernels put sequences on grid.z and heads on grid.y (at most 65535 each).
void check_grid_limits(const AttentionShape& sh) {
  if (sh.batch > 65535)
    fail(Status::unsupported, "CUDA flash attention: at most 65535 sequences per call (batch, or num_seqs when "
                              "varlen), got " + std::to_string(sh.batch) + "; split the call");
  if (sh.heads > 65535)
    fail(Status::unsupported, "CUDA flash attention: at most 65535 heads, got " + std::to_string(sh.heads));
}

int dpad_of(int64_t d) { return d <= 64 ? 64 : (d <= 128 ? 128 : 256); }

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
                            bool /*check_finite*/, OpCost* cost) {
  const DeviceInfo dinfo = prepare_device();
  const cudaStream_t stream = g_stream;
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
  const int D = dpad_of(sh.head_dim);
  AttentionFwdArgs a = a0;
  Repack rp;
  const int64_t B = batch_slots(sh);
  a.q = rp.make(a0.q, B, sh.seqlen_q, sh.heads, sh.head_dim, true, stream);
  a.k = rp.make(a0.k, B, sh.seqlen_k, sh.kv_heads, sh.head_dim, true, stream);
  a.v = rp.make(a0.v, B, sh.seqlen_k, sh.kv_heads, sh.head_dim, true, stream);
  a.o = rp.make(a0.o, B, sh.seqlen_q, sh.heads, sh.head_dim, false, stream);

  cuda::FwdParams p;
  p.a = a;
  p.num_rows = num_rows(sh);
  const bool decode = sh.max_seqlen_q <= 16;
  std::unique_ptr<Workspace> part;
  const int BN = decode ? (D == 64 ? 64 : 32) : (D == 256 ? 32 : 64);  // as in flash_fwd.cuh
  if (decode) {
    p.pack_gqa = true;
    const int sms = dinfo.sms;
    const int64_t mtiles = (sh.group() * sh.max_seqlen_q + 15) / 16;
    const int64_t base = mtiles * sh.kv_heads * sh.batch;  // (m-tile, KV head, sequence) tiles
    // FLASHKIT_DECODE_KERNEL=v1: the forward kernel with one warp per CTA (flash_fwd.cuh); v2 (default):
    // flash_decode.cuh. FLASHKIT_DECODE_COMBINE=kernel|fused|cluster|auto: v2's split merge in
    // launch_split_combine, in the kernel (last CTA of a tile), through thread-block clusters (sm_90, where the
    // cluster model below allows; else as auto); auto (default) = kernel.
    // Read once.
    static const int version = 1 + env::choice("FLASHKIT_DECODE_KERNEL", {"v1", "v2"}, 1);
    static const int combine = env::choice("FLASHKIT_DECODE_COMBINE", {"auto", "kernel", "fused", "cluster"}, 0);
    const int optin = dinfo.smem_block_optin, smem_sm = dinfo.smem_per_sm;
    const size_t smem2 = cuda::decode_smem_bytes(D);
    p.decode_version = version == 2 && size_t(optin) >= smem2 ? 2 : 1;  // v2 needs 130-200 KB (sm_90: yes)
    static const bool pdl = env::flag("FLASHKIT_DECODE_PDL", true);
    p.pdl = pdl && p.decode_version == 2 && dinfo.cc_major >= 9;
    if (p.decode_version == 2) {
      // One CTA per SM (its shared memory). Splits s minimize a wave model of the time: ceil(base*s / slots) waves
      // of ceil(blocks/s) 16-key blocks per CTA plus a fixed cost c0 per CTA (prologue, merge: ~64 KB worth of
      // loads, 1024/D blocks); more splits must gain 2% (partials, merge). E.g. H200 (132 slots), 32k keys (2048
      // blocks): batch 1 and 8 KV heads -> 16 splits (128 CTAs, one wave); 1 KV head -> 128; batch 16 x 8 KV heads
      // -> 1; batch 5 x 8 KV heads -> 13 (520 CTAs, ~4 waves).
      const int64_t slots = int64_t(sms) * std::max<int64_t>(1, int64_t(smem_sm) / int64_t(smem2 + 1024));
      int64_t nblocks = (sh.max_seqlen_k + 15) / 16;
      // A left window bounds a tile's visible keys: hi(imax) - lo(imin) <= left + seqlen_q + max(right, 0).
      if (a.mask.window_left >= 0)
        nblocks = std::min<int64_t>(
            nblocks, (a.mask.window_left + sh.max_seqlen_q + std::max<int64_t>(a.mask.window_right, 0)) / 16 + 2);
      const int64_t c0 = 1024 / D;
      const int64_t cap = std::min<int64_t>({std::max<int64_t>(1, nblocks / 2),
                                             decode_max_splits(cuda::kMaxDecodeSplits),
                                             8 * slots / std::max<int64_t>(1, base) + 1});
      int64_t best = 1, best_t = INT64_MAX;
      for (int64_t s = 1; s <= cap; ++s) {
        const int64_t t = (base * s + slots - 1) / slots * ((nblocks + s - 1) / s + c0);
        if (best_t == INT64_MAX || t * 50 < best_t * 49) best_t = t, best = s;
      }
      p.num_splits = int(best);
      if (combine == 3) {
        // Cluster merge (FLASHKIT_DECODE_COMBINE=cluster): the splits of a tile form one cluster, so s <= 16 and a
        // wave holds res[s] tiles (clusters are placed whole inside a GPC: res[s] * s can be well below the slots,
        // e.g. clusters of 16 on a chip whose GPCs have 14-18 free SMs). Same model with that wave; taken when it
        // is at most 1/8 above the unclustered model's best (the merge round trips it removes are not in the
        // model), else the usual path. E.g. H200 batch 1, 32/8 heads, 32k keys: 8 tiles x 16 = 128 CTAs, one wave
        // if 8 clusters of 16 fit (model 136 = the usual 136: clusters); if only 6 fit, 14 splits (155 > 136 * 9/8:
        // the usual 16 splits and merge). One KV head at d256: 16 CTAs (132 vs the usual 20 with 128
        // splits): the usual path. A cluster model that prefers no split at all also keeps the usual path.
        const std::array<int, cuda::kMaxDecodeCluster + 1> res = cluster_residency(a.dtype, D);
        if (res[2] > 0) {
          int64_t cbest = 1, cbest_t = (base + slots - 1) / slots * (nblocks + c0);
          for (int64_t s = 2; s <= std::min<int64_t>(cap, cuda::kMaxDecodeCluster); ++s) {
            if (res[s] < 1) continue;
            const int64_t t = (base + res[s] - 1) / res[s] * ((nblocks + s - 1) / s + c0);
            if (t * 50 < cbest_t * 49) cbest_t = t, cbest = s;
          }
          if (cbest > 1 && cbest_t * 8 <= best_t * 9) p.num_splits = p.cluster = int(cbest);
        }
      }
    } else {
      const int64_t nblocks = (sh.max_seqlen_k + BN - 1) / BN;
      const int64_t resident = D == 256 ? 3 : 6;  // CTAs per SM the decode tiles' shared memory allows
      const int64_t slots = int64_t(sms) * resident;
      // Many (sequence, KV head) tiles: about three waves of CTAs. Few (batch 1): fill ~2/3 of one wave; more
      // splits were measured slower (per-split setup and combine; 2026-11-30, worklog v4).
      int64_t splits = base * 8 <= slots ? std::max<int64_t>(1, (2 * slots / 3) / base) : (slots * 3 + base - 1) / base;
      splits = std::min<int64_t>({splits, std::max<int64_t>(1, nblocks / 4), decode_max_splits(128)});
      p.num_splits = int(std::max<int64_t>(1, splits));
    }
    if (p.num_splits > 1 && p.cluster == 0) {
      // v2: the splits are merged by launch_split_combine (PDL on sm_90) unless FLASHKIT_DECODE_COMBINE=fused asks
      // for the last CTA of each tile to merge them. The separate launch was measured faster even where the
      // partials are small (H200, batch 1, 32/8 heads d128: 81% against 77% of 4.24 TB/s at 32k keys, 66% against
      // 57% at 8k; 2026-11-30, worklog v10): the fused merge costs a memset, a counter round trip and one CTA's
      // serial read of every partial at the tail.
      const bool fused = p.decode_version == 2 && combine == 2;
      // The in-kernel merge's arrival counters (one per tile) live in this call's stream-ordered workspace and are
      // zeroed on the stream: no two calls, streams or CUDA-graph replays can ever share one.
      const size_t part_bytes = size_t(p.num_splits) * size_t(p.num_rows) * (D * 4 + 4);
      const size_t ctr_off = (part_bytes + 255) / 256 * 256;
      part = std::make_unique<Workspace>(fused ? ctr_off + size_t(base) * sizeof(unsigned int) : part_bytes, stream);
      p.o_part = static_cast<float*>(part->p);
      p.lse_part = p.o_part + size_t(p.num_splits) * p.num_rows * D;
      if (fused) {
        p.counters = reinterpret_cast<unsigned int*>(static_cast<char*>(part->p) + ctr_off);
        check_cuda(cudaMemsetAsync(p.counters, 0, size_t(base) * sizeof(unsigned int), stream),
                   "cudaMemsetAsync(decode counters)");
      }
    }
  }
  bool used_sm90 = false;
  cuda::TileShape sm90_tile;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if (decode) {
      if (D == 64) cuda::launch_flash_decode<T, 64>(p, stream);
      else if (D == 128) cuda::launch_flash_decode<T, 128>(p, stream);
      else cuda::launch_flash_decode<T, 256>(p, stream);
    } else {
      // Hopper kernels first (when this build carries sm_90a code and FLASHKIT_SM90 is not 0), else sm_80.
      const bool hopper = sm90_allowed() && ((D == 64 && cuda::launch_flash_fwd_sm90<T, 64>(p, stream, &sm90_tile)) ||
                                             (D == 128 && cuda::launch_flash_fwd_sm90<T, 128>(p, stream, &sm90_tile)));
      used_sm90 = hopper;
      if (hopper) return;
      if (D == 64) cuda::launch_flash_fwd<T, 64>(p, stream);
      else if (D == 128) cuda::launch_flash_fwd<T, 128>(p, stream);
      else cuda::launch_flash_fwd<T, 256>(p, stream);
    }
  };
  if (a.dtype == DType::bf16) run(__nv_bfloat16{});
  else run(__half{});
  // v2 with counters or clusters merges in the kernel
  if (p.num_splits > 1 && !p.counters && p.cluster == 0) cuda::launch_split_combine(p, D, stream);
  if (a.o.data != a0.o.data) cuda::copy_operand16(a0.o.data, a0.o, a.o.data, a.o, B, sh.seqlen_q, sh.heads, sh.head_dim, stream);

  const int BM = decode ? 16 : used_sm90 ? sm90_tile.bm : (D == 256 ? 64 : 64 * FK_FWD_MT);
  const int BNc = used_sm90 ? sm90_tile.bn : BN;
  const double pairs = decode ? 0 : fwd_tile_pairs(sh, a.mask, cu, BM, BNc);
  c.flops = decode ? 4.0 * double(sh.batch) * sh.kv_heads * double((sh.group() * sh.max_seqlen_q + 15) / 16 * 16) *
                         double(sh.max_seqlen_k) * D
                   : 4.0 * pairs * sh.heads * BM * BNc * D;
  c.bytes_read = qb + 2 * kvb;
  c.bytes_written = qb + rows * 4;
  if (p.num_splits > 1 && p.cluster == 0) {
    const double pb = double(p.num_splits) * rows * (D * 4 + 4);
    c.bytes_written += pb;
    c.bytes_read += pb;
    c.workspace_bytes = pb;
  }
  c.model = "cuda flash: q,k,v read once and o,lse written once (K/V re-reads across query tiles assumed served by L2)" +
            std::string(p.num_splits > 1 && p.cluster == 0 ? "; plus split-KV partials (f32) written and read once"
                        : p.cluster ? "; split-KV partials merged through distributed shared memory (clusters)" : "");
  c.kernel = std::string(decode ? "cuda.flash.decode" : "cuda.flash.fwd") + (used_sm90 ? ".sm90wgmma." : ".sm80mma.") +
             (a.dtype == DType::bf16 ? "bf16" : "f16") + ".d" + std::to_string(D) +
             (p.num_splits > 1 ? ".splits" + std::to_string(p.num_splits) : "");
  if (decode)
    c.kernel += p.decode_version == 2 ? (p.cluster ? ".v2.cluster" : p.counters ? ".v2.fused" : ".v2") : ".v1";
  if (cost) *cost = c;
}

void cuda_attention_backward(const AttentionBwdArgs& g0, const std::vector<int32_t>& host_cu, AttentionImpl impl,
                             bool /*check_finite*/, OpCost* cost) {
  prepare_device();
  const cudaStream_t stream = g_stream;
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
  const int D = dpad_of(sh.head_dim);
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
  bool used_sm90 = false;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    // Hopper kernel first (sm_90a code in this build and FLASHKIT_SM90 not 0), else sm_80.
    used_sm90 = sm90_allowed() && ((D == 64 && cuda::launch_flash_bwd_sm90<T, 64>(p, stream)) ||
                                   (D == 128 && cuda::launch_flash_bwd_sm90<T, 128>(p, stream)));
    if (used_sm90) return;
    if (D == 64) cuda::launch_flash_bwd<T, 64>(p, stream);
    else if (D == 128) cuda::launch_flash_bwd<T, 128>(p, stream);
    else cuda::launch_flash_bwd<T, 256>(p, stream);
  };
  if (g.fwd.dtype == DType::bf16) run(__nv_bfloat16{});
  else run(__half{});
  cuda::launch_bwd_postprocess(p, D, stream);
  if (g.dq.data != g0.dq.data) cuda::copy_operand16(g0.dq.data, g0.dq, g.dq.data, g.dq, B, sh.seqlen_q, sh.heads, sh.head_dim, stream);
  if (g.dk.data != g0.dk.data) cuda::copy_operand16(g0.dk.data, g0.dk, g.dk.data, g.dk, B, sh.seqlen_k, sh.kv_heads, sh.head_dim, stream);
  if (g.dv.data != g0.dv.data) cuda::copy_operand16(g0.dv.data, g0.dv, g.dv.data, g.dv, B, sh.seqlen_k, sh.kv_heads, sh.head_dim, stream);

  const int BM = 64, BN = D == 256 ? 64 : 16 * FK_BWD_NW;
  const double pairs = fwd_tile_pairs(sh, g.fwd.mask, cu, BM, BN);
  c.flops = 10.0 * pairs * sh.heads * BM * BN * D;  // 5 GEMMs of 2 flops per MAC
  c.bytes_read = 3 * qb + 2 * kvb + rows * 4 + qb /*o in preprocess*/ + rows * D * 4 /*dq accum*/;
  c.bytes_written = qb + 2 * kvb + rows * 4 /*dsum*/ + rows * D * 4 /*dq accumulator, atomics assumed L2-merged*/;
  c.workspace_bytes = double(acc_bytes + dsum_bytes);
  c.model = "cuda flash backward: q,k,v,o,dout,lse read once, dq,dk,dv written once, plus the f32 dq accumulator "
            "(written once, read once) and rowsum(dO*O); K/V-tile re-reads and dq atomics assumed served by L2";
  c.kernel = std::string(used_sm90 ? "cuda.flash.bwd.sm90wgmma." : "cuda.flash.bwd.sm80mma.") +
             (g.fwd.dtype == DType::bf16 ? "bf16" : "f16") + ".d" + std::to_string(D);
  if (cost) *cost = c;
}

}  // namespace flashkit

namespace flashkit {
// The calling thread's stream for flashkit CUDA launches (nullptr: the legacy default stream). Used by
// python/flashkit/torch.py, through fk_cuda_set_stream, to honour torch.cuda.current_stream().
void set_cuda_stream(void* stream) { g_stream = static_cast<cudaStream_t>(stream); }
void* cuda_stream() { return g_stream; }
}  // namespace flashkit
