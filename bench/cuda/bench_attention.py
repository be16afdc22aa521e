"""Benchmark flashkit's CUDA attention against PyTorch SDPA (flash and cuDNN backends) and flashkit's
standard (cuBLAS) path on the FlashAttention grid: seqlen 512..16k, batch = 16384/seqlen, heads = 2048/head_dim,
head_dim 64/128/256, causal or not, bf16. FLOPs = 4*b*s^2*h*d (halved when causal); backward counted as 2.5x
the forward, backward time = median(fwd+bwd) - median(fwd) (the convention of shared/anchors).
Also: decode bandwidth (seqlen_q = 1 against a KV cache) vs SDPA.

    python3 bench/cuda/bench_attention.py --out DIR [--quick]
Writes DIR/attention-cuda.json, DIR/attention-cuda.md, DIR/attention-cuda.png, DIR/decode-cuda.json.
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from cuda_timing import timeit  # bench/cuda/cuda_timing.py (the script's folder is on sys.path)

sys.path.insert(0, os.environ.get("FLASHKIT_PYDIR") or os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from flashkit import torch as fkt  # noqa: E402


TIMING = "eager"




def graph_time(fn, reps, calls=10):
    """GPU time per call of fn, from replays of a CUDA graph of `calls` calls (host overhead excluded)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return timeit(g.replay, reps) / calls


def flops_fwd(b, s, h, d, causal):
    f = 4.0 * b * s * s * h * d
    return f / 2 if causal else f


def bench_grid(seqlens, dims, reps, with_standard_max, only=None, causals=(False, True), fwd_only=False):
    rows = []
    for d in dims:
        for causal in causals:
            for s in seqlens:
                b, h = max(1, 16384 // s), 2048 // d
                torch.manual_seed(0)
                q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
                k = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
                v = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
                do = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
                qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
                dot = do.transpose(1, 2).contiguous()
                ff = flops_fwd(b, s, h, d, causal)
                res = {"head_dim": d, "causal": causal, "seqlen": s, "batch": b, "heads": h}
                methods = {}

                def fk(impl):
                    def fwd():
                        return fkt.attention_forward(q, k, v, causal=causal, impl=impl)

                    o, lse = fwd()

                    def fwdbwd():
                        o2, l2 = fwd()
                        return fkt.attention_backward(do, q, k, v, o2, l2, causal=causal, impl=impl)

                    return fwd, fwdbwd

                methods["flashkit"] = fk("flash")
                if s <= with_standard_max:
                    methods["flashkit_standard"] = fk("standard")

                def sd(backend):
                    qg, kg, vg = (x.detach().requires_grad_(True) for x in (qt, kt, vt))

                    def fwd():
                        with sdpa_kernel(backend):
                            return F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)

                    def fwdbwd():
                        with sdpa_kernel(backend):
                            o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
                        o.backward(dot)

                    return fwd, fwdbwd

                methods["sdpa_flash"] = sd(SDPBackend.FLASH_ATTENTION)
                methods["sdpa_cudnn"] = sd(SDPBackend.CUDNN_ATTENTION)
                if only:
                    methods = {m: f for m, f in methods.items() if m in only}
                for name, (fwd, fwdbwd) in methods.items():
                    res[name] = {}
                    # The first mode that works is the headline (fwd_ms, fwd_tflops, ...; "timing" says which);
                    # the other is kept with its name as a prefix.
                    for mode in (("graph", "eager") if TIMING == "both" else (TIMING,)):
                        try:
                            tm = (lambda fn: graph_time(fn, reps, calls=4)) if mode == "graph" else (lambda fn: timeit(fn, reps))
                            tf = tm(fwd)
                            tfb = tm(fwdbwd) if not fwd_only else 2 * tf
                            tb = max(tfb - tf, 1e-6)
                            pre = mode + "_" if "timing" in res[name] else ""
                            res[name].setdefault("timing", mode)
                            res[name].update({pre + "fwd_ms": tf, pre + "bwd_ms": tb, pre + "fwd_tflops": ff / tf / 1e9,
                                              pre + "bwd_tflops": 2.5 * ff / tb / 1e9})
                        except Exception as e:  # a backend that does not take this shape, or cannot be captured
                            res[name][mode + "_error"] = str(e).splitlines()[0][:200]
                            torch.cuda.synchronize()
                    if "timing" not in res[name]:
                        res[name]["error"] = "; ".join(v for k, v in res[name].items() if k.endswith("_error"))
                    torch.cuda.synchronize()
                rows.append(res)
                line = " ".join("%s %s" % (m, "%.0f/%.0f" % (res[m]["fwd_tflops"], res[m]["bwd_tflops"])
                                           if "fwd_tflops" in res[m] else "n/a") for m in methods)
                print("d%d causal=%d s=%d: %s" % (d, causal, s, line), flush=True)
                del q, k, v, do, qt, kt, vt, dot
                torch.cuda.empty_cache()
    return rows


