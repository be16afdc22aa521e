"""The e4m3 forward at long sequences for Nsight Compute (issue 20 Required 4): d128 and d256, 16k tokens, batch 2,
16 heads, non-causal -- d128 is at 740 TFLOP/s where d256 passes 1,000, so the two profiles side by side say what
d128 waits on (SFU, issue slots, the turn barriers). One call each after one warm-up; `ncu -k regex:flash_fwd_fp8`
sees only the attention kernel, not the V^T prep or the quantizer.

    python3 tools/gpu/fp8_ncu.py SHIM.so [D ...]        default 128 256
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "cuda"))
from bench_attention_fp8 import check, load_shim, quantize  # noqa: E402

lib = load_shim(sys.argv[1])
for d in [int(x) for x in sys.argv[2:]] or [128, 256]:
    b, s, h = 2, 16384, 16
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    (q8, qs), (k8, ks), (v8, vs) = quantize(lib, q), quantize(lib, k), quantize(lib, v)
    o = torch.empty(b, s, h, d, device="cuda", dtype=torch.bfloat16)
    lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
    for _ in range(2):
        check(lib, lib.fkb_fp8_forward(q8.data_ptr(), k8.data_ptr(), v8.data_ptr(), o.data_ptr(), lse.data_ptr(),
                                       b, s, s, h, h, d, qs, ks, vs, 0))
    torch.cuda.synchronize()
    print("fp8 ncu: d%d b%d s%d h%d done" % (d, b, s, h), flush=True)
