// serve::Engine (include/flashkit/serve.hpp): the scheduler thread around a StepCore (serve/step_core.hpp): the paged
// core below (Scheduler + engine::PagedRunner) for models with a KV cache, the session core (serve/session_core.hpp)
// for models without one (Mamba).
//
// Threads. submit / cancel / reset_prefix_cache / stats may be called from any thread; they only touch the inbox
// (under mu_). Everything else -- the scheduler, the block pool, the runner, the callbacks -- lives on the engine
// thread (or the caller of step() without a background thread), so callbacks run without any engine lock held and
// may call back into the engine.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include "engine/paged.hpp"
#include "engine/sampler.hpp"
#include "core/limits.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "flashkit/serve.hpp"
#include "serve/scheduler.hpp"
#include "serve/session_core.hpp"
#include "serve/step_core.hpp"

namespace flashkit::serve {

namespace {

[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, m); }

int64_t available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return physical_memory_bytes();
}

// EngineOptions::spec_max_batch = 0: how many decoding sequences may still speculate, by backend (serve.hpp): 8 on a
// device backend (paged_device_free_bytes reports its memory), 1 on the CPU (measured: two speculating streams lose).
int64_t spec_max_batch_for(const Model& model) { return engine::paged_device_free_bytes(model) >= 0 ? 8 : 1; }

// Attention models: continuous batching over paged KV blocks (Scheduler plans, engine::PagedRunner computes).
class PagedCore final : public StepCore {
 public:
  // Resolves opts.kv_memory (0: default_kv_memory) to whole blocks and caps opts.max_running at max_step_tokens.
  PagedCore(Model& model, EngineOptions& opts) : block_size_(opts.block_size) {
    const ModelInfo& info = model.info();
    if (opts.kv_memory == 0) opts.kv_memory = default_kv_memory(model, opts);
    const int64_t per_block = engine::paged_kv_bytes_per_token(model) * opts.block_size;
    const int64_t blocks = opts.kv_memory / per_block;
    if (blocks < 1)
      bad("kv_memory of " + std::to_string(opts.kv_memory) + " bytes holds no KV block (one block of " +
          std::to_string(opts.block_size) + " positions takes " + std::to_string(per_block) + " bytes)");
    engine::PagedRunnerOptions ro;
    ro.block_size = opts.block_size;
    ro.num_blocks = blocks;
    ro.max_rows = opts.max_step_tokens;
    opts.max_running = std::min(opts.max_running, opts.max_step_tokens);
    if (opts.spec_max_batch == 0) opts.spec_max_batch = spec_max_batch_for(model);
    // Logits rows: one per sampling sequence, plus one per proposal when speculating (at most spec_max_batch
    // sequences speculate, K each); never more than the step's rows.
    const int64_t spec_k = opts.spec_tokens > 0 ? opts.spec_tokens : opts.spec_max_tokens;
    const int64_t spec_rows = opts.spec_lookup > 0 ? std::min(opts.spec_max_batch, opts.max_running) * spec_k : 0;
    ro.max_seqs = std::min(opts.max_running + spec_rows, opts.max_step_tokens);
    runner_ = engine::make_paged_runner(model, ro);
    opts.kv_memory = blocks * per_block;
    kv_bytes_ = opts.kv_memory;
    SchedulerConfig sc;
    sc.block_size = opts.block_size;
    sc.num_blocks = blocks;
    sc.max_step_tokens = opts.max_step_tokens;
    sc.max_running = opts.max_running;
    sc.max_blocks_per_seq = runner_->max_blocks_per_seq();
    sc.max_context = info.max_context;
    sc.prefix_caching = opts.prefix_caching;
    sc.spec_lookup = opts.spec_lookup;
    sc.spec_tokens = opts.spec_tokens;
    sc.spec_max_tokens = opts.spec_max_tokens;
    sc.spec_max_batch = opts.spec_max_batch;
    // The prefix cache's salt: the model identity and the block size (engine/paged.hpp, block_pool.hpp).
    const std::string ident = engine::model_identity(model) + "block_size=" + std::to_string(opts.block_size);
    sc.salt = hash_bytes(ident.data(), ident.size());
    sched_ = std::make_unique<Scheduler>(sc);
    vocab_ = info.vocab_size;
    logits_.resize(size_t(ro.max_seqs * vocab_));
  }

