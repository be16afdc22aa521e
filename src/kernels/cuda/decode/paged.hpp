// The decode family's paged member (plan.hpp): the attention of one batched serving step over a paged KV cache,
// and the two small kernels around it. Plain C++ declarations (no CUDA header): the engine's CUDA backend and the
// tests include it.
//
// Layout (engine/backend.hpp, "Paged KV cache"): a pool per layer of num_blocks * block_size rows of
// kv_heads * head_dim elements; sequence s's position j lives in pool row
// block_tables[s * max_blocks + j / block_size] * block_size + j % block_size.
//
// paged_decode_attention: for every query row r of the step (its sequence s = row_seq[r], its position
// p = positions[r]) and query head h (KV head h / (heads / kv_heads)):
//   out[r, h] = softmax_j(softcap(scale * q[r, h] . k_j)) v_j over j in [lo, p], lo = max(0, p - window + 1) for
//   window > 0, else 0;  softcap(x) = cap * tanh(x / cap) when softcap > 0.
// Rows are independent (a prompt chunk's rows are rows with consecutive positions of one sequence), so one launch
// takes the decode rows and the chunk rows of a step. The keys of every row must already be in the pool (the step's
// own rows: paged_kv_store first). Positions, row_seq and block tables are read from device memory, so the launch
// is graph-safe for a fixed row count. Grid (splits, kv_heads * head groups, rows), 128 threads: each CTA holds up
// to kPagedHeadsPerCta q heads of one KV head (GQA/MQA: K and V are read once per row and group), lane groups of
// head_dim / 8 lanes hold one key each (8 dims per lane), online softmax per lane group, merged in shared memory.
// A row with n visible keys uses paged_row_splits(splits, n) of the grid's splits; with more than one, each writes
// an f32 partial (normalized O, natural-log lse) and paged_decode_combine merges them (merge.cuh). q and out are
// [rows, heads * head_dim] with row strides; element types f32, bf16 or f16 for q/out and for the pool.
#pragma once
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace flashkit::cuda {

enum class PagedElem : int32_t { f32 = 0, bf16 = 1, f16 = 2 };

struct PagedDecodeArgs {
  const void* q = nullptr;  // [rows, heads * head_dim], row stride ldq
  int64_t ldq = 0;
  PagedElem q_type = PagedElem::f32;
  void* out = nullptr;  // like q
  int64_t ldo = 0;
  PagedElem out_type = PagedElem::f32;
  const void* k_pool = nullptr;  // [num_blocks * block_size, kv_heads * head_dim]
  const void* v_pool = nullptr;
  PagedElem pool_type = PagedElem::bf16;
  int32_t block_size = 0;
  const int32_t* block_tables = nullptr;  // device [num_seqs * max_blocks]
  int64_t max_blocks = 0;
  const int32_t* positions = nullptr;  // device [rows]
  const int32_t* row_seq = nullptr;    // device [rows]
  int32_t rows = 0;
  int32_t heads = 0, kv_heads = 0, head_dim = 0;  // head_dim a multiple of 8, <= 256
  int64_t window = 0;                             // > 0: sliding window of that many positions
  float scale = 1.0f, softcap = 0.0f;
  int32_t splits = 1;    // plan_decode's (<= kPagedMaxSplits)
  float* part = nullptr;  // splits > 1: >= paged_decode_part_floats(rows, heads, head_dim, splits)
};

int64_t paged_decode_part_floats(int64_t rows, int64_t heads, int64_t head_dim, int64_t splits);
// Checks the arguments (invalid_argument naming the field) and launches the kernel, and the combine when
// splits > 1.
void paged_decode_attention(const PagedDecodeArgs& a, cudaStream_t stream);

// Stores the step's k/v rows (src [rows, kv_heads * head_dim], row strides ldk / ldv, element type src_type) into
// their pool slots (position positions[t] of sequence row_seq[t]). Run before paged_decode_attention.
struct PagedStoreArgs {
  const void* k = nullptr;
  int64_t ldk = 0;
  const void* v = nullptr;
  int64_t ldv = 0;
  PagedElem src_type = PagedElem::f32;
  void* k_pool = nullptr;
  void* v_pool = nullptr;
  PagedElem pool_type = PagedElem::bf16;
  int32_t block_size = 0;
  const int32_t* block_tables = nullptr;
  int64_t max_blocks = 0;
  const int32_t* positions = nullptr;
  const int32_t* row_seq = nullptr;
  int32_t rows = 0;
  int64_t kvd = 0;  // kv_heads * head_dim
};
void paged_kv_store(const PagedStoreArgs& a, cudaStream_t stream);

// A prompt chunk's keys for the flash kernel (engine/paged_spans.hpp): positions [first, first + n) of one sequence
// (`table`: its row of the block tables, on the device) gathered from the pools, in position order, into bf16
// [n, kvd] k_out / v_out (pool elements f32, bf16 or f16; f32 rounds to bf16 as a session's prefill does).
struct PagedGatherArgs {
  const void* k_pool = nullptr;
  const void* v_pool = nullptr;
  PagedElem pool_type = PagedElem::bf16;
  int32_t block_size = 0;
  const int32_t* table = nullptr;
  int64_t first = 0, n = 0;
  int64_t kvd = 0;  // a multiple of 8
  uint16_t* k_out = nullptr;
  uint16_t* v_out = nullptr;
};
void paged_gather_kv(const PagedGatherArgs& a, cudaStream_t stream);

// out[i, :] = x[index[i], :] for i < n (index on the device); elem_bytes 2 or 4, row strides in elements.
void gather_rows(const void* x, int64_t ldx, void* out, int64_t ldo, int64_t cols, int elem_bytes,
                 const int32_t* index, int64_t n, cudaStream_t stream);

}  // namespace flashkit::cuda
