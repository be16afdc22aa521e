// The engine's member of the decode family (plan.hpp): fused_prologue.cu. Plain C++ declarations (no CUDA header):
// the engine's launcher header (engine/cuda/kernels.hpp) re-exports them.
//
// One query token (T = 1) per head at position p = *pos0 read from device memory (graph-safe): optional per-head
// RMSNorm of q and k (q_norm_w / k_norm_w, f32 [head_dim]), optional RoPE (inv_freq), then the new k/v row is
// written to the cache (row p, or p % capacity for a ring) and attention runs over the visible keys (j <= p, and
// p - window < j when window > 0) with GQA, softcap and split-KV: `splits` blocks per head (fixed at launch,
// graph-safe), each over a slice of the keys the kernel computes from p. The partials of the splits a launch uses
// are merged (merge.cuh) in distributed shared memory (sm_90: the splits of a head are one thread-block cluster,
// when they fit in it) or by the last-arriving block (f32 partials in `part`, counters in `counters`; always
// needed, as a long context may use more splits than a cluster holds). q/k/v are only read: the normalized,
// rotated q and k are not written back.
//
// Paged KV (the serving layer, not yet used): block_table / block_size address the cache in fixed-size blocks of
// rows. A paged launch would read key j of a sequence from cache row block_table[j / block_size] * block_size +
// j % block_size (instead of j, or j % capacity for a ring), so the loads of load_iter and the append slot change
// and nothing else: the split ranges, the softmax and the merge work on positions, not rows.
#pragma once
#include <cstdint>

#include "core/cuda_device.hpp"
#include "flashkit/tuning.hpp"
#include "kernels/cuda/decode/plan.hpp"

typedef struct CUstream_st* cudaStream_t;

namespace flashkit::cuda {

struct FusedDecodeArgs {
  const void* q = nullptr;  // [heads * head_dim]
  const void* k = nullptr;  // [kv_heads * head_dim]
  const void* v = nullptr;
  bool in_bf16 = false;
  const float* q_norm_w = nullptr;
  const float* k_norm_w = nullptr;
  float eps = 1e-6f;
  const float* inv_freq = nullptr;  // [head_dim / 2]
  float attn_scaling = 1.0f;
  void* k_cache = nullptr;  // [capacity, kv_heads * head_dim], bf16 (cache_bf16) or f32
  void* v_cache = nullptr;
  bool cache_bf16 = true;
  int64_t capacity = 0;
  bool ring = false;
  int64_t window = 0;
  const int32_t* pos0 = nullptr;
  // The query's position is *pos0 + row: row r of a decode-exact verification step (launched once per row, in
  // order). With row > 0 the cache rows of positions *pos0 .. p - 1 were written by this step's earlier launches,
  // so the kernel waits for the previous kernel before reading any cache row.
  int32_t row = 0;
  // Paged cache (reserved for the serving layer; must be null / 0 today): see the header comment.
  const int32_t* block_table = nullptr;
  int32_t block_size = 0;
  float scale = 1.0f, softcap = 0.0f;
  void* out = nullptr;  // [heads * head_dim]
  bool out_bf16 = false;
  int heads = 0, kv_heads = 0, head_dim = 0;
  int splits = 1;
  float* part = nullptr;             // >= fused_decode_part_floats(heads, head_dim, splits)
  unsigned int* counters = nullptr;  // >= heads zero-initialized uint32
  EngineDecodeMerge merge = EngineDecodeMerge::automatic;  // the backend's Tuning::engine_decode_merge
};

int64_t fused_decode_part_floats(int heads, int head_dim, int splits);
// Cluster residency of the kernel serving this head dim on the current device (cached per device).
ClusterResidency fused_decode_cluster_residency(int head_dim);
// Launches with the plan's splits (== a.splits), cluster size and PDL; checks the launch.
void launch_fused_decode(const FusedDecodeArgs& a, const DecodePlan& plan, cudaStream_t stream);

}  // namespace flashkit::cuda