  void add(std::unique_ptr<Sequence> seq) override { sched_->add(std::move(seq)); }
  void cancel(uint64_t id) override { sched_->cancel(id); }
  void reset_prefix_cache() override { sched_->reset_prefix_cache(); }
  bool has_work() const override { return sched_->has_work(); }

  bool run_step() override {
    if (!sched_->schedule(plan_)) return false;
    const auto t0 = Clock::now();
    try {
      if (runner_->greedy_allowed() && Scheduler::all_greedy(plan_)) {
        // Only the ids come back (CUDA: 8 bytes a row instead of the vocabulary's logits and a host scan of them).
        greedy_.resize(plan_.logit_rows.size());
        runner_->step_greedy(plan_.view(runner_->max_blocks_per_seq()), greedy_);
        plan_.step_s = std::chrono::duration<double>(Clock::now() - t0).count();
        busy_s_ += plan_.step_s;
        sched_->commit_greedy(plan_, greedy_, [&](int64_t i, float* out) { runner_->logits_row(i, out); }, vocab_);
      } else {
        runner_->step(plan_.view(runner_->max_blocks_per_seq()), logits_.data());
        plan_.step_s = std::chrono::duration<double>(Clock::now() - t0).count();
        busy_s_ += plan_.step_s;
        sched_->commit(plan_, logits_.data(), vocab_);
      }
    } catch (const std::exception& e) {
      sched_->fail_step(plan_, e.what());
    }
    return true;
  }

  void fill_stats(EngineStats& s) const override {
    const BlockPoolStats ps = sched_->pool().stats();
    const SchedulerCounters& c = sched_->counters();
    s.running = sched_->running();
    s.waiting = sched_->waiting();
    s.kv_blocks_total = ps.total;
    s.kv_blocks_free = ps.free;
    s.kv_blocks_used = ps.used;
    s.kv_blocks_cached = ps.cached;
    s.block_size = block_size_;
    s.kv_bytes = kv_bytes_;
    s.prefix_hit_blocks = ps.hit_blocks;
    s.prefix_miss_blocks = ps.miss_blocks;
    s.prefix_evictions = ps.evictions;
    s.prefix_resets = ps.resets;
    s.prompt_tokens = c.prompt_tokens;
    s.generation_tokens = c.generation_tokens;
    s.steps = c.steps;
    s.preemptions = c.preemptions;
    s.requests_finished = c.finished;
    s.requests_cancelled = c.cancelled;
    s.spec_steps = c.spec_steps;
    s.spec_proposed = c.spec_proposed;
    s.spec_accepted = c.spec_accepted;
    s.busy_s = busy_s_;
  }

 private:
  int64_t block_size_ = 0, kv_bytes_ = 0, vocab_ = 0;
  std::unique_ptr<engine::PagedRunner> runner_;
  std::unique_ptr<Scheduler> sched_;
  StepPlan plan_;
  std::vector<float> logits_;
  std::vector<engine::ArgmaxResult> greedy_;  // a greedy step's ids
  double busy_s_ = 0;
};

