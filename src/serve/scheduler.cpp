// See scheduler.hpp.
#include "serve/scheduler.hpp"

#include <algorithm>
#include <string>

#include "flashkit/error.hpp"
#include "spec/accept.hpp"
#include "spec/ngram.hpp"

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
  const int64_t known = int64_t(s->tokens.size());
  for (int64_t i = 0; i < chunk; ++i) {
    const int64_t pos = s->computed + i;
    // Past the known tokens: the sequence's proposals (only after its decode row).
    plan.tokens.push_back(pos < known ? s->tokens[size_t(pos)] : s->drafts[size_t(pos - known)]);
    plan.positions.push_back(int32_t(pos));
    plan.row_seq.push_back(k);
  }
  const bool samples = s->computed + chunk >= known;
  plan.logit_of.push_back(samples ? int32_t(plan.logit_rows.size()) : -1);
  if (samples)  // the row of the last known token and every proposal's row
    for (int64_t r = known - 1 - s->computed; r < chunk; ++r)
      plan.logit_rows.push_back(int32_t(int64_t(plan.tokens.size()) - chunk + r));
  plan.seqs.push_back(s);
  plan.chunk.push_back(chunk);
  const size_t base = plan.block_tables.size();
  plan.block_tables.resize(base + size_t(cfg_.max_blocks_per_seq), 0);
  std::copy(s->blocks.begin(), s->blocks.end(), plan.block_tables.begin() + int64_t(base));
}

void Scheduler::plan_speculation(std::vector<std::pair<Sequence*, int64_t>>& entries, int64_t budget) {
  int64_t decoding = 0;
  for (auto& [s, chunk] : entries) decoding += int64_t(s->tokens.size()) - s->computed == 1;
  if (decoding == 0 || decoding > cfg_.spec_max_batch) return;
  const int64_t reserve = int64_t(running_.size());  // the blocks admission keeps in hand for growth stay free
  for (auto& [s, chunk] : entries) {
    if (budget <= 0) break;
    const int64_t known = int64_t(s->tokens.size());
    if (known - s->computed != 1) continue;
    if (cfg_.spec_tokens == 0 && !s->spec_k)
      s->spec_k = std::make_unique<spec::StepModel>(std::min(4, cfg_.spec_max_tokens), cfg_.spec_max_tokens, true);
    const int64_t want = s->spec_k ? s->spec_k->next_k() : cfg_.spec_tokens;
    // Never past what the request may still deliver (k proposals yield up to k + 1 tokens) or the context.
    const int64_t k = std::min({want, budget, s->req.max_tokens - s->generated - 1, cfg_.max_context - known});
    if (k <= 0) continue;
    auto cands = spec::ngram_candidates(s->tokens, cfg_.spec_lookup, int(k), 1);
    if (cands.empty()) continue;
    std::vector<int32_t>& d = cands[0];
    // Blocks for positions known .. known + d.size() - 1, as far as the free blocks beyond the reserve reach.
    const int64_t bs = cfg_.block_size;
    int64_t fits = int64_t(s->blocks.size()) * bs - known;
    while (fits < int64_t(d.size()) && pool_.available() > reserve) {
      s->blocks.push_back(pool_.allocate());
      fits += bs;
    }
    d.resize(size_t(std::clamp<int64_t>(fits, 0, int64_t(d.size()))));
    if (d.empty()) continue;
    s->drafts = std::move(d);
    chunk += int64_t(s->drafts.size());
    budget -= int64_t(s->drafts.size());
  }
}

bool Scheduler::schedule(StepPlan& plan) {
  plan.clear();
  reap();
  // The step's sequences and their row counts; rows are laid out at the end, when speculation has added its rows
  // after the decode rows (a sequence's rows are contiguous).
  std::vector<std::pair<Sequence*, int64_t>> entries;
  for (auto& s : running_) s->drafts.clear();
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
    entries.emplace_back(s, 1);
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
      if (!entries.empty()) break;
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
    entries.emplace_back(s, chunk);
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
    s->drafts.clear();
    entries.emplace_back(s, chunk);
    budget -= chunk;
  }
  if (entries.empty()) return false;
  if (cfg_.spec_lookup > 0 && !preempted) plan_speculation(entries, budget);
  for (auto& [s, chunk] : entries) plan_rows(plan, s, chunk);
  ++counters_.steps;
  return true;
}

void Scheduler::commit(StepPlan& plan, const float* logits, int64_t vocab) {
  spec::Dist p;
  commit_with(plan, [&](int64_t row, Sequence* s, std::span<const int32_t> history, int32_t draft) {
    const std::span<const float> lg(logits + row * vocab, size_t(vocab));
    if (draft < 0 || s->sampler->params().greedy()) return s->sampler->sample(lg, history);
    // An n-gram proposal is a point mass: accepted with probability p(draft), else drawn from p without it.
    p.assign(s->sampler->distribution(lg, history), vocab);
    int which = -1;
    const int32_t d[1] = {draft};
    return spec::accept_candidates(p, d, *s->sampler, spec::AcceptRule::exact, &which).token;
  });
}

