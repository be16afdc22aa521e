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
// With check_finite off, every implementation (reference, CPU standard, CPU flash at every ISA, the CUDA backward:
// checked by the NonFinite tests) answers as below. The CUDA forward only in part (docs/worklog/attention-cuda.md):
// NaN in q gives the NaN row; NaN/+-inf in a visible k or v gives a row that is not finite but not all NaN (a k
// element's -inf score weighs 0), and finite scores that overflow f32 give NaN instead of the softmax.
//   forward, per query row i that sees at least one key:
//     - q_i, or k_j or v_j of a key j that row i sees, holds NaN or +-inf  ->  o_i = NaN (every element), lse_i = NaN;
//     - otherwise o_i is the softmax result, finite, also when a score scale * q.k (or a partial sum of it)
//       exceeds the f32 range: the CPU kernels recompute such a row in f64, like the reference; lse_i is the f32
//       rounding of the log-sum-exp (+inf only when it exceeds the f32 range itself);
//     - keys row i does not see (masked, or outside its sequence) never affect it, whatever they hold.
//   forward, a row with no visible key: o = 0, lse = -inf, whatever the inputs hold.
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
