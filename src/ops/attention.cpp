// The one layer that validates attention arguments and dispatches to a kernel by device and algorithm.
// Every message names the argument at fault and what was expected.
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "core/convert.hpp"
#include "core/tuning.hpp"
#include "flashkit/attention.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/registry.hpp"
#include "ops/cuda_dispatch.hpp"

namespace flashkit {

using namespace kernels;

std::string_view impl_name(AttentionImpl impl) {
  switch (impl) {
    case AttentionImpl::automatic: return "auto";
    case AttentionImpl::reference: return "reference";
    case AttentionImpl::standard: return "standard";
    case AttentionImpl::flash: return "flash";
  }
  return "unknown";
}

bool parse_impl(std::string_view s, AttentionImpl* out) {
  if (s == "auto") *out = AttentionImpl::automatic;
  else if (s == "reference" || s == "ref") *out = AttentionImpl::reference;
  else if (s == "standard" || s == "std") *out = AttentionImpl::standard;
  else if (s == "flash") *out = AttentionImpl::flash;
  else return false;
  return true;
}

int64_t flash_onchip_bytes(Device device) {
  // CPU: the forward working set the flash kernel tiles for (Q, O, S, K^T, V tiles at head_dim 64).
  return device == Device::cpu ? (int64_t(128) << 10) : (int64_t(228) << 10);
}

namespace {

[[noreturn]] void bad(const std::string& msg) { fail(Status::invalid_argument, msg); }

std::string dims(std::initializer_list<int64_t> s) {
  std::ostringstream o;
  o << "[";
  bool first = true;
  for (auto v : s) { o << (first ? "" : ", ") << v; first = false; }
  return o.str() + "]";
}

// `q`: the tensor the expected shape is derived from (nullptr for q itself). A mismatch names both, since
// either may be the wrong one.
void check_tensor(const TensorView& t, const char* name, std::initializer_list<int64_t> want, const char* layout,
                  const TensorView* q = nullptr) {
  if (t.data == nullptr) bad(std::string(name) + ": data pointer is null");
  if (t.ndim != int32_t(want.size()))
    bad(std::string(name) + ": expected " + std::to_string(want.size()) + " dimensions " + layout + ", got " +
        std::to_string(t.ndim) + " (shape " + t.shape_str() + ")");
  int d = 0;
  for (int64_t w : want) {
    if (t.shape[d] != w)
      bad(std::string(name) + ": expected shape " + dims(want) + " " + layout + ", got " + t.shape_str() +
          (q ? std::string("; the expected sizes come from q, shape ") + q->shape_str() + " [batch, seqlen_q, heads, " +
                   "head_dim] (and k's seqlen_k, kv_heads): if q is the wrong one, fix q"
             : std::string()));
    ++d;
  }
  if (t.numel() == 0) return;  // an empty tensor (e.g. varlen with no tokens) has no meaningful strides
  for (d = 0; d < t.ndim; ++d)
    if (t.strides[d] < 0 || (t.strides[d] == 0 && t.shape[d] > 1))
      bad(std::string(name) + ": stride of dimension " + std::to_string(d) + " must be positive, got " +
          std::to_string(t.strides[d]));
}

void check_operand(const TensorView& t, const char* name, const TensorView& q, std::initializer_list<int64_t> want,
                   const char* layout) {
  const DType dtype = q.dtype;
  const Device device = q.device;
  const int32_t device_index = q.device_index;
  check_tensor(t, name, want, layout, &t == &q ? nullptr : &q);
  if (t.dtype != dtype)
    bad(std::string(name) + ": dtype " + std::string(dtype_name(t.dtype)) + " does not match q's dtype " +
        std::string(dtype_name(dtype)));
  if (t.device != device || t.device_index != device_index)
    bad(std::string(name) + ": must be on the same device as q");
  if (t.strides[3] != 1)
    bad(std::string(name) + ": the head_dim dimension must be contiguous (stride 1), got stride " +
        std::to_string(t.strides[3]));
}

AttnOperand operand(const TensorView& t) { return {t.data, t.strides[0], t.strides[1], t.strides[2]}; }

// True when some element of a row is NaN or Inf: all exponent bits set, tested on the raw bits so the
// loop vectorizes (this pass runs on every call; it must stay far below the O(N^2) attention work).
template <typename Bits>
bool row_has_nonfinite(const Bits* row, int64_t n, Bits exp_mask) {
  bool bad = false;
  for (int64_t c = 0; c < n; ++c) bad |= (row[c] & exp_mask) == exp_mask;
  return bad;
}

bool row_has_nonfinite(const void* row, DType dt, int64_t n) {
  switch (dt) {
    case DType::f32: return row_has_nonfinite(static_cast<const uint32_t*>(row), n, uint32_t(0x7f800000u));
    case DType::bf16: return row_has_nonfinite(static_cast<const uint16_t*>(row), n, uint16_t(0x7f80u));
    case DType::f16: return row_has_nonfinite(static_cast<const uint16_t*>(row), n, uint16_t(0x7c00u));
    case DType::f64: return row_has_nonfinite(static_cast<const uint64_t*>(row), n, uint64_t(0x7ff0000000000000ull));
    case DType::e4m3: return row_has_nonfinite(static_cast<const uint8_t*>(row), n, uint8_t(0x7f));  // NaN only
    default: return false;
  }
}

// Rejects NaN/Inf in a CPU operand (rows of the visible extent only), naming the first bad element.
void check_finite(const TensorView& t, const char* name) {
  const int64_t es = dtype_size(t.dtype);
  for (int64_t b = 0; b < t.shape[0]; ++b)
    for (int64_t s = 0; s < t.shape[1]; ++s)
      for (int64_t h = 0; h < t.shape[2]; ++h) {
        const char* row = static_cast<const char*>(t.data) + (b * t.strides[0] + s * t.strides[1] + h * t.strides[2]) * es;
        if (!row_has_nonfinite(row, t.dtype, t.shape[3])) continue;
        for (int64_t c = 0; c < t.shape[3]; ++c)
          if (!std::isfinite(load_as_f64(row, t.dtype, c)))
            bad(std::string(name) + ": contains a non-finite value at [" + std::to_string(b) + ", " + std::to_string(s) +
                ", " + std::to_string(h) + ", " + std::to_string(c) + "] (set check_finite=false to skip this check)");
      }
}

// Backward with check_finite: a query row that sees at least one key needs the forward's finite lse (a fully
// masked row's -inf is fine). Without the check such a row gets NaN gradients (attention.hpp).
void check_lse_finite(const AttentionFwdArgs& a) {
  const AttentionShape& s = a.shape;
  for (int64_t b = 0; b < s.batch; ++b) {
    const SeqRange r = seq_range(s, b);
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < r.nq; ++i) {
        const float x = a.lse[a.lse_index(r, h, i)];
        if (std::isfinite(x) || a.mask.hi(i, r.nq, r.nk) <= a.mask.lo(i, r.nq, r.nk)) continue;
        bad("lse: " + std::string(std::isnan(x) ? "NaN" : x > 0 ? "+inf" : "-inf") + " at [" +
            std::to_string(r.bslot) + ", " + std::to_string(h) + ", " + std::to_string(r.q0 + i) +
            "] for a query row that sees keys (expected the forward's finite log-sum-exp; set check_finite=false "
            "to get NaN gradients for such rows instead)");
      }
  }
}

void check_cu_seqlens(const int32_t* cu, int64_t n, int64_t total, const char* name, const char* tensor) {
  if (cu[0] != 0) bad(std::string(name) + "[0] must be 0, got " + std::to_string(cu[0]));
  for (int64_t i = 0; i < n; ++i)
    if (cu[i + 1] < cu[i])
      bad(std::string(name) + " must be non-decreasing, but " + name + "[" + std::to_string(i + 1) + "] = " +
          std::to_string(cu[i + 1]) + " < " + std::to_string(cu[i]));
  if (cu[n] != total)
    bad(std::string(name) + "[num_seqs] must equal " + tensor + "'s token count " + std::to_string(total) + ", got " +
        std::to_string(cu[n]));
}

// Everything the forward and backward share: shapes, dtypes, options. Returns the normalized args.
AttentionFwdArgs validate_common(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                                 const TensorView& lse, const AttentionOptions& opts, std::vector<int32_t>* host_cu) {
  if (q.data == nullptr) bad("q: data pointer is null");
  if (q.ndim != 4) bad("q: expected 4 dimensions [batch, seqlen_q, heads, head_dim], got shape " + q.shape_str());
  if (q.dtype == DType::e4m3)
    bad("q: dtype e4m3 is supported only by attention_forward_fp8 (include/flashkit/attention_fp8.hpp)");
  if (q.dtype == DType::f64 && opts.impl != AttentionImpl::reference)
    bad("q: dtype f64 is accepted by impl=reference only (the oracle's precision); use f32, bf16 or f16");
  if (q.dtype != DType::f32 && q.dtype != DType::bf16 && q.dtype != DType::f16 && q.dtype != DType::f64)
    bad("q: dtype must be f32, bf16 or f16, got " + std::string(dtype_name(q.dtype)));
  if (k.ndim != 4) bad("k: expected 4 dimensions [batch, seqlen_k, kv_heads, head_dim], got shape " + k.shape_str());
  const int64_t B = q.shape[0], Sq = q.shape[1], H = q.shape[2], D = q.shape[3];
  const int64_t Sk = k.shape[1], Hkv = k.shape[2];
  if (B < 1) bad("q: batch must be at least 1, got " + std::to_string(B));
  if (H < 1) bad("q: heads must be at least 1, got " + std::to_string(H));
  if (D < 8 || D > 256 || D % 8 != 0) bad("q: head_dim must be a multiple of 8 in [8, 256], got " + std::to_string(D));
  if (Hkv < 1 || H % Hkv != 0)
    bad("k: kv_heads (" + std::to_string(Hkv) + ") must be at least 1 and divide q's heads (" + std::to_string(H) + ")");
  check_operand(q, "q", q, {B, Sq, H, D}, "[batch, seqlen_q, heads, head_dim]");
  check_operand(k, "k", q, {B, Sk, Hkv, D}, "[batch, seqlen_k, kv_heads, head_dim]");
  check_operand(v, "v", q, {B, Sk, Hkv, D}, "[batch, seqlen_k, kv_heads, head_dim]");
  check_operand(o, "o", q, {B, Sq, H, D}, "[batch, seqlen_q, heads, head_dim]");

  const bool varlen = opts.cu_seqlens_q || opts.cu_seqlens_k;
  if (!varlen && (Sq < 1 || Sk < 1))
    bad("seqlen must be at least 1 (q has " + std::to_string(Sq) + ", k has " + std::to_string(Sk) +
        "); use cu_seqlens for batches with empty sequences");
  check_tensor(lse, "lse", {B, H, Sq}, "[batch, heads, seqlen_q]", &q);
  if (lse.dtype != DType::f32) bad("lse: dtype must be f32, got " + std::string(dtype_name(lse.dtype)));
  if (lse.numel() > 0 && !lse.is_contiguous()) bad("lse: must be contiguous");
  if (lse.device != q.device || lse.device_index != q.device_index) bad("lse: must be on the same device as q");

  if (!std::isfinite(opts.scale) || opts.scale < 0)
    bad("scale: must be a finite positive number (or 0 for 1/sqrt(head_dim)), got " + std::to_string(opts.scale));
  if (!std::isfinite(opts.softcap) || opts.softcap < 0)
    bad("softcap: must be finite and >= 0 (0 disables it), got " + std::to_string(opts.softcap));
  if (opts.window_left < -1) bad("window_left: must be >= 0, or -1 for unbounded; got " + std::to_string(opts.window_left));
  if (opts.window_right < -1) bad("window_right: must be >= 0, or -1 for unbounded; got " + std::to_string(opts.window_right));
  check_threads(opts.threads, "threads");

  AttentionFwdArgs a;
  a.dtype = q.dtype;
  a.shape = {B, Sq, Sk, H, Hkv, D, nullptr, nullptr, Sq, Sk};
  if (varlen) {
    if (!opts.cu_seqlens_q || !opts.cu_seqlens_k) bad("cu_seqlens_q and cu_seqlens_k must both be given (or neither)");
    if (opts.num_seqs < 1) bad("num_seqs: must be at least 1 with cu_seqlens, got " + std::to_string(opts.num_seqs));
    if (B != 1) bad("q: with cu_seqlens the batch dimension must be 1 (tokens packed along seqlen), got " + std::to_string(B));
    const int64_t n = opts.num_seqs;
    const int32_t* cq = opts.cu_seqlens_q;
    const int32_t* ck = opts.cu_seqlens_k;
    if (q.device == Device::cuda) {  // validate a host copy; kernels get the device pointers
      host_cu->resize(size_t(2 * (n + 1)));
      cuda_copy_to_host(host_cu->data(), cq, size_t(n + 1) * 4, q.device_index);
      cuda_copy_to_host(host_cu->data() + n + 1, ck, size_t(n + 1) * 4, q.device_index);
      cq = host_cu->data();
      ck = host_cu->data() + n + 1;
    }
    check_cu_seqlens(cq, n, Sq, "cu_seqlens_q", "q");
    check_cu_seqlens(ck, n, Sk, "cu_seqlens_k", "k");
    int64_t mq = 0, mk = 0;
    for (int64_t i = 0; i < n; ++i) {
      mq = std::max<int64_t>(mq, cq[i + 1] - cq[i]);
      mk = std::max<int64_t>(mk, ck[i + 1] - ck[i]);
    }
    a.shape.batch = n;
    a.shape.cu_seqlens_q = opts.cu_seqlens_q;
    a.shape.cu_seqlens_k = opts.cu_seqlens_k;
    a.shape.max_seqlen_q = mq;
    a.shape.max_seqlen_k = mk;
  }
  a.q = operand(q);
  a.k = operand(k);
  a.v = operand(v);
  a.o = operand(o);
  a.lse = static_cast<float*>(lse.data);
  a.scale = opts.scale > 0 ? opts.scale : float(1.0 / std::sqrt(double(D)));
  a.softcap = opts.softcap;
  a.mask.causal = opts.causal;
  a.mask.window_left = opts.window_left;
  a.mask.window_right = opts.causal ? (opts.window_right < 0 ? 0 : std::min<int64_t>(opts.window_right, 0)) : opts.window_right;
  return a;
}

AttentionImpl resolve_impl(AttentionImpl impl, Device device) {
  if (impl == AttentionImpl::automatic) return AttentionImpl::flash;
  if (device == Device::cuda && impl == AttentionImpl::reference)
    fail(Status::unsupported, "impl: the reference implementation runs on CPU tensors only");
  return impl;
}

void check_workspace(const OpCost& c, const AttentionImpl impl, const Tuning& tuning) {
  const double limit = double(max_workspace_bytes(tuning));
  if (c.workspace_bytes > limit) {
    std::ostringstream o;
    o.precision(3);
    o << impl_name(impl) << " attention needs " << c.workspace_bytes / 1e9 << " GB of workspace (the materialized "
      << "score and probability matrices), more than the limit of " << limit / 1e9
      << " GB (80% of physical memory, or FLASHKIT_MAX_WORKSPACE_BYTES); use impl=flash, whose extra memory is "
         "linear in seqlen";
    fail(Status::out_of_memory, o.str());
  }
}

void require_cuda_device(const TensorView& q) {
  if (q.device != Device::cuda) return;
  if (q.dtype == DType::e4m3)
    bad("q: dtype e4m3 is supported only by attention_forward_fp8 (include/flashkit/attention_fp8.hpp)");
  if (cuda_device_count() == 0)
    fail(Status::unsupported, "q: tensors are on a CUDA device but this flashkit build has no CUDA support or no device is visible");
  if (q.dtype != DType::bf16 && q.dtype != DType::f16)
    fail(Status::unsupported, "q: CUDA attention kernels take bf16 or f16 tensors, got " + std::string(dtype_name(q.dtype)) +
                                  " (convert, or use CPU tensors)");
}

}  // namespace

