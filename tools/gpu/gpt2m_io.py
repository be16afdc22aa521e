"""The FlashAttention paper's IO comparison (its Figure 2 left: GPT-2 medium, seqlen 1024, head dim 64, 16 heads,
batch 64, forward + backward) for flashkit standard vs flashkit flash on this GPU: FLOPs (each implementation's
OpCost: what its kernels compute, masked work included), and time (CUDA events, median after warm-up). The HBM
bytes of the same calls come from Nsight Compute (`tools/gpu/check.sh ncu`). Causal, as in the paper's GPT-2.

    python3 tools/gpu/gpt2m_io.py OUT.json
"""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.environ.get("FLASHKIT_PYDIR") or os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from flashkit import _capi  # noqa: E402
from flashkit import torch as fkt  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "cuda"))
from bench_attention import timeit  # noqa: E402  (CUDA events around one call, median after 3 warm-up calls)


def median_ms(fn, reps=15):
    return timeit(fn, reps)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "gpt2m-io.json"
    torch.manual_seed(0)
    b, s, h, d = 64, 1024, 16, 64
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    rows = {}
    for impl in ("standard", "flash"):
        cf, cb = _capi.FkCost(), _capi.FkCost()
        o, lse = fkt.attention_forward(q, k, v, causal=True, impl=impl, cost=cf)
        fkt.attention_backward(do, q, k, v, o, lse, causal=True, impl=impl, cost=cb)
        torch.cuda.synchronize()
        t_fwd = median_ms(lambda: fkt.attention_forward(q, k, v, causal=True, impl=impl))
        t_bwd = median_ms(lambda: fkt.attention_backward(do, q, k, v, o, lse, causal=True, impl=impl))
        launches = {}
        for name, fn in (("fwd", lambda: fkt.attention_forward(q, k, v, causal=True, impl=impl)),
                         ("bwd", lambda: fkt.attention_backward(do, q, k, v, o, lse, causal=True, impl=impl))):
            # GPU kernels one call launches (cuBLAS' own included), from torch.profiler's CUDA activity
            try:
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                        torch.profiler.ProfilerActivity.CUDA]) as prof:
                    fn()
                    torch.cuda.synchronize()
                launches[name] = sum(e.count for e in prof.key_averages()
                                     if e.device_type == torch.autograd.DeviceType.CUDA)
            except Exception as e:  # the count is extra information; the timing stands without it
                print("kernel count failed:", e, flush=True)
                launches[name] = None
        rows[impl] = {"fwd_ms": t_fwd, "bwd_ms": t_bwd, "total_ms": t_fwd + t_bwd,
                      "fwd_kernels": launches["fwd"], "bwd_kernels": launches["bwd"],
                      "fwd_gflop": cf.flops / 1e9, "bwd_gflop": cb.flops / 1e9, "total_gflop": (cf.flops + cb.flops) / 1e9,
                      "model_bytes_gb": (cf.bytes_read + cf.bytes_written + cb.bytes_read + cb.bytes_written) / 1e9,
                      "fwd_kernel": cf.kernel.decode(), "bwd_kernel": cb.kernel.decode()}
        print(impl, json.dumps(rows[impl]), flush=True)
    st, fl = rows["standard"], rows["flash"]
    ratios = {"gflop_standard_over_flash": st["total_gflop"] / fl["total_gflop"],
              "time_standard_over_flash": st["total_ms"] / fl["total_ms"]}
    paper = {"gflop": [66.6, 75.2], "hbm_gb": [40.3, 4.4], "runtime_ms": [41.7, 7.3], "device": "A100 (paper)"}
    res = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "shape": {"batch": b, "seqlen": s, "heads": h, "head_dim": d, "causal": True, "dtype": "bf16"},
           "timing": "CUDA events around one eager call, median of 15 after 3 warm-up calls",
           "rows": rows, "ratios": ratios, "paper": paper}
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(ratios))


if __name__ == "__main__":
    main()
