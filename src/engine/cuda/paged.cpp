// See paged.hpp.
#include "engine/cuda/paged.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/cuda_check.hpp"
#include "core/cuda_device.hpp"
#include "flashkit/error.hpp"
#include "kernels/cuda/decode/paged.hpp"
#include "kernels/cuda/decode/plan.hpp"

namespace flashkit::engine::cuda {

namespace fc = flashkit::cuda;

namespace {

fc::PagedElem elem(DType t) {
  switch (t) {
    case DType::f32: return fc::PagedElem::f32;
    case DType::bf16: return fc::PagedElem::bf16;
    case DType::f16: return fc::PagedElem::f16;
    default: fail(Status::internal, "cuda paged attention: tensors must be f32, bf16 or f16");
  }
}

}  // namespace

PagedStepBuffer::~PagedStepBuffer() {
  if (copied_) {
    cudaEventSynchronize(copied_);
    cudaEventDestroy(copied_);
  }
  if (dev_) cudaFree(dev_);
  if (host_) cudaFreeHost(host_);
}

bool PagedStepBuffer::set(const PagedStep& st, cudaStream_t stream) {
  const int64_t T = int64_t(st.tokens.size()), n = int64_t(st.logit_rows.size());
  const size_t need = size_t(3 * T + n) + st.block_tables.size();
  if (!copied_) check_cuda(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming), "cudaEventCreate(paged step)");
  check_cuda(cudaEventSynchronize(copied_), "set_paged_step (previous upload)");
  const bool grow = need > capacity_;
  if (grow) {
    // The old device buffer may still be read by queued kernels of the previous step: wait for them.
    check_cuda(cudaStreamSynchronize(stream), "set_paged_step (synchronize)");
    if (dev_) cudaFree(dev_);
    if (host_) cudaFreeHost(host_);
    dev_ = nullptr, host_ = nullptr, capacity_ = 0;
    const size_t cap = std::max<size_t>(need * 2, 4096);
    check_cuda(cudaMalloc(&dev_, cap * 4), "cudaMalloc(paged step buffer)");
    check_cuda(cudaMallocHost(&host_, cap * 4), "cudaMallocHost(paged step buffer)");
    capacity_ = cap;
  }
  int32_t* h = host_;
  auto put = [&](std::span<const int32_t> s) {
    if (!s.empty()) std::memcpy(h, s.data(), s.size() * 4);
    h += s.size();
  };
  put(st.tokens);
  put(st.positions);
  put(st.row_seq);
  put(st.logit_rows);
  put(st.block_tables);
  rows_ = T, logits_ = n, max_blocks_ = st.max_blocks;
  check_cuda(cudaMemcpyAsync(dev_, host_, need * 4, cudaMemcpyHostToDevice, stream), "set_paged_step (upload)");
  check_cuda(cudaEventRecord(copied_, stream), "set_paged_step (event)");
  return grow;
}

int paged_attention_splits(int64_t rows, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t max_keys,
                           int64_t window, const Tuning& tuning) {
  fc::DecodeShape s;
  s.batch = rows, s.heads = heads, s.kv_heads = kv_heads, s.head_dim = head_dim, s.max_seqlen_k = max_keys;
  s.window_left = window > 0 ? window - 1 : -1;
  s.paged = true;
  return fc::plan_decode(s, cuda_device_info(), tuning, ClusterResidency{}).splits;
}

int64_t paged_attention_part_floats(int64_t rows, int64_t heads, int64_t head_dim, int splits) {
  return splits > 1 ? fc::paged_decode_part_floats(rows, heads, head_dim, splits) : 0;
}

