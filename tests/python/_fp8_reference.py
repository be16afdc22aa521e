"""float64 model of flashkit's fp8 (e4m3) attention forward for the Python tests, written from the contract in
include/flashkit/attention_fp8.hpp and the OCP E4M3FN format (not from the library)."""

import math

import numpy as np


def e4m3_table():
    """Value of each e4m3fn byte (OCP E4M3FN: bias 7, no infinities, 0x7f / 0xff NaN), written from the format."""
    b = np.arange(256)
    sign = np.where(b >> 7, -1.0, 1.0)
    e, m = (b >> 3) & 15, b & 7
    mag = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))
    mag[(b & 0x7F) == 0x7F] = np.nan
    return sign * mag


E4M3 = e4m3_table()
E4M3_POS = np.unique(E4M3[np.isfinite(E4M3) & (E4M3 >= 0)])  # sorted non-negative values, 0 .. 448


def round_e4m3(p):
    """p in [0, 1] rounded to the nearest e4m3 value (ties, which random input does not hit, go down)."""
    i = np.clip(np.searchsorted(E4M3_POS, p), 1, len(E4M3_POS) - 1)
    lo, hi = E4M3_POS[i - 1], E4M3_POS[i]
    return np.where(p - lo <= hi - p, lo, hi)


def attention_f64(q, k, v, causal, scale, round_p):
    """float64 attention, q [B, Sq, H, D], k/v [B, Sk, Hkv, D]; bottom-right causal; P optionally rounded to e4m3
    against the row max (the CPU path's rule in attention_fp8.hpp), l from the unrounded P. Returns o, lse."""
    b, sq, h, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    kk, vv = np.repeat(k, h // hkv, axis=2), np.repeat(v, h // hkv, axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    visible = np.ones((sq, sk), dtype=bool)
    if causal:
        visible = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq)
    s = np.where(visible, s, -np.inf)
    any_key = visible.any(axis=1)[None, None, :, None]
    m = np.where(any_key, s.max(axis=-1, keepdims=True, initial=-np.inf), 0.0)
    p = np.exp(s - m)
    l = p.sum(axis=-1, keepdims=True)
    r = round_e4m3(p) if round_p else p
    o = np.einsum("bhqk,bkhd->bqhd", r / np.where(l > 0, l, 1.0), vv)
    lse = np.where(any_key[..., 0], (m + np.log(np.where(l > 0, l, 1.0)))[..., 0], -np.inf)
    return np.where(any_key.transpose(0, 2, 1, 3), o, 0.0), lse


def rel_rms(got, ref):
    return float(np.sqrt(np.mean((got - ref) ** 2)) / np.sqrt(np.mean(ref ** 2)))


def decode(bytes_u8):
    """Values of a uint8 array of e4m3 bytes."""
    return E4M3[np.asarray(bytes_u8).astype(np.int64)]
