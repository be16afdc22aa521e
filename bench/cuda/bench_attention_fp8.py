"""Benchmark the fp8 (e4m3) attention forward (include/flashkit/attention_fp8.hpp) next to flashkit's bf16 forward
and PyTorch SDPA's bf16 forward (cuDNN and flash backends), in one process: head_dim 128 and 256, 16 heads, seqlen
1k/4k/16k at 32k tokens per batch, causal and not. FLOPs = 4*b*s^2*h*d (halved when causal). Times are medians of
CUDA-event timings after warm-up; the flashkit calls go through bench/cuda/fp8_shim.cpp (ctypes). Also: the V^T prep kernel alone (part of every fp8 call), and the fp8 output's
accuracy against flashkit's bf16 output on the unquantized inputs (max abs and relative RMS).
At d128 and d256 the kernel also runs with each O-rescale mode side by side (RESCALE_VALUES: Tuning::fp8_rescale, 0
every tile, 1 skipped by warps whose maxima all stayed, 2 lazy max; docs/worklog/attention-fp8-cuda.md v4): columns
[r0 .. r1 .. r2 ..] in TFLOP/s, each one's output against bf16, r1 byte for byte against r0 and r2's rel_rms to r0.
--key-tiles 128,192: at d128 the key tiles (Tuning::fp8_key_tile, worklog v5) side by side on the automatic
rescale mode, columns {bn128 .. bn192 ..} in TFLOP/s and each one's rel_rms against bf16 (--rounds N alternates them).

    python3 bench/cuda/bench_attention_fp8.py --shim build/libfk_fp8_shim.so --out DIR [--quick]
Writes DIR/attention-fp8.json; prints one line per point.
"""

import argparse
import ctypes
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from cuda_timing import timeit  # bench/cuda/cuda_timing.py (the script's folder is on sys.path)




def load_shim(path):
    lib = ctypes.CDLL(path)
    i64, f32, vp = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
    lib.fkb_error.restype = ctypes.c_char_p
    lib.fkb_fp8_forward.argtypes = [vp] * 5 + [i64] * 6 + [f32] * 3 + [ctypes.c_int]
    lib.fkb_fp8_forward_rescale.argtypes = [vp] * 5 + [i64] * 6 + [f32] * 3 + [ctypes.c_int] * 2
    lib.fkb_fp8_kernel.restype = ctypes.c_char_p
    lib.fkb_fp8_forward_cfg.argtypes = [vp] * 5 + [i64] * 6 + [f32] * 3 + [ctypes.c_int] * 3
    lib.fkb_bf16_forward.argtypes = [vp] * 5 + [i64] * 6 + [ctypes.c_int]
    lib.fkb_quantize_bf16.argtypes = [vp, i64, vp, ctypes.POINTER(f32)]
    lib.fkb_vt_bytes.argtypes = [i64] * 4
    lib.fkb_vt_bytes.restype = i64
    lib.fkb_vt_prep.argtypes = [vp, i64, i64, i64, i64, vp]
    return lib


def check(lib, rc):
    if rc != 0:
        raise RuntimeError(lib.fkb_error().decode())


# Per head dim: the Tuning::fp8_rescale values timed side by side.
RESCALE_VALUES = {128: [0, 1, 2], 256: [0, 1, 2]}


