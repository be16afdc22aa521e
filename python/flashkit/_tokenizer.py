"""flashkit.Tokenizer: a Hugging Face ``tokenizer.json`` pipeline, through the C API (fk_tokenizer_*).

    tok = flashkit.Tokenizer("path/to/model")          # the directory holding tokenizer.json
    tok = flashkit.Tokenizer.from_file("path/to/model/tokenizer.json")
    ids = tok.encode("Hello, world!")                  # list[int], with what the post-processor adds (e.g. BOS)
    text = tok.decode(ids, skip_special_tokens=True)

A missing directory or tokenizer.json raises FileNotFoundError.

Wrong Python types raise TypeError naming the argument; values the library rejects (a missing directory,
invalid UTF-8, an id outside the vocabulary) raise the typed errors of :mod:`flashkit.errors`, with the
library's message. numpy is optional: integer arrays are accepted as ids.
"""

import contextlib
import ctypes
import errno
import numbers
import os
import shutil
import tempfile
import threading
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

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


def declare(lib: Any, protos: Dict[str, Tuple[Any, List[Any]]]) -> Optional[str]:
    """Sets restype/argtypes of `protos` on lib; returns the name of the first missing function, or None."""
    for name, (restype, argtypes) in protos.items():
        fn = getattr(lib, name, None)
        if fn is None:
            return name
        fn.restype = restype
        fn.argtypes = argtypes
    return None


_declared: Dict[int, Optional[str]] = {}
_declared_lock = threading.Lock()


def require(protos: Dict[str, Tuple[Any, List[Any]]]) -> None:
    """Loads libflashkit.so (on first use: attention alone never loads it) and declares `protos` on it, once;
    UnsupportedError when the library is an older build without one of them."""
    with _declared_lock:
        if id(protos) not in _declared:
            _declared[id(protos)] = declare(_capi.engine_lib(), protos)
        missing = _declared[id(protos)]
    if missing:
        raise UnsupportedError(
            "the flashkit library %r does not export %s; it is an older build: rebuild it (bash tools/build.sh)"
            % (_capi.ENGINE_LIBRARY_PATH, missing)
        )


def file_not_found(what: str, path: Union[str, bytes]) -> FileNotFoundError:
    """A FileNotFoundError naming the argument and the missing path (errno ENOENT, so ``e.filename`` is the path)."""
    p = os.fsdecode(path)
    return FileNotFoundError(errno.ENOENT, "%s: no such file or directory" % what, p)


def type_name(x: Any) -> str:
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else "%s.%s" % (t.__module__, t.__name__)


def as_path(p: Any, name: str) -> bytes:
    """os.fsencode of a str / bytes / os.PathLike path, else TypeError naming the argument."""
    if isinstance(p, (str, bytes, os.PathLike)):
        b = os.fsencode(p)
        if b"\0" in b:
            raise InvalidArgumentError("%s: the path contains a NUL character: %r" % (name, p), 1)
        return b
    raise TypeError("%s: expected a path (str or os.PathLike), got %s" % (name, type_name(p)))


def as_int(x: Any, name: str, lo: int, hi: int, what: str) -> int:
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

    def close(self) -> None:
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


_UNSET: Any = object()


def _special_flag(value: Any, old: Any, name: str, old_name: str) -> bool:
    """The flag of `name`, or of its older spelling `old_name` (add_special, skip_special) when that one is given."""
    if old is not _UNSET:
        if value is not _UNSET:
            raise TypeError("give %s or its older spelling %s, not both" % (name, old_name))
        value, name = old, old_name
    if not isinstance(value, (bool, int)):
        raise TypeError("%s: expected a bool, got %s" % (name, type_name(value)))
    return bool(value)


