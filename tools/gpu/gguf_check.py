#!/usr/bin/env python3
"""GGUF K-quant checks on the GPU machine (run by tools/gpu/gguf.sh): the logits of tests/data/gguf/
tiny-qwen3-kquant.gguf from flashkit on the CPU (blocks kept, dtype auto), the CPU with weights dequantized to f32,
and CUDA (blocks kept on the device, dequantized in the kernels), compared with each other and, when the `gguf` package is
importable, with transformers' own GGUF loader (which dequantizes with gguf-py, an implementation independent of
flashkit's). Prints one line per comparison and writes a JSON summary to argv[1]. Exit status 1 on a failed bound.
"""
import json
import sys

import numpy as np

import flashkit

FILE = "tests/data/gguf/tiny-qwen3-kquant.gguf"
PROMPT = [(i * 37 + 5) % 64 for i in range(13)]


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def top1(a, b):
    return float(np.mean(np.argmax(a, -1) == np.argmax(b, -1)))


def fk_logits(device, dtype):
    m = flashkit.Model(FILE, device=device, dtype=dtype)
    with m.session() as s:
        return np.asarray(s.prefill(PROMPT, all_logits=True), dtype=np.float64)


def main():
    out = {}
    ok = True
    cpu_q = fk_logits("cpu", "auto")
    cpu_f = fk_logits("cpu", "f32")
    cuda = fk_logits("cuda", "auto")
    # CUDA holds the weights (and the intermediates) in bf16: a random tiny model's near-tied logits may swap.
    for name, a, b, bound, min_top1 in (("cpu_blocks_vs_cpu_f32", cpu_q, cpu_f, 1e-5, 1.0),
                                        ("cuda_vs_cpu_f32", cuda, cpu_f, 3e-2, 0.75)):
        e, t = rel(a, b), top1(a, b)
        out[name] = {"rel_err": e, "top1": t, "bound": bound}
        good = e < bound and t >= min_top1
        ok &= good
        print(f"{name}: rel err {e:.3g} (bound {bound}), top-1 agreement {t:.2f} -> {'OK' if good else 'FAIL'}")
    try:
        import gguf  # noqa: F401
        import torch
        import transformers
    except ImportError as e:
        print(f"transformers GGUF check: skipped ({e})")
        out["transformers"] = "skipped: " + str(e)
    else:
        import os
        try:  # transformers' loader may not map everything this file holds: say so, do not fail the job for it
            model = transformers.AutoModelForCausalLM.from_pretrained(
                os.path.dirname(os.path.abspath(FILE)), gguf_file=os.path.basename(FILE), dtype=torch.float32)
            with torch.no_grad():
                ref = model(torch.tensor([PROMPT])).logits[0].double().numpy()
        except Exception as e:  # noqa: BLE001
            print(f"transformers GGUF check: could not load or run ({type(e).__name__}: {e})")
            out["transformers"] = f"could not run: {type(e).__name__}: {e}"
            ref = None
    if "transformers" not in out:
        e, t = rel(cpu_q, ref), top1(cpu_q, ref)
        good = e < 1e-4 and t >= 0.9
        ok &= good
        out["cpu_blocks_vs_transformers_gguf"] = {"rel_err": e, "top1": t, "bound": 1e-4,
                                                  "transformers": transformers.__version__}
        print(f"cpu_blocks_vs_transformers_gguf: rel err {e:.3g} (bound 1e-4), top-1 {t:.2f} -> "
              f"{'OK' if good else 'FAIL'}")
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
