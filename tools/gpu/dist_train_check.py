"""The data-parallel training check of tools/gpu/dist.sh.

  dist_train_check.py recipe WORK          prints a tiny Llama recipe on WORK/data (flashkit prepare-data output)
  dist_train_check.py compare A.jsonl B.jsonl [--json OUT]
      compares two training logs step by step (losses within bf16 noise: relative 2e-2, and the mean relative
      difference below 5e-3) and reports the throughput of each; exit status 1 when they disagree.
"""
import argparse
import json
import sys


def recipe(work):
    return {
        "model": {"model_type": "llama", "vocab_size": 256, "hidden_size": 256, "intermediate_size": 688,
                  "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
                  "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 128,
                  "tie_word_embeddings": False},
        "data": {"train": f"{work}/data/train.bin", "val": f"{work}/data/val.bin"},
        "train": {"steps": 30, "batch_size": 16, "seq_len": 128, "grad_accum": 1, "lr": 1e-3, "warmup_steps": 5,
                  "weight_decay": 0.01, "seed": 3},
        "eval": {"interval": 0, "batches": 2},
        "log": {"interval": 1},
        "output": {"dir": f"{work}/run"},
    }


def read_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def compare(a_path, b_path):
    a, b = read_log(a_path), read_log(b_path)
    steps = [r for r in a if "loss" in r]
    other = {r["step"]: r for r in b if "loss" in r}
    worst, total, n = 0.0, 0.0, 0
    for r in steps:
        o = other.get(r["step"])
        if o is None:
            return {"ok": False, "why": f"step {r['step']} missing from {b_path}"}
        rel = abs(o["loss"] - r["loss"]) / max(abs(r["loss"]), 1e-12)
        worst, total, n = max(worst, rel), total + rel, n + 1
    if n == 0:
        return {"ok": False, "why": "no steps logged"}

    def tps(rows):  # steady state: skip the first two steps (allocation, cuBLAS heuristics)
        v = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r][2:]
        return sum(v) / len(v) if v else 0.0

    mean = total / n
    res = {"steps": n, "max_rel_loss_diff": worst, "mean_rel_loss_diff": mean,
           "first_loss": steps[0]["loss"], "last_loss": steps[-1]["loss"],
           "tokens_per_s_a": tps(a), "tokens_per_s_b": tps(b)}
    res["ok"] = worst < 2e-2 and mean < 5e-3
    return res


def main(argv):
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recipe")
    r.add_argument("work")
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--json")
    c.add_argument("--cost", help="flashkit cost --json output: its data_parallel block is copied beside the result")
    args = p.parse_args(argv)
    if args.cmd == "recipe":
        print(json.dumps(recipe(args.work), indent=2))
        return 0
    res = compare(args.a, args.b)
    if args.cost:
        try:
            with open(args.cost) as f:
                res["cost_data_parallel"] = json.load(f).get("data_parallel")
        except (OSError, ValueError) as e:
            res["cost_data_parallel"] = f"unreadable: {e}"
    text = json.dumps(res, indent=2)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
