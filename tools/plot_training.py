#!/usr/bin/env python3
"""Loss curves of `flashkit train` runs from their JSON-lines logs (RUN_DIR/log.jsonl).

    /usr/bin/python3 tools/plot_training.py runs/target/log.jsonl [runs/draft/log.jsonl ...] -o loss.png

Training loss per logged step (solid) and validation loss at each evaluation (markers), one colour per run,
labelled by the run directory's name (or the file's, for NAME-log.jsonl); a log-scale y axis with --log-y.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_log(path):
    steps, loss, vsteps, vloss = [], [], [], []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            rec = json.loads(line)
            steps.append(rec["step"])
            loss.append(rec["loss"])
            if "val_loss" in rec:
                vsteps.append(rec["step"])
                vloss.append(rec["val_loss"])
    return steps, loss, vsteps, vloss


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+", help="log.jsonl files written by flashkit train")
    ap.add_argument("-o", "--output", default="loss.png", help="image to write (png, svg, pdf)")
    ap.add_argument("--log-y", action="store_true", help="logarithmic loss axis")
    ap.add_argument("--title", default="flashkit train: loss")
    args = ap.parse_args(argv)
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, path in enumerate(args.logs):
        if not os.path.exists(path):
            print(f"plot_training.py: {path}: no such log", file=sys.stderr)
            return 2
        steps, loss, vsteps, vloss = read_log(path)
        if not steps:
            print(f"plot_training.py: {path}: no records", file=sys.stderr)
            return 2
        # runs/<name>/log.jsonl -> <name>; a copied <name>-log.jsonl (bench/results/training/) -> <name>
        stem = os.path.basename(path).rsplit(".", 1)[0]
        name = stem[: -len("-log")] if stem.endswith("-log") else (
            os.path.basename(os.path.dirname(os.path.abspath(path))) or path)
        color = f"C{i % 10}"
        ax.plot(steps, loss, color=color, linewidth=1.2, label=f"{name} train")
        if vsteps:
            ax.plot(vsteps, vloss, color=color, marker="o", linestyle="--", label=f"{name} validation")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy loss (nats per token)")
    ax.set_title(args.title)
    if args.log_y:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
