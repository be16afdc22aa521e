#include "engine/l2_prefetch_plan.hpp"

#include <algorithm>

namespace flashkit::engine {

namespace {
// `budget` bytes spread over the stripes of a `bytes`-long matrix: whole stripes when it all fits, else the same
// 16-byte-aligned head of each.
L2PrefetchPlan heads(int64_t bytes, int64_t stripe, int64_t budget) {
  L2PrefetchPlan p;
  if (bytes <= 0 || stripe <= 0 || budget < kL2PrefetchAlign) return p;
  stripe = (stripe + kL2PrefetchAlign - 1) / kL2PrefetchAlign * kL2PrefetchAlign;
  p.bytes = bytes, p.stripe = stripe;
  if (budget >= bytes) {
    p.head = stripe;
    return p;
  }
  const int64_t stripes = (bytes + stripe - 1) / stripe;
  p.head = std::min(stripe, budget / stripes / kL2PrefetchAlign * kL2PrefetchAlign);
  if (p.head <= 0) p = L2PrefetchPlan{};
  return p;
}
}  // namespace

L2PrefetchPlan l2_prefetch_under_mixer(L2PrefetchMode mode, int64_t bytes, int64_t stripe, int64_t l2_bytes) {
  if (mode == L2PrefetchMode::off) return {};  // out, all, late: the same plan
  return heads(bytes, stripe, l2_prefetch_budget(l2_bytes));
}

L2PrefetchPlan l2_prefetch_under_gemv(L2PrefetchMode mode, int64_t current, int64_t next, int64_t next_stripe,
                                      int64_t l2_bytes) {
  if (mode != L2PrefetchMode::all) return {};
  const int64_t budget = l2_prefetch_budget(l2_bytes) - std::max<int64_t>(current, 0);
  return heads(next, next_stripe, budget);
}

}  // namespace flashkit::engine
