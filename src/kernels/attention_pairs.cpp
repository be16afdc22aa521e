// Counting the (query, key) pairs a kernel touches: the basis of every attention FLOP and byte model.
#include <algorithm>

#include "kernels/registry.hpp"

namespace flashkit::kernels {

double attention_visible_pairs(const AttentionShape& s, const AttentionMask& m) {
  double total = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    SeqRange r = seq_range(s, b);
    for (int64_t i = 0; i < r.nq; ++i) total += double(std::max<int64_t>(0, m.hi(i, r.nq, r.nk) - m.lo(i, r.nq, r.nk)));
  }
  return total;
}

double attention_tiled_pairs(const AttentionShape& s, const AttentionMask& m, int64_t bq, int64_t bk) {
  double total = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    SeqRange r = seq_range(s, b);
    for (int64_t i0 = 0; i0 < r.nq; i0 += bq) {
      int64_t i1 = std::min(r.nq, i0 + bq);
      // lo/hi are monotone in i, so the block's key range is [lo(i0), hi(i1-1)).
      int64_t lo = m.lo(i0, r.nq, r.nk), hi = m.hi(i1 - 1, r.nq, r.nk);
      if (hi <= lo) continue;
      int64_t j0 = lo / bk * bk, j1 = std::min(r.nk, (hi + bk - 1) / bk * bk);
      total += double(i1 - i0) * double(j1 - j0);
    }
  }
  return total;
}

}  // namespace flashkit::kernels
