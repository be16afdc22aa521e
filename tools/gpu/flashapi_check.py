"""flashkit.flash_attn on CUDA tensors against PyTorch SDPA (tools/gpu/flashapi.sh runs it on the H200).

Checks, each one line "PASS|FAIL name: detail", and a JSON summary (argv[1]):
  fwd/bwd     flash_attn_func in bf16 and fp16 (causal and not, GQA, odd sizes) against SDPA's math backend in f32 on
              the same inputs: forward, and dq/dk/dv through autograd
  varlen      flash_attn_varlen_func(q, k, v, cu, cu, max_q, max_k, causal=True) against per-sequence SDPA
  kvcache     flash_attn_with_kvcache appending one token per sequence (unequal cache_seqlens) against SDPA
  stream      a call on a side stream, its inputs written on that stream just before: the result is correct
  compile     torch.compile(fullgraph=True) of a small attention module: forward and gradients match eager, and
              the op is one node of the graph (no graph break); once with an explicit softmax_scale (the checked
              path) and once with flash-attn's defaults (whose eager fast path must hand over to the checked path
              while torch.compile traces), also under torch.no_grad()
  eager entry the fast path's extension entry (issue 20): present, bit-identical to torch.ops.flashkit.fwd on a
              decode shape, no autograd node under torch.no_grad()
Exit status 1 if any check failed.
"""

import json
import math
import os
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

F = torch.nn.functional
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "python"))
from flashkit import _torch_ops  # noqa: E402
from flashkit.flash_attn import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache  # noqa: E402

RESULTS = []
TOL = {torch.bfloat16: 2e-2, torch.float16: 4e-3}


def report(name, ok, detail):
    RESULTS.append({"name": name, "ok": bool(ok), "detail": detail})
    print("%s %s: %s" % ("PASS" if ok else "FAIL", name, detail), flush=True)


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def sdpa(q, k, v, causal, scale=None):
    """SDPA's math backend in f32 on (batch, seqlen, heads, dim) inputs, GQA by repeating heads, causal mask aligned
    bottom-right as flash-attn and flashkit define it."""
    group = q.shape[2] // k.shape[2]
    qt, kt, vt = (x.transpose(1, 2).float() for x in (q, k, v))
    kt, vt = kt.repeat_interleave(group, 1), vt.repeat_interleave(group, 1)
    mask = None
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        i = torch.arange(sq, device=q.device)[:, None]
        mask = torch.arange(sk, device=q.device)[None, :] <= i + (sk - sq)
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=scale).transpose(1, 2)


def check_fwd_bwd():
    g = torch.Generator(device="cuda").manual_seed(1)
    for dtype in (torch.bfloat16, torch.float16):
        for (b, sq, sk, h, hkv, d, causal) in ((2, 129, 129, 8, 8, 64, False), (1, 77, 301, 16, 4, 128, True),
                                               (3, 1, 4096, 32, 8, 128, True)):
            q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype, generator=g).requires_grad_()
            k = torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype, generator=g).requires_grad_()
            v = torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype, generator=g).requires_grad_()
            do = torch.randn(b, sq, h, d, device="cuda", dtype=dtype, generator=g)
            o = flash_attn_func(q, k, v, 0.0, None, causal)
            grads = torch.autograd.grad(o, (q, k, v), do)
            qf, kf, vf = (x.detach().float().requires_grad_() for x in (q, k, v))
            ref = sdpa(qf, kf, vf, causal)
            ref_grads = torch.autograd.grad(ref, (qf, kf, vf), do.float())
            errs = [rel(o, ref)] + [rel(a, r) for a, r in zip(grads, ref_grads)]
            name = "fwd/bwd %s b%d sq%d sk%d h%d/%d d%d%s" % (str(dtype)[6:], b, sq, sk, h, hkv, d,
                                                             " causal" if causal else "")
            report(name, max(errs) < TOL[dtype], "rel err o %.1e dq %.1e dk %.1e dv %.1e" % tuple(errs))