class EngineImpl final : public Engine {
 public:
  EngineImpl(std::shared_ptr<Model> model, const EngineOptions& opts) : model_(std::move(model)), opts_(opts) {
    if (!model_) bad("serve engine: no model");
    if (opts.block_size < 1 || opts.block_size > 1024)
      bad("block_size must be in [1, 1024], got " + std::to_string(opts.block_size));
    if (opts.kv_memory < 0) bad("kv_memory must be >= 0 bytes (0: default), got " + std::to_string(opts.kv_memory));
    if (opts.max_step_tokens < 1 || opts.max_step_tokens > 65536)
      bad("max_step_tokens must be in [1, 65536], got " + std::to_string(opts.max_step_tokens));
    if (opts.max_running < 1 || opts.max_running > 4096)
      bad("max_running must be in [1, 4096], got " + std::to_string(opts.max_running));
    if (opts.spec_lookup < 0 || opts.spec_lookup > limits::kMaxSpecTokens)
      bad("spec_lookup must be in [0, " + std::to_string(limits::kMaxSpecTokens) + "] (0: off), got " +
          std::to_string(opts.spec_lookup));
    if (opts.spec_tokens < 0 || opts.spec_tokens > limits::kMaxSpecTokens)
      bad("spec_tokens must be in [1, " + std::to_string(limits::kMaxSpecTokens) + "] or 0 (adaptive), got " +
          std::to_string(opts.spec_tokens));
    if (opts.spec_max_tokens < 1 || opts.spec_max_tokens > limits::kMaxSpecTokens)
      bad("spec_max_tokens must be in [1, " + std::to_string(limits::kMaxSpecTokens) + "], got " +
          std::to_string(opts.spec_max_tokens));
    if (opts.spec_max_batch < 0 || opts.spec_max_batch > 4096)
      bad("spec_max_batch must be in [0, 4096] (0: by backend), got " + std::to_string(opts.spec_max_batch));
    if (opts.spec_lookup > 0 && !engine::has_kv_cache(*model_))
      bad("spec_lookup: speculative decoding in the server needs a model with a KV cache (its paged cache rolls "
          "back rejected proposals); this model (" + model_->info().architecture +
          ") has none: serve it without n-gram lookup");
    if (engine::has_kv_cache(*model_)) {
      core_ = std::make_unique<PagedCore>(*model_, opts_);  // resolves kv_memory and max_running in opts_
    } else {
      // One Session per running sequence, a constant-size state each: no KV pool, nothing to cache by prefix.
      opts_.kv_memory = 0;
      opts_.prefix_caching = false;
      core_ = std::make_unique<SessionCore>(model_, opts_.max_running);
    }
    publish_stats();
    if (opts.background) thread_ = std::thread([this] { loop(); });
  }
  ~EngineImpl() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    // Whatever is left (queued in the inbox or in the scheduler) ends as "cancelled".
    take_inbox();
    core_.reset();
  }

  uint64_t submit(Request r) override {
    const ModelInfo& info = model_->info();
    if (r.prompt.empty()) bad("prompt: empty (give at least one token)");
    for (size_t i = 0; i < r.prompt.size(); ++i)
      if (r.prompt[i] < 0 || r.prompt[i] >= info.vocab_size)
        bad("prompt: token id " + std::to_string(r.prompt[i]) + " at index " + std::to_string(i) +
            " is outside the vocabulary [0, " + std::to_string(info.vocab_size) + ")");
    if (r.max_tokens < 1) bad("max_tokens must be at least 1, got " + std::to_string(r.max_tokens));
    const int64_t n = int64_t(r.prompt.size());
    if (n > info.max_context)
      bad("prompt of " + std::to_string(n) + " tokens does not fit the context of " + std::to_string(info.max_context) +
          " tokens");
    engine::SamplerParams sp;
    sp.temperature = r.sampling.temperature;
    sp.top_k = r.sampling.top_k;
    sp.top_p = r.sampling.top_p;
    sp.min_p = r.sampling.min_p;
    sp.repetition_penalty = r.sampling.repetition_penalty;
    sp.seed = r.sampling.seed;
    auto s = std::make_unique<Sequence>();
    s->sampler = std::make_unique<engine::Sampler>(sp);  // validates
    if (opts_.kv_memory > 0) {
      // The most positions the sequence can hold: it must fit the pool on its own, or it could never finish.
      const int64_t most = std::min(n + r.max_tokens, info.max_context);
      const int64_t need = (most + opts_.block_size - 1) / opts_.block_size;
      const int64_t have = opts_.kv_memory / (engine::paged_kv_bytes_per_token(*model_) * opts_.block_size);
      if (need > have)
        bad("the request needs up to " + std::to_string(most) + " positions (" + std::to_string(need) +
            " KV blocks) but the KV pool has " + std::to_string(have) + " blocks (raise the KV memory or lower max_tokens)");
    }
    s->tokens = r.prompt;
    s->prompt_len = n;
    s->stops = r.stop_ids;
    if (r.stop_at_eos) s->stops.insert(s->stops.end(), info.eos_ids.begin(), info.eos_ids.end());
    std::sort(s->stops.begin(), s->stops.end());
    s->req = std::move(r);
    s->submitted = Clock::now();
    uint64_t id;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stop_) fail(Status::unsupported, "serve engine: shutting down");
      id = s->id = next_id_++;
      inbox_.push_back(std::move(s));
      ++pending_;
    }
    cv_.notify_all();
    return id;
  }

  void cancel(uint64_t id) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      cancels_.push_back(id);
    }
    cv_.notify_all();
  }
  void reset_prefix_cache() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      reset_ = true;
    }
    cv_.notify_all();
  }

  bool step() override {
    if (opts_.background) fail(Status::invalid_argument, "serve engine: step() is for engines without a background thread");
    take_inbox();
    return run_step();
  }

  void wait_idle() override {
    if (!opts_.background) {
      while (step()) {
      }
      return;
    }
    std::unique_lock<std::mutex> lk(mu_);
    idle_cv_.wait(lk, [&] { return pending_ == 0 || stop_; });
  }

  EngineStats stats() const override {
    std::lock_guard<std::mutex> lk(mu_);
    EngineStats s = stats_;
    s.waiting += int64_t(inbox_.size());
    return s;
  }
  const Model& model() const override { return *model_; }
  const EngineOptions& options() const override { return opts_; }

 private:
  // Moves the inbox, cancels and a cache reset into the scheduler (engine thread).
  void take_inbox() {
    std::vector<std::unique_ptr<Sequence>> in;
    std::vector<uint64_t> cancels;
    bool reset = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      in.swap(inbox_);
      cancels.swap(cancels_);
      reset = reset_;
      reset_ = false;
    }
    if (!core_) return;
    for (auto& s : in) {
      auto done = std::move(s->req.on_done);
      // Count the request off when it ends, whatever ends it: after the step's statistics are published
      // (publish_stats), so that stats() after wait_idle() includes it.
      s->req.on_done = [this, done](const RequestResult& r) {
        if (done) done(r);
        ++ended_;
      };
      core_->add(std::move(s));
    }
    for (uint64_t id : cancels) core_->cancel(id);
    if (reset) core_->reset_prefix_cache();
  }

  bool run_step() {
    const bool ran = core_->run_step();
    publish_stats();
    return ran;
  }

  void loop() {
    while (true) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !inbox_.empty() || !cancels_.empty() || reset_ || core_->has_work(); });
        if (stop_) return;
      }
      take_inbox();
      run_step();
    }
  }

  void publish_stats() {
    EngineStats st;
    core_->fill_stats(st);
    std::lock_guard<std::mutex> lk(mu_);
    stats_ = st;
    pending_ -= ended_;
    ended_ = 0;
    if (pending_ == 0) idle_cv_.notify_all();
  }

  std::shared_ptr<Model> model_;
  EngineOptions opts_;
  std::unique_ptr<StepCore> core_;

  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::vector<std::unique_ptr<Sequence>> inbox_;
  std::vector<uint64_t> cancels_;
  bool reset_ = false, stop_ = false;
  uint64_t next_id_ = 1;
  int64_t pending_ = 0;  // submitted, not finished (as of the last publish_stats)
  int64_t ended_ = 0;    // finished since the last publish_stats (engine thread only)
  EngineStats stats_;
  std::thread thread_;
};

}  // namespace

int64_t default_kv_memory(const Model& model, const EngineOptions& opts) {
  if (!engine::has_kv_cache(model)) return 0;  // its sequences run in sessions of their own (session_core.hpp)
  const int64_t per_token = engine::paged_kv_bytes_per_token(model);
  const int64_t ctx = model.info().max_context;
  const int64_t want = per_token * ctx * std::max<int64_t>(1, opts.max_running);
  // A CUDA model's pool is device memory: half of what is free now (the weights are loaded; the step's activations
  // and cuBLAS workspace are small). On the CPU a quarter of the host memory available now.
  const int64_t device_free = engine::paged_device_free_bytes(model);
  const int64_t share = device_free >= 0 ? device_free / 2 : available_memory_bytes() / 4;
  return std::max(per_token * (ctx + opts.block_size), std::min(want, share));
}

std::unique_ptr<Engine> Engine::create(std::shared_ptr<Model> model, const EngineOptions& opts) {
  return std::make_unique<EngineImpl>(std::move(model), opts);
}

}  // namespace flashkit::serve
