"""numpy front end of fk_attention_forward / fk_attention_backward.

Python-level checks (types, option values) run before any C call and raise TypeError/ValueError naming
the argument; everything about shapes, strides and dtype agreement is validated by the library, whose
errors surface as flashkit.errors exceptions with its message.
"""

import ctypes
import math
import numbers
from dataclasses import dataclass

import numpy as np

from . import _capi
from ._bf16 import BF16Array

__all__ = ["Cost", "attention", "attention_backward"]

_INT64_LIMIT = 1 << 62


@dataclass(frozen=True)
class Cost:
    """What one attention call did, as the library's cost model counts it.

    flops: multiply-add work of the matrix products actually executed (2 per MAC).
    bytes_read / bytes_written: main-memory traffic under the model described by ``model``.
    workspace_bytes: peak extra memory the call allocated.
    model: one line saying how bytes were counted. kernel: the kernel variant that ran.
    """

    flops: float
    bytes_read: float
    bytes_written: float
    workspace_bytes: float
    model: str
    kernel: str

    @property
    def total_bytes(self):
        return self.bytes_read + self.bytes_written


def _type_name(x):
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else "%s.%s" % (t.__module__, t.__qualname__)


def _torch_hint(x):
    return "; convert a torch tensor with tensor.numpy() (or use flashkit.torch)" if type(x).__module__.startswith("torch") else ""


# ---------------------------------------------------------------------------------------------------
# option parsing


def _flag(x, name):
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (numbers.Integral)) and int(x) in (0, 1):
        return bool(x)
    raise TypeError("%s: expected a bool, got %s %r" % (name, _type_name(x), x))


def _real(x, name, what):
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
        raise TypeError("%s: expected %s, got %s %r" % (name, what, _type_name(x), x))
    v = float(x)
    if not math.isfinite(v):
        raise ValueError("%s: expected %s, got %r" % (name, what, v))
    return v


def _as_f32(v):
    """v rounded to float32 (inf when out of range), without numpy's overflow warning."""
    with np.errstate(over="ignore", under="ignore"):
        return float(np.float32(v))


def _parse_scale(scale):
    if scale is None:
        return 0.0
    what = "a positive finite number, or None for 1/sqrt(head_dim)"
    v = _real(scale, "scale", what)
    if v <= 0 or not math.isfinite(_as_f32(v)) or _as_f32(v) == 0:
        raise ValueError("scale: expected %s (representable as float32), got %r" % (what, scale))
    return v


def _parse_softcap(softcap):
    what = "a finite number >= 0 (0 disables the cap)"
    if softcap is None:
        return 0.0
    v = _real(softcap, "softcap", what)
    if v < 0 or not math.isfinite(_as_f32(v)):
        raise ValueError("softcap: expected %s, got %r" % (what, softcap))
    return v


def _parse_window(window):
    what = "a pair of ints (left, right), -1 meaning unbounded"
    if window is None:
        return -1, -1
    if not isinstance(window, (tuple, list)) or len(window) != 2:
        raise TypeError("window: expected %s, got %s %r" % (what, _type_name(window), window))
    out = []
    for side, w in zip(("left", "right"), window):
        if isinstance(w, (bool, np.bool_)) or not isinstance(w, numbers.Integral):
            raise TypeError("window: expected %s, but %s is %s %r" % (what, side, _type_name(w), w))
        w = int(w)
        if w < -1 or w >= _INT64_LIMIT:
            raise ValueError("window: %s must be >= 0, or -1 for unbounded; got %d" % (side, w))
        out.append(w)
    return out[0], out[1]


def _parse_impl(impl):
    if not isinstance(impl, str):
        raise TypeError("impl: expected one of 'auto', 'reference', 'standard', 'flash', got %s %r" % (_type_name(impl), impl))
    code = _capi.IMPL_CODES.get(impl)
    if code is None:
        raise ValueError("impl: expected one of 'auto', 'reference', 'standard', 'flash', got %r" % (impl,))
    return code


