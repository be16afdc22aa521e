// See session_core.hpp.
#include "serve/session_core.hpp"

#include <algorithm>
#include <exception>

namespace flashkit::serve {

SessionCore::SessionCore(std::shared_ptr<Model> model, int64_t max_running)
    : model_(std::move(model)), max_running_(max_running) {}

SessionCore::~SessionCore() {
  for (auto& s : running_) finish(s.get(), "cancelled");
  for (auto& s : waiting_) finish(s.get(), "cancelled");
}

void SessionCore::cancel(uint64_t id) {
  for (auto& s : running_)
    if (s->id == id) finish(s.get(), "cancelled");
  for (auto& s : waiting_)
    if (s->id == id) finish(s.get(), "cancelled");
  reap();
}

void SessionCore::finish(Sequence* s, const char* reason, const std::string& error) {
  if (s->finished) return;
  s->session.reset();  // the slot's memory goes back now, not at the next step
  complete_request(s, reason, error, counters_);
}

void SessionCore::reap() { reap_finished(running_, waiting_); }

bool SessionCore::run_step() {
  reap();
  while (int64_t(running_.size()) < max_running_ && !waiting_.empty()) {
    std::unique_ptr<Sequence> s = std::move(waiting_.front());
    waiting_.pop_front();
    try {
      s->session = model_->new_session();
    } catch (const std::exception& e) {
      finish(s.get(), "error", e.what());
      continue;
    }
    s->admitted_once = true;
    running_.push_back(std::move(s));
  }
  if (running_.empty()) return false;
  ++counters_.steps;
  // Callbacks cannot reach running_ (cancel and submit go through the engine's inbox), so indices stay valid.
  for (size_t i = 0; i < running_.size(); ++i) advance(running_[i].get());
  reap();
  return true;
}

void SessionCore::advance(Sequence* s) {
  if (s->finished) return;
  int32_t tok = -1;
  try {
    Session& ses = *s->session;
    const auto t0 = Clock::now();
    if (s->computed == 0) {
      ses.prefill(s->tokens);
      counters_.prompt_tokens += int64_t(s->tokens.size());
    } else {
      ses.decode(s->tokens.back());
    }
    busy_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
    s->computed = ses.position();
    tok = s->sampler->sample(ses.logits(), s->tokens);
  } catch (const std::exception& e) {
    finish(s, "error", e.what());
    return;
  }
  s->tokens.push_back(tok);
  ++s->generated;
  ++counters_.generation_tokens;
  if (s->generated == 1)
    s->result.time_to_first_token_s = std::chrono::duration<double>(Clock::now() - s->submitted).count();
  const bool go_on = s->req.on_token ? s->req.on_token(tok) : true;
  if (std::binary_search(s->stops.begin(), s->stops.end(), tok) || !go_on) finish(s, "stop");
  else if (s->generated >= s->req.max_tokens || s->computed >= s->session->max_context()) finish(s, "length");
}

void SessionCore::fill_stats(EngineStats& s) const {
  s = EngineStats{};  // no KV blocks, no prefix cache, no preemption
  s.running = int64_t(running_.size());
  s.waiting = int64_t(waiting_.size());
  s.prompt_tokens = counters_.prompt_tokens;
  s.generation_tokens = counters_.generation_tokens;
  s.steps = counters_.steps;
  s.requests_finished = counters_.finished;
  s.requests_cancelled = counters_.cancelled;
  s.busy_s = busy_s_;
}

}  // namespace flashkit::serve
