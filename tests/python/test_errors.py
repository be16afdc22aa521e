"""Bad inputs: every one raises a clear exception naming the argument, and nothing crashes."""

import os

import numpy as np
import pytest

import flashkit
from flashkit import errors


def _qkv(b=1, sq=11, sk=13, h=4, hkv=2, d=16, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, sq, h, d)).astype(dtype)
    k = rng.standard_normal((b, sk, hkv, d)).astype(dtype)
    v = rng.standard_normal((b, sk, hkv, d)).astype(dtype)
    return q, k, v


def test_exception_hierarchy():
    assert issubclass(flashkit.InvalidArgumentError, flashkit.FlashkitError)
    assert issubclass(flashkit.InvalidArgumentError, ValueError)
    assert issubclass(flashkit.UnsupportedError, NotImplementedError)
    assert issubclass(flashkit.OutOfMemoryError, MemoryError)
    assert issubclass(flashkit.DeviceError, flashkit.FlashkitError)
    assert issubclass(flashkit.InternalError, flashkit.FlashkitError)
    expected = {1: flashkit.InvalidArgumentError, 2: flashkit.UnsupportedError, 3: flashkit.OutOfMemoryError,
                4: flashkit.DeviceError, 5: flashkit.InternalError}
    for status, cls in expected.items():
        e = errors.error_for_status(status, "msg %d" % status)
        assert type(e) is cls and e.status == status and e.message == "msg %d" % status and str(e) == e.message
    e = errors.error_for_status(42, "odd")
    assert isinstance(e, flashkit.InternalError) and "42" in str(e) and "odd" in str(e)


# --- wrong Python types and option values: rejected before the C call --------------------------------


@pytest.mark.parametrize("arg", ["q", "k", "v"])
def test_operand_not_an_array(arg):
    q, k, v = _qkv()
    ops = dict(q=q, k=k, v=v)
    ops[arg] = ops[arg].tolist()
    with pytest.raises(TypeError, match=r"^%s: expected a numpy.ndarray or flashkit.BF16Array.*got list" % arg):
        flashkit.attention(ops["q"], ops["k"], ops["v"])


def test_torch_tensor_rejected():
    torch = pytest.importorskip("torch")
    q, k, v = _qkv()
    with pytest.raises(TypeError, match=r"^q: expected a numpy.ndarray.*torch.*numpy\(\)"):
        flashkit.attention(torch.from_numpy(q), k, v)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint16, np.complex64, np.bool_])
def test_unsupported_dtype(dtype):
    q, k, v = _qkv()
    with pytest.raises(TypeError, match=r"^q: unsupported dtype .*expected float32, float16"):
        flashkit.attention(q.astype(dtype), k, v)


def test_wrong_ndim():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"^q: expected a 4-d array \[batch, seqlen_q, heads, head_dim\], got shape \(11, 4, 16\)"):
        flashkit.attention(q[0], k, v)
    with pytest.raises(ValueError, match=r"^k: expected a 4-d array \[batch, seqlen_k, kv_heads, head_dim\]"):
        flashkit.attention(q, k[None], v)


@pytest.mark.parametrize("window, exc", [
    (5, TypeError), ((1, 2, 3), TypeError), ((1.5, 2), TypeError), ((1, "2"), TypeError), ((True, 1), TypeError),
    ("ab", TypeError), ((-2, 0), ValueError), ((0, -5), ValueError),
])
def test_bad_window(window, exc):
    q, k, v = _qkv()
    with pytest.raises(exc, match=r"^window: "):
        flashkit.attention(q, k, v, window=window)


def test_window_accepts_list_and_numpy_ints():
    q, k, v = _qkv()
    a, _ = flashkit.attention(q, k, v, window=[np.int64(3), 2])
    b, _ = flashkit.attention(q, k, v, window=(3, 2))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("impl, exc", [("fast", ValueError), ("", ValueError), (3, TypeError), (None, TypeError)])
def test_bad_impl(impl, exc):
    q, k, v = _qkv()
    with pytest.raises(exc, match=r"^impl: expected one of 'auto', 'reference', 'standard', 'flash'"):
        flashkit.attention(q, k, v, impl=impl)


@pytest.mark.parametrize("softcap, exc", [("1.0", TypeError), ([1.0], TypeError), (-1.0, ValueError),
                                          (float("nan"), ValueError), (float("inf"), ValueError), (1e300, ValueError)])
def test_bad_softcap(softcap, exc):
    q, k, v = _qkv()
    with pytest.raises(exc, match=r"^softcap: expected a finite number >= 0"):
        flashkit.attention(q, k, v, softcap=softcap)


@pytest.mark.parametrize("scale, exc", [("0.1", TypeError), (0.0, ValueError), (-0.5, ValueError),
                                        (float("nan"), ValueError), (1e-60, ValueError), (True, TypeError)])
