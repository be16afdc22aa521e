"""flashkit.cs149: the five Stanford CS149 GPU-assignment problems on flashkit kernels (issue 19).

Each function takes exactly the tuple the course problem's ``generate_input`` returns and returns what its
``ref_kernel`` returns, so it can stand in as a course submission's ``custom_kernel``:

    import flashkit.cs149 as cs149
    out = cs149.histogram((array, num_bins))            # uint8 [length, channels] -> int32 [channels, num_bins]
    out = cs149.swiglu((x, W, V, b, c, beta))           # f32, fused 3xTF32 dual GEMM on CUDA
    u = cs149.rk4((u0, alpha, hx, hy, hz, n_steps))     # f32 8th-order heat equation, RK4
    o = cs149.flashattention((q, k, v))                 # [B, H, S, D] f16/bf16/f32 -> flashkit attention
    y = cs149.occupancy_decoder((queries, latents, weights))

CUDA tensors run the CUDA kernels on the current torch stream; CPU tensors run the CPU kernels. Bad input raises
ValueError/TypeError (flashkit.errors.InvalidArgumentError from the library) naming the argument.
"""

import ctypes

import torch
import torch.nn.functional as F

from . import _capi
from .torch import _OnStream

__all__ = ["histogram", "swiglu", "rk4", "flashattention", "occupancy_decoder", "occupancy_decoder_steps",
           "layernorm_head", "query_embed"]

_lib = _capi.lib
_P, _I64, _I32, _F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_float
_lib.fk_cs149_histogram.restype = _I32
_lib.fk_cs149_histogram.argtypes = [_P, _I64, _I64, _I64, _P, _I32]
_lib.fk_cs149_swiglu.restype = _I32
_lib.fk_cs149_swiglu.argtypes = [_P, _P, _P, _P, _P, _F32, _I64, _I64, _I64, _P, _I32, _I32]
_SWIGLU_KERNELS = {"auto": 0, "split_per_fragment": 2}
# Kernels retired after they lost on the H200 (docs/worklog/cs149-*.md): named in the error, never run.
_SWIGLU_RETIRED = ("v1", "split_in_shared")
_lib.fk_cs149_rk4.restype = _I32
_lib.fk_cs149_rk4.argtypes = [_P, _I64, _I64, _I64, _F32, _F32, _F32, _F32, _I64, _P, _I32, _I32]
_RK4_KERNELS = {"auto": 0, "l1_aligned": 4}
_RK4_RETIRED = ("l1", "shared", "l1_y4", "l1_tall", "pair")

_lib.fk_cs149_layernorm_head.restype = _I32
_lib.fk_cs149_layernorm_head.argtypes = [_P, _P, _P, _F32, _I64, _I64, _I32, _P, _I32]
_lib.fk_cs149_query_embed.restype = _I32
_lib.fk_cs149_query_embed.argtypes = [_P, _P, _P, _I64, _I64, _I64, _I32, _P, _I32]
_HEAD_DTYPES = {torch.float32: _capi.FK_F32, torch.float16: _capi.FK_F16}

_ATTN_DTYPES = {torch.float32: _capi.FK_F32, torch.bfloat16: _capi.FK_BF16, torch.float16: _capi.FK_F16}


