"""flashkit for PyTorch: the ctypes calls of the flashkit C API, and flash-attn's API as aliases.

    from flashkit.torch import flash_attn_func       # = flashkit.flash_attn.flash_attn_func (flash-attn 2's API)
    o = flash_attn_func(q, k, v, causal=True)        # q [batch, seqlen_q, heads, head_dim]
    o.sum().backward()                                 # dq, dk, dv through flashkit's backward

The flash_attn_* functions run through torch.ops.flashkit (flashkit._torch_ops: the compiled extension when it is
built, else these ctypes calls); attention_forward / attention_backward below call the C API through ctypes
directly (no autograd) and are what the ops fall back to.

Tensors may live on the CPU or on a CUDA device (bf16/f16 there); the last dimension must be contiguous
(other strides are passed through as they are; a non-contiguous last dim is copied). CUDA calls run on
``torch.cuda.current_stream()`` of the tensors' device (through ``fk_cuda_set_stream``), so they order
correctly with the surrounding PyTorch work without a synchronization. The semantics are flashkit's
(include/flashkit/attention.hpp): bottom-right aligned causal mask, windows, softcap, GQA/MQA (k/v with
fewer heads), rows with no visible key give 0.

FP8 (e4m3) forward (include/flashkit/attention_fp8.hpp; no autograd)::

    from flashkit.torch import quantize_e4m3, attention_forward_fp8
    q8, qd = quantize_e4m3(q)                         # per-tensor: q ~= q8 * qd
    k8, kd = quantize_e4m3(k); v8, vd = quantize_e4m3(v)
    o, lse = attention_forward_fp8(q8, k8, v8, qd, kd, vd, causal=True)   # o bf16, lse f32 [B, H, Sq]

e4m3 tensors are ``torch.float8_e4m3fn`` where torch has it (>= 2.1), else ``torch.uint8`` holding the same bytes;
both are accepted as inputs.
"""

import ctypes
import numbers
import threading

import torch

from . import _capi

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
           "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache",
           "attention_forward", "attention_backward", "FlashAttnFunc", "quantize_e4m3", "attention_forward_fp8",
           "E4M3_DTYPE"]

_DTYPES = {torch.float32: _capi.FK_F32, torch.bfloat16: _capi.FK_BF16, torch.float16: _capi.FK_F16}

# e4m3 storage: torch's own fp8 dtype where it has one (>= 2.1), else uint8 holding the same bytes.
E4M3_DTYPE = getattr(torch, "float8_e4m3fn", torch.uint8)
_E4M3_DTYPES = {torch.uint8: _capi.FK_E4M3, E4M3_DTYPE: _capi.FK_E4M3}
_QUANTIZE_DTYPES = {**_DTYPES, **_E4M3_DTYPES}  # src float, dst e4m3 (the library checks which is which)
_E4M3_NAMES = ("torch.uint8 holding e4m3 bytes" if E4M3_DTYPE == torch.uint8
               else "%s, or torch.uint8 holding e4m3 bytes" % E4M3_DTYPE)

_set_stream = _capi.lib.fk_cuda_set_stream
_set_stream.restype = ctypes.c_int32
_set_stream.argtypes = [ctypes.c_void_p]


def _impl_code(impl):
    if isinstance(impl, int):
        return impl
    try:
        return _capi.IMPL_CODES[impl]
    except KeyError:
        raise ValueError("impl must be one of %s, got %r" % (sorted(_capi.IMPL_CODES), impl)) from None


_I64x4 = ctypes.c_int64 * 4


def _make_view(t, dtypes=_DTYPES):
    # Positional construction: about 1 us cheaper per tensor than setting the fields one by one.
    dt = dtypes.get(t.dtype)
    if dt is None:
        raise TypeError("flashkit.torch: dtype %s is not supported (float32, bfloat16, float16)" % t.dtype)
    if t.dim() > 4:
        raise ValueError("flashkit.torch: tensors have at most 4 dimensions, got %d" % t.dim())
    if t.is_cuda:
        return _capi.FkTensor(t.data_ptr(), dt, _capi.FK_CUDA, t.device.index or 0, t.dim(), _I64x4(*t.shape),
                              _I64x4(*t.stride()))
    return _capi.FkTensor(t.data_ptr(), dt, _capi.FK_CPU, 0, t.dim(), _I64x4(*t.shape), _I64x4(*t.stride()))


_TLS = threading.local()


def _ref(t, slot, dtypes=_DTYPES):
    """ctypes reference to an fk_tensor describing t. Building the struct costs ~4.6 us, so the structs are kept per
    (operand slot, dtype, device, shape, strides) in thread-local storage and only the data pointer is set again
    (the C API reads them during the call only; the slot keeps one call's operands in distinct structs). Each slot
    is used with one dtype table only (slots 10.. are the fp8 calls'), so the key needs no table."""
    cache = getattr(_TLS, "views", None)
    if cache is None:
        cache = _TLS.views = {}
    key = (slot, t.dtype, t.device, t.shape, t.stride())
    hit = cache.get(key)
    if hit is None:
        view = _make_view(t, dtypes)
        if len(cache) >= 512:
            cache.clear()
        hit = cache[key] = (view, ctypes.byref(view))
    else:
        hit[0].data = t.data_ptr()
    return hit[1]


