// Serving models without a KV cache (Mamba: a constant-size conv + SSM state per sequence; docs/serving.md).
//
// Each admitted request runs in an engine Session of its own -- the object flashkit::generate drives, which holds the
// sequence's recurrent state -- so a request's greedy output is exactly what generate gives it alone. At most
// max_running sessions exist at once (the memory bound: one state each); later requests wait in submission order.
// Each step admits waiting requests into free slots, then advances every running sequence by one unit, oldest
// admission first (round-robin): a new sequence prefills its whole prompt (as generate does), the others decode their
// last token; each then samples one token. No batching across sequences, no preemption (a state never grows), no
// prefix cache (a state cannot be shared by prefix). Finishing (stop ids, on_token false, max_tokens, full context,
// cancel, errors) follows Scheduler::commit; a finished sequence's session is destroyed at once, freeing its slot.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "serve/step_core.hpp"

namespace flashkit::serve {

class SessionCore final : public StepCore {
 public:
  SessionCore(std::shared_ptr<Model> model, int64_t max_running);
  ~SessionCore() override;

  void add(std::unique_ptr<Sequence> seq) override { waiting_.push_back(std::move(seq)); }
  void cancel(uint64_t id) override;
  void reset_prefix_cache() override {}  // there is none
  bool has_work() const override { return !running_.empty() || !waiting_.empty(); }
  bool run_step() override;
  void fill_stats(EngineStats& s) const override;

 private:
  void advance(Sequence* s);  // prefill or decode one token, then sample and maybe finish
  void finish(Sequence* s, const char* reason, const std::string& error = {});
  void reap();

  std::shared_ptr<Model> model_;
  int64_t max_running_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order
  SchedulerCounters counters_;
  double busy_s_ = 0;
};

}  // namespace flashkit::serve
