"""flashkit.cs149 on CPU tensors against the course problems' reference formulas, written here in torch, at small
shapes and with the course's tolerances (histogram exact, RK4 rtol = atol = 1e-6 against the f32 reference)."""

import math

import pytest
import torch

import flashkit.cs149 as cs149
from flashkit.errors import InvalidArgumentError


def ref_histogram(array, num_bins):
    out = torch.zeros(array.shape[1], num_bins, dtype=torch.int32)
    for c in range(array.shape[1]):
        out[c] = torch.bincount(array[:, c].long(), minlength=num_bins)[:num_bins].int()
    return out


def ref_swiglu(x, w, v, b, c, beta):
    gate = x.double() @ w.double() + b.double()
    return gate * torch.sigmoid(beta * gate) * (x.double() @ v.double() + c.double())


def ref_rk4(u0, alpha, hx, hy, hz, n_steps):
    """The course's scheme with its f32 tensor arithmetic, in the same order of operations."""
    cs = [-205.0 / 72.0, 8.0 / 5.0, -1.0 / 5.0, 8.0 / 315.0, -1.0 / 560.0]
    alpha, hx, hy, hz = (torch.tensor([s], dtype=torch.float32) for s in (alpha, hx, hy, hz))
    inv = [1.0 / (h * h) for h in (hx, hy, hz)]
    dt = 0.05 / (alpha * (inv[0] + inv[1] + inv[2]))
    r = 4
    i = slice(r, -r)

    def second(f, axis):
        def sh(d):
            idx = [i, i, i]
            n = f.shape[axis]
            idx[axis] = slice(r + d, n - r + d)
            return f[tuple(idx)]
        acc = cs[0] * f[i, i, i]
        for d in range(1, 5):
            acc = acc + cs[d] * (sh(d) + sh(-d))
        return acc

    def lap(f):
        return second(f, 2) * inv[0] + second(f, 1) * inv[1] + second(f, 0) * inv[2]

    u = u0.clone()
    for _ in range(n_steps):
        uc = u[i, i, i]
        k1 = alpha * lap(u)
        s = u.clone(); s[i, i, i] = uc + 0.5 * dt * k1
        k2 = alpha * lap(s)
        s = u.clone(); s[i, i, i] = uc + 0.5 * dt * k2
        k3 = alpha * lap(s)
        s = u.clone(); s[i, i, i] = uc + dt * k3
        k4 = alpha * lap(s)
        f = u.clone(); f[i, i, i] = uc + (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        u = f
    return u


def ref_attention(q, k, v):
    s = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(s, dim=-1) @ v.double()


def make_decoder_weights(q_in, width, gen):
    def lin(n_out, n_in, std):
        return (torch.randn(n_out, n_in, generator=gen) * std, torch.randn(n_out, generator=gen) * 0.1)
    names = {}
    for name, (n_out, n_in) in {"query_in_in_layer": (width, q_in), "query_in_out_layer": (width, width),
                                "attn_c_q": (width, width), "attn_c_k": (width, width), "attn_c_v": (width, width),
                                "attn_c_proj": (width, width), "out_proj": (1, width)}.items():
        wt, bs = lin(n_out, n_in, 1.0 / math.sqrt(n_in))
        names[name + "_weight"], names[name + "_bias"] = wt, bs
    return names


def ref_decoder(queries, latents, w, heads):
    d = {k: t.double() for k, t in w.items()}
    lin = lambda x, n: x @ d[n + "_weight"].T + d[n + "_bias"]  # noqa: E731
    h = lin(queries.double(), "query_in_in_layer")
    q = lin(lin(h * torch.sigmoid(h), "query_in_out_layer"), "attn_c_q")
    k, v = lin(latents.double(), "attn_c_k"), lin(latents.double(), "attn_c_v")
    b, nq, width = q.shape
    split = lambda t: t.view(b, t.shape[1], heads, -1).transpose(1, 2)  # noqa: E731
    y = ref_attention(split(q), split(k), split(v)).transpose(1, 2).reshape(b, nq, width)
    x = lin(y, "attn_c_proj")
    x = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-6)
    return lin(x, "out_proj")


@pytest.mark.parametrize("length,channels,bins", [(1000, 64, 256), (333, 37, 256), (257, 48, 100)])
def test_histogram_exact(length, channels, bins):
    gen = torch.Generator().manual_seed(length)
    array = torch.randint(0, 256 if bins < 256 else bins, (length, channels), generator=gen, dtype=torch.uint8)
    assert torch.equal(cs149.histogram((array, bins)), ref_histogram(array, bins))


def test_swiglu_f32_accurate():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(3, 7, 53, generator=gen)
    w, v = torch.randn(53, 29, generator=gen), torch.randn(53, 29, generator=gen)
    b, c = torch.randn(29, generator=gen), torch.randn(29, generator=gen)
    out = cs149.swiglu((x, w, v, b, c, 1.0))
    assert out.shape == (3, 7, 29) and out.dtype == torch.float32
    want = ref_swiglu(x, w, v, b, c, 1.0)
    assert torch.allclose(out.double(), want, rtol=1e-5, atol=1e-4)
    # The kernel choice only matters on CUDA; every valid name is accepted on either device.
    for kernel in ("split_per_fragment",):
        assert torch.equal(cs149.swiglu((x, w, v, b, c, 1.0), kernel=kernel), out)


