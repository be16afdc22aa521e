#!/usr/bin/env python3
"""Plots the JSON of `flashkit bench spec`: per prompt regime, the decode speed-up over plain decoding and the
acceptance rate against K (draft tokens per step), one line per proposer; adaptive K ("auto") is a marker at the
right of each panel.

    /usr/bin/python3 tools/plot_spec.py spec.json -o spec.png
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {"draft": ("tab:blue", "o"), "ngram": ("tab:orange", "s"), "tree": ("tab:green", "^")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", help="output of flashkit bench spec --json")
    ap.add_argument("-o", "--output", default="spec.png", help="image file (default spec.png)")
    a = ap.parse_args()
    with open(a.json) as f:
        j = json.load(f)
    rows = j["rows"]
    regimes = list(j["regimes"].keys())
    fig, axes = plt.subplots(2, len(regimes), figsize=(5.5 * len(regimes), 7), squeeze=False, sharex=True)
    ks = sorted({int(r["k"]) for r in rows if r["k"] != "auto"})
    auto_x = (max(ks) if ks else 0) + 1
    for col, regime in enumerate(regimes):
        top, bottom = axes[0][col], axes[1][col]
        for prop in ["draft", "ngram", "tree"]:
            sel = [r for r in rows if r["regime"] == regime and r["proposer"] == prop]
            if not sel:
                continue
            color, marker = STYLE[prop]
            fixed = sorted((int(r["k"]), r) for r in sel if r["k"] != "auto")
            xs = [k for k, _ in fixed]
            top.plot(xs, [r["speedup"] for _, r in fixed], marker=marker, color=color, label=prop)
            bottom.plot(xs, [100 * r["acceptance_rate"] for _, r in fixed], marker=marker, color=color, label=prop)
            for r in sel:
                if r["k"] == "auto":
                    top.scatter([auto_x], [r["speedup"]], marker=marker, color=color, edgecolors="black", zorder=3)
                    bottom.scatter([auto_x], [100 * r["acceptance_rate"]], marker=marker, color=color,
                                   edgecolors="black", zorder=3)
        base = j["regimes"][regime].get("baseline_decode_tokens_per_s", 0)
        top.axhline(1.0, color="gray", linestyle="--", linewidth=1)
        top.set_title(f"{regime} (plain decoding {base:.1f} tok/s)")
        top.set_ylabel("decode speed-up over plain decoding (x)")
        bottom.set_ylabel("acceptance rate (%)")
        bottom.set_xlabel("K, draft tokens per step (rightmost: adaptive K)")
        bottom.set_ylim(0, 105)
        for ax in (top, bottom):
            ax.set_xticks(ks + [auto_x])
            ax.set_xticklabels([str(k) for k in ks] + ["auto"])
            ax.grid(alpha=0.3)
            ax.legend()
    fig.suptitle(f"speculative decoding: {j.get('target', '')} on {j.get('backend', '')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(a.output, dpi=120)
    print(a.output)


if __name__ == "__main__":
    main()
