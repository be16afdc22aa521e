// torch.ops.flashkit: flashkit attention as PyTorch operators, calling the C++ API directly (no ctypes).
//
//   flashkit::fwd(q, k, v, cu_seqlens_q?, cu_seqlens_k?, softmax_scale, causal, window_left, window_right, softcap,
//                 impl) -> (out, softmax_lse)
//   flashkit::bwd(dout, q, k, v, out, softmax_lse, cu_seqlens_q?, cu_seqlens_k?, softmax_scale, causal, window_left,
//                 window_right, softcap, impl) -> (dq, dk, dv)
//
// Layouts and semantics are include/flashkit/attention.hpp's (q [B, Sq, H, D], k/v [B, Sk, Hkv, D], lse f32
// [B, H, Sq]; softmax_scale 0 means 1/sqrt(D)). The CPU and CUDA kernels and the Autograd kernel live here; the fake
// (meta) kernels are registered from Python (python/flashkit/_torch_ops.py), so one registration serves this
// extension and the ctypes fallback. flashkit's own checks name the argument at fault; their flashkit::Error
// becomes a c10 error (RuntimeError in Python) carrying that message.
// The file is also a Python module with one function, fwd_eager (flash_attn_func's eager fast path, below).
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/csrc/Exceptions.h>
#include <torch/extension.h>
#include <torch/library.h>
#include <torch/version.h>

#ifdef FLASHKIT_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#endif

#include <optional>
#include <string>
#include <tuple>

// cpp_extension defines it (the module name Python imports); set here too for other builds of this file.
#ifndef TORCH_EXTENSION_NAME
#define TORCH_EXTENSION_NAME flashkit_torch
#endif

#include "flashkit/attention.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"

namespace {

// Optional tensor arguments: c10::optional up to torch 2.3, std::optional since (c10::optional became an alias of it
// in 2.4 and is deprecated after).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
using OptionalTensor = std::optional<at::Tensor>;
#else
using OptionalTensor = c10::optional<at::Tensor>;
#endif

flashkit::DType to_flashkit(at::ScalarType t, const char* name) {
  switch (t) {
    case at::kFloat: return flashkit::DType::f32;
    case at::kBFloat16: return flashkit::DType::bf16;
    case at::kHalf: return flashkit::DType::f16;
    default: break;
  }
  TORCH_CHECK_TYPE(false, "flashkit: ", name, ": dtype must be float32, bfloat16 or float16, got ", t);
  return flashkit::DType::f32;  // not reached
}

// A view of t's memory; flashkit validates shapes and strides itself (and names the tensor when they are wrong).
flashkit::TensorView view_of(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.dim() >= 1 && t.dim() <= 4, "flashkit: ", name, ": expected 1 to 4 dimensions, got ", t.dim());
  flashkit::TensorView v;
  v.data = t.data_ptr();
  v.dtype = to_flashkit(t.scalar_type(), name);
  v.device = t.is_cuda() ? flashkit::Device::cuda : flashkit::Device::cpu;
  v.device_index = t.is_cuda() ? t.get_device() : 0;
  v.ndim = static_cast<int32_t>(t.dim());
  for (int64_t i = 0; i < t.dim(); ++i) {
    v.shape[i] = t.size(i);
    v.strides[i] = t.stride(i);
  }
  return v;
}

// A new contiguous output, straight from the device's allocator: at::empty reaches the same call through two
// dispatcher hops (BackendSelect, then the device), ~0.15 us per tensor (docs/worklog/attention-cuda.md, v20).
at::Tensor new_output(at::IntArrayRef sizes, const at::TensorOptions& o) {
#ifdef FLASHKIT_TORCH_CUDA
  if (o.device().is_cuda()) return at::Tensor(at::detail::empty_cuda(sizes, o));
#endif
  if (o.device().is_cpu()) return at::Tensor(at::detail::empty_cpu(sizes, o));
  return at::empty(sizes, o);
}

// A non-contiguous last dimension is copied (the kernels read rows of head_dim elements).
at::Tensor last_contiguous(const at::Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); }

const int32_t* cu_seqlens(const OptionalTensor& cu, const at::Tensor& q, const char* name,
                          at::Tensor* keep) {
  if (!cu.has_value()) return nullptr;
  TORCH_CHECK(cu->dim() == 1, "flashkit: ", name, ": expected a 1-d tensor of num_seqs+1 offsets, got ",
              cu->dim(), " dimensions");
  TORCH_CHECK(cu->device() == q.device(), "flashkit: ", name, ": must be on the tensors' device ", q.device(),
              ", got ", cu->device());
  *keep = cu->to(at::kInt).contiguous();
  return keep->data_ptr<int32_t>();
}

