// How a backend attends the rows of a batched paged step (backend.hpp, "Paged KV cache"). Pure: compiled in every
// build, unit-tested on the CPU (tests/engine/test_paged_spans.cpp), used by the CPU and CUDA backends alike.
//
// A step holds decode rows (one per sequence, or a few per sequence when speculating) and prompt chunks (many rows
// of one sequence at consecutive positions). Decode rows read their keys in place from the block pool (the paged
// decode kernel: one row's keys are read once, which is all a decode row needs). A chunk of n rows would make that
// kernel read the chunk's keys n times over on scalar units, so a chunk gathers its visible keys in position order
// and runs the flash kernel once over them, as a session's prefill does (on the H200 the decode kernel took ~5x a
// session's prefill for a 2k-token prompt: docs/serving.md).
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace flashkit::engine {

struct PagedSpan {
  int64_t row0 = 0, rows = 0;  // step rows [row0, row0 + rows)
  bool chunk = false;          // true: one sequence's rows at consecutive positions, through the flash kernel
  int32_t seq = 0;             // chunk: its sequence (row_seq)
  int64_t first = 0;           // chunk: position of its first row (the last is first + rows - 1)
  // chunk: the first position its rows see, given the layer's window (> 0: that many positions, else all).
  int64_t key_lo(int64_t window) const { return window > 0 ? std::max<int64_t>(0, first - (window - 1)) : 0; }
  // chunk: the keys it gathers, positions [key_lo, last].
  int64_t keys(int64_t window) const { return first + rows - key_lo(window); }
};

// The rows of a step (positions and row_seq as PagedStep's: a sequence's rows contiguous) cut into spans, in row
// order: a sequence with at least `min_chunk_rows` rows at consecutive positions is a chunk span; every maximal run
// of other rows is one decode span. min_chunk_rows < 2 counts as 2 (one row is decode by definition).
std::vector<PagedSpan> plan_paged_spans(std::span<const int32_t> positions, std::span<const int32_t> row_seq,
                                        int64_t min_chunk_rows);

// Smallest chunk the CUDA backend sends to the flash kernel: a sequence's rows in a speculative verification step
// (1 + K proposals, K = 4 by default and 8 at most when adaptive) stay on the decode kernel, which reads their
// few rows' keys from L2; a prompt chunk (the scheduler cuts prompts into --max-step-tokens pieces) takes flash.
inline constexpr int64_t kCudaPagedChunkMinRows = 16;

}  // namespace flashkit::engine
