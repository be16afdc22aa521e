#!/usr/bin/env python3
"""Depth x length heatmaps of `flashkit eval` results (docs/eval.md).

    /usr/bin/python3 tools/plots/eval_heatmap.py results.json [more.json ...] -o heatmap.png [--title T]

One panel per task: rows are needle depths (0 = the start of the context, 1 = the end), columns the lengths in the
model's tokens, each cell the accuracy (0 red .. 1 green) with its value written in. Tasks without a depth (cwe,
id-level mqar) get one row, "-". Several files are merged (a later cell replaces an earlier one).
"""
import argparse
import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load_cells(paths):
    cells = {}
    for p in paths:
        with open(p) as f:
            doc = json.load(f)
        if not isinstance(doc, dict) or not isinstance(doc.get("cells"), list):
            raise ValueError(f"{p}: not a flashkit eval result (no \"cells\" list)")
        for c in doc["cells"]:
            cells[(c["task"], c["length"], c["depth"])] = c["accuracy"]
    return cells


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="flashkit eval JSON files")
    ap.add_argument("-o", "--output", required=True, help="PNG file")
    ap.add_argument("--title", default="", help="figure title")
    a = ap.parse_args(argv)
    try:
        cells = load_cells(a.results)
    except (OSError, ValueError, KeyError) as e:
        print(f"eval_heatmap: error: {e}", file=sys.stderr)
        return 2
    if not cells:
        print("eval_heatmap: error: no cells in the results", file=sys.stderr)
        return 2
    tasks = list(dict.fromkeys(t for t, _, _ in cells))
    cols = min(3, len(tasks))
    rows = math.ceil(len(tasks) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.flat[len(tasks):]:
        ax.axis("off")
    for ax, task in zip(axes.flat, tasks):
        lengths = sorted({l for t, l, _ in cells if t == task})
        depths = sorted({d for t, _, d in cells if t == task}, key=lambda d: -1 if d is None else d)
        grid = [[cells.get((task, l, d), float("nan")) for l in lengths] for d in depths]
        ax.imshow(grid, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                if v == v:
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(lengths)), [str(l) for l in lengths])
        ax.set_yticks(range(len(depths)), ["-" if d is None else f"{d:g}" for d in depths])
        ax.set_xlabel("length (tokens)")
        ax.set_ylabel("depth")
        ax.set_title(task)
    if a.title:
        fig.suptitle(a.title)
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)
    print(f"wrote {a.output} ({len(tasks)} tasks, {len(cells)} cells)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