flashkit::AttentionOptions options(const at::Tensor& q, const OptionalTensor& cu_q,
                                   const OptionalTensor& cu_k, double scale, bool causal,
                                   int64_t window_left, int64_t window_right, double softcap, int64_t impl,
                                   at::Tensor* keep_q, at::Tensor* keep_k) {
  TORCH_CHECK(cu_q.has_value() == cu_k.has_value(), "flashkit: cu_seqlens_q and cu_seqlens_k: pass both or neither");
  TORCH_CHECK_VALUE(impl >= 0 && impl <= 3,
                    "flashkit: impl: expected 0 (auto), 1 (reference), 2 (standard) or 3 (flash), got ", impl);
  flashkit::AttentionOptions o;
  o.scale = static_cast<float>(scale);
  o.causal = causal;
  o.window_left = window_left;
  o.window_right = window_right;
  o.softcap = static_cast<float>(softcap);
  o.cu_seqlens_q = cu_seqlens(cu_q, q, "cu_seqlens_q", keep_q);
  o.cu_seqlens_k = cu_seqlens(cu_k, q, "cu_seqlens_k", keep_k);
  if (o.cu_seqlens_q) {
    TORCH_CHECK(keep_q->numel() == keep_k->numel(), "flashkit: cu_seqlens_q and cu_seqlens_k: expected the same "
                "length, got ", keep_q->numel(), " and ", keep_k->numel());
    o.num_seqs = keep_q->numel() - 1;
  }
  o.impl = static_cast<flashkit::AttentionImpl>(impl);
  // The finiteness pre-pass reads q/k/v back to the host on CUDA; the CUDA contract defines non-finite results.
  o.check_finite = !q.is_cuda();
  return o;
}

// flashkit's status picks the Python exception: ValueError for a bad argument, NotImplementedError for a request this
// build or device cannot serve, RuntimeError otherwise (what flashkit.errors derives from on the ctypes path).
[[noreturn]] void rethrow(const flashkit::Error& e) {
  if (e.status() == flashkit::Status::invalid_argument) TORCH_CHECK_VALUE(false, "flashkit: ", e.what());
  if (e.status() == flashkit::Status::unsupported) TORCH_CHECK_NOT_IMPLEMENTED(false, "flashkit: ", e.what());
  TORCH_CHECK(false, "flashkit: ", e.what());
}

// Runs f with flashkit's launches on the current PyTorch stream of q's device, converting flashkit errors.
template <class F>
void call_flashkit(const at::Tensor& q, F&& f) {
#ifdef FLASHKIT_TORCH_CUDA
  if (q.is_cuda()) {
    const c10::cuda::CUDAGuard guard(q.device());
    void* previous = flashkit::cuda_stream();
    flashkit::set_cuda_stream(at::cuda::getCurrentCUDAStream(q.get_device()).stream());
    try {
      f();
    } catch (const flashkit::Error& e) {
      flashkit::set_cuda_stream(previous);
      rethrow(e);
    } catch (...) {
      flashkit::set_cuda_stream(previous);
      throw;
    }
    flashkit::set_cuda_stream(previous);
    return;
  }
#endif
  try {
    f();
  } catch (const flashkit::Error& e) {
    rethrow(e);
  }
}