def _tensor(name, t, dtype=None, dim=None, device=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError("%s must be a torch.Tensor, got %s" % (name, type(t).__name__))
    if dtype is not None and t.dtype != dtype:
        raise TypeError("%s must be %s, got %s" % (name, dtype, t.dtype))
    if dim is not None and t.dim() != dim:
        raise ValueError("%s must have %d dimensions, got shape %s" % (name, dim, tuple(t.shape)))
    if device is not None and t.device != device:
        raise ValueError("%s must be on %s like the first input, got %s" % (name, device, t.device))
    return t.contiguous()


def _code(t):
    return _capi.FK_CUDA if t.is_cuda else _capi.FK_CPU


def _scalar(name, v):
    if isinstance(v, torch.Tensor):
        if v.numel() != 1:
            raise ValueError("%s must hold one value, got shape %s" % (name, tuple(v.shape)))
        return float(v.item())
    return float(v)


def histogram(data):
    """(array uint8 [length, channels], num_bins) -> int32 [channels, num_bins] per-channel counts."""
    array, num_bins = data
    array = _tensor("array", array, torch.uint8, 2)
    num_bins = int(num_bins)
    length, channels = array.shape
    out = torch.empty((channels, num_bins), dtype=torch.int32, device=array.device)
    with _OnStream(array.device):
        _capi.check(_lib.fk_cs149_histogram(array.data_ptr(), length, channels, num_bins, out.data_ptr(),
                                            _code(array)))
    return out


def _check_kernel(kernel, kernels, retired):
    if kernel not in kernels:
        why = " (a retired kernel)" if kernel in retired else ""
        raise ValueError("kernel must be one of %s, got %r%s" % (sorted(kernels), kernel, why))


def swiglu(data, kernel="auto"):
    """(x [..., K], W [K, N], V [K, N], b [N], c [N], beta) f32 -> swish_beta(x W + b) * (x V + c), [..., N].
    kernel: "auto", or the CUDA kernel "split_per_fragment" (v2) by name."""
    _check_kernel(kernel, _SWIGLU_KERNELS, _SWIGLU_RETIRED)
    x, w, v, b, c, beta = data
    x = _tensor("x", x, torch.float32)
    dev = x.device
    w = _tensor("W", w, torch.float32, 2, dev)
    v = _tensor("V", v, torch.float32, 2, dev)
    b = _tensor("b", b, torch.float32, 1, dev)
    c = _tensor("c", c, torch.float32, 1, dev)
    k, n = w.shape
    if x.dim() < 1 or x.shape[-1] != k:
        raise ValueError("x's last dimension must be W's first (%d), got x of shape %s" % (k, tuple(x.shape)))
    if tuple(v.shape) != (k, n) or tuple(b.shape) != (n,) or tuple(c.shape) != (n,):
        raise ValueError("V must be [%d, %d] and b, c [%d], got %s, %s, %s"
                         % (k, n, n, tuple(v.shape), tuple(b.shape), tuple(c.shape)))
    m = x.numel() // k if k else 0
    out = torch.empty(tuple(x.shape[:-1]) + (n,), dtype=torch.float32, device=dev)
    with _OnStream(dev):
        _capi.check(_lib.fk_cs149_swiglu(x.data_ptr(), w.data_ptr(), v.data_ptr(), b.data_ptr(), c.data_ptr(),
                                         _scalar("beta", beta), m, k, n, out.data_ptr(), _code(x),
                                         _SWIGLU_KERNELS[kernel]))
    return out


def rk4(data, kernel="auto"):
    """(u0 f32 [Nz, Ny, Nx], alpha, hx, hy, hz, n_steps) -> the field after n_steps RK4 steps. kernel: "auto", or
    the CUDA stage kernel "l1_aligned" (v4: x/y neighbours through L1, warps starting on 128-byte boundaries) by
    name."""
    _check_kernel(kernel, _RK4_KERNELS, _RK4_RETIRED)
    u0, alpha, hx, hy, hz, n_steps = data
    u0 = _tensor("u0", u0, torch.float32, 3)
    scalars = [alpha, hx, hy, hz]
    if all(isinstance(s, torch.Tensor) for s in scalars):  # one device-to-host copy for the four scalars
        for name, s in zip(("alpha", "hx", "hy", "hz"), scalars):
            if s.numel() != 1:
                raise ValueError("%s must hold one value, got shape %s" % (name, tuple(s.shape)))
        scalars = torch.cat([s.reshape(1).float() for s in scalars]).tolist()
    else:
        scalars = [_scalar(n, s) for n, s in zip(("alpha", "hx", "hy", "hz"), scalars)]
    out = torch.empty_like(u0)
    nz, ny, nx = u0.shape
    with _OnStream(u0.device):
        _capi.check(_lib.fk_cs149_rk4(u0.data_ptr(), nz, ny, nx, *scalars, int(n_steps), out.data_ptr(),
                                      _code(u0), _RK4_KERNELS[kernel]))
    return out


def _view(t):
    """fk_tensor over a [B, S, H, D] strided view (last dimension contiguous)."""
    dt = _ATTN_DTYPES.get(t.dtype)
    if dt is None:
        raise TypeError("attention tensors must be float16, bfloat16 or float32, got %s" % t.dtype)
    return _capi.make_tensor(t.data_ptr(), dt, tuple(t.shape), tuple(t.stride()), _code(t),
                             (t.device.index or 0) if t.is_cuda else 0)


def _attention_bshd(q, k, v, out):
    """flashkit attention (non-causal, scale 1/sqrt(D)) of [B, S, H, D] views, written into `out` (a view too)."""
    lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32, device=q.device)
    opts = _capi.make_options(check_finite=not q.is_cuda)
    views = [_view(t) for t in (q, k, v, out)] + [_capi.make_tensor(lse.data_ptr(), _capi.FK_F32, tuple(lse.shape),
                                                                       tuple(lse.stride()), _code(lse),
                                                                       (lse.device.index or 0) if lse.is_cuda else 0)]
    with _OnStream(q.device):
        _capi.check(_lib.fk_attention_forward(*[ctypes.byref(t) for t in views], ctypes.byref(opts), None))
    return out