void Scheduler::commit_greedy(StepPlan& plan, std::span<const engine::ArgmaxResult> greedy,
                              const std::function<void(int64_t, float*)>& row_logits, int64_t vocab) {
  std::vector<float> row;
  commit_with(plan, [&](int64_t i, Sequence* s, std::span<const int32_t> history, int32_t) {
    const engine::ArgmaxResult& a = greedy[size_t(i)];
    if (a.valid) return a.index;  // temperature 0: the lowest index of the maximum, ties included
    row.resize(size_t(vocab));
    row_logits(i, row.data());
    return s->sampler->sample(row, history);
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

void Scheduler::commit_with(StepPlan& plan, const TokenPick& pick) {
  for (size_t k = 0; k < plan.seqs.size(); ++k)
    if (!plan.seqs[k]->finished) commit_sequence(plan, k, pick);  // finished: cancelled meanwhile (cheap to check)
  reap();
}

void Scheduler::commit_sequence(StepPlan& plan, size_t k, const TokenPick& pick) {
  Sequence* s = plan.seqs[k];
  const int64_t bs = cfg_.block_size;
  const int64_t chunk = plan.chunk[k];
  const int64_t drafts = int64_t(s->drafts.size());
  const bool decode_row = plan.logit_of[k] >= 0 && s->generated > 0 && chunk == 1 + drafts;
  counters_.prompt_tokens += chunk - drafts - (decode_row ? 1 : 0);
  s->computed += chunk - drafts;  // the proposals' rows count once accepted
  const char* reason = nullptr;
  std::string error;
  int64_t accepted = 0;
  if (plan.logit_of[k] >= 0) {
    // Row j verifies proposal j (the last row has none); every accepted proposal's row holds valid keys/values.
    for (int64_t j = 0; j <= drafts && !reason; ++j) {
      const int32_t draft = j < drafts ? s->drafts[size_t(j)] : -1;
      int32_t tok = -1;
      try {
        tok = pick(plan.logit_of[k] + j, s, s->tokens, draft);
      } catch (const Error& e) {
        reason = "error";
        error = e.what();
        break;
      }
      s->tokens.push_back(tok);
      ++s->generated;
      ++counters_.generation_tokens;
      if (drafts > 0) ++s->result.spec_emitted;
      if (s->generated == 1)
        s->result.time_to_first_token_s = std::chrono::duration<double>(Clock::now() - s->submitted).count();
      const bool go_on = s->req.on_token ? s->req.on_token(tok) : true;
      if (std::binary_search(s->stops.begin(), s->stops.end(), tok) || !go_on) reason = "stop";
      else if (s->generated >= s->req.max_tokens || s->computed >= cfg_.max_context) reason = "length";
      if (tok != draft) break;
      ++accepted;
      ++s->computed;
    }
  }
  if (drafts > 0) {
    s->result.spec_steps += 1;
    s->result.spec_proposed += drafts;
    s->result.spec_accepted += accepted;
    counters_.spec_steps += 1;
    counters_.spec_proposed += drafts;
    counters_.spec_accepted += accepted;
    if (s->spec_k) s->spec_k->update(int(drafts), int(accepted), 0.0, plan.step_s, 1 + drafts);
  } else if (s->spec_k && decode_row) {
    s->spec_k->update(0, 0, 0.0, plan.step_s, 1);  // a step without proposals: only its time (the T = 1 point)
  }
  // Roll back: blocks past the accepted length are empty again (their rejected rows are never read: a row attends
  // to positions <= its own, each written before it is read).
  const size_t keep = size_t((s->computed + bs - 1) / bs);
  while (s->blocks.size() > keep) {
    pool_.release(s->blocks.back());
    s->blocks.pop_back();
  }
  // Publish the blocks that are full of accepted tokens.
  if (cfg_.prefix_caching) {
    while (int64_t(s->keys.size()) < s->computed / bs) {
      const size_t i = s->keys.size();
      const uint64_t parent = i ? s->keys[i - 1] : 0;
      s->keys.push_back(pool_.publish(s->blocks[i], parent,
                                      std::span<const int32_t>(s->tokens).subspan(i * size_t(bs), size_t(bs))));
    }
  }
  if (reason) finish(s, reason, error);
}

void Scheduler::fail_step(StepPlan& plan, const std::string& message) {
  for (Sequence* s : plan.seqs) finish(s, "error", message);
  reap();
}

}  // namespace flashkit::serve
