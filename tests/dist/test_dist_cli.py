"""flashkit train --dp through the command line (FLASHKIT_CLI=<binary>): two thread ranks on the CPU give the
losses of one rank with the same global batch, and every bad --dp is one line on stderr with exit status 2."""
import glob
import json
import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _find_cli():
    path = os.environ.get("FLASHKIT_CLI")
    if path:
        return path
    found = sorted(glob.glob(os.path.join(REPO, "build*", "bin", "flashkit")), key=os.path.getmtime)
    if not found:
        raise RuntimeError("set FLASHKIT_CLI to the flashkit binary (no build*/bin/flashkit found)")
    return found[-1]


CLI = _find_cli()


def run(*args, env=None):
    e = dict(os.environ, OMP_WAIT_POLICY="passive")
    e.update(env or {})
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=120, env=e)


def clean_failure(p, *needles):
    assert p.returncode == 2, f"expected exit status 2, got {p.returncode}\n{p.stderr}"
    lines = [l for l in p.stderr.splitlines() if l.startswith("flashkit: error:")]
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    d = tmp_path_factory.mktemp("dp")
    p = run("prepare-data", "--synthetic", "copy", "-o", d / "data", "--vocab-size", 64, "--seq-len", 32,
            "--examples", 200, "--val-examples", 8)
    assert p.returncode == 0, p.stderr
    r = {
        "model": {"model_type": "llama", "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
                  "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
                  "max_position_embeddings": 64, "tie_word_embeddings": True},
        "data": {"train": str(d / "data" / "train.bin"), "val": str(d / "data" / "val.bin")},
        "train": {"steps": 5, "batch_size": 4, "seq_len": 32, "lr": 3e-3, "seed": 5},
        "eval": {"batches": 1},
        "log": {"interval": 1},
        "output": {"dir": str(d / "run")},
        "threads": 2,
    }
    path = d / "recipe.json"
    path.write_text(json.dumps(r))
    return d, path


def losses(run_dir):
    with open(os.path.join(run_dir, "log.jsonl")) as f:
        return [json.loads(line)["loss"] for line in f]


def test_dp2_thread_ranks_match_one_rank(recipe):
    d, path = recipe
    one = run("train", "--config", path, "--output", d / "one", "-q")
    assert one.returncode == 0, one.stderr
    two = run("train", "--config", path, "--output", d / "two", "-q", "--dp", 2)
    assert two.returncode == 0, two.stderr
    a, b = losses(d / "one"), losses(d / "two")
    assert len(a) == len(b) == 5
    for x, y in zip(a, b):
        assert abs(x - y) <= 1e-4 * abs(x), (a, b)
    assert os.path.exists(d / "two" / "model" / "model.safetensors")


def test_bad_dp_values(recipe):
    d, path = recipe
    clean_failure(run("train", "--config", path, "--output", d / "bad0", "--dp", 0), "--dp", "must be >= 1, got 0")
    clean_failure(run("train", "--config", path, "--output", d / "bad3", "--dp", 3), "--dp 3",
                  "does not split into 3 equal shares")
    clean_failure(run("train", "--config", path, "--output", d / "badcuda", "--dp", 2, "--device", "cuda"), "--dp 2")
    clean_failure(run("train", "--config", path, "--output", d / "badenv", "--dp", 2,
                      env={"WORLD_SIZE": "3", "RANK": "0"}), "WORLD_SIZE=3")
    for name in ("bad0", "bad3", "badenv"):
        assert not os.path.exists(d / name / "log.jsonl")