def test_rk4_course_tolerance():
    gen = torch.Generator().manual_seed(9)
    u0 = torch.randn(14, 12, 17, generator=gen)
    alpha = torch.rand(1, generator=gen) * 4.9 + 0.1
    hx, hy, hz = (torch.rand(1, generator=gen) * 1.5 + 0.5 for _ in range(3))
    out = cs149.rk4((u0, alpha, hx, hy, hz, 3))
    want = ref_rk4(u0, alpha.item(), hx.item(), hy.item(), hz.item(), 3)
    assert torch.allclose(out, want, rtol=1e-6, atol=1e-6), (out - want).abs().max()
    assert not torch.equal(out, u0)
    # The kernel choice only matters on CUDA; every valid name is accepted on either device.
    for kernel in ("l1_aligned",):
        assert torch.equal(cs149.rk4((u0, alpha, hx, hy, hz, 3), kernel=kernel), out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_flashattention_bhsd(dtype):
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 3, 37, 64, generator=gen).to(dtype) for _ in range(3))
    out = cs149.flashattention((q, k, v))
    assert out.shape == q.shape and out.dtype == dtype and out.is_contiguous()
    tol = 1e-2 if dtype == torch.float16 else 1e-5
    assert torch.allclose(out.double(), ref_attention(q, k, v), rtol=tol, atol=tol)


def test_occupancy_decoder():
    gen = torch.Generator().manual_seed(7)
    width, heads = 96, 12
    queries = torch.randn(1, 50, 3, generator=gen)
    latents = torch.randn(1, 33, width, generator=gen)
    w = make_decoder_weights(3, width, gen)
    out = cs149.occupancy_decoder((queries, latents, w), num_heads=heads)
    assert out.shape == (1, 50, 1)
    assert torch.allclose(out.double(), ref_decoder(queries, latents, w, heads), rtol=1e-4, atol=1e-4)
    # The steps the benchmark times one by one are the whole forward, in order.
    steps = cs149.occupancy_decoder_steps((queries, latents, w), num_heads=heads)
    assert [name for name, _ in steps] == ["fold", "embed", "q_proj", "kv_proj", "attention", "c_proj", "head"]
    state = {}
    for _, step in steps:
        step(state)
    assert torch.equal(state["out"], out)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 5e-3)])
def test_layernorm_head(dtype, tol):
    gen = torch.Generator().manual_seed(8)
    x = (torch.randn(4, 9, 768, generator=gen) * 2 + 0.5).to(dtype)
    w, b = (torch.randn(768, generator=gen) * 0.05).to(dtype), torch.randn(1, generator=gen).to(dtype)
    out = cs149.layernorm_head(x, w, b)
    xd = x.double()
    ln = (xd - xd.mean(-1, keepdim=True)) / torch.sqrt(xd.var(-1, unbiased=False, keepdim=True) + 1e-6)
    want = ln @ w.double() + b.double()
    assert out.shape == (4, 9) and out.dtype == dtype
    assert torch.allclose(out.double(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 3e-3)])
def test_query_embed(dtype, tol):
    gen = torch.Generator().manual_seed(12)
    q = torch.randn(2, 33, 3, generator=gen).to(dtype)
    w, b = (torch.randn(96, 3, generator=gen) * 0.5).to(dtype), (torch.randn(96, generator=gen) * 0.1).to(dtype)
    h = cs149.query_embed(q, w, b)
    x = q.double() @ w.double().T + b.double()
    assert h.shape == (2, 33, 96) and h.dtype == dtype
    assert torch.allclose(h.double(), x * torch.sigmoid(x), rtol=tol, atol=tol)


def test_bad_input_names_the_argument():
    with pytest.raises(TypeError, match="array"):
        cs149.histogram((torch.zeros(4, 4, dtype=torch.int32), 4))
    with pytest.raises(InvalidArgumentError, match="num_bins"):
        cs149.histogram((torch.zeros(4, 4, dtype=torch.uint8), 0))
    with pytest.raises(ValueError, match="last dimension"):
        cs149.swiglu((torch.ones(2, 3), torch.ones(4, 5), torch.ones(4, 5), torch.ones(5), torch.ones(5), 1.0))
    with pytest.raises(ValueError, match="kernel must be"):
        cs149.swiglu((torch.ones(2, 4), torch.ones(4, 5), torch.ones(4, 5), torch.ones(5), torch.ones(5), 1.0),
                     kernel="v1")
    with pytest.raises(ValueError, match="kernel must be"):
        cs149.rk4((torch.ones(9, 9, 9), 1.0, 1.0, 1.0, 1.0, 1), kernel="fast")
    for retired in ("l1", "shared", "l1_y4", "l1_tall", "pair"):  # v1-v3, v5, v6: lost on the H200
        with pytest.raises(ValueError, match="kernel must be .*retired"):
            cs149.rk4((torch.ones(9, 9, 9), 1.0, 1.0, 1.0, 1.0, 1), kernel=retired)
    with pytest.raises(ValueError, match="kernel must be .*retired"):  # v3, lost on the H200
        cs149.swiglu((torch.ones(2, 4), torch.ones(4, 5), torch.ones(4, 5), torch.ones(5), torch.ones(5), 1.0),
                     kernel="split_in_shared")
    with pytest.raises(InvalidArgumentError, match="alpha"):
        cs149.rk4((torch.ones(9, 9, 9), -1.0, 1.0, 1.0, 1.0, 1))
    with pytest.raises(TypeError, match="k must be"):
        cs149.flashattention((torch.ones(1, 1, 4, 8), torch.ones(1, 1, 4, 8, dtype=torch.float64),
                              torch.ones(1, 1, 4, 8)))
