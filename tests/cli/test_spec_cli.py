"""Speculative decoding through the command line: flashkit generate --draft / --draft-tokens / --lookup / --spec-tree
/ --spec-compare (same greedy output as plain decoding, statistics on stderr and in --stats-json), bad options, and
flashkit bench spec (table + JSON) plus tools/plot_spec.py on its JSON.
"""
import json
import os
import subprocess
import sys

import pytest

from test_cli import REPO, assert_clean_failure, run

MODELS = os.path.join(REPO, "tests", "data", "models")
LLAMA = os.path.join(MODELS, "tiny-llama")
LLAMA_BF16 = os.path.join(MODELS, "tiny-llama-bf16")
GEMMA = os.path.join(MODELS, "tiny-gemma3")
GEMMA_BF16 = os.path.join(MODELS, "tiny-gemma3-bf16")
PROMPT = "1,5,6,7,8,9,5,6,7,8,10,11,5,6,7"


def out_ids(proc):
    return [int(x) for x in proc.stdout.split()]


def plain(model, n=40):
    p = run("generate", "-m", model, "--prompt-ids", PROMPT, "--ids", "--temp", "0", "-n", str(n), "--ignore-eos")
    assert p.returncode == 0, p.stderr
    return out_ids(p)


@pytest.mark.parametrize("model,spec", [
    (LLAMA, ["--lookup", "3"]),
    (LLAMA, ["--lookup", "2", "--spec-tree", "4", "--draft-tokens", "6"]),
    (GEMMA, ["--draft", GEMMA_BF16, "--draft-tokens", "3"]),
    (GEMMA, ["--draft", GEMMA_BF16, "--draft-tokens", "auto", "--max-draft-tokens", "6", "--lookup", "2"]),
])
def test_generate_speculative_matches_plain_greedy(model, spec, tmp_path):
    stats = tmp_path / "stats.json"
    p = run("generate", "-m", model, "--prompt-ids", PROMPT, "--ids", "--temp", "0", "-n", "40", "--ignore-eos",
            "--spec-compare", "--stats-json", str(stats), *spec)
    assert p.returncode == 0, p.stderr
    assert out_ids(p) == plain(model)
    assert "speculative (" in p.stderr and "acceptance" in p.stderr and "tokens/step" in p.stderr
    assert "ms/step" in p.stderr and "speed-up" in p.stderr and "(outputs identical)" in p.stderr
    s = json.loads(stats.read_text())["speculative"]
    assert s["identical_output"] is True
    assert 0 <= s["accepted"] <= s["proposed"]
    assert s["emitted"] == 39 and s["steps"] >= 1
    assert 0 <= s["acceptance_rate"] <= 1 and s["mean_accepted_length"] >= 1
    assert s["baseline_decode_tokens_per_s"] > 0 and s["speedup"] > 0
    assert s["verifier_s_per_step"] > 0


def test_generate_speculative_sampling_runs(tmp_path):
    p = run("generate", "-m", GEMMA, "--prompt-ids", PROMPT, "--ids", "--temp", "0.8", "--top-k", "20", "-n", "30",
            "--ignore-eos", "--draft", GEMMA_BF16, "--seed", "3")
    assert p.returncode == 0, p.stderr
    assert len(out_ids(p)) == 30
    assert "speculative (draft" in p.stderr


@pytest.mark.parametrize("args,names", [
    (["--spec-tree", "3"], ["--spec-tree", "--lookup"]),
    (["--lookup", "2", "--draft-tokens", "0"], ["--draft-tokens", "auto"]),
    (["--lookup", "2", "--draft-tokens", "x"], ["--draft-tokens", "'x'"]),
    (["--lookup", "99"], ["--lookup", "99"]),
    (["--lookup", "2", "--spec-tree", "0"], ["--spec-tree"]),
    (["--lookup", "2", "--max-draft-tokens", "0"], ["--max-draft-tokens"]),
    (["--spec-compare"], ["--spec-compare", "--draft"]),
    (["--draft", "/nonexistent/draft"], ["--draft", "/nonexistent/draft"]),
])
def test_generate_speculative_bad_options(args, names):
    p = run("generate", "-m", LLAMA, "--prompt-ids", PROMPT, "--ids", *args)
    assert_clean_failure(p, *names)
    assert p.returncode == 2


def test_generate_draft_with_a_larger_vocabulary_is_refused(tmp_path):
    cfg = json.load(open(os.path.join(LLAMA, "config.json")))
    cfg["vocab_size"] = 600
    d = tmp_path / "big"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    p = run("generate", "-m", LLAMA, "--prompt-ids", PROMPT, "--ids", "--random-weights", "--draft", str(d))
    assert_clean_failure(p, "vocabulary (600)", "(512)")


def test_bench_spec_table_json_and_plot(tmp_path):
    out = tmp_path / "spec.json"
    p = run("bench", "spec", "-m", GEMMA, "--draft", GEMMA_BF16, "--k", "1,3", "-n", "16", "--json", str(out),
            timeout=120)
    assert p.returncode == 0, p.stderr
    assert "speedup" in p.stdout and "baseline free" in p.stdout and "baseline grounded" in p.stdout
    j = json.loads(out.read_text())
    rows = j["rows"]
    # 2 regimes x 3 proposers x (2 K + auto)
    assert len(rows) == 18
    assert {r["proposer"] for r in rows} == {"draft", "ngram", "tree"}
    assert {r["k"] for r in rows} == {"1", "3", "auto"}
    assert all(r["identical_to_plain"] for r in rows), rows
    assert all(r["decode_tokens_per_s"] > 0 and r["speedup"] > 0 for r in rows)
    assert j["regimes"]["free"]["baseline_decode_tokens_per_s"] > 0
    # CUDA graphs of the target's steps: none on the CPU backend, reported all the same
    assert "target graph steps (speculative runs): 0 captured, 0 replayed, 0 eager" in p.stderr, p.stderr
    assert all(r["target_graph_steps"] == {"captured": 0, "replayed": 0, "eager": 0} for r in rows), rows
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        pytest.skip("matplotlib is not installed")
    png = tmp_path / "spec.png"
    q = subprocess.run([sys.executable, os.path.join(REPO, "tools", "plot_spec.py"), str(out), "-o", str(png)],
                       capture_output=True, text=True, timeout=120)
    assert q.returncode == 0, q.stderr
    assert png.stat().st_size > 1000


def test_bench_spec_bad_options():
    assert_clean_failure(run("bench", "spec", "-m", LLAMA, "--k", "0"), "--k", "0")
    assert_clean_failure(run("bench", "spec", "-m", LLAMA, "--proposers", "magic"), "--proposers", "magic")
    assert_clean_failure(run("bench", "spec", "-m", LLAMA, "--regimes", "chat"), "--regimes", "chat")
    assert_clean_failure(run("bench", "spec", "-m", LLAMA, "--proposers", "draft"), "--draft")
