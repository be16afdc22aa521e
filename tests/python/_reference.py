"""Independent reference attention for the tests: plain numpy float64 forward, torch float64 autograd
backward, both written from the contract in include/flashkit/attention.hpp (not from the library)."""

import numpy as np

NEG = -1e30  # finite "minus infinity" so torch autograd never sees inf - inf


def visible(sq, sk, causal=False, window=(-1, -1)):
    """[sq, sk] bool: may query i see key j? Bottom-right aligned (off = sk - sq)."""
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    off = sk - sq
    ok = np.ones((sq, sk), dtype=bool)
    if causal:
        ok &= j <= i + off
    left, right = window
    if left >= 0:
        ok &= j >= i + off - left
    if right >= 0:
        ok &= j <= i + off + right
    return ok


def _dense_np(q, k, v, causal, window, softcap, scale):
    """q [sq, h, d], k/v [sk, hkv, d] float64 -> o [sq, h, d], lse [h, sq]."""
    sq, h, d = q.shape
    sk, hkv, _ = k.shape
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    if sk == 0 or sq == 0:
        return np.zeros((sq, h, d)), np.full((h, sq), -np.inf)
    g = h // hkv
    kk = np.repeat(k, g, axis=1)
    vv = np.repeat(v, g, axis=1)
    s = np.einsum("qhd,khd->hqk", q, kk) * scale
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    ok = visible(sq, sk, causal, window)[None]
    s = np.where(ok, s, -np.inf)
    any_row = ok.any(axis=-1)  # [1, sq]
    m = np.where(any_row, s.max(axis=-1), 0.0)
    p = np.where(ok, np.exp(s - m[..., None]), 0.0)
    l = p.sum(axis=-1)
    lse = np.where(any_row, m + np.log(np.where(any_row, l, 1.0)), -np.inf)
    o = np.einsum("hqk,khd->qhd", p / np.where(l > 0, l, 1.0)[..., None], vv)
    return o, lse


def attention_np(q, k, v, causal=False, window=(-1, -1), softcap=0.0, scale=None, cu_q=None, cu_k=None):
    """float64 reference of flashkit.attention on [b, s, h, d] arrays (any float dtype)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    b, sq, h, d = q.shape
    o = np.zeros_like(q)
    lse = np.full((b, h, sq), -np.inf)
    if cu_q is None:
        for i in range(b):
            o[i], lse[i] = _dense_np(q[i], k[i], v[i], causal, window, softcap, scale)
    else:
        for i in range(len(cu_q) - 1):
            a, e = cu_q[i], cu_q[i + 1]
            ka, ke = cu_k[i], cu_k[i + 1]
            o[0, a:e], lse[0, :, a:e] = _dense_np(q[0, a:e], k[0, ka:ke], v[0, ka:ke], causal, window, softcap, scale)
    return o, lse


def _dense_torch(torch, q, k, v, causal, window, softcap, scale):
    sq, h, d = q.shape
    sk, hkv, _ = k.shape
    if sq == 0 or sk == 0:
        return q.new_zeros((sq, h, d)) + 0 * v.sum() + 0 * k.sum()
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    g = h // hkv
    kk = k.repeat_interleave(g, dim=1)
    vv = v.repeat_interleave(g, dim=1)
    s = torch.einsum("qhd,khd->hqk", q, kk) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    ok = torch.from_numpy(visible(sq, sk, causal, window))[None]
    s = s.masked_fill(~ok, NEG)
    p = torch.softmax(s, dim=-1) * ok.any(dim=-1, keepdim=True)  # fully masked rows -> 0
    return torch.einsum("hqk,khd->qhd", p, vv)


def grads_torch(dout, q, k, v, causal=False, window=(-1, -1), softcap=0.0, scale=None, cu_q=None, cu_k=None):
    """(dq, dk, dv) in float64 by torch autograd of the same formula."""
    import torch

    t = [torch.tensor(np.asarray(x, dtype=np.float64), requires_grad=True) for x in (q, k, v)]
    tq, tk, tv = t
    do = torch.tensor(np.asarray(dout, dtype=np.float64))
    outs = []
    if cu_q is None:
        for i in range(tq.shape[0]):
            outs.append((_dense_torch(torch, tq[i], tk[i], tv[i], causal, window, softcap, scale) * do[i]).sum())
    else:
        for i in range(len(cu_q) - 1):
            a, e, ka, ke = cu_q[i], cu_q[i + 1], cu_k[i], cu_k[i + 1]
            o = _dense_torch(torch, tq[0, a:e], tk[0, ka:ke], tv[0, ka:ke], causal, window, softcap, scale)
            outs.append((o * do[0, a:e]).sum())
    torch.stack(outs).sum().backward()
    return tuple(x.grad.numpy() for x in t)


def rel_err(x, ref):
    x = np.asarray(x, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert x.shape == ref.shape, (x.shape, ref.shape)
    n = np.linalg.norm(ref)
    return np.linalg.norm(x - ref) / (n if n > 0 else 1.0)


def rand(rng, shape, dtype=np.float32, scale=1.0):
    """Random normal values bounded away from zero-only data (never all zeros)."""
    return (rng.standard_normal(shape) * scale).astype(dtype)
