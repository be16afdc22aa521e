// Tensor-parallel inference (docs/distributed.md, "Tensor-parallel inference"). A rank's engine is the ordinary engine over a *sharded* config:
// its own attention heads (q/k/v rows), KV heads (its slice of the KV cache) and MLP columns (gate/up rows), with
// o_proj and down_proj sliced by input columns; the partial o_proj / down_proj outputs of the ranks are summed by one
// all-reduce each (Backend::all_reduce_sum) before the residual add. Embedding, norms and lm_head are replicated, so
// every rank holds the same residual stream and the same logits (the "threads" communicator sums in rank order).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/config.hpp"
#include "flashkit/engine.hpp"
#include "model/weights.hpp"

namespace flashkit::dist {
class Communicator;
}

namespace flashkit::engine {

class PagedRunner;
struct PagedRunnerOptions;
struct ArgmaxResult;

// A session whose greedy decode step can reduce the logits row on the device and download only the argmax
// (generate()'s fast greedy path): the engine's own sessions and the tensor-parallel ones.
class DeviceGreedy {
 public:
  virtual ~DeviceGreedy() = default;
  virtual bool device_argmax_allowed() const = 0;
  virtual ArgmaxResult decode_argmax(int32_t token) = 0;
};

constexpr int kMaxTp = 64;  // ranks of one model (threads of one process; far beyond any real head count split)

// What rank `rank` of `tp` holds. A pure function of the config, unit-tested.
struct TpShard {
  int rank = 0, size = 1;
  int64_t heads = 0, head0 = 0;        // query heads [head0, head0 + heads)
  int64_t kv_heads = 0, kv_head0 = 0;  // KV heads [kv_head0, kv_head0 + kv_heads)
  bool kv_replicated = false;          // num_key_value_heads < tp: each KV head is held by tp / kv_heads ranks
  int64_t ff = 0, ff0 = 0;             // MLP columns [ff0, ff0 + ff) of intermediate_size
};
// Throws invalid_argument naming "--tp" and the config field that does not divide (or a bad tp, a Mamba model).
TpShard plan_tp_shard(const ModelConfig& c, int tp, int rank);
// Checks tp alone (1..kMaxTp), naming --tp.
void check_tp(int tp);

// Rows [r0, r0 + n) of a [rows, cols] (or [rows]) float weight: a view into the same memory.
model::WeightView tp_row_slice(const model::WeightView& w, int64_t r0, int64_t n);
// Columns [c0, c0 + n) of a [rows, cols] float weight, copied into `storage` (which must outlive the view).
model::WeightView tp_col_slice(const model::WeightView& w, int64_t c0, int64_t n, std::vector<char>& storage);

// Rank comm.rank() of a tensor-parallel model of comm.size() ranks (model.cpp): the engine over its shard
// (plan_tp_shard), all-reducing through `comm`. opts.tp is ignored.
std::shared_ptr<Model> load_rank_model(const std::filesystem::path& dir, const LoadOptions& opts,
                                       dist::Communicator& comm);
// LoadOptions::tp > 1 (tp_model.cpp): tp rank models on threads of this process, driven in lockstep.
std::shared_ptr<Model> load_tp_model(const std::filesystem::path& dir, const LoadOptions& opts);

// The rank models behind a tensor-parallel model; empty for any other model.
std::vector<Model*> tp_ranks(const Model& model);
std::unique_ptr<PagedRunner> make_tp_paged_runner(Model& model, const PagedRunnerOptions& opts);

}  // namespace flashkit::engine
