#!/usr/bin/python3
"""Regenerates the PNG plots of bench/results/ from the JSON files there (one question per figure).

    /usr/bin/python3 tools/plots/make_plots.py [--results bench/results] [--only NAME]

Each plot function reads its JSON, writes one PNG next to it and says which question the figure answers in its
title. Needs matplotlib (tools/install-test-deps.sh installs it).
"""
import argparse
import glob
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

IMPL_STYLE = {  # one colour and marker per implementation, in every figure
    "flashkit": ("tab:blue", "o", "flashkit flash"),
    "flashkit_standard": ("tab:red", "v", "flashkit standard (materialized S)"),
    "sdpa_flash": ("tab:orange", "s", "PyTorch SDPA flash"),
    "sdpa_cudnn": ("tab:green", "^", "PyTorch SDPA cuDNN"),
}


def load(path):
    with open(path) as f:
        return json.load(f)


def save(fig, path):
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print("wrote", path)


def attention_cuda(path):
    """Attention TFLOP/s vs sequence length, flashkit vs PyTorch SDPA: rows = pass and mask, columns = head dim."""
    j = load(path)
    meta, rows = j["meta"], j["rows"]
    dims = sorted({r["head_dim"] for r in rows})
    panels = [("fwd", False), ("fwd", True), ("bwd", False), ("bwd", True)]
    fig, axes = plt.subplots(len(panels), len(dims), figsize=(4.2 * len(dims), 3.0 * len(panels)), squeeze=False,
                             sharex=True)
    for i, (pass_, causal) in enumerate(panels):
        for k, d in enumerate(dims):
            ax = axes[i][k]
            sel = sorted((r for r in rows if r["head_dim"] == d and r["causal"] == causal), key=lambda r: r["seqlen"])
            for impl, (color, marker, label) in IMPL_STYLE.items():
                pts = [(r["seqlen"], r[impl][f"{pass_}_tflops"]) for r in sel
                       if isinstance(r.get(impl), dict) and r[impl].get(f"{pass_}_tflops")]
                if pts:
                    ax.plot(*zip(*pts), color=color, marker=marker, label=label)
            ax.set_xscale("log", base=2)
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.set_title(f"{'forward' if pass_ == 'fwd' else 'backward'}, {'causal' if causal else 'non-causal'}, "
                         f"head dim {d}", fontsize=10)
            if k == 0:
                ax.set_ylabel("TFLOP/s")
            if i == len(panels) - 1:
                ax.set_xlabel("sequence length (tokens)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), frameon=False, bbox_to_anchor=(0.5, 0.985))
    timing = {"graph": "CUDA-graph timing", "both": "CUDA-graph timing"}.get(meta.get("timing", ""), "eager timing")
    fig.suptitle(f"Attention throughput on {meta['device']} ({meta['dtype']}, {timing}, {meta['date']}): "
                 "flashkit vs PyTorch SDPA", y=0.998, fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    save(fig, os.path.splitext(path)[0] + ".png")


def roofline_gemm_cpu(path):
    """Where GEMM/GEMV implementations land on this CPU's roofline (measured peak and bandwidth)."""
    j = load(path)
    cpu = j["cpu"]
    res = j["results"]
    peak, bw = cpu["peak_gflops"], cpu["bw_gbs"]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    xs = [r["intensity"] for r in res]
    lo, hi = min(xs + [0.1]) / 2, max(xs + [peak / bw]) * 2
    x = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(x, [min(peak, bw * v) for v in x], color="black", lw=1.5,
            label=f"roof: {peak:.0f} GFLOP/s, {bw:.1f} GB/s (ridge {peak / bw:.1f} FLOP/B)")
    colors = {"naive": "tab:red", "blocked": "tab:blue", "blas": "tab:green"}
    markers = {"gemm": "o", "gemv": "s"}
    for impl in colors:
        for op in markers:
            pts = [r for r in res if r["impl"] == impl and r["op"] == op]
            if not pts:
                continue
            ax.scatter([r["intensity"] for r in pts], [r["gflops"] for r in pts], color=colors[impl],
                       marker=markers[op], s=40, label=f"{op} {impl} (N = {', '.join(str(r['M']) for r in pts)})",
                       zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of minimum DRAM traffic)")
    ax.set_ylabel("attained GFLOP/s (f32)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(f"GEMM and GEMV on {cpu['name']}: measured points under the roofline", fontsize=11)
    fig.tight_layout()
    save(fig, os.path.splitext(path)[0] + ".png")


def roofline_devices(path):
    """Datasheet rooflines (bf16, f32 on CPUs) of the devices in the hardware table, and their ridge points."""
    j = load(path)
    fig, ax = plt.subplots(figsize=(9, 6))
    x = [2 ** (i / 8) for i in range(-8, 8 * 12 + 1)]
    cmap = plt.get_cmap("tab10")
    for i, d in enumerate(j["devices"]):
        peak = d["bf16_tflops"] or d["fp16_tflops"] or d["fp32_tflops"]
        kind = "bf16" if d["bf16_tflops"] else ("f16" if d["fp16_tflops"] else "f32")
        bw = d["mem_bw_gbs"] / 1e3  # TB/s
        if not peak or not bw:
            continue
        ridge = peak / bw
        ax.plot(x, [min(peak, bw * v) for v in x], color=cmap(i % 10),
                label=f"{d['name']}: {peak:g} TFLOP/s {kind}, {bw * 1e3:.0f} GB/s, ridge {ridge:.0f} FLOP/B")
        ax.plot([ridge], [peak], marker="o", color=cmap(i % 10))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of memory traffic)")
    ax.set_ylabel("attainable TFLOP/s (datasheet)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7.5, loc="lower right")
    ax.set_title("Datasheet rooflines: how much arithmetic per byte each device needs to be compute-bound",
                 fontsize=11)
    fig.tight_layout()
    save(fig, os.path.splitext(path)[0] + ".png")


def cost_attention_io(path, out):
    """Modelled speedup of flash over standard attention from HBM traffic alone, per device."""
    j = load(path)
    devs = [d for d in j["devices"] if d.get("fwd_speedup")]
    fig, ax = plt.subplots(figsize=(9, 4.8))
    names = [d["device"] for d in devs]
    w = 0.38
    pos = range(len(devs))
    ax.bar([p - w / 2 for p in pos], [d["fwd_speedup"] for d in devs], w, label="forward", color="tab:blue")
    ax.bar([p + w / 2 for p in pos], [d["bwd_speedup"] for d in devs], w, label="backward", color="tab:orange")
    ax.set_xticks(list(pos), names, rotation=30, ha="right")
    ax.axhline(1, color="black", lw=0.8)
    ax.set_ylabel("speedup of flash over standard\n(modelled: HBM bytes / bandwidth)")
    ax.set_xlabel("device (datasheet bandwidth and on-chip memory)")
    ax.grid(alpha=0.3, axis="y")
    ax.legend()
    ax.set_title(f"Flash vs standard attention, N = {j['N']}, d = {j['d']}, {j['dtype']}: "
                 "speedup predicted from memory traffic (computed, not measured)", fontsize=10)
    fig.tight_layout()
    save(fig, out)


def crossing(x, name, plotted_max):
    """Where a sweep reaches the ridge, in words (the cost model gives -1 when it does not up to 2^20)."""
    name = name.replace("prefill_length", "length").replace("_", " ")
    if x < 0:
        return f"memory-bound up to {name} 2^20"
    return f"compute-bound from {name} {x}" + (" (off the plot)" if x > plotted_max else "")


def cost_sweeps(prefill_path, decode_path, out):
    """gemma-3-270m: modelled arithmetic intensity of a step vs batch (decode) and length (prefill), against the ridge."""
    pre, dec = load(prefill_path), load(decode_path)
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    for ax, j, xlabel in ((axes[0], dec, "decode batch (sequences, one token each)"),
                          (axes[1], pre, "prefill length (tokens)")):
        pts = j["points"]
        x = [p["x"] for p in pts]
        ax.plot(x, [p["intensity"] for p in pts], marker="o", label="whole step")
        ax.plot(x, [p["matmul_intensity"] for p in pts], marker="s", label="matrix products only")
        ax.plot(x, [p["weight_gemm_intensity"] for p in pts], marker="^", label="weight GEMMs only")
        ax.axhline(j["ridge"], color="black", ls="--", lw=1, label=f"ridge {j['ridge']:.0f} FLOP/B")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3, which="both")
        ax.set_title(f"{j['sweep']}, whole step: {crossing(j['crossover'], j['x_name'], max(x))}\n"
                     f"weight GEMMs: {crossing(j['crossover_weight_gemms'], j['x_name'], max(x))}", fontsize=10)
    axes[0].set_ylabel("arithmetic intensity (FLOP/byte, modelled)")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{dec['model']} on {dec['device']} ({dec['peak_tflops']:g} TFLOP/s, {dec['bw_gbs']:g} GB/s, "
                 f"context {dec['context']}): when does a step become compute-bound? (computed)", fontsize=11)
    fig.tight_layout()
    save(fig, out)


def roofline_h200(d):
    """Where the kernels measured on the H200 land under its datasheet and measured roofs (CUDA-event times)."""
    dev = next(x for x in load(os.path.join(d, "roofline-devices-h200.json"))["devices"] if x["name"] == "h200")
    gpu = load(os.path.join(d, "roofline-devices-h200.json"))["gpu"]
    fig, ax = plt.subplots(figsize=(11, 6))
    x = [10 ** (i / 50) for i in range(-50, 201)]
    bw = dev["mem_bw_gbs"]
    roofs = [(dev["bf16_tflops"] * 1e3, bw, "-", "tab:blue", f"bf16 datasheet roof ({dev['bf16_tflops']:.0f} TFLOP/s, {bw:.0f} GB/s)"),
             (gpu["bf16_gemm_tflops"] * 1e3, gpu["copy_gbs"], "--", "tab:blue",
              f"bf16 measured roof (cuBLAS {gpu['bf16_gemm_tflops']:.0f} TFLOP/s, copy {gpu['copy_gbs']:.0f} GB/s)"),
             (dev["fp32_tflops"] * 1e3, bw, "-", "tab:orange", f"f32 CUDA-core datasheet roof ({dev['fp32_tflops']:.0f} TFLOP/s)")]
    for peak, b, ls, color, label in roofs:
        ax.plot(x, [min(peak, b * v) for v in x], ls=ls, color=color, label=label)
    rows = load(os.path.join(d, "roofline-gemm-h200.json"))["gpu_results"]
    style = {("gemm", "cublas.bf16"): ("o", "tab:blue"), ("gemv", "cublas.bf16"): ("s", "tab:blue"),
             ("gemm", "cublas.f32"): ("o", "tab:orange"), ("gemv", "cublas.f32"): ("s", "tab:orange")}
    for (op, impl), (m, c) in style.items():
        pts = [r for r in rows if r["op"] == op and r["impl"] == impl]
        if pts:
            sizes = sorted({r["M"] for r in pts})
            ax.scatter([r["intensity"] for r in pts], [r["gflops"] for r in pts], marker=m, color=c, s=30, zorder=3,
                       label=f"{impl} {op.upper()}, N = {sizes[0]}..{sizes[-1]} (intensity grows with N)")
    amark = {"flash": ("*", "tab:green", 60), "standard": ("x", "tab:red", 30)}
    att = {"flash": [], "standard": []}
    for f in sorted(glob.glob(os.path.join(d, "profile-attention-*.json"))):
        if f.endswith("-trace.json"):
            continue
        for row in load(f)["result"]["rows"]:
            att[row["impl"]].append((row["flops"] / row["bytes"], row["flops"] / (row["best_ms"] * 1e-3) / 1e9))
    for impl, pts in att.items():
        if pts:
            m, c, sz = amark[impl]
            ax.scatter(*zip(*pts), marker=m, color=c, s=sz, zorder=3,
                       label=f"flashkit {impl} attention, fwd and bwd, 3 shapes (bytes: its cost model)")
    f = os.path.join(d, "profile-gelu-gpu-bf16.json")
    if os.path.exists(f):
        r = load(f)["result"]
        ks = r["separate"]["per_kernel"]
        ax.scatter([k["flops"] / k["bytes"] for k in ks], [k["flops"] / (k["median_ms"] * 1e-3) / 1e9 for k in ks],
                   marker="v", color="tab:purple", s=22, label="tanh-GELU bf16 as 8 separate kernels")
        fu = r["fused"]
        ax.scatter(fu["flops"] / fu["bytes"], fu["flops"] / (fu["median_ms"] * 1e-3) / 1e9, marker="P",
                   color="tab:purple", s=50, label="tanh-GELU bf16, one fused kernel")
    f = os.path.join(d, "profile-decode-gpu-ctx1024.json")
    if os.path.exists(f):
        r = load(f)["result"]
        ai = r["plan"]["flops"] / r["plan"]["bytes"]
        for v, m in (("eager", "<"), ("graph", ">")):
            ax.scatter(ai, r["plan"]["flops"] / (r[v]["median_us"] * 1e-6) / 1e9, marker=m, color="tab:brown", s=40,
                       label=f"synthetic gemma-3-270m decode step, {'eager launches' if v == 'eager' else 'CUDA graph'}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(20, 2e6)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of DRAM traffic)")
    ax.set_ylabel("attained GFLOP/s (CUDA events)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_title("Where the kernels measured on an NVIDIA H200 land under its roofline (2026-11-30)", fontsize=11)
    fig.tight_layout()
    save(fig, os.path.join(d, "roofline-h200.png"))


def training_loss(d):
    """Loss curves of the committed training runs (tools/plot_training.py draws them)."""
    import subprocess
    import sys
    logs = [os.path.join(d, n) for n in ("target-log.jsonl", "draft-log.jsonl") if os.path.exists(os.path.join(d, n))]
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plot_training.py")
    subprocess.run([sys.executable, tool, *logs, "-o", os.path.join(d, "loss.png")], check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "results")
    ap.add_argument("--results", default=os.path.normpath(root))
    ap.add_argument("--only", help="regenerate only the plots whose output name contains this")
    a = ap.parse_args()
    r = a.results
    jobs = []
    for p in sorted(glob.glob(os.path.join(r, "attention-cuda*.json")) +
                    glob.glob(os.path.join(r, "attention-cuda-s6-6", "attention-cuda.json"))):
        j = load(p)
        if isinstance(j, dict) and "rows" in j and "meta" in j:
            jobs.append((os.path.splitext(p)[0] + ".png", lambda p=p: attention_cuda(p)))
    p = os.path.join(r, "roofline-gemm-cpu.json")
    jobs.append((os.path.join(r, "roofline-gemm-cpu.png"), lambda: roofline_gemm_cpu(p)))
    q = os.path.join(r, "roofline-devices.json")
    jobs.append((os.path.join(r, "roofline-devices.png"), lambda: roofline_devices(q)))
    io = os.path.join(r, "cost-attention-io-N4096-d64-bf16.json")
    jobs.append((os.path.join(r, "cost-attention-io-speedup.png"),
                 lambda: cost_attention_io(io, os.path.join(r, "cost-attention-io-speedup.png"))))
    for dev in ("h200", "t4"):
        pre = os.path.join(r, f"cost-gemma-3-270m-prefill-{dev}.json")
        dec = os.path.join(r, f"cost-gemma-3-270m-decode-{dev}.json")
        out = os.path.join(r, f"cost-gemma-3-270m-sweeps-{dev}.png")
        jobs.append((out, lambda pre=pre, dec=dec, out=out: cost_sweeps(pre, dec, out)))
    h2 = os.path.join(r, "h200-analysis")
    if os.path.exists(os.path.join(h2, "roofline-gemm-h200.json")):
        jobs.append((os.path.join(h2, "roofline-h200.png"), lambda: roofline_h200(h2)))
    tr = os.path.join(r, "training")
    if os.path.exists(os.path.join(tr, "target-log.jsonl")):
        jobs.append((os.path.join(tr, "loss.png"), lambda: training_loss(tr)))
    for out, job in jobs:
        if a.only and a.only not in os.path.basename(out):
            continue
        job()


if __name__ == "__main__":
    main()
