// Tensor-parallel inference (docs/distributed.md, "Tensor-parallel inference"). A rank's engine is the ordinary engine over a *sharded* config:
// its own attention heads (q/k/v rows), KV heads (its slice of the KV cache) and MLP columns (gate/up rows), with
// o_proj and down_proj sliced by input columns; the partial o_proj / down_proj outputs of the ranks are summed by one
// all-reduce each (Backend::all_reduce_sum) before the residual add. Embedding, norms and lm_head are replicated, so
// every rank holds the same residual stream and the same logits (the "threads" communicator sums in rank order).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
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

// Ranks in processes (tp_remote.cpp; one per GPU over NCCL, or any communicator): rank 0 wraps its rank model
// (load_rank_model over `comm`) in a leader model whose every Session / PagedRunner call is first broadcast to the
// other ranks, which replay it in follow_tp_leader until the leader goes away. comm outlives the rank model.
std::shared_ptr<Model> make_tp_leader(std::shared_ptr<Model> rank0, std::shared_ptr<dist::Communicator> comm);
// Ranks > 0: replays rank 0's calls on `rank_model` until rank 0's leader model is destroyed. A failure that rank 0
// does not share (anything but a bad argument or out of memory) aborts comm and is rethrown.
void follow_tp_leader(Model& rank_model, dist::Communicator& comm);
// A leader model's own rank model and (in *world) the rank count; nullptr for any other model.
Model* tp_leader_local(const Model& model, int* world = nullptr);
std::unique_ptr<PagedRunner> make_tp_leader_paged_runner(Model& model, const PagedRunnerOptions& opts);

// Whether `tp` ranks on `device` run as processes, one per GPU over NCCL (true), or as threads of this process.
// backend: FLASHKIT_TP_BACKEND, 0 auto (processes when device is CUDA, tp > 1, NCCL is built and GPUs [index,
// index + tp) exist), 1 threads, 2 nccl (processes, forced: also tp = 1); launched: this process is one rank of a
// launched job (WORLD_SIZE set), which forces processes too. A forced process job that cannot run throws naming
// --tp and why: not --device cuda / NCCL not built (unsupported) / fewer GPUs than ranks.
bool tp_uses_processes(int tp, const std::string& device, int backend, bool launched, bool nccl, int gpus);

// The rank models behind a tensor-parallel model; empty for any other model.
std::vector<Model*> tp_ranks(const Model& model);
std::unique_ptr<PagedRunner> make_tp_paged_runner(Model& model, const PagedRunnerOptions& opts);

}  // namespace flashkit::engine
