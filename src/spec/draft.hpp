// The draft-model proposer: a small model sharing the target's tokenizer guesses the next K tokens one decode step at
// a time. Its session is kept in step with the accepted text lazily: before each proposal the cache is rolled back to
// the longest prefix it shares with the text (the rejected guesses go) and the missing tokens are fed in one step.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampler.hpp"
#include "flashkit/engine.hpp"
#include "spec/accept.hpp"

namespace flashkit::spec {

class DraftProposer {
 public:
  // `session` holds the text before `history` starts (its position is the base); params: the target's sampler
  // settings (the same filters make q close to p; exactness does not depend on it).
  DraftProposer(Session& session, const engine::SamplerParams& params, int64_t target_vocab);
  // k tokens continuing `history`. Greedy settings: the draft's argmax. Otherwise each token is drawn from the
  // draft's filtered distribution with `rng`, which goes to q[i] (over the target's vocabulary).
  std::vector<int32_t> propose(std::span<const int32_t> history, int k, engine::Sampler& rng, std::vector<Dist>* q);
  // Leaves the draft session holding (a prefix of) history.
  void finish(std::span<const int32_t> history);

 private:
  void sync(std::span<const int32_t> history, bool need_logits);
  std::vector<int32_t> draft_history(std::span<const int32_t> history, std::span<const int32_t> extra) const;

  Session& s_;
  engine::Sampler sampler_;
  int64_t base_ = 0, vocab_ = 0, target_vocab_ = 0;
  std::vector<int32_t> ids_;  // the tokens in the draft cache after base_
};

}  // namespace flashkit::spec
