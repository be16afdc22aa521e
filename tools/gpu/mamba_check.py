#!/usr/bin/env python3
"""The comparison half of the Mamba fidelity check, on what tools/gpu/make_mamba_fixtures.py wrote (OUTDIR/tiny/,
OUTDIR/tiny_logits.json). Never imports torch or transformers; each part runs in its own process (mamba.sh), so a
crash in one leaves the others' results:
  mamba_check.py OUTDIR numpy   the independent numpy forward (tests/engine/mamba_numpy.py) vs transformers f64:
                                rel <= 1e-6 (validates the oracle of the CPU CI test); also transformers f32 vs f64
  mamba_check.py OUTDIR cpu     flashkit's engine on the CPU, f32, vs transformers f64: rel <= 1e-3 (issue 18)
  mamba_check.py OUTDIR cuda    flashkit on CUDA (weights kept in bf16): rel <= 3e-2 and the same argmax on >= 90%
                                of the rows
  mamba_check.py OUTDIR merge   OUTDIR/mamba_check.json: every part's numbers; ok only if every part ran and passed
Each part writes OUTDIR/check_<part>.json; exit status 1 when its check fails (or, for merge, any part).
"""
import faulthandler
import json
import os
import sys

faulthandler.enable()

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir))
PARTS = ("numpy", "cpu", "cuda")
LIMITS = {"numpy_reference_vs_transformers": 1e-6, "flashkit_cpu_vs_transformers": 1e-3,
          "flashkit_cuda_vs_transformers": 3e-2}


def rel(a, b):
    import numpy as np
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def load(out):
    with open(os.path.join(out, "tiny_logits.json")) as f:
        return json.load(f)


def part_numpy(out, fx):
    sys.path.insert(0, os.path.join(ROOT, "tests", "engine"))
    import mamba_numpy
    d = os.path.join(out, "tiny")
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    ref_cfg = dict(cfg, expand=cfg.get("expand", 2), time_step_rank=cfg.get("time_step_rank", "auto"))
    w = mamba_numpy.load_safetensors(os.path.join(d, "model.safetensors"))
    r = rel(mamba_numpy.forward(ref_cfg, w, fx["prompt"]), fx["logits_f64"])
    return {"transformers_f32_vs_f64": rel(fx["logits_f32"], fx["logits_f64"]),
            "numpy_reference_vs_transformers": r}, r <= LIMITS["numpy_reference_vs_transformers"]


def part_flashkit(out, fx, device):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import flashkit  # first: nothing else native is loaded in this process yet (issue 22)
    import numpy as np
    d = os.path.join(out, "tiny")
    key = "flashkit_%s_vs_transformers" % device
    try:
        got = flashkit.Model(d, device=device, dtype="f32").session().prefill(fx["prompt"], all_logits=True)
    except flashkit.UnsupportedError as e:
        return {key: "unsupported: " + str(e)}, device != "cpu"
    ref = np.asarray(fx["logits_f64"])
    res = {key: rel(got, ref)}
    ok = res[key] <= LIMITS[key]
    if device == "cuda":
        res["flashkit_cuda_argmax_agreement"] = float(np.mean(np.argmax(got, 1) == np.argmax(ref, 1)))
        ok = ok and res["flashkit_cuda_argmax_agreement"] >= 0.9
    return res, ok


def merge(out):
    res, ok = {}, True
    for p in PARTS:
        try:
            with open(os.path.join(out, "check_%s.json" % p)) as f:
                r = json.load(f)
        except (OSError, ValueError):
            r = {"ok": False, "error": "no result (the part crashed or did not run)"}
        res[p] = r
        ok = ok and bool(r.get("ok"))
    res["ok"] = ok
    with open(os.path.join(out, "mamba_check.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1))
    return 0 if ok else 1


def main(argv):
    if len(argv) != 3 or argv[2] not in PARTS + ("merge",):
        sys.stderr.write("usage: mamba_check.py OUTDIR {%s}\n" % "|".join(PARTS + ("merge",)))
        return 2
    out, part = argv[1], argv[2]
    if part == "merge":
        return merge(out)
    path = os.path.join(out, "check_%s.json" % part)
    if os.path.exists(path):
        os.remove(path)  # a stale result must not stand in for a crashed run
    fx = load(out)
    res, ok = part_numpy(out, fx) if part == "numpy" else part_flashkit(out, fx, part)
    res["ok"] = bool(ok)
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps({part: res}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
