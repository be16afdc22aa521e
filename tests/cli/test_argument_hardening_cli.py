"""The CLI's hardening: every numeric option has a range (no overflow, NaN, negatives or silent defaults), thread
counts and memory are bounded before anything is allocated, input files are read with a size cap, every usage error
and invalid input exits with status 2 and one line naming what was wrong, write errors are reported, and one bad
line does not end a chat session. Each case was once accepted, crashed, hung or printed raw exception text.
"""
import os
import subprocess

import pytest

from test_cli import CLI, REPO, assert_clean_failure, run
from test_generate_cli import LLAMA, llama_with_tokenizer  # noqa: F401 (fixture)

IDS = ["--prompt-ids", "1,2,3"]
TOKENIZER = os.path.join(REPO, "tests", "data", "tokenizers", "tiny_bytelevel")


def assert_usage_error(proc, *names):
    """Exit status 2 (not CLI11's 10x codes, not 3), one short line naming each of `names`."""
    assert_clean_failure(proc, *names)
    assert proc.returncode == 2, f"exit status {proc.returncode}, expected 2\n{proc.stderr}"
    for raw in ("stoll", "_M_create", "max_size", "bad_alloc", "std::"):
        assert raw not in proc.stderr, proc.stderr


@pytest.mark.parametrize("args,names", [
    (["generate", "-m", LLAMA, *IDS, "-n", "18446744073709551616"], ["--max-tokens", "18446744073709551616"]),
    (["generate", "-m", LLAMA, *IDS, "-n", "0"], ["--max-tokens", "[1,"]),
    (["generate", "-m", LLAMA, *IDS, "-n", "1e9"], ["--max-tokens", "1e9"]),
    (["generate", "-m", LLAMA, *IDS, "--temp", "nan"], ["--temp", "nan"]),
    (["generate", "-m", LLAMA, *IDS, "--temp", "-1"], ["--temp"]),
    (["generate", "-m", LLAMA, *IDS, "--top-p", "0"], ["--top-p"]),
    (["generate", "-m", LLAMA, *IDS, "--top-k", "-3"], ["--top-k"]),
    (["generate", "-m", LLAMA, *IDS, "--seed", "-1"], ["--seed"]),
    (["generate", "-m", LLAMA, *IDS, "--ctx", "-5"], ["--ctx"]),
    (["generate", "-m", LLAMA, *IDS, "--prefill-chunk", "0"], ["--prefill-chunk"]),
    (["roofline", "--measure", "--triad-mb", "0"], ["--triad-mb"]),
    (["roofline", "--measure", "--seconds", "nan"], ["--seconds", "nan"]),
    (["roofline", "--measure", "--seconds", "-1"], ["--seconds"]),
    (["roofline", "gemm", "--sizes", "-4"], ["--sizes"]),
    (["cost", "-m", os.path.join(REPO, "models", "configs", "gemma-3-270m.json"), "--prefill", "-1"], ["--prefill"]),
    (["cost", "attention", "-N", "0"], ["--seqlen"]),
    (["profile", "decode", "--layers", "1000000000"], ["--layers", "[1, 4096]"]),
    (["profile", "attention", "--seqlen", "1e9"], ["--seqlen", "1e9"]),
    (["profile", "gelu", "--n", "-1"], ["--n"]),
    (["profile", "gelu", "--reps", "0"], ["--reps"]),
    (["bench", "attention", "--seqlen", "99999999999999999999"], ["--seqlen"]),
])
def test_numeric_options_have_ranges(args, names):
    assert_usage_error(run(*args, timeout=30), *names)


@pytest.mark.parametrize("cmd", [
    ["generate", "-m", LLAMA, *IDS, "--threads", "100000"],
    ["roofline", "--measure", "--threads", "100000"],
    ["roofline", "gemm", "--threads", "100000"],
    ["bench", "attention", "--threads", "100000"],
])
def test_threads_are_bounded(cmd):
    assert_usage_error(run(*cmd, timeout=30), "--threads", "100000")


def test_usage_errors_exit_2():
    assert_usage_error(run("generate"), "--model")                    # CLI11 RequiredError (was 106)
    assert_usage_error(run("generate", "-m", LLAMA, "--bogus"), "--bogus")  # unexpected argument (was 109)
    assert_usage_error(run("frobnicate"), "frobnicate")
    assert_usage_error(run(), "subcommand")
    assert run("--help").returncode == 0
    assert run("generate", "--help").returncode == 0


