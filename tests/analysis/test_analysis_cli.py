"""CLI tests of `flashkit roofline | cost | profile` (issue 3). FLASHKIT_CLI points at the binary; the CPU roof
is pinned through FLASHKIT_CPU_PEAK_GFLOPS / FLASHKIT_CPU_BW_GBS so nothing long is measured."""
import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = os.environ.get("FLASHKIT_CLI", str(ROOT / "build" / "bin" / "flashkit"))
GEMMA = str(ROOT / "models" / "configs" / "gemma-3-270m.json")
LLAMA = str(ROOT / "models" / "configs" / "llama-3.2-1b.json")
ENV = dict(os.environ, FLASHKIT_CPU_PEAK_GFLOPS=os.environ.get("FLASHKIT_CPU_PEAK_GFLOPS", "100"),
           FLASHKIT_CPU_BW_GBS=os.environ.get("FLASHKIT_CPU_BW_GBS", "20"))


def run(*args, ok=True, cwd=None):
    p = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, env=ENV, timeout=60, cwd=cwd)
    if ok:
        assert p.returncode == 0, p.stderr
    return p


def test_cost_json_gemma():
    r = json.loads(run("cost", "-m", GEMMA, "--json").stdout)
    assert r["params_total"] == 268098176
    assert r["params_per_layer"] == 5573632
    assert r["kv_cache_bytes_per_token"] == 18 * 1024
    assert r["kv_cache_bytes_per_token_global"] == 3 * 1024
    names = [o["name"] for o in r["ops"]]
    for n in ["input_norm", "q_proj", "k_proj", "v_proj", "q_norm", "k_norm", "rope", "attn_scores",
              "attn_weighted_sum", "o_proj", "post_attn_norm", "residual_attn", "mlp_gate", "mlp_up", "mlp_act",
              "mlp_down", "post_mlp_norm", "residual_mlp"]:
        assert n in names
    for o in r["ops"]:
        assert {"name", "macs", "flops", "bytes", "intensity", "bound"} <= set(o)
        assert o["bound"] in ("memory", "compute")
    assert r["device"]["name"] == "h200"


def test_cost_directory_and_decode(tmp_path):
    (tmp_path / "config.json").write_text(pathlib.Path(LLAMA).read_text())
    r = json.loads(run("cost", "-m", tmp_path, "--device", "t4", "--decode-batch", "4", "--context", "256",
                       "--json").stdout)
    assert r["workload"]["phase"] == "decode" and r["workload"]["tokens"] == 4
    assert r["kv_cache_bytes_per_token"] == 16 * 2 * 8 * 64 * 2
    assert r["totals"]["bound"] == "memory"
    q = next(o for o in r["ops"] if o["name"] == "q_proj")
    assert q["macs"] == 4 * 2048 * 2048


def test_cost_table_and_sweeps(tmp_path):
    out = run("cost", "-m", GEMMA, "--device", "l4", "--prefill", "256").stdout
    assert "q_proj" in out and "KV cache per token" in out and "ZeRO-3" in out
    dec = tmp_path / "dec.json"
    run("cost", "-m", GEMMA, "--sweep", "decode", "--out", dec)
    d = json.loads(dec.read_text())
    assert [p["x"] for p in d["points"]] == [1, 2, 4, 8, 16, 32, 64]
    assert all(p["bound"] == "memory" for p in d["points"])
    pre = json.loads(run("cost", "-m", GEMMA, "--sweep", "prefill", "--json").stdout)
    assert [p["x"] for p in pre["points"]][0] == 64 and pre["points"][-1]["x"] == 4096
    assert pre["points"][-1]["matmul_bound"] == "compute"


@pytest.mark.parametrize("args,msg", [
    (["cost", "-m", GEMMA, "--device", "x100"], "unknown device 'x100'"),
    (["cost", "-m", "/nonexistent/model"], "not found"),
    (["cost"], "-m/--model is required"),
    (["cost", "-m", GEMMA, "--prefill", "-5"], "--prefill: must be in [1, "),
    (["cost", "-m", GEMMA, "--decode-batch", "0"], "--decode-batch: must be in [1, "),
    (["cost", "-m", GEMMA, "--decode-batch", "2", "--context", "-1"], "--context: must be in [1, "),
    (["cost", "-m", GEMMA, "--sweep", "train"], "--sweep must be"),
    (["cost", "-m", GEMMA, "--dtype", "int3"], "unknown compute dtype"),
    (["cost", "attention", "-N", "-3"], "--seqlen: must be in [1, "),
    (["roofline", "gemm", "--sizes", "0"], "--sizes: must be in [1, "),
    (["roofline", "gemm", "--impl", "magic", "--sizes", "8"], "unknown GEMM implementation"),
    (["profile", "gelu", "--n", "-1"], "--n: must be in [1, "),
])
def test_bad_input(args, msg):
    p = run(*args, ok=False)
    assert p.returncode != 0
    assert msg in p.stderr, p.stderr
    if "x100" in msg:
        assert "h200" in p.stderr and "t4" in p.stderr


