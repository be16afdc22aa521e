"""Forward timing for the non-finite A/B (tools/gpu/nonfinite.sh): flashkit's CUDA attention forward on one library
(FLASHKIT_LIBRARY), GPU time per call from CUDA-graph replays, on finite random bf16 inputs.

    python3 tools/gpu/nonfinite_ab.py --out FILE.json              one side, one round
    python3 tools/gpu/nonfinite_ab.py --compare DIR                 the table and the verdict over DIR/SIDE-ROUND.json

Points: the prefill grid's convention (batch = 16384 / seqlen, heads = 2048 / head_dim) at head dims 64 and 128,
512 / 2k / 16k tokens, causal and not; decode (one query, 32 query heads over 8 KV heads, d128) at batch 1 and 16,
1k and 32k keys. The bar of the v13 work log: prefill within +-2 %, decode within +-0.2 us (medians over rounds).
"""

import argparse
import glob
import json
import os
import statistics
import sys


def graph_us(fn, reps=20, calls=4):
    import torch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        g.replay()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1e3 / calls)
    return statistics.median(ts)


def measure(out):
    import torch
    from flashkit import torch as fkt  # the side's package: PYTHONPATH=TREE/python, FLASHKIT_LIBRARY=its library
    rows = []
    torch.manual_seed(0)
    for d in (64, 128):
        for s in (512, 2048, 16384):
            b, h = 16384 // s, 2048 // d
            q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            for causal in (False, True):
                cost = fkt._capi.FkCost()
                fkt.attention_forward(q, k, v, causal=causal, cost=cost)
                us = graph_us(lambda: fkt.attention_forward(q, k, v, causal=causal))
                rows.append({"point": "prefill d%d s%d%s" % (d, s, " causal" if causal else ""), "kind": "prefill",
                             "us": us, "kernel": cost.kernel.decode()})
                print(rows[-1], flush=True)
            del q, k, v
    for b in (1, 16):
        for kv in (1024, 32768):
            q = torch.randn(b, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(b, kv, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            cost = fkt._capi.FkCost()
            fkt.attention_forward(q, k, v, cost=cost)
            us = graph_us(lambda: fkt.attention_forward(q, k, v), reps=50)
            rows.append({"point": "decode b%d kv%d" % (b, kv), "kind": "decode", "us": us,
                         "kernel": cost.kernel.decode()})
            print(rows[-1], flush=True)
    with open(out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


def compare(d):
    sides = {}
    for p in sorted(glob.glob(os.path.join(d, "*-*.json"))):
        side = os.path.basename(p).rsplit("-", 1)[0]
        for r in json.load(open(p))["rows"]:
            sides.setdefault(side, {}).setdefault(r["point"], []).append(r)
    if "before" not in sides or "after" not in sides:
        print("compare: need before-N.json and after-N.json in", d)
        return 2
    ok = True
    print("%-28s %12s %12s %9s  %s" % ("point", "before us", "after us", "change", "kernel (after)"))
    for point, rs in sides["before"].items():
        a = sides["after"].get(point)
        if not a:
            continue
        tb = statistics.median(r["us"] for r in rs)
        ta = statistics.median(r["us"] for r in a)
        if rs[0]["kind"] == "prefill":
            change = "%+.2f%%" % (100 * (ta / tb - 1))
            bad = abs(ta / tb - 1) > 0.02
        else:
            change = "%+.2fus" % (ta - tb)
            bad = abs(ta - tb) > 0.2
        ok = ok and not bad
        print("%-28s %12.2f %12.2f %9s  %s%s" % (point, tb, ta, change, a[0]["kernel"], "  <-- beyond the bar" if bad else ""))
    print("A/B verdict: %s (prefill +-2%%, decode +-0.2 us)" % ("within the bar" if ok else "BEYOND THE BAR"))
    return 0 if ok else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--compare")
    args = ap.parse_args()
    if args.compare:
        sys.exit(compare(args.compare))
    measure(args.out)
