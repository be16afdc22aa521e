// Acceptance rules of speculative sampling. The target distribution p and the proposal distribution q are the ones
// the sampler draws from (after the repetition penalty, temperature, top-k, top-p and min-p, renormalised):
// speculative sampling reproduces *that* distribution, so both sides go through the same filters with the same
// settings and the same history (prompt + output + the draft tokens before the row).
//   draft model (Leviathan et al. 2023, Chen et al. 2023): x ~ q is accepted with probability min(1, p(x) / q(x));
//     on rejection the token is drawn from norm(max(0, p - q)). Then P(token = y) = min(p, q)(y) + (1 - sum min(p,
//     q)) * max(0, p - q)(y) / sum max(0, p - q) = p(y).
//   point masses (n-gram proposals, and SpecInfer's sibling candidates of a token tree): candidate c_1 is accepted
//     with probability p(c_1); otherwise p loses c_1 (renormalised) and c_2 is tried the same way, ...; if every
//     candidate is rejected the token is drawn from what is left. Each step is the q = point-mass case of the rule
//     above applied to the renormalised remainder, so the token is distributed as p.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampler.hpp"

namespace flashkit::spec {

// A distribution over the vocabulary: dense probabilities plus the ids that have any (cheap to reset).
class Dist {
 public:
  void assign(std::span<const engine::TokenProb> probs, int64_t vocab);
  void point(int32_t token, int64_t vocab);  // all mass on one token (greedy)
  float operator[](int32_t t) const { return t >= 0 && size_t(t) < p_.size() ? p_[size_t(t)] : 0.0f; }
  std::span<const int32_t> support() const { return support_; }
  // Inverse CDF over the support, in support order, of u * (total mass), u in [0, 1).
  int32_t sample(double u) const;

 private:
  std::vector<float> p_;
  std::vector<int32_t> support_;
};

enum class AcceptRule {
  exact,          // the rules above
  always_accept,  // deliberately wrong (tests): every proposal is accepted, so the output follows q, not p
  resample_p,     // deliberately wrong (tests): the right acceptance test, but a rejection draws from p itself
};

struct Verdict {
  bool accepted = false;
  int32_t token = -1;  // the accepted proposal, or the replacement drawn on rejection
};

// Draft-model proposal x ~ q. `uniform` draws in [0, 1) (the sampler's PRNG).
Verdict accept_draft(const Dist& p, const Dist& q, int32_t x, engine::Sampler& uniform, AcceptRule rule);
// Point-mass candidates tried in order; on acceptance `which` is the candidate's index, else -1.
Verdict accept_candidates(const Dist& p, std::span<const int32_t> candidates, engine::Sampler& uniform,
                          AcceptRule rule, int* which);

}  // namespace flashkit::spec
