"""The attention operators PyTorch sees: torch.ops.flashkit.fwd / bwd, from the compiled extension when it is built,
else from the ctypes path.

Three ways, picked once at import (``BACKEND`` says which):
  "extension"  python/flashkit/csrc/flashkit_torch.cpp built by csrc/build.py for this torch: the C++ API called
               directly, autograd in C++, the current CUDA stream taken from ATen. Fake kernels are registered
               here (torch >= 2.4: register_fake, 2.1-2.3: impl_abstract) so torch.compile(fullgraph=True) traces it.
  "custom_op"  no extension, torch >= 2.4: the same two operators defined with torch.library.custom_op over the
               ctypes calls of flashkit.torch, with the same fake kernels and register_autograd: still one graph node.
  "ctypes"     no extension, older torch (Debian's 1.13): an autograd.Function over the ctypes calls.
FLASHKIT_TORCH_EXT=/path/flashkit_torch.so loads that file (an ImportError if it is missing); FLASHKIT_TORCH_EXT=0
skips the extension.

The operator's arguments are flashkit's (include/flashkit/attention.hpp): softmax_scale 0.0 means 1/sqrt(head_dim),
impl is the fk_impl code. ``attention`` is the entry point flashkit.flash_attn and flashkit.torch call.
``fwd_eager(q, k, v, causal)`` (extension only, else None): flashkit::fwd with flash-attn's defaults through the
dispatcher without torch.ops' Python argument parsing, None unless q/k/v are 4-d of one supported dtype: the eager
fast path of flash_attn_func (issue 20: host time per call).
"""

import os
import warnings

import torch

from . import _capi  # loads libflashkit first: the extension links that same file
from ._torch_ext_path import extension_dir

def _load_extension():
    explicit = os.environ.get("FLASHKIT_TORCH_EXT")
    if explicit == "0":
        return None
    if explicit:
        if not os.path.isfile(explicit):
            raise ImportError("FLASHKIT_TORCH_EXT=%s: no such file (build it with python/flashkit/csrc/build.py, or "
                              "set FLASHKIT_TORCH_EXT=0 to use the ctypes path)" % explicit)
        candidates = [explicit]
    else:
        flavours = (True, False) if torch.version.cuda else (False,)
        candidates = [os.path.join(extension_dir(c), "flashkit_torch.so") for c in flavours]
    for path in candidates:
        if os.path.isfile(path):
            try:
                torch.ops.load_library(path)
            except OSError as e:
                if explicit:
                    raise ImportError("FLASHKIT_TORCH_EXT=%s: cannot load it: %s" % (explicit, e)) from None
                warnings.warn("flashkit: %s does not load (%s); using the ctypes path" % (path, e))
                return None
            return path
    return None


def _load_eager_entry(path):
    """The extension's Python module side (PYBIND11_MODULE in flashkit_torch.cpp): ``fwd_eager(q, k, v, causal)``,
    flashkit::fwd with flash-attn's defaults through the dispatcher, without torch.ops' argument parsing. None when
    the file has no such module (an extension built before it): flash_attn_func then calls the operator."""
    import importlib.machinery
    import importlib.util
    try:
        loader = importlib.machinery.ExtensionFileLoader("flashkit_torch", path)
        module = importlib.util.module_from_spec(importlib.util.spec_from_loader("flashkit_torch", loader))
        loader.exec_module(module)
    except ImportError:
        return None
    return getattr(module, "fwd_eager", None)


EXTENSION_PATH = _load_extension()
_HAS_CUSTOM_OP = hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_fake")


def _fake_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_left, window_right, softcap, impl):
    return q.new_empty(q.shape), q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)