def _parse_cu(cu, name):
    if isinstance(cu, np.ndarray):
        arr = cu
    elif isinstance(cu, (list, tuple)):
        arr = np.asarray(cu)
        if arr.size == 0:
            arr = arr.astype(np.int32)
    else:
        raise TypeError("%s: expected an int32 numpy array (or a list of ints) of num_seqs+1 offsets, got %s%s"
                        % (name, _type_name(cu), _torch_hint(cu)))
    if arr.dtype.kind not in "iu" or arr.dtype == np.bool_:
        raise TypeError("%s: expected integer offsets (int32), got dtype %s" % (name, arr.dtype))
    if arr.ndim != 1:
        raise ValueError("%s: expected a 1-d array of num_seqs+1 offsets, got shape %s" % (name, arr.shape))
    if arr.shape[0] < 2:
        raise ValueError("%s: expected at least 2 offsets (num_seqs+1 with num_seqs >= 1), got %d" % (name, arr.shape[0]))
    if arr.dtype != np.int32:
        info = np.iinfo(np.int32)
        if arr.min() < info.min or arr.max() > info.max:
            raise ValueError("%s: offsets must fit in int32, got values in [%d, %d]" % (name, arr.min(), arr.max()))
    return np.ascontiguousarray(arr, dtype=np.int32)


def _options(causal, window, softcap, scale, impl, cu_seqlens_q, cu_seqlens_k, check_finite):
    """Validates the keyword options; returns (FkAttentionOptions, arrays the call must keep alive, is varlen)."""
    causal = _flag(causal, "causal")
    window_left, window_right = _parse_window(window)
    softcap = _parse_softcap(softcap)
    scale = _parse_scale(scale)
    impl_code = _parse_impl(impl)
    check_finite = _flag(check_finite, "check_finite")
    if (cu_seqlens_q is None) != (cu_seqlens_k is None):
        raise ValueError("cu_seqlens_q and cu_seqlens_k must both be given (or neither); got only %s"
                         % ("cu_seqlens_q" if cu_seqlens_k is None else "cu_seqlens_k"))
    keep = []
    cq = ck = None
    num_seqs = 0
    if cu_seqlens_q is not None:
        cq_arr = _parse_cu(cu_seqlens_q, "cu_seqlens_q")
        ck_arr = _parse_cu(cu_seqlens_k, "cu_seqlens_k")
        if cq_arr.shape[0] != ck_arr.shape[0]:
            raise ValueError("cu_seqlens_k: expected the same length as cu_seqlens_q (%d, i.e. num_seqs+1), got %d"
                             % (cq_arr.shape[0], ck_arr.shape[0]))
        keep += [cq_arr, ck_arr]
        cq, ck = cq_arr.ctypes.data, ck_arr.ctypes.data
        num_seqs = cq_arr.shape[0] - 1
    opts = _capi.make_options(scale=scale, causal=causal, window_left=window_left, window_right=window_right,
                              softcap=softcap, cu_seqlens_q=cq, cu_seqlens_k=ck, num_seqs=num_seqs, impl=impl_code,
                              check_finite=check_finite)
    return opts, keep, num_seqs > 0


# ---------------------------------------------------------------------------------------------------
# operands

_NP_CODES = {np.dtype(np.float32): _capi.FK_F32, np.dtype(np.float16): _capi.FK_F16, np.dtype(np.float64): _capi.FK_F64}
_LAYOUT = {
    "q": "[batch, seqlen_q, heads, head_dim]",
    "k": "[batch, seqlen_k, kv_heads, head_dim]",
    "v": "[batch, seqlen_k, kv_heads, head_dim]",
    "o": "[batch, seqlen_q, heads, head_dim]",
    "dout": "[batch, seqlen_q, heads, head_dim]",
}


class _Operand:
    """A validated input: the numpy storage (kept alive), its fk dtype code and an FkTensor over it."""

    __slots__ = ("array", "code", "is_bf16", "tensor")

    def __init__(self, array, code, is_bf16):
        self.array = array
        self.code = code
        self.is_bf16 = is_bf16
        self.tensor = _tensor(array, code)

    @property
    def shape(self):
        return self.array.shape

    def empty(self, shape=None):
        """A new output of this operand's dtype (and of `shape`, default this operand's shape)."""
        return np.empty(self.array.shape if shape is None else shape, dtype=self.array.dtype)


def _needs_copy(a):
    if a.size == 0:
        return False  # no element is addressed; _element_strides makes up valid strides
    item = a.itemsize
    if a.ctypes.data % item:
        return True
    for n, s in zip(a.shape, a.strides):
        if n > 1 and (s <= 0 or s % item):
            return True
    return a.shape[-1] > 1 and a.strides[-1] != item


def _element_strides(a):
    """Strides in elements. Dimensions of extent <= 1 (and all of an empty array's) get the contiguous
    stride, since their stride is never used and numpy may report 0 or a negative value for them."""
    out = [0] * a.ndim
    contiguous = 1
    empty = a.size == 0
    for d in range(a.ndim - 1, -1, -1):
        n = a.shape[d]
        out[d] = a.strides[d] // a.itemsize if n > 1 and not empty else contiguous
        contiguous *= max(n, 1)
    return out


