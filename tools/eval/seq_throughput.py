#!/usr/bin/env python3
"""Throughput and memory against sequence length: `flashkit generate` on each model at several prompt lengths.

For every model directory and length L: a seeded random prompt of L token ids, prefilled, then --decode greedy
tokens; prefill tokens/s and decode ms/token come from --stats-json, the peak resident memory of the process from
/usr/bin/time. Models whose config bounds the positions (max_position_embeddings, e.g. the MQAR attention models
trained at 16-32 tokens) run from a copy whose bound is raised to the longest length: throughput and memory do not
depend on what the weights learnt, recall beyond the trained length is not measured here. Prompts go through a file
(--prompt-ids @FILE): 64k ids do not fit one command-line argument.

  seq_throughput.py KIND=DIR [KIND=DIR ...] [--lengths 1024,2048,4096,8192,16384] [--decode 64] [--threads 2]
                    [--repeats 3] [--flashkit build/bin/flashkit] [-o bench/results/eval-seq-throughput-cpu]   (-> .json, .md)
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile


def run_one(fk, model, length, decode, threads, vocab, tmp):
    rng = random.Random(length)
    ids_file = os.path.join(tmp, "ids.txt")
    with open(ids_file, "w") as f:
        f.write(",".join(str(rng.randrange(vocab)) for _ in range(length)))
    stats, rss = os.path.join(tmp, "stats.json"), os.path.join(tmp, "rss.txt")
    cmd = ["/usr/bin/time", "-f", "%M", "-o", rss, fk, "generate", "-m", model, "--prompt-ids", "@" + ids_file, "-n",
           str(decode), "--temp", "0", "--ignore-eos", "--ids", "-q", "-t", str(threads), "-c",
           str(length + decode), "--prefill-chunk", "512", "--stats-json", stats]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    s = json.load(open(stats))
    return {"prompt_tokens": s["prompt_tokens"], "prefill_tokens_per_s": s["prefill_tokens_per_s"],
            "decode_ms_per_token": 1000.0 / s["decode_tokens_per_s"], "peak_rss_mib": int(open(rss).read()) / 1024.0,
            "parameters": s["parameters"], "backend": s["backend"]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help="KIND=DIR")
    ap.add_argument("--lengths", default="1024,2048,4096,8192,16384")
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="runs per cell; the best time is kept")
    ap.add_argument("--flashkit", default="build/bin/flashkit")
    ap.add_argument("-o", "--output", default="bench/results/eval-seq-throughput-cpu")
    a = ap.parse_args(argv)
    lengths = [int(x) for x in a.lengths.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in a.models:
            kind, src = spec.split("=", 1)
            cfg = json.load(open(os.path.join(src, "config.json")))
            model = src
            if "max_position_embeddings" in cfg:  # raise the bound on a copy (see the docstring)
                model = os.path.join(tmp, kind)
                shutil.copytree(src, model)
                cfg["max_position_embeddings"] = max(lengths) + a.decode
                json.dump(cfg, open(os.path.join(model, "config.json"), "w"))
            for n in lengths:
                runs = [run_one(a.flashkit, model, n, a.decode, a.threads, cfg["vocab_size"] - 3, tmp)
                        for _ in range(a.repeats)]
                r = dict(runs[0])  # the best of the repeats (shared, noisy cores), the largest peak RSS
                r["prefill_tokens_per_s"] = max(x["prefill_tokens_per_s"] for x in runs)
                r["decode_ms_per_token"] = min(x["decode_ms_per_token"] for x in runs)
                r["peak_rss_mib"] = max(x["peak_rss_mib"] for x in runs)
                r.update(kind=kind, model=src, width=cfg["hidden_size"])
                rows.append(r)
                print(f"{kind:10s} L={n:6d}  prefill {r['prefill_tokens_per_s']:9.0f} tok/s  decode "
                      f"{r['decode_ms_per_token']:.3f} ms/token  peak RSS {r['peak_rss_mib']:.1f} MiB", file=sys.stderr)
    out = {"settings": {"lengths": lengths, "decode_tokens": a.decode, "threads": a.threads, "repeats": a.repeats,
                        "what": "flashkit generate --prompt-ids (random ids), greedy; peak RSS by /usr/bin/time"},
           "rows": rows}
    with open(a.output + ".json", "w") as f:
        json.dump(out, f, indent=1)
    with open(a.output + ".md", "w") as f:
        f.write("# Throughput and memory against sequence length (CPU)\n\n")
        f.write(f"`tools/eval/seq_throughput.py`: `flashkit generate` with a random prompt of L ids, then {a.decode} "
                f"greedy tokens, {a.threads} threads ({rows[0]['backend'] if rows else ''}); the best of {a.repeats} runs "
                "(shared cores); peak RSS of the whole process.\n\n")
        f.write("| kind | width | parameters | L | prefill tok/s | decode ms/token | peak RSS MiB |\n")
        f.write("|---|---:|---:|---:|---:|---:|---:|\n")
        for r in rows:
            f.write(f"| {r['kind']} | {r['width']} | {r['parameters']} | {r['prompt_tokens']} | "
                    f"{r['prefill_tokens_per_s']:.0f} | {r['decode_ms_per_token']:.3f} | {r['peak_rss_mib']:.1f} |\n")


if __name__ == "__main__":
    main()
