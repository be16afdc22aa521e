#!/usr/bin/env python3
"""Summary of an MQAR sweep (tools/eval/mqar_sweep.sh): one row per (kind, width, sequence length) with the
parameters, final training loss and the recall accuracy of `flashkit eval --task mqar`.

    /usr/bin/python3 tools/eval/mqar_summary.py OUT_DIR --tag cpu [--results bench/results]

Writes RESULTS/eval-mqar-TAG.json (rows + the sweep's settings), .md (a table) and .png (accuracy against width,
one line per kind and sequence length).
"""
import argparse
import glob
import json
import os
import re
import sys

try:  # the plot is optional: the JSON and the table are written without matplotlib
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    plt = None

NAME = re.compile(r"^(?P<kind>.+)-w(?P<width>\d+)-s(?P<seq>\d+)$")


def final_loss(run_dir):
    loss = val = None
    try:
        with open(os.path.join(run_dir, "log.jsonl")) as f:
            for line in f:
                if line.strip():
                    rec = json.loads(line)
                    loss = rec.get("loss", loss)
                    val = rec.get("val_loss", val)
    except OSError:
        pass
    return loss, val


def parameters(run_dir):
    try:
        with open(os.path.join(run_dir, "model", "config.json")) as f:
            m = json.load(f)
    except OSError:
        return None
    h, v, i, L = m["hidden_size"], m["vocab_size"], m["intermediate_size"], m["num_hidden_layers"]
    if m.get("model_type") == "mamba":  # in_proj, conv, x_proj, dt_proj (+ bias), A_log, D, out_proj; norms left out
        n, w = m.get("state_size", 16), m.get("conv_kernel", 4)
        r = m.get("time_step_rank", "auto")
        r = (h + 15) // 16 if r == "auto" else int(r)
        layer = 2 * i * h + i * (w + 1) + (r + 2 * n) * i + i * (r + 1) + i * (n + 1) + h * i
        return v * h * (1 if m.get("tie_word_embeddings", True) else 2) + L * layer
    q = m["num_attention_heads"] * m["head_dim"]
    kv = m["num_key_value_heads"] * m["head_dim"]
    return v * h + L * (2 * h * q + 2 * h * kv + 3 * h * i)  # embeddings (tied) + attention + MLP, norms left out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--tag", default="cpu")
    ap.add_argument("--results", default="bench/results")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=0)
    a = ap.parse_args(argv)
    rows = []
    for path in sorted(glob.glob(os.path.join(a.out_dir, "eval", "*.json"))):
        name = os.path.basename(path)[: -len(".json")]
        m = NAME.match(name)
        if not m:
            continue
        with open(path) as f:
            cell = json.load(f)["cells"][0]
        run = os.path.join(a.out_dir, "runs", name)
        loss, val = final_loss(run)
        rows.append({"kind": m["kind"], "width": int(m["width"]), "seq_len": int(m["seq"]),
                     "pairs": (int(m["seq"]) - 3) // 4, "parameters": parameters(run), "train_loss": loss,
                     "val_loss": val, "accuracy": cell["accuracy"], "n": cell["n"],
                     "eval_tokens_per_s": cell["tokens_per_s"]})
    if not rows:
        print(f"mqar_summary: error: no eval results in {a.out_dir}/eval", file=sys.stderr)
        return 2
    rows.sort(key=lambda r: (r["kind"], r["seq_len"], r["width"]))
    # prepare-data --synthetic mqar: content ids vocab - 3, keys the lower half, values the rest
    values = (a.vocab - 3) - (a.vocab - 3) // 2 if a.vocab > 3 else 0
    chance = 1.0 / values if values else 0.0
    os.makedirs(a.results, exist_ok=True)
    base = os.path.join(a.results, f"eval-mqar-{a.tag}")
    settings = {"chance_accuracy": chance, "steps": a.steps, "batch_size": a.batch, "vocab_size": a.vocab, "sweep_seconds": a.seconds,
                "task": "prepare-data --synthetic mqar; flashkit eval --task mqar (token ids, teacher-forced queries)"}
    with open(base + ".json", "w") as f:
        json.dump({"settings": settings, "rows": rows}, f, indent=1)
        f.write("\n")
    with open(base + ".md", "w") as f:
        f.write(f"# MQAR recall: {a.tag}\n\n`tools/eval/mqar_sweep.sh` ({a.steps} steps x batch {a.batch}, vocabulary "
                f"{a.vocab}, {a.seconds:.0f} s in all). Accuracy: the fraction of queries whose greedy next token is "
                f"the value paired with the key (chance: {chance:.3f}, one of the {values} value ids).\n\n")
        f.write("| kind | width | seq len | pairs | parameters | train loss | val loss | accuracy | n |\n")
        f.write("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
        fmt = lambda x: "-" if x is None else f"{x:.3f}"
        for r in rows:
            f.write(f"| {r['kind']} | {r['width']} | {r['seq_len']} | {r['pairs']} | {r['parameters']} | "
                    f"{fmt(r['train_loss'])} | {fmt(r['val_loss'])} | {r['accuracy']:.3f} | {r['n']} |\n")
    if plt is None:
        print(f"wrote {base}.json, .md ({len(rows)} runs; no matplotlib: no plot)")
        return 0
    fig, ax = plt.subplots(figsize=(6, 4))
    for key in sorted({(r["kind"], r["seq_len"]) for r in rows}):
        pts = [(r["width"], r["accuracy"]) for r in rows if (r["kind"], r["seq_len"]) == key]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{key[0]}, seq {key[1]}")
    if chance:
        ax.axhline(chance, color="grey", linestyle=":", label="chance")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("model width (hidden size)")
    ax.set_ylabel("MQAR recall accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"MQAR recall vs width ({a.tag})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(base + ".png", dpi=110)
    print(f"wrote {base}.json, .md, .png ({len(rows)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
