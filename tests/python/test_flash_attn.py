"""flashkit.flash_attn: flash-attn 2's call forms (positional and keyword) on CPU tensors against the float64
references of _reference.py, on every backend this torch can load (the compiled extension when
python/flashkit/csrc/build.py has built it, and the ctypes path), plus the refusals. Issue 22's two calls are
test_positional_order_of_flash_attn and test_varlen_max_seqlen_positions."""

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from flashkit import flash_attn as fa  # noqa: E402
from flashkit import _torch_ops  # noqa: E402
from _reference import attention_np, grads_torch, rand, rel_err  # noqa: E402

TOL = 2e-5


def _qkv(seed, b, sq, sk, h, hkv, d, grad=False):
    rng = np.random.default_rng(seed)
    arrays = [rand(rng, (b, sq, h, d)), rand(rng, (b, sk, hkv, d)), rand(rng, (b, sk, hkv, d))]
    return arrays, [torch.tensor(x, requires_grad=grad) for x in arrays]


def _check(o, ref, tol=TOL):
    assert rel_err(o.detach().double().numpy(), ref) < tol


def test_positional_order_of_flash_attn():
    # Issue 22: (q, k, v, dropout_p, softmax_scale, causal) raised TypeError.
    (q, k, v), (tq, tk, tv) = _qkv(1, 2, 7, 11, 4, 2, 16)
    ref, _ = attention_np(q, k, v, causal=True)
    _check(fa.flash_attn_func(tq, tk, tv, 0.0, None, True), ref)
    ref, _ = attention_np(q, k, v, causal=False, scale=0.2)
    _check(fa.flash_attn_func(tq, tk, tv, 0.0, 0.2, False), ref)


def test_keyword_form_window_softcap_gradients():
    (q, k, v), (tq, tk, tv) = _qkv(2, 2, 9, 13, 4, 1, 8, grad=True)
    o, lse, probs = fa.flash_attn_func(q=tq, k=tk, v=tv, dropout_p=0.0, softmax_scale=0.3, causal=True,
                                       window_size=(3, 1), softcap=5.0, alibi_slopes=None, deterministic=True,
                                       return_attn_probs=True)
    ref, ref_lse = attention_np(q, k, v, True, (3, 1), 5.0, 0.3)
    _check(o, ref)
    _check(lse, ref_lse)
    assert probs is None and lse.shape == (2, 4, 9) and lse.dtype == torch.float32
    do = rand(np.random.default_rng(3), q.shape)
    o.backward(torch.tensor(do))
    for got, want in zip((tq.grad, tk.grad, tv.grad), grads_torch(do, q, k, v, True, (3, 1), 5.0, 0.3)):
        _check(got, want, 5 * TOL)


def _varlen_inputs(seed, h=4, hkv=2, d=16):
    rng = np.random.default_rng(seed)
    lens_q, lens_k = [3, 1, 6], [5, 4, 6]
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q, k, v = rand(rng, (cu_q[-1], h, d)), rand(rng, (cu_k[-1], hkv, d)), rand(rng, (cu_k[-1], hkv, d))
    return q, k, v, cu_q, cu_k


def test_varlen_max_seqlen_positions():
    # Issue 22: (q, k, v, cu, cu, 32, 32) used to run as causal with scale 32; 32 and 32 are max_seqlen_q/k.
    q, k, v, cu_q, cu_k = _varlen_inputs(4)
    args = [torch.tensor(x) for x in (q, k, v, cu_q, cu_k)]
    ref, _ = attention_np(q[None], k[None], v[None], False, cu_q=cu_q, cu_k=cu_k)
    _check(fa.flash_attn_varlen_func(*args, 32, 32), ref[0])
    ref, ref_lse = attention_np(q[None], k[None], v[None], True, cu_q=cu_q, cu_k=cu_k)
    o, lse, _ = fa.flash_attn_varlen_func(*args, 6, 6, 0.0, None, True, return_attn_probs=True)
    _check(o, ref[0])
    _check(lse, ref_lse[0])
    assert lse.shape == (4, cu_q[-1])


