"""flash-attn 2's Python API on flashkit's kernels, call for call:

    from flashkit.flash_attn import flash_attn_func        # instead of: from flash_attn import flash_attn_func
    out = flash_attn_func(q, k, v, 0.0, None, True)         # dropout_p, softmax_scale, causal: flash-attn's order

Every function takes flash-attn 2's arguments in its order with its defaults; tensors are
(batch, seqlen, nheads, headdim) (varlen: (total, nheads, headdim) with int32 cu_seqlens), k/v may have fewer heads
(GQA/MQA: nheads a multiple of nheads_k), causal masks and windows are aligned bottom-right, softcap > 0 caps the
scores. What flashkit does not do is refused with an exception that names the argument, never ignored:
  dropout_p      only 0.0 (flashkit has no attention dropout)                          ValueError
  alibi_slopes   only None (no ALiBi bias)                                             ValueError
  deterministic  True is accepted on CPU tensors; on CUDA tensors that need gradients it is refused (the CUDA
                 backward accumulates dq with atomics, so its summation order varies)  ValueError
  block_table    flash_attn_with_kvcache takes flash-attn's paged cache (pages gathered per call); the varlen
                 functions only None                                                   NotImplementedError
  cache_leftpad  only None (no left-padded KV cache)                                   NotImplementedError
return_attn_probs=True returns (out, softmax_lse, None): flashkit never forms the probabilities (flash-attn's third
value is for testing only, and only meaningful with dropout). max_seqlen_q/k are checked for type only: the kernels
do not need them. Backends (compiled extension, torch.library custom op, ctypes) are in flashkit._torch_ops; every
function here also takes a keyword-only ``impl`` ("auto", "flash", "standard", "reference").
"""

import torch

from . import _capi
from . import _torch_ops

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
           "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache"]


# The checks below use only plain isinstance tests and dict lookups, which torch.compile's tracer evaluates at trace
# time: they cost nothing in a compiled graph.
_INT = int
_REAL = (int, float)


def _impl_code(impl):
    code = _capi.IMPL_CODES.get(impl) if isinstance(impl, str) else None
    if code is None:
        raise ValueError("impl: expected one of %s, got %r" % (sorted(_capi.IMPL_CODES), impl))
    return code


def _scale(softmax_scale):
    if softmax_scale is None:
        return 0.0  # flashkit's 0 means 1/sqrt(headdim)
    if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, _REAL):
        raise TypeError("softmax_scale: expected a float or None, got %r" % (softmax_scale,))
    if not softmax_scale > 0:
        raise ValueError("softmax_scale: expected a positive number or None (1/sqrt(headdim)), got %r"
                         % (softmax_scale,))
    return float(softmax_scale)


def _window(window_size):
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise ValueError("window_size: expected (left, right), -1 for unbounded, got %r" % (window_size,))
    left, right = window_size
    for name, x in (("left", left), ("right", right)):
        if isinstance(x, bool) or not isinstance(x, _INT) or x < -1:
            raise ValueError("window_size: %s must be an int >= -1, got %r" % (name, x))
    return int(left), int(right)


def _check_options(dropout_p, causal, softcap, alibi_slopes, deterministic, tensors):
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, _REAL) or dropout_p != 0:
        raise ValueError("dropout_p: flashkit has no attention dropout; expected 0.0, got %r" % (dropout_p,))
    if not isinstance(causal, bool):
        raise TypeError("causal: expected a bool, got %r" % (causal,))
    if isinstance(softcap, bool) or not isinstance(softcap, _REAL) or softcap < 0:
        raise ValueError("softcap: expected a float >= 0 (0 disables it), got %r" % (softcap,))
    if alibi_slopes is not None:
        raise ValueError("alibi_slopes: flashkit has no ALiBi bias; expected None")
    if deterministic and torch.is_grad_enabled() and any(t.is_cuda and t.requires_grad for t in tensors):
        raise ValueError("deterministic=True: flashkit's CUDA backward accumulates dq with atomics (its order varies "
                         "between runs); pass deterministic=False")
    return float(softcap)


