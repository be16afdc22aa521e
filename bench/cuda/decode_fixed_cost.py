"""The fixed part of a batch-1 decode call (issue 20 Required 5): CUDA-graph time per call from 16 to 32k keys, so
that t(keys) = fixed + bytes / rate can be read off directly instead of fitted from two points. Shapes: 32/8 heads
d128 and 8/1 heads d256, bf16; SDPA (its default backend choice) beside flashkit in the same process. The knobs
(FLASHKIT_DECODE_PDL, FLASHKIT_DECODE_MAX_SPLITS) are read once per process: run it once per setting.
--layout bhsd stores K and V head-major ([batch, kv_heads, keys, d] memory, passed as the BSHD-shaped view): a
head's keys contiguous instead of 256-byte rows at a kv_heads x d stride.

    python3 bench/cuda/decode_fixed_cost.py LABEL [--out FILE.jsonl] [--layout bshd|bhsd] [--keys 4096,32768]
                                               [--shapes 32/8/128,8/1/256,32/8/64]   (heads/kv_heads/head_dim)
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from bench_attention import graph_time  # noqa: E402
from bench_attention import fkt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("label")
    ap.add_argument("--out", default="")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--layout", choices=("bshd", "bhsd"), default="bshd")
    ap.add_argument("--keys", default="16,256,1024,4096,32768")
    ap.add_argument("--shapes", default="32/8/128,8/1/256")
    args = ap.parse_args()
    rows = []
    for h, hkv, d in (tuple(int(x) for x in sh.split("/")) for sh in args.shapes.split(",")):
        for kv in (int(x) for x in args.keys.split(",")):
            q = torch.randn(1, 1, h, d, device="cuda", dtype=torch.bfloat16)
            if args.layout == "bshd":
                k = torch.randn(1, kv, hkv, d, device="cuda", dtype=torch.bfloat16)
                v = torch.randn(1, kv, hkv, d, device="cuda", dtype=torch.bfloat16)
            else:
                k = torch.randn(1, hkv, kv, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
                v = torch.randn(1, hkv, kv, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
            cost = fkt._capi.FkCost()
            fkt.attention_forward(q, k, v, cost=cost)
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
            t_fk = graph_time(lambda: fkt.attention_forward(q, k, v), args.reps)
            t_sd = graph_time(lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True), args.reps)
            nbytes = 2.0 * kv * hkv * d * 2
            r = {"label": args.label, "layout": args.layout, "heads": h, "kv_heads": hkv, "head_dim": d, "kv_len": kv,
                 "flashkit_us": t_fk * 1e3, "sdpa_us": t_sd * 1e3, "kv_bytes": nbytes,
                 "kernel": cost.kernel.decode()}
            rows.append(r)
            print("decode_fixed %s %s h%d/%d d%d kv%6d: flashkit %7.2f us (%5.1f%% of 4.24 TB/s)  sdpa %7.2f us  [%s]" % (
                args.label, args.layout, h, hkv, d, kv, r["flashkit_us"], 100 * nbytes / t_fk / 1e9 / 4.24, r["sdpa_us"],
                r["kernel"]), flush=True)
    if args.out:
        with open(args.out, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