std::tuple<at::Tensor, at::Tensor> fwd(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                       const OptionalTensor& cu_seqlens_q,
                                       const OptionalTensor& cu_seqlens_k, double softmax_scale,
                                       bool causal, int64_t window_left, int64_t window_right, double softcap,
                                       int64_t impl) {
  TORCH_CHECK(q_in.dim() == 4, "flashkit: q: expected [batch, seqlen_q, heads, head_dim], got ", q_in.dim(),
              " dimensions");
  const at::Tensor q = last_contiguous(q_in), k = last_contiguous(k_in), v = last_contiguous(v_in);
  // Views in argument order (one declaration sequences them), so a bad dtype is reported for the first tensor.
  const flashkit::TensorView qv = view_of(q, "q"), kv = view_of(k, "k"), vv = view_of(v, "v");
  const at::TensorOptions o = q.options();
  at::Tensor out = new_output(q.sizes(), o);
  at::Tensor lse = new_output({q.size(0), q.size(2), q.size(1)}, o.dtype(at::kFloat));
  at::Tensor keep_q, keep_k;
  const auto opts = options(q, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_left, window_right, softcap,
                            impl, &keep_q, &keep_k);
  call_flashkit(q, [&] {
    flashkit::attention_forward(qv, kv, vv, view_of(out, "out"), view_of(lse, "softmax_lse"), opts);
  });
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> bwd(
    const at::Tensor& dout_in, const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
    const at::Tensor& out_in, const at::Tensor& lse_in, const OptionalTensor& cu_seqlens_q,
    const OptionalTensor& cu_seqlens_k, double softmax_scale, bool causal, int64_t window_left,
    int64_t window_right, double softcap, int64_t impl) {
  const at::Tensor dout = last_contiguous(dout_in), q = last_contiguous(q_in), k = last_contiguous(k_in),
                   v = last_contiguous(v_in), out = last_contiguous(out_in), lse = lse_in.contiguous();
  const flashkit::TensorView dov = view_of(dout, "dout"), qv = view_of(q, "q"), kv = view_of(k, "k"),
                             vv = view_of(v, "v"), ov = view_of(out, "out"), lv = view_of(lse, "softmax_lse");
  at::Tensor dq = at::empty(q.sizes(), q.options());
  at::Tensor dk = at::empty(k.sizes(), k.options());
  at::Tensor dv = at::empty(v.sizes(), v.options());
  at::Tensor keep_q, keep_k;
  const auto opts = options(q, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_left, window_right, softcap,
                            impl, &keep_q, &keep_k);
  call_flashkit(q, [&] {
    flashkit::attention_backward(dov, qv, kv, vv, ov, lv, view_of(dq, "dq"), view_of(dk, "dk"), view_of(dv, "dv"),
                                 opts);
  });
  return {dq, dk, dv};
}

// Autograd in C++ (not a Python autograd.Function): a call that needs no gradient costs no Python, and
// torch.compile's AOTAutograd traces it like any ATen op with a derivative. Double backward is not supported.
class FwdWithGrad : public torch::autograd::Function<FwdWithGrad> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                                                const at::Tensor& k, const at::Tensor& v,
                                                const OptionalTensor& cu_seqlens_q,
                                                const OptionalTensor& cu_seqlens_k, double softmax_scale,
                                                bool causal, int64_t window_left, int64_t window_right,
                                                double softcap, int64_t impl) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("flashkit::fwd", "").typed<decltype(fwd)>();
    auto [out, lse] = op.call(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_left, window_right,
                              softcap, impl);
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["cu_seqlens_q"] = cu_seqlens_q;
    ctx->saved_data["cu_seqlens_k"] = cu_seqlens_k;
    ctx->saved_data["softmax_scale"] = softmax_scale;
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["window_left"] = window_left;
    ctx->saved_data["window_right"] = window_right;
    ctx->saved_data["softcap"] = softcap;
    ctx->saved_data["impl"] = impl;
    ctx->mark_non_differentiable({lse});
    return {out, lse};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("flashkit::bwd", "").typed<decltype(bwd)>();
    const auto saved = ctx->get_saved_variables();
    const auto& d = ctx->saved_data;
    at::Tensor dout = grads[0].defined() ? grads[0] : at::zeros_like(saved[3]);
    auto [dq, dk, dv] = op.call(dout, saved[0], saved[1], saved[2], saved[3], saved[4],
                                d.at("cu_seqlens_q").toOptional<at::Tensor>(),
                                d.at("cu_seqlens_k").toOptional<at::Tensor>(), d.at("softmax_scale").toDouble(),
                                d.at("causal").toBool(), d.at("window_left").toInt(), d.at("window_right").toInt(),
                                d.at("softcap").toDouble(), d.at("impl").toInt());
    return {dq, dk, dv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

// What torch::autograd::Function::apply would act on: a gradient to record, or a forward-mode gradient (which it
// refuses: the C++ Function API has no jvp).
bool needs_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const bool grad = at::GradMode::is_enabled();
  for (const at::Tensor* t : {&q, &k, &v})
    if ((grad && t->requires_grad()) || t->_fw_grad(/*level=*/0).defined()) return true;
  return false;
}