def test_bad_config_json(tmp_path):
    f = tmp_path / "broken.json"
    f.write_text("{ not json")
    assert "invalid JSON" in run("cost", "-m", f, ok=False).stderr
    f.write_text(json.dumps({"model_type": "llama", "hidden_size": 8, "vocab_size": 16}))
    assert "intermediate_size" in run("cost", "-m", f, ok=False).stderr


@pytest.mark.parametrize("change,msg", [
    ({"model_type": "rwkv"}, 'unsupported model_type "rwkv"'),
    ({"head_dim": 7}, '"head_dim" must be even'),
    ({"vocab_size": 2**40}, '"vocab_size" must be an integer in [1, 16777216]'),
    ({"rms_norm_eps": 1e308}, '"rms_norm_eps" must be in [1e-12, 0.1]'),
    ({"final_logit_softcapping": 1e-300}, '"final_logit_softcapping" must be in [0.1, 1e+06]'),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 1e-320}}, '"factor" must be in [1, 10000]'),
])
def test_cost_uses_the_engine_config_validator(tmp_path, change, msg):
    """`cost -m` accepts exactly the configs `generate` accepts (one validator, engine/config.hpp)."""
    cfg = json.loads(pathlib.Path(LLAMA).read_text())
    cfg.update(change)
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    p = run("cost", "-m", f, ok=False)
    assert p.returncode == 2, p.stderr
    assert msg in p.stderr, p.stderr


def test_cost_deeply_nested_config_is_refused_not_recursed(tmp_path):
    # 300,000 nested arrays: a stack overflow in cost's own recursive JSON copy before the shared reader.
    f = tmp_path / "config.json"
    f.write_text('{"model_type": "llama", "x": ' + "[" * 300000 + "]" * 300000 + "}")
    p = run("cost", "-m", tmp_path, ok=False)
    assert p.returncode == 2, p.stderr
    assert "JSON nested deeper than 64 levels" in p.stderr, p.stderr


def test_roofline_table_json():
    out = run("roofline", "--json", "-").stdout
    r = json.loads(out[out.find("{\n"):])
    names = [d["name"] for d in r["devices"]]
    assert names == ["t4", "l4", "a10", "a100-40gb", "a100-80gb", "a6000", "h100-sxm", "h100-pcie", "h200", "b200"]
    assert all(d["source"] for d in r["devices"])
    h200 = next(d for d in r["devices"] if d["name"] == "h200")
    assert abs(h200["ridge_bf16"] - 989.4 / 4.8) < 1e-6


def test_roofline_measure_bounded():
    p = run("roofline", "--measure", "--seconds", "0.2", "--triad-mb", "8")
    assert "f32 FMA peak" in p.stdout and "triad bandwidth" in p.stdout
    assert "GPU:" in p.stdout


def test_roofline_gemm(tmp_path):
    j, c, m = tmp_path / "g.json", tmp_path / "g.csv", tmp_path / "g.md"
    run("roofline", "gemm", "--sizes", "33,64", "--gemv", "--seconds", "0.01", "--json", j, "--csv", c, "--md", m)
    r = json.loads(j.read_text())
    assert len(r["results"]) == 2 * 2 * 3
    for row in r["results"]:
        assert row["bound"] in ("memory", "compute") and row["gflops"] > 0
        if row["op"] == "gemv":
            assert row["bound"] == "memory"
    assert c.read_text().startswith("op,impl,M,N,K")
    assert "| op |" in m.read_text()
    assert any(x["device"] == "h200" for x in r["compute_bound_n"])


def test_cost_attention_teaching():
    r = json.loads(run("cost", "attention", "-N", "1024", "-d", "64", "--json").stdout)
    assert r["teaching_std_floats"] == 1024 * (4 * 64 + 4 * 1024)
    assert r["teaching_flash_floats"] == 1024 * (5 * 64 + 4)
    t4 = next(d for d in r["devices"] if d["device"] == "t4")
    flops = 4 * 1024 ** 2 * 64
    assert abs(t4["teaching_std_s"] - (flops / 8.1e12 + 4 * r["teaching_std_floats"] / 320e9)) < 1e-12
    assert t4["teaching_speedup"] > 2


def test_cost_attention_check():
    r = json.loads(run("cost", "attention", "-N", "256", "-d", "64", "--check", "--json").stdout)
    rows = {x["impl"]: x for x in r["cpu_check"]["rows"]}
    assert rows["standard"]["flashkit_bytes"] > rows["flash"]["flashkit_bytes"]
    assert 0.9 < rows["standard"]["ratio"] < 1.1  # same counting: 4Nd + 4N^2 (+ lse)


