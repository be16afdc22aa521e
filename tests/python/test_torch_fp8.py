"""flashkit.torch.quantize_e4m3 / attention_forward_fp8 on CPU tensors (the ctypes wrappers of fk_quantize_e4m3 and
fk_attention_forward_fp8): the bytes against a numpy e4m3 decoder, the forward against float64 attention of the
dequantized inputs (P unrounded: a tolerance that covers the e4m3 rounding of P; P rounded as the CPU path does:
a tight one), GQA, causal, odd lengths, strided inputs, and the errors. Each test runs with uint8 storage (torch < 2.1,
as here) and, where torch has it, with torch.float8_e4m3fn. The CUDA side: tools/gpu/fp8.sh python."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import flashkit  # noqa: E402
from flashkit import torch as fkt  # noqa: E402
from _fp8_reference import attention_f64 as _attention_f64, decode, rel_rms as _rel_rms  # noqa: E402

HAS_FLOAT8 = hasattr(torch, "float8_e4m3fn")
STORAGES = ["uint8", pytest.param("float8", marks=pytest.mark.skipif(not HAS_FLOAT8, reason="torch < 2.1: no float8"))]


def _as_storage(x8, storage):
    """The quantizer's output as the test's input storage: raw bytes (uint8) or torch's float8 dtype."""
    return x8.view(torch.uint8) if storage == "uint8" else x8.view(torch.float8_e4m3fn)


def _decode(x8):
    return decode(x8.view(torch.uint8).numpy())


CASES = [  # name, batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim, causal, softmax_scale
    ("plain_odd", 2, 19, 23, 2, 2, 24, False, None),
    ("causal_gqa", 1, 13, 31, 4, 2, 40, True, None),
    ("causal_sq_gt_sk", 2, 9, 5, 2, 1, 16, True, 0.3),  # the first 4 queries see no key: o = 0, lse = -inf
    ("decode_mqa", 3, 1, 37, 4, 1, 8, True, None),
]


