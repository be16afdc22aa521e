"""flashkit.quantize_e4m3 / flashkit.attention_fp8 (the numpy front end of the fp8 forward: e4m3 bytes in numpy.uint8
arrays, o a BF16Array): the bytes against a numpy e4m3 decoder, the forward against float64 attention of the
dequantized inputs (P unrounded with a tolerance covering its e4m3 rounding; P rounded as the CPU path does), GQA,
causal, odd lengths, strided inputs, the errors."""

import numpy as np
import pytest

import flashkit
from _fp8_reference import attention_f64, decode, rel_rms

CASES = [  # name, batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim, causal, scale
    ("plain_odd", 2, 19, 23, 2, 2, 24, False, None),
    ("causal_gqa", 1, 13, 31, 4, 2, 40, True, None),
    ("causal_sq_gt_sk", 2, 9, 5, 2, 1, 16, True, 0.3),  # the first 4 queries see no key: o = 0, lse = -inf
]


def _inputs(c, seed):
    _, b, sq, sk, h, hkv, d, _, _ = c
    rng = np.random.default_rng(seed)
    q = 3.0 * rng.standard_normal((b, sq, h, d))  # the header's accuracy setting: sharper rows, smaller v
    k = rng.standard_normal((b, sk, hkv, d))
    v = 0.25 * rng.standard_normal((b, sk, hkv, d))
    return q.astype(np.float32), k.astype(np.float32), v.astype(np.float32)


@pytest.mark.parametrize("make", [lambda x: x, lambda x: x.astype(np.float16), flashkit.bf16], ids=["f32", "f16", "bf16"])
def test_quantize_bytes_and_descale(make):
    x = (5 * np.random.default_rng(1).standard_normal((2, 3, 5, 7, 3))).astype(np.float32)  # 5-d, odd sizes
    x[0, 0, 0, 0, 0] = 0.0
    src = make(x)
    xf = np.asarray(src.to_float32() if isinstance(src, flashkit.BF16Array) else src, dtype=np.float64)
    x8, descale = flashkit.quantize_e4m3(src)
    assert isinstance(descale, float) and x8.dtype == np.uint8 and x8.shape == x.shape
    assert descale == pytest.approx(np.abs(xf).max() / 448.0, rel=1e-6)
    back = decode(x8) * descale
    assert np.all(np.abs(back - xf) <= np.maximum(np.abs(xf) * 2.0 ** -4, descale * 2.0 ** -10) * (1 + 1e-6))
    assert back[0, 0, 0, 0, 0] == 0.0


def test_quantize_zeros_strided_and_errors():
    x8, descale = flashkit.quantize_e4m3(np.zeros((3, 4), dtype=np.float32))
    assert descale == 1.0 and not x8.any()
    x = np.random.default_rng(2).standard_normal((6, 10)).astype(np.float32)
    s8, sd = flashkit.quantize_e4m3(x[:, ::2])
    c8, cd = flashkit.quantize_e4m3(np.ascontiguousarray(x[:, ::2]))
    assert sd == cd and np.array_equal(s8, c8)
    with pytest.raises(TypeError, match=r"x: unsupported dtype float64.*astype\(numpy.float32\)"):
        flashkit.quantize_e4m3(np.ones(3))
    with pytest.raises(TypeError, match="x: expected a numpy.ndarray"):
        flashkit.quantize_e4m3([1.0, 2.0])
    bad = np.ones(5, dtype=np.float32)
    bad[3] = np.inf
    with pytest.raises(flashkit.InvalidArgumentError, match="src: contains a non-finite value at flat index 3"):
        flashkit.quantize_e4m3(bad)