def test_bad_scale(scale, exc):
    q, k, v = _qkv()
    with pytest.raises(exc, match=r"^scale: expected a positive finite number"):
        flashkit.attention(q, k, v, scale=scale)


@pytest.mark.parametrize("name", ["causal", "check_finite", "return_cost"])
def test_bad_flags(name):
    q, k, v = _qkv()
    with pytest.raises(TypeError, match=r"^%s: expected a bool" % name):
        flashkit.attention(q, k, v, **{name: "yes"})


def test_bad_cu_seqlens():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 10, 2, 8)).astype(np.float32)
    cu = [0, 4, 10]
    with pytest.raises(ValueError, match=r"^cu_seqlens_q and cu_seqlens_k must both be given"):
        flashkit.attention(q, q, q, cu_seqlens_q=cu)
    with pytest.raises(ValueError, match=r"^cu_seqlens_q and cu_seqlens_k must both be given"):
        flashkit.attention(q, q, q, cu_seqlens_k=cu)
    with pytest.raises(TypeError, match=r"^cu_seqlens_q: expected integer offsets"):
        flashkit.attention(q, q, q, cu_seqlens_q=np.array(cu, np.float32), cu_seqlens_k=cu)
    with pytest.raises(TypeError, match=r"^cu_seqlens_k: expected an int32 numpy array"):
        flashkit.attention(q, q, q, cu_seqlens_q=cu, cu_seqlens_k="0,4,10")
    with pytest.raises(ValueError, match=r"^cu_seqlens_k: expected the same length as cu_seqlens_q"):
        flashkit.attention(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=[0, 10])
    with pytest.raises(ValueError, match=r"^cu_seqlens_q: expected at least 2 offsets"):
        flashkit.attention(q, q, q, cu_seqlens_q=[0], cu_seqlens_k=[0])
    with pytest.raises(ValueError, match=r"^cu_seqlens_q: expected at least 2 offsets"):
        flashkit.attention(q, q, q, cu_seqlens_q=[], cu_seqlens_k=[])
    with pytest.raises(ValueError, match=r"^cu_seqlens_q: expected a 1-d array"):
        flashkit.attention(q, q, q, cu_seqlens_q=np.array([[0, 10]], np.int32), cu_seqlens_k=cu[:2])
    with pytest.raises(ValueError, match=r"^cu_seqlens_q: offsets must fit in int32"):
        flashkit.attention(q, q, q, cu_seqlens_q=np.array([0, 2**40, 10]), cu_seqlens_k=cu)
    # Values are validated by the library.
    with pytest.raises(flashkit.InvalidArgumentError, match=r"cu_seqlens_q\[num_seqs\] must equal q's token count 10"):
        flashkit.attention(q, q, q, cu_seqlens_q=[0, 4, 9], cu_seqlens_k=cu)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"cu_seqlens_k must be non-decreasing"):
        flashkit.attention(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=[0, 11, 10])
    with pytest.raises(flashkit.InvalidArgumentError, match=r"cu_seqlens_q\[0\] must be 0"):
        flashkit.attention(q, q, q, cu_seqlens_q=[1, 4, 10], cu_seqlens_k=cu)
    q2 = np.concatenate([q, q])
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^q: with cu_seqlens the batch dimension must be 1"):
        flashkit.attention(q2, q2, q2, cu_seqlens_q=cu, cu_seqlens_k=cu)


# --- errors reported by the library -----------------------------------------------------------------


