"""Batch-1 decode A/B of the d256 pipeline variants in one process (attention-cuda.md v26): each setting of
FLASHKIT_DECODE_D256_PIPE (base, auto = prefetch, eager, eager6) is read into the library's default tuning through
fk_tuning_from_env() and timed from CUDA-graph replays of 10 calls, interleaved over rounds (drift falls on every
setting alike); the median over rounds is reported. Shapes: 32/8 heads d128 (a control: the knob leaves d128 alone)
and 8/1 heads d256, 4k and 32k keys, bf16, seqlen_q 1.

    python3 bench/cuda/decode_d256_ab.py [--out DIR] [--rounds 5] [--reps 20]

Prints one line per shape:
    dec256: h=8/1 d=256 keys=32768 base=13.70 new=10.10 us (78.6% of 4.24 TB/s; base 58.0%) eager=.. eager6=.. [kernels]
"new" is the default setting (auto); DIR/decode-d256-ab.json holds every sample.
"""

import argparse
import json
import os
import statistics
import sys

import torch

from bench_attention import graph_time, fkt  # the same graph timing as bench_attention.py --decode-only

COPY_TBPS = 4.24
SETTINGS = ["base", "auto", "eager", "eager6"]  # auto: the default (prefetch)


def set_pipe(value):
    os.environ["FLASHKIT_DECODE_D256_PIPE"] = value
    fkt._capi.core_lib.fk_tuning_from_env()  # re-read into the process default tuning


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    saved = os.environ.get("FLASHKIT_DECODE_D256_PIPE")
    rows = []
    for h, hkv, d in ((32, 8, 128), (8, 1, 256)):
        for kv in (4096, 32768):
            torch.manual_seed(0)
            q = torch.randn(1, 1, h, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(1, kv, hkv, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(1, kv, hkv, d, device="cuda", dtype=torch.bfloat16)
            nbytes = 2.0 * kv * hkv * d * 2
            call = lambda: fkt.attention_forward(q, k, v)  # noqa: E731
            samples = {s: [] for s in SETTINGS}
            kernels = {}
            for _ in range(args.rounds):
                for s in SETTINGS:
                    set_pipe(s)
                    cost = fkt._capi.FkCost()
                    fkt.attention_forward(q, k, v, cost=cost)
                    torch.cuda.synchronize()
                    kernels[s] = cost.kernel.decode()
                    samples[s].append(graph_time(call, args.reps) * 1e3)
            us = {s: statistics.median(samples[s]) for s in SETTINGS}
            pct = {s: 100.0 * nbytes / (us[s] * 1e-6) / 1e12 / COPY_TBPS for s in SETTINGS}
            rows.append({"heads": h, "kv_heads": hkv, "head_dim": d, "kv_len": kv, "kv_bytes": nbytes,
                         "us": us, "pct_of_copy": pct, "samples_us": samples, "kernels": kernels})
            print("dec256: h=%d/%d d=%d keys=%d base=%.2f new=%.2f us (%.1f%% of %.2f TB/s; base %.1f%%) "
                  "eager=%.2f us (%.1f%%) eager6=%.2f us (%.1f%%) [%s]" % (
                      h, hkv, d, kv, us["base"], us["auto"], pct["auto"], COPY_TBPS, pct["base"], us["eager"],
                      pct["eager"], us["eager6"], pct["eager6"], " | ".join(kernels[s] for s in SETTINGS)), flush=True)
            del q, k, v
            torch.cuda.empty_cache()
    if saved is None:
        os.environ.pop("FLASHKIT_DECODE_D256_PIPE", None)
    else:
        os.environ["FLASHKIT_DECODE_D256_PIPE"] = saved
    fkt._capi.core_lib.fk_tuning_from_env()
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "decode-d256-ab.json"), "w") as f:
            json.dump({"copy_TBps": COPY_TBPS, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
