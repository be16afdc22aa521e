"""Host overhead per eager call of flashkit's PyTorch front ends against SDPA, and the time of a 4k-key decode call.

    python3 bench/python/flash_attn_overhead.py [--device cuda] [--json out.json]

Rows (each one call of q [1, 1, 32, 128] against k/v [1, Sk, 8, 128], bf16 on CUDA / f32 on the CPU):
  flash_attn_func     flashkit.flash_attn.flash_attn_func: argument checks + torch.ops.flashkit.fwd (the backend
                      that loaded: "extension" or the ctypes fallback)
  torch.ops.fwd       the operator alone through its packet (extension only)
  fwd.default         the operator's overload (what flashkit.flash_attn calls)
  torch.empty x2      the two output allocations alone (the floor of any op that returns new tensors)
  ctypes              flashkit.torch.attention_forward: the C API through ctypes (issue 22's path)
  sdpa                torch.nn.functional.scaled_dot_product_attention (heads repeated for GQA beforehand)
Host us/call: the calling thread's time per call over back-to-back calls at Sk=16, where the GPU finishes each call
before the host issues the next, so the host is the bottleneck (the whole time is host work on the CPU device).
Decode us/call: wall time per call at Sk=4096 with the device synchronized at the end (CUDA) of 200 calls.
"""

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "python"))
from flashkit import _torch_ops  # noqa: E402
from flashkit import torch as fkt  # noqa: E402
from flashkit.flash_attn import flash_attn_func  # noqa: E402

F = torch.nn.functional


def per_call_us(fn, device, iters, warmup=50):
    for _ in range(warmup):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):  # best of 5 runs: the least disturbed by the other processes on the host
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / iters * 1e6)
    return best


def calls(device, sk):
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    g = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(1, 1, 32, 128, generator=g).to(device, dtype)
    k = torch.randn(1, sk, 8, 128, generator=g).to(device, dtype)
    v = torch.randn(1, sk, 8, 128, generator=g).to(device, dtype)
    qt = q.transpose(1, 2)
    kt = k.transpose(1, 2).repeat_interleave(4, dim=1)
    vt = v.transpose(1, 2).repeat_interleave(4, dim=1)
    rows = {
        "flash_attn_func": lambda: flash_attn_func(q, k, v, 0.0, None, True),
        "ctypes": lambda: fkt.attention_forward(q, k, v, True),
    }
    if hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0
        rows["sdpa"] = lambda: F.scaled_dot_product_attention(qt, kt, vt)
    if _torch_ops.BACKEND == "extension":
        rows["torch.ops.fwd"] = lambda: torch.ops.flashkit.fwd(q, k, v, None, None, 0.0, True, -1, -1, 0.0, 0)
        fwd = torch.ops.flashkit.fwd.default
        rows["fwd.default"] = lambda: fwd(q, k, v, None, None, 0.0, True, -1, -1, 0.0, 0)
        rows["torch.empty x2"] = lambda: (torch.empty_like(q), q.new_empty((1, 32, 1), dtype=torch.float32))
    return rows


def profile(device, out_path):
    """Where the host time of one flash_attn_func call goes: torch.profiler over 500 calls (CPU ops and, on CUDA, the
    runtime API calls), as a table sorted by self CPU time."""
    f = calls(device, 16)["flash_attn_func"]
    for _ in range(100):
        f()
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(500):
            f()
        if device == "cuda":
            torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
    print(table)
    if out_path:
        with open(out_path, "w") as fh:
            fh.write(table)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--json")
    ap.add_argument("--profile", metavar="TXT", help="also write torch.profiler's table of one call's host time here")
    args = ap.parse_args()
    result = {"backend": _torch_ops.BACKEND, "torch": torch.__version__, "device": args.device, "rows": {}}
    with torch.inference_mode():
        host = {n: per_call_us(f, args.device, args.iters) for n, f in calls(args.device, 16).items()}
        decode = {n: per_call_us(f, args.device, 200, 20) for n, f in calls(args.device, 4096).items()}
    print("backend %s, torch %s, %s" % (result["backend"], result["torch"], args.device))
    print("%-16s %14s %22s" % ("call", "host us/call", "decode Sk=4096 us/call"))
    for name in host:
        result["rows"][name] = {"host_us": round(host[name], 2), "decode_us": round(decode[name], 2)}
        print("%-16s %14.2f %22.2f" % (name, host[name], decode[name]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.profile:
        with torch.inference_mode():
            profile(args.device, args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
