// Batched steps over a paged KV cache: the engine side of serving (src/serve; backend.hpp, "Paged KV cache").
//
// A PagedRunner belongs to one Model and owns what a batched step needs on the backend: the per-layer block pools
// (num_blocks blocks of block_size positions, all layers sharing each block id), the step's activation buffers for
// up to max_rows rows and the logits of up to max_seqs rows. It does no bookkeeping: which block belongs to which
// sequence, reference counts and prefix caching are the scheduler's (src/serve). Same threading rule as sessions:
// one step at a time per Model, and not concurrently with the Model's sessions.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "engine/backend.hpp"
#include "flashkit/engine.hpp"

namespace flashkit::engine {

struct PagedRunnerOptions {
  int64_t block_size = 16;  // positions per block
  int64_t num_blocks = 0;   // blocks in the pool (> 0)
  int64_t max_rows = 256;   // rows (tokens) of one step
  int64_t max_seqs = 64;    // sequences of one step (= logits rows)
};

class PagedRunner {
 public:
  virtual ~PagedRunner() = default;
  virtual const PagedRunnerOptions& options() const = 0;
  // Block-table width: blocks of a max_context sequence.
  virtual int64_t max_blocks_per_seq() const = 0;
  // One forward pass over the step's rows (tokens, positions, row_seq, block tables as backend.hpp describes;
  // max_blocks must be max_blocks_per_seq()). logits: host f32 [step.logit_rows.size(), vocab].
  virtual void step(const PagedStep& step, float* logits) = 0;
  // The same step when every logit row is decoded greedily: out[i] = the argmax of logit row i with argmax()'s rules
  // (engine/backend.hpp). On a backend with argmax_rows (CUDA) the logits stay on the device and only the ids come
  // back; otherwise the logits are downloaded and reduced here. logits_row() gives a row of the last step's logits
  // (for a row whose argmax is invalid: the sampler then raises its error).
  virtual void step_greedy(const PagedStep& step, std::span<ArgmaxResult> out) = 0;
  virtual void logits_row(int64_t i, float* out) = 0;
  // Tuning::device_argmax (FLASHKIT_DEVICE_ARGMAX=0 turns the greedy path off for A/B runs).
  virtual bool greedy_allowed() const = 0;
};

// False for models whose sequences keep a constant-size recurrent state instead of a KV cache (model_type mamba):
// the serving engine then runs each sequence in a Session of its own (src/serve/session_core.hpp) instead of paged
// steps, and the functions below (but model_identity) throw unsupported for them.
bool has_kv_cache(const Model& model);
// Bytes of KV cache per position (all layers, keys and values) in the model's KV dtype.
int64_t paged_kv_bytes_per_token(const Model& model);
// Free memory of the model's device now (CUDA), or -1 when its backend computes in host memory.
int64_t paged_device_free_bytes(const Model& model);
// Throws invalid_argument for options out of range, unsupported when the backend has no paged ops.
std::unique_ptr<PagedRunner> make_paged_runner(Model& model, const PagedRunnerOptions& opts);

// Everything that decides the content of a KV block besides its tokens, as text: the checkpoint (every file's name,
// size and modification time, or the random-weights seed), the normalized config (dimensions, RoPE, norms, softcaps,
// windows), the weight / activation / KV dtypes and the backend. Two models with the same identity compute the same
// keys and values for the same tokens; the prefix cache keys its blocks with a hash of it (src/serve).
std::string model_identity(const Model& model);

}  // namespace flashkit::engine