def test_profile_gelu_trace(tmp_path):
    t, j = tmp_path / "trace.json", tmp_path / "s.json"
    out = run("profile", "gelu", "--n", "100000", "--reps", "1", "--trace", t, "--json", j).stdout
    assert "gelu.fused" in out and "speedup" in out
    tr = json.loads(t.read_text())
    ev = [e for e in tr["traceEvents"] if e.get("ph") == "X"]
    assert len(ev) == 10
    assert all({"flops", "bytes", "pct_of_roof", "bound"} <= set(e["args"]) for e in ev)
    s = json.loads(j.read_text())
    assert s["result"]["separate"]["kernels"] == 8 and s["result"]["fused"]["kernels"] == 1


def test_profile_attention(tmp_path):
    t = tmp_path / "trace.json"
    out = run("profile", "attention", "-N", "128", "--heads", "2", "-d", "32", "--reps", "1", "--backward",
              "--trace", t).stdout
    assert "attention.fwd.flash" in out and "attention.bwd.standard" in out
    assert len([e for e in json.loads(t.read_text())["traceEvents"] if e.get("ph") == "X"]) == 4


def test_roofline_gemm_gpu_flag_skips_without_gpu(tmp_path):
    j = tmp_path / "g.json"
    p = run("roofline", "gemm", "--sizes", "16", "--impl", "blas", "--gpu", "--seconds", "0.01", "--json", j)
    r = json.loads(j.read_text())
    if not r["gpu_results"]:
        assert "cuBLAS: skipped" in p.stderr


def test_roofline_gemm_shapes(tmp_path):
    j = tmp_path / "g.json"
    run("roofline", "gemm", "--sizes", "8", "--impl", "blas,blocked", "--shapes", "33x1x65,17x40x9", "--seconds", "0.01",
        "--json", j)
    shapes = {(x["M"], x["N"], x["K"], x["op"]) for x in json.loads(j.read_text())["results"]}
    assert (33, 1, 65, "gemv") in shapes and (17, 40, 9, "gemm") in shapes
    assert "expected MxNxK" in run("roofline", "gemm", "--shapes", "3x4", ok=False).stderr


def test_cost_attention_onchip_override():
    a = json.loads(run("cost", "attention", "-N", "1024", "-d", "64", "--onchip-kb", "128", "--json").stdout)
    b = json.loads(run("cost", "attention", "-N", "1024", "-d", "64", "--json").stdout)
    assert all(d["M_elems"] == 128 * 1024 / 4 for d in a["devices"])
    h_a = next(d for d in a["devices"] if d["device"] == "h200")
    h_b = next(d for d in b["devices"] if d["device"] == "h200")
    assert h_a["flash_fwd_bytes"] > h_b["flash_fwd_bytes"]  # smaller M, more passes over Q and O


def test_profile_attention_gpu_clear_error_without_gpu():
    p = run("profile", "attention", "-N", "64", "--heads", "1", "-d", "32", "--reps", "1", "--gpu", ok=False)
    if p.returncode != 0:
        assert "profile attention --gpu" in p.stderr


def _no_gpu_error(p, what):
    """--gpu without a GPU (or a CUDA build): a clean error exit naming the command, not a crash."""
    assert p.returncode > 0, (p.returncode, p.stderr)
    assert what in p.stderr
    assert "no CUDA device" in p.stderr or "built without CUDA" in p.stderr


def test_profile_gelu_gpu_clear_error_without_gpu(tmp_path):
    p = run("profile", "gelu", "--gpu", "--n", "4096", "--reps", "1", "--trace", tmp_path / "t.json", ok=False)
    if p.returncode != 0:
        _no_gpu_error(p, "profile gelu --gpu")


def test_profile_gelu_gpu_bad_dtype():
    p = run("profile", "gelu", "--gpu", "--dtype", "f16", "--n", "16", ok=False)
    assert p.returncode > 0 and "--dtype" in p.stderr


def test_profile_decode_plan(tmp_path):
    j = tmp_path / "d.json"
    p = run("profile", "decode", "--json", j)
    plan = json.loads(j.read_text())["plan"]
    assert plan["launches"] == 18 * 17 + 1 and plan["cublas_calls"] == 126
    assert plan["launches_per_layer"] == 17
    assert "307 launches" in p.stdout and "plan only" in p.stdout
    run("profile", "decode", "-m", LLAMA, "--json", tmp_path / "l.json")
    llama = json.loads((tmp_path / "l.json").read_text())
    assert llama["plan"]["launches_per_layer"] == 15 and llama["plan"]["layers"] == 16


def test_profile_decode_errors():
    assert "--context" in run("profile", "decode", "--context", "0", ok=False).stderr
    p = run("profile", "decode", "--context", "200000", ok=False)
    assert p.returncode > 0 and "context" in p.stderr
    assert "--gemv" in run("profile", "decode", "--gemv", "dense", ok=False).stderr


def test_profile_decode_gpu_clear_error_without_gpu(tmp_path):
    p = run("profile", "decode", "--gpu", "--reps", "2", "--layers", "2", "--trace", tmp_path / "t.json", ok=False)
    if p.returncode != 0:
        _no_gpu_error(p, "profile decode --gpu")
