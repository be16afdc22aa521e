// Continuous batching: which rows run in the next step, and what happens with their logits (docs/serving.md).
//
// Each step the scheduler fills a token budget (max_step_tokens rows):
//   1. running sequences, oldest admission first: every decoding sequence contributes one row (its last token), then
//      each one still computing its prompt (or recomputing after a preemption) a chunk of what is left, up to the
//      budget (decode rows first, so a long prompt never stalls the tokens of the others);
//   2. then waiting sequences are admitted in order (a preempted one is first in line) while the budget, max_running
//      and the free blocks allow: their cached prefix blocks are taken from the prefix cache and the rest of the
//      prompt is computed in chunks, in this step and the next ones.
//   A row at position p needs block p / block_size of its sequence; blocks are allocated as the rows are planned.
//   When a decoding sequence needs a block and none is free, the most recently admitted running sequence (maybe the
//   sequence itself) is preempted: its blocks are released (full ones stay in the prefix cache, so the recomputation
//   often hits them), its state goes back to "nothing computed" and it is queued first; the tokens it has generated
//   stay part of it, so its recomputation continues exactly where it stopped. A prompt chunk that does not fit is
//   shortened instead. Admission keeps one free block per running sequence in hand so that the running ones can grow.
//   3. speculation (SchedulerConfig::spec_lookup > 0), in what is left of the budget, only while at most
//      spec_max_batch sequences decode: each decoding sequence (oldest first) gets up to K n-gram proposals from its
//      own tokens (spec/ngram.hpp) as rows after its decode row, each with a logits row, and blocks for them while
//      more than one block per running sequence is free (speculation never preempts and never takes the reserve).
// After the step, commit() advances each sequence, publishes its newly filled blocks to the prefix cache, samples a
// token for every sequence whose known tokens are now all computed, and finishes sequences (eos / stop id, on_token
// false, max_tokens, context full, cancel). A speculating sequence walks its rows: each proposal is verified with
// the acceptance rules of spec/accept.hpp (greedy: it equals the row's choice; sampling: a point mass, accepted with
// probability p(d), else the token is drawn from p without d), the tokens are delivered one by one with the stop
// rules applied to each, and the walk ends at the first rejection (whose replacement is the next pending token).
// Then the cache rolls back: computed stops at the accepted length, blocks past it go back to the pool, and only
// blocks whose positions are all accepted are ever published. Runs on the engine thread only.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.hpp"
#include "engine/sampler.hpp"
#include "flashkit/serve.hpp"
#include "serve/block_pool.hpp"
#include "spec/adaptive.hpp"

