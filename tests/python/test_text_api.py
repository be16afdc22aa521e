"""The text API on the shipped model (models/target): Model.generate on text returns text, Model.stream yields the
same text in pieces, stop strings end it before the stop, the CLI's sampling defaults come from the library, id
prompts stay greedy by default, Tokenizer.from_file and the Hugging Face-style encode/decode flags, and missing files
raising FileNotFoundError."""

import os
import re
import shutil
import threading

import pytest

import flashkit

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
TARGET = os.path.join(ROOT, "models", "target")
PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def model():
    with flashkit.Model(TARGET) as m:
        yield m


def test_text_in_text_out_equals_ids_decoded(model):
    tok = model.tokenizer
    ids = tok.encode(PROMPT)  # with BOS, as the text path encodes it
    assert ids[0] == 0 and ids[1:] == tok.encode(PROMPT, add_special_tokens=False)
    out_ids = model.generate(ids, max_new_tokens=24)  # ids: greedy by default
    text = model.generate(PROMPT, max_new_tokens=24, temperature=0)
    assert isinstance(text, str) and text
    assert text == tok.decode(out_ids, skip_special_tokens=True)


def test_stream_pieces_join_to_generate(model):
    for kw in (dict(temperature=0), dict(seed=3), {}):
        whole = model.generate(PROMPT, max_new_tokens=30, **kw)
        pieces = list(model.stream(PROMPT, max_new_tokens=30, **kw))
        assert len(pieces) > 1 and all(isinstance(p, str) and p for p in pieces)
        assert "".join(pieces) == whole
        assert "".join(model.generate(PROMPT, max_new_tokens=30, stream=True, **kw)) == whole


def test_sampling_defaults_are_the_clis(model):
    d = flashkit.sampling_defaults()
    assert d["max_new_tokens"] == 128 and d["top_k"] == 40 and d["seed"] == 0
    assert abs(d["temperature"] - 0.8) < 1e-6 and abs(d["top_p"] - 0.95) < 1e-6
    # The CLI's own defaults (apps/flashkit/cmd_generate.cpp) must not drift from the library's.
    src = os.path.join(ROOT, "apps", "flashkit", "cmd_generate.cpp")
    text = open(src, encoding="utf-8").read()
    m = re.search(r"float temp = ([0-9.]+)f, top_p = ([0-9.]+)f", text)
    k = re.search(r"int top_k = (\d+);", text)
    if m and k:
        assert (float(m.group(1)), float(m.group(2)), int(k.group(1))) == (0.8, 0.95, 40)
    # Text prompts sample with them: the defaults spelled out give the same text; seeds differ.
    a = model.generate(PROMPT, max_new_tokens=16)
    b = model.generate(PROMPT, max_new_tokens=16, temperature=0.8, top_k=40, top_p=0.95, seed=0)
    assert a == b
    assert len({model.generate(PROMPT, max_new_tokens=16, seed=s) for s in range(4)}) > 1


def test_stop_strings_end_the_text_before_them(model):
    full = model.generate(PROMPT, max_new_tokens=40, temperature=0)
    words = full.split()
    assert len(words) > 4
    stop = words[3]  # a stop string the unconstrained text contains
    cut = full.index(stop)
    assert model.generate(PROMPT, max_new_tokens=40, temperature=0, stop=[stop]) == full[:cut]
    assert model.generate(PROMPT, max_new_tokens=40, temperature=0, stop=stop) == full[:cut]
    pieces = list(model.stream(PROMPT, max_new_tokens=40, temperature=0, stop=["zzz-never", stop]))
    assert "".join(pieces) == full[:cut] and not any(stop in p for p in pieces)
    # Ids with stop strings: generation ends with the token that completed the stop string.
    ids = model.tokenizer.encode(PROMPT)
    out = model.generate(ids, max_new_tokens=40, stop=[stop])
    assert stop in model.tokenizer.decode(out) and stop not in model.tokenizer.decode(out[:-1])


