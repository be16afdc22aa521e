"""flashkit.torch autograd vs PyTorch SDPA (math backend in f32 on the same bf16/f16 inputs), on the GPU.
Also runs on a side stream to check that flashkit honours torch.cuda.current_stream()."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.environ.get("FLASHKIT_PYDIR") or os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from flashkit.torch import flash_attn_func, flash_attn_varlen_func  # noqa: E402


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def ref(q, k, v, causal, group):
    # bottom-right aligned causal mask, as flashkit defines it
    qt, kt, vt = (x.transpose(1, 2).double() for x in (q, k, v))
    kt = kt.repeat_interleave(group, dim=1)
    vt = vt.repeat_interleave(group, dim=1)
    sq, sk = q.shape[1], k.shape[1]
    mask = None
    if causal:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        mask = j <= i + (sk - sq)
    o = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask)
    return o.transpose(1, 2)


fails = 0
for dtype in (torch.bfloat16, torch.float16):
    for (b, sq, sk, h, hkv, d, causal) in [(2, 256, 256, 8, 8, 64, False), (2, 256, 256, 8, 2, 128, True),
                                          (1, 300, 500, 4, 1, 256, True), (3, 1, 1000, 8, 2, 128, True),
                                          (1, 1000, 1000, 16, 16, 128, True)]:
        torch.manual_seed(b * sq + d)
        q, k, v = (torch.randn(b, s, hh, d, device="cuda", dtype=dtype, requires_grad=True)
                   for s, hh in ((sq, h), (sk, hkv), (sk, hkv)))
        do = torch.randn(b, sq, h, d, device="cuda", dtype=dtype)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            o = flash_attn_func(q, k, v, causal=causal)
            o.backward(do)
        torch.cuda.current_stream().wait_stream(side)
        grads = [x.grad.clone() for x in (q, k, v)]
        qr, kr, vr = (x.detach().double().requires_grad_(True) for x in (q, k, v))
        orf = ref(qr, kr, vr, causal, h // hkv)
        orf.backward(do.double())
        errs = [rel(o, orf)] + [rel(g, r.grad) for g, r in zip(grads, (qr, kr, vr))]
        ok = errs[0] < 1e-2 and max(errs[1:]) < 2e-2
        fails += not ok
        print("%s %s b%d sq%d sk%d h%d/%d d%d causal=%d: o %.2e dq %.2e dk %.2e dv %.2e %s" % (
            "PASS" if ok else "FAIL", str(dtype)[6:], b, sq, sk, h, hkv, d, causal, *errs, ""), flush=True)

# varlen through the torch wrapper
torch.manual_seed(5)
lens = [(100, 130), (1, 70), (64, 64)]
cq = torch.tensor([0] + list(torch.tensor([a for a, _ in lens]).cumsum(0)), dtype=torch.int32, device="cuda")
ck = torch.tensor([0] + list(torch.tensor([b for _, b in lens]).cumsum(0)), dtype=torch.int32, device="cuda")
q = torch.randn(int(cq[-1]), 4, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
k = torch.randn(int(ck[-1]), 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
v = torch.randn(int(ck[-1]), 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
o = flash_attn_varlen_func(q, k, v, cq, ck, causal=True)
o.float().square().sum().backward()
errs = []
for i, (a, bb) in enumerate(lens):
    qs = q[cq[i]:cq[i + 1]].detach().double().unsqueeze(0).requires_grad_(True)
    ks = k[ck[i]:ck[i + 1]].detach().double().unsqueeze(0).requires_grad_(True)
    vs = v[ck[i]:ck[i + 1]].detach().double().unsqueeze(0).requires_grad_(True)
    r = ref(qs, ks, vs, True, 2)
    errs.append(rel(o[cq[i]:cq[i + 1]], r[0]))
    r.square().sum().backward()
    errs.append(rel(q.grad[cq[i]:cq[i + 1]], qs.grad[0]))
ok = max(errs) < 2e-2
fails += not ok
print("%s varlen causal GQA: max rel err %.2e" % ("PASS" if ok else "FAIL", max(errs)))
print("torch_check: %d failures" % fails)
sys.exit(1 if fails else 0)
