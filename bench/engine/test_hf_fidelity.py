"""Tests of bench/engine/hf_fidelity.py that need no GPU and no transformers: the comparison helpers on synthetic
data, the init rule, the orchestrator's failure recording, and the flashkit side (flashkit.Session, Model.logits
and generate) end to end on the tiny fixtures, whose expected_*.f32 files are transformers' logits (they stand in for
the reference step).

    /usr/bin/python3 -m pytest -q bench/engine/test_hf_fidelity.py      (needs build/lib/libflashkit.so for the
                                                                         end-to-end tests; they skip without it)
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hf_fidelity as H  # noqa: E402

ROOT = H.ROOT
LIB = os.environ.get("FLASHKIT_LIBRARY") or os.path.join(ROOT, "build", "lib", "libflashkit.so")
FIX = os.path.join(ROOT, "tests", "data", "models")


# --- helpers -------------------------------------------------------------------------------------------------

def test_rel_rows():
    ref = np.array([[3.0, 4.0], [1.0, 0.0], [0.0, 0.0]])
    got = np.array([[3.0, 4.5], [1.0, 0.0], [0.0, 0.0]])
    r = H.rel_rows(got, ref)
    assert r.shape == (3,)
    assert abs(r[0] - 0.1) < 1e-12 and r[1] == 0 and r[2] == 0
    assert H.rel_rows(np.array([[1.0, 0]]), np.zeros((1, 2)))[0] == np.inf
    assert H.rel_rows(np.arange(4.0), np.arange(4.0)).shape == (1,)  # 1-D is one row


def test_bf16_ulp():
    assert H.bf16_ulp(1.0) == 2.0 ** -7
    assert H.bf16_ulp(1.99) == 2.0 ** -7
    assert H.bf16_ulp(-2.0) == 2.0 ** -6
    assert H.bf16_ulp(20.0) == 0.125


def test_top1_stats():
    ref = np.array([[0, 5, 1], [2, 0, 2.0078125], [0, 1, 2], [3, 0, 0]], dtype=np.float32)
    fk = np.array([[0, 6, 1], [2, 0, 1.9], [2, 1, 0], [3, 0, 0]], dtype=np.float32)
    r = H.top1_stats(fk, ref)
    assert r["positions"] == 4 and r["strict_count"] == 2
    assert r["strict_mismatches"] == [1, 2]
    assert r["within_ulp"] == 0.75  # row 1: 2.0078125 - 2 is one bf16 ulp at 2; row 2 is a real miss
    assert r["tolerant"] == 0.75 and r["tolerant_mismatches"] == [2]
    r = H.top1_stats(fk, ref, ref_f32_argmax=[1, 0, 0, 0])  # transformers f32 agrees with flashkit at row 2
    assert r["tolerant"] == 1.0 and r["vs_hf_f32"] == 1.0 and r["hf_bf16_vs_hf_f32"] == 0.5
    assert H.top1_stats(np.zeros((0, 3)), np.zeros((0, 3)))["positions"] == 0


def test_greedy_compare():
    r = H.greedy_compare([1, 2, 3], [1, 2, 3])
    assert r["identical"] and r["matching_prefix"] == 3 and r["first_mismatch"] is None
    rows = {2: np.array([0.0, 1.0, 0.9, 5.0, 4.5])}
    r = H.greedy_compare([1, 2, 4], [1, 2, 3], lambda k: rows[k])
    assert not r["identical"] and r["first_mismatch"] == 2 and r["matching_prefix"] == 2
    assert r["at_mismatch"] == {"ref": 3, "fk": 4, "ref_top2_gap": 0.5, "ref_max_minus_fk_token": 0.5}
    assert not H.greedy_compare([1, 2], [1, 2, 3])["identical"]  # shorter (stopped at eos) is not identical
    r = H.greedy_compare([5], [6], lambda k: None)
    assert "gap_error" in r["at_mismatch"]


def fake_run(V=50, P=6, S=40, G=8, noise=1e-5, seed=0):
    rng = np.random.default_rng(seed)
    ref_pre = rng.standard_normal((P, V)).astype(np.float32) * 4
    ref_dec = rng.standard_normal((S, V)).astype(np.float32) * 4
    grows = rng.standard_normal((G - 1, V)).astype(np.float32) * 4
    greedy = [int(ref_pre[-1].argmax())] + [int(x) for x in grows.argmax(1)]
    fk_pre = ref_pre * (1 + noise * rng.standard_normal(ref_pre.shape)).astype(np.float32)
    fk_dec = ref_dec * (1 + noise * rng.standard_normal(ref_dec.shape)).astype(np.float32)
    return ref_pre, ref_dec, grows, greedy, fk_pre, fk_dec


def test_compare_run_passes_and_fails():
    ref_pre, ref_dec, grows, greedy, fk_pre, fk_dec = fake_run(G=H.GREEDY, S=H.DECODE_STEPS)
    r = H.compare_run(ref_pre, ref_dec, fk_pre, "all", fk_dec, greedy, list(greedy), grows)
    assert r["prefill_rows_compared"] == 6 and r["decode_steps_compared"] == H.F32_STEPS
    assert r["prefill_rel_max"] < 1e-4 and r["decode_rel_max"] < 1e-4
    assert len(r["decode_rel_per_step"]) == H.F32_STEPS
    assert r["top1"]["positions"] == 6 + H.DECODE_STEPS and r["top1"]["strict"] == 1.0
    assert H.f32_pass(r) and H.bf16_pass(r)
    # one decode step beyond the tolerance fails f32
    bad = fk_dec.copy()
    bad[5] += 0.01 * np.linalg.norm(ref_dec[5]) / np.sqrt(ref_dec.shape[1])
    r2 = H.compare_run(ref_pre, ref_dec, fk_pre, "all", bad, greedy, list(greedy), grows)
    assert 5e-3 < r2["decode_rel_max"] < 2e-2 and not H.f32_pass(r2)
    # a step past the first 32 does not count for f32, but is reported
    bad = fk_dec.copy()
    bad[40] *= 1.1
    r3 = H.compare_run(ref_pre, ref_dec, fk_pre, "all", bad, greedy, list(greedy), grows)
    assert H.f32_pass(r3) and r3["decode_rel_max_all_63_steps"] > 0.05
    # a greedy divergence fails f32, with transformers' gap at that step
    g2 = list(greedy)
    g2[10] = (g2[10] + 1) % ref_dec.shape[1]
    r4 = H.compare_run(ref_pre, ref_dec, fk_pre, "all", fk_dec, greedy, g2, grows)
    assert not H.f32_pass(r4) and r4["greedy"]["first_mismatch"] == 10
    assert r4["greedy"]["at_mismatch"]["ref_max_minus_fk_token"] > 0
    # too few decode steps: not a pass
    r5 = H.compare_run(ref_pre, ref_dec, fk_pre, "all", fk_dec[:10], greedy, list(greedy), grows)
    assert r5["decode_steps_compared"] == 10 and not H.f32_pass(r5)


def test_compare_run_last_row_only_and_alt():
    ref_pre, ref_dec, grows, greedy, fk_pre, fk_dec = fake_run()
    P = ref_pre.shape[0]
    alt = np.concatenate([ref_pre.argmax(1), ref_dec.argmax(1)])
    r = H.compare_run(ref_pre, ref_dec, fk_pre[-1:], "last", fk_dec, greedy, greedy, grows, alt)
    assert r["prefill_rows_compared"] == 1 and r["top1"]["positions"] == 1 + ref_dec.shape[0]
    assert r["top1"]["vs_hf_f32"] == 1.0
    with pytest.raises(ValueError):
        H.compare_run(ref_pre, ref_dec, fk_pre[:P - 1], "all", fk_dec, greedy, greedy, grows)


def test_summary_lines_tolerate_missing_parts():
    lines = H.summary_lines({"m": {"steps": {"make": {"error": "exit status 1", "stderr_tail": ["boom"]}},
                                   "compare": {"cpu-f32": {"error": "x"}}}, "u": {"error": "unknown model"}})
    assert any("FAIL" in l for l in lines) and any("boom" in l for l in lines) and any("unknown" in l for l in lines)


# --- init ----------------------------------------------------------------------------------------------------

def test_init_rule():
    assert H.init_rule("model.layers.0.input_layernorm.weight", (640,), True, 640) == ("normal", 0.0, 0.3)
    assert H.init_rule("model.norm.weight", (2048,), False, 2048) == ("normal", 1.0, 0.3)
    assert H.init_rule("model.layers.0.self_attn.q_norm.weight", (256,), True, 640)[1] == 0.0
    d, m, s = H.init_rule("model.embed_tokens.weight", (262144, 640), True, 640)
    assert d == "t3" and abs(s - 0.5 / 640 ** 0.5) < 1e-12
    assert H.init_rule("lm_head.weight", (128256, 2048), False, 2048)[2] == 8.0 / 2048 ** 0.5
    d, m, s = H.init_rule("model.layers.3.mlp.down_proj.weight", (640, 2048), True, 640)
    assert (d, m) == ("normal", 0.0) and abs(s - 2048 ** -0.5) < 1e-15
    assert H.init_rule("model.layers.3.self_attn.q_proj.bias", (896,), False, 896) == ("normal", 0.0, 0.1)


def test_informative_init_with_torch():
    torch = pytest.importorskip("torch")
    sys.modules.setdefault("torch", torch)

    class Cfg:
        model_type, hidden_size = "gemma3_text", 64

    def model():
        m = torch.nn.Module()
        m.embed_tokens = torch.nn.Embedding(20000, 64)
        m.q_proj = torch.nn.Linear(64, 128, bias=False)
        m.input_layernorm = torch.nn.Module()
        m.input_layernorm.weight = torch.nn.Parameter(torch.zeros(64))
        return m

    a, b = model(), model()
    H.informative_init(a, Cfg, seed=5)
    H.informative_init(b, Cfg, seed=5)
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p, q), n  # deterministic
    e = a.embed_tokens.weight.detach().double() / (0.5 / 8)
    assert 0.85 < e.std().item() < 1.15  # unit variance (heavy-tailed: loose bounds)
    kurt = ((e - e.mean()) ** 4).mean().item() / e.var().item() ** 2
    assert kurt > 5  # Student-t(3) tails, not Gaussian (3)
    assert e.abs().max().item() <= 100
    w = a.q_proj.weight.detach()
    assert abs(w.std().item() - 64 ** -0.5) < 0.01
    assert abs(a.input_layernorm.weight.detach().std().item() - 0.3) < 0.1


# --- orchestration -------------------------------------------------------------------------------------------

def test_run_step_records_failure(tmp_path):
    r = H.run_step(["make", "no-such-model", "--work", str(tmp_path)], 60, dict(os.environ))
    assert r["rc"] == 2 and r["error"] == "exit status 2" and any("invalid choice" in l for l in r["stderr_tail"])
    r = H.run_step(["compare", "gemma-3-270m", "--work", str(tmp_path)], 60, dict(os.environ))
    assert r["rc"] == 0 and "error" not in r


def test_run_without_transformers_records_every_step(tmp_path):
    """Here make fails (no transformers, no GPU): the JSON still says so, every later step is skipped, exit 1."""
    out = tmp_path / "f.json"
    json.dump({"models": {"other": {"pass": True}}}, open(out, "w"))
    p = subprocess.run([sys.executable, os.path.join(HERE, "hf_fidelity.py"), "run", "--models",
                        "gemma-3-270m,bogus", "--work", str(tmp_path / "w"), "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stdout + p.stderr
    res = json.load(open(out))
    assert "other" in res["models"]  # kept
    m = res["models"]["gemma-3-270m"]
    assert m["steps"]["make"]["error"] and not m["pass"]
    assert all(m["steps"][s]["error"].startswith("skipped") for s in ("ref", "fk-cpu-f32", "fk-cuda-bf16"))
    assert "unknown model" in res["models"]["bogus"]["error"]
    assert res["pass"] is False
    s = subprocess.run([sys.executable, os.path.join(HERE, "hf_fidelity.py"), "run", "--summary", "--json", str(out)],
                       capture_output=True, text=True)
    assert s.returncode == 1 and "gemma-3-270m" in s.stdout and "make: exit status 1" in s.stdout


# --- flashkit side, end to end on the tiny fixtures ----------------------------------------------------------

needs_lib = pytest.mark.skipif(not os.path.exists(LIB), reason="build/lib/libflashkit.so not built")


def fixture_work(tmp_path, fixture, label, n_feed=32):
    """A work dir whose 'reference' is the fixture's stored transformers logits (CPU, same dtype)."""
    name = "tiny"
    d = tmp_path / name
    (d / "ref").mkdir(parents=True)
    os.symlink(os.path.join(FIX, fixture), d / label)
    e = json.load(open(os.path.join(FIX, fixture, "expected.json")))
    P, V = e["prefill_logits_shape"]
    json.dump({"prompt": e["prompt_ids"], "feed": e["greedy_ids"][:n_feed]}, open(d / "prompt.json", "w"))
    (d / "made.json").write_text("{}")
    pre = np.fromfile(os.path.join(FIX, fixture, "expected_prefill_logits.f32"), dtype="<f4").reshape(P, V)
    dec = np.fromfile(os.path.join(FIX, fixture, "expected_decode_logits.f32"), dtype="<f4").reshape(-1, V)
    np.save(d / "ref" / (label + "_prefill.npy"), pre)
    np.save(d / "ref" / (label + "_decode.npy"), dec[:n_feed])  # row i: after feeding greedy_ids[i] = feed[i]
    json.dump(e["greedy_ids"], open(d / "ref" / (label + "_greedy.json"), "w"))
    return name, str(d)


