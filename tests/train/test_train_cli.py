"""flashkit train | train-tokenizer | prepare-data | perplexity through the command line (FLASHKIT_CLI=<binary>),
and tools/plot_training.py: the whole pipeline on the repository's own documentation, then every bad input
(one line on stderr, exit status 2, nothing written that was not asked for).
"""
import glob
import json
import os
import shutil
import struct
import subprocess
import sys

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


def run(*args, env=None, timeout=120):
    e = dict(os.environ, OMP_WAIT_POLICY="passive")
    e.update(env or {})
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=e)


def ok(p):
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stderr}"
    return p


def clean_failure(p, *needles):
    assert p.returncode == 2, f"expected exit status 2, got {p.returncode}\n{p.stderr}"
    for bad in ("Traceback", "terminate called", "Segmentation", "Aborted"):
        assert bad not in p.stderr
    lines = [l for l in p.stderr.splitlines() if l.startswith("flashkit: error:")]
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


DOCS = sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))


def tiny_recipe(d, steps=30, **extra):
    r = {
        "model": {"model_type": "llama", "vocab_size": 700, "hidden_size": 32, "intermediate_size": 64,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
                  "max_position_embeddings": 64, "tie_word_embeddings": True},
        "data": {"train": os.path.join(d, "tokens", "train.bin"), "val": os.path.join(d, "tokens", "val.bin"),
                 "tokenizer": os.path.join(d, "tok")},
        "train": {"steps": steps, "batch_size": 4, "seq_len": 32, "lr": 3e-3, "warmup_steps": 5, "seed": 2},
        "eval": {"interval": 10, "batches": 2},
        "checkpoint": {"interval": 10, "keep": 2},
        "log": {"interval": 5},
        "output": {"dir": os.path.join(d, "run"), "dtype": "bf16"},
        "threads": 2,
    }
    for k, v in extra.items():
        r[k] = v
    path = os.path.join(d, "recipe.json")
    with open(path, "w") as f:
        json.dump(r, f)
    return path


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("train_cli"))
    p = ok(run("train-tokenizer", "--vocab-size", 700, "-o", os.path.join(d, "tok"), *DOCS))
    assert "tokenizer: 700 tokens" in p.stderr
    p = ok(run("prepare-data", "--tokenizer", os.path.join(d, "tok"), "-o", os.path.join(d, "tokens"),
               "--val-fraction", 0.1, *DOCS))
    assert "train" in p.stderr and "val tokens" in p.stderr
    recipe = tiny_recipe(d)
    p = ok(run("train", "--config", recipe))
    return d, recipe, p


def test_pipeline_files(pipeline):
    d, _, p = pipeline
    meta = json.load(open(os.path.join(d, "tokens", "meta.json")))
    assert meta["vocab_size"] == 700 and meta["train_tokens"] > 1000 and meta["val_tokens"] > 100
    with open(os.path.join(d, "tokens", "train.bin"), "rb") as f:
        magic, version, bpt, n, vocab = struct.unpack("<8sIIQI", f.read(28))
    assert magic == b"FKTOKENS" and version == 1 and bpt == 2 and n == meta["train_tokens"] and vocab == 700
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert os.path.exists(os.path.join(d, "run", "model", f)), f
    cfg = json.load(open(os.path.join(d, "run", "model", "config.json")))
    assert cfg["torch_dtype"] == "bfloat16" and cfg["architectures"] == ["LlamaForCausalLM"] and cfg["bos_token_id"] == 0
    assert open(os.path.join(d, "run", "checkpoints", "latest")).read().strip() == "step_00000030"
    assert sorted(os.listdir(os.path.join(d, "run", "checkpoints"))) == ["latest", "step_00000020", "step_00000030"]


def test_progress_lines_and_log(pipeline):
    d, _, p = pipeline
    lines = [l for l in p.stderr.splitlines() if l.startswith("step ")]
    assert len(lines) == 6, p.stderr  # every 5 steps
    for key in ("loss", "lr", "gnorm", "tok/s", "MFU", "ETA"):
        assert key in lines[0], lines[0]
    assert "| val " in lines[1]  # step 10 evaluates
    recs = [json.loads(l) for l in open(os.path.join(d, "run", "log.jsonl"))]
    assert [r["step"] for r in recs] == [5, 10, 15, 20, 25, 30]
    assert all("val_loss" in r for r in recs if r["step"] % 10 == 0)
    assert recs[-1]["loss"] < recs[0]["loss"]


def test_generate_and_perplexity_on_the_trained_model(pipeline):
    d, _, _ = pipeline
    model = os.path.join(d, "run", "model")
    p = ok(run("generate", "-m", model, "-p", "The engine", "-n", 8, "--temp", 0))
    assert p.stdout
    p = ok(run("perplexity", "-m", model, "-f", os.path.join(REPO, "docs", "ARCHITECTURE.md"), "--ctx", 32, "--json",
               "--per-token", os.path.join(d, "ppl.tsv")))
    r = json.loads(p.stdout)
    assert r["tokens"] > 100 and r["perplexity"] > 1 and r["perplexity"] < 700
    rows = open(os.path.join(d, "ppl.tsv")).read().splitlines()
    assert rows[0] == "position\tid\ttoken\tnll" and len(rows) == r["tokens"] + 1


