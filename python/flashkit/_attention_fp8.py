"""numpy front end of fk_quantize_e4m3 / fk_attention_forward_fp8 (include/flashkit/attention_fp8.hpp).

numpy has no fp8 dtype: e4m3 values travel as their bytes in ``numpy.uint8`` arrays (as bfloat16 travels as uint16
bit patterns in a BF16Array). Python-level checks raise TypeError naming the argument; shapes, descales and options
are checked by the library (flashkit.errors exceptions with its message), as in flashkit._attention.
"""

import ctypes
import numbers

import numpy as np

from . import _capi
from ._attention import _LAYOUT, _cost, _element_strides, _flag, _needs_copy, _options, _tensor, _torch_hint, _type_name
from ._bf16 import BF16Array

__all__ = ["attention_fp8", "quantize_e4m3"]

_SRC_CODES = {np.dtype(np.float32): _capi.FK_F32, np.dtype(np.float16): _capi.FK_F16}


def quantize_e4m3(x):
    """Per-tensor e4m3 quantization: returns ``(x8, descale)`` with x ~= e4m3(x8) * descale.

    x: a numpy float32 or float16 array or a :class:`flashkit.BF16Array`, any shape. x8: a new contiguous
    ``numpy.uint8`` array of x's shape holding the e4m3 (OCP E4M3FN) bytes of ``x / descale`` rounded to nearest
    even; descale = max(|x|) / 448 (1 when x is all zeros), a Python float. Non-finite x raises
    InvalidArgumentError.
    """
    if isinstance(x, BF16Array):
        arr, code = x.bits, _capi.FK_BF16
    elif isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.dtype.newbyteorder("=") in _SRC_CODES:
        arr, code = x.astype(x.dtype.newbyteorder("="), copy=False), _SRC_CODES[x.dtype.newbyteorder("=")]
    elif isinstance(x, np.ndarray):
        raise TypeError("x: unsupported dtype %s; expected float32, float16 or a flashkit.BF16Array (convert float64 "
                        "with x.astype(numpy.float32))" % x.dtype)
    else:
        raise TypeError("x: expected a numpy.ndarray or flashkit.BF16Array, got %s%s" % (_type_name(x), _torch_hint(x)))
    flat = np.ascontiguousarray(arr).reshape(-1)  # elementwise with one scale: any shape goes through as 1-d
    x8 = np.empty(arr.shape, dtype=np.uint8)
    src = _capi.make_tensor(flat.ctypes.data, code, flat.shape, (1,))
    dst = _capi.make_tensor(x8.ctypes.data, _capi.FK_E4M3, (x8.size,), (1,))
    descale = ctypes.c_float(0.0)
    _capi.check(_capi.lib.fk_quantize_e4m3(ctypes.byref(src), ctypes.byref(dst), ctypes.byref(descale)))
    return x8, descale.value


def _e4m3_operand(x, name):
    layout = _LAYOUT[name]
    if isinstance(x, np.ndarray) and x.dtype == np.uint8:
        if x.ndim != 4:
            raise ValueError("%s: expected a 4-d array %s, got shape %s" % (name, layout, tuple(x.shape)))
        return np.ascontiguousarray(x) if _needs_copy(x) else x
    if isinstance(x, BF16Array) or (isinstance(x, np.ndarray) and x.dtype.kind == "f"):
        dt = "bfloat16" if isinstance(x, BF16Array) else x.dtype
        raise TypeError("%s: expected e4m3 bytes (a numpy.uint8 array %s), got %s; quantize it first: "
                        "%s8, %s_descale = flashkit.quantize_e4m3(%s)" % (name, layout, dt, name, name, name))
    if isinstance(x, np.ndarray):
        raise TypeError("%s: expected e4m3 bytes (a numpy.uint8 array %s), got dtype %s" % (name, layout, x.dtype))
    raise TypeError("%s: expected a numpy.uint8 array of e4m3 bytes %s, got %s%s"
                    % (name, layout, _type_name(x), _torch_hint(x)))


def _descale(x, name):
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
        raise TypeError("%s: expected a finite number > 0 (the descale quantize_e4m3 returned), got %s %r"
                        % (name, _type_name(x), x))
    return float(x)  # <= 0, NaN and values beyond float32: InvalidArgumentError from the library, naming it


def attention_fp8(q, k, v, q_descale, k_descale, v_descale, *, causal=False, scale=None, impl="auto",
                  check_finite=True, return_cost=False):
    """FP8 (e4m3) attention forward: attention of q * q_descale, k * k_descale, v * v_descale with the
    probabilities rounded to e4m3 before the P V product (FlashAttention-3's FP8 forward; the semantics and
    accuracy are include/flashkit/attention_fp8.hpp's).

    q [batch, seqlen_q, heads, head_dim], k/v [batch, seqlen_k, kv_heads, head_dim]: numpy.uint8 arrays of e4m3
    bytes, as :func:`quantize_e4m3` returns them (any strides with the last dimension contiguous, else copied).
    causal, scale, impl ("auto", "flash", "reference") and check_finite (reject NaN bytes) mean what they mean in
    :func:`flashkit.attention`; windows, softcap and varlen batches are not supported by the fp8 forward.

    Returns ``(o, lse)`` (plus a :class:`flashkit.Cost` with return_cost): o a :class:`flashkit.BF16Array`
    [batch, seqlen_q, heads, head_dim], lse float32 [batch, heads, seqlen_q].
    """
    opts, _keep, _ = _options(causal, (-1, -1), 0.0, scale, impl, None, None, check_finite)
    return_cost = _flag(return_cost, "return_cost")
    qa, ka, va = _e4m3_operand(q, "q"), _e4m3_operand(k, "k"), _e4m3_operand(v, "v")
    scales = _capi.FkFp8Scales(_descale(q_descale, "q_descale"), _descale(k_descale, "k_descale"),
                               _descale(v_descale, "v_descale"))
    o = np.empty(qa.shape, dtype=np.uint16)
    lse = np.empty((qa.shape[0], qa.shape[2], qa.shape[1]), dtype=np.float32)
    qt, kt, vt = (_tensor(a, _capi.FK_E4M3) for a in (qa, ka, va))
    ot = _tensor(o, _capi.FK_BF16)
    lt = _capi.make_tensor(lse.ctypes.data, _capi.FK_F32, lse.shape, _element_strides(lse))
    cost = _capi.FkCost()
    _capi.check(_capi.lib.fk_attention_forward_fp8(ctypes.byref(qt), ctypes.byref(kt), ctypes.byref(vt),
                                                   ctypes.byref(ot), ctypes.byref(lt), ctypes.byref(scales),
                                                   ctypes.byref(opts), ctypes.byref(cost)))
    out = (BF16Array(o), lse)
    return out + (_cost(cost),) if return_cost else out