def flashattention(data):
    """(q, k, v) [B, H, S, D] -> softmax(q k^T / sqrt(D)) v, [B, H, S, D], on flashkit's attention (BHSD strides
    passed as they are: the transposed views are [B, S, H, D] with the last dimension contiguous)."""
    q, k, v = data
    q = _tensor("q", q, None, 4)
    k = _tensor("k", k, q.dtype, 4, q.device)
    v = _tensor("v", v, q.dtype, 4, q.device)
    out = torch.empty_like(q)
    _attention_bshd(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), out.transpose(1, 2))
    return out


def occupancy_decoder(data, num_heads=12):
    """(queries [B, Q, q_in], latents [B, L, width], weights) -> [B, Q, 1], the course's OneDOccupancyDecoder.

    The query MLP's input layer and SiLU are one flashkit kernel (`query_embed`); its output layer and the
    attention's query projection are folded into one matrix (no nonlinearity between them); the cross-attention
    runs on flashkit's attention with the projections in their natural [B, S, H, D] layout (no transposes);
    LayerNorm and the output Linear are one flashkit kernel (`layernorm_head`), statistics in f32 as the
    reference computes them."""
    state = {}
    for _, step in occupancy_decoder_steps(data, num_heads):
        step(state)
    return state["out"]


def occupancy_decoder_steps(data, num_heads=12):
    """occupancy_decoder as its named steps [(name, fn(state))], run in order on one dict; the benchmark times
    each step (bench/cs149/bench.py). Arguments are checked here, before any step runs."""
    queries, latents, wts = data
    queries = _tensor("queries", queries, None, 3)
    latents = _tensor("latents", latents, queries.dtype, 3, queries.device)
    dt = queries.dtype
    b, nq, _ = queries.shape
    _, nl, width = latents.shape
    if width % num_heads:
        raise ValueError("width (%d) must be a multiple of num_heads (%d)" % (width, num_heads))
    w = {name: _tensor(name, t, dt, None, queries.device) for name, t in wts.items()}
    hd = width // num_heads

    def fold(s):
        # c_q(out_layer(h)) = h (Wq Wo)^T + (Wq bo + bq). On CUDA the 768^3 product runs on tensor cores in the
        # weights' dtype with f32 accumulation (a few us; the f32 SIMT product would cost ~0.1 ms per call); the
        # CPU computes it in f32 (no half matmul there).
        acc_dt = dt if queries.is_cuda else torch.float32
        w_o, b_o = w["query_in_out_layer_weight"].to(acc_dt), w["query_in_out_layer_bias"].float()
        w_q, b_q = w["attn_c_q_weight"].to(acc_dt), w["attn_c_q_bias"].float()
        s["w_qo"] = (w_q @ w_o).to(dt)
        s["b_qo"] = (w_q.float() @ b_o + b_q).to(dt)

    def embed(s):
        s["h"] = query_embed(queries, w["query_in_in_layer_weight"], w["query_in_in_layer_bias"])

    def q_proj(s):
        s["q"] = F.linear(s.pop("h"), s["w_qo"], s["b_qo"])

    def kv_proj(s):
        s["k"] = F.linear(latents, w["attn_c_k_weight"], w["attn_c_k_bias"])
        s["v"] = F.linear(latents, w["attn_c_v_weight"], w["attn_c_v_bias"])

    def attention(s):
        q = s.pop("q")
        y = torch.empty_like(q)
        _attention_bshd(q.view(b, nq, num_heads, hd), s.pop("k").view(b, nl, num_heads, hd),
                        s.pop("v").view(b, nl, num_heads, hd), y.view(b, nq, num_heads, hd))
        s["y"] = y

    def c_proj(s):
        s["x"] = F.linear(s.pop("y"), w["attn_c_proj_weight"], w["attn_c_proj_bias"])

    def head(s):
        x, w_out, b_out = s.pop("x"), w["out_proj_weight"], w["out_proj_bias"]
        if dt not in _HEAD_DTYPES or w_out.shape[0] != 1:
            s["out"] = F.linear(F.layer_norm(x.float(), (width,), eps=1e-6).to(dt), w_out, b_out)
        else:
            s["out"] = layernorm_head(x, w_out.reshape(width), b_out.reshape(1), 1e-6).view(b, nq, 1)

    return [("fold", fold), ("embed", embed), ("q_proj", q_proj), ("kv_proj", kv_proj), ("attention", attention),
            ("c_proj", c_proj), ("head", head)]


