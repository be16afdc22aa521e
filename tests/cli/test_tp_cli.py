"""flashkit generate / serve --tp N: tensor-parallel thread ranks (docs/distributed.md, "Tensor-parallel inference") give the greedy output of one
rank, and configs that do not split are refused in one line naming --tp and the field (exit status 2)."""
import json
import os
import socket
import subprocess
import time
import urllib.request

import pytest

from test_cli import CLI, REPO, assert_clean_failure, run

TARGET = os.path.join(REPO, "models", "target")
LLAMA = os.path.join(REPO, "tests", "data", "models", "tiny-llama")


def greedy(model, *extra):
    p = run("generate", "-m", model, "--prompt-ids", "1,5,9,200,33,4", "-n", "12", "--temp", "0", "--ignore-eos",
            "--ids", *extra)
    assert p.returncode == 0, p.stderr
    return [int(x) for x in p.stdout.split()]


@pytest.mark.parametrize("tp", ["2", "4"])
def test_generate_tp_matches_one_rank(tp):
    assert greedy(TARGET, "--tp", tp) == greedy(TARGET)


def test_generate_text_tp2_on_the_shipped_model():
    args = ("generate", "-m", TARGET, "-p", "Once upon a time", "-n", "16", "--temp", "0")
    one, two = run(*args), run(*args, "--tp", "2")
    assert one.returncode == 0 and two.returncode == 0, one.stderr + two.stderr
    assert two.stdout == one.stdout


def test_generate_tp2_with_a_draft_or_lookup_matches_one_rank():
    draft = os.path.join(REPO, "models", "draft")  # 3 heads: the draft runs on one rank
    for spec in (["--draft", draft], ["--lookup", "3"]):
        assert greedy(TARGET, "--tp", "2", *spec) == greedy(TARGET)


@pytest.mark.parametrize("tp,names", [("3", ["--tp 3", "num_attention_heads"]), ("0", ["--tp 0"]),
                                      ("65", ["--tp 65"]), ("-1", ["--tp -1"])])
def test_generate_bad_tp(tp, names):
    p = run("generate", "-m", LLAMA, "--prompt-ids", "1,2", "-n", "2", "--tp", tp)
    assert p.returncode == 2, p.stderr
    assert_clean_failure(p, *names)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_tp2_matches_generate():
    port = free_port()
    srv = subprocess.Popen([CLI, "serve", "-m", TARGET, "--tp", "2", "--port", str(port), "--ctx", "256"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}).encode()
        for _ in range(300):
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=30) as r:
                    out = json.load(r)
                break
            except (ConnectionError, urllib.error.URLError):
                assert srv.poll() is None, srv.stderr.read()
                time.sleep(0.1)
        else:
            pytest.fail("flashkit serve --tp 2 did not answer")
        text = out["choices"][0]["text"]
    finally:
        srv.terminate()
        srv.wait(timeout=30)
    p = run("generate", "-m", TARGET, "-p", "Once upon a time", "-n", "16", "--temp", "0", "--ctx", "256")
    assert p.returncode == 0, p.stderr
    assert text.strip() and p.stdout.rstrip("\n") == text.rstrip("\n")  # generate ends its output with a newline


def test_serve_bad_tp():
    p = run("serve", "-m", TARGET, "--tp", "3", "--port", "0")
    assert p.returncode == 2, p.stderr
    assert_clean_failure(p, "--tp 3", "num_attention_heads")
