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
"""

import ctypes
import threading

import torch

from . import _capi

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
           "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache",
           "attention_forward", "attention_backward", "FlashAttnFunc"]

_DTYPES = {torch.float32: _capi.FK_F32, torch.bfloat16: _capi.FK_BF16, torch.float16: _capi.FK_F16}

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


def _make_view(t):
    # Positional construction: about 1 us cheaper per tensor than setting the fields one by one.
    dt = _DTYPES.get(t.dtype)
    if dt is None:
        raise TypeError("flashkit.torch: dtype %s is not supported (float32, bfloat16, float16)" % t.dtype)
    if t.dim() > 4:
        raise ValueError("flashkit.torch: tensors have at most 4 dimensions, got %d" % t.dim())
    if t.is_cuda:
        return _capi.FkTensor(t.data_ptr(), dt, _capi.FK_CUDA, t.device.index or 0, t.dim(), _I64x4(*t.shape),
                              _I64x4(*t.stride()))
    return _capi.FkTensor(t.data_ptr(), dt, _capi.FK_CPU, 0, t.dim(), _I64x4(*t.shape), _I64x4(*t.stride()))


_TLS = threading.local()


def _ref(t, slot):
    """ctypes reference to an fk_tensor describing t. Building the struct costs ~4.6 us, so the structs are kept per
    (operand slot, dtype, device, shape, strides) in thread-local storage and only the data pointer is set again
    (the C API reads them during the call only; the slot keeps one call's operands in distinct structs)."""
    cache = getattr(_TLS, "views", None)
    if cache is None:
        cache = _TLS.views = {}
    key = (slot, t.dtype, t.device, t.shape, t.stride())
    hit = cache.get(key)
    if hit is None:
        view = _make_view(t)
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