def _tensor(a, code):
    return _capi.make_tensor(a.ctypes.data, code, a.shape, _element_strides(a))


def _operand(x, name):
    layout = _LAYOUT[name]
    if isinstance(x, BF16Array):
        arr, code, is_bf16 = x.bits, _capi.FK_BF16, True
    elif isinstance(x, np.ndarray):
        dt = x.dtype
        code = _NP_CODES.get(dt.newbyteorder("=")) if dt.kind == "f" else None
        if code is None:
            raise TypeError(
                "%s: unsupported dtype %s; expected float32, float16, a flashkit.BF16Array (see flashkit.bf16), "
                "or float64 with impl='reference'" % (name, dt))
        arr, is_bf16 = (x if dt.isnative else x.astype(dt.newbyteorder("="))), False
    else:
        raise TypeError("%s: expected a numpy.ndarray or flashkit.BF16Array %s, got %s%s"
                        % (name, layout, _type_name(x), _torch_hint(x)))
    if arr.ndim != 4:
        raise ValueError("%s: expected a 4-d array %s, got shape %s" % (name, layout, tuple(arr.shape)))
    if _needs_copy(arr):
        arr = np.ascontiguousarray(arr)
    return _Operand(arr, code, is_bf16)


def _lse_operand(lse):
    if not isinstance(lse, np.ndarray):
        raise TypeError("lse: expected the float32 numpy array [batch, heads, seqlen_q] returned by attention, got %s%s"
                        % (_type_name(lse), _torch_hint(lse)))
    if lse.dtype.newbyteorder("=") != np.float32:
        raise TypeError("lse: expected dtype float32 (as returned by attention), got %s" % lse.dtype)
    if lse.ndim != 3:
        raise ValueError("lse: expected a 3-d array [batch, heads, seqlen_q], got shape %s" % (tuple(lse.shape),))
    if not lse.dtype.isnative or not lse.flags.c_contiguous or lse.ctypes.data % 4:
        lse = np.ascontiguousarray(lse, dtype=np.float32)
    return lse


def _wrap(a, like):
    return BF16Array(a) if like.is_bf16 else a


def _cost(c):
    return Cost(float(c.flops), float(c.bytes_read), float(c.bytes_written), float(c.workspace_bytes),
                _capi._decode(c.model), _capi._decode(c.kernel))


def _lse_shape(q):
    """[batch, heads, seqlen_q] ([1, heads, total_q] for packed varlen tensors)."""
    return (q.shape[0], q.shape[2], q.shape[1])


# ---------------------------------------------------------------------------------------------------
# public functions