@pytest.fixture(autouse=True)
def _lib_env(monkeypatch):
    monkeypatch.setenv("FLASHKIT_LIBRARY", LIB)
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    monkeypatch.setitem(H.FK_RUNS, "cpu-bf16", ("cpu", "auto", "bf16", "bf16"))


@needs_lib
@pytest.mark.parametrize("fixture", ["tiny-llama", "tiny-gemma3"])
def test_fk_session_f32_against_fixture(tmp_path, fixture):
    # flashkit.Session (the C API's fk_session_*): every prefill row, decode steps through the KV cache, greedy ids;
    # Model.logits() and generate() checked against them
    name, d = fixture_work(tmp_path, fixture, "f32")
    assert H.cmd_fk(name, "cpu-f32", str(tmp_path), n_feed=32) == 0
    r = H.compare_tag(d, "cpu-f32")
    assert r["source"] == "python-session" and r["prefill_rows_compared"] == 40
    assert r["prefill_rel_max"] < 1e-4 and r["decode_rel_max"] < 1e-4, r
    assert r["decode_steps_compared"] == 32
    assert r["greedy"]["identical"] and r["greedy"]["compared"] == 64
    assert H.f32_pass(r)
    assert r["api_last_rel_vs_session"] < 1e-5 and r["api_last_rel_vs_ref"] < 1e-4
    assert r["api_generate_matches_greedy_prefix"]
    # the Model part crashed after the session's files were written: the session's numbers still count
    od = os.path.join(d, "fk-cpu-f32")
    os.remove(os.path.join(od, "api_last.f32"))
    fk = json.load(open(os.path.join(od, "fk.json")))
    del fk["api_generate"]
    json.dump(fk, open(os.path.join(od, "fk.json"), "w"))
    r2 = H.compare_tag(d, "cpu-f32")
    assert "api_error" in r2 and H.f32_pass(r2) and r2["prefill_rel_max"] == r["prefill_rel_max"]


@needs_lib
def test_fk_session_bf16_top1_against_fixture(tmp_path):
    name, d = fixture_work(tmp_path, "tiny-llama-bf16", "bf16")
    assert H.cmd_fk(name, "cpu-bf16", str(tmp_path), n_feed=32) == 0
    r = H.compare_tag(d, "cpu-bf16")
    t = r["top1"]
    assert t["positions"] == 40 + 32 and t["strict"] >= 0.95 and t["tolerant"] >= 0.98, t
