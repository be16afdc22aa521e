"""flashkit.bf16 / BF16Array: rounding and the array surface."""

import numpy as np
import pytest

import flashkit


def _bits(values):
    return flashkit.bf16(np.array(values, dtype=np.float32)).bits


def test_exact_values_round_trip():
    x = np.array([0.0, -0.0, 1.0, -2.5, 3.140625, 65280.0, np.inf, -np.inf], dtype=np.float32)
    b = flashkit.bf16(x)
    assert b.bits.dtype == np.uint16 and b.shape == x.shape
    np.testing.assert_array_equal(b.to_float32(), x)
    assert b.bits[1] == 0x8000  # sign of -0 kept


def test_round_to_nearest_even():
    one = np.float32(1.0).view(np.uint32)
    # 1 + half an ulp of bf16 (ulp = 2^-7): a tie, rounds to the even neighbour 1.0
    tie_down = (one + np.uint32(0x8000)).view(np.float32)
    # 1 + 1 ulp + half an ulp: a tie, rounds up to the even 1 + 2 ulp
    tie_up = (one + np.uint32(0x18000)).view(np.float32)
    above_half = (one + np.uint32(0x8001)).view(np.float32)
    below_half = (one + np.uint32(0x7FFF)).view(np.float32)
    got = _bits([tie_down, tie_up, above_half, below_half])
    np.testing.assert_array_equal(got, [0x3F80, 0x3F82, 0x3F81, 0x3F80])


def test_overflow_nan_and_float64_single_rounding():
    big = np.float32(3.4e38)
    b = flashkit.bf16(np.array([big, -big, np.nan], dtype=np.float32))
    assert np.isposinf(b.to_float32()[0]) and np.isneginf(b.to_float32()[1]) and np.isnan(b.to_float32()[2])
    # 1 + 2^-8 + 2^-40 is just above a bf16 tie; rounding via float32 would lose the 2^-40 and round to
    # even (down); a single rounding goes up.
    x = np.array([1.0 + 2.0**-8 + 2.0**-40, -(1.0 + 2.0**-8 + 2.0**-40), 1.0 + 2.0**-8], dtype=np.float64)
    np.testing.assert_array_equal(flashkit.bf16(x).bits, [0x3F81, 0xBF81, 0x3F80])


def test_matches_torch_bfloat16():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal(10000).astype(np.float32) * 100
    expected = torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()
    np.testing.assert_array_equal(flashkit.bf16(x).to_float32(), expected)


def test_array_surface():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    b = flashkit.bf16(x)
    assert b.ndim == 3 and b.size == 24 and len(b) == 2
    v = b[:, 1]
    assert isinstance(v, flashkit.BF16Array) and v.shape == (2, 4)
    assert np.shares_memory(v.bits, b.bits)
    np.testing.assert_array_equal(np.asarray(v), x[:, 1])
    assert b.reshape(6, 4).shape == (6, 4)
    assert flashkit.bf16(b) is b
    assert "BF16Array" in repr(b) and "BF16Array" in repr(b[0, 0])
    c = b.copy()
    c.bits[0, 0, 0] = 0x3F80
    assert b.bits[0, 0, 0] == 0


def test_bad_inputs():
    with pytest.raises(TypeError, match="BF16Array"):
        flashkit.BF16Array(np.zeros(3, dtype=np.float32))
    with pytest.raises(TypeError, match="x: .*dtype"):
        flashkit.bf16(np.array(["a"]))
    with pytest.raises(TypeError, match="x: .*dtype"):
        flashkit.bf16(np.array([1 + 2j]))
