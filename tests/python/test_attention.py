"""flashkit.attention / attention_backward against independent float64 references."""

import tracemalloc
from collections import namedtuple

import numpy as np
import pytest

import flashkit
from _reference import attention_np, grads_torch, rand, rel_err

IMPLS = ["reference", "standard", "flash"]

Case = namedtuple("Case", "name b sq sk h hkv d causal window softcap scale")
CASES = [
    Case("plain", 2, 37, 37, 4, 4, 40, False, (-1, -1), 0.0, None),
    Case("causal_sk_gt_sq_gqa", 1, 29, 53, 6, 2, 64, True, (-1, -1), 0.0, None),
    Case("causal_sq_gt_sk_masked_rows", 2, 53, 29, 4, 1, 32, True, (-1, -1), 0.0, None),
    Case("window", 1, 45, 45, 2, 2, 48, False, (7, 3), 0.0, None),
    Case("causal_window_left", 1, 40, 70, 3, 1, 16, True, (16, -1), 0.0, None),
    Case("softcap_scale", 2, 33, 41, 2, 1, 24, False, (-1, -1), 5.0, 0.6),
    Case("wide_head", 1, 17, 65, 2, 1, 128, False, (-1, 9), 0.0, None),
    Case("decode", 3, 1, 77, 4, 2, 8, True, (-1, -1), 0.0, None),
]
IDS = [c.name for c in CASES]


def _inputs(c, dtype=np.float32, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    q = rand(rng, (c.b, c.sq, c.h, c.d), dtype, scale)
    k = rand(rng, (c.b, c.sk, c.hkv, c.d), dtype, scale)
    v = rand(rng, (c.b, c.sk, c.hkv, c.d), dtype)
    return q, k, v


def _opts(c):
    return dict(causal=c.causal, window=c.window, softcap=c.softcap, scale=c.scale)


def _check_lse(lse, ref_lse, tol):
    assert lse.dtype == np.float32
    assert lse.shape == ref_lse.shape
    masked = np.isneginf(ref_lse)
    np.testing.assert_array_equal(np.isneginf(lse), masked)
    if (~masked).any():
        assert np.max(np.abs(lse[~masked] - ref_lse[~masked])) < tol


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("c", CASES, ids=IDS)
def test_forward_f32(c, impl):
    q, k, v = _inputs(c, scale=2.0 if c.softcap else 1.0)
    o, lse = flashkit.attention(q, k, v, impl=impl, **_opts(c))
    assert o.dtype == np.float32 and o.shape == q.shape
    ref_o, ref_lse = attention_np(q, k, v, **_opts(c))
    assert rel_err(o, ref_o) < 1e-5
    _check_lse(lse, ref_lse, 1e-4)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("c", [CASES[1], CASES[2], CASES[5]], ids=[CASES[1].name, CASES[2].name, CASES[5].name])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_forward_half(c, impl, dtype):
    q, k, v = _inputs(c)
    if dtype == "float16":
        q, k, v = (x.astype(np.float16) for x in (q, k, v))
        qf, kf, vf = q, k, v
    else:
        q, k, v = (flashkit.bf16(x) for x in (q, k, v))
        qf, kf, vf = (x.to_float32() for x in (q, k, v))
    o, lse = flashkit.attention(q, k, v, impl=impl, **_opts(c))
    ref_o, ref_lse = attention_np(qf, kf, vf, **_opts(c))
    if dtype == "float16":
        assert isinstance(o, np.ndarray) and o.dtype == np.float16
        of = o
    else:
        assert isinstance(o, flashkit.BF16Array) and o.shape == q.shape
        of = o.to_float32()
    assert rel_err(of, ref_o) < 2e-2
    _check_lse(lse, ref_lse, 2e-2)


def test_forward_f64_reference_only():
    c = CASES[1]
    q, k, v = _inputs(c, dtype=np.float64)
    o, lse = flashkit.attention(q, k, v, impl="reference", **_opts(c))
    assert o.dtype == np.float64
    ref_o, ref_lse = attention_np(q, k, v, **_opts(c))
    assert rel_err(o, ref_o) < 1e-12
    _check_lse(lse, ref_lse, 1e-5)


def test_matches_torch_functional_causal():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(5)
    b, s, h, d = 2, 43, 3, 32
    q, k, v = (rand(rng, (b, s, h, d)) for _ in range(3))
    tq, tk, tv = (torch.from_numpy(x.astype(np.float64)).permute(0, 2, 1, 3) for x in (q, k, v))  # [b, h, s, d]
    scores = tq @ tk.transpose(-1, -2) / np.sqrt(d)
    future = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)
    p = F.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    ref = (p @ tv).permute(0, 2, 1, 3).numpy()
    ref_lse = torch.logsumexp(scores.masked_fill(future, float("-inf")), dim=-1).numpy()
    for impl in IMPLS:
        o, lse = flashkit.attention(q, k, v, causal=True, impl=impl)
        assert rel_err(o, ref) < 1e-5, impl
        assert np.max(np.abs(lse - ref_lse)) < 1e-4, impl


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("c", [CASES[0], CASES[1], CASES[2], CASES[3], CASES[5]],
                         ids=[CASES[i].name for i in (0, 1, 2, 3, 5)])
