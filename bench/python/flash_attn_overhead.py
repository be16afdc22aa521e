"""Host overhead per eager call of flashkit's PyTorch front ends against SDPA, and the time of a 4k-key decode call.

    python3 bench/python/flash_attn_overhead.py [--device cuda] [--json out.json] [--tiny]

Rows (each one call of q [1, 1, 32, 128] against k/v [1, Sk, 8, 128], bf16 on CUDA / f32 on the CPU; all under
torch.inference_mode() unless the name says [no_grad]):
  flash_attn_func     flashkit.flash_attn.flash_attn_func: argument checks + the operator (the backend that loaded:
                      "extension" or the ctypes fallback; with the extension in eager mode through fwd_eager)
  fwd_eager           the extension's eager entry point alone (flashkit::fwd through the dispatcher, no torch.ops)
  torch.ops.fwd       the operator alone through its packet (extension only)
  fwd.default         the operator's overload (what flash_attn_func calls under torch.compile)
  torch.empty x2      the two output allocations alone (the floor of any op that returns new tensors)
  ctypes              flashkit.torch.attention_forward: the C API through ctypes (issue 22's path)
  sdpa                torch.nn.functional.scaled_dot_product_attention (heads repeated for GQA beforehand)
  ... [no_grad]       the same call under torch.no_grad() (how transformers' generate() runs): the operator's
                      autograd kernel runs too
Host us/call: the calling thread's time per call over back-to-back calls at Sk=16, where the GPU finishes each call
before the host issues the next, so the host is the bottleneck (the whole time is host work on the CPU device).
Rows are timed in interleaved rounds (best round each), so load from other processes hits them alike.
Decode us/call: wall time per call at Sk=4096 with the device synchronized at the end (CUDA) of 200 calls.
--tiny: q [1, 1, 1, 8], k/v [1, Sk, 1, 8]: on the CPU device the kernel's work is then negligible and the rows
measure the host path alone; with --clock thread (the calling thread's CPU time) and FLASHKIT_NUM_THREADS=1 that is
how a shared CPU-only machine measures it.
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


_CLOCK = [time.perf_counter]  # --clock thread: time.thread_time (CPU time of this thread: blind to time spent
                               # descheduled on a loaded host, and to the GPU; for the CPU device only)


def _run_us(fn, device, iters):
    clock = _CLOCK[0]
    t0 = clock()
    for _ in range(iters):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return (clock() - t0) / iters * 1e6


def per_call_us(rows, device, iters, warmup=50, rounds=5):
    """Best of `rounds` runs per row, the rows interleaved round by round: the least disturbed by other processes."""
    for fn in rows.values():
        for _ in range(warmup):
            fn()
    best = {name: float("inf") for name in rows}
    for _ in range(rounds):
        for name, fn in rows.items():
            best[name] = min(best[name], _run_us(fn, device, iters))
    return best


def calls(device, sk, tiny=False):
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    g = torch.Generator(device="cpu").manual_seed(0)
    h, hkv, d = (1, 1, 8) if tiny else (32, 8, 128)
    q = torch.randn(1, 1, h, d, generator=g).to(device, dtype)
    k = torch.randn(1, sk, hkv, d, generator=g).to(device, dtype)
    v = torch.randn(1, sk, hkv, d, generator=g).to(device, dtype)
    qt = q.transpose(1, 2)
    kt = k.transpose(1, 2).repeat_interleave(h // hkv, dim=1)
    vt = v.transpose(1, 2).repeat_interleave(h // hkv, dim=1)
    rows = {
        "flash_attn_func": lambda: flash_attn_func(q, k, v, 0.0, None, True),
        "ctypes": lambda: fkt.attention_forward(q, k, v, True),
    }
    if hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0
        rows["sdpa"] = lambda: F.scaled_dot_product_attention(qt, kt, vt)
    if _torch_ops.BACKEND == "extension":
        fwd_eager = getattr(_torch_ops, "fwd_eager", None)  # None: an extension built before it
        if fwd_eager is not None:
            rows["fwd_eager"] = lambda: fwd_eager(q, k, v, True)
        rows["torch.ops.fwd"] = lambda: torch.ops.flashkit.fwd(q, k, v, None, None, 0.0, True, -1, -1, 0.0, 0)
        fwd = torch.ops.flashkit.fwd.default
        rows["fwd.default"] = lambda: fwd(q, k, v, None, None, 0.0, True, -1, -1, 0.0, 0)
        rows["torch.empty x2"] = lambda: (torch.empty_like(q), q.new_empty((1, h, 1), dtype=torch.float32))
    return rows


_NO_GRAD_ROWS = ("flash_attn_func", "fwd.default")


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
    ap.add_argument("--tiny", action="store_true", help="heads 1, head_dim 8: the host path alone on the CPU device")
    ap.add_argument("--clock", choices=("wall", "thread"), default="wall",
                    help="thread: this thread's CPU time (a shared, loaded CPU machine; --device cpu only)")
    ap.add_argument("--profile", metavar="TXT", help="also write torch.profiler's table of one call's host time here")
    args = ap.parse_args()
    if args.clock == "thread":
        if args.device != "cpu":
            ap.error("--clock thread: --device cpu only (thread CPU time does not see the GPU)")
        _CLOCK[0] = time.thread_time
    result = {"backend": _torch_ops.BACKEND, "torch": torch.__version__, "device": args.device, "tiny": args.tiny,
              "clock": args.clock, "rows": {}}
    with torch.inference_mode():
        host = per_call_us(calls(args.device, 16, args.tiny), args.device, args.iters)
        decode = per_call_us(calls(args.device, 4096, args.tiny), args.device, 200, 20)
    with torch.no_grad():
        for sk, out, iters, warmup in ((16, host, args.iters, 50), (4096, decode, 200, 20)):
            rows = {n: f for n, f in calls(args.device, sk, args.tiny).items() if n in _NO_GRAD_ROWS}
            out.update({n + " [no_grad]": t for n, t in per_call_us(rows, args.device, iters, warmup).items()})
    print("backend %s, torch %s, %s" % (result["backend"], result["torch"], args.device))
    print("%-26s %14s %22s" % ("call", "host us/call", "decode Sk=4096 us/call"))
    for name in host:
        result["rows"][name] = {"host_us": round(host[name], 2), "decode_us": round(decode[name], 2)}
        print("%-26s %14.2f %22.2f" % (name, host[name], decode[name]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.profile:
        with torch.inference_mode():
            profile(args.device, args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