class Tokenizer(NativeHandle):
    """The tokenizer of a model directory (``DIR/tokenizer.json``, and ``tokenizer_config.json`` when present), or
    of one file (:meth:`from_file`). A missing directory or tokenizer.json raises FileNotFoundError.

    Immutable and thread-safe; ``close()`` (or a ``with`` block) frees it at once, else garbage collection does.
    """

    _free_name = "fk_tokenizer_free"

    def __init__(self, dir: Union[str, "os.PathLike[str]"]) -> None:
        require(_PROTOS)
        path = as_path(dir, "dir")
        self._h = None
        if not os.path.isdir(path):
            raise file_not_found("dir: expected a directory with tokenizer.json", path)
        if not os.path.isfile(os.path.join(path, b"tokenizer.json")):
            raise file_not_found("dir: no tokenizer.json in the directory", os.path.join(path, b"tokenizer.json"))
        h = ctypes.c_void_p()
        _capi.check(_capi.lib.fk_tokenizer_load(path, ctypes.byref(h)))
        self._h = h
        self.path = os.fsdecode(path)
        v = ctypes.c_int32()
        _capi.check(_capi.lib.fk_tokenizer_vocab_size(self._h, ctypes.byref(v)))
        self._vocab = int(v.value)

    @classmethod
    def from_file(cls, path: Union[str, "os.PathLike[str]"]) -> "Tokenizer":
        """A tokenizer from one ``tokenizer.json`` file (as ``tokenizers.Tokenizer.from_file``). A file named
        tokenizer.json also picks up the ``tokenizer_config.json`` beside it (added tokens, BOS/EOS settings)."""
        p = as_path(path, "path")
        if not os.path.isfile(p):
            raise file_not_found("path: expected a tokenizer.json file", p)
        if os.path.basename(p) == b"tokenizer.json":
            return cls(os.path.dirname(os.path.abspath(p)))
        # The library reads a directory: give it one holding this file under the name it expects.
        tmp = tempfile.mkdtemp(prefix="flashkit-tokenizer-")
        try:
            shutil.copyfile(p, os.path.join(tmp, "tokenizer.json"))
            tok = cls(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        tok.path = os.fsdecode(p)
        return tok

    def _handle(self) -> ctypes.c_void_p:
        if self._h is None:
            raise InvalidArgumentError("tokenizer: this Tokenizer is closed", 1)
        return self._h

    @property
    def vocab_size(self) -> int:
        """Number of ids: the model vocabulary plus added tokens (max id + 1)."""
        return self._vocab

    def encode(self, text: str, add_special_tokens: bool = _UNSET, *, add_special: bool = _UNSET) -> List[int]:
        """Token ids of `text`; add_special_tokens (default True, as in Hugging Face) also adds what the
        post-processor adds (e.g. BOS). ``add_special`` is the older spelling of the same flag."""
        h = self._handle()
        special = _special_flag(True if add_special_tokens is _UNSET and add_special is _UNSET else add_special_tokens,
                                add_special, "add_special_tokens", "add_special")
        if not isinstance(text, str):
            raise TypeError("text: expected a str, got %s" % type_name(text))
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
            st = _capi.lib.fk_tokenizer_encode(h, b, len(b), 1 if special else 0, buf, cap, ctypes.byref(n))
            if st == _capi.FK_INVALID_ARGUMENT and n.value > cap:
                cap = n.value  # the buffer was too small: the library said how many ids there are
                continue
            _capi.check(st)
            return list(buf[: n.value])

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = _UNSET, *,
               skip_special: bool = _UNSET) -> str:
        """The text of `ids` (every id in [0, vocab_size)); skip_special_tokens (default False) drops special
        tokens. ``skip_special`` is the older spelling of the same flag."""
        h = self._handle()
        skip = _special_flag(False if skip_special_tokens is _UNSET and skip_special is _UNSET else skip_special_tokens,
                             skip_special, "skip_special_tokens", "skip_special")
        arr, n = as_ids(ids, "ids", self._vocab)
        length = ctypes.c_size_t(0)
        _capi.check(_capi.lib.fk_tokenizer_decode(h, arr, n, 1 if skip else 0, None, 0, ctypes.byref(length)))
        buf = ctypes.create_string_buffer(length.value + 1)
        _capi.check(_capi.lib.fk_tokenizer_decode(h, arr, n, 1 if skip else 0, buf, length.value + 1,
                                                  ctypes.byref(length)))
        return buf.raw[: length.value].decode("utf-8", "replace")
