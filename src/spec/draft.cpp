#include "spec/draft.hpp"

#include <algorithm>

namespace flashkit::spec {

DraftProposer::DraftProposer(Session& session, const engine::SamplerParams& params, int64_t target_vocab)
    : s_(session), sampler_(params), base_(session.position()), vocab_(session.model().info().vocab_size),
      target_vocab_(target_vocab) {}

// Feeds the tokens of `history` the cache lacks; with need_logits at least one (the last), so that logits() is the
// distribution after history.
void DraftProposer::sync(std::span<const int32_t> history, bool need_logits) {
  size_t c = 0;
  while (c < ids_.size() && c < history.size() && ids_[c] == history[c]) ++c;
  if (need_logits && c == history.size() && c > 0) --c;
  if (c < ids_.size()) {
    s_.truncate(base_ + int64_t(c));
    ids_.resize(c);
  }
  if (c < history.size()) {
    s_.prefill(history.subspan(c));
    ids_.insert(ids_.end(), history.begin() + int64_t(c), history.end());
  }
}

// The repetition penalty's history for the draft: ids beyond its vocabulary cannot be penalised there.
std::vector<int32_t> DraftProposer::draft_history(std::span<const int32_t> history,
                                                  std::span<const int32_t> extra) const {
  std::vector<int32_t> h;
  if (sampler_.params().repetition_penalty == 1.0f) return h;
  h.reserve(history.size() + extra.size());
  for (int32_t t : history)
    if (t < vocab_) h.push_back(t);
  for (int32_t t : extra)
    if (t < vocab_) h.push_back(t);
  return h;
}

std::vector<int32_t> DraftProposer::propose(std::span<const int32_t> history, int k, engine::Sampler& rng,
                                            std::vector<Dist>* q) {
  std::vector<int32_t> out;
  if (k <= 0 || history.empty()) return out;
  sync(history, true);
  if (q) q->resize(size_t(k));
  for (int i = 0; i < k; ++i) {
    const std::vector<int32_t> h = draft_history(history, out);
    int32_t d;
    if (!q) {
      d = sampler_.sample(s_.logits(), h);
    } else {
      (*q)[size_t(i)].assign(sampler_.distribution(s_.logits(), h), target_vocab_);
      d = (*q)[size_t(i)].sample(rng.next_uniform());
    }
    out.push_back(d);
    if (i + 1 < k) {
      s_.decode(d);
      ids_.push_back(d);
    }
  }
  return out;
}

void DraftProposer::finish(std::span<const int32_t> history) {
  size_t c = 0;
  while (c < ids_.size() && c < history.size() && ids_[c] == history[c]) ++c;
  if (c < ids_.size()) {
    s_.truncate(base_ + int64_t(c));
    ids_.resize(c);
  }
}

}  // namespace flashkit::spec
