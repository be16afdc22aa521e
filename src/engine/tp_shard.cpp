// Tensor-parallel sharding: which heads and MLP columns a rank holds, and the weight slices that give them.
#include <cstring>
#include <string>

#include "engine/tp.hpp"
#include "flashkit/error.hpp"

namespace flashkit::engine {
namespace {

[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, m); }

size_t element_bytes(const model::WeightView& w) {
  switch (w.type) {
    case model::WeightType::f32: return 4;
    case model::WeightType::f16:
    case model::WeightType::bf16: return 2;
    default:
      // Quantized blocks run along rows: a column slice would cut blocks. The model refuses tp with them first.
      fail(Status::unsupported, "tensor parallelism (--tp): tensor \"" + w.name + "\" is block-quantized (" +
                                    model::weight_type_name(w.type) + "); load the model with --dtype f32 or bf16");
  }
}

}  // namespace

void check_tp(int tp) {
  if (tp < 1 || tp > kMaxTp)
    bad("--tp " + std::to_string(tp) + ": expected a rank count in [1, " + std::to_string(kMaxTp) + "]");
}

TpShard plan_tp_shard(const ModelConfig& c, int tp, int rank) {
  check_tp(tp);
  if (rank < 0 || rank >= tp)
    bad("tensor parallelism: rank " + std::to_string(rank) + " outside [0, " + std::to_string(tp) + ")");
  if (tp == 1) {  // the whole model (also Mamba, which has no heads)
    TpShard s;
    s.heads = c.num_heads;
    s.kv_heads = c.num_kv_heads;
    s.ff = c.intermediate_size;
    return s;
  }
  if (c.arch == Arch::mamba)
    fail(Status::unsupported, "--tp " + std::to_string(tp) + ": model_type mamba has no attention heads to split "
                              "(tensor parallelism covers llama, gemma and qwen models; use --tp 1)");
  auto divisible = [&](int64_t v, const char* field) {
    if (v % tp != 0)
      bad("--tp " + std::to_string(tp) + ": " + field + " = " + std::to_string(v) + " is not divisible by " +
          std::to_string(tp) + " (each rank holds an equal share)");
  };
  divisible(c.num_heads, "num_attention_heads");
  divisible(c.intermediate_size, "intermediate_size");
  TpShard s;
  s.rank = rank;
  s.size = tp;
  s.heads = c.num_heads / tp;
  s.head0 = rank * s.heads;
  if (c.num_kv_heads >= tp) {
    divisible(c.num_kv_heads, "num_key_value_heads");
    s.kv_heads = c.num_kv_heads / tp;
    s.kv_head0 = rank * s.kv_heads;
  } else {
    // Fewer KV heads than ranks (GQA): each KV head is replicated on the tp / kv_heads ranks whose query heads use it
    // (as vLLM does). That needs tp to be a multiple of the KV head count.
    if (tp % c.num_kv_heads != 0)
      bad("--tp " + std::to_string(tp) + ": num_key_value_heads = " + std::to_string(c.num_kv_heads) +
          " is smaller than the rank count and does not divide it (each KV head must be replicated on an equal number "
          "of ranks)");
    s.kv_replicated = true;
    s.kv_heads = 1;
    s.kv_head0 = rank / (tp / c.num_kv_heads);
  }
  s.ff = c.intermediate_size / tp;
  s.ff0 = rank * s.ff;
  return s;
}

model::WeightView tp_row_slice(const model::WeightView& w, int64_t r0, int64_t n) {
  const size_t es = element_bytes(w);
  const int64_t cols = w.shape.size() > 1 ? w.shape[1] : 1;
  model::WeightView v = w;
  v.shape[0] = n;
  v.data = static_cast<const char*>(w.data) + size_t(r0 * cols) * es;
  v.nbytes = size_t(n * cols) * es;
  return v;
}

model::WeightView tp_col_slice(const model::WeightView& w, int64_t c0, int64_t n, std::vector<char>& storage) {
  const size_t es = element_bytes(w);
  const int64_t rows = w.shape[0], cols = w.shape[1];
  storage.resize(size_t(rows * n) * es);
  const char* src = static_cast<const char*>(w.data);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(storage.data() + size_t(r * n) * es, src + size_t(r * cols + c0) * es, size_t(n) * es);
  model::WeightView v = w;
  v.shape = {rows, n};
  v.data = storage.data();
  v.nbytes = storage.size();
  return v;
}

}  // namespace flashkit::engine
