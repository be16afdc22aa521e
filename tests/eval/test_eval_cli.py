"""flashkit eval through the command line (FLASHKIT_CLI=<binary>) on the shipped tiny model models/target (context
512), and tools/plots/eval_heatmap.py on its output; every bad input is one line on stderr and exit status 2.
"""
import glob
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(REPO, "models", "target")


def _find_cli():
    path = os.environ.get("FLASHKIT_CLI")
    if path:
        return path
    found = sorted(glob.glob(os.path.join(REPO, "build*", "bin", "flashkit")), key=os.path.getmtime)
    if not found:
        raise RuntimeError("set FLASHKIT_CLI to the flashkit binary (no build*/bin/flashkit found)")
    return found[-1]


CLI = _find_cli()


def run(*args, timeout=120):
    e = dict(os.environ, OMP_WAIT_POLICY="passive")
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=e)


def clean_failure(p, *needles):
    assert p.returncode == 2, f"expected exit status 2, got {p.returncode}\n{p.stderr}"
    for bad in ("Traceback", "terminate called", "Segmentation", "Aborted"):
        assert bad not in p.stderr
    lines = [l for l in p.stderr.splitlines() if l.startswith("flashkit: error:")]
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_eval_writes_results_and_the_heatmap(tmp_path):
    out = tmp_path / "r.json"
    p = run("eval", "-m", MODEL, "--task", "passkey,cwe", "--lengths", "240", "--depths", "0.5", "--samples", "1",
            "--seed", "3", "-o", out)
    assert p.returncode == 0, p.stderr
    assert "[1/2] passkey" in p.stderr and "[2/2] cwe" in p.stderr  # progress, one line per cell
    doc = json.loads(out.read_text())
    assert doc["seed"] == 3 and doc["samples"] == 1
    assert doc["batch"] == 8 and doc["batched"] is True  # the CPU's default: through the serving engine
    cells = doc["cells"]
    assert [(c["task"], c["length"], c["depth"]) for c in cells] == [("passkey", 240, 0.5), ("cwe", 240, None)]
    for c in cells:
        assert 0 <= c["accuracy"] <= 1 and c["n"] == 1 and c["tokens_per_s"] > 0
        assert 170 < c["prompt_tokens_mean"] <= 240 - 6  # the answer budget is kept free
    png = tmp_path / "h.png"
    h = subprocess.run(["/usr/bin/python3", os.path.join(REPO, "tools", "plots", "eval_heatmap.py"), str(out), "-o",
                        str(png)], capture_output=True, text=True, timeout=120)
    assert h.returncode == 0, h.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_batched_and_session_loop_agree(tmp_path):
    cells = {}
    for batch in (1, 4):
        out = tmp_path / f"b{batch}.json"
        p = run("eval", "-m", MODEL, "--task", "passkey", "--lengths", "300", "--depths", "0,1", "--samples", "3",
                "--batch", batch, "-o", out)
        assert p.returncode == 0, p.stderr
        doc = json.loads(out.read_text())
        assert doc["batched"] is (batch > 1)
        cells[batch] = doc["cells"]
        if batch > 1:
            assert "of prompt tokens from its prefix cache" in p.stderr
            assert doc["prefix_hit_tokens"] > 0 and cells[batch][1]["cached_tokens"] > 0  # depth 1: the haystack
    strip = lambda cs: [(c["task"], c["length"], c["depth"], c["accuracy"], c["prompt_tokens_mean"]) for c in cs]
    assert strip(cells[1]) == strip(cells[4])


@pytest.mark.parametrize("args,needles", [
    (["--task", "passkey", "--lengths", "1024"], ["--lengths", "1024", "context of 512"]),
    (["--task", "needle", "--lengths", "256"], ["--task", "unknown task \"needle\""]),
    (["--task", "passkey", "--lengths", "256", "--samples", "0"], ["--samples"]),
    (["--task", "passkey", "--lengths", "256", "--depths", "1.5"], ["--depths"]),
    (["--task", "niah_single", "--lengths", "40"], ["--lengths", "too short", "niah_single"]),
    (["--task", "passkey", "--lengths", "0"], ["--lengths"]),
    (["--task", "passkey", "--lengths", "99999999999999999999"], ["--lengths"]),
    (["--task", "passkey", "--lengths", "256", "--samples", "-1"], ["--samples"]),
    (["--task", "passkey", "--lengths", "256", "--depths", "nan"], ["--depths"]),
    (["--task", "passkey", "--lengths", "256", "--seed", "-1"], ["--seed"]),
    (["--task", "passkey", "--lengths", "256", "--batch", "-1"], ["--batch"]),
    (["--task", "passkey", "--lengths", "256", "--batch", "4097"], ["--batch"]),
    (["--task", "passkey", "--lengths", "256", "-o", "/nonexistent/dir/r.json"], ["-o/--output", "cannot write"]),
])
def test_bad_input_is_one_line_and_status_2(args, needles):
    clean_failure(run("eval", "-m", MODEL, *args), *needles)


