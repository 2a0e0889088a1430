"""trtverify.util.halfcast: ONNX Runtime's Cast (real) against numpy's astype, on arrays big enough for the fast
path. The exhaustive check of all 2^32 patterns is bench/halfcast_exhaustive.py (5 minutes)."""

from __future__ import annotations

import numpy as np
import pytest

from trtverify.util import halfcast


def _patterns() -> np.ndarray:
    """Every sign and exponent with mantissas at float16's rounding points, and random bits."""
    rng = np.random.default_rng(0)
    exp = np.arange(256, dtype=np.uint32)
    mant = np.array([0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x7FFFFF], dtype=np.uint32)
    grid = ((exp[:, None] << 23) | mant[None, :]).reshape(-1)
    bits = np.concatenate([grid, grid | np.uint32(1 << 31), rng.integers(0, 1 << 32, 200_000, dtype=np.uint32)])
    return bits.view(np.float32)


def test_the_fast_path_is_on_and_agrees_with_numpy_both_ways():
    assert halfcast._session("float32", "float16") is not None  # this machine's ONNX Runtime passed the probe
    x = _patterns()
    assert x.size >= halfcast.MIN_SIZE
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    got = halfcast.to_float16(x)
    assert got.dtype == np.float16 and got.shape == x.shape
    assert halfcast.same(got, want)
    back = halfcast.to_float32(want)
    assert back.dtype == np.float32 and halfcast.same(back, want.astype(np.float32))


def test_shapes_strides_and_small_or_other_arrays():
    x = np.random.default_rng(1).standard_normal((64, 1024)).astype(np.float32)
    sliced = x[:, ::2]  # not contiguous
    assert np.array_equal(halfcast.to_float16(sliced), sliced.astype(np.float16))
    assert halfcast.to_float16(x).shape == (64, 1024)
    small = x[0, :10]
    assert np.array_equal(halfcast.to_float16(small), small.astype(np.float16))
    d = x.astype(np.float64)  # not float32: numpy's cast
    assert np.array_equal(halfcast.to_float16(d), d.astype(np.float16))


def test_a_probe_that_disagrees_turns_the_fast_path_off(monkeypatch):
    """Where ONNX Runtime rounded differently, numpy's cast is used (simulated: the probe's check fails)."""
    monkeypatch.setattr(halfcast, "_sessions", {})
    monkeypatch.setattr(halfcast, "same", lambda got, want: False)
    assert halfcast._session("float32", "float16") is None
    x = np.linspace(-70000, 70000, 100_000, dtype=np.float32)
    with np.errstate(over="ignore"):
        assert np.array_equal(halfcast.to_float16(x).view(np.uint16), x.astype(np.float16).view(np.uint16))


def test_same_ignores_nan_payloads_only():
    a = np.array([np.nan, 1.0, -0.0], np.float16)
    b = a.copy()
    b.view(np.uint16)[0] = 0x7E01  # another NaN payload
    assert halfcast.same(a, b)
    b[2] = 0.0  # the sign of zero counts
    assert not halfcast.same(a, b)
    b = a.copy()
    b.view(np.uint16)[0] = 0xFE00  # a NaN of the other sign
    assert not halfcast.same(a, b)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_empty(dtype):
    assert halfcast.to_float16(np.empty(0, dtype)).size == 0