def test_packed_forms_match_unpacked_with_gradients():
    (q, k, v), _ = _qkv(5, 2, 10, 10, 2, 2, 8)
    qkv = torch.tensor(np.stack([q, k, v], axis=2), requires_grad=True)
    o = fa.flash_attn_qkvpacked_func(qkv, 0.0, None, True)
    _check(o, attention_np(q, k, v, causal=True)[0])
    do = rand(np.random.default_rng(6), q.shape)
    o.backward(torch.tensor(do))
    want = grads_torch(do, q, k, v, True)
    for i in range(3):
        _check(qkv.grad[:, :, i], want[i], 5 * TOL)
    (q, k, v), _ = _qkv(7, 1, 5, 12, 4, 2, 8)
    kv = torch.tensor(np.stack([k, v], axis=2))
    _check(fa.flash_attn_kvpacked_func(torch.tensor(q), kv, causal=True), attention_np(q, k, v, causal=True)[0])


def test_varlen_packed_forms():
    q, k, v, cu_q, cu_k = _varlen_inputs(8, h=2, hkv=2)
    ref, _ = attention_np(q[None], k[None], v[None], True, cu_q=cu_q, cu_k=cu_k)
    kv = torch.tensor(np.stack([k, v], axis=1))
    _check(fa.flash_attn_varlen_kvpacked_func(torch.tensor(q), kv, torch.tensor(cu_q), torch.tensor(cu_k), 6, 6,
                                              causal=True), ref[0])
    rng = np.random.default_rng(12)
    qs, ks, vs = (rand(rng, (15, 2, 16)) for _ in range(3))  # one cu_seqlens for q and k
    cu = np.array([0, 4, 9, 15], dtype=np.int32)
    ref, _ = attention_np(qs[None], ks[None], vs[None], False, cu_q=cu, cu_k=cu)
    qkv = torch.tensor(np.stack([qs, ks, vs], axis=1))
    _check(fa.flash_attn_varlen_qkvpacked_func(qkv, torch.tensor(cu), 6), ref[0])


def _rope_np(x, cos, sin, pos, interleaved):
    half = cos.shape[1]
    c, s = cos[pos][:, :, None, :], sin[pos][:, :, None, :]
    x = x.astype(np.float64).copy()
    if interleaved:
        a, b = x[..., 0:2 * half:2].copy(), x[..., 1:2 * half:2].copy()
        x[..., 0:2 * half:2], x[..., 1:2 * half:2] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., :half].copy(), x[..., half:2 * half].copy()
        x[..., :half], x[..., half:2 * half] = a * c - b * s, a * s + b * c
    return x


@pytest.mark.parametrize("interleaved", [True, False])
def test_kvcache_append_rotary_batch_idx(interleaved):
    rng = np.random.default_rng(9)
    b, sq, h, hkv, d, cache_len, bc = 2, 2, 4, 2, 16, 12, 3
    k_cache = rand(rng, (bc, cache_len, hkv, d))
    v_cache = rand(rng, (bc, cache_len, hkv, d))
    q, k_new, v_new = rand(rng, (b, sq, h, d)), rand(rng, (b, sq, hkv, d)), rand(rng, (b, sq, hkv, d))
    angles = rng.uniform(0, 3, size=(16, 4))  # rotary_dim 8 of headdim 16
    cos, sin = np.cos(angles), np.sin(angles)
    seqlens, rows = [3, 7], [2, 0]
    tk_cache, tv_cache = torch.tensor(k_cache), torch.tensor(v_cache)
    out, lse = fa.flash_attn_with_kvcache(
        torch.tensor(q), tk_cache, tv_cache, torch.tensor(k_new), torch.tensor(v_new),
        rotary_cos=torch.tensor(cos, dtype=torch.float32), rotary_sin=torch.tensor(sin, dtype=torch.float32),
        cache_seqlens=torch.tensor(seqlens, dtype=torch.int32), cache_batch_idx=torch.tensor(rows, dtype=torch.int32),
        causal=True, rotary_interleaved=interleaved, return_softmax_lse=True)
    pos = np.array(seqlens)[:, None] + np.arange(sq)[None]
    k_rot, q_rot = _rope_np(k_new, cos, sin, pos, interleaved), _rope_np(q, cos, sin, pos, interleaved)
    for i, (n, r) in enumerate(zip(seqlens, rows)):
        want_k = np.concatenate([k_cache[r, :n], k_rot[i]])
        want_v = np.concatenate([v_cache[r, :n], v_new[i]])
        assert rel_err(tk_cache[r, :n + sq].numpy(), want_k) < TOL
        assert rel_err(tv_cache[r, :n + sq].numpy(), want_v) < TOL
        ref, ref_lse = attention_np(q_rot[i:i + 1], want_k[None], want_v[None], causal=True)
        _check(out[i:i + 1], ref)
        _check(lse[i:i + 1], ref_lse)
    untouched = [x for x in range(bc) if x not in rows][0]
    assert np.array_equal(tk_cache[untouched].numpy(), k_cache[untouched])