def query_embed(q, w, b):
    """silu(F.linear(q, w, b)) for a narrow input (q [..., in_dim <= 16], w [width, in_dim], b [width]) as one
    flashkit kernel: the Linear's output is written once, already activated. f16/f32; other dtypes or wider
    inputs take the two torch ops."""
    q = _tensor("q", q)
    w = _tensor("w", w, q.dtype, 2, q.device)
    b = _tensor("b", b, q.dtype, 1, q.device)
    width, in_dim = w.shape
    if q.shape[-1] != in_dim or b.shape[0] != width:
        raise ValueError("q's last dimension must be w's second (%d) and b must be [%d], got q %s, b %s"
                         % (in_dim, width, tuple(q.shape), tuple(b.shape)))
    if q.dtype not in _HEAD_DTYPES or in_dim > 16:
        return F.silu(F.linear(q, w, b))
    h = torch.empty(tuple(q.shape[:-1]) + (width,), dtype=q.dtype, device=q.device)
    with _OnStream(q.device):
        _capi.check(_lib.fk_cs149_query_embed(q.data_ptr(), w.data_ptr(), b.data_ptr(), q.numel() // in_dim, in_dim,
                                              width, _HEAD_DTYPES[q.dtype], h.data_ptr(), _code(q)))
    return h


def layernorm_head(x, w, bias, eps=1e-6):
    """LayerNorm without affine over the last dimension of x, then the dot product with w plus bias[0], fused
    (flashkit's kernel: the normalised rows never reach memory); f32 statistics, values rounded to x's dtype as
    ``F.linear(F.layer_norm(x.float(), ...).type_as(x), w, bias)`` rounds. x [..., width] f16/f32 -> [...]."""
    x = _tensor("x", x)
    if x.dtype not in _HEAD_DTYPES:
        raise TypeError("x must be float16 or float32, got %s" % x.dtype)
    width = x.shape[-1]
    w = _tensor("w", w, x.dtype, 1, x.device)
    bias = _tensor("bias", bias, x.dtype, 1, x.device)
    if w.shape[0] != width or bias.shape[0] != 1:
        raise ValueError("w must be [%d] and bias [1], got %s and %s" % (width, tuple(w.shape), tuple(bias.shape)))
    out = torch.empty(tuple(x.shape[:-1]), dtype=x.dtype, device=x.device)
    with _OnStream(x.device):
        _capi.check(_lib.fk_cs149_layernorm_head(x.data_ptr(), w.data_ptr(), bias.data_ptr(), float(eps),
                                                 x.numel() // width, width, _HEAD_DTYPES[x.dtype], out.data_ptr(),
                                                 _code(x)))
    return out
