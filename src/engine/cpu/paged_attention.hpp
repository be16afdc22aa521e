// Paged decode attention on the CPU: one query row per sequence (a decode step of many sequences at once), keys and
// values read in place from a block pool through each sequence's block table (backend.hpp, "Paged KV cache").
//
// For row r at position p = positions[r] of sequence s = row_seq[r], query head h (kv head h / (heads / kv_heads)):
//   out[r, h] = softmax_j(softcap(scale * q[r, h] . k_j)) v_j over the positions j with lo <= j <= p,
//   lo = max(0, p - window + 1) for a windowed layer (window > 0), else 0; key j is pool row
//   block_tables[s * max_blocks + j / block_size] * block_size + j % block_size.
// f32 in and out, f32 accumulation; the scores of one (row, kv head) are kept for the whole row (a two-pass softmax:
// exact max, no rescaling). OpenMP over (row, kv head) pairs when the work is large enough.
#pragma once
#include <cstdint>

#include "engine/cpu/gemv.hpp"

namespace flashkit::engine::cpu {

struct PagedDecodeArgs {
  const float* q = nullptr;  // row r's heads at q + r * ldq
  int64_t ldq = 0;
  float* out = nullptr;  // like q
  int64_t ldo = 0;
  const float* k_pool = nullptr;  // [num_blocks * block_size, kv_heads * head_dim]
  const float* v_pool = nullptr;
  int64_t block_size = 0;
  const int32_t* block_tables = nullptr;  // [num_seqs * max_blocks]
  int64_t max_blocks = 0;
  const int32_t* rows = nullptr;  // the rows to compute (n_rows of them)
  int64_t n_rows = 0;
  const int32_t* positions = nullptr;  // indexed by row
  const int32_t* row_seq = nullptr;    // indexed by row
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 0, softcap = 0;
  int64_t window = 0;
};

void paged_decode_attention(Isa isa, int threads, const PagedDecodeArgs& a);

}  // namespace flashkit::engine::cpu