def quantize(lib, x):
    q = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    s = ctypes.c_float(0)
    check(lib, lib.fkb_quantize_bf16(x.data_ptr(), x.numel(), q.data_ptr(), ctypes.byref(s)))
    return q, s.value


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shim", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dims", default="128,256")
    ap.add_argument("--seqlens", default="", help="comma-separated (default 1k,4k,16k; --quick 1k,4k)")
    ap.add_argument("--modes", default="0,1,2", help="the rescale modes timed side by side ('' none)")
    ap.add_argument("--key-tiles", default="", help="d128: key tiles timed side by side, e.g. 128,192")
    ap.add_argument("--masks", default="full,causal")
    ap.add_argument("--rounds", type=int, default=1, help="alternations of the side-by-side variants")
    args = ap.parse_args()
    lib = load_shim(args.shim)
    reps = 5 if args.quick else 20
    seqlens = [1024, 4096] if args.quick else [1024, 4096, 16384]
    if args.seqlens:
        seqlens = [int(x) for x in args.seqlens.split(",")]
    rows = []
    for d in [int(x) for x in args.dims.split(",")]:
        for causal in [m == "causal" for m in args.masks.split(",")]:
            for s in seqlens:
                b, h = max(1, 32768 // s), 16  # 32k tokens a call (s = 32k: one sequence)
                torch.manual_seed(0)
                q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                q8, qs = quantize(lib, q)
                k8, ks = quantize(lib, k)
                v8, vs = quantize(lib, v)
                o8 = torch.empty(b, s, h, d, device="cuda", dtype=torch.bfloat16)
                lse8 = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
                vt = torch.empty(lib.fkb_vt_bytes(b, s, h, d), device="cuda", dtype=torch.uint8)

                def fp8():
                    check(lib, lib.fkb_fp8_forward(q8.data_ptr(), k8.data_ptr(), v8.data_ptr(), o8.data_ptr(),
                                                   lse8.data_ptr(), b, s, s, h, h, d, qs, ks, vs, int(causal)))

                def fp8_rescale(mode):
                    def f():
                        check(lib, lib.fkb_fp8_forward_rescale(q8.data_ptr(), k8.data_ptr(), v8.data_ptr(), o8.data_ptr(),
                                                           lse8.data_ptr(), b, s, s, h, h, d, qs, ks, vs, int(causal),
                                                               mode))
                    return f

                def fp8_key_tile(bn):
                    def f():
                        check(lib, lib.fkb_fp8_forward_cfg(q8.data_ptr(), k8.data_ptr(), v8.data_ptr(), o8.data_ptr(),
                                                           lse8.data_ptr(), b, s, s, h, h, d, qs, ks, vs, int(causal),
                                                           -1, bn))
                    return f

                ob = torch.empty(b, s, h, d, device="cuda", dtype=torch.bfloat16)
                lseb = torch.empty(b, h, s, device="cuda", dtype=torch.float32)

                def bf16():
                    check(lib, lib.fkb_bf16_forward(q.data_ptr(), k.data_ptr(), v.data_ptr(), ob.data_ptr(),
                                                    lseb.data_ptr(), b, s, s, h, h, d, int(causal)))

                def prep():
                    check(lib, lib.fkb_vt_prep(v8.data_ptr(), b, s, h, d, vt.data_ptr()))

                qt, kt, vt_ = (x.transpose(1, 2).contiguous() for x in (q, k, v))

                def sdpa(backend):
                    def f():
                        with sdpa_kernel(backend):
                            return F.scaled_dot_product_attention(qt, kt, vt_, is_causal=causal)
                    return f

                flops = 4.0 * b * s * s * h * d / (2 if causal else 1)
                r = {"head_dim": d, "causal": causal, "seqlen": s, "batch": b, "heads": h}
                t = {"fp8": timeit(fp8, reps), "prep": timeit(prep, reps),
                     "flashkit_bf16": timeit(bf16, reps)}
                modes = [m for m in RESCALE_VALUES.get(d, []) if str(m) in args.modes.split(",")]
                tiles = [int(x) for x in args.key_tiles.split(",") if x] if d == 128 else []
                # Side by side: the rescale modes (rN) and the key tiles on the automatic mode (bnN); each one's
                # output is checked against bf16 below.
                variants = [("r%d" % e, fp8_rescale(e)) for e in modes] + [("bn%d" % bn, fp8_key_tile(bn)) for bn in tiles]
                # --rounds N: the variants alternate N times (each a median of reps calls); the median of the rounds
                # (one measurement of a long fp8 call drifts by 5-10% with the clock, run s21-1).
                rounds = {name: [] for name, _ in variants}
                for _ in range(args.rounds if variants else 0):
                    for name, call in variants:
                        rounds[name].append(timeit(call, reps))
                outs, touts = {}, {}
                for name, call in variants:
                    ms = sorted(rounds[name])
                    t["fp8_" + name] = ms[len(ms) // 2]
                    r["fp8_%s_rounds_ms" % name] = rounds[name]
                    call()
                    torch.cuda.synchronize()
                    r["kernel_" + name] = lib.fkb_fp8_kernel().decode()
                    (outs if name.startswith("r") else touts)[name] = o8.clone()
                for name, be in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
                    try:
                        t[name] = timeit(sdpa(be), reps)
                    except RuntimeError as e:  # a backend this torch build lacks
                        print("  %s unavailable: %s" % (name, str(e).splitlines()[0]))
                for name, ms in t.items():
                    r[name + "_ms"] = ms
                    if name != "prep":
                        r[name + "_tflops"] = flops / ms / 1e9
                fp8()
                bf16()
                torch.cuda.synchronize()
                o_bf16 = ob
                diff = (o8.float() - o_bf16.float())
                r["max_abs"] = diff.abs().max().item()
                r["rel_rms"] = (diff.norm() / o_bf16.float().norm()).item()
                r["finite"] = bool(torch.isfinite(o8).all().item())
                for name, o_e in list(outs.items()) + list(touts.items()):
                    de = o_e.float() - o_bf16.float()
                    r["rel_rms_" + name] = (de.norm() / o_bf16.float().norm()).item()
                    r["finite_" + name] = bool(torch.isfinite(o_e).all().item())
                    # r1: O *= 1 skipped, the same bytes; r2: P rounded against another max
                    if name.startswith("r") and name != "r0" and "r0" in outs:
                        r[name + "_vs_r0_rel_rms"] = ((o_e.float() - outs["r0"].float()).norm() /
                                                     outs["r0"].float().norm()).item()
                        r[name + "_equals_r0"] = bool(torch.equal(o_e, outs["r0"]))
                rows.append(r)
                others = "  ".join("%s %.3f ms %.0f TFLOP/s" % (n, r[n + "_ms"], r[n + "_tflops"])
                                   for n in ("flashkit_bf16", "sdpa_cudnn", "sdpa_flash") if n + "_ms" in r)
                cfgs = " [%s]" % "  ".join("r%d %.0f" % (e, r["fp8_r%d_tflops" % e]) for e in modes) if modes else ""
                if tiles:
                    cfgs += " {%s}" % "  ".join("bn%d %.0f (rel_rms %.3g%s)" % (
                        bn, r["fp8_bn%d_tflops" % bn], r["rel_rms_bn%d" % bn],
                        "" if r["finite_bn%d" % bn] else ", NOT FINITE") for bn in tiles)
                vs_r0 = "".join("  r%d vs r0 rel_rms %.3g%s finite %s" % (
                    e, r["r%d_vs_r0_rel_rms" % e], " (same bytes)" if r["r%d_equals_r0" % e] else "",
                    r["finite_r%d" % e]) for e in modes if e != 0)
                print("fp8 d%d %s s=%d b=%d h=%d: fp8 %.3f ms %.0f TFLOP/s%s (prep %.3f ms, %.1f%%)  %s  | vs bf16: "
                      "max_abs %.3g rel_rms %.3g finite %s%s" % (
                          d, "causal" if causal else "full", s, b, h, r["fp8_ms"], r["fp8_tflops"], cfgs, r["prep_ms"],
                          100 * r["prep_ms"] / r["fp8_ms"], others, r["max_abs"], r["rel_rms"], r["finite"], vs_r0),
                      flush=True)
                del q, k, v, q8, k8, v8, o8, lse8, vt, qt, kt, vt_, ob, lseb, o_bf16, diff, outs, touts
                torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "attention-fp8.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
