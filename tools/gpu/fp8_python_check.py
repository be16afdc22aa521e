"""flashkit.torch.quantize_e4m3 / attention_forward_fp8 on CUDA tensors (tools/gpu/fp8.sh python runs it on the H200).

With torch's float8_e4m3fn: quantize on the GPU (bytes and descale against the CPU quantizer of the same values), the
fp8 forward on the GPU (d128 and d256, GQA, causal and not, odd lengths, on a side stream) against the CPU path's
answer on the same bytes (they differ only in where P is rounded: rel RMS <= 2e-2; lse to 2e-3 relative), uint8 views of the
same bytes, and the CUDA-only errors (impl="reference" on CUDA, head_dim 64, tensors on two devices). Prints one
"FAIL ..." line per failed check, and "python fp8: ok rel_rms X" (X the largest o rel RMS) when all pass; exit 1
otherwise.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "python"))
import flashkit  # noqa: E402
from flashkit import torch as fkt  # noqa: E402

FAILS = []


def check(ok, what):
    if not ok:
        FAILS.append(what)
        print("FAIL " + what, flush=True)


def rel_rms(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).square().mean().sqrt() / b.square().mean().sqrt().clamp_min(1e-300)).item()


def expect_error(kind, match, fn):
    try:
        fn()
    except kind as e:
        check(match in str(e), "error message %r lacks %r" % (str(e), match))
        return
    except Exception as e:  # noqa: BLE001
        check(False, "expected %s (%s), got %s: %s" % (kind.__name__, match, type(e).__name__, e))
        return
    check(False, "expected %s (%s), got no error" % (kind.__name__, match))


def main():
    if not torch.cuda.is_available() or not hasattr(torch, "float8_e4m3fn"):
        print("FAIL python fp8: needs a CUDA device and torch >= 2.1 (float8_e4m3fn)")
        return 1
    check(fkt.E4M3_DTYPE == torch.float8_e4m3fn, "E4M3_DTYPE is %s" % fkt.E4M3_DTYPE)
    dev = torch.device("cuda")
    g = torch.Generator(device="cpu").manual_seed(20)
    worst = 0.0
    for d, b, sq, sk, h, hkv, causal in ((128, 2, 300, 517, 8, 2, True), (128, 1, 1, 1000, 4, 1, True),
                                         (256, 2, 257, 257, 4, 4, False), (256, 1, 190, 333, 6, 2, True)):
        name = "d%d b%d sq%d sk%d h%d/%d causal=%d" % (d, b, sq, sk, h, hkv, causal)
        host = [s * torch.randn(shape, generator=g) for s, shape in
                ((3.0, (b, sq, h, d)), (1.0, (b, sk, hkv, d)), (0.25, (b, sk, hkv, d)))]
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):  # inputs written and used on a side stream: the calls must follow it
            cuda_in = [x.to(dev, non_blocking=False).bfloat16() for x in host]
            quant = [fkt.quantize_e4m3(x) for x in cuda_in]
            (q8, qd), (k8, kd), (v8, vd) = quant
            o, lse = fkt.attention_forward_fp8(q8, k8, v8, qd, kd, vd, causal=causal)
        torch.cuda.synchronize()
        for (x8, xd), x in zip(quant, cuda_in):
            c8, cd = fkt.quantize_e4m3(x.cpu())
            check(x8.dtype == torch.float8_e4m3fn and x8.is_cuda, "%s: quantize gave %s on %s" % (name, x8.dtype,
                                                                                                  x8.device))
            check(abs(xd - cd) <= 1e-6 * cd, "%s: descale cuda %r cpu %r" % (name, xd, cd))
            diff = (x8.cpu().view(torch.uint8) != c8.view(torch.uint8)).float().mean().item()
            check(diff <= 1e-3, "%s: %.4f%% of the quantized bytes differ from the CPU's" % (name, 100 * diff))
        ref_o, ref_lse = fkt.attention_forward_fp8(q8.cpu(), k8.cpu(), v8.cpu(), qd, kd, vd, causal=causal)
        r = rel_rms(o, ref_o)
        worst = max(worst, r)
        check(o.dtype == torch.bfloat16 and o.is_cuda and o.shape == q8.shape, "%s: o %s %s" % (name, o.dtype, o.shape))
        check(r <= 2e-2, "%s: o rel RMS %.3g against the CPU path > 2e-2" % (name, r))
        fin = torch.isfinite(ref_lse)
        check(torch.equal(torch.isfinite(lse.cpu()), fin), "%s: lse finiteness differs" % name)
        # relative: the tensor cores accumulate e4m3 products with less than f32's precision, so a score's error
        # grows with its size (run s12-9: up to 6e-3 absolute at |lse| ~ 10, as the C++ tests' 2.8e-4 RMS)
        lerr = ((lse.cpu()[fin] - ref_lse[fin]).abs() / ref_lse[fin].abs().clamp_min(1.0)).max().item() \
            if fin.any() else 0.0
        check(lerr <= 2e-3, "%s: lse max rel diff %.3g > 2e-3" % (name, lerr))
        o_u8, _ = fkt.attention_forward_fp8(q8.view(torch.uint8), k8.view(torch.uint8), v8.view(torch.uint8), qd, kd,
                                            vd, causal=causal)
        check(torch.equal(o_u8, o), "%s: uint8 views gave a different o" % name)
    q8, qd = fkt.quantize_e4m3(torch.randn(1, 64, 4, 128, device=dev))
    expect_error(flashkit.UnsupportedError, "reference implementation runs on CPU tensors only",
                 lambda: fkt.attention_forward_fp8(q8, q8, q8, qd, qd, qd, impl="reference"))
    expect_error(flashkit.InvalidArgumentError, "device",
                 lambda: fkt.attention_forward_fp8(q8, q8.cpu(), q8, qd, qd, qd))
    s8, sd = fkt.quantize_e4m3(torch.randn(1, 64, 4, 64, device=dev))
    expect_error(flashkit.UnsupportedError, "head_dim", lambda: fkt.attention_forward_fp8(s8, s8, s8, sd, sd, sd))
    expect_error(TypeError, "quantize_e4m3", lambda: fkt.attention_forward_fp8(q8.float(), q8, q8, qd, qd, qd))
    if FAILS:
        print("python fp8: %d checks failed" % len(FAILS))
        return 1
    print("python fp8: ok rel_rms %.4g" % worst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