// The fp8 forward (ops/attention_fp8.cpp) shares these checks; it passes its e4m3 operands relabelled as bf16 (the
// strides are in elements, so only the dtype checks differ) and checks the dtypes itself.
AttentionFwdArgs validate_attention_fwd(const TensorView& q, const TensorView& k, const TensorView& v,
                                        const TensorView& o, const TensorView& lse, const AttentionOptions& opts,
                                        std::vector<int32_t>* host_cu) {
  return validate_common(q, k, v, o, lse, opts, host_cu);
}
void check_attention_operand_finite(const TensorView& t, const char* name) { check_finite(t, name); }

void attention_forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                       const TensorView& lse, const AttentionOptions& opts, OpCost* cost) {
  require_cuda_device(q);
  std::vector<int32_t> host_cu;
  AttentionFwdArgs a = validate_common(q, k, v, o, lse, opts, &host_cu);
  const AttentionImpl impl = resolve_impl(opts.impl, q.device);
  if (opts.check_finite && q.device == Device::cpu) {
    check_finite(q, "q");
    check_finite(k, "k");
    check_finite(v, "v");
  }
  const Tuning tuning = resolve_tuning(opts.tuning);
  if (q.device == Device::cuda) {
    cuda_attention_forward(a, host_cu, impl, tuning, cost);
    return;
  }
  const ScopedNumThreads threads(opts.threads);  // this call only, this thread only
  OpCost c;
  switch (impl) {
    case AttentionImpl::reference: c = attention_forward_reference_cost(a); break;
    case AttentionImpl::standard: c = attention_forward_cpu_standard_cost(a); break;
    default: c = attention_forward_cpu_flash_cost(a, tuning.cpu_isa); break;
  }
  check_workspace(c, impl, tuning);
  try {
    switch (impl) {
      case AttentionImpl::reference: attention_forward_reference(a); break;
      case AttentionImpl::standard: attention_forward_cpu_standard(a); break;
      default: attention_forward_cpu_flash(a, tuning.cpu_isa); break;
    }
  } catch (const std::bad_alloc&) {
    fail(Status::out_of_memory, std::string(impl_name(impl)) + " attention: allocating its workspace failed");
  }
  if (cost) *cost = c;
}