def _check_max_seqlen(name, x):
    if x is None:
        return
    # torch.compile may pass a SymInt (not an int)
    if isinstance(x, bool) or not (isinstance(x, _INT) or type(x).__name__ == "SymInt"):
        raise TypeError("%s: expected an int (the longest sequence), got %r" % (name, x))


def _cu(name, cu, like):
    if not isinstance(cu, torch.Tensor) or cu.dim() != 1 or cu.dtype not in (torch.int32, torch.int64):
        raise ValueError("%s: expected a 1-d int32 tensor of batch_size+1 offsets, got %r"
                         % (name, getattr(cu, "shape", cu)))
    if cu.device != like.device:
        raise ValueError("%s: expected a tensor on %s (the tensors' device), got %s" % (name, like.device, cu.device))
    return cu if cu.dtype == torch.int32 and cu.is_contiguous() else cu.to(torch.int32).contiguous()


def _dims(name, t, n, layout):
    if not isinstance(t, torch.Tensor):
        raise TypeError("%s: expected a torch.Tensor, got %s" % (name, type(t).__name__))
    if t.dim() != n:
        raise ValueError("%s: expected %s, got shape %s" % (name, layout, tuple(t.shape)))


_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _check_dtypes(q, k, v):
    if q.dtype not in _DTYPES:
        raise TypeError("q: dtype must be float32, bfloat16 or float16, got %s" % q.dtype)
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError("%s: expected q's dtype %s, got %s" % (name, q.dtype, t.dtype))


def _run(q, k, v, cu_q, cu_k, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
         impl):
    _check_dtypes(q, k, v)
    softcap = _check_options(dropout_p, causal, softcap, alibi_slopes, deterministic, (q, k, v))
    left, right = _window(window_size)
    return _torch_ops.attention(q, k, v, cu_q, cu_k, _scale(softmax_scale), causal, left, right, softcap,
                                _impl_code(impl))


def _result(out, lse, return_attn_probs):
    return (out, lse, None) if return_attn_probs else out


# flash_attn_func's eager fast path (flash-attn's defaults), bound once: the extension's entry point that reaches the
# operator without torch.ops' Python argument parsing (_torch_ops.fwd_eager; None on the other backends), else the
# operator. A torch function mode (e.g. `with torch.device(...)`) must see the call, so it takes the operator too.
_NO_WINDOW = (-1, -1)
_FWD_EAGER = _torch_ops.fwd_eager
_ATTENTION = _torch_ops.attention
_TENSOR = torch.Tensor
_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)
_function_mode = getattr(torch._C, "_is_torch_function_mode_enabled", None) or (lambda: False)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, impl="auto"):
    """q (batch, seqlen_q, nheads, headdim), k/v (batch, seqlen_k, nheads_k, headdim) -> out like q
    (with return_attn_probs: (out, softmax_lse (batch, nheads, seqlen_q) float32, None))."""
    # Eager calls with flash-attn's defaults (the cheapest tests first): every check below would pass, and the
    # operator checks shapes itself. Host time per call is what a decode step pays (issue 20: <= 10 us). Under
    # torch.compile (is_compiling() is True while it traces) the checked path below runs: it traces to the same one
    # operator call, and no eager entry is ever traced.
    if (not _is_compiling() and softmax_scale is None and alibi_slopes is None and not deterministic
            and impl == "auto" and type(dropout_p) is float and dropout_p == 0.0 and type(softcap) is float
            and softcap == 0.0 and type(causal) is bool and window_size == _NO_WINDOW
            and type(q) is _TENSOR and type(k) is _TENSOR and type(v) is _TENSOR):
        if _FWD_EAGER is not None and not _function_mode():
            r = _FWD_EAGER(q, k, v, causal)  # it tests the dims and dtypes below itself; None: they fail
            if r is not None:
                return (r[0], r[1], None) if return_attn_probs else r[0]
        elif (q.dim() == 4 and k.dim() == 4 and v.dim() == 4
              and q.dtype in _DTYPES and k.dtype == q.dtype and v.dtype == q.dtype):
            out, lse = _ATTENTION(q, k, v, None, None, 0.0, causal, -1, -1, 0.0, 0)
            return (out, lse, None) if return_attn_probs else out
    for name, t in (("q", q), ("k", k), ("v", v)):
        _dims(name, t, 4, "(batch, seqlen, nheads, headdim)")
    out, lse = _run(q, k, v, None, None, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                    deterministic, impl)
    return _result(out, lse, return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                              impl="auto"):
    """qkv (batch, seqlen, 3, nheads, headdim) -> out (batch, seqlen, nheads, headdim)."""
    _dims("qkv", qkv, 5, "(batch, seqlen, 3, nheads, headdim)")
    if qkv.shape[2] != 3:
        raise ValueError("qkv: expected (batch, seqlen, 3, nheads, headdim), got shape %s" % (tuple(qkv.shape),))
    q, k, v = qkv.unbind(2)
    out, lse = _run(q, k, v, None, None, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                    deterministic, impl)
    return _result(out, lse, return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                             impl="auto"):
    """q (batch, seqlen_q, nheads, headdim), kv (batch, seqlen_k, 2, nheads_k, headdim) -> out like q."""
    _dims("q", q, 4, "(batch, seqlen_q, nheads, headdim)")
    _dims("kv", kv, 5, "(batch, seqlen_k, 2, nheads_k, headdim)")
    if kv.shape[2] != 2:
        raise ValueError("kv: expected (batch, seqlen_k, 2, nheads_k, headdim), got shape %s" % (tuple(kv.shape),))
    k, v = kv.unbind(2)
    out, lse = _run(q, k, v, None, None, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                    deterministic, impl)
    return _result(out, lse, return_attn_probs)


