"""One flashkit forward and backward (bf16, d128, b4 s4096 h16, non-causal) inside an NVTX range 'prof', for an
ncu section profile of the flash kernels (tools/gpu/check.sh profile)."""
import os
import sys

import torch

sys.path.insert(0, os.environ.get("FLASHKIT_PYDIR") or os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from flashkit import torch as fkt  # noqa: E402

d = int(sys.argv[1]) if len(sys.argv) > 1 else 128
q, k, v, do = (torch.randn(4, 4096, 2048 // d, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
o, lse = fkt.attention_forward(q, k, v)
fkt.attention_backward(do, q, k, v, o, lse)
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("prof")
o, lse = fkt.attention_forward(q, k, v)
fkt.attention_backward(do, q, k, v, o, lse)
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
