"""Batch-1 decode calls for Nsight Compute: each shape of issue 20's decode goal (32/8 heads d128 and 8/1 heads
d256, 32k keys, bf16) is called once to warm up, then 3 times (`ncu -k 'regex:decode|combine|merge'` sees only
flashkit's decode and split-merge kernels: the first call's and the three timed ones').

    python3 tools/gpu/decode_ncu.py [KV_LEN ...]        default 32768
"""
import os
import sys

import torch

sys.path.insert(0, os.environ.get("FLASHKIT_PYDIR") or os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from flashkit import torch as fkt  # noqa: E402

for kv in [int(x) for x in sys.argv[1:]] or [32768]:
    for h, hkv, d in ((32, 8, 128), (8, 1, 256)):
        q = torch.randn(1, 1, h, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, kv, hkv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(1, kv, hkv, d, device="cuda", dtype=torch.bfloat16)
        cost = fkt._capi.FkCost()
        fkt.attention_forward(q, k, v, cost=cost)
        torch.cuda.synchronize()
        name = "b1_h%d_%d_d%d_kv%d" % (h, hkv, d, kv)
        print("%s: kernel %s, %.1f MB of K/V" % (name, cost.kernel.decode(), 2 * kv * hkv * d * 2 / 1e6), flush=True)
        for _ in range(3):
            fkt.attention_forward(q, k, v)
        torch.cuda.synchronize()
