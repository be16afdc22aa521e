// The CUDA backend's batched paged steps (backend.hpp, "Paged KV cache"): the step's tables on the device and the
// launches of the paged ops. The kernels are the decode family's paged member (kernels/cuda/decode/paged.hpp).
//
// set_paged_step packs tokens, positions, row_seq, logit_rows and the block tables into one pinned buffer and
// queues ONE async copy to the device buffer the kernels read (the CUDA-graph rule: nothing per step is a launch
// argument). The pinned buffer is reused once the previous copy has completed (an event), and both buffers only
// grow.
#pragma once
#include <cstdint>

#include "engine/backend.hpp"
#include "engine/paged_spans.hpp"

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

namespace flashkit::engine::cuda {

class PagedStepBuffer {
 public:
  PagedStepBuffer() = default;
  ~PagedStepBuffer();
  PagedStepBuffer(const PagedStepBuffer&) = delete;
  PagedStepBuffer& operator=(const PagedStepBuffer&) = delete;

  // Queues the step's upload on `stream`. The caller has flushed every op that reads the previous step. Returns
  // true when the device buffer was reallocated (graphs captured over the old one are stale).
  bool set(const PagedStep& st, cudaStream_t stream);

  const int32_t* tokens() const { return dev_; }
  const int32_t* positions() const { return dev_ + rows_; }
  const int32_t* row_seq() const { return dev_ + 2 * rows_; }
  const int32_t* logit_rows() const { return dev_ + 3 * rows_; }
  const int32_t* tables() const { return dev_ + 3 * rows_ + logits_; }
  int64_t rows() const { return rows_; }
  int64_t max_blocks() const { return max_blocks_; }

 private:
  int32_t* dev_ = nullptr;
  int32_t* host_ = nullptr;  // pinned
  size_t capacity_ = 0;      // int32 elements of both
  cudaEvent_t copied_ = nullptr;
  int64_t rows_ = 0, logits_ = 0, max_blocks_ = 0;
};

// Splits of the paged attention for `rows` rows seeing at most max_keys keys (plan_decode's paged member).
int paged_attention_splits(int64_t rows, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t max_keys,
                           int64_t window, const Tuning& tuning);
int64_t paged_attention_part_floats(int64_t rows, int64_t heads, int64_t head_dim, int splits);

// Stores the step's k/v rows [T, kv_heads * head_dim] into their pool slots (before any row attends).
void paged_store(const Tensor& k, const Tensor& v, const PagedKVLayer& cache, int64_t T, const AttentionParams& p,
                 const PagedStepBuffer& step, cudaStream_t stream);
// Attends step rows [row0, row0 + rows) over their sequences' keys in the pool (the paged decode kernel; q, out
// [T, heads * head_dim]). `part`: paged_attention_part_floats(rows, ...) floats when splits > 1.
void paged_decode_rows(const Tensor& q, const PagedKVLayer& cache, const Tensor& out, int64_t row0, int64_t rows,
                       const AttentionParams& p, const PagedStepBuffer& step, int splits, float* part,
                       cudaStream_t stream);
// A chunk's visible keys (span.keys(window) positions from span.key_lo(window)) into bf16 [keys, kv_heads *
// head_dim] k_out / v_out, in position order.
void paged_gather_chunk(const PagedKVLayer& cache, const AttentionParams& p, const PagedStepBuffer& step,
                        const PagedSpan& span, uint16_t* k_out, uint16_t* v_out, cudaStream_t stream);
// out[i, :] = x[logit_rows[i], :] for i < n (x and out of one dtype: f32 or bf16).
void gather_rows(const Tensor& x, const Tensor& out, int64_t n, const PagedStepBuffer& step, cudaStream_t stream);
// Free device memory now (cudaMemGetInfo), bytes.
int64_t device_free_bytes();

}  // namespace flashkit::engine::cuda
