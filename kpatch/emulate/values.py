"""Lane values: raw register bits <-> typed numpy arrays, and float helpers.

A 32-bit operand is a uint32 array over the lanes, a 64-bit one a uint64
array; a 16-bit operand is the low half of a uint32 (after op_sel/SDWA
selection).  Type codes: ``u32 i32 f32 u16 i16 f16 u64 i64 f64`` and
``b32``/``b64`` (untyped bits, same as u32/u64).
"""

from __future__ import annotations

import numpy as np

WIDTH = {"u32": 1, "i32": 1, "f32": 1, "b32": 1, "u16": 1, "i16": 1, "f16": 1,
         "u64": 2, "i64": 2, "f64": 2, "b64": 2, "u8": 1}
FLOAT = ("f16", "f32", "f64")
SIGN = {"f16": 0x8000, "f32": 0x80000000, "f64": 0x8000000000000000}
_M32 = np.uint32(0xFFFFFFFF)


def typed(bits: np.ndarray, t: str) -> np.ndarray:
    """The value of raw bits as type ``t``."""
    if t in ("u32", "b32"):
        return bits.astype(np.uint32, copy=False)
    if t == "i32":
        return bits.astype(np.uint32, copy=False).view(np.int32)
    if t == "f32":
        return bits.astype(np.uint32, copy=False).view(np.float32)
    if t == "u16":
        return (bits & 0xFFFF).astype(np.uint16)
    if t == "i16":
        return (bits & 0xFFFF).astype(np.uint16).view(np.int16)
    if t == "f16":
        return (bits & 0xFFFF).astype(np.uint16).view(np.float16)
    if t == "u8":
        return (bits & 0xFF).astype(np.uint8)
    if t in ("u64", "b64"):
        return bits.astype(np.uint64, copy=False)
    if t == "i64":
        return bits.astype(np.uint64, copy=False).view(np.int64)
    if t == "f64":
        return bits.astype(np.uint64, copy=False).view(np.float64)
    raise ValueError(t)


def raw(value: np.ndarray, t: str) -> np.ndarray:
    """Raw bits (uint32, or uint64 for 64-bit types) of a typed result.
    Integers wrap; 16-bit results are zero-extended to 32 bits."""
    if t == "f32":
        return np.asarray(value, np.float32).view(np.uint32)
    if t == "f16":
        return np.asarray(value, np.float16).view(np.uint16).astype(np.uint32)
    if t == "f64":
        return np.asarray(value, np.float64).view(np.uint64)
    if t in ("u16", "i16"):
        return (np.asarray(value).astype(np.int64) & 0xFFFF).astype(np.uint32)
    if np.asarray(value).dtype.kind == "f":
        raise TypeError(f"a float result for integer type {t} (an emulator bug)")
    if t in ("u64", "i64", "b64"):
        v = np.asarray(value)
        if v.dtype == np.uint64:
            return v
        return v.astype(np.int64).view(np.uint64) if v.dtype.kind in "iu" else v.astype(np.uint64)
    v = np.asarray(value)
    if v.dtype == np.uint32:
        return v
    if v.dtype == np.bool_:
        return v.astype(np.uint32)
    return (v.astype(np.int64) & 0xFFFFFFFF).astype(np.uint32)


_POP8 = np.array([bin(i).count("1") for i in range(256)], np.uint8)


def popcount(x: np.ndarray) -> np.ndarray:
    """Set bits of each uint32/uint64 value (int64 array)."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x).astype(np.int64)
    b = np.ascontiguousarray(x).view(np.uint8).reshape(len(x), -1)
    return _POP8[b].sum(axis=1, dtype=np.int64)


def split64(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v = v.astype(np.uint64, copy=False)
    return (v & np.uint64(0xFFFFFFFF)).astype(np.uint32), (v >> np.uint64(32)).astype(np.uint32)


def join64(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return lo.astype(np.uint64) | (hi.astype(np.uint64) << np.uint64(32))


#: Per float width in bytes: (bits dtype, magnitude mask, smallest normal's bits - 1, sign mask).
_FLOAT_FIELDS = {2: (np.uint16, np.uint16(0x7FFF), np.uint16(0x03FF), np.uint16(0x8000)),
                 4: (np.uint32, np.uint32(0x7FFFFFFF), np.uint32(0x007FFFFF), np.uint32(0x80000000)),
                 8: (np.uint64, np.uint64(0x7FFFFFFFFFFFFFFF), np.uint64(0x000FFFFFFFFFFFFF),
                     np.uint64(0x8000000000000000))}
_ONE = {2: np.uint16(1), 4: np.uint32(1), 8: np.uint64(1)}


def flush_denormals(x: np.ndarray) -> np.ndarray:
    """Denormal values replaced by zero of the same sign (the sign bit alone
    kept); ``x`` itself when no lane is denormal.  Denormal: magnitude bits
    m with 0 < m < the smallest normal's (m - 1 below it minus one, unsigned:
    0 wraps round)."""
    x = np.asarray(x)
    bt, mag, top, sm = _FLOAT_FIELDS[x.dtype.itemsize]
    bits = x.view(bt)
    den = ((bits & mag) - _ONE[x.dtype.itemsize]) < top
    if not np.count_nonzero(den):
        return x
    return np.where(den, bits & sm, bits).astype(bt).view(x.dtype)


def fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a*b+c rounded once to float32.  The product of two float32 values is
    exact in float64; the float64 sum is rounded to odd (so that the final
    rounding to float32 is the correct one): :func:`fma_via64`."""
    return fma_via64(a, b, c, np.float32)


