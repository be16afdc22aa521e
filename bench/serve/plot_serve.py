#!/usr/bin/env python3
"""Plots `flashkit bench serve` reports: throughput, time to first token and inter-token latency against concurrency,
one line per (report, shared prefix).

    /usr/bin/python3 bench/serve/plot_serve.py bench/results/serve-cpu.json [more.json ...] -o serve.png
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def series(report):
    by_prefix = {}
    for r in report["runs"]:
        by_prefix.setdefault(r["shared_prefix_tokens"], []).append(r)
    for prefix, runs in sorted(by_prefix.items()):
        runs.sort(key=lambda r: r["concurrency"])
        yield prefix, runs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", nargs="+")
    ap.add_argument("-o", "--output", default="serve.png")
    args = ap.parse_args()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for path in args.reports:
        with open(path) as f:
            report = json.load(f)
        name = os.path.splitext(os.path.basename(path))[0]
        for prefix, runs in series(report):
            label = f"{name}, shared prefix {prefix}" if prefix else f"{name}, no shared prefix"
            c = [r["concurrency"] for r in runs]
            axes[0].plot(c, [r["throughput_tok_s"] for r in runs], marker="o", label=label)
            for ax, key in ((axes[1], "ttft_ms"), (axes[2], "itl_ms")):
                p50 = [r[key].get("p50", float("nan")) for r in runs]
                p90 = [r[key].get("p90", float("nan")) for r in runs]
                line, = ax.plot(c, p50, marker="o", label=label + " p50")
                ax.plot(c, p90, marker="x", linestyle="--", color=line.get_color(), label=label + " p90")
    for ax, title, unit in ((axes[0], "output throughput", "tokens/s"), (axes[1], "time to first token", "ms"),
                            (axes[2], "inter-token latency", "ms")):
        ax.set_title(title)
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel(unit)
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    axes[2].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(args.output)


if __name__ == "__main__":
    main()