def test_context_memory_is_refused_before_allocating():
    # 131072 positions of tiny-llama's KV cache (100 MB), beyond a 64 MiB limit: refused up front, saying why.
    env = dict(os.environ, FLASHKIT_MAX_WORKSPACE_BYTES=str(64 << 20))
    p = subprocess.run([CLI, "generate", "-m", LLAMA, *IDS, "--ctx", "131072"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert_usage_error(p, "out of memory", "131072 tokens", "--ctx")


def test_context_beyond_the_model_is_refused():
    assert_usage_error(run("generate", "-m", LLAMA, *IDS, "--ctx", "8388608"), "max_context")


def test_prompt_and_token_files_are_capped():
    # /dev/zero never ends: read up to the 64 MiB cap, then a clear error (not bad_alloc after minutes).
    assert_usage_error(run("generate", "-m", LLAMA, "--prompt-file", "/dev/zero", timeout=60), "--prompt-file",
                       "64 MiB")
    assert_usage_error(run("tokenize", "-m", TOKENIZER, "-f", "/dev/zero", timeout=60), "--file", "64 MiB")
    p = subprocess.run([CLI, "tokenize", "-m", TOKENIZER, "-f", "-"], stdin=open("/dev/zero", "rb"),
                       capture_output=True, timeout=60)
    assert p.returncode == 2 and b"standard input" in p.stderr, p.stderr


def test_write_errors_are_reported(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    p = run("generate", "-m", LLAMA, *IDS, "-n", "2", "--ids", "-q", "--stats-json", "/dev/full")
    assert_usage_error(p, "--stats-json")
    p = run("generate", "-m", LLAMA, *IDS, "-n", "2", "--ids", "-q", "-o", "/dev/full")
    assert_usage_error(p, "-o/--output")
    with open("/dev/full", "w") as full:
        p = subprocess.run([CLI, "info"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=30)
    assert p.returncode != 0 and "standard output" in p.stderr, p.stderr


def test_closed_stdout_is_an_error():
    p = subprocess.run(f"'{CLI}' info >&-", shell=True, capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and "standard output" in p.stderr, (p.returncode, p.stderr)
    # Output of a command that opens files must not land in one of them (the closed descriptor is reused).
    p = subprocess.run(f"'{CLI}' generate -m '{LLAMA}' --prompt-ids 1,2,3 -n 2 --ids -q >&-", shell=True,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "standard output" in p.stderr, (p.returncode, p.stderr)


def test_chat_survives_an_invalid_utf8_line(llama_with_tokenizer):  # noqa: F811
    p = subprocess.run([CLI, "chat", "-m", llama_with_tokenizer, "-n", "3", "--temp", "0", "--ignore-eos"],
                       input=b"hello\n\xff\xfe broken\nagain\n/exit\n", capture_output=True, timeout=60)
    err = p.stderr.decode("utf-8", "replace")
    assert p.returncode == 0, err
    assert "line 2" in err and "UTF-8" in err, err
    assert err.count("[ttft") == 2, err  # the turns before and after the bad line both ran


def test_trace_and_json_write_errors(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    tiny = ["--seqlen", "32", "--heads", "1", "--head-dim", "16", "--repeats", "1", "--warmup", "0", "--impl", "flash", "--pass", "fwd"]
    assert_usage_error(run("bench", "attention", *tiny, "--json", "/dev/full"), "--json", "/dev/full")
    assert_usage_error(run("profile", "gelu", "--n", "1024", "--reps", "1", "--trace", "/dev/full"), "/dev/full")


@pytest.mark.parametrize("cmd", [
    ["profile", "attention", "--seqlen", "4194304", "--heads", "8"],
    ["profile", "layer", "-m", os.path.join(REPO, "models", "configs", "gemma-3-270m.json"), "--prefill", "4194304"],
    ["profile", "gelu", "--n", "2147483648"],
    ["roofline", "gemm", "--sizes", "65536"],
])
def test_analysis_memory_is_refused_before_allocating(cmd):
    env = dict(os.environ, FLASHKIT_MAX_WORKSPACE_BYTES=str(256 << 20))
    p = subprocess.run([CLI, *cmd], capture_output=True, text=True, timeout=60, env=env)
    assert_usage_error(p, "out of memory", "GB")