def fma_f64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a*b+c rounded once to float64 (exactly, lane by lane with Python fractions
    where the product is not exact in float64)."""
    from fractions import Fraction
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    c = c.astype(np.float64)
    out = np.empty_like(a)
    for i in range(len(a)):
        x, y, z = float(a[i]), float(b[i]), float(c[i])
        if not (np.isfinite(x) and np.isfinite(y) and np.isfinite(z)):
            out[i] = x * y + z
            continue
        exact = Fraction(x) * Fraction(y) + Fraction(z)
        if exact == 0:
            out[i] = x * y + z  # sign of zero as IEEE gives it
        else:
            try:
                out[i] = float(exact)  # Fraction -> float rounds to nearest even
            except OverflowError:
                out[i] = np.inf if exact > 0 else -np.inf
    return out


def fma_f16(a, b, c):
    """a*b+c rounded once to float16 (exact in float64, then one rounding:
    products of halves are exact in float64 and the sum of a 22-bit product
    and a half fits in 53 bits when exponents are within range; round to odd
    covers the rest)."""
    return fma_via64(a, b, c, np.float16)


#: Per float width in bytes (float32, float16): the float64 mantissa bits below
#: that type's, the pattern of those bits half-way between two of its values, and
#: its smallest normal magnitude.
_ROUNDING = {w: (np.uint64((1 << (52 - np.finfo(t).nmant)) - 1), np.uint64(1 << (51 - np.finfo(t).nmant)),
                 np.float64(np.finfo(t).tiny)) for w, t in ((4, np.float32), (2, np.float16))}


def fma_via64(a, b, c, dtype):
    """a*b+c in float64 rounded to odd, then rounded once to ``dtype``
    (float32 or float16: the product of two such values is exact in float64,
    and round-to-odd in 53 bits makes the second rounding the correct one)."""
    a = a.astype(np.float64)
    p = a * b.astype(np.float64)
    c = c.astype(np.float64)
    s = p + c
    # The float64 sum rounded once to nearest gives the correctly rounded
    # ``dtype`` result unless it landed exactly half-way between two
    # ``dtype`` values (only then can the second rounding go the wrong way),
    # or the result is below ``dtype``'s normal range (where its rounding point moves).
    low_mask, half, tiny = _ROUNDING[np.dtype(dtype).itemsize]
    if not ((s.view(np.uint64) & low_mask) == half).any():
        mag = np.abs(s)
        if not ((mag < tiny) & (mag != 0)).any():
            return s.astype(dtype)
    bb = s - p
    err = (p - (s - bb)) + (c - bb)
    fin = np.isfinite(s) & np.isfinite(err)
    need = fin & (err != 0) & ((s.view(np.uint64) & np.uint64(1)) == 0)
    if need.any():
        s = np.where(need, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s.astype(dtype)


def quiet(x: np.ndarray) -> np.ndarray:
    """NaNs made quiet (as the hardware returns them)."""
    bits = x.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])
    q = {2: 0x0200, 4: 0x00400000, 8: 0x0008000000000000}[x.dtype.itemsize]
    return np.where(np.isnan(x), (bits | bits.dtype.type(q)).view(x.dtype), x)


def fmin_ieee(a, b):
    """IEEE minNum: a NaN operand loses; -0 < +0."""
    r = np.fmin(a, b)
    z = (a == 0) & (b == 0)
    if z.any():
        r = np.where(z, np.where(np.signbit(a) | np.signbit(b), -np.zeros_like(a), np.zeros_like(a)), r)
    return quiet(r)


def fmax_ieee(a, b):
    r = np.fmax(a, b)
    z = (a == 0) & (b == 0)
    if z.any():
        r = np.where(z, np.where(np.signbit(a) & np.signbit(b), -np.zeros_like(a), np.zeros_like(a)), r)
    return quiet(r)


def exponent(x: np.ndarray) -> np.ndarray:
    """Biased exponent field of float32/float64 values."""
    if x.dtype == np.float32:
        return ((x.view(np.uint32) >> 23) & 0xFF).astype(np.int64)
    if x.dtype == np.float64:
        return ((x.view(np.uint64) >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64)
    return ((x.view(np.uint16) >> 10) & 0x1F).astype(np.int64)
