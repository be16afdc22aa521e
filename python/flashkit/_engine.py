"""flashkit.Model and flashkit.Session: load a model directory and run it, through the C API (fk_model_*,
fk_generate, fk_session_*).

    with flashkit.Model("tests/data/models/tiny-llama", dtype="f32") as m:
        ids = m.generate([1, 450, 319], max_new_tokens=16)          # greedy (temperature 0)
        last = m.logits([1, 450, 319])                               # float32 [vocab_size]
        with m.session() as s:                                       # one sequence, its own KV cache
            rows = s.prefill([1, 450, 319], all_logits=True)         # float32 [3, vocab_size]
            nxt = s.decode(int(rows[-1].argmax()))                   # float32 [vocab_size]; s.position == 4

Each generate() / logits() call runs a fresh session (its own KV cache); a Session keeps its cache between calls.

Threads: a Model and its sessions may be shared by several threads. The library serves the calls of one model one at
a time (its sessions share the model's scratch buffers), so threads generating on their own sessions of one Model are
safe and their results are those of running them in turn; for parallel speed use one Model per thread. One Session is
one sequence: calls on it from two threads are serialized too, but their order decides the sequence. close() of a
Model or Session while another thread runs a call on it is safe: the object is closed at once for new calls and freed
when the running call returns; a Session keeps its model's weights alive after Model.close(). Wrong
Python types raise TypeError naming the argument; values the library rejects raise the typed errors of
:mod:`flashkit.errors` with its message. numpy is optional: logits() and the Session's methods return float32
ndarrays when numpy is importable, else lists of floats.
"""

import ctypes
import math
import numbers

from . import _capi
from ._tokenizer import NativeHandle, as_ids, as_int, as_path, declare, require, type_name
from .errors import InvalidArgumentError

__all__ = ["Model", "Session"]

_c_size_p = ctypes.POINTER(ctypes.c_size_t)
_c_i32_p = ctypes.POINTER(ctypes.c_int32)

_PROTOS = {
    "fk_model_load": (
        ctypes.c_int32,
        [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)],
    ),
    "fk_model_free": (None, [ctypes.c_void_p]),
    "fk_model_vocab_size": (ctypes.c_int32, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)]),
    "fk_model_max_context": (ctypes.c_int32, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)]),
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

_c_float_p = ctypes.POINTER(ctypes.c_float)


class _SpecOptions(ctypes.Structure):  # fk_spec_options
    _fields_ = [("draft", ctypes.c_void_p), ("draft_tokens", ctypes.c_int32), ("max_draft_tokens", ctypes.c_int32),
                ("lookup", ctypes.c_int32), ("tree_width", ctypes.c_int32)]


class _SpecStats(ctypes.Structure):  # fk_spec_stats
    _fields_ = [("steps", ctypes.c_int64), ("proposed", ctypes.c_int64), ("accepted", ctypes.c_int64),
                ("emitted", ctypes.c_int64), ("proposer_s", ctypes.c_double), ("verifier_s", ctypes.c_double),
                ("decode_s", ctypes.c_double)]


# Declared apart: a library without speculative decoding still serves Model.generate() without it.
_SPEC_PROTOS = {
    "fk_generate_speculative": (
        ctypes.c_int32,
        [ctypes.c_void_p, _c_i32_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_float, ctypes.c_int, ctypes.c_float,
         ctypes.c_uint64, ctypes.POINTER(_SpecOptions), _c_i32_p, ctypes.c_size_t, _c_size_p,
         ctypes.POINTER(_SpecStats)],
    ),
}

# Declared apart so that a library without sessions still serves Model; Model.session() then raises UnsupportedError.
_SESSION_PROTOS = {
    "fk_session_new": (ctypes.c_int32, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]),
    "fk_session_free": (None, [ctypes.c_void_p]),
    "fk_session_prefill": (
        ctypes.c_int32,
        [ctypes.c_void_p, _c_i32_p, ctypes.c_size_t, ctypes.c_int, _c_float_p, ctypes.c_size_t],
    ),
    "fk_session_decode": (ctypes.c_int32, [ctypes.c_void_p, ctypes.c_int32, _c_float_p, ctypes.c_size_t]),
    "fk_session_position": (ctypes.c_int32, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)]),
    "fk_session_max_context": (ctypes.c_int32, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)]),
    "fk_session_reset": (ctypes.c_int32, [ctypes.c_void_p]),
}