void paged_store(const Tensor& k, const Tensor& v, const PagedKVLayer& cache, int64_t T, const AttentionParams& p,
                 const PagedStepBuffer& step, cudaStream_t stream) {
  if (T != step.rows()) fail(Status::internal, "cuda paged attention: T differs from the step's rows");
  if (v.dtype != k.dtype) fail(Status::internal, "cuda paged attention: k and v of different dtypes");
  fc::PagedStoreArgs s;
  s.k = k.data, s.ldk = k.ld, s.v = v.data, s.ldv = v.ld, s.src_type = elem(k.dtype);
  s.k_pool = cache.k.data, s.v_pool = cache.v.data, s.pool_type = elem(cache.k.dtype);
  s.block_size = int32_t(cache.block_size);
  s.block_tables = step.tables(), s.max_blocks = step.max_blocks();
  s.positions = step.positions(), s.row_seq = step.row_seq();
  s.rows = int32_t(T);
  s.kvd = p.kv_heads * p.head_dim;
  fc::paged_kv_store(s, stream);
}

void paged_decode_rows(const Tensor& q, const PagedKVLayer& cache, const Tensor& out, int64_t row0, int64_t rows,
                       const AttentionParams& p, const PagedStepBuffer& step, int splits, float* part,
                       cudaStream_t stream) {
  if (row0 < 0 || rows < 0 || row0 + rows > step.rows()) fail(Status::internal, "cuda paged attention: rows outside the step");
  fc::PagedDecodeArgs a;
  // Rows row0.. of q, out and the step's per-row tables: the kernel's row 0 is step row row0.
  a.q = static_cast<const char*>(q.data) + row0 * q.ld * dtype_size(q.dtype), a.ldq = q.ld, a.q_type = elem(q.dtype);
  a.out = static_cast<char*>(out.data) + row0 * out.ld * dtype_size(out.dtype), a.ldo = out.ld;
  a.out_type = elem(out.dtype);
  a.k_pool = cache.k.data, a.v_pool = cache.v.data, a.pool_type = elem(cache.k.dtype);
  a.block_size = int32_t(cache.block_size), a.block_tables = step.tables(), a.max_blocks = step.max_blocks();
  a.positions = step.positions() + row0, a.row_seq = step.row_seq() + row0, a.rows = int32_t(rows);
  a.heads = int32_t(p.heads), a.kv_heads = int32_t(p.kv_heads), a.head_dim = int32_t(p.head_dim);
  a.window = p.window;
  a.scale = p.scale > 0 ? p.scale : 1.0f / std::sqrt(float(p.head_dim));
  a.softcap = p.softcap;
  a.splits = splits, a.part = part;
  fc::paged_decode_attention(a, stream);
}

void paged_gather_chunk(const PagedKVLayer& cache, const AttentionParams& p, const PagedStepBuffer& step,
                        const PagedSpan& span, uint16_t* k_out, uint16_t* v_out, cudaStream_t stream) {
  if (!span.chunk) fail(Status::internal, "cuda paged attention: gather of a decode span");
  fc::PagedGatherArgs g;
  g.k_pool = cache.k.data, g.v_pool = cache.v.data, g.pool_type = elem(cache.k.dtype);
  g.block_size = int32_t(cache.block_size);
  g.table = step.tables() + int64_t(span.seq) * step.max_blocks();
  g.first = span.key_lo(p.window), g.n = span.keys(p.window);
  g.kvd = p.kv_heads * p.head_dim;
  g.k_out = k_out, g.v_out = v_out;
  fc::paged_gather_kv(g, stream);
}

void gather_rows(const Tensor& x, const Tensor& out, int64_t n, const PagedStepBuffer& step, cudaStream_t stream) {
  if (x.dtype != out.dtype) fail(Status::internal, "cuda gather_rows: x and out of different dtypes");
  fc::gather_rows(x.data, x.ld, out.data, out.ld, x.cols, int(dtype_size(x.dtype)), step.logit_rows(), n, stream);
}

int64_t device_free_bytes() {
  size_t free_b = 0, total_b = 0;
  check_cuda(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  return int64_t(free_b);
}

}  // namespace flashkit::engine::cuda
