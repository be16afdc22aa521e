"""One import order in this fresh interpreter: imports the modules named on the command line in that order, then
loads the shipped model (models/target, or --model DIR), generates greedily from text and runs attention (numpy, and
torch when it was imported), each checked against a plain reference. Prints one line, "ok <order>: <text>", and exits
0; a failure prints "FAIL <order>: <why>" and exits 1 (a crash shows as a signal in the caller's exit status).

Used by tests/python/test_import_order.py (one subprocess per order) and tools/gpu/pyload.sh (the GPU machine's
python3, whose numpy and torch bundle their own OpenBLAS / OpenMP)."""

import argparse
import faulthandler
import importlib
import os
import sys

faulthandler.enable()  # a crash prints the Python stack before the signal kills the process

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir))


def attention_reference(np, q, k, v):
    """Causal softmax attention in float64, [batch, seq, heads, dim] (seq_q == seq_k)."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    n = q.shape[1]
    s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", p, v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("modules", nargs="+", help="modules to import, in order (flashkit, flashkit.torch, numpy, torch)")
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "target"))
    ap.add_argument("--max-new-tokens", type=int, default=12)
    a = ap.parse_args()
    order = ",".join(a.modules)
    try:
        for name in a.modules:
            importlib.import_module(name)
        import flashkit
        import numpy as np

        rng = np.random.default_rng(7)
        q, k, v = (rng.standard_normal((1, 37, 2, 16)).astype(np.float32) for _ in range(3))
        o, _ = flashkit.attention(q, k, v, causal=True)
        err = float(np.abs(o - attention_reference(np, q, k, v)).max())
        if not err < 1e-4:
            raise AssertionError("numpy attention differs from the reference by %g" % err)
        if "torch" in sys.modules:
            import torch
            import flashkit.torch as fkt

            t = [torch.from_numpy(x).requires_grad_(True) for x in (q, k, v)]
            ot = fkt.flash_attn_func(*t, causal=True)
            ot.sum().backward()
            err = float((ot.detach() - torch.from_numpy(o)).abs().max())
            if not err < 1e-5:
                raise AssertionError("flashkit.torch differs from flashkit.attention by %g" % err)
        with flashkit.Model(a.model) as m:
            text = m.generate("Once upon a time", max_new_tokens=a.max_new_tokens, temperature=0)
            m.generate([0, 5, 6, 7], max_new_tokens=3)
        print("ok %s: %r" % (order, text), flush=True)
        return 0
    except BaseException as e:  # one line for the caller, whatever went wrong
        print("FAIL %s: %s: %s" % (order, type(e).__name__, e), flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
