"""bfloat16 for numpy, which has no such dtype.

A :class:`BF16Array` holds bfloat16 values as their raw 16-bit patterns in a ``numpy.uint16`` array
(``.bits``): the top half of the float32 with the same value. flashkit reads and writes that storage
directly, so bf16 attention needs no float32 copies of the operands.
"""

import numpy as np

__all__ = ["BF16Array", "bf16"]


class BF16Array:
    """A bfloat16 array stored as uint16 bit patterns.

    Create one with :func:`flashkit.bf16` (rounds floats to nearest, ties to even) or wrap existing bit
    patterns with ``BF16Array(bits)``. Indexing returns views (``x[:, :, 0]`` shares storage), so strided
    slices can be passed to :func:`flashkit.attention` without a copy. Convert back with
    :meth:`to_float32` (exact) or ``numpy.asarray(x)``.
    """

    __slots__ = ("bits",)
    dtype_name = "bfloat16"
    itemsize = 2

    def __init__(self, bits):
        if not isinstance(bits, np.ndarray) or bits.dtype != np.uint16:
            raise TypeError(
                "BF16Array: expected a numpy.uint16 array of bfloat16 bit patterns, got %s"
                % _describe(bits)
            )
        self.bits = bits

    # numpy-like surface
    @property
    def shape(self):
        return self.bits.shape

    @property
    def ndim(self):
        return self.bits.ndim

    @property
    def size(self):
        return self.bits.size

    @property
    def strides(self):
        """Strides in bytes, as numpy reports them (2 bytes per element)."""
        return self.bits.strides

    def __len__(self):
        return len(self.bits)

    def __getitem__(self, index):
        return BF16Array(np.asarray(self.bits[index]))

    def reshape(self, *shape):
        return BF16Array(self.bits.reshape(*shape))

    def copy(self):
        return BF16Array(self.bits.copy())

    def to_float32(self):
        """The values as a new float32 array (exact: every bfloat16 is a float32)."""
        return (self.bits.astype(np.uint32) << np.uint32(16)).view(np.float32)

    def __array__(self, dtype=None):
        a = self.to_float32()
        return a if dtype is None else a.astype(dtype)

    def __repr__(self):
        if self.size > 16:
            return "BF16Array(shape=%s)" % (self.shape,)
        return "BF16Array(%s)" % np.array2string(self.to_float32(), separator=", ")


def _describe(x):
    if isinstance(x, np.ndarray):
        return "a numpy array of dtype %s" % x.dtype
    t = type(x)
    return "%s.%s" % (t.__module__, t.__qualname__) if t.__module__ != "builtins" else t.__name__


def _f64_to_f32_round_to_odd(x):
    """float64 -> float32 bit patterns, rounding to odd, so a following round-to-nearest-even to bfloat16
    equals rounding the float64 value directly (no double-rounding error)."""
    with np.errstate(over="ignore", invalid="ignore"):
        y = x.astype(np.float32)
    u = y.view(np.uint32).copy()
    inexact = np.isfinite(x) & (y.astype(np.float64) != x)
    even = (u & np.uint32(1)) == 0
    fix = inexact & even
    if fix.any():
        away = np.abs(y.astype(np.float64)) > np.abs(x)  # rounded away from zero: the odd neighbor is below
        u[fix & away] -= np.uint32(1)
        u[fix & ~away] += np.uint32(1)
    return u


def _f32_bits_to_bf16(u):
    """float32 bit patterns -> bfloat16 bit patterns, round to nearest, ties to even; NaN stays NaN."""
    u = u.astype(np.uint32, copy=False)
    lsb = (u >> np.uint32(16)) & np.uint32(1)
    rounded = ((u + np.uint32(0x7FFF) + lsb) >> np.uint32(16)).astype(np.uint16)
    is_nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    if is_nan.any():
        rounded[is_nan] = ((u[is_nan] >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)  # quiet NaN
    return rounded


def bf16(x):
    """Converts a float array (or anything numpy.asarray accepts) to a :class:`BF16Array`.

    Rounds to nearest, ties to even, like a hardware conversion; values beyond the bfloat16 range
    become +/-inf, NaN stays NaN. float64 input is rounded once (not via float32). A BF16Array is
    returned unchanged. The result is a new C-contiguous array of x's shape.
    """
    if isinstance(x, BF16Array):
        return x
    if not isinstance(x, np.ndarray):
        if type(x).__module__.startswith("torch"):
            raise TypeError("x: expected a numpy float array, got a torch tensor; use tensor.numpy() first")
        x = np.asarray(x)
    if x.dtype.kind not in "fiu" or x.dtype == np.bool_:
        raise TypeError("x: expected a real floating-point (or integer) array, got dtype %s" % x.dtype)
    if x.dtype.kind == "f" and x.dtype.itemsize <= 4:
        u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    else:
        u = _f64_to_f32_round_to_odd(np.ascontiguousarray(x, dtype=np.float64))
    return BF16Array(_f32_bits_to_bf16(u).reshape(x.shape))
