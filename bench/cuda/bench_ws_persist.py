"""A/B of the warp-specialized Hopper forward's persistent grid (v19, docs/worklog/attention-cuda.md): the same ws
kernel with one CTA per work tile (FLASHKIT_SM90_WS_PERSIST=0) and as a persistent grid of one CTA per SM
(FLASHKIT_SM90_WS_PERSIST=1048576), against SDPA's flash and cuDNN backends, forward only, bf16, on the grid of
bench_attention.py (seqlen 512..16k, batch = 16384/seqlen, heads = 2048/head_dim), CUDA-graph timing.
FLASHKIT_SM90_CFG=3 keeps the ws kernel at every d64 point (the default picks the cp.async kernel below 2k/4k).
One line per point:
    persist d128 causal=0 s=512 b=32 h=16: ws 333 persistent 371 (+11.4%) sdpa_flash 420 cudnn 531 same=1 kernel=...
(TFLOP/s; same=1: both grids gave bit-identical O and LSE). --out DIR writes DIR/ws-persist.json.

    python3 bench/cuda/bench_ws_persist.py [--out DIR] [--dims 64,128] [--seqlens 512,...] [--reps 10]
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

GRIDS = {"ws": "0", "persistent": str(1 << 20)}


def use_grid(name):
    """The library's default tuning with the ws kernel forced and the grid of `name` (re-read from the environment)."""
    os.environ["FLASHKIT_SM90_CFG"] = "3"
    os.environ["FLASHKIT_SM90_WS_PERSIST"] = GRIDS[name]
    fkt._capi.core_lib.fk_tuning_from_env()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
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
                for name in GRIDS:
                    use_grid(name)
                    cost = fkt._capi.FkCost()
                    outs[name] = fkt.attention_forward(q, k, v, causal=causal, cost=cost)
                    row[name + "_kernel"] = cost.kernel.decode()
                    row[name] = ff / graph_time(lambda: fkt.attention_forward(q, k, v, causal=causal), args.reps,
                                                calls=4) / 1e9
                torch.cuda.synchronize()
                row["same"] = all(torch.equal(a, c) for a, c in zip(outs["ws"], outs["persistent"]))
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
                gain = 100.0 * (row["persistent"] / row["ws"] - 1.0)
                print("persist d%d causal=%d s=%d b=%d h=%d: ws %.0f persistent %.0f (%+.1f%%) sdpa_flash %s cudnn %s "
                      "same=%d kernel=%s" % (d, causal, s, b, h, row["ws"], row["persistent"], gain,
                                             "%.0f" % row["sdpa_flash"] if "sdpa_flash" in row else "n/a",
                                             "%.0f" % row["cudnn"] if "cudnn" in row else "n/a", row["same"],
                                             row["persistent_kernel"]), flush=True)
                del q, k, v, qt, kt, vt, outs
                torch.cuda.empty_cache()
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "ws-persist.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
