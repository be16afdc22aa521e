"""Tests of tools/gpu/train_hf_check.py that need no GPU and no transformers: the comparison helpers, the plain
PyTorch reference decoder against flashkit (one CPU training step's loss and every gradient of both tiny recipes
through `flashkit train --dump-step1`, and the shipped models' logits), the tokenizer round trip, the stored chat
renders against jinja2, and the whole script with --no-transformers.

    FLASHKIT_CLI=build/bin/flashkit /usr/bin/python3 -m pytest -q tools/gpu/test_train_hf_check.py
    (the flashkit Python package needs PYTHONPATH=python and build/lib/libflashkit.so or FLASHKIT_LIBRARY)
"""
import glob
import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_hf_check as C  # noqa: E402

ROOT = C.ROOT
torch = pytest.importorskip("torch")


def _cli():
    p = os.environ.get("FLASHKIT_CLI")
    if p:
        return p
    found = sorted(glob.glob(os.path.join(ROOT, "build*", "bin", "flashkit")), key=os.path.getmtime)
    if not found:
        pytest.skip("no flashkit CLI (set FLASHKIT_CLI)")
    return found[-1]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("train_hf"))
    C.prepare_tokens(_cli(), d)
    return d


def test_rel():
    assert C.rel([3.0, 4.5], [3.0, 4.0]) == pytest.approx(0.1)
    assert C.rel([0.0], [0.0]) == 0 and C.rel([1.0], [0.0]) == np.inf


def test_read_safetensors_widths(tmp_path):
    import struct
    vals = np.array([1.5, -2.25, 3.0], dtype=np.float32)
    bf = (vals.view(np.uint32) >> 16).astype("<u2").tobytes()
    body = vals.astype("<f4").tobytes() + bf + vals.astype("<f2").tobytes()
    header = {"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},
              "b": {"dtype": "BF16", "shape": [1, 3], "data_offsets": [12, 18]},
              "c": {"dtype": "F16", "shape": [3], "data_offsets": [18, 24]}, "__metadata__": {"format": "pt"}}
    h = json.dumps(header).encode()
    p = tmp_path / "t.safetensors"
    p.write_bytes(struct.pack("<Q", len(h)) + h + body)
    t = C.read_safetensors(str(p))
    assert sorted(t) == ["a", "b", "c"] and t["b"].shape == (1, 3)
    for k in t:
        assert np.array_equal(t[k].ravel(), vals)


def test_compare_step_flags_each_kind_of_difference():
    meta = {"loss": 2.0, "grad_norm": 5.0}
    ref = {"w": np.array([3.0, 4.0])}
    ok = C.compare_step(meta, {"w": np.array([3.0, 4.0])}, 2.0, ref, C.F32_TOL)
    assert ok["pass"] and ok["max_grad_rel_err"] == 0
    assert not C.compare_step(dict(meta, loss=2.01), {"w": np.array([3.0, 4.0])}, 2.0, ref, C.F32_TOL)["pass"]
    bad = C.compare_step(meta, {"w": np.array([4.0, 3.0])}, 2.0, ref, C.F32_TOL)  # same norm, wrong entries
    assert not bad["pass"] and bad["max_norm_rel"] == 0 and bad["max_grad_rel_err"] > 0.1
    miss = C.compare_step(meta, {"w": np.array([3.0, 4.0]), "x": np.zeros(2)}, 2.0, ref, C.F32_TOL)
    assert not miss["pass"] and miss["missing_in_ref"] == ["x"]
    shape = C.compare_step(meta, {"w": np.array([[3.0, 4.0]])}, 2.0, ref, C.F32_TOL)
    assert not shape["pass"] and "shape" in shape["tensors"]["w"]["error"]


