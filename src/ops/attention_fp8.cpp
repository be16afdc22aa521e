// Validation and dispatch of the fp8 attention forward and the e4m3 quantizer (include/flashkit/attention_fp8.hpp).
// The shape, stride and option checks are the bf16 op's (ops/attention.cpp); this file adds the fp8 dtypes, the
// descales and the options the first version does not take.
#include <cmath>
#include <string>
#include <vector>

#include "core/convert.hpp"
#include "core/tuning.hpp"
#include "flashkit/attention_fp8.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "kernels/attention_fp8_args.hpp"
#include "ops/attention_fp8_cuda.hpp"

namespace flashkit {

// ops/attention.cpp
kernels::AttentionFwdArgs validate_attention_fwd(const TensorView& q, const TensorView& k, const TensorView& v,
                                                 const TensorView& o, const TensorView& lse,
                                                 const AttentionOptions& opts, std::vector<int32_t>* host_cu);
void check_attention_operand_finite(const TensorView& t, const char* name);

namespace {

[[noreturn]] void bad(const std::string& msg) { fail(Status::invalid_argument, "attention_forward_fp8: " + msg); }

void check_dtype(const TensorView& t, const char* name, DType want) {
  if (t.dtype != want)
    bad(std::string(name) + ": dtype must be " + std::string(dtype_name(want)) + ", got " +
        std::string(dtype_name(t.dtype)));
}

void check_descale(float s, const char* name) {
  if (!std::isfinite(s) || s <= 0)
    bad(std::string("scales.") + name + ": must be finite and > 0 (the tensor's dequantization factor, e.g. from "
                                        "quantize_e4m3), got " + std::to_string(s));
}

TensorView as_bf16(TensorView t) {
  t.dtype = DType::bf16;
  return t;
}

}  // namespace

void attention_forward_fp8(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                           const TensorView& lse, const AttentionFp8Scales& scales, const AttentionOptions& opts,
                           OpCost* cost) {
  check_dtype(q, "q", DType::e4m3);
  check_dtype(k, "k", DType::e4m3);
  check_dtype(v, "v", DType::e4m3);
  check_dtype(o, "o", DType::bf16);
  check_descale(scales.q_descale, "q_descale");
  check_descale(scales.k_descale, "k_descale");
  check_descale(scales.v_descale, "v_descale");
  if (opts.window_left != -1 || opts.window_right != -1)
    bad("window_left/window_right: sliding windows are not supported by the fp8 forward yet (use -1, -1)");
  if (opts.softcap != 0.0f) bad("softcap: not supported by the fp8 forward yet (use 0)");
  if (opts.cu_seqlens_q || opts.cu_seqlens_k)
    bad("cu_seqlens_q/cu_seqlens_k: variable-length batches are not supported by the fp8 forward yet");
  if (opts.impl == AttentionImpl::standard)
    bad("impl: standard has no fp8 version; use automatic, flash or (CPU) reference");
  if (q.device == Device::cuda && opts.impl == AttentionImpl::reference)
    fail(Status::unsupported, "attention_forward_fp8: impl: the reference implementation runs on CPU tensors only");
  if (q.device == Device::cuda && cuda_device_count() == 0)
    fail(Status::unsupported, "attention_forward_fp8: q: tensors are on a CUDA device but this flashkit build has no "
                              "CUDA support or no device is visible");
  std::vector<int32_t> host_cu;
  kernels::AttentionFp8Args a;
  a.fwd = validate_attention_fwd(as_bf16(q), as_bf16(k), as_bf16(v), o, lse, opts, &host_cu);
  a.fwd.dtype = DType::e4m3;
  a.q_descale = scales.q_descale;
  a.k_descale = scales.k_descale;
  a.v_descale = scales.v_descale;
  if (opts.check_finite && q.device == Device::cpu) {
    check_attention_operand_finite(q, "q");
    check_attention_operand_finite(k, "k");
    check_attention_operand_finite(v, "v");
  }
  const Tuning tuning = resolve_tuning(opts.tuning);
  if (q.device == Device::cuda) {
    cuda_attention_forward_fp8(a, tuning, cost);
    return;
  }
  const ScopedNumThreads threads(opts.threads);
  if (opts.impl == AttentionImpl::reference) {
    kernels::attention_forward_fp8_reference(a, kernels::Fp8PRounding::row_max);
    if (cost) *cost = kernels::attention_forward_fp8_cost(a, "reference.f64.fp8");
    return;
  }
  kernels::attention_forward_fp8_cpu(a);
  if (cost) *cost = kernels::attention_forward_fp8_cost(a, "cpu.fp8.f32");
}

void quantize_e4m3(const TensorView& src, const TensorView& dst, float* descale) {
  auto qbad = [](const std::string& m) { fail(Status::invalid_argument, "quantize_e4m3: " + m); };
  if (descale == nullptr) qbad("descale: the output pointer is null");
  if (src.data == nullptr && src.numel() > 0) qbad("src: data pointer is null");
  if (dst.data == nullptr && dst.numel() > 0) qbad("dst: data pointer is null");
  if (src.dtype != DType::f32 && src.dtype != DType::bf16 && src.dtype != DType::f16)
    qbad("src: dtype must be f32, bf16 or f16, got " + std::string(dtype_name(src.dtype)));
  if (dst.dtype != DType::e4m3) qbad("dst: dtype must be e4m3, got " + std::string(dtype_name(dst.dtype)));
  if (src.ndim != dst.ndim || src.shape != dst.shape)
    qbad("dst: shape " + dst.shape_str() + " must equal src's shape " + src.shape_str());
  if (!src.is_contiguous()) qbad("src: must be contiguous");
  if (!dst.is_contiguous()) qbad("dst: must be contiguous");
  if (src.device != dst.device || src.device_index != dst.device_index) qbad("dst: must be on the same device as src");
  const int64_t n = src.numel();
  if (src.device == Device::cuda) {
    cuda_quantize_e4m3(src, dst, n, descale);
    return;
  }
  double amax = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = load_as_f64(src.data, src.dtype, i);
    if (!std::isfinite(x)) qbad("src: contains a non-finite value at flat index " + std::to_string(i));
    amax = std::max(amax, std::fabs(x));
  }
  const float s = amax > 0 ? float(amax / double(kE4m3Max)) : 1.0f;
  uint8_t* out = static_cast<uint8_t*>(dst.data);
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_e4m3(float(load_as_f64(src.data, src.dtype, i)) / s);
  *descale = s;
}

}  // namespace flashkit