def test_heatmap_rejects_a_file_that_is_not_a_result(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("[1, 2]")
    h = subprocess.run(["/usr/bin/python3", os.path.join(REPO, "tools", "plots", "eval_heatmap.py"), str(bad), "-o",
                        str(tmp_path / "h.png")], capture_output=True, text=True, timeout=60)
    assert h.returncode == 2 and "not a flashkit eval result" in h.stderr


def test_token_id_mqar_on_a_model_without_tokenizer(tmp_path):
    """A model trained on prepare-data --synthetic mqar (no tokenizer.json): mqar runs on token ids, text tasks are
    refused, and a length beyond the model's context is refused before loading."""
    data = tmp_path / "data"
    p = run("prepare-data", "--synthetic", "mqar", "-o", data, "--vocab-size", "64", "--seq-len", "32",
            "--examples", "50", "--seed", "1")
    assert p.returncode == 0, p.stderr
    recipe = {
        "model": {"model_type": "llama", "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
                  "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8,
                  "max_position_embeddings": 32, "tie_word_embeddings": True},
        "data": {"train": str(data / "train.bin")},
        "train": {"steps": 2, "batch_size": 2, "seq_len": 32},
        "output": {"dir": str(tmp_path / "run")},
    }
    (tmp_path / "r.json").write_text(json.dumps(recipe))
    p = run("train", "--config", tmp_path / "r.json", "-q")
    assert p.returncode == 0, p.stderr
    model = tmp_path / "run" / "model"
    assert not (model / "tokenizer.json").exists()
    p = run("eval", "-m", model, "--task", "mqar", "--lengths", "18,32", "--samples", "3")
    assert p.returncode == 0, p.stderr
    assert "token-id tasks" in p.stderr
    cells = json.loads(p.stdout)["cells"]
    assert [(c["task"], c["length"], c["depth"], c["n"]) for c in cells] == [
        ("mqar", 18, None, 3), ("mqar", 32, None, 3)]
    assert all(0 <= c["accuracy"] <= 1 for c in cells)
    assert cells[1]["prompt_tokens_mean"] == 4 * 7 + 2  # [BOS] 7 pairs [SEP] 7 queries
    clean_failure(run("eval", "-m", model, "--task", "passkey", "--lengths", "32"), "--task", "no tokenizer")
    clean_failure(run("eval", "-m", model, "--task", "mqar", "--lengths", "64"), "--lengths", "context of 32")


def _safetensors_numel(path, skip=("norm",)):
    """Parameters in a safetensors file (from its header), leaving out tensors whose name contains one of `skip`."""
    import struct
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    total = 0
    for name, t in header.items():
        if name == "__metadata__" or any(s in name for s in skip):
            continue
        k = 1
        for d in t["shape"]:
            k *= d
        total += k
    return total


def test_mamba_mqar_model_trains_evaluates_and_is_summarised(tmp_path):
    """The Mamba kind of the MQAR sweep end to end through the CLI: flashkit train on a model_type mamba recipe,
    flashkit eval --task mqar on the exported MambaForCausalLM directory, and tools/eval/mqar_summary.py counting
    its parameters as the checkpoint holds them (norms left out, as for the attention kinds)."""
    data = tmp_path / "data-16"
    p = run("prepare-data", "--synthetic", "mqar", "-o", data, "--vocab-size", "64", "--seq-len", "16",
            "--examples", "50", "--seed", "1")
    assert p.returncode == 0, p.stderr
    recipe = json.load(open(os.path.join(REPO, "models", "recipes", "mqar-mamba.json")))
    recipe["model"].update(hidden_size=16, intermediate_size=32)
    recipe["data"] = {"train": str(data / "train.bin")}
    recipe["train"].update(steps=3, batch_size=2, seq_len=16, warmup_steps=0)
    recipe["log"] = {"interval": 1}
    run_dir = tmp_path / "sweep" / "runs" / "mamba-w16-s16"
    recipe["output"] = {"dir": str(run_dir)}
    (tmp_path / "r.json").write_text(json.dumps(recipe))
    p = run("train", "--config", tmp_path / "r.json", "-q")
    assert p.returncode == 0, p.stderr
    model = run_dir / "model"
    assert json.load(open(model / "config.json"))["architectures"] == ["MambaForCausalLM"]
    (tmp_path / "sweep" / "eval").mkdir()
    out = tmp_path / "sweep" / "eval" / "mamba-w16-s16.json"
    p = run("eval", "-m", model, "--task", "mqar", "--lengths", "16", "--samples", "3", "-o", out)
    assert p.returncode == 0, p.stderr
    cell = json.load(open(out))["cells"][0]
    assert cell["task"] == "mqar" and cell["n"] == 3 and 0 <= cell["accuracy"] <= 1
    s = subprocess.run([sys.executable, os.path.join(REPO, "tools", "eval", "mqar_summary.py"), tmp_path / "sweep",
                        "--tag", "t", "--results", tmp_path / "res", "--vocab", "64"],
                       capture_output=True, text=True, timeout=120)
    assert s.returncode == 0, s.stderr
    row = json.load(open(tmp_path / "res" / "eval-mqar-t.json"))["rows"][0]
    assert row["kind"] == "mamba" and row["pairs"] == 3
    assert row["parameters"] == _safetensors_numel(model / "model.safetensors")
    # A Mamba recipe the trainer cannot take is one line and status 2, naming the field.
    recipe["model"]["use_bias"] = True
    (tmp_path / "bad.json").write_text(json.dumps(recipe))
    clean_failure(run("train", "--config", tmp_path / "bad.json"), "use_bias")
