"""flashkit.Tokenizer: a Hugging Face ``tokenizer.json`` pipeline, through the C API (fk_tokenizer_*).

    tok = flashkit.Tokenizer("path/to/model")          # the directory holding tokenizer.json
    ids = tok.encode("Hello, world!")                  # list[int]
    text = tok.decode(ids)

Wrong Python types raise TypeError naming the argument; values the library rejects (a missing directory,
invalid UTF-8, an id outside the vocabulary) raise the typed errors of :mod:`flashkit.errors`, with the
library's message. numpy is optional: integer arrays are accepted as ids.
"""

import contextlib
import ctypes
import numbers
import os
import threading

from . import _capi
from .errors import InvalidArgumentError, UnsupportedError

__all__ = ["Tokenizer"]

_c_size_p = ctypes.POINTER(ctypes.c_size_t)
_c_i32_p = ctypes.POINTER(ctypes.c_int32)

# Prototypes of the tokenizer functions, declared here (not in _capi._declare) so that an older library without
# them still serves the attention API; using a Tokenizer then raises UnsupportedError.
_PROTOS = {
    "fk_tokenizer_load": (ctypes.c_int32, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]),
    "fk_tokenizer_free": (None, [ctypes.c_void_p]),
    "fk_tokenizer_vocab_size": (ctypes.c_int32, [ctypes.c_void_p, _c_i32_p]),
    "fk_tokenizer_encode": (
        ctypes.c_int32,
        [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, _c_i32_p, ctypes.c_size_t, _c_size_p],
    ),
    "fk_tokenizer_decode": (
        ctypes.c_int32,
        [ctypes.c_void_p, _c_i32_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, _c_size_p],
    ),
}


def declare(lib, protos):
    """Sets restype/argtypes of `protos` on lib; returns the name of the first missing function, or None."""
    for name, (restype, argtypes) in protos.items():
        fn = getattr(lib, name, None)
        if fn is None:
            return name
        fn.restype = restype
        fn.argtypes = argtypes
    return None


_MISSING = declare(_capi.lib, _PROTOS)


def require(missing):
    if missing:
        raise UnsupportedError(
            "the flashkit library %r does not export %s; it is an older build: rebuild it (bash tools/build.sh)"
            % (_capi.LIBRARY_PATH, missing)
        )


def type_name(x):
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else "%s.%s" % (t.__module__, t.__name__)


def as_path(p, name):
    """os.fsencode of a str / bytes / os.PathLike path, else TypeError naming the argument."""
    if isinstance(p, (str, bytes, os.PathLike)):
        b = os.fsencode(p)
        if b"\0" in b:
            raise InvalidArgumentError("%s: the path contains a NUL character: %r" % (name, p), 1)
        return b
    raise TypeError("%s: expected a path (str or os.PathLike), got %s" % (name, type_name(p)))


def as_int(x, name, lo, hi, what):
    """An int in [lo, hi] (bools rejected): TypeError for another type, InvalidArgumentError out of range."""
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise TypeError("%s: expected an int (%s), got %s %r" % (name, what, type_name(x), x))
    v = int(x)
    if not lo <= v <= hi:
        raise InvalidArgumentError("%s: expected %s, got %d" % (name, what, v), 1)
    return v


def as_ids(ids, name, vocab=None):
    """A ctypes int32 array of a sequence (list, tuple, range, 1-D numpy integer array) of token ids.

    TypeError for something else (a str, floats, a 2-D array); an id outside int32 (or [0, vocab) when vocab is
    given) raises InvalidArgumentError naming its index, like the library does for ids it sees.
    """
    if isinstance(ids, (str, bytes, bytearray)) or not hasattr(ids, "__len__") or not hasattr(ids, "__iter__"):
        raise TypeError("%s: expected a sequence of int token ids (list, tuple or 1-D integer array), got %s"
                        % (name, type_name(ids)))
    ndim = getattr(ids, "ndim", 1)
    if ndim != 1:
        raise TypeError("%s: expected a 1-D sequence of token ids, got an array with %d dimensions" % (name, ndim))
    n = len(ids)
    arr = (ctypes.c_int32 * max(n, 1))()
    upper = vocab if vocab is not None else 2**31
    for i, x in enumerate(ids):
        if isinstance(x, bool) or not isinstance(x, numbers.Integral):
            raise TypeError("%s[%d]: expected an int token id, got %s %r" % (name, i, type_name(x), x))
        v = int(x)
        if not 0 <= v < upper:
            raise InvalidArgumentError(
                "%s[%d]: token id %d is outside the vocabulary [0, %d)" % (name, i, v, upper), 1)
        arr[i] = v
    return arr, n


_GUARD_INIT = threading.Lock()
MAX_TEXT_BYTES = 64 << 20


