"""Numeric options of the commands added beside the CLI's hardening (serve, bench serve, bench spec, generate's
speculative options, train, train-tokenizer, prepare-data, perplexity): each bad value (out of range, negative, NaN,
not a number, beyond int64) exits with status 2 and one line naming the option and its range, before anything is
loaded. Also: serve listens on the loopback interface unless --host is given, and bench serve drives loopback
servers only.
"""
import os
import subprocess
import time

import pytest

from test_argument_hardening_cli import assert_usage_error
from test_cli import CLI, REPO, run

LLAMA = os.path.join(REPO, "tests", "data", "models", "tiny-llama")
IDS = ["--prompt-ids", "1,2,3"]
BIG = "99999999999999999999"  # beyond int64


def has_http_server():
    return "not in this build" not in run("--help").stdout


needs_http = pytest.mark.skipif(not has_http_server(), reason="built without cpp-httplib (no serve command)")

SERVE = ["serve", "-m", LLAMA]
BENCH_SERVE = ["bench", "serve", "-m", LLAMA]
SPEC = ["bench", "spec", "-m", LLAMA]
GEN = ["generate", "-m", LLAMA, *IDS]
TRAIN = ["train", "--config", "recipe.json"]
BPE = ["train-tokenizer", "-o", "out", "corpus.txt"]
PREP = ["prepare-data", "-o", "out", "--synthetic", "copy"]
PPL = ["perplexity", "-m", LLAMA, "-f", "text.txt"]

# (command, option, bad value, text the message must hold besides the option: the range or the value)
SERVING = [
    (SERVE, "--port", "70000", "[0, 65535]"),
    (SERVE, "--port", "-1", "[0, 65535]"),
    (SERVE, "--threads", "100000", "100000"),
    (SERVE, "--threads", "-2", "-2"),
    (SERVE, "--ctx", "-5", "[0, 16777216]"),
    (SERVE, "--ctx", BIG, BIG),
    (SERVE, "--kv-memory", "nan", "nan"),
    (SERVE, "--kv-memory", "-1G", "-1G"),
    (SERVE, "--kv-memory", "inf", "inf"),
    (SERVE, "--block-size", "0", "[1, 1024]"),
    (SERVE, "--max-step-tokens", "100000", "[1, 65536]"),
    (SERVE, "--max-running", "0", "[1, 4096]"),
    (SERVE, "--max-tokens-limit", "0", "[1, 16777216]"),
    (SERVE, "--max-body-bytes", "10", "[256, 1073741824]"),
    (SERVE, "--max-connections", "5000", "[1, 4096]"),
    (SERVE, "--max-pending", "-1", "[1, 1048576]"),
    (SERVE, "--max-pending", "1.5", "1.5"),
    (BENCH_SERVE, "--concurrency", "1,0", "[1, 256]"),
    (BENCH_SERVE, "--concurrency", "2x", "2x"),
    (BENCH_SERVE, "--requests", "0", "[1, 10000]"),
    (BENCH_SERVE, "--prompt-tokens", "-3", "[1, 16777216]"),
    (BENCH_SERVE, "--max-tokens", "5000", "[1, 4096]"),
    (BENCH_SERVE, "--shared-prefix", "-1", "[0, 16777216]"),
    (BENCH_SERVE, "--time-limit", "nan", "nan"),
    (BENCH_SERVE, "--time-limit", "0", "(0, 3600]"),
    (BENCH_SERVE, "--seed", "-1", "-1"),
    (BENCH_SERVE, "--block-size", "2000", "[1, 1024]"),
    (SERVE, "--lookup", "65", "[0, 64]"),
    (SERVE, "--lookup", "1.5", "1.5"),
    (SERVE, "--draft-tokens", "0", "[1, 64] or auto"),
    (SERVE, "--draft-tokens", "nan", "nan"),
    (SERVE, "--max-draft-tokens", "65", "[1, 64]"),
    (SERVE, "--spec-max-batch", "5000", "[0, 4096]"),
    (BENCH_SERVE, "--lookup", "-1", "[0, 64]"),
    (BENCH_SERVE, "--draft-tokens", "99", "[1, 64] or auto"),
]
OTHERS = [
    (SPEC, "--k", "0", "[1, 64]"),
    (SPEC, "--k", "1,65", "[1, 64]"),
    (SPEC, "--max-tokens", "1", "[2, "),
    (SPEC, "--lookup", "0", "[1, 64]"),
    (SPEC, "--tree-width", "1", "[2, 64]"),
    (SPEC, "--temp", "nan", "nan"),
    (SPEC, "--temp", "-1", "[0, 1000]"),
    (SPEC, "--repeats", "0", "[1, 100]"),
    (SPEC, "--threads", "100000", "100000"),
    (SPEC, "--ctx", "-1", "[0, 16777216]"),
    (GEN, "--draft-tokens", "0", "[1, 64] or auto"),
    (GEN, "--draft-tokens", "-4", "[1, 64] or auto"),
    (GEN, "--draft-tokens", "nan", "nan"),
    (GEN, "--max-draft-tokens", "65", "[1, 64]"),
    (GEN, "--lookup", "-1", "[0, 64]"),
    (GEN, "--spec-tree", "0", "[1, 64]"),
    (GEN, "--spec-tree", BIG, BIG),
    (TRAIN, "--steps", "0", "[1, "),
    (TRAIN, "--steps", "-5", "[1, "),
    (TRAIN, "--threads", "100000", "100000"),
    (TRAIN, "--threads", "-1", "-1"),
    (BPE, "--vocab-size", "100", "[256, 16777216]"),
    (BPE, "--vocab-size", BIG, BIG),
    (BPE, "--min-frequency", "0", "[1, "),
    (BPE, "--max-bytes", "-1", "[0, "),
    (PREP, "--val-fraction", "nan", "nan"),
    (PREP, "--val-fraction", "1", "[0, 1)"),
    (PREP, "--val-fraction", "-0.1", "[0, 1)"),
    (PREP, "--vocab-size", "8", "[16, 65536]"),
    (PREP, "--seq-len", "4", "[8, 16777216]"),
    (PREP, "--examples", "0", "[1, 4294967296]"),
    (PREP, "--val-examples", "-1", "[0, 4294967296]"),
    (PREP, "--seed", "-1", "-1"),
    (PPL, "--ctx", "-1", "[0, 16777216]"),
    (PPL, "--stride", "-1", "[0, 16777216]"),
    (PPL, "--threads", "100000", "100000"),
]


