#!/usr/bin/python3
"""Plots for issue 3 from the JSON `flashkit roofline` and `flashkit cost` write (bench/analysis/run_all.sh).
Usage: /usr/bin/python3 bench/analysis/plot.py bench/results
Writes roofline-gemm-cpu.{svg,png}, roofline-devices.{svg,png}, cost-gemma-3-270m-sweeps-<dev>.{svg,png},
cost-attention-io-speedup.{svg,png} next to the JSON, and, when <dir>/h200-analysis holds an H200 run
(tools/gpu/analysis.sh), h200-analysis/roofline-h200.{svg,png}: the measured GPU points on the H200 roofline."""
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


def h200_plot(out):
    """cuBLAS GEMM/GEMV (min-traffic intensity) and flashkit attention (its OpCost bytes), CUDA-event times, on the
    H200's datasheet roofs and the ceilings `roofline --measure` measured on it."""
    d = out / "h200-analysis"
    fg, fm = d / "roofline-gemm-h200.json", d / "roofline-devices-h200.json"
    if not (fg.exists() and fm.exists()):
        return
    dev = next(x for x in json.loads(fm.read_text())["devices"] if x["name"] == "h200")
    gpu = json.loads(fm.read_text())["gpu"]
    fig, ax = plt.subplots(figsize=(8.5, 5.5))
    xs = np.logspace(-1, 4, 300)
    bw = dev["mem_bw_gbs"]
    roof_line(ax, dev["bf16_tflops"] * 1e3, bw, f"bf16 datasheet ({dev['bf16_tflops']:.0f} TF, {bw:.0f} GB/s, "
              f"ridge {dev['ridge_bf16']:.0f})", "tab:blue", xs)
    roof_line(ax, gpu["bf16_gemm_tflops"] * 1e3, gpu["copy_gbs"], f"bf16 measured (cuBLAS {gpu['bf16_gemm_tflops']:.0f} TF, "
              f"copy {gpu['copy_gbs']:.0f} GB/s, ridge {gpu['bf16_gemm_tflops'] * 1e3 / gpu['copy_gbs']:.0f})",
              "tab:blue", xs)
    ax.lines[-1].set_linestyle("--")
    roof_line(ax, dev["fp32_tflops"] * 1e3, bw, f"f32 CUDA cores datasheet ({dev['fp32_tflops']:.0f} TF, ridge "
              f"{dev['ridge_f32']:.0f})", "tab:orange", xs)
    style = {("gemm", "cublas.bf16"): ("o", "tab:blue"), ("gemv", "cublas.bf16"): ("s", "tab:blue"),
             ("gemm", "cublas.f32"): ("o", "tab:orange"), ("gemv", "cublas.f32"): ("s", "tab:orange")}
    for row in json.loads(fg.read_text())["gpu_results"]:
        m, c = style[(row["op"], row["impl"])]
        ax.scatter(row["intensity"], row["gflops"], marker=m, color=c, s=30, zorder=3)
        ax.annotate(str(row["M"]), (row["intensity"], row["gflops"]), fontsize=6, xytext=(3, 3), textcoords="offset points")
    for (op, impl), (m, c) in style.items():
        ax.scatter([], [], marker=m, color=c, label=f"{impl} {op.upper()} (N x N{' x N' if op == 'gemm' else ''})")
    amark = {"flash": ("*", "tab:green"), "standard": ("x", "tab:red")}
    for f in sorted(d.glob("profile-attention-*[!e].json")):
        r = json.loads(f.read_text())["result"]
        tag = f"N{r['N']} d{r['d']}"
        for row in r["rows"]:
            m, c = amark[row["impl"]]
            ai = row["flops"] / row["bytes"]
            gf = row["flops"] / (row["best_ms"] * 1e-3) / 1e9
            ax.scatter(ai, gf, marker=m, color=c, s=45 if m == "*" else 30, zorder=3)
            ax.annotate(f"{row['pass']} {tag}", (ai, gf), fontsize=5.5, xytext=(3, -8), textcoords="offset points")
    for impl, (m, c) in amark.items():
        ax.scatter([], [], marker=m, color=c, label=f"flashkit attention {impl} (OpCost bytes)")
    # GPU fusion demos: tanh-GELU kernels (separate, fused; bf16) and the synthetic decode step (eager, graph).
    f = d / "profile-gelu-gpu-bf16.json"
    if f.exists():
        r = json.loads(f.read_text())["result"]
        for k in r["separate"]["per_kernel"]:
            ax.scatter(k["flops"] / k["bytes"], k["flops"] / (k["median_ms"] * 1e-3) / 1e9, marker="v", color="tab:purple", s=22)
        fu = r["fused"]
        ax.scatter(fu["flops"] / fu["bytes"], fu["flops"] / (fu["median_ms"] * 1e-3) / 1e9, marker="P", color="tab:purple", s=50)
        ax.scatter([], [], marker="v", color="tab:purple", label="GELU bf16: 8 separate kernels")
        ax.scatter([], [], marker="P", color="tab:purple", label="GELU bf16: fused kernel")
    f = d / "profile-decode-gpu-ctx1024.json"
    if f.exists():
        r = json.loads(f.read_text())["result"]
        ai = r["plan"]["flops"] / r["plan"]["bytes"]
        for v, m in (("eager", "<"), ("graph", ">")):
            ax.scatter(ai, r["plan"]["flops"] / (r[v]["median_us"] * 1e-6) / 1e9, marker=m, color="tab:brown", s=40)
            ax.scatter([], [], marker=m, color="tab:brown", label=f"decode step (gemma-3-270m shape), {v}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(20, 2e6)
    ax.set_xlabel("arithmetic intensity (FLOP / byte: GEMM minimum traffic; attention OpCost)")
    ax.set_ylabel("achieved GFLOP/s (CUDA events)")
    ax.set_title("Measured on an NVIDIA H200 (2026-11-30, commit 556199e)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6.5, loc="lower right")
    save(fig, d, "roofline-h200")


def main():
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results")
    gemm_plot(out)
    devices_plot(out)
    for dev in ("h200", "t4"):
        sweep_plot(out, dev)
    attention_plot(out)
    h200_plot(out)


if __name__ == "__main__":
    main()