def check_varlen():
    g = torch.Generator(device="cuda").manual_seed(2)
    lens_q, lens_k = [5, 1, 130, 64], [9, 300, 130, 70]
    cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32, device="cuda")
    q = torch.randn(sum(lens_q), 8, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(sum(lens_k), 2, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(sum(lens_k), 2, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    o = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=True)
    refs = [sdpa(q[cu_q[i]:cu_q[i + 1]][None], k[cu_k[i]:cu_k[i + 1]][None], v[cu_k[i]:cu_k[i + 1]][None], True)[0]
            for i in range(len(lens_q))]
    err = rel(o, torch.cat(refs))
    report("varlen bf16 4 seqs causal", err < TOL[torch.bfloat16], "rel err %.1e" % err)


def check_kvcache():
    g = torch.Generator(device="cuda").manual_seed(3)
    b, h, hkv, d, cache = 3, 16, 4, 128, 1024
    kc = torch.randn(b, cache, hkv, d, device="cuda", dtype=torch.bfloat16, generator=g)
    vc = torch.randn(b, cache, hkv, d, device="cuda", dtype=torch.bfloat16, generator=g)
    q = torch.randn(b, 1, h, d, device="cuda", dtype=torch.bfloat16, generator=g)
    kn = torch.randn(b, 1, hkv, d, device="cuda", dtype=torch.bfloat16, generator=g)
    vn = torch.randn(b, 1, hkv, d, device="cuda", dtype=torch.bfloat16, generator=g)
    lens = torch.tensor([17, 1000, 512], dtype=torch.int32, device="cuda")
    o = flash_attn_with_kvcache(q, kc, vc, kn, vn, cache_seqlens=lens, causal=True)
    errs = []
    for i, n in enumerate(lens.tolist()):
        ok_append = torch.equal(kc[i, n], kn[i, 0]) and torch.equal(vc[i, n], vn[i, 0])
        errs.append(rel(o[i:i + 1], sdpa(q[i:i + 1], kc[i:i + 1, :n + 1], vc[i:i + 1, :n + 1], True)))
        if not ok_append:
            errs.append(float("inf"))
    report("kvcache bf16 append + decode", max(errs) < TOL[torch.bfloat16], "rel err %.1e" % max(errs))


def check_stream():
    g = torch.Generator(device="cuda").manual_seed(4)
    q = torch.randn(4, 512, 16, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = torch.randn_like(q), torch.randn_like(q)
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)  # keeps the side stream busy: a launch on another stream would race ahead
        k2 = k * 2.0
        o = flash_attn_func(q, k2, v, causal=True)
    side.synchronize()
    err = rel(o, sdpa(q, k * 2.0, v, True))
    report("current stream honoured", err < TOL[torch.bfloat16], "rel err %.1e" % err)


class Block(torch.nn.Module):
    def __init__(self, dim=256, heads=4, defaults=False):
        super().__init__()
        self.heads = heads
        self.defaults = defaults  # flash-attn's defaults: flash_attn_func's fast path
        self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False)
        self.out = torch.nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, -1).unbind(2)
        if self.defaults:
            return self.out(flash_attn_func(q, k, v, causal=True).flatten(2))
        return self.out(flash_attn_func(q, k, v, causal=True, softmax_scale=1.0 / math.sqrt(q.shape[-1])).flatten(2))


def check_compile(defaults=False):
    torch.manual_seed(5)
    model = Block(defaults=defaults).cuda().to(torch.bfloat16)
    x = torch.randn(2, 100, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    eager = model(x)
    gx_eager = torch.autograd.grad(eager.float().square().sum(), x)[0]
    import torch._dynamo as dynamo  # (a plain `import torch._dynamo` here would make `torch` local to this function)
    dynamo.reset()
    explain = dynamo.explain(model)(x)
    compiled = torch.compile(model, fullgraph=True)
    out = compiled(x)
    gx = torch.autograd.grad(out.float().square().sum(), x)[0]
    e_fwd, e_bwd = rel(out, eager), rel(gx, gx_eager)
    ok = e_fwd < 1e-2 and e_bwd < 2e-2 and explain.graph_break_count == 0
    name = "torch.compile(fullgraph=True) fwd+bwd" + (", flash-attn defaults" if defaults else "")
    report(name, ok, "graphs %d breaks %d rel err out %.1e dx %.1e"
           % (explain.graph_count, explain.graph_break_count, e_fwd, e_bwd))
    if defaults:
        with torch.no_grad():
            dynamo.reset()
            compiled = torch.compile(model, fullgraph=True)
            e = rel(compiled(x), model(x))
        report("torch.compile(fullgraph=True) under no_grad, flash-attn defaults", e < 1e-2, "rel err out %.1e" % e)


def check_compile_defaults():
    check_compile(defaults=True)


def check_eager_entry():
    if _torch_ops.BACKEND != "extension":
        report("eager entry", True, "not used on the %s backend" % _torch_ops.BACKEND)
        return
    g = torch.Generator(device="cuda").manual_seed(6)
    q = torch.randn(2, 1, 32, 128, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    k = torch.randn(2, 777, 8, 128, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    v = torch.randn(2, 777, 8, 128, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    with torch.no_grad():
        o, lse, _ = flash_attn_func(q, k, v, 0.0, None, True, return_attn_probs=True)
        o_op, lse_op = torch.ops.flashkit.fwd.default(q, k, v, None, None, 0.0, True, -1, -1, 0.0, 0)
    same = torch.equal(o, o_op) and torch.equal(lse, lse_op)
    err = rel(o, sdpa(q.detach(), k.detach(), v.detach(), True))
    ok = (_torch_ops.fwd_eager is not None and same and o.grad_fn is None and not o.requires_grad
          and lse.is_contiguous() and lse.dtype == torch.float32 and err < TOL[torch.bfloat16])
    report("eager entry", ok, "present %s, identical to the operator %s, rel err %.1e"
           % (_torch_ops.fwd_eager is not None, same, err))


def main():
    print("backend %s (torch %s, %s)" % (_torch_ops.BACKEND, torch.__version__, torch.cuda.get_device_name()))
    for check in (check_fwd_bwd, check_varlen, check_kvcache, check_stream, check_compile, check_compile_defaults,
                  check_eager_entry):
        try:
            check()
        except Exception as e:  # one failing check must not hide the others
            report(check.__name__, False, "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump({"backend": _torch_ops.BACKEND, "torch": torch.__version__, "checks": RESULTS}, f, indent=1)
    failed = [r["name"] for r in RESULTS if not r["ok"]]
    print("%d checks, %d failed%s" % (len(RESULTS), len(failed), (": " + ", ".join(failed)) if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