def test_kvcache_equal_lengths_positional_decode():
    rng = np.random.default_rng(10)
    q, kc, vc = rand(rng, (3, 1, 4, 8)), rand(rng, (3, 9, 1, 8)), rand(rng, (3, 9, 1, 8))
    tkc = torch.tensor(kc)
    out = fa.flash_attn_with_kvcache(torch.tensor(q), tkc, torch.tensor(vc), None, None, None, None, 6)
    _check(out, attention_np(q, kc[:, :6], vc[:, :6])[0])
    assert np.array_equal(tkc.numpy(), kc)


@pytest.mark.parametrize("causal", [True, False])
def test_kvcache_paged_block_table_matches_the_contiguous_cache(causal):
    # flash-attn's paged form: k_cache (num_blocks, page_block_size, nheads_k, headdim), block_table (batch,
    # max_blocks_per_seq); the same call on a contiguous copy of each sequence's pages is the reference.
    rng = np.random.default_rng(12)
    b, sq, h, hkv, d, page, max_blocks = 3, 2, 4, 2, 8, 4, 4
    num_blocks = b * max_blocks + 2
    k_pages, v_pages = rand(rng, (num_blocks, page, hkv, d)), rand(rng, (num_blocks, page, hkv, d))
    table = rng.permutation(num_blocks)[:b * max_blocks].reshape(b, max_blocks).astype(np.int32)
    seqlens = [5, 0, 13]
    q, k_new, v_new = rand(rng, (b, sq, h, d)), rand(rng, (b, sq, hkv, d)), rand(rng, (b, sq, hkv, d))
    tk, tv = torch.tensor(k_pages), torch.tensor(v_pages)
    out, lse = fa.flash_attn_with_kvcache(
        torch.tensor(q), tk, tv, torch.tensor(k_new), torch.tensor(v_new),
        cache_seqlens=torch.tensor(seqlens, dtype=torch.int32), block_table=torch.tensor(table), causal=causal,
        return_softmax_lse=True)
    for i, n in enumerate(seqlens):
        contiguous = lambda pages: pages[table[i]].reshape(max_blocks * page, hkv, d)  # noqa: E731
        want_k = np.concatenate([contiguous(k_pages)[:n], k_new[i]])
        want_v = np.concatenate([contiguous(v_pages)[:n], v_new[i]])
        assert rel_err(contiguous(tk.numpy())[:n + sq], want_k) < TOL  # the new rows went into their pages
        assert rel_err(contiguous(tv.numpy())[:n + sq], want_v) < TOL
        ref, ref_lse = attention_np(q[i:i + 1], want_k[None], want_v[None], causal=causal)
        _check(out[i:i + 1], ref)
        _check(lse[i:i + 1], ref_lse)
    unused = sorted(set(range(num_blocks)) - set(table.flatten().tolist()))
    assert np.array_equal(tk.numpy()[unused], k_pages[unused])


def _qkv_small():
    return _qkv(11, 1, 4, 4, 2, 2, 8)[1]


