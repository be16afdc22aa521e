// plan_paged_spans (engine/paged_spans.hpp): which rows of a paged step the decode kernel takes and which go to the
// flash kernel as prompt chunks, on the CPU and CUDA backends alike.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/paged_spans.hpp"

namespace {

using flashkit::engine::PagedSpan;
using flashkit::engine::plan_paged_spans;

struct Want {
  int64_t row0, rows;
  bool chunk;
  int32_t seq = 0;
  int64_t first = 0;
};

void expect_spans(const std::vector<int32_t>& pos, const std::vector<int32_t>& seq, int64_t min_rows,
                  const std::vector<Want>& want) {
  const std::vector<PagedSpan> got = plan_paged_spans(pos, seq, min_rows);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].row0, want[i].row0) << "span " << i;
    EXPECT_EQ(got[i].rows, want[i].rows) << "span " << i;
    EXPECT_EQ(got[i].chunk, want[i].chunk) << "span " << i;
    if (want[i].chunk) {
      EXPECT_EQ(got[i].seq, want[i].seq) << "span " << i;
      EXPECT_EQ(got[i].first, want[i].first) << "span " << i;
    }
  }
}

TEST(PagedSpans, DecodeRowsAroundAChunkFormRuns) {
  // Sequences 0 and 1 decode, 2 brings a 4-row chunk at positions 10..13, 3 and 4 decode.
  expect_spans({5, 9, 10, 11, 12, 13, 0, 7}, {0, 1, 2, 2, 2, 2, 3, 4}, 2,
               {{0, 2, false}, {2, 4, true, 2, 10}, {6, 2, false}});
  // The same step with chunks of at least 16 rows (CUDA's): one decode run over every row.
  expect_spans({5, 9, 10, 11, 12, 13, 0, 7}, {0, 1, 2, 2, 2, 2, 3, 4}, 16, {{0, 8, false}});
}

TEST(PagedSpans, ChunksBackToBackAndAtTheEnds) {
  std::vector<int32_t> pos, seq;
  for (int i = 0; i < 3; ++i) pos.push_back(i), seq.push_back(0);       // a whole 3-row prompt
  for (int i = 40; i < 45; ++i) pos.push_back(i), seq.push_back(1);     // a later chunk of another prompt
  pos.push_back(3), seq.push_back(2);                                   // a decode row
  expect_spans(pos, seq, 3, {{0, 3, true, 0, 0}, {3, 5, true, 1, 40}, {8, 1, false}});
  // min_chunk_rows below 2 is 2: a single row is never a chunk.
  expect_spans({7}, {0}, 0, {{0, 1, false}});
  expect_spans({}, {}, 2, {});
}

TEST(PagedSpans, RowsAtNonConsecutivePositionsStayOnTheDecodeKernel) {
  // The flash kernel's bottom-right diagonal assumes a chunk's rows are its sequence's last positions in order.
  expect_spans({4, 5, 7, 8}, {0, 0, 0, 0}, 2, {{0, 4, false}});
  expect_spans({1, 4, 5, 6}, {0, 1, 1, 1}, 2, {{0, 1, false}, {1, 3, true, 1, 4}});
}

TEST(PagedSpans, KeysFollowTheWindow) {
  PagedSpan s;
  s.chunk = true, s.first = 100, s.rows = 20;  // positions 100..119
  EXPECT_EQ(s.key_lo(0), 0);
  EXPECT_EQ(s.keys(0), 120);
  EXPECT_EQ(s.key_lo(30), 71);  // position 100 sees 71..100
  EXPECT_EQ(s.keys(30), 49);
  EXPECT_EQ(s.key_lo(500), 0);
  EXPECT_EQ(s.keys(500), 120);
}

}  // namespace