class NativeHandle:
    """An owned pointer to a native object: close() frees it (twice is fine), also on `with` exit and at
    garbage collection. Subclasses set _h, _vocab, path and name their free function in _free_name.

    Threads: calls that use the handle hold it through ``_using()``; close() from another thread while such calls
    run marks the object closed at once (later calls raise InvalidArgumentError) and frees the native object when the
    last running call returns, so no call ever sees freed memory."""

    _free_name = ""
    _h = None
    _guard = None
    _inflight = 0
    _pending = None

    def _lock(self):
        if self._guard is None:
            with _GUARD_INIT:
                if self._guard is None:
                    self._guard = threading.Lock()
        return self._guard

    @contextlib.contextmanager
    def _using(self):
        """The native handle, kept alive for the duration of the block (raises if the object is closed)."""
        with self._lock():
            h = self._handle()
            self._inflight += 1
        try:
            yield h
        finally:
            with self._lock():
                self._inflight -= 1
                h, free = self._pending, self._inflight == 0 and self._pending is not None
                if free:
                    self._pending = None
            if free:
                getattr(_capi.lib, self._free_name)(h)

    def close(self):
        """Frees the native object (once the calls running on other threads return); later calls raise
        InvalidArgumentError. Safe to call twice."""
        with self._lock():
            h, self._h = getattr(self, "_h", None), None
            if h is not None and self._inflight > 0:
                self._pending, h = h, None
        if h is not None:
            getattr(_capi.lib, self._free_name)(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def __repr__(self):
        state = "closed" if self._h is None else "vocab_size=%d" % self._vocab
        return "flashkit.%s(%r, %s)" % (type(self).__name__, getattr(self, "path", "?"), state)


class Tokenizer(NativeHandle):
    """The tokenizer of a model directory (``DIR/tokenizer.json``, and ``tokenizer_config.json`` when present).

    Immutable and thread-safe; ``close()`` (or a ``with`` block) frees it at once, else garbage collection does.
    """

    _free_name = "fk_tokenizer_free"

    def __init__(self, dir):
        require(_MISSING)
        path = as_path(dir, "dir")
        self._h = None
        h = ctypes.c_void_p()
        _capi.check(_capi.lib.fk_tokenizer_load(path, ctypes.byref(h)))
        self._h = h
        self.path = os.fsdecode(path)
        v = ctypes.c_int32()
        _capi.check(_capi.lib.fk_tokenizer_vocab_size(self._h, ctypes.byref(v)))
        self._vocab = int(v.value)

    def _handle(self):
        if self._h is None:
            raise InvalidArgumentError("tokenizer: this Tokenizer is closed", 1)
        return self._h

    @property
    def vocab_size(self):
        """Number of ids: the model vocabulary plus added tokens (max id + 1)."""
        return self._vocab

    def encode(self, text, add_special=False):
        """Token ids (list[int]) of `text` (a str); add_special also adds what the post-processor adds (e.g. BOS)."""
        h = self._handle()
        if not isinstance(text, str):
            raise TypeError("text: expected a str, got %s" % type_name(text))
        if not isinstance(add_special, (bool, int)):
            raise TypeError("add_special: expected a bool, got %s" % type_name(add_special))
        try:
            b = text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidArgumentError(
                "text: not encodable as UTF-8 (a lone surrogate at index %d)" % e.start, 1) from None
        if len(b) > MAX_TEXT_BYTES:  # flashkit's limit for one input (src/core/limits.hpp, kMaxTextBytes)
            raise InvalidArgumentError("text: %d bytes of UTF-8, more than flashkit's limit of 64 MiB for one input"
                                       % len(b), 1)
        n = ctypes.c_size_t(0)
        cap = len(b) + 16
        while True:
            buf = (ctypes.c_int32 * cap)()
            st = _capi.lib.fk_tokenizer_encode(h, b, len(b), 1 if add_special else 0, buf, cap, ctypes.byref(n))
            if st == _capi.FK_INVALID_ARGUMENT and n.value > cap:
                cap = n.value  # the buffer was too small: the library said how many ids there are
                continue
            _capi.check(st)
            return list(buf[: n.value])

    def decode(self, ids, skip_special=False):
        """The text (str) of `ids`; skip_special drops special tokens. Every id must be in [0, vocab_size)."""
        h = self._handle()
        arr, n = as_ids(ids, "ids", self._vocab)
        length = ctypes.c_size_t(0)
        _capi.check(_capi.lib.fk_tokenizer_decode(h, arr, n, 1 if skip_special else 0, None, 0, ctypes.byref(length)))
        buf = ctypes.create_string_buffer(length.value + 1)
        _capi.check(_capi.lib.fk_tokenizer_decode(h, arr, n, 1 if skip_special else 0, buf, length.value + 1,
                                                  ctypes.byref(length)))
        return buf.raw[: length.value].decode("utf-8", "replace")
