// The attention contract. One set of semantics, several implementations:
//   reference : naive loops with f64 accumulation; the oracle every other implementation is tested against.
//   standard  : materializes the [batch, heads, seqlen_q, seqlen_k] score and probability matrices in
//               main memory and uses BLAS GEMMs (what PyTorch's math path does).
//   flash     : FlashAttention: tiles Q/K/V so each block finishes in cache, online-softmax rescaling,
//               never materializes the attention weights; backward recomputes P from the saved LSE.
//
// Layout: q [batch, seqlen_q, heads, head_dim], k/v [batch, seqlen_k, kv_heads, head_dim] (last dim
// contiguous, other strides free), o like q, lse f32 [batch, heads, seqlen_q] contiguous.
// Variable-length batches: pass batch=1 tensors [1, total_tokens, heads, head_dim] and cumulative
// offsets cu_seqlens_q/k of length num_seqs+1 (host memory for CPU tensors, device memory for CUDA);
// lse is then [1, heads, total_q].
//
// Masking (query i of a sequence with seqlen_q rows, key j of seqlen_k keys); the diagonal is aligned
// bottom-right, so that the last query sees the last key (the KV-cache decoding case):
//   off = seqlen_k - seqlen_q;  causal: j <= i + off
//   window (left, right), -1 meaning unbounded: i + off - left <= j <= i + off + right
// Scores: s = scale * q.k; with softcap > 0, s = softcap * tanh(s / softcap).
// A query row with no visible key gets o = 0 and lse = -inf (its gradients are 0).
//
// Non-finite input. With check_finite (the default) NaN/+-inf in q, k, v -- and, for the backward, in o, dout and
// in the lse of a row that sees at least one key -- is rejected with invalid_argument naming the tensor and index
// (CPU tensors: on CUDA that scan would cost a device-to-host synchronization per call, so CUDA calls always
// answer as with check_finite off).
// With check_finite off, every implementation (reference, CPU standard, CPU flash at every ISA, every CUDA kernel)
// answers by contract B: what a FlashAttention kernel computes anyway, at no cost on any path (three attempts to
// make the CUDA forward give more cost 2-4% of prefill or ~1 us per decode call: docs/worklog/attention-cuda.md).
//   scores are f32: s = scale * q.k, then the softcap; a score beyond the f32 range is +-inf (the reference computes
//   in f64 and maps |scale q.k| > FLT_MAX to +-inf before the cap; the CPU kernels recompute such rows and match it;
//   the CUDA kernels round q.k to f32 before scaling, so they may see +-inf within a factor `scale` of that
//   boundary); NaN/inf inputs give the IEEE score (inf * 0 is NaN). A -inf score weighs 0: it is how the mask is
//   expressed. Accuracy of finite scores: the CUDA flash kernels take e^(s - m) as 2^(s c - m c) with s c - m c in one
//   FMA (c = log2 e), whose error is m c's rounding: ~0.1% at |s| ~ 1e4, 1% near 1e5, and finite scores near the f32
//   limit (1e20 and up) can give +-inf/NaN rows; the reference, the CPU kernels and the cuBLAS path have no such limit.
//   forward, per query row i that sees at least one key:
//     - a visible score is NaN or +inf  ->  o_i = NaN (every element), lse_i = NaN;
//     - otherwise, every visible score -inf  ->  the answer of a row with no visible key: o_i = 0, lse_i = -inf
//       (on CUDA, o_i[c] may be NaN where column c of a visible v holds NaN/+-inf: 0 * inf in P V);
//     - otherwise lse_i is the finite log-sum-exp and o_i = P V in IEEE arithmetic: NaN/+-inf in column c of a
//       visible v makes o_i[c] non-finite (NaN or +-inf, not specified); the row's other elements stay finite.
//   forward, a row with no visible key: o = 0, lse = -inf (on CUDA, up to the masked v columns below).
//   Keys row i does not see never change lse_i, nor o_i on the CPU. On CUDA a NaN/+-inf in column c of such a
//   key's v can make o_i[c] non-finite (the masked p = 0 times v in a tile's matrix product): the flash kernels
//   when another row of i's query tile sees a key of that key tile (at the causal diagonal and window edges,
//   rows with no visible key beside rows with, the decode kernel's 16 packed rows of GQA heads and query
//   positions; in varlen batches the Hopper warp-specialized kernel reads the next sequence's first keys into a
//   sequence's last key tile); the cuBLAS standard path for every row of the key's sequence and head group.
//   backward, per query row i that sees at least one key, when lse_i is NaN, +inf or -inf (not the forward's):
//     dq_i = NaN, and dk_j, dv_j = NaN for every key j row i sees (rows with finite lse contribute as usual);
//     the lse of a row with no visible key is ignored (its contributions are 0).
//   Other non-finite backward inputs (q, k, v, o, dout with check_finite off) propagate by IEEE arithmetic: the
//   gradients that depend on them are not finite, which of their elements is not specified.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "flashkit/tensor.hpp"
#include "flashkit/tuning.hpp"

namespace flashkit {

enum class AttentionImpl : int32_t { automatic = 0, reference = 1, standard = 2, flash = 3 };

std::string_view impl_name(AttentionImpl impl);
bool parse_impl(std::string_view s, AttentionImpl* out);

struct AttentionOptions {
  float scale = 0.0f;           // 0 means 1/sqrt(head_dim)
  bool causal = false;
  int64_t window_left = -1;     // -1: unbounded
  int64_t window_right = -1;    // -1: unbounded
  float softcap = 0.0f;         // 0: off
  const int32_t* cu_seqlens_q = nullptr;  // varlen: num_seqs+1 offsets
  const int32_t* cu_seqlens_k = nullptr;
  int64_t num_seqs = 0;         // varlen: number of sequences (cu arrays have num_seqs+1 entries)
  AttentionImpl impl = AttentionImpl::automatic;
  bool check_finite = true;     // CPU: reject NaN/Inf in q/k/v (backward: also dout, o and lse); an O(N*d) pass
  int threads = 0;              // CPU: threads for this call only (0: num_threads()); 1..max_threads()
  // Kernel paths and limits for this call (CPU ISA cap, workspace limit, CUDA kernel choice); unset: the process
  // default (default_tuning()). Tests set it per call to cover every path in one run.
  std::optional<Tuning> tuning;
};

// What an implementation did, under a stated model. FLOPs count the multiply-adds of the matrix
// products the implementation actually executes (2 per MAC, including masked work it does not skip).
// Bytes count traffic to and from main memory (HBM on a GPU) under the model named in `model`.
struct OpCost {
  double flops = 0;
  double bytes_read = 0;
  double bytes_written = 0;
  double workspace_bytes = 0;  // peak extra memory allocated by the call
  std::string model;           // one line: how bytes were counted
  std::string kernel;          // which kernel variant ran: "reference.f64", "cpu.standard.openblas", "cpu.flash.avx2",
                               // "cuda.flash.fwd.sm90ws.bf16.d128", "cuda.flash.decode.sm80mma.bf16.d128.splits16", ...
};

void attention_forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                       const TensorView& lse, const AttentionOptions& opts, OpCost* cost = nullptr);

void attention_backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& o, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                        const TensorView& dv, const AttentionOptions& opts, OpCost* cost = nullptr);

// Bytes of on-chip memory the flash model assumes (per core: L2 on the CPU, shared memory per SM on GPUs).
// Used by cost models; exposed so benchmarks can print it.
int64_t flash_onchip_bytes(Device device);

}  // namespace flashkit
