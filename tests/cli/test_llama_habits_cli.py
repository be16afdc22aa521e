"""llama.cpp's common options, usage-error exit statuses, help defaults, tokenizer.json paths, no unasked files and
passive CPU waits (issue 22). Run by ctest with FLASHKIT_CLI=<path to the binary>."""
import json
import os
import re
import shutil
import subprocess

import pytest

from test_cli import CLI, REPO, assert_clean_failure, run
from test_generate_cli import LLAMA, llama_with_tokenizer, out_ids  # noqa: F401 (fixture)

TOKENIZER_JSON = os.path.join(REPO, "tests", "data", "tokenizers", "tiny_bytelevel", "tokenizer.json")


# --- usage errors: one line on stderr, exit status 2 ------------------------------------------------------

@pytest.mark.parametrize("args", [
    ("generate", "-m", LLAMA, "--no-such-option"),            # unknown option
    ("generate", "-m"),                                        # missing value
    ("generate", "-m", LLAMA, "--prompt-ids", "1", "-n", "x"),  # bad number
    ("generate", "-m", LLAMA, "--prompt-ids", "1", "-c", "-5"),  # out of range
    ("tokenize", "-m", LLAMA, "one", "two"),                   # extra positional
    ("bench", "attention", "--seqlen"),                        # missing value, nested subcommand
    ("no-such-command",),
    ("roofline", "gemm", "--sizes", "abc"),
])
def test_usage_errors_exit_2(args):
    p = run(*args)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert_clean_failure(p)


# --- llama.cpp aliases -------------------------------------------------------------------------------------