def _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
            window_size, softcap, alibi_slopes, deterministic, return_attn_probs, impl):
    _check_max_seqlen("max_seqlen_q", max_seqlen_q)
    _check_max_seqlen("max_seqlen_k", max_seqlen_k)
    cu_q = _cu("cu_seqlens_q", cu_seqlens_q, q)
    cu_k = _cu("cu_seqlens_k", cu_seqlens_k, q)
    out, lse = _run(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), cu_q, cu_k, dropout_p, softmax_scale, causal,
                    window_size, softcap, alibi_slopes, deterministic, impl)
    return _result(out.squeeze(0), lse.squeeze(0), return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None, *, impl="auto"):
    """q (total_q, nheads, headdim), k/v (total_k, nheads_k, headdim), cu_seqlens_q/k int32 (batch+1,) on the
    tensors' device -> out like q (with return_attn_probs: (out, softmax_lse (nheads, total_q), None))."""
    if block_table is not None:
        raise NotImplementedError("block_table: paged caches go through flash_attn_with_kvcache; expected None here")
    for name, t in (("q", q), ("k", k), ("v", v)):
        _dims(name, t, 3, "(total_tokens, nheads, headdim)")
    return _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
                   window_size, softcap, alibi_slopes, deterministic, return_attn_probs, impl)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen=None, dropout_p=0.0, softmax_scale=None,
                                     causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                                     deterministic=False, return_attn_probs=False, *, impl="auto"):
    """qkv (total, 3, nheads, headdim) -> out (total, nheads, headdim)."""
    _dims("qkv", qkv, 4, "(total, 3, nheads, headdim)")
    if qkv.shape[1] != 3:
        raise ValueError("qkv: expected (total, 3, nheads, headdim), got shape %s" % (tuple(qkv.shape),))
    q, k, v = qkv.unbind(1)
    return _varlen(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p, softmax_scale, causal,
                   window_size, softcap, alibi_slopes, deterministic, return_attn_probs, impl)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                                    dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                                    impl="auto"):
    """q (total_q, nheads, headdim), kv (total_k, 2, nheads_k, headdim) -> out like q."""
    _dims("q", q, 3, "(total_q, nheads, headdim)")
    _dims("kv", kv, 4, "(total_k, 2, nheads_k, headdim)")
    if kv.shape[1] != 2:
        raise ValueError("kv: expected (total_k, 2, nheads_k, headdim), got shape %s" % (tuple(kv.shape),))
    k, v = kv.unbind(1)
    return _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
                   window_size, softcap, alibi_slopes, deterministic, return_attn_probs, impl)


from ._kvcache import flash_attn_with_kvcache  # noqa: E402  (it uses _run above)
