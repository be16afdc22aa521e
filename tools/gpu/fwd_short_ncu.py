"""Short-sequence forward calls for Nsight Compute (issue 20 Required 1): bf16, 16k tokens per batch, the shapes
where the forward is furthest behind cuDNN -- d128 at 512 tokens non-causal and causal (b32 h16), d64 at 512 causal
(b32 h32). One call each; `ncu -k regex:flash_fwd` sees only flashkit's forward kernels.

    python3 tools/gpu/fwd_short_ncu.py [SEQLEN]        default 512
"""
import os
import sys

import torch

sys.path.insert(0, os.environ.get("FLASHKIT_PYDIR") or os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from flashkit import torch as fkt  # noqa: E402

s = int(sys.argv[1]) if len(sys.argv) > 1 else 512
for d, causal in ((128, False), (128, True), (64, True)):
    q, k, v = (torch.randn(16384 // s, s, 2048 // d, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    cost = fkt._capi.FkCost()
    fkt.attention_forward(q, k, v, causal=causal, cost=cost)
    torch.cuda.synchronize()
    print("fwd d%d s%d causal=%d: kernel %s" % (d, s, causal, cost.kernel.decode()), flush=True)