def _last_contiguous(t):
    return t if t.stride(-1) == 1 else t.contiguous()


class _OnStream:
    """Makes flashkit's CUDA calls of this thread run on the current torch stream of `device`."""

    def __init__(self, device):
        self.device = device
        self.guard = None

    def __enter__(self):
        if self.device.type == "cuda":
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            if index != torch.cuda.current_device():  # switch devices only when needed (a few us per call)
                self.guard = torch.cuda.device(index)
                self.guard.__enter__()
            _capi.check(_set_stream(ctypes.c_void_p(torch.cuda.current_stream(index).cuda_stream)))
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            _set_stream(None)
            if self.guard is not None:
                self.guard.__exit__(*exc)
        return False


_OPTIONS_CACHE = {}


def _options(causal, softmax_scale, window_size, softcap, cu_q, cu_k, impl, on_cuda):
    # Options without cu_seqlens built from plain scalars are made once per combination (the C API only reads
    # them), which saves ~5 us per call; varlen options carry the pointers and are built each time.
    key = None
    if cu_q is None and cu_k is None and all(x is None or type(x) in (bool, int, float, str)
                                             for x in (causal, softmax_scale, softcap, impl, *window_size)):
        # Plain Python scalars only: a tensor or numpy value could change in place behind a cached struct.
        key = (bool(causal), softmax_scale, tuple(window_size), softcap, impl, on_cuda)
        o = _OPTIONS_CACHE.get(key)
        if o is not None:
            return o
    num = 0
    if cu_q is not None:
        num = cu_q.numel() - 1
    o = _capi.make_options(
        scale=float(softmax_scale or 0.0), causal=bool(causal), window_left=int(window_size[0]),
        window_right=int(window_size[1]), softcap=float(softcap or 0.0),
        cu_seqlens_q=None if cu_q is None else cu_q.data_ptr(), cu_seqlens_k=None if cu_k is None else cu_k.data_ptr(),
        num_seqs=num, impl=_impl_code(impl), check_finite=not on_cuda)
    if key is not None:
        if len(_OPTIONS_CACHE) >= 256:
            _OPTIONS_CACHE.clear()
        _OPTIONS_CACHE[key] = o
    return o


def attention_forward(q, k, v, causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0,
                      cu_seqlens_q=None, cu_seqlens_k=None, impl="auto", cost=None):
    """Forward without autograd: returns (o, lse). q [B, Sq, H, D], k/v [B, Sk, Hkv, D], lse f32 [B, H, Sq]."""
    q, k, v = _last_contiguous(q), _last_contiguous(k), _last_contiguous(v)
    o = q.new_empty(q.shape)  # contiguous; new_empty costs half of torch.empty(..., dtype=, device=)
    lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
    opts = _options(causal, softmax_scale, window_size, softcap, cu_seqlens_q, cu_seqlens_k, impl, q.is_cuda)
    with _OnStream(q.device):
        _capi.check(_capi.lib.fk_attention_forward(_ref(q, 0), _ref(k, 1), _ref(v, 2), _ref(o, 3), _ref(lse, 4),
                                                   ctypes.byref(opts), None if cost is None else ctypes.byref(cost)))
    return o, lse


def attention_backward(dout, q, k, v, o, lse, causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0,
                       cu_seqlens_q=None, cu_seqlens_k=None, impl="auto", cost=None):
    """Backward without autograd: returns (dq, dk, dv)."""
    dout = _last_contiguous(dout)
    dq, dk, dv = q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)
    opts = _options(causal, softmax_scale, window_size, softcap, cu_seqlens_q, cu_seqlens_k, impl, q.is_cuda)
    with _OnStream(q.device):
        _capi.check(_capi.lib.fk_attention_backward(
            _ref(dout, 5), _ref(q, 0), _ref(k, 1), _ref(v, 2), _ref(o, 3), _ref(lse, 4), _ref(dq, 6), _ref(dk, 7),
            _ref(dv, 8), ctypes.byref(opts), None if cost is None else ctypes.byref(cost)))
    return dq, dk, dv


def quantize_e4m3(x):
    """Per-tensor e4m3 quantization: returns (x8, descale) with x ~= x8 * descale, descale = amax(|x|) / 448 (1 for
    all zeros), x8 = e4m3(x / descale) rounded to nearest even. x: float32/bfloat16/float16, CPU or CUDA, any
    shape; x8: a new contiguous tensor of x's shape and device, dtype E4M3_DTYPE (torch.float8_e4m3fn, or
    torch.uint8 on torch < 2.1). descale is a Python float (on CUDA the call waits for it). Non-finite x raises
    InvalidArgumentError on the CPU; on CUDA it gives a non-finite descale, which attention_forward_fp8 rejects."""
    if not isinstance(x, torch.Tensor):
        raise TypeError("quantize_e4m3: x: expected a torch.Tensor (float32, bfloat16 or float16), got %s"
                        % type(x).__name__)
    if x.dtype not in _DTYPES:
        raise TypeError("quantize_e4m3: x: dtype must be float32, bfloat16 or float16, got %s" % x.dtype)
    flat = x.reshape(-1)  # elementwise with one scale: any shape goes through as 1-d (fk_tensor has at most 4 dims)
    if not flat.is_contiguous():
        flat = flat.contiguous()
    x8 = torch.empty(x.shape, dtype=E4M3_DTYPE, device=x.device)
    descale = ctypes.c_float(0.0)
    with _OnStream(x.device):
        _capi.check(_capi.lib.fk_quantize_e4m3(_ref(flat, 10, _QUANTIZE_DTYPES), _ref(x8.view(-1), 11, _QUANTIZE_DTYPES),
                                               ctypes.byref(descale)))
    return x8, descale.value