def test_resume_continues(pipeline, tmp_path):
    d, _, _ = pipeline
    recipe = tiny_recipe(str(tmp_path), steps=12)
    # the data of the pipeline, a fresh run directory
    shutil.copytree(os.path.join(d, "tokens"), os.path.join(tmp_path, "tokens"))
    shutil.copytree(os.path.join(d, "tok"), os.path.join(tmp_path, "tok"))
    ok(run("train", "--config", recipe, "-q", "--steps", 12, "--output", os.path.join(tmp_path, "a")))
    p = ok(run("train", "--config", recipe, "-q", "--resume", os.path.join(tmp_path, "a")))
    assert "trained 12 steps" in p.stderr


def test_plot_training(pipeline, tmp_path):
    d, _, _ = pipeline
    out = os.path.join(tmp_path, "loss.png")
    p = subprocess.run([sys.executable, os.path.join(REPO, "tools", "plot_training.py"),
                        os.path.join(d, "run", "log.jsonl"), "-o", out], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert os.path.getsize(out) > 1000


def test_synthetic_tasks(tmp_path):
    for task in ("copy", "mqar"):
        out = os.path.join(tmp_path, task)
        ok(run("prepare-data", "--synthetic", task, "-o", out, "--vocab-size", 64, "--seq-len", 35,
               "--examples", 10, "--val-examples", 2, "--seed", 5))
        meta = json.load(open(os.path.join(out, "meta.json")))
        assert meta["synthetic"] == task and meta["train_tokens"] > 10 * 20 and meta["eos_id"] == 63
    a = open(os.path.join(tmp_path, "mqar", "train.bin"), "rb").read()
    ok(run("prepare-data", "--synthetic", "mqar", "-o", os.path.join(tmp_path, "again"), "--vocab-size", 64,
           "--seq-len", 35, "--examples", 10, "--val-examples", 2, "--seed", 5))
    assert open(os.path.join(tmp_path, "again", "train.bin"), "rb").read() == a  # seeded


def test_bad_input(pipeline, tmp_path):
    d, _, _ = pipeline
    t = str(tmp_path)
    shutil.copytree(os.path.join(d, "tokens"), os.path.join(t, "tokens"))
    shutil.copytree(os.path.join(d, "tok"), os.path.join(t, "tok"))
    clean_failure(run("train", "--config", os.path.join(t, "nope.json")), "nope.json: cannot read the recipe")
    bad = tiny_recipe(t, optimizer={"type": "sgd"})
    clean_failure(run("train", "--config", bad), 'field "optimizer": unknown field')
    r = json.load(open(bad))
    del r["optimizer"]
    r["train"]["warmup_steps"] = 99
    json.dump(r, open(bad, "w"))
    clean_failure(run("train", "--config", bad), 'field "train.warmup_steps"')
    r["train"]["warmup_steps"] = 1
    r["data"]["train"] = os.path.join(t, "missing.bin")
    json.dump(r, open(bad, "w"))
    clean_failure(run("train", "--config", bad), "missing.bin: cannot open the token file")
    assert not os.path.exists(os.path.join(t, "run"))
    clean_failure(run("prepare-data", "--tokenizer", os.path.join(t, "tok"), "-o", os.path.join(t, "x"),
                      os.path.join(t, "no-corpus.txt")), "no-corpus.txt: no such corpus file")
    clean_failure(run("train-tokenizer", "--vocab-size", 500, "-o", os.path.join(t, "y"),
                      os.path.join(t, "no-corpus.txt")), "no-corpus.txt: no such corpus file")
    clean_failure(run("prepare-data", "--synthetic", "sort", "-o", os.path.join(t, "z")), 'unknown task "sort"')
    clean_failure(run("perplexity", "-m", os.path.join(d, "run", "model"), "-f", os.path.join(t, "none.txt")),
                  "none.txt")
    clean_failure(run("perplexity", "-m", os.path.join(d, "run", "model"), "-f", DOCS[0], "--ctx", 16,
                      "--stride", 16), "--stride must be in [1, ctx - 1]")
    # NaN at step 7: the error names the step; checkpoint 5... stays the latest; nothing exported
    good = tiny_recipe(t, steps=12, checkpoint={"interval": 5, "keep": 2})
    p = run("train", "--config", good, "-q", env={"FLASHKIT_TRAIN_INJECT_NAN_STEP": "7"})
    clean_failure(p, "training diverged at step 7", "last good checkpoint")
    assert open(os.path.join(t, "run", "checkpoints", "latest")).read().strip() == "step_00000005"
    assert not os.path.exists(os.path.join(t, "run", "model"))
    # a corrupt checkpoint to resume from
    st = os.path.join(t, "run", "checkpoints", "step_00000005", "state.safetensors")
    data = bytearray(open(st, "rb").read())
    data[-5] ^= 0x40
    open(st, "wb").write(bytes(data))
    clean_failure(run("train", "--config", good, "-q", "--resume", os.path.join(t, "run")), "corrupt checkpoint")
    # a fresh run into that directory would overwrite it: refused
    clean_failure(run("train", "--config", good, "-q"), 'field "output.dir"', "already holds a run")
    # without a GPU (or, before the CUDA backend is built, always) device cuda is a clean error
    info = run("info").stdout
    if "cuda devices:   0" in info:
        clean_failure(run("train", "--config", good, "--device", "cuda", "--output", os.path.join(t, "gpu")), "device cuda")