@pytest.mark.parametrize("c", CASES, ids=[c[0] for c in CASES])
def test_forward_against_f64_of_the_dequantized_inputs(c):
    causal, scale = c[7], c[8]
    q, k, v = _inputs(c, seed=len(c[0]))
    (q8, qd), (k8, kd), (v8, vd) = (flashkit.quantize_e4m3(x) for x in (q, k, v))
    o, lse, cost = flashkit.attention_fp8(q8, k8, v8, qd, kd, vd, causal=causal, scale=scale, return_cost=True)
    assert isinstance(o, flashkit.BF16Array) and o.shape == q.shape
    assert lse.dtype == np.float32 and lse.shape == (q.shape[0], q.shape[2], q.shape[1])
    assert cost.flops > 0 and "fp8" in cost.kernel
    got = o.to_float32().astype(np.float64)
    qf, kf, vf = decode(q8) * qd, decode(k8) * kd, decode(v8) * vd
    exact_o, ref_lse = attention_f64(qf, kf, vf, causal, scale, round_p=False)
    rounded_o, _ = attention_f64(qf, kf, vf, causal, scale, round_p=True)
    assert rel_rms(got, exact_o) < 3e-2  # the e4m3 rounding of P: ~1% here (attention_fp8.hpp)
    assert rel_rms(got, rounded_o) < 4e-3  # P rounded as the CPU path does: bf16 output and f32 sums remain
    finite = np.isfinite(ref_lse)
    assert np.array_equal(np.isfinite(lse), finite)
    assert np.allclose(lse[finite], ref_lse[finite], rtol=1e-5, atol=1e-5)
    assert not np.any(got[~finite.transpose(0, 2, 1)])


def test_strided_operands_match_contiguous_ones():
    c = CASES[1]
    q, k, v = _inputs(c, seed=9)
    (q8, qd), (k8, kd), (v8, vd) = (flashkit.quantize_e4m3(x) for x in (q, k, v))
    o, lse = flashkit.attention_fp8(q8, k8, v8, qd, kd, vd, causal=True)
    kv8 = np.stack([k8, v8], axis=2)  # [B, Sk, 2, Hkv, D]: k and v strided views of one packed array
    q_t = np.asfortranarray(q8)  # head_dim not contiguous: copied by the wrapper
    o2, lse2 = flashkit.attention_fp8(q_t, kv8[:, :, 0], kv8[:, :, 1], np.float32(qd), kd, vd, causal=True)
    assert np.array_equal(o.bits, o2.bits) and np.array_equal(lse, lse2)


def test_errors_name_the_argument():
    c = CASES[1]
    q, k, v = _inputs(c, seed=4)
    (q8, qd), (k8, kd), (v8, vd) = (flashkit.quantize_e4m3(x) for x in (q, k, v))
    call = flashkit.attention_fp8
    with pytest.raises(TypeError, match=r"q: expected e4m3 bytes .*got float32; quantize it first.*quantize_e4m3\(q\)"):
        call(q, k8, v8, qd, kd, vd)
    with pytest.raises(TypeError, match=r"v: expected e4m3 bytes .*got bfloat16"):
        call(q8, k8, flashkit.bf16(v), qd, kd, vd)
    with pytest.raises(TypeError, match="k: expected e4m3 bytes .*got dtype int8"):
        call(q8, k8.view(np.int8), v8, qd, kd, vd)
    with pytest.raises(ValueError, match="k: expected a 4-d array"):
        call(q8, k8[0], v8, qd, kd, vd)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"k: expected shape \[1, 31, 2, 40\]"):
        call(q8, k8[:, :, :, :32], v8, qd, kd, vd)
    for name, bad in (("q_descale", 0.0), ("k_descale", -1.0), ("v_descale", float("nan")), ("v_descale", 1e300)):
        scales = {**dict(q_descale=qd, k_descale=kd, v_descale=vd), name: bad}
        with pytest.raises(flashkit.InvalidArgumentError, match=r"scales\.%s: must be finite and > 0" % name):
            call(q8, k8, v8, **scales)
    with pytest.raises(TypeError, match="q_descale: expected a finite number > 0"):
        call(q8, k8, v8, None, kd, vd)
    with pytest.raises(flashkit.InvalidArgumentError, match="impl: standard has no fp8 version"):
        call(q8, k8, v8, qd, kd, vd, impl="standard")
    with pytest.raises(ValueError, match="impl: expected one of"):
        call(q8, k8, v8, qd, kd, vd, impl="fast")
    with pytest.raises(ValueError, match="scale: expected a positive finite number"):
        call(q8, k8, v8, qd, kd, vd, scale=-1.0)
    bad_q = q8.copy()
    bad_q[0, 1, 2, 3] = 0x7F  # NaN in e4m3
    with pytest.raises(flashkit.InvalidArgumentError, match="q"):
        call(bad_q, k8, v8, qd, kd, vd)
    o, _ = call(bad_q, k8, v8, qd, kd, vd, check_finite=False)  # the caller's choice: no scan
    assert o.shape == q.shape
