#!/usr/bin/python3
"""Plots for issue 3 from the JSON `flashkit roofline` and `flashkit cost` write (bench/analysis/run_all.sh).
Usage: /usr/bin/python3 bench/analysis/plot.py bench/results
Writes roofline-gemm-cpu.{svg,png}, roofline-devices.{svg,png}, cost-gemma-3-270m-sweeps-<dev>.{svg,png},
cost-attention-io-speedup.{svg,png} next to the JSON."""
import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def save(fig, out, name):
    for ext in ("svg", "png"):
        fig.savefig(out / f"{name}.{ext}", dpi=120, bbox_inches="tight")
    plt.close(fig)
    print("wrote", out / f"{name}.svg", "and .png")


def roof_line(ax, peak, bw, label, color, xs):
    ax.plot(xs, np.minimum(peak, xs * bw), color=color, label=label)


def gemm_plot(out):
    f = out / "roofline-gemm-cpu.json"
    if not f.exists():
        return
    r = json.loads(f.read_text())
    cpu = r["cpu"]
    fig, ax = plt.subplots(figsize=(7.5, 5))
    xs = np.logspace(-2, 4, 200)
    roof_line(ax, cpu["peak_gflops"], cpu["bw_gbs"], f"CPU roof ({cpu['peak_gflops']:.0f} GFLOP/s, {cpu['bw_gbs']:.0f} GB/s)",
              "k", xs)
    colors = {"naive": "tab:red", "blocked": "tab:blue", "blas": "tab:green"}
    for row in r["results"]:
        m = "o" if row["op"] == "gemm" else "s"
        ax.scatter(row["intensity"], row["gflops"], color=colors[row["impl"]], marker=m, s=30)
        ax.annotate(str(row["M"]), (row["intensity"], row["gflops"]), fontsize=6, xytext=(3, 3), textcoords="offset points")
    for impl, c in colors.items():
        ax.scatter([], [], color=c, label=impl)
    ax.scatter([], [], color="gray", marker="o", label="GEMM (N x N x N)")
    ax.scatter([], [], color="gray", marker="s", label="GEMV (N x N)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / minimum byte)")
    ax.set_ylabel("achieved GFLOP/s (f32)")
    ax.set_title("GEMM and GEMV on this CPU's roofline (measured; shared machine)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, out, "roofline-gemm-cpu")


def devices_plot(out):
    f = out / "roofline-devices.json"
    if not f.exists():
        return
    r = json.loads(f.read_text())
    fig, ax = plt.subplots(figsize=(7.5, 5))
    xs = np.logspace(-1, 4, 300)
    cmap = plt.get_cmap("tab10")
    for i, d in enumerate(r["devices"]):
        peak = d["bf16_tflops"] or d["fp16_tflops"] or d["fp32_tflops"]
        roof_line(ax, peak * 1e3, d["mem_bw_gbs"], f"{d['name']} (ridge {d['ridge_bf16']:.0f})", cmap(i % 10), xs)
    if "cpu" in r:
        c = r["cpu"]
        roof_line(ax, c["fma_peak_gflops"], c["triad_gbs"], "this CPU f32 (measured)", "k", xs)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable GFLOP/s (bf16 tensor, dense)")
    ax.set_title("Datasheet rooflines")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
    save(fig, out, "roofline-devices")


def sweep_plot(out, dev):
    files = {k: out / f"cost-gemma-3-270m-{k}-{dev}.json" for k in ("decode", "prefill")}
    if not all(f.exists() for f in files.values()):
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, (kind, f) in zip(axes, files.items()):
        s = json.loads(f.read_text())
        x = [p["x"] for p in s["points"]]
        ax.plot(x, [p["intensity"] for p in s["points"]], "o-", label="whole step (unfused elementwise incl.)")
        ax.plot(x, [p["matmul_intensity"] for p in s["points"]], "s-", label="matrix products only")
        ax.plot(x, [p["weight_gemm_intensity"] for p in s["points"]], "^-", label="weight GEMMs only (no attention)")
        ax.axhline(s["ridge"], color="k", ls="--", label=f"ridge {s['ridge']:.0f} FLOP/B ({dev})")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("decode batch" if kind == "decode" else "prefill length")
        ax.set_ylabel("FLOP / byte")
        cm = s["crossover_matmul"]
        cw = s["crossover_weight_gemms"]
        ax.set_title(f"gemma-3-270m {kind} on {dev}: compute-bound from {cm if cm > 0 else 'never'} "
                     f"(weight GEMMs: {cw if cw > 0 else 'never'})", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    save(fig, out, f"cost-gemma-3-270m-sweeps-{dev}")


def attention_plot(out):
    f = out / "cost-attention-io-N4096-d64-bf16.json"
    if not f.exists():
        return
    r = json.loads(f.read_text())
    d = r["devices"]
    names = [x["device"] for x in d]
    xs = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar(xs - 0.2, [x["fwd_speedup"] for x in d], 0.4, label="forward")
    ax.bar(xs + 0.2, [x["bwd_speedup"] for x in d], 0.4, label="backward")
    ax.set_xticks(xs, names, rotation=30, fontsize=8)
    ax.set_ylabel("standard / flash time (IO model)")
    ax.set_title(f"FlashAttention theoretical speedup, N={r['N']}, d={r['d']}, {r['dtype']}")
    ax.legend()
    ax.grid(True, axis="y", alpha=0.3)
    save(fig, out, "cost-attention-io-speedup")


def main():
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results")
    gemm_plot(out)
    devices_plot(out)
    for dev in ("h200", "t4"):
        sweep_plot(out, dev)
    attention_plot(out)


if __name__ == "__main__":
    main()
