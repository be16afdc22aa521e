// Validated, normalized attention arguments: what src/ops hands to every kernel. Kernels trust them.
// Usable from host C++ and CUDA device code.
#pragma once
#include <cstdint>

#include "flashkit/dtype.hpp"

#if defined(__CUDACC__)
#define FK_HD __host__ __device__ __forceinline__
#else
#define FK_HD inline
#endif

namespace flashkit::kernels {

// A [batch, seq, heads, dim] operand; dim stride is 1.
struct AttnOperand {
  void* data = nullptr;
  int64_t stride_b = 0, stride_s = 0, stride_h = 0;
};

struct AttentionShape {
  int64_t batch = 0;      // number of sequences (num_seqs when varlen)
  int64_t seqlen_q = 0;   // per-sequence length (fixed) or total tokens (varlen)
  int64_t seqlen_k = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  const int32_t* cu_seqlens_q = nullptr;  // non-null: varlen
  const int32_t* cu_seqlens_k = nullptr;
  int64_t max_seqlen_q = 0;  // longest sequence (equals seqlen_q when fixed)
  int64_t max_seqlen_k = 0;
  FK_HD bool varlen() const { return cu_seqlens_q != nullptr; }
  FK_HD int64_t group() const { return heads / kv_heads; }
};

// Where sequence b lives: rows [q0, q0+nq) of the seq dimension in batch slot `bslot`.
struct SeqRange {
  int64_t bslot, q0, nq, k0, nk;
};

FK_HD SeqRange seq_range(const AttentionShape& s, int64_t b) {
  if (s.cu_seqlens_q) {
    int64_t q0 = s.cu_seqlens_q[b], k0 = s.cu_seqlens_k[b];
    return {0, q0, s.cu_seqlens_q[b + 1] - q0, k0, s.cu_seqlens_k[b + 1] - k0};
  }
  return {b, 0, s.seqlen_q, 0, s.seqlen_k};
}

// Mask parameters resolved once: key j is visible to query i iff lo(i) <= j < hi(i); both are clamped to
// [0, nk] and the row is empty when hi <= lo. Both are non-decreasing in i.
struct AttentionMask {
  bool causal = false;
  int64_t window_left = -1, window_right = -1;  // -1 unbounded; causal already folded into right
  FK_HD int64_t lo(int64_t i, int64_t nq, int64_t nk) const {
    int64_t lo = window_left < 0 ? 0 : i + (nk - nq) - window_left;
    return lo < 0 ? 0 : (lo > nk ? nk : lo);
  }
  // one past the last visible key
  FK_HD int64_t hi(int64_t i, int64_t nq, int64_t nk) const {
    int64_t hi = window_right < 0 ? nk : i + (nk - nq) + window_right + 1;
    return hi > nk ? nk : (hi < 0 ? 0 : hi);
  }
};

struct AttentionFwdArgs {
  DType dtype = DType::f32;
  AttentionShape shape;
  AttnOperand q, k, v, o;
  float* lse = nullptr;  // [batch, heads, seqlen_q] contiguous (varlen: [1, heads, total_q])
  float scale = 1.f;
  float softcap = 0.f;
  AttentionMask mask;
  FK_HD int64_t lse_index(const SeqRange& r, int64_t h, int64_t i) const {
    return (r.bslot * shape.heads + h) * shape.seqlen_q + r.q0 + i;
  }
};

struct AttentionBwdArgs {
  AttentionFwdArgs fwd;  // q, k, v, o, lse as in the forward
  AttnOperand dout, dq, dk, dv;
};

// Element pointer of row `row` (absolute in the seq dim), head `h`, batch slot `b`.
template <typename T>
FK_HD T* row_ptr(const AttnOperand& t, int64_t b, int64_t row, int64_t h) {
  return static_cast<T*>(t.data) + b * t.stride_b + row * t.stride_s + h * t.stride_h;
}

}  // namespace flashkit::kernels
