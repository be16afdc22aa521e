"""flashkit.Model: load a model directory and generate, through the C API (fk_model_*, fk_generate).

    with flashkit.Model("tests/data/models/tiny-llama", dtype="f32") as m:
        ids = m.generate([1, 450, 319], max_new_tokens=16)          # greedy (temperature 0)
        last = m.logits([1, 450, 319])                               # float32 [vocab_size]

Each generate() / logits() call runs a fresh session (its own KV cache); one Model may be shared by several
threads, which the library serves one call at a time. Wrong Python types raise TypeError naming the argument; values the library rejects raise the typed
errors of :mod:`flashkit.errors` with its message. numpy is optional: logits() returns a float32 ndarray when
numpy is importable, else a list of floats.
"""

import ctypes
import math
import numbers

from . import _capi
from ._tokenizer import NativeHandle, as_ids, as_int, as_path, declare, require, type_name
from .errors import InvalidArgumentError

__all__ = ["Model"]

_c_size_p = ctypes.POINTER(ctypes.c_size_t)
_c_i32_p = ctypes.POINTER(ctypes.c_int32)

_PROTOS = {
    "fk_model_load": (
        ctypes.c_int32,
        [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)],
    ),
    "fk_model_free": (None, [ctypes.c_void_p]),
    "fk_model_vocab_size": (ctypes.c_int32, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)]),
    "fk_generate": (
        ctypes.c_int32,
        [ctypes.c_void_p, _c_i32_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_float, ctypes.c_int, ctypes.c_float,
         ctypes.c_uint64, _c_i32_p, ctypes.c_size_t, _c_size_p],
    ),
    "fk_model_logits": (
        ctypes.c_int32,
        [ctypes.c_void_p, _c_i32_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t],
    ),
}

_MISSING = declare(_capi.lib, _PROTOS)

_INT_MAX = 2**31 - 1


def _str_arg(x, name, what):
    if not isinstance(x, str):
        raise TypeError("%s: expected a str (%s), got %s" % (name, what, type_name(x)))
    if "\0" in x:
        raise InvalidArgumentError("%s: contains a NUL character: %r (expected %s)" % (name, x, what), 1)
    return x.encode("utf-8", "replace")


def _real(x, name, what):
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError("%s: expected a float (%s), got %s %r" % (name, what, type_name(x), x))
    return float(x)


class Model(NativeHandle):
    """A model loaded from a directory (config.json + safetensors) or a .gguf file.

    device: "cpu", "cuda" or "cuda:N"; dtype (weight storage): "auto", "f32", "bf16" or "f16"; threads: CPU
    threads (0: flashkit.num_threads()). ``close()`` (or a ``with`` block) frees it at once.
    """

    _free_name = "fk_model_free"

    def __init__(self, dir, device="cpu", dtype="f32", threads=0):
        require(_MISSING)
        path = as_path(dir, "dir")
        dev = _str_arg(device, "device", "cpu, cuda or cuda:N")
        dt = _str_arg(dtype, "dtype", "auto, f32, bf16 or f16")
        th = as_int(threads, "threads", 0, _INT_MAX, "threads >= 0, 0 for the library's default")
        self._h = None
        h = ctypes.c_void_p()
        _capi.check(_capi.lib.fk_model_load(path, dev, dt, th, ctypes.byref(h)))
        self._h = h
        self.path = path.decode("utf-8", "replace")
        v = ctypes.c_int64()
        _capi.check(_capi.lib.fk_model_vocab_size(self._h, ctypes.byref(v)))
        self._vocab = int(v.value)

    def _handle(self):
        if self._h is None:
            raise InvalidArgumentError("model: this Model is closed", 1)
        return self._h

    @property
    def vocab_size(self):
        """Rows of the model's output (its embedding's vocabulary)."""
        return self._vocab

    def generate(self, prompt_ids, max_new_tokens=128, temperature=0.0, top_k=0, top_p=1.0, seed=0):
        """Generated ids (list[int]) after `prompt_ids`: at most max_new_tokens, fewer when an eos id (included)
        ends generation or the context is full. temperature 0 is greedy; top_k 0 is off; top_p in (0, 1]."""
        h = self._handle()
        arr, n = as_ids(prompt_ids, "prompt_ids", self._vocab)
        if n == 0:
            raise InvalidArgumentError("prompt_ids: the prompt is empty (give at least one token)", 1)
        mnt = as_int(max_new_tokens, "max_new_tokens", 1, _INT_MAX, "at least 1")
        temp = _real(temperature, "temperature", "finite and >= 0, 0 for greedy")
        if not (math.isfinite(temp) and temp >= 0):
            raise InvalidArgumentError("temperature: expected finite and >= 0 (0: greedy), got %r" % temp, 1)
        tk = as_int(top_k, "top_k", 0, _INT_MAX, "top_k >= 0, 0 for off")
        tp = _real(top_p, "top_p", "in (0, 1]")
        if not 0 < tp <= 1:
            raise InvalidArgumentError("top_p: expected a value in (0, 1], got %r" % tp, 1)
        sd = as_int(seed, "seed", 0, 2**64 - 1, "a seed in [0, 2**64)")
        out = (ctypes.c_int32 * mnt)()
        n_out = ctypes.c_size_t(0)
        _capi.check(_capi.lib.fk_generate(h, arr, n, mnt, temp, tk, tp, sd, out, mnt, ctypes.byref(n_out)))
        return list(out[: n_out.value])

    def logits(self, prompt_ids):
        """Logits (float32, [vocab_size]) at the last position of `prompt_ids`, prefilled in a fresh session:
        a numpy array when numpy is importable, else a list of floats."""
        h = self._handle()
        arr, n = as_ids(prompt_ids, "prompt_ids", self._vocab)
        if n == 0:
            raise InvalidArgumentError("prompt_ids: the prompt is empty (give at least one token)", 1)
        try:
            import numpy as np
        except ImportError:  # pragma: no cover - numpy is optional
            np = None
        if np is not None:
            out = np.empty(self._vocab, dtype=np.float32)
            ptr = out.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            _capi.check(_capi.lib.fk_model_logits(h, arr, n, ptr, self._vocab))
            return out
        buf = (ctypes.c_float * self._vocab)()  # pragma: no cover
        _capi.check(_capi.lib.fk_model_logits(h, arr, n, buf, self._vocab))  # pragma: no cover
        return list(buf)  # pragma: no cover
