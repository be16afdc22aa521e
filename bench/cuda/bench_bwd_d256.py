"""The attention backward at head dim 256 (bf16, 16 heads, batch * seqlen = 32k tokens, seqlen 1k/4k/16k, causal or
not): flashkit against PyTorch SDPA's flash and cuDNN backends. Times the backward call alone (o and lse computed
once before), median of --reps; FLOPs = 2.5 x the forward's 4*b*s^2*h*d (halved when causal), the convention of
bench_attention.py. Also checks flashkit's dq/dk/dv against SDPA flash's gradients on each shape (relative L2 error).

flashkit's kernel follows the Tuning read from the environment at import, so the sm_80 kernel is a second run:
    FLASHKIT_SM90=0 python3 bench/cuda/bench_bwd_d256.py --methods flashkit --json sm80.json
    python3 bench/cuda/bench_bwd_d256.py --sm80 sm80.json --json d256.json
The second run prints one line per (causal, seqlen) with flashkit (new), sm80 (from the first), SDPA flash and cuDNN.
"""

import argparse
import json
import os
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from cuda_timing import timeit as median_ms  # bench/cuda/cuda_timing.py (the script's folder is on sys.path)
import torch.nn.functional as F

sys.path.insert(0, os.environ.get("FLASHKIT_PYDIR") or os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from flashkit import torch as fkt  # noqa: E402




def rel(a, b):
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def bench_shape(s, causal, args, methods):
    b, h, d = max(1, args.tokens // s), args.heads, args.head_dim
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    flops = 2.5 * 4.0 * b * s * s * h * d * (0.5 if causal else 1.0)
    res = {"seqlen": s, "batch": b, "heads": h, "head_dim": d, "causal": causal}
    sdpa_grads = None
    for m in methods:
        try:
            if m == "flashkit":
                o, lse = fkt.attention_forward(q, k, v, causal=causal)
                cost = fkt._capi.FkCost()
                grads = fkt.attention_backward(do, q, k, v, o, lse, causal=causal, cost=cost)
                res["flashkit_kernel"] = cost.kernel.decode()
                fn = lambda: fkt.attention_backward(do, q, k, v, o, lse, causal=causal)  # noqa: E731
                res["flashkit_grads"] = grads
            else:
                backend = SDPBackend.FLASH_ATTENTION if m == "sdpa_flash" else SDPBackend.CUDNN_ATTENTION
                qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_(True) for x in (q, k, v))
                dot = do.transpose(1, 2)
                with sdpa_kernel(backend):
                    o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                fn = lambda: torch.autograd.grad(o, (qt, kt, vt), dot, retain_graph=True)  # noqa: E731
                if m == "sdpa_flash":
                    sdpa_grads = [g.transpose(1, 2) for g in fn()]
            ms = median_ms(fn, args.reps)
            res[m] = {"bwd_ms": ms, "bwd_tflops": flops / ms / 1e9}
        except Exception as e:  # a backend that does not take this shape
            res[m] = {"error": str(e).splitlines()[0][:200]}
        torch.cuda.synchronize()
    fg = res.pop("flashkit_grads", None)
    if fg is not None and sdpa_grads is not None:
        res["rel_err_vs_sdpa_flash"] = {n: rel(a, r) for n, a, r in zip(("dq", "dk", "dv"), fg, sdpa_grads)}
    del q, k, v, do
    torch.cuda.empty_cache()
    return res


def tf(r, m):
    x = r.get(m) or {}
    return "%5.0f" % x["bwd_tflops"] if "bwd_tflops" in x else "  n/a"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqlens", default="1024,4096,16384")
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=256)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--methods", default="flashkit,sdpa_flash,sdpa_cudnn")
    ap.add_argument("--sm80", help="JSON of an earlier run under FLASHKIT_SM90=0 (its flashkit numbers)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    methods = args.methods.split(",")
    sm80 = {}
    if args.sm80 and os.path.exists(args.sm80):
        for r in json.load(open(args.sm80)):
            sm80[(r["causal"], r["seqlen"])] = r.get("flashkit", {})
    rows = []
    print("bwd d%d bf16, %d heads, %d tokens: TFLOP/s (backward alone)" % (args.head_dim, args.heads, args.tokens))
    for causal in (False, True):
        for s in (int(x) for x in args.seqlens.split(",")):
            r = bench_shape(s, causal, args, methods)
            if (causal, s) in sm80:
                r["flashkit_sm80"] = sm80[(causal, s)]
            rows.append(r)
            err = r.get("rel_err_vs_sdpa_flash")
            print("causal=%d s=%5d b=%2d: flashkit %s  sm80 %s  sdpa_flash %s  cudnn %s  [%s]%s" % (
                causal, s, r["batch"], tf(r, "flashkit"), tf(r, "flashkit_sm80"), tf(r, "sdpa_flash"),
                tf(r, "sdpa_cudnn"), r.get("flashkit_kernel", "-"),
                "" if not err else "  rel err vs sdpa dq %.1e dk %.1e dv %.1e" % (err["dq"], err["dk"], err["dv"])),
                flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
