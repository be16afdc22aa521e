#include "spec/accept.hpp"

#include <algorithm>

namespace flashkit::spec {

void Dist::assign(std::span<const engine::TokenProb> probs, int64_t vocab) {
  if (int64_t(p_.size()) != vocab) p_.assign(size_t(vocab), 0.0f);
  for (int32_t t : support_) p_[size_t(t)] = 0.0f;
  support_.clear();
  for (const auto& tp : probs) {
    if (!(tp.prob > 0.0f) || tp.token < 0 || tp.token >= vocab) continue;
    p_[size_t(tp.token)] = tp.prob;
    support_.push_back(tp.token);
  }
}

void Dist::point(int32_t token, int64_t vocab) {
  const engine::TokenProb tp{token, 1.0f};
  assign(std::span<const engine::TokenProb>(&tp, 1), vocab);
}

int32_t Dist::sample(double u) const {
  double total = 0;
  for (int32_t t : support_) total += p_[size_t(t)];
  const double x = u * total;
  double cum = 0;
  for (int32_t t : support_) {
    cum += p_[size_t(t)];
    if (x < cum) return t;
  }
  return support_.empty() ? 0 : support_.back();
}

Verdict accept_draft(const Dist& p, const Dist& q, int32_t x, engine::Sampler& uniform, AcceptRule rule) {
  if (rule == AcceptRule::always_accept) return {true, x};
  const double px = p[x], qx = q[x];
  // min(1, p/q) without dividing: accept iff u * q(x) < p(x). (q(x) > 0: x was drawn from q.)
  if (uniform.next_uniform() * qx < px) return {true, x};
  if (rule == AcceptRule::resample_p) return {false, p.sample(uniform.next_uniform())};
  // Residual max(0, p - q), over p's support (where it can be positive).
  double total = 0;
  for (int32_t t : p.support()) total += std::max(0.0, double(p[t]) - double(q[t]));
  const double u = uniform.next_uniform();
  if (!(total > 0)) return {false, p.sample(u)};  // p == q up to rounding: the residual is p itself
  const double target = u * total;
  double cum = 0;
  int32_t last = -1;
  for (int32_t t : p.support()) {
    const double r = std::max(0.0, double(p[t]) - double(q[t]));
    if (r <= 0) continue;
    cum += r;
    last = t;
    if (target < cum) return {false, t};
  }
  return {false, last};
}

Verdict accept_candidates(const Dist& p, std::span<const int32_t> candidates, engine::Sampler& uniform,
                          AcceptRule rule, int* which) {
  *which = -1;
  if (candidates.empty()) return {false, p.sample(uniform.next_uniform())};
  if (rule == AcceptRule::always_accept) {
    *which = 0;
    return {true, candidates[0]};
  }
  double mass = 0;
  for (int32_t t : p.support()) mass += p[t];
  std::vector<int32_t> removed;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const int32_t c = candidates[i];
    if (std::find(removed.begin(), removed.end(), c) != removed.end()) continue;
    const double pc = p[c];
    if (pc <= 0) continue;  // rejected with certainty; nothing to remove
    if (uniform.next_uniform() * mass < pc) {
      *which = int(i);
      return {true, c};
    }
    mass -= pc;
    removed.push_back(c);
  }
  if (rule == AcceptRule::resample_p) return {false, p.sample(uniform.next_uniform())};
  // Every candidate rejected: draw from p without them.
  const double target = uniform.next_uniform() * mass;
  double cum = 0;
  int32_t last = -1;
  for (int32_t t : p.support()) {
    if (std::find(removed.begin(), removed.end(), t) != removed.end()) continue;
    cum += p[t];
    last = t;
    if (target < cum) return {false, t};
  }
  return {false, last >= 0 ? last : p.sample(0.0)};
}

}  // namespace flashkit::spec