_MISSING = declare(_capi.lib, _PROTOS)
_MISSING_SESSION = declare(_capi.lib, _SESSION_PROTOS)

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
    threads, 0 (flashkit.num_threads()) or 1..flashkit.max_threads(). ``close()`` (or a ``with`` block) frees it
    (after any call running on another thread returns). See the module docstring for threads.
    """

    _free_name = "fk_model_free"

    def __init__(self, dir, device="cpu", dtype="f32", threads=0):
        require(_MISSING)
        path = as_path(dir, "dir")
        dev = _str_arg(device, "device", "cpu, cuda or cuda:N")
        dt = _str_arg(dtype, "dtype", "auto, f32, bf16, f16 or q8_0")
        th = as_int(threads, "threads", 0, _INT_MAX, "0 for the library's default, or a thread count")
        self._h = None
        h = ctypes.c_void_p()
        _capi.check(_capi.lib.fk_model_load(path, dev, dt, th, ctypes.byref(h)))
        self._h = h
        self.path = path.decode("utf-8", "replace")
        v = ctypes.c_int64()
        _capi.check(_capi.lib.fk_model_vocab_size(self._h, ctypes.byref(v)))
        self._vocab = int(v.value)
        _capi.check(_capi.lib.fk_model_max_context(self._h, ctypes.byref(v)))
        self._max_context = int(v.value)

    def _handle(self):
        if self._h is None:
            raise InvalidArgumentError("model: this Model is closed", 1)
        return self._h

    @property
    def vocab_size(self):
        """Rows of the model's output (its embedding's vocabulary)."""
        return self._vocab

    @property
    def max_context(self):
        """Positions a session's KV cache holds (the prompt plus the generated tokens fit in it)."""
        return self._max_context

    def generate(self, prompt_ids, max_new_tokens=128, temperature=0.0, top_k=0, top_p=1.0, seed=0, draft=None,
                 draft_tokens=4, lookup=0, tree_width=1, max_draft_tokens=8):
        """Generated ids (list[int]) after `prompt_ids`: at most max_new_tokens, fewer when an eos id (included)
        ends generation or the context is full. temperature 0 is greedy; top_k 0 is off; top_p in (0, 1].

        Speculative decoding (docs/speculative.md) with `draft` (a flashkit.Model sharing the tokenizer) and/or
        `lookup` (n-gram prompt lookup, the longest n-gram matched): same greedy output, same distribution when
        sampling. draft_tokens: K per step (1..64) or "auto"; tree_width > 1 verifies several n-gram continuations
        as a token tree. Afterwards `last_spec_stats` holds the step counts and times (a dict)."""
        self._handle()
        if draft is not None or lookup != 0:
            with self._using() as h:
                return self._generate_speculative(h, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed, draft,
                                                  draft_tokens, lookup, tree_width, max_draft_tokens)
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
        # The context bounds what can come back (the prompt, then one position per token but the last): the buffer
        # is sized by that, never by max_new_tokens alone.
        cap = max(1, min(mnt, self._max_context - n + 1))
        out = (ctypes.c_int32 * cap)()
        n_out = ctypes.c_size_t(0)
        with self._using() as h:
            _capi.check(_capi.lib.fk_generate(h, arr, n, mnt, temp, tk, tp, sd, out, cap, ctypes.byref(n_out)))
        return list(out[: n_out.value])

    def _generate_speculative(self, h, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed, draft,
                              draft_tokens, lookup, tree_width, max_draft_tokens):
        if draft is not None and not isinstance(draft, Model):
            raise TypeError("draft: expected a flashkit.Model or None, got %s" % type_name(draft))
        if declare(_capi.lib, _SPEC_PROTOS) is not None:
            from .errors import UnsupportedError
            raise UnsupportedError("this flashkit library has no speculative decoding (fk_generate_speculative)", 2)
        arr, n = as_ids(prompt_ids, "prompt_ids", self._vocab)
        if n == 0:
            raise InvalidArgumentError("prompt_ids: the prompt is empty (give at least one token)", 1)
        mnt = as_int(max_new_tokens, "max_new_tokens", 1, _INT_MAX, "at least 1")
        temp = _real(temperature, "temperature", "finite and >= 0, 0 for greedy")
        tk = as_int(top_k, "top_k", 0, _INT_MAX, "top_k >= 0, 0 for off")
        tp = _real(top_p, "top_p", "in (0, 1]")
        sd = as_int(seed, "seed", 0, 2**64 - 1, "a seed in [0, 2**64)")
        o = _SpecOptions()
        if draft is not None:
            hd = draft._handle()
            o.draft = hd.value if isinstance(hd, ctypes.c_void_p) else hd
        o.draft_tokens = 0 if draft_tokens == "auto" else as_int(draft_tokens, "draft_tokens", 1, 64,
                                                                  'K in [1, 64] or "auto"')
        o.max_draft_tokens = as_int(max_draft_tokens, "max_draft_tokens", 1, 64, "in [1, 64]")
        o.lookup = as_int(lookup, "lookup", 0, 64, "in [0, 64]")
        o.tree_width = as_int(tree_width, "tree_width", 1, 64, "in [1, 64]")
        cap = max(1, min(mnt, self._max_context - n + 1))  # the context bounds what comes back
        out = (ctypes.c_int32 * cap)()
        n_out = ctypes.c_size_t(0)
        st = _SpecStats()
        _capi.check(_capi.lib.fk_generate_speculative(h, arr, n, mnt, temp, tk, tp, sd, ctypes.byref(o), out, cap,
                                                      ctypes.byref(n_out), ctypes.byref(st)))
        self.last_spec_stats = {f: getattr(st, f) for f, _ in _SpecStats._fields_}
        return list(out[: n_out.value])

    def logits(self, prompt_ids):
        """Logits (float32, [vocab_size]) at the last position of `prompt_ids`, prefilled in a fresh session:
        a numpy array when numpy is importable, else a list of floats."""
        self._handle()
        arr, n = as_ids(prompt_ids, "prompt_ids", self._vocab)
        if n == 0:
            raise InvalidArgumentError("prompt_ids: the prompt is empty (give at least one token)", 1)
        out, ptr, cap = _float_out(None, self._vocab)
        with self._using() as h:
            _capi.check(_capi.lib.fk_model_logits(h, arr, n, ptr, cap))
        return _as_result(out, None, self._vocab)

    def session(self):
        """A new :class:`Session` of this model: an empty KV cache for one sequence, token by token."""
        return Session(self)