def test_backward_f32(c, impl):
    pytest.importorskip("torch")
    q, k, v = _inputs(c, seed=1, scale=2.0 if c.softcap else 1.0)
    dout = rand(np.random.default_rng(2), q.shape)
    o, lse = flashkit.attention(q, k, v, impl=impl, **_opts(c))
    dq, dk, dv = flashkit.attention_backward(dout, q, k, v, o, lse, impl=impl, **_opts(c))
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    assert dq.dtype == dk.dtype == dv.dtype == np.float32
    rq, rk, rv = grads_torch(dout, q, k, v, **_opts(c))
    assert rel_err(dq, rq) < 1e-4
    assert rel_err(dk, rk) < 1e-4
    assert rel_err(dv, rv) < 1e-4


@pytest.mark.parametrize("impl", ["standard", "flash"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_backward_half(impl, dtype):
    pytest.importorskip("torch")
    c = CASES[1]
    q, k, v = _inputs(c, seed=3)
    dout = rand(np.random.default_rng(4), q.shape)
    conv = (lambda x: x.astype(np.float16)) if dtype == "float16" else flashkit.bf16
    back = (lambda x: x.astype(np.float32)) if dtype == "float16" else (lambda x: x.to_float32())
    q, k, v, dout = (conv(x) for x in (q, k, v, dout))
    o, lse = flashkit.attention(q, k, v, impl=impl, **_opts(c))
    grads = flashkit.attention_backward(dout, q, k, v, o, lse, impl=impl, **_opts(c))
    refs = grads_torch(back(dout), back(q), back(k), back(v), **_opts(c))
    for g, r in zip(grads, refs):
        assert type(g) is type(q)
        assert rel_err(back(g), r) < 5e-2


# Sequence lengths (q, k): (5, 7), (0, 3), (1, 1), (13, 0), (1, 9): an empty query sequence, a
# length-1 one, and queries with no keys at all (fully masked rows).
CU_Q = [0, 5, 5, 6, 19, 20]
CU_K = [0, 7, 10, 11, 11, 20]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("causal", [False, True])
def test_varlen(impl, causal):
    rng = np.random.default_rng(7)
    h, hkv, d = 4, 2, 16
    q = rand(rng, (1, CU_Q[-1], h, d))
    k = rand(rng, (1, CU_K[-1], hkv, d))
    v = rand(rng, (1, CU_K[-1], hkv, d))
    # cu_seqlens as a list for q and an int64 array for k: both are converted to int32.
    o, lse = flashkit.attention(q, k, v, causal=causal, impl=impl, cu_seqlens_q=CU_Q,
                                cu_seqlens_k=np.array(CU_K, dtype=np.int64))
    assert lse.shape == (1, h, CU_Q[-1])
    ref_o, ref_lse = attention_np(q, k, v, causal=causal, cu_q=CU_Q, cu_k=CU_K)
    assert rel_err(o, ref_o) < 1e-5
    _check_lse(lse, ref_lse, 1e-4)
    assert np.all(o[0, 6:19] == 0) and np.all(np.isneginf(lse[0, :, 6:19]))

    pytest.importorskip("torch")
    dout = rand(rng, q.shape)
    cq, ck = np.array(CU_Q, np.int32), np.array(CU_K, np.int32)
    dq, dk, dv = flashkit.attention_backward(dout, q, k, v, o, lse, causal=causal, impl=impl,
                                             cu_seqlens_q=cq, cu_seqlens_k=ck)
    rq, rk, rv = grads_torch(dout, q, k, v, causal=causal, cu_q=CU_Q, cu_k=CU_K)
    assert rel_err(dq, rq) < 1e-4 and rel_err(dk, rk) < 1e-4 and rel_err(dv, rv) < 1e-4
    assert np.all(dk[0, 7:10] == 0) and np.all(dv[0, 7:10] == 0)  # keys of the empty query sequence


@pytest.mark.parametrize("impl", IMPLS)
def test_fully_masked_rows(impl):
    rng = np.random.default_rng(8)
    q = rand(rng, (1, 5, 2, 8))
    k = rand(rng, (1, 3, 2, 8))
    v = rand(rng, (1, 3, 2, 8))
    # causal, bottom-right: off = 3 - 5 = -2, so queries 0 and 1 see no key.
    o, lse = flashkit.attention(q, k, v, causal=True, impl=impl)
    assert np.all(o[0, :2] == 0)
    assert np.all(np.isneginf(lse[0, :, :2]))
    assert np.all(np.isfinite(lse[0, :, 2:])) and np.all(o[0, 2:] != 0)
    dq, dk, dv = flashkit.attention_backward(np.ones_like(o), q, k, v, o, lse, causal=True, impl=impl)
    assert np.all(dq[0, :2] == 0)
    assert np.all(np.isfinite(dq)) and np.all(np.isfinite(dk)) and np.all(np.isfinite(dv))


@pytest.mark.parametrize("impl", IMPLS)
def test_strided_inputs_without_copies(impl):
    rng = np.random.default_rng(9)
    b, s, h, d = 2, 64, 4, 32
    qkv = rand(rng, (b, s, 3, h, d))  # packed projection output
    q, k = qkv[:, :, 0], qkv[:, :, 1]
    v = np.ascontiguousarray(rand(rng, (b, h, s, d))).transpose(0, 2, 1, 3)  # [b, h, s, d] storage
    assert not q.flags.c_contiguous and not v.flags.c_contiguous
    ref_o, ref_lse = attention_np(q, k, v, causal=True)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        o, lse = flashkit.attention(q, k, v, causal=True, impl=impl)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    # Only o and lse are allocated by the wrapper; copying q, k or v would add q.nbytes each.
    assert peak < o.nbytes + lse.nbytes + q.nbytes // 2
    assert rel_err(o, ref_o) < 1e-5
    _check_lse(lse, ref_lse, 1e-4)
    dout = rand(rng, (b, s, h, d))
    dq, dk, dv = flashkit.attention_backward(dout, q, k, v, o, lse, causal=True, impl=impl)
    qc, kc, vc = (np.ascontiguousarray(x) for x in (q, k, v))
    o2, lse2 = flashkit.attention(qc, kc, vc, causal=True, impl=impl)
    g2 = flashkit.attention_backward(dout, qc, kc, vc, o2, lse2, causal=True, impl=impl)
    for g, r in zip((dq, dk, dv), g2):
        assert rel_err(g, r) < 1e-6


def test_inputs_needing_a_copy():
    rng = np.random.default_rng(10)
    wide = rand(rng, (1, 21, 2, 32))
    q = wide[..., ::2]  # head_dim not contiguous: copied
    k = rand(rng, (1, 21, 2, 16))[:, ::-1]  # negative stride: copied
    v = rand(rng, (1, 21, 2, 16)).astype(">f4")  # non-native byte order: converted
    o, lse = flashkit.attention(q, k, v)
    ref_o, _ = attention_np(q, k, v)
    assert rel_err(o, ref_o) < 1e-5
    # bf16 views work the same way
    qb = flashkit.bf16(wide)[..., ::2]
    ob, _ = flashkit.attention(qb, flashkit.bf16(k), flashkit.bf16(v))
    assert rel_err(ob.to_float32(), attention_np(qb.to_float32(), flashkit.bf16(k).to_float32(),
                                                 flashkit.bf16(v).to_float32())[0]) < 2e-2


def test_broadcast_and_size_one_dims():
    rng = np.random.default_rng(11)
    q = rand(rng, (1, 1, 1, 8))
    k = np.broadcast_to(rand(rng, (1, 1, 1, 8)), (1, 6, 1, 8))  # zero stride: copied
    v = rand(rng, (1, 6, 1, 8))
    o, lse = flashkit.attention(q, k, v)
    ref_o, ref_lse = attention_np(q, k, v)
    assert rel_err(o, ref_o) < 1e-5
    _check_lse(lse, ref_lse, 1e-5)


def test_return_cost():
    rng = np.random.default_rng(12)
    b, s, h, d = 1, 512, 2, 64
    q, k, v = (rand(rng, (b, s, h, d)) for _ in range(3))
    costs = {}
    for impl in ("standard", "flash"):
        o, lse, cost = flashkit.attention(q, k, v, impl=impl, return_cost=True)
        assert isinstance(cost, flashkit.Cost)
        assert cost.flops > 0 and cost.bytes_read > 0 and cost.bytes_written > 0
        assert cost.model and cost.kernel
        costs[impl] = cost
        grads = flashkit.attention_backward(np.ones_like(o), q, k, v, o, lse, impl=impl, return_cost=True)
        assert len(grads) == 4 and grads[3].flops > 0
    assert costs["standard"].total_bytes > costs["flash"].total_bytes
    assert costs["standard"].bytes_read > costs["flash"].bytes_read
    # Without return_cost the result is a pair.
    assert len(flashkit.attention(q[:, :8], k[:, :8], v[:, :8])) == 2


def test_scale_and_default_scale():
    rng = np.random.default_rng(13)
    q, k, v = (rand(rng, (1, 9, 1, 16)) for _ in range(3))
    o_default, _ = flashkit.attention(q, k, v)
    o_explicit, _ = flashkit.attention(q, k, v, scale=0.25)  # 1/sqrt(16)
    np.testing.assert_array_equal(o_default, o_explicit)
    o2, _ = flashkit.attention(q, k, v, scale=1.3)
    assert rel_err(o2, attention_np(q, k, v, scale=1.3)[0]) < 1e-5


def test_check_finite_off_skips_the_scan():
    rng = np.random.default_rng(14)
    q, k, v = (rand(rng, (2, 4, 1, 8)) for _ in range(3))
    q[1, 2, 0, 3] = np.nan
    o, _ = flashkit.attention(q, k, v, check_finite=False)  # garbage in, no error
    assert np.all(np.isfinite(o[0]))


def test_runtime_queries():
    v = flashkit.version()
    assert isinstance(v, str) and v.count(".") >= 1 and v == flashkit.__version__
    assert flashkit.cpu_isa() in ("scalar", "avx2", "avx512")
    n = flashkit.num_threads()
    assert n >= 1
    try:
        flashkit.set_num_threads(1)
        assert flashkit.num_threads() == 1
        rng = np.random.default_rng(15)
        q = rand(rng, (1, 70, 2, 16))
        o1, _ = flashkit.attention(q, q, q, causal=True)
    finally:
        flashkit.set_num_threads(n)
    o2, _ = flashkit.attention(q, q, q, causal=True)
    assert rel_err(o1, o2) < 1e-6
    assert isinstance(flashkit.cuda_device_count(), int) and flashkit.cuda_device_count() >= 0
    assert flashkit.library_path()