def test_shape_mismatch():
    q, k, v = _qkv()
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^v: expected shape \[1, 13, 2, 16\]"):
        flashkit.attention(q, k, v[:, :12])
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^k: expected shape"):
        flashkit.attention(q, np.concatenate([k, k], axis=3), v)
    q2, k2, v2 = _qkv(b=2)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^k: expected shape \[2,"):
        flashkit.attention(q2, k2[:1], v2)


def test_heads_not_divisible():
    q, k, v = _qkv(h=6, hkv=4)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^k: kv_heads \(4\) must be at least 1 and divide q's heads \(6\)"):
        flashkit.attention(q, k, v)


def test_head_dim_12():
    q, k, v = _qkv(d=12)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^q: head_dim must be a multiple of 8 in \[8, 256\], got 12"):
        flashkit.attention(q, k, v)


def test_batch_0():
    q, k, v = _qkv(b=0)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^q: batch must be at least 1, got 0"):
        flashkit.attention(q, k, v)


def test_seqlen_0_without_cu_seqlens():
    q, k, v = _qkv(sk=0)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^seqlen must be at least 1"):
        flashkit.attention(q, k, v)


@pytest.mark.parametrize("arg", ["q", "k", "v"])
def test_nan_input(arg):
    ops = dict(zip("qkv", _qkv()))
    ops[arg][0, 3, 1, 5] = np.nan if arg != "v" else np.inf
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^%s: contains a non-finite value at \[0, 3, 1, 5\]" % arg):
        flashkit.attention(ops["q"], ops["k"], ops["v"])


def test_dtype_mismatch():
    q, k, v = _qkv()
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^k: dtype f16 does not match q's dtype f32"):
        flashkit.attention(q, k.astype(np.float16), v)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^v: dtype f32 does not match q's dtype bf16"):
        flashkit.attention(flashkit.bf16(q), flashkit.bf16(k), v)


@pytest.mark.parametrize("impl", ["auto", "standard", "flash"])
def test_float64_needs_reference(impl):
    q, k, v = _qkv(dtype=np.float64)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^q: dtype f64 is accepted by impl=reference only"):
        flashkit.attention(q, k, v, impl=impl)


def test_backward_bad_inputs():
    q, k, v = _qkv()
    o, lse = flashkit.attention(q, k, v)
    do = np.ones_like(o)
    with pytest.raises(TypeError, match=r"^lse: expected dtype float32"):
        flashkit.attention_backward(do, q, k, v, o, lse.astype(np.float64))
    with pytest.raises(TypeError, match=r"^lse: expected the float32 numpy array"):
        flashkit.attention_backward(do, q, k, v, o, lse.tolist())
    with pytest.raises(ValueError, match=r"^lse: expected a 3-d array"):
        flashkit.attention_backward(do, q, k, v, o, lse[0])
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^lse: expected shape \[1, 4, 11\]"):
        flashkit.attention_backward(do, q, k, v, o, lse[:, :2])
    with pytest.raises(TypeError, match=r"^dout: expected a numpy.ndarray"):
        flashkit.attention_backward(None, q, k, v, o, lse)
    with pytest.raises(TypeError, match=r"^o: unsupported dtype int64"):
        flashkit.attention_backward(do, q, k, v, o.astype(np.int64), lse)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^dout: expected shape"):
        flashkit.attention_backward(do[:, :5], q, k, v, o, lse)
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^o: dtype f16 does not match"):
        flashkit.attention_backward(do, q, k, v, o.astype(np.float16), lse)
    bad = do.copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^dout: contains a non-finite value"):
        flashkit.attention_backward(bad, q, k, v, o, lse)
    with pytest.raises(TypeError, match=r"^window: "):
        flashkit.attention_backward(do, q, k, v, o, lse, window=(1,))
    # Non-contiguous lse is fine (copied).
    lse_t = np.ascontiguousarray(lse.transpose(0, 2, 1)).transpose(0, 2, 1)
    g1 = flashkit.attention_backward(do, q, k, v, o, lse_t)
    g2 = flashkit.attention_backward(do, q, k, v, o, lse)
    for a, b in zip(g1, g2):
        np.testing.assert_array_equal(a, b)


def test_set_num_threads_bad():
    n = flashkit.num_threads()
    with pytest.raises(flashkit.InvalidArgumentError, match=r"^num_threads: expected 1\.\.%d threads .*, got 0$" % flashkit.max_threads()):
        flashkit.set_num_threads(0)
    with pytest.raises(ValueError, match=r"^num_threads: expected 1\.\.%d" % flashkit.max_threads()):
        flashkit.set_num_threads(2**40)
    with pytest.raises(TypeError, match=r"^num_threads: expected an int"):
        flashkit.set_num_threads("2")
    with pytest.raises(TypeError, match=r"^num_threads: expected an int"):
        flashkit.set_num_threads(2.0)
    assert flashkit.num_threads() == n


def test_standard_refuses_huge_workspace_without_allocating(monkeypatch):
    s, h, d = 32768, 16, 64
    needed = 4.0 * s * s * h  # the f32 score matrix the standard implementation would materialize
    monkeypatch.delenv("FLASHKIT_MAX_WORKSPACE_BYTES", raising=False)  # the library reads it at call time
    limit = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 10 * 8
    if needed <= limit:  # a very large machine: impose a limit so the test still refuses
        monkeypatch.setenv("FLASHKIT_MAX_WORKSPACE_BYTES", str(16 << 30))
    q, k, v = (np.empty((1, s, h, d), dtype=np.float32) for _ in range(3))  # 134 MB each, never touched
    with pytest.raises(flashkit.OutOfMemoryError, match=r"^standard attention needs [0-9.]+ GB of workspace.*impl=flash") as ei:
        flashkit.attention(q, k, v, impl="standard", check_finite=False)
    assert isinstance(ei.value, MemoryError) and ei.value.status == 3
    # The library's last error is per call: a successful call afterwards clears it.
    flashkit.attention(*_qkv())
    from flashkit import _capi
    assert _capi.last_error() == ""
