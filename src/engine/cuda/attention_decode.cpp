// The engine's decode attention: the decode family's fused_prologue kernel (kernels/cuda/decode/), planned by
// plan_decode for this device and launched with the plan. Arguments are checked here (the kernel trusts them).
#include <climits>
#include <string>

#include "core/cuda_device.hpp"
#include "engine/cuda/kernels.hpp"
#include "flashkit/error.hpp"
#include "kernels/cuda/decode/plan.hpp"
#include "kernels/cuda/tiles.hpp"

namespace flashkit::engine::cuda {

namespace fc = flashkit::cuda;

namespace {

// The plan for a launch site whose grid has a.splits splits (or, a.splits == 0, for max_keys keys).
fc::DecodePlan plan_for(int heads, int kv_heads, int head_dim, int64_t max_keys, int splits, DecodeMerge merge) {
  fc::DecodeShape s;
  s.heads = heads, s.kv_heads = kv_heads, s.head_dim = head_dim, s.max_seqlen_k = max_keys;
  s.kv_len_on_device = true;
  s.fixed_splits = splits;
  Tuning t = launch_tuning();
  t.engine_decode_merge = merge;
  const DeviceInfo dev = cuda_device_info();
  const ClusterResidency res = splits >= 2 && fc::decode_plan_needs_residency(s, dev, t)
                                   ? fc::fused_decode_cluster_residency(head_dim)
                                   : ClusterResidency{};
  return fc::plan_decode(s, dev, t, res);
}

}  // namespace

int64_t decode_attention_part_floats(int heads, int head_dim, int splits) {
  return fc::fused_decode_part_floats(heads, head_dim, splits);
}

int decode_attention_splits(int heads, int64_t max_keys) {
  return plan_for(heads, 1, 8, max_keys, 0, DecodeMerge::global).splits;
}

int decode_attention_cluster_size(const DecodeAttnArgs& a) {
  const fc::DecodePlan p = plan_for(a.heads, a.kv_heads, a.head_dim, 0, a.splits, a.merge);
  return p.cluster > 1 ? p.cluster : 1;
}

void decode_attention(const DecodeAttnArgs& a, cudaStream_t stream) {
  const int D = a.head_dim;
  if (D <= 0 || D % 8 || D > 256 || a.heads <= 0 || a.kv_heads <= 0 || a.heads % a.kv_heads)
    fail(Status::invalid_argument, "decode_attention: head_dim must be a multiple of 8 up to 256, heads a multiple of kv_heads");
  if (a.splits < 1 || (a.splits > 1 && (!a.part || !a.counters)))
    fail(Status::invalid_argument, "decode_attention: splits > 1 needs the partial buffer and counters");
  if (a.heads > 65535) fail(Status::invalid_argument, "decode_attention: too many heads");
  if (a.splits > fc::kFusedDecodeMaxSplits)
    fail(Status::invalid_argument, "decode_attention: splits must be at most " + std::to_string(fc::kFusedDecodeMaxSplits));
  if (a.block_table || a.block_size)
    fail(Status::unsupported, "decode_attention: a paged KV cache (block_table) is not implemented yet");
  fc::launch_fused_decode(a, plan_for(a.heads, a.kv_heads, D, 0, a.splits, a.merge), stream);
}

void decode_attention_rows(const DecodeAttnArgs& a, int64_t rows, int64_t ldq, int64_t ldk, int64_t ldv, int64_t ldo,
                           cudaStream_t stream) {
  if (rows < 1 || rows > INT32_MAX || a.row != 0)
    fail(Status::invalid_argument, "decode_attention_rows: rows must be positive and a.row 0");
  const size_t in = a.in_bf16 ? 2 : 4, out = a.out_bf16 ? 2 : 4;
  auto at = [](const void* p, int64_t r, int64_t ld, size_t es) {
    return static_cast<const void*>(static_cast<const char*>(p) + size_t(r * ld) * es);
  };
  for (int64_t r = 0; r < rows; ++r) {
    DecodeAttnArgs ar = a;
    ar.row = int32_t(r);
    ar.q = at(a.q, r, ldq, in), ar.k = at(a.k, r, ldk, in), ar.v = at(a.v, r, ldv, in);
    ar.out = const_cast<void*>(at(a.out, r, ldo, out));
    decode_attention(ar, stream);
  }
}

}  // namespace flashkit::engine::cuda