@pytest.mark.parametrize("call, exc, words", [
    (lambda q, k, v: fa.flash_attn_func(q, k, v, 0.1), ValueError, "dropout_p"),
    (lambda q, k, v: fa.flash_attn_func(q, k, v, True), ValueError, "dropout_p"),
    (lambda q, k, v: fa.flash_attn_func(q, k, v, alibi_slopes=torch.ones(2)), ValueError, "alibi_slopes"),
    (lambda q, k, v: fa.flash_attn_func(q, k, v, softmax_scale=0.0), ValueError, "softmax_scale"),
    (lambda q, k, v: fa.flash_attn_func(q, k, v, 0.0, True), TypeError, "softmax_scale"),
    (lambda q, k, v: fa.flash_attn_func(q, k, v, causal=1), TypeError, "causal"),
    (lambda q, k, v: fa.flash_attn_func(q, k, v, window_size=(-2, 0)), ValueError, "window_size"),
    (lambda q, k, v: fa.flash_attn_func(q, k, v, window_size=3), ValueError, "window_size"),
    (lambda q, k, v: fa.flash_attn_func(q, k, v, softcap=-1.0), ValueError, "softcap"),
    (lambda q, k, v: fa.flash_attn_func(q[0], k, v), ValueError, "q"),
    (lambda q, k, v: fa.flash_attn_func(q, k[..., :4], v), ValueError, "head"),
    (lambda q, k, v: fa.flash_attn_func(q, k, v, impl="fastest"), ValueError, "impl"),
    (lambda q, k, v: fa.flash_attn_func(q.double(), k.double(), v.double()), TypeError, "q: dtype"),
    (lambda q, k, v: fa.flash_attn_func(q, k, v.half()), TypeError, "v: expected q's dtype"),
    (lambda q, k, v: fa.flash_attn_varlen_func(q[0], k[0], v[0], torch.tensor([0, 4], dtype=torch.int32),
                                               torch.tensor([0, 4], dtype=torch.int32), True), TypeError,
     "max_seqlen_q"),
    (lambda q, k, v: fa.flash_attn_varlen_func(q[0], k[0], v[0], torch.tensor([0.0, 4.0]),
                                               torch.tensor([0, 4], dtype=torch.int32), 4, 4), ValueError,
     "cu_seqlens_q"),
    (lambda q, k, v: fa.flash_attn_varlen_func(q[0], k[0], v[0], torch.tensor([0, 4], dtype=torch.int32),
                                               torch.tensor([0, 4], dtype=torch.int32), 4, 4,
                                               block_table=torch.zeros(1, 1, dtype=torch.int32)),
     NotImplementedError, "block_table"),
    (lambda q, k, v: fa.flash_attn_with_kvcache(q, k, v, block_table=torch.zeros(1, 1, dtype=torch.int32),
                                                cache_batch_idx=torch.tensor([0])), ValueError, "cache_batch_idx"),
    (lambda q, k, v: fa.flash_attn_with_kvcache(q, k, v, block_table=torch.tensor([[3]], dtype=torch.int32)),
     ValueError, r"block_table: entry \[0, 0\] is 3"),
    (lambda q, k, v: fa.flash_attn_with_kvcache(q, k, v, block_table=torch.zeros(2, 1, dtype=torch.int32)),
     ValueError, "block_table: expected an int32 tensor"),
    (lambda q, k, v: fa.flash_attn_with_kvcache(q, k, v, k[:, :1], v[:, :1], cache_seqlens=4), ValueError,
     "cache_seqlens"),
    (lambda q, k, v: fa.flash_attn_with_kvcache(q, k, v, k[:, :1], None, cache_seqlens=1), ValueError, "k, v"),
    (lambda q, k, v: fa.flash_attn_with_kvcache(q, k, v, cache_batch_idx=torch.tensor([5])), ValueError,
     "cache_batch_idx"),
    (lambda q, k, v: fa.flash_attn_with_kvcache(q, k, v, k[:, :1], v[:, :1], torch.ones(8, 5), torch.ones(8, 5),
                                                cache_seqlens=1), ValueError, "rotary_cos"),
])
def test_refusals_name_the_argument(call, exc, words):
    with pytest.raises(exc, match=words):
        call(*_qkv_small())


def test_backend_loaded():
    # With the extension built for this torch, flashkit uses it (and not the ctypes path).
    import os
    built = os.path.isfile(os.path.join(_torch_ops.extension_dir(False), "flashkit_torch.so"))
    if os.environ.get("FLASHKIT_TORCH_EXT") != "0" and built:
        assert _torch_ops.BACKEND == "extension"
        assert hasattr(torch.ops.flashkit, "fwd")


def test_ctypes_backend_gives_the_same_results():
    # The same calls in a fresh interpreter with the extension switched off: both backends agree with the oracle.
    code = ("import sys; sys.path[:0] = %r; import test_flash_attn as t; from flashkit import _torch_ops;"
            "assert _torch_ops.BACKEND != 'extension', _torch_ops.BACKEND;"
            "t.test_positional_order_of_flash_attn(); t.test_varlen_max_seqlen_positions();"
            "t.test_keyword_form_window_softcap_gradients(); print('ok')" % (sys.path[:3],))
    import os
    env = dict(os.environ, FLASHKIT_TORCH_EXT="0")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       cwd=os.path.dirname(os.path.abspath(__file__)), timeout=60)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]


# Issue 20 (host time per call): flash_attn_func's eager fast path calls the extension's fwd_eager, and the
# operator's autograd kernel skips its node when no gradient is asked for. Both must be invisible: same numbers, same
# autograd, same errors, and modes and the profiler still see torch.ops.flashkit.fwd.
_EXT = pytest.mark.skipif(_torch_ops.BACKEND != "extension", reason="the compiled extension is not loaded")


