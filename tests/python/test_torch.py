"""flashkit.torch (the autograd function over the C API) on CPU tensors, against the float64 references of
_reference.py: forward, lse, gradients through torch.autograd, varlen, the cached options, bad input. The CUDA
side of the same module is checked on the GPU machine by tools/gpu/torch_check.py."""

from collections import namedtuple

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import flashkit  # noqa: E402
from flashkit import torch as fkt  # noqa: E402
from _reference import attention_np, grads_torch, rand, rel_err  # noqa: E402

Case = namedtuple("Case", "name b sq sk h hkv d causal window softcap scale")
CASES = [
    Case("plain", 2, 19, 19, 2, 2, 24, False, (-1, -1), 0.0, None),
    Case("causal_gqa_sk_gt_sq", 1, 13, 31, 4, 2, 16, True, (-1, -1), 0.0, None),
    Case("window_softcap_scale", 2, 21, 25, 2, 1, 32, False, (5, 2), 4.0, 0.3),
    Case("decode", 3, 1, 40, 4, 1, 8, True, (-1, -1), 0.0, None),
]
TOL = 2e-5  # float32 kernels against float64 references


def _tensors(c, seed):
    rng = np.random.default_rng(seed)
    q = rand(rng, (c.b, c.sq, c.h, c.d))
    k = rand(rng, (c.b, c.sk, c.hkv, c.d))
    v = rand(rng, (c.b, c.sk, c.hkv, c.d))
    do = rand(rng, (c.b, c.sq, c.h, c.d))
    return q, k, v, do


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_forward_lse_and_gradients(c):
    q, k, v, do = _tensors(c, seed=len(c.name))
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    o, lse, _ = fkt.flash_attn_func(tq, tk, tv, causal=c.causal, softmax_scale=c.scale, window_size=c.window,
                                    softcap=c.softcap, return_attn_probs=True)
    ref_o, ref_lse = attention_np(q, k, v, c.causal, c.window, c.softcap, c.scale)
    assert o.shape == tq.shape and o.dtype == torch.float32
    assert rel_err(o.detach().numpy(), ref_o) < TOL
    assert rel_err(lse.numpy(), ref_lse) < TOL
    o.backward(torch.tensor(do))
    dq, dk, dv = grads_torch(do, q, k, v, c.causal, c.window, c.softcap, c.scale)
    for got, ref in ((tq.grad, dq), (tk.grad, dk), (tv.grad, dv)):
        assert rel_err(got.numpy(), ref) < 5 * TOL


def test_cached_tensor_structs_take_each_calls_data():
    # The fk_tensor structs are cached per (operand, dtype, device, shape, strides): calls on new tensors of the
    # same shapes must read and write those tensors (not the first call's), and q, k, v and o of one call, which
    # share their metadata here, must stay distinct structs.
    c = CASES[0]
    results = []
    for seed in (11, 12, 13):
        q, k, v, do = _tensors(c, seed=seed)
        tq, tk, tv = (torch.tensor(x) for x in (q, k, v))
        o, lse = fkt.attention_forward(tq, tk, tv, causal=True)
        ref_o, ref_lse = attention_np(q, k, v, True, (-1, -1), 0.0, None)
        assert rel_err(o.numpy(), ref_o) < TOL and rel_err(lse.numpy(), ref_lse) < TOL
        dq, dk, dv = fkt.attention_backward(torch.tensor(do), tq, tk, tv, o, lse, causal=True)
        rq, rk, rv = grads_torch(do, q, k, v, True, (-1, -1), 0.0, None)
        for got, ref in ((dq, rq), (dk, rk), (dv, rv)):
            assert rel_err(got.numpy(), ref) < 5 * TOL
        results.append((o, ref_o))
    for o, ref_o in results:  # earlier outputs untouched by later calls
        assert rel_err(o.numpy(), ref_o) < TOL


def test_cached_options_follow_the_arguments():
    # The options struct is cached per argument combination: flipping causal, the window or the scale between
    # calls on the same tensors must give each call its own result.
    c = CASES[0]
    q, k, v, _ = _tensors(c, seed=7)
    tq, tk, tv = (torch.tensor(x) for x in (q, k, v))
    for causal, window, scale in ((True, (-1, -1), None), (False, (-1, -1), None), (False, (3, 0), None),
                                  (True, (-1, -1), 0.5), (True, (-1, -1), None)):
        o, _ = fkt.attention_forward(tq, tk, tv, causal=causal, softmax_scale=scale, window_size=window)
        ref, _ = attention_np(q, k, v, causal, window, 0.0, scale)
        assert rel_err(o.numpy(), ref) < TOL, (causal, window, scale)


