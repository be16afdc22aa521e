"""A CPU model of the 3xTF32 dot products of the CS149 SwiGLU kernel (src/kernels/cuda/cs149/swiglu.cu), to see
where its error comes from (docs/worklog/cs149-swiglu.md, v2). Model of one mma.sync m16n8k8 TF32 step: the
products of TF32 operands are exact and the tensor core returns C + sum of 8 products rounded toward zero (the
published behaviour of NVIDIA tensor cores: truncating alignment and normalisation). Compares, at K = 2048 with
N(0, 1) data: all of K accumulated inside the tensor cores (kernel v1), partial sums of `chunk` k from zero added
with round-to-nearest f32 adds (v2: chunk 8), and a plain sequential f32 loop.

    /usr/bin/python3 tools/cs149_3xtf32_model.py [--k 2048] [--dots 2000]"""
import argparse

import numpy as np


def tf32(a):
    """Round f32 to TF32 (10 explicit mantissa bits), to nearest with ties away: cvt.rna.tf32.f32."""
    b = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)


def round_toward_zero(d):
    f = d.astype(np.float32)
    over = np.abs(f.astype(np.float64)) > np.abs(d)
    f[over] = np.nextafter(f[over], np.float32(0))
    return f


def mma(c, a, b, k0):
    return round_toward_zero(c.astype(np.float64) + (a[:, k0:k0 + 8].astype(np.float64) * b[:, k0:k0 + 8]).sum(1))


def three_tf32(x, w, chunk):
    """chunk 0: every k step accumulates into the running sum inside the tensor core (v1)."""
    xb, wb = tf32(x), tf32(w)
    xs, ws = tf32(x - xb), tf32(w - wb)
    acc = np.zeros(x.shape[0], np.float32)
    part = acc
    for k0 in range(0, x.shape[1], 8):
        if chunk and k0 % chunk == 0:
            part = np.zeros_like(acc)
        target = part if chunk else acc
        target = mma(target, xs, wb, k0)
        target = mma(target, xb, ws, k0)
        target = mma(target, xb, wb, k0)
        if chunk:
            part = target
            if (k0 + 8) % chunk == 0 or k0 + 8 >= x.shape[1]:
                acc = (acc + part).astype(np.float32)
        else:
            acc = target
    return acc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", type=int, default=2048)
    ap.add_argument("--dots", type=int, default=2000)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((args.dots, args.k)).astype(np.float32)
    w = rng.standard_normal((args.dots, args.k)).astype(np.float32)
    exact = (x.astype(np.float64) * w).sum(1)
    scale = np.sqrt((exact ** 2).mean())

    def sequential_f32():
        acc = np.zeros(args.dots, np.float32)
        for k in range(args.k):
            acc = (acc + x[:, k] * w[:, k]).astype(np.float32)
        return acc

    for name, fn in [("v1: all of K in the tensor core", lambda: three_tf32(x, w, 0)),
                     ("v2: per k8 step, f32 RN running sum", lambda: three_tf32(x, w, 8)),
                     ("per k16 tile, f32 RN running sum", lambda: three_tf32(x, w, 16)),
                     ("sequential f32 (RN)", sequential_f32)]:
        e = fn().astype(np.float64) - exact
        print("%-38s rms error / rms value %.2e   mean error %+.2e" % (name, np.sqrt((e ** 2).mean()) / scale,
                                                                      e.mean()))


if __name__ == "__main__":
    main()