@_EXT
def test_eager_entry_is_the_fast_path_and_matches_the_operator():
    assert _torch_ops.fwd_eager is not None
    (q, k, v), (tq, tk, tv) = _qkv(21, 2, 5, 9, 4, 2, 24)
    for causal in (False, True):
        ref, ref_lse = attention_np(q, k, v, causal=causal)
        out, lse = _torch_ops.fwd_eager(tq, tk, tv, causal)
        _check(out, ref)
        _check(lse, ref_lse)
        op_out, op_lse = torch.ops.flashkit.fwd.default(tq, tk, tv, None, None, 0.0, causal, -1, -1, 0.0, 0)
        assert torch.equal(out, op_out) and torch.equal(lse, op_lse)
        fast, fast_lse, _ = fa.flash_attn_func(tq, tk, tv, 0.0, None, causal, return_attn_probs=True)
        assert torch.equal(fast, op_out) and torch.equal(fast_lse, op_lse)


@_EXT
@pytest.mark.parametrize("grad_mode", ["no_grad", "inference_mode", "enable_grad"])
def test_fast_path_autograd_as_the_checked_path(grad_mode):
    (q, k, v), _ = _qkv(22, 1, 6, 7, 2, 1, 16)
    do = torch.tensor(rand(np.random.default_rng(5), q.shape))
    results = []
    for kwargs in ({}, {"impl": "flash"}):  # the fast path, and the checked path through torch.ops
        tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
        ctx = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode,
               "enable_grad": torch.enable_grad}[grad_mode]()
        with ctx:
            o = fa.flash_attn_func(tq, tk, tv, causal=True, **kwargs)
        assert o.requires_grad == (grad_mode == "enable_grad")
        assert (o.grad_fn is None) == (grad_mode != "enable_grad")
        if grad_mode == "enable_grad":
            o.backward(do)
            results.append((o.detach(), tq.grad, tk.grad, tv.grad))
        else:
            results.append((o,))
    for a, b in zip(*results):
        assert torch.equal(a, b)


@_EXT
def test_no_grad_skips_the_node_but_forward_ad_is_still_refused():
    # Without an autograd node under no_grad, a forward-mode dual input must still be refused (the C++ Function API
    # has no jvp), not silently dropped.
    import torch.autograd.forward_ad as fwad
    _, (tq, tk, tv) = _qkv(23, 1, 2, 3, 2, 2, 8)
    with torch.no_grad(), fwad.dual_level():
        qd = fwad.make_dual(tq, torch.ones_like(tq))
        with pytest.raises(RuntimeError, match="jvp"):
            fa.flash_attn_func(qd, tk, tv)


@_EXT
def test_eager_entry_raises_what_the_operator_raises():
    q, k, v = _qkv_small()
    with pytest.raises(ValueError, match="flashkit: k: expected shape") as eager:
        _torch_ops.fwd_eager(q, k[..., :4], v, False)
    with pytest.raises(ValueError) as op:
        torch.ops.flashkit.fwd.default(q, k[..., :4], v, None, None, 0.0, False, -1, -1, 0.0, 0)
    assert str(eager.value).splitlines()[0] == str(op.value).splitlines()[0]
    assert "Exception raised from" not in str(eager.value)  # torch's translation: no C++ backtrace


@_EXT
@pytest.mark.parametrize("bad", [lambda q, k, v: (q[0], k, v), lambda q, k, v: (q, k, v[None]),
                                 lambda q, k, v: (q.double(), k.double(), v.double()),
                                 lambda q, k, v: (q, k.half(), v), lambda q, k, v: (q.int(), k.int(), v.int())])
def test_eager_entry_leaves_other_dims_and_dtypes_to_the_checked_path(bad):
    # None, so flash_attn_func's checked path raises its own error naming the argument (test_refusals_name_...).
    assert _torch_ops.fwd_eager(*bad(*_qkv_small()), True) is None


@_EXT
def test_modes_and_profiler_still_see_the_operator():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    q, k, v = _qkv_small()
    with Seen() as seen:
        fa.flash_attn_func(q, k, v)
    assert seen.ops == ["flashkit.fwd.default"]
    with torch.profiler.profile() as prof:
        fa.flash_attn_func(q, k, v)
    assert any(e.key == "flashkit::fwd" for e in prof.key_averages())


def test_an_extension_without_the_eager_entry_still_loads():
    # FLASHKIT_TORCH_EXT may name an extension built before fwd_eager existed (no Python module in it): the loader
    # gives None and flash_attn_func calls the operator.
    from flashkit import _capi
    assert _torch_ops._load_eager_entry(_capi.find_library_path()) is None