@pytest.mark.parametrize("arch", sorted(C.TINY_MODELS))
def test_cpu_step_matches_torch_autograd(work, arch):
    """The dump's loss and every gradient equal a plain PyTorch decoder's autograd (f64) on the same weights and
    batch -- the f32 criterion the GPU run applies to transformers too."""
    meta, grads, model_dir = C.load_dump(C.dump_step(_cli(), work, arch, "cpu"))
    assert meta["format"] == "flashkit-train-step-dump-v1" and meta["step"] == 1 and meta["backend"]
    ids, tg = np.array(meta["ids"]), np.array(meta["targets"])
    assert ids.shape == (3, 32) and tg.shape == ids.shape
    assert np.array_equal(ids[:, 1:], tg[:, :-1])  # targets are the ids shifted by one
    assert sorted(grads) == sorted(meta["grad_norms"])
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["torch_dtype"] == "float32"
    assert ("lm_head.weight" in grads) == (not cfg["tie_word_embeddings"])
    for n, g in grads.items():
        assert float(np.linalg.norm(g.astype(np.float64))) == pytest.approx(meta["grad_norms"][n], rel=1e-5)
    r = C.compare_step(meta, {n: g.astype(np.float64) for n, g in grads.items()},
                       *C.loss_and_grads_torch(model_dir, meta), C.F32_TOL)
    assert r["pass"], json.dumps({k: v for k, v in r.items() if k != "tensors"})
    assert abs(meta["loss"] - np.log(cfg["vocab_size"])) < 0.05 * np.log(cfg["vocab_size"])


def test_torch_reference_sees_gemma_details(work):
    """The reference is sensitive to what the Gemma check is about: dropping the sliding window, the final
    soft-cap or the (1 + w) convention changes the loss or the gradients beyond the f32 tolerance."""
    meta, grads, model_dir = C.load_dump(C.dump_step(_cli(), work, "gemma", "cpu"))
    grads = {n: g.astype(np.float64) for n, g in grads.items()}
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    w = C.read_safetensors(os.path.join(model_dir, "model.safetensors"))
    ids, tg = torch.tensor(meta["ids"]), torch.tensor(meta["targets"])

    def run(c):
        fwd, P = C.torch_reference(c, w)
        logits = fwd(ids)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tg.reshape(-1), ignore_index=-1)
        loss.backward()
        return float(loss), {n: (p.grad if p.grad is not None else torch.zeros_like(p)).numpy() for n, p in P.items()}

    assert C.compare_step(meta, grads, *run(cfg), C.F32_TOL)["pass"]
    # model_type llama: plain (w) norms, which with Gemma's zero-initialised weights silence every layer
    for change in ({"sliding_window": 1000}, {"final_logit_softcapping": None}, {"model_type": "llama"}):
        assert not C.compare_step(meta, grads, *run(dict(cfg, **change)), C.F32_TOL)["pass"], change


def test_dump_with_resume_is_refused(work):
    import subprocess
    recipe, _ = C.write_recipe(work, "llama", "cpu")
    p = subprocess.run([_cli(), "train", "--config", recipe, "--resume", os.path.join(work, "nowhere"),
                        "--dump-step1", os.path.join(work, "d")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--dump-step1" in p.stderr and "--resume" in p.stderr, p.stderr


def _flashkit_or_skip():
    try:
        import flashkit  # noqa: F401
    except Exception as e:
        pytest.skip("flashkit Python package unavailable: %s" % e)


def test_shipped_models_logits_match_torch_reference():
    _flashkit_or_skip()
    res = C.check_logits(["draft", "target"], have_hf=False)
    for name, r in res.items():
        assert r["pass"], (name, r.get("error"), r.get("prompts"))
        assert r["references"] == ["torch_f64"] and len(r["prompts"]) == len(C.PROMPTS)


def test_tokenizer_round_trip_and_texts():
    _flashkit_or_skip()
    texts = C.tokenizer_texts()
    assert len(texts) >= 200 and len(set(texts)) > 150
    assert any("<|im_end|>" in t for t in texts) and any("\U0001F600" in t for t in texts)
    r = C.check_tokenizer(have_hf=False)
    assert r["pass"] and r["texts"] == len(texts), r["roundtrip_mismatch"][:3]


def test_stored_chat_renders_are_jinja2s():
    pytest.importorskip("jinja2")
    assert C.jinja_chat_cases() == C.render_cases()


def test_script_without_transformers(tmp_path):
    _flashkit_or_skip()
    out = tmp_path / "r.json"
    rc = C.main(["--flashkit", _cli(), "--out", str(out), "--devices", "cpu", "--no-transformers",
                 "--work", str(tmp_path / "w")])
    res = json.load(open(out))
    assert rc == 0 and res["pass"], json.dumps(res)[:2000]
    assert set(res["grad"]) == {"llama-cpu", "gemma-cpu"} and res["skipped"]
    assert C.main(["--flashkit", _cli(), "--out", str(out), "--devices", "cpu", "--no-transformers", "--strict",
                   "--parts", "logits"]) == 1  # a skipped part fails a strict run
    with pytest.raises(SystemExit):
        C.main(["--parts", "grad,nope"])