def test_generate_llama_cpp_aliases_match_long_options(llama_with_tokenizer, tmp_path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("hello world")
    long = run("generate", "-m", llama_with_tokenizer, "--prompt-file", str(prompt), "--max-tokens", "5",
               "--ctx", "64", "--threads", "1", "--temp", "0", "--ignore-eos", "--ids", "-q")
    short = run("generate", "-m", llama_with_tokenizer, "-f", str(prompt), "--n-predict", "5", "-c", "64",
                "-t", "1", "--temp", "0", "--ignore-eos", "--ids", "-q")
    assert long.returncode == 0 and short.returncode == 0, (long.stderr, short.stderr)
    assert out_ids(short) == out_ids(long) and len(out_ids(short)) == 5
    ctx = run("generate", "-m", llama_with_tokenizer, "-p", "hello", "--ctx-size", "64", "-n", "3", "-q")
    assert ctx.returncode == 0, ctx.stderr


def test_ngl_zero_is_the_cpu_and_a_contradiction_is_refused(llama_with_tokenizer):
    p = run("generate", "-m", llama_with_tokenizer, "-p", "hi", "-ngl", "0", "-n", "2", "-q")
    assert p.returncode == 0, p.stderr
    q = run("generate", "-m", llama_with_tokenizer, "-p", "hi", "-ngl", "99", "--device", "cpu", "-n", "2")
    assert q.returncode == 2
    assert_clean_failure(q, "-ngl", "--device cpu")


def test_cnv_turns_generate_into_chat(llama_with_tokenizer):
    p = subprocess.run([CLI, "generate", "-m", llama_with_tokenizer, "-cnv", "-p", "Be brief.", "-n", "3",
                        "--temp", "0", "--ignore-eos"], input="hi\n/exit\n", capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert "decode" in p.stderr  # chat's per-turn line


def test_help_shows_the_real_defaults():
    chat = run("chat", "--help").stdout
    gen = run("generate", "--help").stdout
    assert re.search(r"--temp [^\n]*=0\.7\b", chat), chat  # chat's own default, not generate's
    assert re.search(r"--temp [^\n]*=0\.8\b", gen), gen
    for text in (chat, gen):
        assert re.search(r"--n-predict [^\n]*=128\b", text), text
        assert re.search(r"--top-k [^\n]*=40\b", text), text


# --- tokenizer.json file paths -----------------------------------------------------------------------------

def test_tokenize_accepts_a_tokenizer_json_file():
    by_dir = run("tokenize", "-m", os.path.dirname(TOKENIZER_JSON), "hello world")
    by_file = run("tokenize", "-m", TOKENIZER_JSON, "hello world")
    assert by_dir.returncode == 0 and by_file.returncode == 0, (by_dir.stderr, by_file.stderr)
    assert by_file.stdout == by_dir.stdout and by_file.stdout.strip()
    back = run("detokenize", "-m", TOKENIZER_JSON, by_file.stdout.strip())
    assert back.returncode == 0 and back.stdout == "hello world\n", back.stderr


def test_tokenize_refuses_another_file(tmp_path):
    other = tmp_path / "vocab.json"
    shutil.copy(TOKENIZER_JSON, other)
    p = run("tokenize", "-m", str(other), "hi")
    assert p.returncode == 2
    assert_clean_failure(p, "-m/--model", "tokenizer.json")


# --- no files unless asked ---------------------------------------------------------------------------------

def test_profile_writes_a_trace_only_when_asked(tmp_path):
    p = subprocess.run([CLI, "profile", "gelu", "--n", "4096", "--reps", "1"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert os.listdir(tmp_path) == []
    trace = tmp_path / "t.json"
    q = run("profile", "gelu", "--n", "4096", "--reps", "1", "--trace", str(trace))
    assert q.returncode == 0, q.stderr
    assert trace.stat().st_size > 0


# --- passive CPU waits --------------------------------------------------------------------------------------

def _info(**env_changes):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT",
                                                            "FLASHKIT_CPU_WAIT")}
    env.update(env_changes)
    p = subprocess.run([CLI, "info"], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    return next(line for line in p.stdout.splitlines() if line.startswith("cpu waits"))


def test_cpu_threads_wait_passively_by_default():
    assert _info().endswith("passive")
    assert _info(FLASHKIT_CPU_WAIT="active").endswith("active (spinning)")
    assert _info(OMP_WAIT_POLICY="active").endswith("active (spinning)")  # the user's setting wins


# --- progress on stderr only when needed ---------------------------------------------------------------------

def test_short_roofline_gemm_prints_no_progress_and_quiet_is_accepted():
    for extra in ((), ("--quiet",)):
        p = run("roofline", "gemm", "--sizes", "32", "--impl", "blas", "--seconds", "0.01", *extra)
        assert p.returncode == 0, p.stderr
        assert "roofline gemm:" not in p.stderr  # a line every few seconds: none in a short run


def test_bench_quiet_drops_the_row_progress():
    args = ("bench", "attention", "--seqlen", "32", "--heads", "1", "--head-dim", "16", "--repeats", "1",
            "--impl", "flash")
    loud, quiet = run(*args), run(*args, "-q")
    assert loud.returncode == 0 and quiet.returncode == 0, (loud.stderr, quiet.stderr)
    assert "[1/" in loud.stderr and "[1/" not in quiet.stderr


# --- one JSON convention: --json alone writes one JSON document to stdout -----------------------------------

@pytest.mark.parametrize("args", [
    ("roofline",),
    ("roofline", "gemm", "--sizes", "32", "--impl", "blas", "--seconds", "0.01"),
    ("profile", "gelu", "--n", "4096", "--reps", "1"),
    ("profile", "attention", "-N", "64", "--heads", "1", "-d", "16", "--reps", "1"),
    ("bench", "attention", "--seqlen", "32", "--heads", "1", "--head-dim", "16", "--repeats", "1"),
    ("tokenize", "-m", os.path.dirname(TOKENIZER_JSON), "hello"),
    ("cost", "attention"),
])
def test_json_flag_writes_one_document_to_stdout(args):
    p = run(*args, "--json")
    assert p.returncode == 0, p.stderr
    json.loads(p.stdout)  # nothing else on stdout: tables and progress went to stderr


def test_json_file_keeps_the_text_report_on_stdout(tmp_path):
    out = tmp_path / "g.json"
    p = run("roofline", "gemm", "--sizes", "32", "--impl", "blas", "--seconds", "0.01", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert "blas" in p.stdout
    assert json.loads(out.read_text())["results"]


@pytest.mark.parametrize("args", [
    ("bench", "attention", "--seqlen", "32", "--heads", "1", "--head-dim", "16", "--repeats", "1", "-q"),
    ("roofline", "gemm", "--sizes", "32", "--impl", "blas", "--seconds", "0.01"),
])
def test_threads_short_option(args):
    p = run(*args, "-t", "1")
    assert p.returncode == 0, p.stderr
