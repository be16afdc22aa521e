"""A/B of the persistent ws forward's epilogue order (v23, docs/worklog/attention-cuda.md): "base" writes each work
tile's O before the next tile's first product is issued (FLASHKIT_SM90_WS_OVERLAP=0, v19), "new" issues that product
first and writes O under it (FLASHKIT_SM90_WS_OVERLAP=1), "new2" as new with O written by TMA stores from one
thread per warpgroup (FLASHKIT_SM90_WS_OVERLAP=2, v23b), all on the persistent grid (FLASHKIT_SM90_WS_PERSIST=
1048576: one CTA per SM) with the ws kernel forced (FLASHKIT_SM90_CFG=3), in one process, against SDPA's flash and
cuDNN backends: forward only, bf16, 16k tokens per batch (batch = 16384/seqlen, heads = 2048/head_dim), CUDA-graph
timing. One line per point (TFLOP/s, gains against base; same=1: all three gave bit-identical O and LSE, as they
must: each tile runs the same arithmetic in the same order, only the stores differ; auto= the kernel the library
picks by default):
    short: d=128 causal=0 s=512 base=338 new=371 (+9.8%) new2=380 (+12.4%) sdpa_flash=420 cudnn=547 TFLOP/s same=1
    new_kernel=... new2_kernel=...tmastore auto=...
--out DIR writes DIR/ws-short.json.

--ab dense: the persistent forward's DENSE variant (v27) instead: "general" (FLASHKIT_SM90_WS_DENSE=0) vs "dense"
(FLASHKIT_SM90_WS_DENSE=1), both on the forced persistent grid with the default epilogue (TMA store up to 2k, v19's
order from 4k); same=1: bit-identical O and LSE (the two run the same arithmetic per tile); DIR/ws-dense.json:
    dense: d=128 causal=1 s=512 general=G dense=N (+x%) cudnn=C TFLOP/s same=1 sdpa_flash=F
    general_kernel=...tmastore dense_kernel=...tmastore.dense auto=...

    python3 bench/cuda/bench_ws_short.py [--out DIR] [--ab short|dense] [--dims 64,128] [--seqlens 512,1024,2048,4096]
        [--reps 10]
"""

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_attention import flops_fwd, graph_time  # noqa: E402

sys.path.insert(0, os.environ.get("FLASHKIT_PYDIR") or os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from flashkit import torch as fkt  # noqa: E402

# Per A/B mode: the settings compared (the first is the base) and the environment variable each sets.
MODES = {
    "short": ({"base": "0", "new": "1", "new2": "2"}, "FLASHKIT_SM90_WS_OVERLAP"),
    "dense": ({"general": "0", "dense": "1"}, "FLASHKIT_SM90_WS_DENSE"),
}
FORCED = ("FLASHKIT_SM90_CFG", "FLASHKIT_SM90_WS_PERSIST", "FLASHKIT_SM90_WS_OVERLAP", "FLASHKIT_SM90_WS_DENSE")


def use(mode, name):
    """The ws kernel on the persistent grid with setting `name` of `mode`; None: the library's default choice."""
    for var in FORCED:
        os.environ.pop(var, None)
    if name is not None:
        settings, var = MODES[mode]
        os.environ["FLASHKIT_SM90_CFG"] = "3"
        os.environ["FLASHKIT_SM90_WS_PERSIST"] = str(1 << 20)
        os.environ[var] = settings[name]
    fkt._capi.core_lib.fk_tuning_from_env()


def kernel_of(q, k, v, causal):
    cost = fkt._capi.FkCost()
    out = fkt.attention_forward(q, k, v, causal=causal, cost=cost)
    return out, cost.kernel.decode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--seqlens", default="512,1024,2048,4096")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--ab", default="short", choices=sorted(MODES))
    args = ap.parse_args()
    settings = MODES[args.ab][0]
    names = list(settings)
    rows = []
    for d in [int(x) for x in args.dims.split(",")]:
        for causal in (False, True):
            for s in [int(x) for x in args.seqlens.split(",")]:
                b, h = max(1, 16384 // s), 2048 // d
                torch.manual_seed(0)
                q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
                ff = flops_fwd(b, s, h, d, causal)
                row = {"head_dim": d, "causal": causal, "seqlen": s, "batch": b, "heads": h}
                outs = {}
                for name in names:
                    use(args.ab, name)
                    outs[name], row[name + "_kernel"] = kernel_of(q, k, v, causal)
                    row[name] = ff / graph_time(lambda: fkt.attention_forward(q, k, v, causal=causal), args.reps,
                                                calls=4) / 1e9
                use(args.ab, None)
                _, row["auto_kernel"] = kernel_of(q, k, v, causal)
                torch.cuda.synchronize()
                row["same"] = all(torch.equal(a, c) for other in names[1:] for a, c in zip(outs[names[0]], outs[other]))
                for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                    def fwd():
                        with sdpa_kernel(backend):
                            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                    try:
                        row[name] = ff / graph_time(fwd, args.reps, calls=4) / 1e9
                    except Exception as e:  # a backend that does not take this shape
                        row[name + "_error"] = str(e).splitlines()[0][:200]
                        torch.cuda.synchronize()
                rows.append(row)
                gain = lambda key: 100.0 * (row[key] / row[names[0]] - 1.0)  # noqa: E731
                fmt = lambda key: "%.0f" % row[key] if key in row else "n/a"  # noqa: E731
                if args.ab == "dense":
                    print("dense: d=%d causal=%d s=%d general=%.0f dense=%.0f (%+.1f%%) cudnn=%s TFLOP/s same=%d "
                          "sdpa_flash=%s general_kernel=%s dense_kernel=%s auto=%s"
                          % (d, causal, s, row["general"], row["dense"], gain("dense"), fmt("cudnn"), row["same"],
                             fmt("sdpa_flash"), row["general_kernel"], row["dense_kernel"], row["auto_kernel"]),
                          flush=True)
                else:
                    print("short: d=%d causal=%d s=%d base=%.0f new=%.0f (%+.1f%%) new2=%.0f (%+.1f%%) sdpa_flash=%s "
                          "cudnn=%s TFLOP/s same=%d new_kernel=%s new2_kernel=%s auto=%s"
                          % (d, causal, s, row["base"], row["new"], gain("new"), row["new2"], gain("new2"),
                             fmt("sdpa_flash"), fmt("cudnn"), row["same"], row["new_kernel"], row["new2_kernel"],
                             row["auto_kernel"]), flush=True)
                del q, k, v, qt, kt, vt, outs
                torch.cuda.empty_cache()
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "ws-%s.json" % args.ab), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
