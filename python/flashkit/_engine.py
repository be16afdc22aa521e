"""flashkit.Model and flashkit.Session: load a model directory and run it, through the C API (fk_model_*,
fk_generate, fk_generate_stream, fk_session_*).

    with flashkit.Model("models/target") as m:
        text = m.generate("Once upon a time", max_new_tokens=32)      # text in, text out (the CLI's sampling)
        for piece in m.stream("Once upon a time", stop=["\n\n"]):   # the text as it is generated
            print(piece, end="", flush=True)
        ids = m.generate([1, 450, 319], max_new_tokens=16)          # ids in, ids out: greedy (temperature 0)
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
import glob
import math
import numbers
import os
import queue
import threading
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from . import _capi
from ._tokenizer import NativeHandle, Tokenizer, as_ids, as_int, as_path, declare, file_not_found, require, type_name
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

# int (*fk_token_callback)(void* user, int32_t id)
_TOKEN_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int32)


class _SamplingDefaults(ctypes.Structure):  # fk_sampling_defaults
    _fields_ = [("max_new_tokens", ctypes.c_int32), ("temperature", ctypes.c_float), ("top_k", ctypes.c_int32),
                ("top_p", ctypes.c_float), ("min_p", ctypes.c_float), ("repetition_penalty", ctypes.c_float),
                ("seed", ctypes.c_uint64)]


# Declared apart: an older library without streaming still serves generate() on ids.
_STREAM_PROTOS = {
    "fk_generate_stream": (
        ctypes.c_int32,
        [ctypes.c_void_p, _c_i32_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_float, ctypes.c_int, ctypes.c_float,
         ctypes.c_uint64, _TOKEN_CALLBACK, ctypes.c_void_p, _c_size_p],
    ),
    "fk_sampling_defaults_init": (None, [ctypes.POINTER(_SamplingDefaults)]),
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


def sampling_defaults() -> Dict[str, Any]:
    """The sampling defaults of ``flashkit generate`` (the library's fk_sampling_defaults_init, one source for the CLI
    and Python): max_new_tokens, temperature, top_k, top_p, min_p, repetition_penalty, seed."""
    require(_STREAM_PROTOS)
    d = _SamplingDefaults()
    _capi.lib.fk_sampling_defaults_init(ctypes.byref(d))
    return {f: getattr(d, f) for f, _ in _SamplingDefaults._fields_}


_DONE = object()


def _stop_strings(stop: Any) -> List[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, (list, tuple)):
        raise TypeError("stop: expected a str or a list of str, got %s" % type_name(stop))
    for i, x in enumerate(stop):
        if not isinstance(x, str):
            raise TypeError("stop[%d]: expected a str, got %s" % (i, type_name(x)))
        if not x:
            raise InvalidArgumentError("stop[%d]: an empty stop string (it would match at once)" % i, 1)
    return list(stop)


class _TextStream:
    """Generated ids -> text pieces: decodes the generated ids so far and hands out what is settled, holding back a
    trailing incomplete UTF-8 character and any tail that may still become a stop string; done once a stop string
    appears (the text ends before it)."""

    def __init__(self, tokenizer: Tokenizer, stop: List[str]) -> None:
        self.tok, self.stop, self.ids, self.sent, self.done = tokenizer, stop, [], 0, False

    def push(self, token: int) -> str:
        self.ids.append(token)
        text = self.tok.decode(self.ids, skip_special_tokens=True)
        cut = self._stop_at(text)
        if cut is not None:
            self.done = True
            return self._take(text[:cut])
        hold = len(text) - len(text.rstrip("\ufffd"))  # half a character: its bytes are still coming
        for s in self.stop:
            for k in range(min(len(s) - 1, len(text)), 0, -1):
                if text.endswith(s[:k]):
                    hold = max(hold, k)
                    break
        return self._take(text[: len(text) - hold])

    def finish(self) -> str:
        if self.done or not self.ids:
            return ""
        return self._take(self.tok.decode(self.ids, skip_special_tokens=True))

    def _stop_at(self, text: str) -> Optional[int]:
        found = [i for i in (text.find(s, max(0, self.sent - len(s))) for s in self.stop) if i >= 0]
        return min(found) if found else None

    def _take(self, settled: str) -> str:
        piece = settled[self.sent:] if len(settled) > self.sent else ""
        self.sent = max(self.sent, len(settled))
        return piece


class Model(NativeHandle):
    """A model loaded from a directory (config.json + safetensors) or a .gguf file; a missing path or config.json
    raises FileNotFoundError.

    device: "cpu", "cuda" or "cuda:N"; dtype (weight storage): "auto", "f32", "bf16" or "f16"; threads: CPU
    threads, 0 (flashkit.num_threads()) or 1..flashkit.max_threads(). ``close()`` (or a ``with`` block) frees it
    (after any call running on another thread returns). See the module docstring for threads.
    """

    _free_name = "fk_model_free"

    def __init__(self, dir: Union[str, "os.PathLike[str]"], device: str = "cpu", dtype: str = "f32",
                 threads: int = 0) -> None:
        require(_PROTOS)
        path = as_path(dir, "dir")
        dev = _str_arg(device, "device", "cpu, cuda or cuda:N")
        dt = _str_arg(dtype, "dtype", "auto, f32, bf16, f16 or q8_0")
        th = as_int(threads, "threads", 0, _INT_MAX, "0 for the library's default, or a thread count")
        self._h = None
        self._tokenizer: Optional[Tokenizer] = None
        if not os.path.exists(path):
            raise file_not_found("dir: expected a model directory (config.json + *.safetensors) or a .gguf file",
                                 path)
        if os.path.isdir(path) and not os.path.isfile(os.path.join(path, b"config.json")) \
                and not glob.glob(os.path.join(glob.escape(path), b"*.gguf")):
            raise file_not_found("dir: no config.json (nor a .gguf file) in the model directory",
                                 os.path.join(path, b"config.json"))
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
    def vocab_size(self) -> int:
        """Rows of the model's output (its embedding's vocabulary)."""
        return self._vocab

    @property
    def max_context(self) -> int:
        """Positions a session's KV cache holds (the prompt plus the generated tokens fit in it)."""
        return self._max_context

    @property
    def tokenizer(self) -> Tokenizer:
        """The model's tokenizer (tokenizer.json in the model directory, or beside the .gguf file), loaded on first
        use; FileNotFoundError if there is none. Assign a :class:`Tokenizer` to use another one."""
        if self._tokenizer is None:
            folder = self.path if os.path.isdir(self.path) else os.path.dirname(os.path.abspath(self.path))
            self._tokenizer = Tokenizer(folder)
        return self._tokenizer

    @tokenizer.setter
    def tokenizer(self, tok: Tokenizer) -> None:
        if not isinstance(tok, Tokenizer):
            raise TypeError("tokenizer: expected a flashkit.Tokenizer, got %s" % type_name(tok))
        self._tokenizer = tok

    def generate(self, prompt: Union[str, Sequence[int]], max_new_tokens: Optional[int] = None,
                 temperature: Optional[float] = None, top_k: Optional[int] = None, top_p: Optional[float] = None,
                 seed: Optional[int] = None, draft: Optional["Model"] = None, draft_tokens: Union[int, str] = 4,
                 lookup: int = 0, tree_width: int = 1, max_draft_tokens: int = 8, *,
                 stop: Union[str, Sequence[str], None] = None, stream: bool = False,
                 add_special_tokens: bool = True) -> Union[str, List[int], Iterator[str], Iterator[int]]:
        """Generates after `prompt`: text (str) when the prompt is a str, ids (list[int]) when it is a sequence of
        token ids; with stream=True an iterator of text pieces / ids instead (:meth:`stream`).

        Text prompts are encoded with the model's tokenizer (add_special_tokens: BOS etc., as the CLI does) and
        sample with the CLI's defaults (:func:`sampling_defaults`: max_new_tokens 128, temperature 0.8, top_k 40,
        top_p 0.95, seed 0); id prompts default to greedy decoding (temperature 0, top_k 0, top_p 1). temperature 0
        is greedy; top_k 0 is off; top_p in (0, 1]. Generation ends after max_new_tokens, an eos id (included in
        ids; dropped from text), a full context, or a stop string (`stop`: text ends before it; ids end with the
        token that completed it).

        Speculative decoding (docs/speculative.md, ids only, no stop/stream) with `draft` (a flashkit.Model sharing
        the tokenizer) and/or `lookup` (n-gram prompt lookup): same greedy output, same distribution when sampling.
        draft_tokens: K per step (1..64) or "auto"; tree_width > 1 verifies several n-gram continuations as a token
        tree. Afterwards `last_spec_stats` holds the step counts and times (a dict)."""
        self._handle()
        if not isinstance(stream, (bool, int)):
            raise TypeError("stream: expected a bool, got %s" % type_name(stream))
        text_mode = isinstance(prompt, str)
        stops = _stop_strings(stop)
        speculative = draft is not None or lookup != 0
        if not text_mode and not stream and not stops:
            temperature = 0.0 if temperature is None else temperature
            top_k = 0 if top_k is None else top_k
            top_p = 1.0 if top_p is None else top_p
            seed = 0 if seed is None else seed
            max_new_tokens = 128 if max_new_tokens is None else max_new_tokens
            if speculative:
                with self._using() as h:
                    return self._generate_speculative(h, prompt, max_new_tokens, temperature, top_k, top_p, seed,
                                                      draft, draft_tokens, lookup, tree_width, max_draft_tokens)
            return self._generate_ids(prompt, max_new_tokens, temperature, top_k, top_p, seed)
        if speculative:
            raise InvalidArgumentError("draft/lookup: speculative decoding takes ids without stop or stream", 1)
        pieces = self._stream(prompt, max_new_tokens, temperature, top_k, top_p, seed, stops, add_special_tokens)
        if stream:
            return pieces
        return "".join(pieces) if text_mode else list(pieces)

    def stream(self, prompt: Union[str, Sequence[int]], max_new_tokens: Optional[int] = None,
               temperature: Optional[float] = None, top_k: Optional[int] = None, top_p: Optional[float] = None,
               seed: Optional[int] = None, *, stop: Union[str, Sequence[str], None] = None,
               add_special_tokens: bool = True) -> Union[Iterator[str], Iterator[int]]:
        """As :meth:`generate`, but an iterator: text pieces (str) as they are settled for a text prompt, ids for
        an id prompt. Leaving the loop early stops generation after the token in progress. Joined, the pieces are
        what generate() returns for the same arguments."""
        return self.generate(prompt, max_new_tokens, temperature, top_k, top_p, seed, stop=stop, stream=True,
                             add_special_tokens=add_special_tokens)

    def _sampling(self, text_mode, max_new_tokens, temperature, top_k, top_p, seed):
        d = sampling_defaults() if text_mode else dict(max_new_tokens=128, temperature=0.0, top_k=0, top_p=1.0,
                                                       seed=0)
        pick = lambda v, k: d[k] if v is None else v  # noqa: E731
        mnt = as_int(pick(max_new_tokens, "max_new_tokens"), "max_new_tokens", 1, _INT_MAX, "at least 1")
        temp = _real(pick(temperature, "temperature"), "temperature", "finite and >= 0, 0 for greedy")
        if not (math.isfinite(temp) and temp >= 0):
            raise InvalidArgumentError("temperature: expected finite and >= 0 (0: greedy), got %r" % temp, 1)
        tk = as_int(pick(top_k, "top_k"), "top_k", 0, _INT_MAX, "top_k >= 0, 0 for off")
        tp = _real(pick(top_p, "top_p"), "top_p", "in (0, 1]")
        if not 0 < tp <= 1:
            raise InvalidArgumentError("top_p: expected a value in (0, 1], got %r" % tp, 1)
        sd = as_int(pick(seed, "seed"), "seed", 0, 2**64 - 1, "a seed in [0, 2**64)")
        return mnt, temp, tk, tp, sd

    def _generate_ids(self, prompt_ids, max_new_tokens, temperature, top_k, top_p, seed) -> List[int]:
        arr, n = as_ids(prompt_ids, "prompt_ids", self._vocab)
        if n == 0:
            raise InvalidArgumentError("prompt_ids: the prompt is empty (give at least one token)", 1)
        mnt, temp, tk, tp, sd = self._sampling(False, max_new_tokens, temperature, top_k, top_p, seed)
        # The context bounds what can come back (the prompt, then one position per token but the last): the buffer
        # is sized by that, never by max_new_tokens alone.
        cap = max(1, min(mnt, self._max_context - n + 1))
        out = (ctypes.c_int32 * cap)()
        n_out = ctypes.c_size_t(0)
        with self._using() as h:
            _capi.check(_capi.lib.fk_generate(h, arr, n, mnt, temp, tk, tp, sd, out, cap, ctypes.byref(n_out)))
        return list(out[: n_out.value])

    def _stream(self, prompt, max_new_tokens, temperature, top_k, top_p, seed, stops, add_special_tokens):
        """Checks the arguments now (errors surface at the call, not at the first next()), then returns the
        generator of pieces."""
        require(_STREAM_PROTOS)
        text_mode = isinstance(prompt, str)
        decoder = None
        if text_mode:
            tok = self.tokenizer
            ids = tok.encode(prompt, add_special_tokens=add_special_tokens)
            if not ids:
                raise InvalidArgumentError("prompt: the text encodes to no tokens (give some text, or "
                                           "add_special_tokens=True)", 1)
            arr, n = as_ids(ids, "prompt", self._vocab)
            decoder = _TextStream(tok, stops)
        else:
            arr, n = as_ids(prompt, "prompt_ids", self._vocab)
            if n == 0:
                raise InvalidArgumentError("prompt_ids: the prompt is empty (give at least one token)", 1)
            if stops:
                decoder = _TextStream(self.tokenizer, stops)
        if n > self._max_context:
            raise InvalidArgumentError("prompt: %d tokens do not fit the context of %d tokens"
                                       % (n, self._max_context), 1)
        args = self._sampling(text_mode, max_new_tokens, temperature, top_k, top_p, seed)
        return self._pieces(arr, n, args, decoder, text_mode)

    def _pieces(self, arr, n, args, decoder, text_mode) -> Iterator[Any]:
        # fk_generate_stream runs on a worker thread (ctypes releases the GIL during the call) and hands each id
        # over a queue; leaving the loop sets `quit`, and the callback's 0 stops generation at the next id.
        ids: "queue.Queue[Any]" = queue.Queue()
        quit = threading.Event()
        failure: List[BaseException] = []

        def on_token(_user, token):
            ids.put(int(token))
            return 0 if quit.is_set() else 1

        callback = _TOKEN_CALLBACK(on_token)

        def work():
            try:
                n_out = ctypes.c_size_t(0)
                with self._using() as h:  # fk_last_error is per thread: checked here
                    _capi.check(_capi.lib.fk_generate_stream(h, arr, n, *args, callback, None, ctypes.byref(n_out)))
            except BaseException as e:  # handed to the consumer
                failure.append(e)
            finally:
                ids.put(_DONE)

        worker = threading.Thread(target=work, name="flashkit-generate", daemon=True)
        worker.start()
        try:
            while True:
                token = ids.get()
                if token is _DONE:
                    break
                if decoder is None:
                    yield token
                    continue
                piece = decoder.push(token)
                if not text_mode:
                    yield token
                elif piece:
                    yield piece
                if decoder.done:
                    quit.set()
                    break
            if failure:
                raise failure[0]
            if decoder is not None and text_mode:
                rest = decoder.finish()
                if rest:
                    yield rest
        finally:
            quit.set()
            worker.join()

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

    def logits(self, prompt_ids: Sequence[int]) -> Any:
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

    def session(self) -> "Session":
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

    def __init__(self, model: Model) -> None:
        require(_SESSION_PROTOS)
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
    def vocab_size(self) -> int:
        """Columns of every logits row."""
        return self._vocab

    @property
    def max_context(self) -> int:
        """Positions the cache holds: position + the tokens of a call may not exceed it."""
        self._handle()
        return self._max_context

    @property
    def position(self) -> int:
        """Tokens in the cache (prefilled and decoded since the session began or was reset)."""
        p = ctypes.c_int64()
        with self._using() as h:
            _capi.check(_capi.lib.fk_session_position(h, ctypes.byref(p)))
        return int(p.value)

    def prefill(self, ids: Sequence[int], all_logits: bool = False) -> Any:
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

    def decode(self, token: int) -> Any:
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

    def reset(self) -> None:
        """Empties the cache (position 0); the session can be used again."""
        with self._using() as h:
            _capi.check(_capi.lib.fk_session_reset(h))

    def __repr__(self):
        if self._h is None:
            return "flashkit.Session(%r, closed)" % getattr(self, "path", "?")
        return "flashkit.Session(%r, position=%d, max_context=%d)" % (self.path, self.position, self._max_context)