def _e4m3_operand(t, name):
    if not isinstance(t, torch.Tensor):
        raise TypeError("attention_forward_fp8: %s: expected a torch.Tensor of e4m3 values, got %s"
                        % (name, type(t).__name__))
    if t.dtype not in _E4M3_DTYPES:
        hint = (" (quantize it first: %s8, %s_descale = flashkit.torch.quantize_e4m3(%s))" % (name, name, name)
                if t.is_floating_point() else "")
        raise TypeError("attention_forward_fp8: %s: dtype must be e4m3 (%s), got %s%s" % (name, _E4M3_NAMES, t.dtype, hint))
    return _last_contiguous(t)


def _descale(x, name):
    if isinstance(x, torch.Tensor) and x.numel() == 1:
        return float(x.item())
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError("attention_forward_fp8: %s: expected a finite number > 0 (the descale quantize_e4m3 "
                        "returned), got %s %r" % (name, type(x).__name__, x))
    return float(x)  # <= 0, NaN and values beyond float32 are rejected by the library, naming scales.<name>


def attention_forward_fp8(q, k, v, q_descale, k_descale, v_descale, causal=False, softmax_scale=None, impl="auto",
                          cost=None):
    """FP8 (e4m3) forward without autograd: returns (o, lse), o bfloat16 [B, Sq, H, D], lse float32 [B, H, Sq].

    q [B, Sq, H, D], k/v [B, Sk, Hkv, D]: e4m3 tensors (E4M3_DTYPE, or torch.uint8 holding e4m3 bytes, as
    quantize_e4m3 returns them), all on the CPU (any head_dim) or on one Hopper GPU (head_dim 128 or 256);
    the real inputs are q * q_descale, k * k_descale, v * v_descale. The probabilities are rounded to e4m3
    before the P V product (FlashAttention-3's FP8 forward; the semantics and accuracy are those of
    include/flashkit/attention_fp8.hpp). impl: "auto"/"flash" (the device's fast path) or "reference" (f64, CPU
    only). Sliding windows, softcap and varlen batches are not supported by the fp8 forward."""
    q, k, v = _e4m3_operand(q, "q"), _e4m3_operand(k, "k"), _e4m3_operand(v, "v")
    scales = _capi.FkFp8Scales(_descale(q_descale, "q_descale"), _descale(k_descale, "k_descale"),
                               _descale(v_descale, "v_descale"))
    o = torch.empty(q.shape, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]) if q.dim() == 4 else (0,), dtype=torch.float32,
                      device=q.device)
    opts = _options(causal, softmax_scale, (-1, -1), 0.0, None, None, impl, q.is_cuda)
    with _OnStream(q.device):
        _capi.check(_capi.lib.fk_attention_forward_fp8(
            _ref(q, 12, _E4M3_DTYPES), _ref(k, 13, _E4M3_DTYPES), _ref(v, 14, _E4M3_DTYPES), _ref(o, 15), _ref(lse, 16),
            ctypes.byref(scales), ctypes.byref(opts), None if cost is None else ctypes.byref(cost)))
    return o, lse


class FlashAttnFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, softmax_scale, window_size, softcap, cu_q, cu_k, impl):
        q, k, v = _last_contiguous(q), _last_contiguous(k), _last_contiguous(v)
        o, lse = attention_forward(q, k, v, causal, softmax_scale, window_size, softcap, cu_q, cu_k, impl)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.args = (causal, softmax_scale, window_size, softcap, cu_q, cu_k, impl)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        causal, scale, window, softcap, cu_q, cu_k, impl = ctx.args
        dq, dk, dv = attention_backward(do, q, k, v, o, lse, causal, scale, window, softcap, cu_q, cu_k, impl)
        return dq, dk, dv, None, None, None, None, None, None, None


# flash-attn's API (argument names, positions and defaults) lives in flashkit.flash_attn; these names are aliases,
# so flash_attn_func(q, k, v, 0.0, None, True) means dropout_p=0.0, softmax_scale=None, causal=True here too.
from .flash_attn import (flash_attn_func, flash_attn_varlen_func, flash_attn_qkvpacked_func,  # noqa: E402,F401
                         flash_attn_kvpacked_func, flash_attn_varlen_qkvpacked_func, flash_attn_varlen_kvpacked_func,
                         flash_attn_with_kvcache)
