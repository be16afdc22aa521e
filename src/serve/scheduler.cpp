// See scheduler.hpp.
#include "serve/scheduler.hpp"

#include <algorithm>
#include <string>

#include "flashkit/error.hpp"

namespace flashkit::serve {

void StepPlan::clear() {
  tokens.clear();
  positions.clear();
  row_seq.clear();
  block_tables.clear();
  logit_rows.clear();
  seqs.clear();
  chunk.clear();
  logit_of.clear();
}

engine::PagedStep StepPlan::view(int64_t max_blocks) const {
  engine::PagedStep st;
  st.tokens = tokens;
  st.positions = positions;
  st.row_seq = row_seq;
  st.block_tables = block_tables;
  st.logit_rows = logit_rows;
  st.num_seqs = int64_t(seqs.size());
  st.max_blocks = max_blocks;
  return st;
}

Scheduler::Scheduler(const SchedulerConfig& cfg) : cfg_(cfg), pool_(cfg.num_blocks, cfg.block_size, cfg.salt) {}

Scheduler::~Scheduler() {
  for (auto& s : running_) finish(s.get(), "cancelled");
  for (auto& s : waiting_) finish(s.get(), "cancelled");
}

void Scheduler::add(std::unique_ptr<Sequence> seq) { waiting_.push_back(std::move(seq)); }

void Scheduler::cancel(uint64_t id) {
  for (auto& s : running_)
    if (s->id == id && !s->finished) finish(s.get(), "cancelled");
  for (auto& s : waiting_)
    if (s->id == id && !s->finished) finish(s.get(), "cancelled");
  reap();
}

void Scheduler::release_blocks(Sequence* s) {
  for (int32_t b : s->blocks) pool_.release(b);
  s->blocks.clear();
  s->keys.clear();
  s->computed = 0;
}

void complete_request(Sequence* s, const char* reason, const std::string& error, SchedulerCounters& counters) {
  s->finished = true;
  RequestResult& r = s->result;
  r.id = s->id;
  r.finish_reason = reason;
  r.error = error;
  r.prompt_tokens = s->prompt_len;
  r.completion_tokens = s->generated;
  r.total_s = std::chrono::duration<double>(Clock::now() - s->submitted).count();
  if (r.finish_reason == "cancelled") ++counters.cancelled;
  else ++counters.finished;
  if (s->req.on_done) s->req.on_done(r);
}

void reap_finished(std::vector<std::unique_ptr<Sequence>>& running, std::deque<std::unique_ptr<Sequence>>& waiting) {
  running.erase(std::remove_if(running.begin(), running.end(), [](auto& s) { return s->finished; }), running.end());
  waiting.erase(std::remove_if(waiting.begin(), waiting.end(), [](auto& s) { return s->finished; }), waiting.end());
}

void Scheduler::finish(Sequence* s, const char* reason, const std::string& error) {
  if (s->finished) return;
  release_blocks(s);
  complete_request(s, reason, error, counters_);
}

void Scheduler::reap() { reap_finished(running_, waiting_); }

void Scheduler::preempt(Sequence* s) {
  release_blocks(s);
  ++s->result.preemptions;
  ++counters_.preemptions;
  auto it = std::find_if(running_.begin(), running_.end(), [&](auto& p) { return p.get() == s; });
  waiting_.push_front(std::move(*it));
  running_.erase(it);
}

bool Scheduler::grow(Sequence* s, int64_t upto_tokens) {
  const int64_t need = (upto_tokens + cfg_.block_size - 1) / cfg_.block_size;
  while (int64_t(s->blocks.size()) < need) {
    const int32_t b = pool_.allocate();
    if (b < 0) return false;
    s->blocks.push_back(b);
  }
  return true;
}

void Scheduler::plan_rows(StepPlan& plan, Sequence* s, int64_t chunk) {
  const int32_t k = int32_t(plan.seqs.size());
  for (int64_t i = 0; i < chunk; ++i) {
    const int64_t pos = s->computed + i;
    plan.tokens.push_back(s->tokens[size_t(pos)]);
    plan.positions.push_back(int32_t(pos));
    plan.row_seq.push_back(k);
  }
  const bool samples = s->computed + chunk == int64_t(s->tokens.size());
  plan.logit_of.push_back(samples ? int32_t(plan.logit_rows.size()) : -1);
  if (samples) plan.logit_rows.push_back(int32_t(plan.tokens.size() - 1));
  plan.seqs.push_back(s);
  plan.chunk.push_back(chunk);
  const size_t base = plan.block_tables.size();
  plan.block_tables.resize(base + size_t(cfg_.max_blocks_per_seq), 0);
  std::copy(s->blocks.begin(), s->blocks.end(), plan.block_tables.begin() + int64_t(base));
}

bool Scheduler::schedule(StepPlan& plan) {
  plan.clear();
  reap();
  int64_t budget = cfg_.max_step_tokens;
  bool preempted = false;
  const int64_t bs = cfg_.block_size;
  // Pass 1: every decoding sequence's row, oldest first, so that a long prompt never stalls the others' tokens. A
  // missing block is taken from the most recently admitted sequences (maybe this one): preemption.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* s = running_[i].get();
    if (int64_t(s->tokens.size()) - s->computed != 1) continue;
    bool self = false;
    while (!grow(s, s->computed + 1)) {
      Sequence* victim = running_.back().get();  // never one planned already: those come before index i
      preempt(victim);
      preempted = true;
      self = victim == s;
      if (self) break;
    }
    if (self) break;  // s was the last one
    plan_rows(plan, s, 1);
    budget -= 1;
  }
  // Pass 2: prompt (or recomputation) chunks, oldest first, in what is left of the budget. A chunk gets the blocks
  // there are (it is shortened); it preempts only when nothing else could run at all, so progress is guaranteed.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* s = running_[i].get();
    const int64_t left = int64_t(s->tokens.size()) - s->computed;
    if (left == 1) continue;  // planned in pass 1
    bool self = false;
    while (!grow(s, s->computed + 1)) {
      if (!plan.tokens.empty()) break;
      Sequence* victim = running_.back().get();
      preempt(victim);
      preempted = true;
      self = victim == s;
      if (self) break;
    }
    if (self) break;
    const int64_t room = (int64_t(s->blocks.size()) + pool_.available()) * bs - s->computed;
    const int64_t chunk = std::min({left, budget, room});
    if (chunk <= 0) continue;
    grow(s, s->computed + chunk);
    plan_rows(plan, s, chunk);
    budget -= chunk;
  }
  // Admission. Preemption this step means blocks are short: no newcomers until the running ones have room.
  while (!preempted && budget > 0 && int64_t(running_.size()) < cfg_.max_running && !waiting_.empty()) {
    Sequence* s = waiting_.front().get();
    if (s->blocks.empty() && cfg_.prefix_caching) {
      // Whole blocks only, and never the last token: it must be computed to give the logits of the next one.
      const int64_t max_blocks = (int64_t(s->tokens.size()) - 1) / bs;
      s->blocks = pool_.match(s->tokens, max_blocks, &s->keys);
      s->computed = int64_t(s->blocks.size()) * bs;
      if (!s->admitted_once) s->result.cached_tokens = s->computed;
    }
    const int64_t reserve = int64_t(running_.size());  // one block per running sequence stays free for its growth
    const int64_t room = (int64_t(s->blocks.size()) + pool_.available() - reserve) * bs - s->computed;
    const int64_t chunk = std::min({int64_t(s->tokens.size()) - s->computed, budget, room});
    if (chunk <= 0) {
      release_blocks(s);  // give the matched blocks back; they are matched again at the next try
      break;
    }
    grow(s, s->computed + chunk);
    s->admitted_once = true;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    plan_rows(plan, s, chunk);
    budget -= chunk;
  }
  if (plan.tokens.empty()) return false;
  ++counters_.steps;
  return true;
}