def test_leaving_a_stream_early_stops_the_worker(model):
    before = threading.active_count()
    it = model.stream(PROMPT, max_new_tokens=200, temperature=0)
    first = next(it)
    assert isinstance(first, str)
    it.close()
    assert threading.active_count() == before
    assert model.generate(PROMPT, max_new_tokens=4, temperature=0)  # the model is free again
    ids = list(model.stream(model.tokenizer.encode(PROMPT), max_new_tokens=5))
    assert ids == model.generate(model.tokenizer.encode(PROMPT), max_new_tokens=5)


def test_bad_text_arguments(model):
    with pytest.raises(TypeError, match="stop"):
        model.generate(PROMPT, stop=3)
    with pytest.raises(TypeError, match=r"stop\[1\]"):
        model.generate(PROMPT, stop=["a", 2])
    with pytest.raises(flashkit.InvalidArgumentError, match=r"stop\[0\]: an empty stop string"):
        model.generate(PROMPT, stop=[""])
    with pytest.raises(flashkit.InvalidArgumentError, match="top_p"):
        model.stream(PROMPT, top_p=0)  # checked at the call, before any next()
    with pytest.raises(flashkit.InvalidArgumentError, match="max_new_tokens"):
        model.generate(PROMPT, max_new_tokens=0)
    with pytest.raises(flashkit.InvalidArgumentError, match="no tokens"):
        model.generate("", add_special_tokens=False)
    with pytest.raises(TypeError, match="stream"):
        model.generate(PROMPT, stream="yes")
    with pytest.raises(flashkit.InvalidArgumentError, match="speculative"):
        model.generate(PROMPT, lookup=2)


def test_tokenizer_from_file_and_hf_flags(tmp_path):
    tok = flashkit.Tokenizer.from_file(os.path.join(TARGET, "tokenizer.json"))
    ids = tok.encode("Hello world")
    assert ids[0] == 0 and ids[1:] == tok.encode("Hello world", add_special_tokens=False)
    assert tok.encode("Hello world", add_special=False) == ids[1:]  # the older spelling still works
    assert tok.decode(ids, skip_special_tokens=True) == "Hello world"
    assert tok.decode(ids) != "Hello world"  # the BOS text stays by default
    copy = tmp_path / "my-tokenizer.json"
    shutil.copyfile(os.path.join(TARGET, "tokenizer.json"), copy)
    other = flashkit.Tokenizer.from_file(copy)
    assert other.encode("Hello world", add_special_tokens=False) == ids[1:] and other.path == str(copy)
    with pytest.raises(TypeError, match="not both"):
        tok.encode("x", add_special_tokens=True, add_special=True)
    with pytest.raises(FileNotFoundError) as ei:
        flashkit.Tokenizer.from_file(tmp_path / "missing.json")
    assert ei.value.filename == str(tmp_path / "missing.json")


def test_missing_tokenizer_for_text_is_file_not_found(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    for name in ("config.json", "model.safetensors"):
        os.symlink(os.path.join(TARGET, name), d / name)
    with flashkit.Model(d) as m:
        assert m.generate([0, 5, 6], max_new_tokens=2)  # ids need no tokenizer
        with pytest.raises(FileNotFoundError, match="tokenizer.json"):
            m.generate(PROMPT)
        m.tokenizer = flashkit.Tokenizer(TARGET)
        assert isinstance(m.generate(PROMPT, max_new_tokens=2), str)
        with pytest.raises(TypeError, match="tokenizer"):
            m.tokenizer = "tok"


def test_text_equals_the_clis_output(model):
    """`flashkit generate -m DIR -p TEXT -n N` and Model.generate(TEXT, max_new_tokens=N) sample alike (same defaults,
    same seed, BOS added): the same text. The CLI is the one built beside the library under test."""
    lib = os.environ.get("FLASHKIT_LIBRARY") or os.path.join(ROOT, "build", "lib", "libflashkit.so")
    cli = os.environ.get("FLASHKIT_CLI") or os.path.join(os.path.dirname(lib), os.pardir, "bin", "flashkit")
    if not os.path.isfile(cli):
        pytest.skip("no flashkit CLI at %s" % cli)
    import subprocess

    r = subprocess.run([cli, "generate", "-m", TARGET, "-p", PROMPT, "-n", "20"], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    printed = r.stdout.decode("utf-8")
    assert printed.endswith("\n")  # the CLI ends its output with a newline
    assert printed[:-1] == model.generate(PROMPT, max_new_tokens=20)
