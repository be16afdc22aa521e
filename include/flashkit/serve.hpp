// Serving: many concurrent generation requests on one model, batched (docs/serving.md).
//
//   auto model = flashkit::Model::load(dir);
//   auto engine = flashkit::serve::Engine::create(model, {});        // starts its scheduler thread
//   flashkit::serve::Request r;
//   r.prompt = ids;  r.max_tokens = 64;  r.sampling.temperature = 0;
//   r.on_token = [](int32_t id) { ...; return true; };               // engine thread; false ends the request
//   r.on_done = [](const flashkit::serve::RequestResult& res) { ... };
//   uint64_t id = engine->submit(std::move(r));                       // engine->cancel(id) to abandon it
//
// The engine keeps the KV cache of every running sequence in a pool of fixed-size blocks (paged), runs all running
// sequences in one batched step per token (their linear layers as one matrix product over the batch rows), admits
// new requests between steps (continuous batching), splits long prompts into chunks under a per-step token budget,
// preempts the most recently admitted sequence when blocks run out (its blocks are freed; it is re-queued with its
// prompt and the tokens generated so far and recomputed later, without losing anything), and reuses the blocks of
// any earlier request with the same token prefix (prefix caching, keyed by the model's identity). Greedy output of a
// request is the same as flashkit::generate on a session of its own.
// Models without a KV cache (model_type mamba: a constant-size recurrent state per sequence) run instead one engine
// Session per running request, at most max_running of them, each advanced by one token per step in turn (no batching
// across sequences, no prefix cache, no KV blocks: their stats are 0); the request API is the same.
// Runs on backends with paged KV ops (the CPU and CUDA backends; others throw unsupported).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "flashkit/engine.hpp"

namespace flashkit::serve {

struct EngineOptions {
  int64_t block_size = 16;        // positions per KV block
  int64_t kv_memory = 0;          // bytes of the KV block pool; 0: default_kv_memory()
  int64_t max_step_tokens = 256;  // token budget of one step: decode rows + prompt chunk rows
  int64_t max_running = 32;       // sequences in the batch at once
  bool prefix_caching = true;
  bool background = true;         // run the scheduler on a thread of its own; false: the caller calls step()
  // Speculative decoding by n-gram prompt lookup (docs/speculative.md, "In the server"): each decoding sequence also
  // gets up to K tokens proposed from earlier occurrences of its last spec_lookup..1 tokens in its own prompt and
  // output, verified in the same batched step (one logits row each); the paged cache rolls back what is rejected.
  // Output is distributed exactly as without it (greedy: the same tokens). Speculation only uses the step's token
  // budget left after decode rows, prompt chunks and admissions, and only while at most spec_max_batch sequences are
  // decoding (a fuller batch is no longer weight-bound: extra rows cost nearly as much as real ones). Models without a
  // KV cache (Mamba) refuse it (invalid_argument). options() reports spec_max_batch resolved.
  int spec_lookup = 0;          // longest n-gram matched (0: off)
  int spec_tokens = 4;          // K proposed per sequence and step, in [1, 64]; 0: adaptive per sequence
  int spec_max_tokens = 8;      // adaptive K's upper bound, in [1, 64]
  // Speculate only while this many sequences decode or fewer, in [0, 4096]. 0: by backend: 1 on the CPU (its GEMV
  // streams the weights once for up to 8 rows; two sequences with K = 4 make 10: measured 0.84x at 2 streams,
  // docs/speculative.md), 8 on CUDA (a decode step stays weight-bound for dozens of rows).
  int64_t spec_max_batch = 0;
};

struct SamplingOptions {
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  uint64_t seed = 0;
};

struct RequestResult {
  uint64_t id = 0;
  std::string finish_reason;      // "stop" (eos, stop id, on_token false), "length", "cancelled", "error"
  std::string error;              // for "error"
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;      // prompt tokens whose KV came from the prefix cache (first admission)
  int64_t completion_tokens = 0;  // tokens passed to on_token
  int64_t preemptions = 0;
  // Speculative decoding (EngineOptions::spec_lookup; all 0 without it): steps of this request that verified at
  // least one proposal, the tokens they proposed and accepted, and the tokens they delivered (accepted + one per
  // step, unless a stop came first).
  int64_t spec_steps = 0, spec_proposed = 0, spec_accepted = 0, spec_emitted = 0;
  double time_to_first_token_s = 0;  // from submit to the first token
  double total_s = 0;
};

struct Request {
  std::vector<int32_t> prompt;  // token ids (not empty)
  int64_t max_tokens = 16;      // >= 1; generation also ends when the sequence fills the model's context
  SamplingOptions sampling;
  bool stop_at_eos = true;          // the model's eos ids end the request (the id is passed to on_token)
  std::vector<int32_t> stop_ids;    // more ids that end it
  // Both run on the engine's thread (keep them short; they may call cancel() / submit()).
  std::function<bool(int32_t token)> on_token;     // false: finish now ("stop")
  std::function<void(const RequestResult&)> on_done;  // exactly once per accepted request
};

struct EngineStats {
  int64_t running = 0, waiting = 0;
  int64_t kv_blocks_total = 0, kv_blocks_free = 0, kv_blocks_used = 0, kv_blocks_cached = 0;
  int64_t block_size = 0, kv_bytes = 0;
  int64_t prefix_hit_blocks = 0, prefix_miss_blocks = 0, prefix_evictions = 0, prefix_resets = 0;
  int64_t prompt_tokens = 0;       // prompt tokens computed (cache hits excluded; recomputation included)
  int64_t generation_tokens = 0;   // tokens sampled
  int64_t steps = 0, preemptions = 0;
  int64_t requests_finished = 0, requests_cancelled = 0;
  int64_t spec_steps = 0, spec_proposed = 0, spec_accepted = 0;  // engine-wide totals of RequestResult's spec_*
  double busy_s = 0;               // time spent in model steps
};

class Engine {
 public:
  // Throws invalid_argument for bad options, unsupported when the model's backend has no paged KV ops.
  static std::unique_ptr<Engine> create(std::shared_ptr<Model> model, const EngineOptions& opts = {});
  // Finishes every queued and running request with "cancelled" and stops the thread.
  virtual ~Engine() = default;

  // Queues a request; returns its id. Throws invalid_argument (naming the field) for an empty prompt, ids outside the
  // vocabulary, bad sampling options, max_tokens < 1, or a prompt that cannot fit the context or the KV pool.
  virtual uint64_t submit(Request request) = 0;
  // Ends a request at the next step boundary ("cancelled") and frees its blocks; unknown / finished ids are ignored.
  virtual void cancel(uint64_t id) = 0;
  // Empties the prefix cache (blocks in use stay with their sequences and are not cached again).
  virtual void reset_prefix_cache() = 0;
  // background = false only: one scheduler step on the calling thread; false when there was nothing to do.
  virtual bool step() = 0;
  // Blocks until no request is queued or running (background mode).
  virtual void wait_idle() = 0;
  virtual EngineStats stats() const = 0;
  virtual const Model& model() const = 0;
  // With kv_memory resolved; for a model without a KV cache (Mamba) kv_memory is 0 and prefix_caching false.
  virtual const EngineOptions& options() const = 0;
};

// The KV pool size used when EngineOptions::kv_memory is 0: a quarter of the host memory available now (CPU
// backend) or half of the device memory free now (CUDA backend), capped at what max_running sequences of the full
// context need, and at least one full-context sequence.
int64_t default_kv_memory(const Model& model, const EngineOptions& opts);

}  // namespace flashkit::serve
