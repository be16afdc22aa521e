"""tools/gpu/mamba_check.py and make_mamba_fixtures.py without transformers: the comparison parts on a checkpoint
and 'transformers' logits made by the numpy forward, each part in its own process; merge fails when a part did not
run; the fixture script keeps numpy and flashkit out of the torch process (run s8-2's SIGSEGV, issue 22)."""
import ast
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, os.pardir, os.pardir))
sys.path.insert(0, os.path.join(ROOT, "tests", "engine"))
import mamba_numpy  # noqa: E402

PROMPT = [3, 17, 42, 5, 88, 1, 0, 64, 23]


def check(out, part):
    return subprocess.run([sys.executable, os.path.join(HERE, "mamba_check.py"), str(out), part],
                          capture_output=True, text=True, timeout=120)


def fixtures(out, perturb=0.0):
    cfg = mamba_numpy.tiny_config()
    w = mamba_numpy.random_weights(cfg, seed=3)
    mamba_numpy.write_checkpoint(str(out / "tiny"), cfg, w)
    ref = mamba_numpy.forward(cfg, w, PROMPT)
    ref64 = ref + perturb * np.max(np.abs(ref))
    with open(out / "tiny_logits.json", "w") as f:
        json.dump({"prompt": PROMPT, "logits_f32": ref.astype(np.float32).tolist(), "logits_f64": ref64.tolist()}, f)


def test_parts_pass_and_merge(tmp_path):
    fixtures(tmp_path)
    for part in ("numpy", "cpu", "cuda"):  # cuda: compared on a CUDA build, "unsupported" (not a failure) on CPU
        r = check(tmp_path, part)
        assert r.returncode == 0, r.stdout + r.stderr
    r = check(tmp_path, "merge")
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.load(open(tmp_path / "mamba_check.json"))
    assert res["ok"] and res["numpy"]["numpy_reference_vs_transformers"] <= 1e-12
    assert res["cpu"]["flashkit_cpu_vs_transformers"] <= 1e-4


def test_mismatch_fails(tmp_path):
    fixtures(tmp_path, perturb=1e-2)
    r = check(tmp_path, "cpu")
    assert r.returncode == 1
    assert not json.load(open(tmp_path / "check_cpu.json"))["ok"]


def test_merge_fails_when_a_part_did_not_run(tmp_path):
    fixtures(tmp_path)
    assert check(tmp_path, "numpy").returncode == 0
    (tmp_path / "check_cpu.json").write_text('{"ok": true}')
    r = check(tmp_path, "merge")  # no check_cuda.json: as after a crash
    assert r.returncode == 1
    res = json.load(open(tmp_path / "mamba_check.json"))
    assert not res["ok"] and "crashed" in res["cuda"]["error"]


def test_stale_result_removed_when_a_part_fails(tmp_path):
    fixtures(tmp_path)
    (tmp_path / "check_numpy.json").write_text('{"ok": true}')
    (tmp_path / "tiny_logits.json").unlink()  # the fixture step died
    assert check(tmp_path, "numpy").returncode != 0
    assert not (tmp_path / "check_numpy.json").exists()


def test_bad_usage():
    r = subprocess.run([sys.executable, os.path.join(HERE, "mamba_check.py"), "x", "gpu"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "usage" in r.stderr


def test_fixture_script_imports_only_torch_and_transformers():
    tree = ast.parse(open(os.path.join(HERE, "make_mamba_fixtures.py")).read())
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            mods.add((node.module or "").split(".")[0])
    assert not mods & {"numpy", "flashkit", "mamba_numpy"}, mods
    assert {"torch", "transformers"} <= mods


def test_check_script_never_imports_torch():
    tree = ast.parse(open(os.path.join(HERE, "mamba_check.py")).read())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not names & {"torch", "transformers"}, names