std::tuple<at::Tensor, at::Tensor> fwd_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                const OptionalTensor& cu_seqlens_q,
                                                const OptionalTensor& cu_seqlens_k, double softmax_scale,
                                                bool causal, int64_t window_left, int64_t window_right,
                                                double softcap, int64_t impl) {
  // No gradient asked for (torch.no_grad(), or no input requires one): straight to the device kernel, as ATen's own
  // ops do; the autograd node, its saved tensors and options would cost ~1 us per call for nothing (v20).
  if (!needs_autograd(q, k, v)) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("flashkit::fwd", "").typed<decltype(fwd)>();
    return op.call(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_left, window_right, softcap,
                   impl);
  }
  auto r = FwdWithGrad::apply(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_left, window_right,
                              softcap, impl);
  return {r[0], r[1]};
}

// flash_attn_func's fast path in eager mode (flash-attn's defaults): the same operator, called through the
// dispatcher's typed handle, so autograd, dispatch modes, the profiler and the CUDA stream are as for
// torch.ops.flashkit.fwd.default; what it skips is torch.ops' Python side (the schema walk that turns the eleven
// Python arguments into a boxed stack and the results back: ~1.2 us of a ~5 us call on the CPU machine, v20). It
// also makes the fast path's tensor tests (4-d, one supported dtype), cheaper here than as Python attribute reads,
// and returns None when they fail: Python then takes its checked path, whose errors name the argument. Python calls
// it only for plain tensors, outside torch.compile and torch function modes (python/flashkit/flash_attn.py). The GIL
// is released around the call as torch.ops does (a CPU call may run long).
pybind11::object fwd_eager(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal) {
  const at::ScalarType t = q.scalar_type();
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || k.scalar_type() != t || v.scalar_type() != t ||
      (t != at::kFloat && t != at::kBFloat16 && t != at::kHalf))
    return pybind11::none();
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("flashkit::fwd", "").typed<decltype(fwd)>();
  std::tuple<at::Tensor, at::Tensor> r;
  {
    pybind11::gil_scoped_release no_gil;
    // The Autograd kernel's own shortcut, taken before the dispatcher enters it: under torch.no_grad() (or when no
    // input requires a gradient) the call would go Autograd kernel -> needs_autograd -> a second dispatch below
    // autograd; here it is one dispatch (~3 us of host time on the H200 under no_grad, run s13-5).
    std::optional<at::AutoDispatchBelowADInplaceOrView> below_autograd;
    if (!needs_autograd(q, k, v)) below_autograd.emplace();
    r = op.call(q, k, v, OptionalTensor(), OptionalTensor(), 0.0, causal, -1, -1, 0.0, 0);
  }
  return pybind11::cast(std::move(r));
}

}  // namespace

// A Python module too (imported by python/flashkit/_torch_ops.py after torch.ops.load_library has registered the
// operators below): the eager entry point. c10 errors become the Python exceptions torch.ops raises for them
// (ValueError, TypeError, NotImplementedError, torch.cuda.OutOfMemoryError, RuntimeError) through torch's own
// translation.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  pybind11::register_local_exception_translator([](std::exception_ptr e) {
    if (e) torch::translate_exception_to_python(e);
  });
  m.def("fwd_eager", &fwd_eager,
        "flashkit::fwd(q, k, v, None, None, 0.0, causal, -1, -1, 0.0, 0) -> (out, lse); None unless q, k, v are 4-d "
        "and of one dtype among float32, bfloat16, float16",
        pybind11::arg("q"), pybind11::arg("k"), pybind11::arg("v"), pybind11::arg("causal"));
}

TORCH_LIBRARY(flashkit, m) {
  m.def("fwd(Tensor q, Tensor k, Tensor v, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, float softmax_scale, "
        "bool causal, int window_left, int window_right, float softcap, int impl) -> (Tensor, Tensor)");
  m.def("bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor softmax_lse, Tensor? cu_seqlens_q, "
        "Tensor? cu_seqlens_k, float softmax_scale, bool causal, int window_left, int window_right, float softcap, "
        "int impl) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(flashkit, CPU, m) {
  m.impl("fwd", &fwd);
  m.impl("bwd", &bwd);
}

TORCH_LIBRARY_IMPL(flashkit, Autograd, m) { m.impl("fwd", &fwd_autograd); }

#ifdef FLASHKIT_TORCH_CUDA
TORCH_LIBRARY_IMPL(flashkit, CUDA, m) {
  m.impl("fwd", &fwd);
  m.impl("bwd", &bwd);
}
#endif
