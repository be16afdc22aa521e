"""The Hopper attention backward at head dims 64 and 128 (bf16, 16 heads, batch * seqlen = 32k tokens, seqlen
1k/4k/16k, causal or not): the warp-specialized kernel (v22, flash_bwd_sm90_ws.cuh) against the cp.async one (v6,
flash_bwd_sm90.cuh) in one process (FLASHKIT_SM90_BWD_WS switched and the library's tuning re-read between the two),
and PyTorch SDPA's flash and cuDNN backends. Times the backward call alone (o and lse computed once before), median of
--reps; FLOPs = 2.5 x the forward's 4*b*s^2*h*d (halved when causal), the convention of bench_attention.py. Each
flashkit kernel's dq/dk/dv is checked against SDPA flash's gradients (relative L2 error), and the kernel that ran
(OpCost.kernel) is printed, so a silent fallback shows.
    python3 bench/cuda/bench_bwd_ws.py --json bwd-ws.json
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

# flashkit's backward kernels by the value of FLASHKIT_SM90_BWD_WS they run under.
KERNELS = {"v22": "1", "v6": "0"}


def use_kernel(name):
    os.environ["FLASHKIT_SM90_BWD_WS"] = KERNELS[name]
    fkt._capi.core_lib.fk_tuning_from_env()


def rel(a, b):
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def bench_shape(s, d, causal, args, methods):
    b, h = max(1, args.tokens // s), args.heads
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    flops = 2.5 * 4.0 * b * s * s * h * d * (0.5 if causal else 1.0)
    res = {"seqlen": s, "batch": b, "heads": h, "head_dim": d, "causal": causal}
    grads, sdpa_grads = {}, None
    for m in methods:
        try:
            if m in KERNELS:
                use_kernel(m)
                o, lse = fkt.attention_forward(q, k, v, causal=causal)
                cost = fkt._capi.FkCost()
                grads[m] = fkt.attention_backward(do, q, k, v, o, lse, causal=causal, cost=cost)
                res[m + "_kernel"] = cost.kernel.decode()
                fn = lambda: fkt.attention_backward(do, q, k, v, o, lse, causal=causal)  # noqa: E731
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
    if sdpa_grads is not None:
        for m, g in grads.items():
            res[m + "_rel_err_vs_sdpa_flash"] = {n: rel(a, r) for n, a, r in zip(("dq", "dk", "dv"), g, sdpa_grads)}
    del q, k, v, do, grads
    torch.cuda.empty_cache()
    return res


def tf(r, m):
    x = r.get(m) or {}
    return "%5.0f" % x["bwd_tflops"] if "bwd_tflops" in x else "  n/a"


def errs(r, m):
    e = r.get(m + "_rel_err_vs_sdpa_flash")
    return "-" if not e else "%.1e/%.1e/%.1e" % (e["dq"], e["dk"], e["dv"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqlens", default="1024,4096,16384")
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--methods", default="v22,v6,sdpa_flash,sdpa_cudnn")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    methods = args.methods.split(",")
    rows = []
    for d in (int(x) for x in args.head_dims.split(",")):
        print("bwd d%d bf16, %d heads, %d tokens: TFLOP/s (backward alone); rel err vs sdpa flash dq/dk/dv"
              % (d, args.heads, args.tokens))
        for causal in (False, True):
            for s in (int(x) for x in args.seqlens.split(",")):
                r = bench_shape(s, d, causal, args, methods)
                rows.append(r)
                print("d%d causal=%d s=%5d b=%2d: v22 %s  v6 %s  sdpa_flash %s  cudnn %s  [%s | %s]  err v22 %s  v6 %s" % (
                    d, causal, s, r["batch"], tf(r, "v22"), tf(r, "v6"), tf(r, "sdpa_flash"), tf(r, "sdpa_cudnn"),
                    r.get("v22_kernel", "-"), r.get("v6_kernel", "-"), errs(r, "v22"), errs(r, "v6")), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