def test_varlen_matches_per_sequence_reference():
    rng = np.random.default_rng(3)
    lens_q, lens_k = [5, 0, 9], [7, 4, 9]
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    h, hkv, d = 4, 2, 16
    q = rand(rng, (int(cu_q[-1]), h, d))
    k = rand(rng, (int(cu_k[-1]), hkv, d))
    v = rand(rng, (int(cu_k[-1]), hkv, d))
    do = rand(rng, q.shape)
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    o = fkt.flash_attn_varlen_func(tq, tk, tv, torch.tensor(cu_q), torch.tensor(cu_k),
                                  int(max(lens_q)), int(max(lens_k)), causal=True)
    ref, _ = attention_np(q[None], k[None], v[None], True, cu_q=cu_q, cu_k=cu_k)
    assert rel_err(o.detach().numpy(), ref[0]) < TOL
    o.backward(torch.tensor(do))
    dq, dk, dv = grads_torch(do[None], q[None], k[None], v[None], True, cu_q=cu_q, cu_k=cu_k)
    for got, ref_g in ((tq.grad, dq[0]), (tk.grad, dk[0]), (tv.grad, dv[0])):
        assert rel_err(got.numpy(), ref_g) < 5 * TOL


def test_strided_inputs_and_cost():
    c = CASES[1]
    q, k, v, _ = _tensors(c, seed=11)
    # A non-contiguous last dimension is copied; other strides (a transposed view) pass through as they are.
    tq = torch.tensor(np.ascontiguousarray(q.transpose(0, 2, 1, 3))).transpose(1, 2)
    tk = torch.tensor(k)
    tv = torch.tensor(np.stack([v, v], axis=-1))[..., 0]  # last-dim stride 2
    assert not tq.is_contiguous() and tv.stride(-1) == 2
    cost = flashkit._capi.FkCost()
    o, _ = fkt.attention_forward(tq, tk, tv, causal=True, cost=cost)
    ref, _ = attention_np(q, k, v, True)
    assert rel_err(o.numpy(), ref) < TOL
    assert cost.flops > 0 and cost.bytes_read > 0 and cost.kernel


@pytest.mark.parametrize(
    "make, exc, words",
    [
        (lambda q, k, v: fkt.attention_forward(q.to(torch.int32), k, v), TypeError, "dtype"),
        (lambda q, k, v: fkt.attention_forward(q[None], k, v), ValueError, "4 dimensions"),
        (lambda q, k, v: fkt.attention_forward(q, k, v, impl="fastest"), ValueError, "impl"),
        (lambda q, k, v: fkt.attention_forward(q, k[..., :8], v), flashkit.InvalidArgumentError, "head"),
        (lambda q, k, v: fkt.attention_forward(q, k, v[:, :3]), flashkit.InvalidArgumentError, "v"),
    ],
    ids=["int_dtype", "five_dims", "bad_impl", "head_dim_mismatch", "kv_length_mismatch"],
)
def test_bad_input_is_a_clear_error(make, exc, words):
    c = CASES[0]
    q, k, v, _ = _tensors(c, seed=1)
    with pytest.raises(exc) as e:
        make(torch.tensor(q), torch.tensor(k), torch.tensor(v))
    assert words in str(e.value)


def test_a_tensor_scale_is_read_at_each_call():
    # Only plain Python scalars are cached; a 0-d tensor changed in place must not leave a stale options struct.
    c = CASES[0]
    q, k, v, _ = _tensors(c, seed=5)
    tq, tk, tv = (torch.tensor(x) for x in (q, k, v))
    scale = torch.tensor(0.5)
    for value in (0.5, 0.25):
        scale.fill_(value)
        o, _ = fkt.attention_forward(tq, tk, tv, softmax_scale=scale)
        ref, _ = attention_np(q, k, v, False, (-1, -1), 0.0, value)
        assert rel_err(o.numpy(), ref) < TOL, value