def _inputs(c, seed, dtype=torch.float32):
    _, b, sq, sk, h, hkv, d, _, _ = c
    g = torch.Generator().manual_seed(seed)
    q = 3.0 * torch.randn(b, sq, h, d, generator=g)  # the header's accuracy setting: sharper rows, smaller v
    k = torch.randn(b, sk, hkv, d, generator=g)
    v = 0.25 * torch.randn(b, sk, hkv, d, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"])
def test_quantize_bytes_and_descale(storage, dtype):
    x = (torch.randn(2, 3, 5, 7, 3, generator=torch.Generator().manual_seed(1)) * 5).to(dtype)  # 5-d, odd sizes
    x[0, 0, 0, 0, 0] = 0.0
    x8, descale = fkt.quantize_e4m3(x)
    assert isinstance(descale, float)
    assert x8.shape == x.shape and x8.dtype == fkt.E4M3_DTYPE and x8.is_contiguous()
    xf = x.double().numpy()
    assert descale == pytest.approx(np.abs(xf).max() / 448.0, rel=1e-6)
    back = _decode(_as_storage(x8, storage)) * descale
    # Nearest-even rounding to 3 mantissa bits: at most half a step (2^-4 relative, or 2^-10 * descale below 2^-6).
    assert np.all(np.abs(back - xf) <= np.maximum(np.abs(xf) * 2.0 ** -4, descale * 2.0 ** -10) * (1 + 1e-6))
    assert back[0, 0, 0, 0, 0] == 0.0 and np.abs(back).max() == pytest.approx(np.abs(xf).max(), rel=1e-6)


def test_quantize_zeros_strided_and_errors():
    x8, descale = fkt.quantize_e4m3(torch.zeros(3, 4))
    assert descale == 1.0 and not x8.view(torch.uint8).any()
    x = torch.randn(6, 10)
    s8, sd = fkt.quantize_e4m3(x[:, ::2])  # not contiguous: quantized as a copy
    c8, cd = fkt.quantize_e4m3(x[:, ::2].contiguous())
    assert sd == cd and torch.equal(s8.view(torch.uint8), c8.view(torch.uint8))
    with pytest.raises(TypeError, match="x: dtype must be float32, bfloat16 or float16"):
        fkt.quantize_e4m3(torch.ones(3, dtype=torch.int32))
    with pytest.raises(TypeError, match="x: expected a torch.Tensor"):
        fkt.quantize_e4m3(np.ones(3, dtype=np.float32))
    bad = torch.randn(5)
    bad[3] = float("nan")
    with pytest.raises(flashkit.InvalidArgumentError, match="src: contains a non-finite value at flat index 3"):
        fkt.quantize_e4m3(bad)


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("c", CASES, ids=[c[0] for c in CASES])
def test_forward_against_f64_of_the_dequantized_inputs(c, storage):
    causal, scale = c[7], c[8]
    q, k, v = _inputs(c, seed=len(c[0]))
    (q8, qd), (k8, kd), (v8, vd) = (fkt.quantize_e4m3(x) for x in (q, k, v))
    o, lse = fkt.attention_forward_fp8(_as_storage(q8, storage), _as_storage(k8, storage), _as_storage(v8, storage),
                                       qd, kd, vd, causal=causal, softmax_scale=scale)
    assert o.dtype == torch.bfloat16 and o.shape == q.shape
    assert lse.dtype == torch.float32 and lse.shape == (q.shape[0], q.shape[2], q.shape[1])
    qf, kf, vf = _decode(q8) * qd, _decode(k8) * kd, _decode(v8) * vd
    got, got_lse = o.double().numpy(), lse.double().numpy()
    exact_o, ref_lse = _attention_f64(qf, kf, vf, causal, scale, round_p=False)
    rounded_o, _ = _attention_f64(qf, kf, vf, causal, scale, round_p=True)
    # P unrounded: the e4m3 rounding of P moves o by ~1% relative RMS at these inputs (attention_fp8.hpp).
    assert _rel_rms(got, exact_o) < 3e-2
    # P rounded as the CPU path rounds it: what is left is the bf16 output and f32 sums.
    assert _rel_rms(got, rounded_o) < 4e-3
    finite = np.isfinite(ref_lse)
    assert np.array_equal(np.isfinite(got_lse), finite)
    assert np.allclose(got_lse[finite], ref_lse[finite], rtol=1e-5, atol=1e-5)
    assert not np.any(got[~finite.transpose(0, 2, 1)])  # rows with no visible key: o = 0
    ref, ref_lse2 = fkt.attention_forward_fp8(q8, k8, v8, qd, kd, vd, causal=causal, softmax_scale=scale,
                                              impl="reference")
    assert _rel_rms(ref.double().numpy(), rounded_o) < 4e-3  # the f64 oracle: only the bf16 rounding of o
    assert np.allclose(ref_lse2.double().numpy()[finite], ref_lse[finite], rtol=1e-5, atol=1e-5)


def test_strided_inputs_and_descales_as_tensors():
    c = CASES[1]
    q, k, v = _inputs(c, seed=5)
    (q8, qd), (k8, kd), (v8, vd) = (fkt.quantize_e4m3(x) for x in (q, k, v))
    o, lse = fkt.attention_forward_fp8(q8, k8, v8, qd, kd, vd, causal=True)
    # k and v as halves of one packed [B, Sk, 2, Hkv, D] tensor (strided, last dim contiguous), q with its head_dim
    # not contiguous (copied by the wrapper), the descales as 0-d tensors.
    kv8 = torch.stack([k8.view(torch.uint8), v8.view(torch.uint8)], dim=2)
    q_t = q8.view(torch.uint8).transpose(1, 3).contiguous().transpose(1, 3)
    o2, lse2 = fkt.attention_forward_fp8(q_t, kv8[:, :, 0], kv8[:, :, 1], torch.tensor(qd), torch.tensor(kd),
                                         torch.tensor(vd), causal=True)
    assert torch.equal(o, o2) and torch.equal(lse, lse2)


@pytest.mark.parametrize("storage", STORAGES)
def test_errors_name_the_argument(storage):
    c = CASES[1]
    q, k, v = _inputs(c, seed=3)
    (q8, qd), (k8, kd), (v8, vd) = (fkt.quantize_e4m3(x) for x in (q, k, v))
    q8, k8, v8 = (_as_storage(x, storage) for x in (q8, k8, v8))
    call = fkt.attention_forward_fp8
    with pytest.raises(TypeError, match=r"q: dtype must be e4m3 .*got torch.float32 .*quantize_e4m3\(q\)"):
        call(q, k8, v8, qd, kd, vd)
    with pytest.raises(TypeError, match=r"v: dtype must be e4m3 .*got torch.bfloat16 .*quantize_e4m3\(v\)"):
        call(q8, k8, v.bfloat16(), qd, kd, vd)
    with pytest.raises(TypeError, match="k: dtype must be e4m3"):
        call(q8, k8.view(torch.uint8).to(torch.int32), v8, qd, kd, vd)
    with pytest.raises(TypeError, match="k: expected a torch.Tensor"):
        call(q8, k8.numpy() if storage == "uint8" else None, v8, qd, kd, vd)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"k: expected shape \[1, 31, 2, 40\]"):
        call(q8, k8[:, :, :, :32], v8, qd, kd, vd)
    with pytest.raises(flashkit.InvalidArgumentError, match="kv_heads"):
        k3, v3 = (x.view(torch.uint8)[:, :, :1].repeat(1, 1, 3, 1) for x in (k8, v8))  # 3 kv heads do not divide 4
        call(q8, k3, v3, qd, kd, vd)
    for name, bad in (("q_descale", 0.0), ("k_descale", -1.0), ("v_descale", float("nan")), ("q_descale", 1e300)):
        scales = {**dict(q_descale=qd, k_descale=kd, v_descale=vd), name: bad}
        with pytest.raises(flashkit.InvalidArgumentError, match=r"scales\.%s: must be finite and > 0" % name):
            call(q8, k8, v8, **scales)
    with pytest.raises(TypeError, match="k_descale: expected a finite number > 0"):
        call(q8, k8, v8, qd, "0.1", vd)
    with pytest.raises(TypeError, match="v_descale: expected a finite number > 0"):
        call(q8, k8, v8, qd, kd, True)
    with pytest.raises(flashkit.InvalidArgumentError, match="impl: standard has no fp8 version"):
        call(q8, k8, v8, qd, kd, vd, impl="standard")
    with pytest.raises(ValueError, match="impl must be one of"):
        call(q8, k8, v8, qd, kd, vd, impl="fast")
    with pytest.raises(flashkit.InvalidArgumentError, match="scale"):
        call(q8, k8, v8, qd, kd, vd, softmax_scale=-0.5)
    bad_q = q8.view(torch.uint8).clone()
    bad_q[0, 1, 2, 3] = 0x7F  # NaN in e4m3
    with pytest.raises(flashkit.InvalidArgumentError, match="q"):
        call(bad_q, k8, v8, qd, kd, vd)