void attention_backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& o, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                        const TensorView& dv, const AttentionOptions& opts, OpCost* cost) {
  require_cuda_device(q);
  std::vector<int32_t> host_cu;
  AttentionBwdArgs g;
  g.fwd = validate_common(q, k, v, o, lse, opts, &host_cu);
  const int64_t B = q.shape[0], Sq = q.shape[1], H = q.shape[2], D = q.shape[3], Sk = k.shape[1], Hkv = k.shape[2];
  check_operand(dout, "dout", q, {B, Sq, H, D}, "[batch, seqlen_q, heads, head_dim]");
  check_operand(dq, "dq", q, {B, Sq, H, D}, "[batch, seqlen_q, heads, head_dim]");
  check_operand(dk, "dk", q, {B, Sk, Hkv, D}, "[batch, seqlen_k, kv_heads, head_dim]");
  check_operand(dv, "dv", q, {B, Sk, Hkv, D}, "[batch, seqlen_k, kv_heads, head_dim]");
  g.dout = operand(dout);
  g.dq = operand(dq);
  g.dk = operand(dk);
  g.dv = operand(dv);
  const AttentionImpl impl = resolve_impl(opts.impl, q.device);
  if (opts.check_finite && q.device == Device::cpu) {
    check_finite(q, "q");
    check_finite(k, "k");
    check_finite(v, "v");
    check_finite(o, "o");
    check_finite(dout, "dout");
    check_lse_finite(g.fwd);
  }
  const Tuning tuning = resolve_tuning(opts.tuning);
  if (q.device == Device::cuda) {
    cuda_attention_backward(g, host_cu, impl, tuning, cost);
    return;
  }
  const ScopedNumThreads threads(opts.threads);
  OpCost c;
  switch (impl) {
    case AttentionImpl::reference: c = attention_backward_reference_cost(g); break;
    case AttentionImpl::standard: c = attention_backward_cpu_standard_cost(g); break;
    default: c = attention_backward_cpu_flash_cost(g, tuning.cpu_isa); break;
  }
  check_workspace(c, impl, tuning);
  try {
    switch (impl) {
      case AttentionImpl::reference: attention_backward_reference(g); break;
      case AttentionImpl::standard: attention_backward_cpu_standard(g); break;
      default: attention_backward_cpu_flash(g, tuning.cpu_isa); break;
    }
  } catch (const std::bad_alloc&) {
    fail(Status::out_of_memory, std::string(impl_name(impl)) + " attention backward: allocating its workspace failed");
  }
  if (cost) *cost = c;
}

}  // namespace flashkit