def _numpy():
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is optional
        return None
    return np


def _float_out(rows, vocab):
    """(result, pointer, cap) for `rows` rows of `vocab` floats: a float32 ndarray ([vocab] when rows is None,
    else [rows, vocab]) when numpy is importable, else a ctypes array the caller turns into lists."""
    np = _numpy()
    count = vocab * (1 if rows is None else rows)
    if np is not None:
        out = np.empty(vocab if rows is None else (rows, vocab), dtype=np.float32)
        return out, out.ctypes.data_as(_c_float_p), count
    buf = (ctypes.c_float * count)()  # pragma: no cover
    return buf, ctypes.cast(buf, _c_float_p), count  # pragma: no cover


def _as_result(out, rows, vocab):
    if not isinstance(out, ctypes.Array):
        return out
    flat = list(out)  # pragma: no cover
    if rows is None:  # pragma: no cover
        return flat
    return [flat[i * vocab:(i + 1) * vocab] for i in range(rows)]  # pragma: no cover


class Session(NativeHandle):
    """One sequence of a :class:`Model` and its KV cache (``Model.session()``): prefill() appends tokens and
    returns their logits, decode() appends one token and returns the logits after it.

        with model.session() as s:
            last = s.prefill(prompt_ids)                  # float32 [vocab_size]: the last position's logits
            rows = s.prefill(more_ids, all_logits=True)   # float32 [len(more_ids), vocab_size]
            nxt = s.decode(token)                         # float32 [vocab_size]
            s.position                                    # tokens in the cache; s.max_context: its capacity
            s.reset()                                     # empty the cache

    The cache holds ``max_context`` positions (the model's default context, min(max_position_embeddings, 4096)).
    Threads: the sessions of one Model run one call at a time (the library's per-model lock, which generate() and
    logits() take too), so threads may each drive their own session of one Model; use one Model per thread for
    parallel speed. A Session keeps the model's weights alive after ``Model.close()``, and close() while another
    thread runs a call on the session frees it when that call returns. ``close()`` (or a ``with`` block) frees its cache at once, else garbage collection
    does; a closed Session raises InvalidArgumentError. Rejected arguments leave the session as it was.
    """

    _free_name = "fk_session_free"

    def __init__(self, model):
        require(_MISSING_SESSION)
        if not isinstance(model, Model):
            raise TypeError("model: expected a flashkit.Model, got %s" % type_name(model))
        self._h = None
        self.path = model.path
        self._vocab = model.vocab_size
        h = ctypes.c_void_p()
        with model._using() as mh:
            _capi.check(_capi.lib.fk_session_new(mh, ctypes.byref(h)))
        self._h = h
        c = ctypes.c_int64()
        _capi.check(_capi.lib.fk_session_max_context(self._h, ctypes.byref(c)))
        self._max_context = int(c.value)

    def _handle(self):
        if self._h is None:
            raise InvalidArgumentError("session: this Session is closed", 1)
        return self._h

    @property
    def vocab_size(self):
        """Columns of every logits row."""
        return self._vocab

    @property
    def max_context(self):
        """Positions the cache holds: position + the tokens of a call may not exceed it."""
        self._handle()
        return self._max_context

    @property
    def position(self):
        """Tokens in the cache (prefilled and decoded since the session began or was reset)."""
        p = ctypes.c_int64()
        with self._using() as h:
            _capi.check(_capi.lib.fk_session_position(h, ctypes.byref(p)))
        return int(p.value)

    def prefill(self, ids, all_logits=False):
        """Appends `ids` (a non-empty sequence of token ids in [0, vocab_size)) to the cache. Returns the logits of
        the last position (float32 [vocab_size]), or with all_logits every position's (float32 [len(ids),
        vocab_size])."""
        self._handle()
        if not isinstance(all_logits, (bool, int)):
            raise TypeError("all_logits: expected a bool, got %s" % type_name(all_logits))
        arr, n = as_ids(ids, "ids", self._vocab)
        if n == 0:
            raise InvalidArgumentError("ids: no tokens to prefill (give at least one)", 1)
        pos = self.position
        if n > self._max_context - pos:
            raise InvalidArgumentError(
                "ids: %d tokens do not fit the session: position %d + %d > max_context %d (%d positions left)"
                % (n, pos, n, self._max_context, self._max_context - pos), 1)
        rows = n if all_logits else None
        out, ptr, cap = _float_out(rows, self._vocab)
        with self._using() as h:
            _capi.check(_capi.lib.fk_session_prefill(h, arr, n, 1 if all_logits else 0, ptr, cap))
        return _as_result(out, rows, self._vocab)

    def decode(self, token):
        """Appends one token id (in [0, vocab_size)) and returns the logits after it (float32 [vocab_size])."""
        self._handle()
        if isinstance(token, bool) or not isinstance(token, numbers.Integral):
            raise TypeError("token: expected an int token id, got %s %r" % (type_name(token), token))
        t = int(token)
        if not 0 <= t < self._vocab:
            raise InvalidArgumentError("token: token id %d is outside the vocabulary [0, %d)" % (t, self._vocab), 1)
        out, ptr, cap = _float_out(None, self._vocab)
        with self._using() as h:
            _capi.check(_capi.lib.fk_session_decode(h, t, ptr, cap))
        return _as_result(out, None, self._vocab)

    def reset(self):
        """Empties the cache (position 0); the session can be used again."""
        with self._using() as h:
            _capi.check(_capi.lib.fk_session_reset(h))

    def __repr__(self):
        if self._h is None:
            return "flashkit.Session(%r, closed)" % getattr(self, "path", "?")
        return "flashkit.Session(%r, position=%d, max_context=%d)" % (self.path, self.position, self._max_context)
