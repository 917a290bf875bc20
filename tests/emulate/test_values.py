"""Float helpers of the emulator (kpatch/emulate/values.py) against
independent results: denormal flushing against the magnitude test, fused
multiply-add against exact rational arithmetic rounded once."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from kpatch.emulate import values as V


@pytest.mark.parametrize("dtype,bits", [(np.float32, np.uint32), (np.float16, np.uint16), (np.float64, np.uint64)])
def test_flush_denormals_keeps_the_sign_of_zeroed_denormals(dtype, bits):
    rng = np.random.default_rng(1)
    width = np.dtype(dtype).itemsize * 8
    raw = rng.integers(0, 1 << min(width, 63), 4096, dtype=np.uint64).astype(bits)
    raw[:64] &= bits((1 << (np.finfo(dtype).nmant + 1)) - 1) | bits(1 << (width - 1))  # denormals, both signs
    x = raw.view(dtype)
    with np.errstate(invalid="ignore"):
        tiny = np.finfo(dtype).tiny
        want = np.where(np.abs(x) < tiny, np.copysign(np.zeros_like(x), x), x).astype(dtype)
    got = V.flush_denormals(x)
    assert got.dtype == x.dtype
    assert np.array_equal(got.view(bits), want.view(bits))


def _exact(a, b, c, dtype):
    """a*b+c rounded once to ``dtype`` (nearest even), from exact rationals."""
    out = []
    for x, y, z in zip(a.astype(float), b.astype(float), c.astype(float)):
        e = Fraction(x) * Fraction(y) + Fraction(z)
        r = np.array(float(e), np.float64)
        cand = r.astype(dtype)  # nearest to the float64 nearest: check both neighbours exactly
        best = min((cand, np.nextafter(cand, dtype(np.inf)), np.nextafter(cand, dtype(-np.inf))),
                   key=lambda v: (abs(Fraction(float(v)) - e), int(np.asarray(v).view(
                       {4: np.uint32, 2: np.uint16}[np.dtype(dtype).itemsize])) & 1))
        out.append(best)
    return np.array(out, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_fma_rounds_once(dtype):
    """Random finite operands, operands whose float64 sum is exactly
    half-way between two float32 values while the exact one is not (a plain
    float64 sum rounded again goes wrong there), and results in the denormal
    range."""
    rng = np.random.default_rng(2)
    n = 512
    a = rng.standard_normal(n).astype(dtype)
    b = rng.standard_normal(n).astype(dtype)
    c = rng.standard_normal(n).astype(dtype)
    # half-way cases (float32): c = 1 + an odd number of ulps, a*b = half an ulp less
    # 2^-70 (a = 2^-24 (1 + 2^-23), b = 1 - 2^-23): the exact sum is below the half-way
    # point, so it rounds down; the float64 sum rounds to the half-way point, and a
    # second rounding (to even) would round up.  Both signs.
    if dtype is np.float32:
        k = np.arange(64)
        a[:64] = np.float32(2.0 ** -24 * (1 + 2.0 ** -23)) * np.where(k % 2, 1, -1).astype(np.float32)
        b[:64] = np.float32(1 - 2.0 ** -23)
        c[:64] = ((1 + (2 * k + 1) * 2.0 ** -23) * np.where(k % 2, 1, -1)).astype(np.float32)
    # results below the normal range
    tiny = float(np.finfo(dtype).tiny)
    a[64:96] = dtype(tiny * 0.75)
    b[64:96] = dtype(1.25)
    c[64:96] = dtype(-tiny * 0.5)
    got = V.fma_via64(a, b, c, dtype)
    want = _exact(a, b, c, dtype)
    bits = {4: np.uint32, 2: np.uint16}[np.dtype(dtype).itemsize]
    assert np.array_equal(got.view(bits), want.view(bits))