def case_id(case):
    cmd, opt, value, _ = case
    return f"{cmd[0]}{'-' + cmd[1] if cmd[0] == 'bench' else ''}{opt}={value}"


@needs_http
@pytest.mark.parametrize("case", SERVING, ids=case_id)
def test_serving_options_have_ranges(case):
    cmd, opt, value, text = case
    assert_usage_error(run(*cmd, opt, value, timeout=30), opt, text)


@pytest.mark.parametrize("case", OTHERS, ids=case_id)
def test_spec_and_train_options_have_ranges(case):
    cmd, opt, value, text = case
    assert_usage_error(run(*cmd, opt, value, timeout=30), opt, text)


def test_synthetic_data_memory_is_refused_before_allocating(tmp_path):
    p = run("prepare-data", "-o", str(tmp_path / "out"), "--synthetic", "copy", "--examples", "4294967296",
            "--seq-len", "16777216")
    assert_usage_error(p, "out of memory", "--examples", "--seq-len")
    assert not (tmp_path / "out").exists()


def test_perplexity_text_file_is_capped(tmp_path):
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate((64 << 20) + 1)  # sparse: one byte over the limit
    assert_usage_error(run("perplexity", "-m", LLAMA, "-f", str(big)), "-f/--file", "64 MiB")


# ------------------------------------------------------------------------------------------- loopback only

@needs_http
@pytest.mark.parametrize("url,text", [
    ("http://10.0.0.1:80", "loopback"),
    ("http://0.0.0.0:8080", "loopback"),
    ("http://127.0.0.1.example.com:80", "loopback"),
    ("http://localhost@10.0.0.1:80", "loopback"),
    ("http://127.0.0.2:80", "loopback"),
    ("https://127.0.0.1:443", "http://127.0.0.1:PORT"),
    ("127.0.0.1:8080", "http://127.0.0.1:PORT"),
    ("http://127.0.0.1", "http://127.0.0.1:PORT"),
    ("http://127.0.0.1:0", "PORT in [1, 65535]"),
    ("http://127.0.0.1:99999", "PORT in [1, 65535]"),
    ("http://127.0.0.1:80x", "PORT in [1, 65535]"),
])
def test_bench_serve_refuses_non_loopback_urls(url, text):
    p = run("bench", "serve", "--url", url, "--requests", "1", timeout=30)
    assert_usage_error(p, "--url", text)


@needs_http
def test_bench_serve_has_no_host_option():
    assert_usage_error(run("bench", "serve", "-m", LLAMA, "--host", "0.0.0.0"), "--host")


@needs_http
def test_serve_refuses_an_empty_host():
    assert_usage_error(run("serve", "-m", LLAMA, "--host", ""), "--host", "empty")


def listening_addresses(port):
    """Local addresses (hex, as /proc/net/tcp{,6} writes them) of the sockets listening on `port`."""
    found = []
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(name):
            continue
        for line in open(name).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, p = local.split(":")
            if int(p, 16) == port and state == "0A":  # TCP_LISTEN
                found.append(addr)
    return found


@needs_http
@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs /proc/net/tcp")
def test_serve_listens_on_loopback_by_default(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    for f in os.listdir(LLAMA):
        (model / f).write_bytes(open(os.path.join(LLAMA, f), "rb").read())
    tok = os.path.join(REPO, "tests", "data", "tokenizers", "tiny_bytelevel", "tokenizer.json")
    (model / "tokenizer.json").write_bytes(open(tok, "rb").read())
    proc = subprocess.Popen([CLI, "serve", "-m", str(model), "--port", "0", "--threads", "1", "--ctx", "256"],
                            stderr=subprocess.PIPE, text=True)
    try:
        port, log, deadline = None, [], time.time() + 30
        while time.time() < deadline and port is None:
            line = proc.stderr.readline()
            if not line:
                break
            log.append(line)
            if "listening on http://" in line:
                assert "listening on http://127.0.0.1:" in line, line
                port = int(line.split("127.0.0.1:")[1].split()[0])
        assert port, "server did not start: " + "".join(log)
        # 0100007F is 127.0.0.1 in /proc/net/tcp's byte order; nothing listens on the wildcard or another address.
        assert listening_addresses(port) == ["0100007F"], listening_addresses(port)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
