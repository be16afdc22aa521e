"""Sustained throughput, SM clock and power of attention forward calls, side by side (docs/worklog/
attention-fp8-cuda.md v7: a sustained fp8 call runs at the H200's 700 W cap, ~11% below the light-load clock, so a
kernel's TFLOP/s is partly a question of energy per tile). For each call: a warm-up, then calls back to back for
--seconds while nvidia-smi samples the SM clock and power every 100 ms; prints TFLOP/s over the window (CUDA
events around the whole loop), the median clock and power of the samples inside it, and TFLOP/s per GHz.

    python3 bench/cuda/power_clock_probe.py --shim build/lib/libfk_fp8_shim.so --out DIR [--seconds 3]

Calls: flashkit's fp8 and bf16 forwards (through bench/cuda/fp8_shim.cpp) and PyTorch SDPA's cuDNN and flash
backends (bf16), at d128 non-causal 16k (b 2, 16 heads) and d64 causal 1k (b 32, 16 heads). Writes
DIR/power-clock-probe.json.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench_attention_fp8 import check, load_shim, quantize  # the script's folder is on sys.path


def sampler():
    return subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader",
                             "-lms", "100"], stdout=subprocess.PIPE, text=True)


def parse(lines):
    out = []
    for line in lines:
        parts = [x.strip() for x in line.split(",")]
        if len(parts) < 3:
            continue
        try:
            ts = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f")
            out.append((ts, float(parts[1].split()[0]), float(parts[2].split()[0])))
        except ValueError:
            continue
    return out


def sustained(fn, seconds):
    """(calls, ms) of fn() run back to back for about `seconds`, and the wall-clock window."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = datetime.datetime.now()
    s.record()
    calls, start = 0, time.time()
    while time.time() - start < seconds:
        for _ in range(4):
            fn()
        calls += 4
        torch.cuda.synchronize()
    e.record()
    e.synchronize()
    return calls, s.elapsed_time(e), t0, datetime.datetime.now()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shim", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    lib = load_shim(args.shim)
    smi = sampler()
    time.sleep(0.5)
    windows = []
    for d, s, causal, with_fp8 in ((128, 16384, False, True), (64, 1024, True, False)):
        b, h = max(1, 32768 // s), 16
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        ob = torch.empty_like(q)
        lseb = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
        calls = {}

        def bf16():
            check(lib, lib.fkb_bf16_forward(q.data_ptr(), k.data_ptr(), v.data_ptr(), ob.data_ptr(), lseb.data_ptr(),
                                            b, s, s, h, h, d, int(causal)))
        calls["flashkit_bf16"] = bf16
        if with_fp8:
            q8, qs = quantize(lib, q)
            k8, ks = quantize(lib, k)
            v8, vs = quantize(lib, v)

            def fp8():
                check(lib, lib.fkb_fp8_forward(q8.data_ptr(), k8.data_ptr(), v8.data_ptr(), ob.data_ptr(),
                                               lseb.data_ptr(), b, s, s, h, h, d, qs, ks, vs, int(causal)))
            calls["flashkit_fp8"] = fp8
        qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
        for name, be in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
            def f(be=be):
                with sdpa_kernel(be):
                    return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
            try:
                f()
                calls[name] = f
            except RuntimeError as e:
                print("  %s unavailable: %s" % (name, str(e).splitlines()[0]))
        flops = 4.0 * b * s * s * h * d / (2 if causal else 1)
        for name, fn in calls.items():
            n, ms, t0, t1 = sustained(fn, args.seconds)
            windows.append({"impl": name, "head_dim": d, "seqlen": s, "batch": b, "heads": h, "causal": causal,
                            "calls": n, "ms": ms, "tflops": flops * n / ms / 1e9, "t0": t0, "t1": t1})
            time.sleep(1.0)  # a pause between windows, as between the benchmark's calls
    smi.terminate()
    samples = parse(smi.communicate()[0].splitlines())
    rows = []
    for w in windows:
        inside = [x for x in samples if w["t0"] + datetime.timedelta(seconds=0.5) <= x[0] <= w["t1"]]
        clk = statistics.median(x[1] for x in inside) if inside else float("nan")
        pw = statistics.median(x[2] for x in inside) if inside else float("nan")
        r = {k: v for k, v in w.items() if k not in ("t0", "t1")}
        r.update({"sm_clock_mhz": clk, "power_w": pw, "samples": len(inside),
                  "tflops_per_ghz": r["tflops"] / (clk / 1000.0) if inside else float("nan")})
        rows.append(r)
        print("power probe d%d %s s=%d: %-14s %6.0f TFLOP/s sustained at %4.0f MHz %3.0f W (%.0f TFLOP/s per GHz, %d "
              "samples)" % (r["head_dim"], "causal" if r["causal"] else "full", r["seqlen"], r["impl"], r["tflops"],
                            clk, pw, r["tflops_per_ghz"], len(inside)), flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "power-clock-probe.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
