"""One flashkit forward (impl from argv) at the GPT-2-medium shape (batch 64, seqlen 1024, 16 heads, d 64, bf16),
inside an NVTX range 'fk' so ncu can restrict itself to flashkit's kernels."""
import os
import sys

import torch

sys.path.insert(0, os.environ.get("FLASHKIT_PYDIR") or os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from flashkit import torch as fkt  # noqa: E402

impl = sys.argv[1]
phase = sys.argv[2] if len(sys.argv) > 2 else "fwd"
q, k, v, do = (torch.randn(64, 1024, 16, 64, device="cuda", dtype=torch.bfloat16) for _ in range(4))
o, lse = fkt.attention_forward(q, k, v, causal=True, impl=impl)
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("fk")
if phase == "fwd":
    fkt.attention_forward(q, k, v, causal=True, impl=impl)
else:
    fkt.attention_backward(do, q, k, v, o, lse, causal=True, impl=impl)
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
