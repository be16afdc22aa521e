// See paged_spans.hpp.
#include "engine/paged_spans.hpp"

namespace flashkit::engine {

std::vector<PagedSpan> plan_paged_spans(std::span<const int32_t> positions, std::span<const int32_t> row_seq,
                                        int64_t min_chunk_rows) {
  const int64_t T = int64_t(std::min(positions.size(), row_seq.size()));
  const int64_t min_rows = std::max<int64_t>(min_chunk_rows, 2);
  std::vector<PagedSpan> spans;
  auto add_decode = [&](int64_t r0, int64_t r1) {
    if (r1 <= r0) return;
    if (!spans.empty() && !spans.back().chunk) spans.back().rows = r1 - spans.back().row0;  // extend the run
    else spans.push_back(PagedSpan{r0, r1 - r0});
  };
  for (int64_t t0 = 0; t0 < T;) {
    int64_t t1 = t0 + 1;
    bool consecutive = true;
    while (t1 < T && row_seq[size_t(t1)] == row_seq[size_t(t0)]) {
      consecutive = consecutive && positions[size_t(t1)] == positions[size_t(t1 - 1)] + 1;
      ++t1;
    }
    if (t1 - t0 >= min_rows && consecutive) {
      PagedSpan s;
      s.row0 = t0, s.rows = t1 - t0, s.chunk = true, s.seq = row_seq[size_t(t0)], s.first = positions[size_t(t0)];
      spans.push_back(s);
    } else {
      add_decode(t0, t1);
    }
    t0 = t1;
  }
  return spans;
}

}  // namespace flashkit::engine