namespace flashkit::serve {

using Clock = std::chrono::steady_clock;

struct Sequence {
  uint64_t id = 0;
  Request req;
  std::vector<int32_t> tokens;  // prompt + generated
  int64_t prompt_len = 0;
  std::unique_ptr<engine::Sampler> sampler;
  std::vector<int32_t> stops;   // sorted stop ids (eos + stop_ids)
  std::vector<int32_t> blocks;  // block table
  std::vector<uint64_t> keys;   // chain keys of blocks[0, keys.size()) (published or matched)
  int64_t computed = 0;         // tokens whose keys/values are in the blocks
  int64_t generated = 0;
  bool admitted_once = false;
  bool finished = false;
  RequestResult result;
  Clock::time_point submitted;
  std::unique_ptr<Session> session;  // models without a KV cache: the sequence's own state (session_core.hpp)
  std::vector<int32_t> drafts;       // this step's n-gram proposals (rows after the decode row)
  std::unique_ptr<spec::StepModel> spec_k;  // adaptive K (spec_tokens == 0), made at the first speculative step
};

struct SchedulerConfig {
  int64_t block_size = 16, num_blocks = 0;
  int64_t max_step_tokens = 256, max_running = 32;
  int64_t max_blocks_per_seq = 0, max_context = 0;
  bool prefix_caching = true;
  uint64_t salt = 0;
  int spec_lookup = 0, spec_tokens = 4, spec_max_tokens = 8;  // EngineOptions' spec_*
  int64_t spec_max_batch = 8;
};

// The rows of one step, in the layout engine::PagedStep wants.
struct StepPlan {
  std::vector<int32_t> tokens, positions, row_seq, block_tables, logit_rows;
  std::vector<Sequence*> seqs;    // step sequence index -> sequence
  std::vector<int64_t> chunk;     // rows of each
  std::vector<int32_t> logit_of;  // first logits row of each, -1 when it samples nothing this step (a speculating
                                  // sequence has 1 + drafts.size() consecutive logits rows)
  double step_s = 0;              // the step's time (set by the caller before commit; adaptive K uses it)
  void clear();
  engine::PagedStep view(int64_t max_blocks) const;
};

struct SchedulerCounters {
  int64_t prompt_tokens = 0, generation_tokens = 0, steps = 0, preemptions = 0;
  int64_t finished = 0, cancelled = 0;
  int64_t spec_steps = 0, spec_proposed = 0, spec_accepted = 0;
};

// Picks sequence s's token from logits row `row`, with `history` the tokens before it (repetition penalty). draft
// >= 0: verify that proposal: return it when accepted, else a replacement token (never equal to it). May throw
// flashkit::Error (the request then ends "error").
using TokenPick = std::function<int32_t(int64_t row, Sequence* s, std::span<const int32_t> history, int32_t draft)>;

// Shared by the two step cores (Scheduler, SessionCore): fill s's result, count it, call on_done (s is marked
// finished; the caller has released its blocks or session first), and drop finished sequences from both queues.
void complete_request(Sequence* s, const char* reason, const std::string& error, SchedulerCounters& counters);
void reap_finished(std::vector<std::unique_ptr<Sequence>>& running, std::deque<std::unique_ptr<Sequence>>& waiting);

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& cfg);
  ~Scheduler();  // finishes what is left as "cancelled"

  void add(std::unique_ptr<Sequence> seq);
  void cancel(uint64_t id);  // finishes it now (no-op for unknown ids)
  void reset_prefix_cache() { pool_.reset_cache(); }
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  // Plans the next step; false when there is nothing to run.
  bool schedule(StepPlan& plan);
  // Applies a step's logits ([plan.logit_rows.size(), vocab]).
  void commit(StepPlan& plan, const float* logits, int64_t vocab);
  // Applies a greedy step (engine::PagedRunner::step_greedy): greedy[i] is logit row i's argmax. A row whose argmax
  // is invalid goes to its sampler with the row from row_logits(i, out) (which raises the sampler's error).
  void commit_greedy(StepPlan& plan, std::span<const engine::ArgmaxResult> greedy,
                     const std::function<void(int64_t, float*)>& row_logits, int64_t vocab);
  // Whether every sequence that samples a token in this plan picks the argmax of the raw logits (temperature 0,
  // no repetition penalty): then the step can run as a greedy step.
  static bool all_greedy(const StepPlan& plan);
  // A step that failed on the device: its sequences end with "error".
  void fail_step(StepPlan& plan, const std::string& message);

  int64_t running() const { return int64_t(running_.size()); }
  int64_t waiting() const { return int64_t(waiting_.size()); }
  const BlockPool& pool() const { return pool_; }
  const SchedulerCounters& counters() const { return counters_; }

 private:
  void preempt(Sequence* s);
  void finish(Sequence* s, const char* reason, const std::string& error = {});
  void release_blocks(Sequence* s);
  bool grow(Sequence* s, int64_t upto_tokens);  // blocks for positions < upto_tokens; false if out of blocks
  void plan_rows(StepPlan& plan, Sequence* s, int64_t chunk);
  // Pass 3 of schedule(): proposals for the decoding sequences of `entries` (chunk 1), in `budget` rows.
  void plan_speculation(std::vector<std::pair<Sequence*, int64_t>>& entries, int64_t budget);
  // One sequence's commit: the rows of a speculating sequence walked, tokens delivered, the cache rolled back.
  void commit_sequence(StepPlan& plan, size_t k, const TokenPick& pick);
  void reap();  // drops finished sequences from the queues
  void commit_with(StepPlan& plan, const TokenPick& pick);

  SchedulerConfig cfg_;
  BlockPool pool_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order
  SchedulerCounters counters_;
};

}  // namespace flashkit::serve