void Scheduler::commit(StepPlan& plan, const float* logits, int64_t vocab) {
  commit_with(plan, [&](size_t k, Sequence* s) {
    return s->sampler->sample(std::span<const float>(logits + int64_t(plan.logit_of[k]) * vocab, size_t(vocab)),
                              s->tokens);
  });
}

void Scheduler::commit_greedy(StepPlan& plan, std::span<const engine::ArgmaxResult> greedy,
                              const std::function<void(int64_t, float*)>& row_logits, int64_t vocab) {
  std::vector<float> row;
  commit_with(plan, [&](size_t k, Sequence* s) {
    const engine::ArgmaxResult& a = greedy[size_t(plan.logit_of[k])];
    if (a.valid) return a.index;  // temperature 0: the lowest index of the maximum, ties included
    row.resize(size_t(vocab));
    row_logits(plan.logit_of[k], row.data());
    return s->sampler->sample(row, s->tokens);
  });
}

bool Scheduler::all_greedy(const StepPlan& plan) {
  for (size_t k = 0; k < plan.seqs.size(); ++k) {
    if (plan.logit_of[k] < 0) continue;
    const SamplingOptions& o = plan.seqs[k]->req.sampling;
    if (o.temperature != 0.0f || o.repetition_penalty != 1.0f) return false;
  }
  return true;
}

void Scheduler::commit_with(StepPlan& plan, const std::function<int32_t(size_t, Sequence*)>& pick) {
  const int64_t bs = cfg_.block_size;
  for (size_t k = 0; k < plan.seqs.size(); ++k) {
    Sequence* s = plan.seqs[k];
    if (s->finished) continue;  // cancelled meanwhile (cannot happen on the engine thread, but cheap to check)
    const int64_t chunk = plan.chunk[k];
    const bool decode_row = plan.logit_of[k] >= 0 && s->generated > 0 && chunk == 1;
    counters_.prompt_tokens += chunk - (decode_row ? 1 : 0);
    s->computed += chunk;
    if (cfg_.prefix_caching) {
      while (int64_t(s->keys.size()) < s->computed / bs) {
        const size_t i = s->keys.size();
        const uint64_t parent = i ? s->keys[i - 1] : 0;
        s->keys.push_back(pool_.publish(s->blocks[i], parent,
                                        std::span<const int32_t>(s->tokens).subspan(i * size_t(bs), size_t(bs))));
      }
    }
    if (plan.logit_of[k] < 0) continue;
    int32_t tok = -1;
    try {
      tok = pick(k, s);
    } catch (const Error& e) {
      finish(s, "error", e.what());
      continue;
    }
    s->tokens.push_back(tok);
    ++s->generated;
    ++counters_.generation_tokens;
    if (s->generated == 1)
      s->result.time_to_first_token_s = std::chrono::duration<double>(Clock::now() - s->submitted).count();
    const bool go_on = s->req.on_token ? s->req.on_token(tok) : true;
    if (std::binary_search(s->stops.begin(), s->stops.end(), tok) || !go_on) finish(s, "stop");
    else if (s->generated >= s->req.max_tokens || s->computed >= cfg_.max_context) finish(s, "length");
  }
  reap();
}

void Scheduler::fail_step(StepPlan& plan, const std::string& message) {
  for (Sequence* s : plan.seqs) finish(s, "error", message);
  reap();
}

}  // namespace flashkit::serve