def bench_decode(reps, batch1=False):
    out = []
    cases = [(1, 32, 8, 128), (1, 8, 1, 256), (16, 32, 8, 128), (64, 32, 8, 128)]
    if batch1:
        cases = cases[:2]
    for b, h, hkv, d in cases:
        for kv in (1024, 8192, 32768, 131072):
            if b * kv * hkv * d * 2 * 2 > 40e9:
                continue
            q = torch.randn(b, 1, h, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(b, kv, hkv, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(b, kv, hkv, d, device="cuda", dtype=torch.bfloat16)
            nbytes = 2.0 * b * kv * hkv * d * 2
            cost = fkt._capi.FkCost()
            fkt.attention_forward(q, k, v, cost=cost)
            torch.cuda.synchronize()
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
            fk_call = lambda: fkt.attention_forward(q, k, v)  # noqa: E731
            sd_call = lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)  # noqa: E731
            t_fk_eager = timeit(fk_call, reps)
            try:
                t_sd_eager = timeit(sd_call, reps)
            except Exception:
                t_sd_eager = float("nan")
            timing = "cuda graph"
            try:
                t_fk = graph_time(fk_call, reps)
                t_sd = graph_time(sd_call, reps)
            except Exception as e:
                print("graph capture failed (%s); eager timings" % str(e).splitlines()[0][:120])
                timing = "eager"
                t_fk, t_sd = t_fk_eager, t_sd_eager
            r = {"batch": b, "heads": h, "kv_heads": hkv, "head_dim": d, "kv_len": kv, "kv_bytes": nbytes,
                 "flashkit_us": t_fk * 1e3, "flashkit_TBps": nbytes / t_fk / 1e9, "sdpa_us": t_sd * 1e3,
                 "sdpa_TBps": nbytes / t_sd / 1e9, "flashkit_kernel": cost.kernel.decode(), "timing": timing,
                 "flashkit_eager_us": t_fk_eager * 1e3, "sdpa_eager_us": t_sd_eager * 1e3}
            out.append(r)
            print("decode b%d h%d/%d d%d kv%d (%s): flashkit %.1f us %.2f TB/s (%.0f%%)  sdpa %.1f us %.2f TB/s "
                  "(%.0f%%)  eager: flashkit %.1f us sdpa %.1f us  [%s]" % (
                      b, h, hkv, d, kv, timing, r["flashkit_us"], r["flashkit_TBps"], 100 * r["flashkit_TBps"] / 4.24,
                      r["sdpa_us"], r["sdpa_TBps"], 100 * r["sdpa_TBps"] / 4.24, r["flashkit_eager_us"],
                      r["sdpa_eager_us"], r["flashkit_kernel"]), flush=True)
            del q, k, v
            torch.cuda.empty_cache()
    return out


def table(rows, pre=""):
    methods = ["flashkit", "sdpa_flash", "sdpa_cudnn", "flashkit_standard"]
    seqlens = sorted({r["seqlen"] for r in rows})
    lines = ["| head_dim | causal | method | " + " | ".join(str(s) for s in seqlens) + " |",
             "|---|---|---|" + "---|" * len(seqlens)]
    for d in sorted({r["head_dim"] for r in rows}):
        for causal in (False, True):
            for m in methods:
                cells = []
                for s in seqlens:
                    r = next((x for x in rows if x["head_dim"] == d and x["causal"] == causal and x["seqlen"] == s), None)
                    if r is None or m not in r or pre + "fwd_tflops" not in r[m]:
                        cells.append("-")
                    else:
                        # A headline that is not graph-timed (the graph capture failed) is marked.
                        mark = "*" if not pre and TIMING != "eager" and r[m].get("timing") == "eager" else ""
                        cells.append("%.0f / %.0f%s" % (r[m][pre + "fwd_tflops"], r[m][pre + "bwd_tflops"], mark))
                lines.append("| %d | %s | %s | %s |" % (d, causal, m, " | ".join(cells)))
    return "\n".join(lines)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    dims = sorted({r["head_dim"] for r in rows})
    fig, axes = plt.subplots(2, 2 * len(dims), figsize=(6 * len(dims) * 1.6, 7), squeeze=False)
    for j, d in enumerate(dims):
        for ci, causal in enumerate((False, True)):
            for pi, phase in enumerate(("fwd", "bwd")):
                ax = axes[pi][2 * j + ci]
                for m in ["flashkit", "sdpa_flash", "sdpa_cudnn", "flashkit_standard"]:
                    xs, ys = [], []
                    for r in rows:
                        if r["head_dim"] == d and r["causal"] == causal and m in r and "fwd_tflops" in r[m]:
                            xs.append(r["seqlen"])
                            ys.append(r[m][phase + "_tflops"])
                    if xs:
                        ax.plot(xs, ys, marker="o", label=m)
                ax.set_xscale("log", base=2)
                ax.set_title("d=%d causal=%s %s" % (d, causal, phase), fontsize=9)
                ax.set_ylabel("TFLOP/s")
                ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--no-decode", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated methods; prints a summary and writes nothing")
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--fwd-only", action="store_true")
    ap.add_argument("--decode-only", action="store_true")
    ap.add_argument("--batch1", action="store_true", help="decode: batch-1 shapes only")
    ap.add_argument("--timing", choices=("eager", "graph", "both"), default="both",
                    help="prefill grid: eager = one Python call per CUDA-event pair (host overhead included when the "
                         "GPU waits for it); graph = replays of a CUDA graph of 4 calls (GPU time only); both = graph "
                         "as the headline and eager_* fields beside it")
    args = ap.parse_args()
    global TIMING
    TIMING = args.timing
    os.makedirs(args.out, exist_ok=True)
    seqlens = [512, 2048, 8192] if args.quick else [512, 1024, 2048, 4096, 8192, 16384]
    if args.only:
        rows = bench_grid(seqlens, [int(d) for d in args.dims.split(",")], args.reps, 0, only=args.only.split(","),
                          fwd_only=args.fwd_only)
        return
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "dtype": "bf16",
            "timing": args.timing}
    print(meta, flush=True)
    if args.decode_only:
        dec = bench_decode(max(args.reps, 20), batch1=args.batch1)
        with open(os.path.join(args.out, "decode-cuda.json"), "w") as f:
            json.dump({"meta": meta, "rows": dec}, f, indent=1)
        return
    rows = bench_grid(seqlens, [64, 128, 256], args.reps, with_standard_max=4096)
    with open(os.path.join(args.out, "attention-cuda.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    md = "# flashkit CUDA attention vs SDPA, %s, %s\n\nTFLOP/s forward / backward (bf16), timing: %s.\n\n%s\n" % (
        meta["device"], meta["date"], "CUDA-graph replays (GPU time; * = eager, the call could not be captured)"
        if args.timing != "eager" else "eager", table(rows))
    if args.timing == "both":
        md += "\nThe same, eager (one Python call per CUDA-event pair, host overhead included):\n\n%s\n" % table(rows, "eager_")
    with open(os.path.join(args.out, "attention-cuda.md"), "w") as f:
        f.write(md)
    print(md, flush=True)
    try:
        plot(rows, os.path.join(args.out, "attention-cuda.png"))
    except Exception as e:
        print("plot failed:", e)
    if not args.no_decode:
        dec = bench_decode(max(args.reps, 20))
        with open(os.path.join(args.out, "decode-cuda.json"), "w") as f:
            json.dump({"meta": meta, "rows": dec}, f, indent=1)


if __name__ == "__main__":
    main()