def _fake_bwd(dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_left,
              window_right, softcap, impl):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _register_fakes():
    if hasattr(torch.library, "register_fake"):
        torch.library.register_fake("flashkit::fwd")(_fake_fwd)
        torch.library.register_fake("flashkit::bwd")(_fake_bwd)
    elif hasattr(torch.library, "impl_abstract"):
        torch.library.impl_abstract("flashkit::fwd")(_fake_fwd)
        torch.library.impl_abstract("flashkit::bwd")(_fake_bwd)
    # torch < 2.1 has no torch.compile to trace for.


def _ctypes_fwd(q, k, v, cu_q, cu_k, scale, causal, wl, wr, softcap, impl):
    from . import torch as fkt
    return fkt.attention_forward(q, k, v, causal, scale or None, (wl, wr), softcap, cu_q, cu_k, impl)


def _ctypes_bwd(dout, q, k, v, o, lse, cu_q, cu_k, scale, causal, wl, wr, softcap, impl):
    from . import torch as fkt
    return fkt.attention_backward(dout, q, k, v, o, lse, causal, scale or None, (wl, wr), softcap, cu_q, cu_k, impl)


if EXTENSION_PATH is not None:
    BACKEND = "extension"
    _register_fakes()
    # The overloads themselves, not the packets: a call skips the packet's overload resolution (host time per call).
    fwd = torch.ops.flashkit.fwd.default
    bwd = torch.ops.flashkit.bwd.default
    fwd_eager = _load_eager_entry(EXTENSION_PATH)
elif _HAS_CUSTOM_OP:
    BACKEND = "custom_op"
    fwd_eager = None
    from typing import Optional, Tuple

    @torch.library.custom_op("flashkit::fwd", mutates_args=())
    def fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: Optional[torch.Tensor],
            cu_seqlens_k: Optional[torch.Tensor], softmax_scale: float, causal: bool, window_left: int,
            window_right: int, softcap: float, impl: int) -> Tuple[torch.Tensor, torch.Tensor]:
        return _ctypes_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_left, window_right,
                           softcap, impl)

    @torch.library.custom_op("flashkit::bwd", mutates_args=())
    def bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
            softmax_lse: torch.Tensor, cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
            softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float,
            impl: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return _ctypes_bwd(dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal,
                           window_left, window_right, softcap, impl)

    _register_fakes()

    def _setup_context(ctx, inputs, output):
        q, k, v, cu_q, cu_k = inputs[:5]
        ctx.save_for_backward(q, k, v, output[0], output[1])
        ctx.cu = (cu_q, cu_k)
        ctx.args = inputs[5:]

    def _backward(ctx, dout, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = bwd(dout, q, k, v, o, lse, *ctx.cu, *ctx.args)
        return (dq, dk, dv) + (None,) * 8

    torch.library.register_autograd("flashkit::fwd", _backward, setup_context=_setup_context)
else:
    BACKEND = "ctypes"
    fwd_eager = None
    fwd = _ctypes_fwd
    bwd = _ctypes_bwd


class _CtypesAttention(torch.autograd.Function):
    """Autograd on torch without torch.library.custom_op and without the extension."""

    @staticmethod
    def forward(ctx, q, k, v, cu_q, cu_k, scale, causal, wl, wr, softcap, impl):
        o, lse = _ctypes_fwd(q, k, v, cu_q, cu_k, scale, causal, wl, wr, softcap, impl)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.args = (cu_q, cu_k, scale, causal, wl, wr, softcap, impl)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = _ctypes_bwd(dout, q, k, v, o, lse, *ctx.args)
        return (dq, dk, dv) + (None,) * 8


def _attention_ctypes(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_left, window_right, softcap,
                      impl):
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _CtypesAttention.apply(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_left,
                                      window_right, softcap, impl)
    return fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_left, window_right, softcap, impl)


# attention(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_left, window_right, softcap, impl)
#   -> (out, softmax_lse), with autograd through flashkit's backward, on whichever backend loaded. The operator
#   backends carry autograd themselves, so their attention is the operator (no Python frame in between).
attention = _attention_ctypes if BACKEND == "ctypes" else fwd
