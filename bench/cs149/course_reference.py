"""The CS149 problems' reference computations in PyTorch (the baselines flashkit is timed against), written from
the course's problem definitions (stanford-cs149/asst5-kernels, problems/*/reference.py): the same operations in
the same order and dtypes, so eager and torch.compile timings are those of the course references. Also the input
generators at the course shapes (same dtypes and distributions; not the course's random streams)."""

import math

import torch
import torch.nn.functional as F

SHAPES = {
    "histogram": dict(length=1048576, channels=512, bins=256),
    "swiglu": dict(batch=256, seq=64, k=2048, n=4096),
    "rk4": dict(grid=600, steps=10),
    "flashattention": dict(batch=4, heads=64, seq=8192, head_dim=128),
    "occupancy_decoder": dict(queries=250000, latents=1024, width=768, heads=12, q_in=3),
}


def histogram(data):
    array, num_bins = data
    out = torch.zeros(array.shape[1], num_bins, dtype=torch.int32, device=array.device)
    for c in range(array.shape[1]):
        out[c] = torch.bincount(array[:, c], minlength=num_bins)[:num_bins]
    return out


def swiglu(data):
    x, w, v, b, c, beta = data
    gate = x @ w + b
    return gate * torch.sigmoid(beta * gate) * (x @ v + c)


_C = (-205.0 / 72.0, 8.0 / 5.0, -1.0 / 5.0, 8.0 / 315.0, -1.0 / 560.0)


def _second_difference(f, axis, inv_h2):
    r = 4
    inner = slice(r, -r)

    def shifted(d):
        idx = [inner, inner, inner]
        idx[axis] = slice(r + d, f.shape[axis] - r + d)
        return f[tuple(idx)]

    acc = _C[0] * f[inner, inner, inner]
    for d in range(1, 5):
        acc = acc + _C[d] * (shifted(d) + shifted(-d))
    return acc * inv_h2


def rk4(data):
    u0, alpha, hx, hy, hz, n_steps = data
    inv = [1.0 / (h * h) for h in (hx, hy, hz)]
    dt = 0.05 / (alpha * (inv[0] + inv[1] + inv[2]))
    inner = (slice(4, -4),) * 3

    def k_of(f):
        return alpha * (_second_difference(f, 2, inv[0]) + _second_difference(f, 1, inv[1]) +
                        _second_difference(f, 0, inv[2]))

    u = u0.clone()
    stage = torch.empty_like(u)
    nxt = torch.empty_like(u)
    for _ in range(n_steps):
        uc = u[inner]
        k1 = k_of(u)
        stage.copy_(u); stage[inner] = uc + 0.5 * dt * k1
        k2 = k_of(stage)
        stage.copy_(u); stage[inner] = uc + 0.5 * dt * k2
        k3 = k_of(stage)
        stage.copy_(u); stage[inner] = uc + dt * k3
        k4 = k_of(stage)
        nxt.copy_(u); nxt[inner] = uc + (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        u, nxt = nxt, u
    return u


def attention(data):
    q, k, v = data
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def attention_sdpa(data):
    q, k, v = data
    return F.scaled_dot_product_attention(q, k, v)


class OccupancyDecoder(torch.nn.Module):
    """query MLP (Linear, SiLU, Linear) -> cross-attention (c_q, c_k, c_v, SDPA, c_proj) -> LayerNorm in f32
    without affine -> Linear to one output."""

    def __init__(self, w, width, heads):
        super().__init__()
        self.w, self.width, self.heads = w, width, heads

    def forward(self, queries, latents):
        w = self.w
        lin = lambda x, n: F.linear(x, w[n + "_weight"], w[n + "_bias"])  # noqa: E731
        q = lin(lin(F.silu(lin(queries, "query_in_in_layer")), "query_in_out_layer"), "attn_c_q")
        k, v = lin(latents, "attn_c_k"), lin(latents, "attn_c_v")
        b, nq, d = q.shape
        split = lambda t: t.view(b, t.shape[1], self.heads, -1).transpose(1, 2)  # noqa: E731
        y = F.scaled_dot_product_attention(split(q), split(k), split(v))
        x = lin(y.transpose(1, 2).contiguous().view(b, nq, d), "attn_c_proj")
        x = F.layer_norm(x.float(), (d,), eps=1e-6).type_as(x)
        return lin(x, "out_proj")


def make_input(problem, device="cuda", seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    s = SHAPES[problem]
    if problem == "histogram":
        return (torch.randint(0, s["bins"], (s["length"], s["channels"]), generator=g, device=device,
                              dtype=torch.uint8), s["bins"])
    if problem == "swiglu":
        r = lambda *shape: torch.randn(*shape, generator=g, device=device)  # noqa: E731
        return (r(s["batch"], s["seq"], s["k"]), r(s["k"], s["n"]), r(s["k"], s["n"]), r(s["n"]), r(s["n"]), 1.0)
    if problem == "rk4":
        r = lambda lo, span: torch.rand(1, generator=g, device=device) * span + lo  # noqa: E731
        alpha, hx, hy, hz = r(0.1, 4.9), r(0.5, 1.5), r(0.5, 1.5), r(0.5, 1.5)
        n = s["grid"]
        return (torch.randn(n, n, n, generator=g, device=device), alpha, hx, hy, hz, s["steps"])
    if problem == "flashattention":
        shape = (s["batch"], s["heads"], s["seq"], s["head_dim"])
        return tuple(torch.randn(*shape, generator=g, device=device, dtype=torch.float16) for _ in range(3))
    if problem == "occupancy_decoder":
        width, q_in = s["width"], s["q_in"]
        queries = torch.randn(1, s["queries"], q_in, generator=g, device=device, dtype=torch.float16)
        latents = torch.randn(1, s["latents"], width, generator=g, device=device, dtype=torch.float16)
        w = {}
        for name, (n_out, n_in, std) in {
                "query_in_in_layer": (width, q_in, math.sqrt(1.0 / width)),
                "query_in_out_layer": (width, width, math.sqrt(1.0 / width)),
                "attn_c_q": (width, width, None), "attn_c_k": (width, width, None), "attn_c_v": (width, width, None),
                "attn_c_proj": (width, width, None), "out_proj": (1, width, None)}.items():
            if std is not None:  # the MLP's normal init with zero bias
                wt = torch.randn(n_out, n_in, generator=g, device=device) * std
                bs = torch.zeros(n_out, device=device)
            else:  # nn.Linear's default: uniform in +-1/sqrt(fan_in)
                bound = 1.0 / math.sqrt(n_in)
                wt = (torch.rand(n_out, n_in, generator=g, device=device) * 2 - 1) * bound
                bs = (torch.rand(n_out, generator=g, device=device) * 2 - 1) * bound
            w[name + "_weight"], w[name + "_bias"] = wt.half().contiguous(), bs.half().contiguous()
        return (queries, latents, w)
    raise KeyError(problem)