def attention(q, k, v, *, causal=False, window=(-1, -1), softcap=0.0, scale=None, impl="auto",
              cu_seqlens_q=None, cu_seqlens_k=None, check_finite=True, return_cost=False):
    """Scaled dot-product attention, ``o = softmax(mask(scale * q k^T)) v``, with its log-sum-exp.

    Shapes: q [batch, seqlen_q, heads, head_dim]; k, v [batch, seqlen_k, kv_heads, head_dim] with
    kv_heads dividing heads (grouped-query attention: query head h reads kv head h // (heads/kv_heads));
    head_dim a multiple of 8 in [8, 256]. Any strides are accepted as long as the last dimension is
    contiguous (otherwise that operand is copied first).

    dtypes: numpy float32 or float16, or :class:`flashkit.BF16Array` (see :func:`flashkit.bf16`); all three
    operands alike. float64 is accepted with ``impl="reference"`` only.

    Options:
      causal: mask keys after the query. Queries and keys are aligned at the bottom-right: with
        off = seqlen_k - seqlen_q, query i sees key j only if j <= i + off (the last query sees the last key).
      window: (left, right); query i sees keys i+off-left .. i+off+right, -1 meaning unbounded on that side.
        With causal=True as well, both masks apply (the right side is then at most 0).
      softcap: if > 0, scores become softcap * tanh(score / softcap) before masking and softmax.
      scale: score multiplier; None means 1/sqrt(head_dim).
      impl: "flash" (tiled, O(seqlen) extra memory), "standard" (materializes the seqlen_q x seqlen_k
        scores; refuses with OutOfMemoryError if they would not fit), "reference" (slow float64 oracle),
        or "auto" (currently flash).
      cu_seqlens_q, cu_seqlens_k: variable-length batches. Pack the sequences along seqlen of batch-1
        tensors, q [1, total_q, heads, head_dim], k/v [1, total_k, kv_heads, head_dim], and give the
        cumulative offsets (int32 arrays or int lists of num_seqs+1 entries, starting at 0, ending at the
        totals). Masks apply within each sequence; sequences may be empty.
      check_finite: reject NaN/Inf in q, k, v (an O(size) scan) with InvalidArgumentError.
      return_cost: also return a :class:`Cost`.

    Returns ``(o, lse)`` or ``(o, lse, cost)``: o has q's shape and type (BF16Array in, BF16Array out);
    lse is float32 [batch, heads, seqlen_q] ([1, heads, total_q] for varlen), the natural-log sum of the
    exponentiated scores of each query. A query that sees no key gets o = 0 and lse = -inf.

    Raises TypeError/ValueError for wrong Python types or option values, and flashkit errors
    (InvalidArgumentError, OutOfMemoryError, ...) with the library's message otherwise.
    """
    opts, _keep, _ = _options(causal, window, softcap, scale, impl, cu_seqlens_q, cu_seqlens_k, check_finite)
    return_cost = _flag(return_cost, "return_cost")
    qo, ko, vo = _operand(q, "q"), _operand(k, "k"), _operand(v, "v")
    o = qo.empty()
    lse = np.empty(_lse_shape(qo), dtype=np.float32)
    ot = _tensor(o, qo.code)
    lt = _capi.make_tensor(lse.ctypes.data, _capi.FK_F32, lse.shape, _element_strides(lse))
    cost = _capi.FkCost()
    _capi.check(_capi.lib.fk_attention_forward(ctypes.byref(qo.tensor), ctypes.byref(ko.tensor),
                                               ctypes.byref(vo.tensor), ctypes.byref(ot), ctypes.byref(lt),
                                               ctypes.byref(opts), ctypes.byref(cost)))
    out = (_wrap(o, qo), lse)
    return out + (_cost(cost),) if return_cost else out


def attention_backward(dout, q, k, v, o, lse, *, causal=False, window=(-1, -1), softcap=0.0, scale=None,
                       impl="auto", cu_seqlens_q=None, cu_seqlens_k=None, check_finite=True, return_cost=False):
    """Gradients of :func:`attention` with respect to q, k and v.

    dout is the gradient of the loss with respect to o (q's shape and dtype); o and lse are what the
    forward call returned for the same q, k, v and the same options (the flash backward recomputes the
    probabilities from lse, so they must match). Options mean the same as in :func:`attention`;
    check_finite also scans o and dout.

    Returns ``(dq, dk, dv)`` (plus a :class:`Cost` with return_cost): dq has q's shape, dk and dv have k's
    shape (gradients of grouped kv heads are summed over the query heads that share them), all of q's type.
    Keys no query sees, and queries that see no key, get zero gradients.
    """
    opts, _keep, _ = _options(causal, window, softcap, scale, impl, cu_seqlens_q, cu_seqlens_k, check_finite)
    return_cost = _flag(return_cost, "return_cost")
    do = _operand(dout, "dout")
    qo, ko, vo = _operand(q, "q"), _operand(k, "k"), _operand(v, "v")
    oo = _operand(o, "o")
    lse_arr = _lse_operand(lse)
    lt = _capi.make_tensor(lse_arr.ctypes.data, _capi.FK_F32, lse_arr.shape, _element_strides(lse_arr))
    dq = qo.empty()
    dk = qo.empty(ko.shape)  # every gradient takes q's dtype (the library requires k, v to match it)
    dv = qo.empty(ko.shape)
    dqt, dkt, dvt = _tensor(dq, qo.code), _tensor(dk, qo.code), _tensor(dv, qo.code)
    cost = _capi.FkCost()
    _capi.check(_capi.lib.fk_attention_backward(
        ctypes.byref(do.tensor), ctypes.byref(qo.tensor), ctypes.byref(ko.tensor), ctypes.byref(vo.tensor),
        ctypes.byref(oo.tensor), ctypes.byref(lt), ctypes.byref(dqt), ctypes.byref(dkt), ctypes.byref(dvt),
        ctypes.byref(opts), ctypes.byref(cost)))
    out = (_wrap(dq, qo), _wrap(dk, qo), _wrap(dv, qo))
    return out + (_cost(cost),) if return_cost else out
