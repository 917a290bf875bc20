"""What each modelled instruction computes, as tables walked by generic code.

:data:`VALU`: vector ALU operations by base mnemonic (without ``_e32``/
``_e64``/``_sdwa``/``_dpp``): ``(kind, dst type, source types, function)``.
The function takes typed numpy arrays (one value per lane) and returns the
typed result; :mod:`kpatch.emulate.program` fetches and converts operands,
applies modifiers (neg/abs/clamp/omod, op_sel, SDWA, DPP) and writes active
lanes.  Kinds:

* ``alu``    result only
* ``cmp``    boolean per lane, written to VCC / an SGPR pair / EXEC (cmpx)
* ``co``     (result, carry-out) -- VOP3b ``sdst`` or VCC
* ``ci``     function(a, b, carry-in) -> (result, carry-out)
* ``mask``   function(a, b, mask) (``v_cndmask_b32``)
* ``dscale`` (result, VCC)  ``dfmas``: function(a, b, c, vcc)

:data:`SALU`: scalar operations on Python ints: ``(dst bits, source bits,
function)``; the function gets the source values (unsigned) and SCC and
returns ``(result, scc)`` (``None`` leaves SCC as it was).

Transcendental model (the same on both sides of a comparison, so a
differential check does not depend on it): ``v_rcp``/``v_rsq``/``v_sqrt``
are the correctly rounded values, ``v_exp``/``v_log`` numpy's exp2/log2 of
the value in double, rounded once, ``v_sin``/``v_cos`` sin/cos of 2*pi*x in
double, rounded once.
"""

from __future__ import annotations

import numpy as np

from kpatch.emulate import values as V

F32, F16, F64 = np.float32, np.float16, np.float64
_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF


def _i64(x):
    return x.astype(np.int64)


def _u64(x):
    return x.astype(np.uint64)


def _sh(b, width):
    return (b.astype(np.uint64) & np.uint64(width - 1))


def _bfe(x, off, width, signed):
    off = (off & 31).astype(np.uint64)
    width = (width & 31).astype(np.int64)
    v = (x.astype(np.uint64) >> off) & ((np.uint64(1) << width.astype(np.uint64)) - np.uint64(1))
    if signed:
        v = v.astype(np.int64)
        sign = np.where(width > 0, np.int64(1) << np.maximum(width - 1, 0), 0)
        v = np.where((width > 0) & (v & sign != 0), v - (sign << 1), v)
    return np.where(width == 0, 0, v)


def _mulhi_u(a, b):
    return (_u64(a) * _u64(b)) >> np.uint64(32)


def _mulhi_i(a, b):
    return (_i64(a) * _i64(b)) >> 32


def _u24(x):
    return _u64(x) & np.uint64(0xFFFFFF)


def _i24(x):
    v = _i64(x.view(np.uint32) if x.dtype == np.int32 else x) & 0xFFFFFF
    return np.where(v & 0x800000, v - 0x1000000, v)


def _cvt_i32_f32(x):
    x = x.astype(np.float64)
    r = np.where(np.isnan(x), 0, np.clip(np.trunc(np.nan_to_num(x)), -2 ** 31, 2 ** 31 - 1))
    return r.astype(np.int64)


def _cvt_u32_f32(x):
    x = x.astype(np.float64)
    r = np.where(np.isnan(x), 0, np.clip(np.trunc(np.nan_to_num(x)), 0, 2 ** 32 - 1))
    return r.astype(np.uint64)


def _cvt_i16_f16(x):
    x = x.astype(np.float64)
    return np.where(np.isnan(x), 0, np.clip(np.trunc(np.nan_to_num(x)), -2 ** 15, 2 ** 15 - 1)).astype(np.int64)


def _cvt_u16_f16(x):
    x = x.astype(np.float64)
    return np.where(np.isnan(x), 0, np.clip(np.trunc(np.nan_to_num(x)), 0, 2 ** 16 - 1)).astype(np.int64)


def _ffbh_u32(x):
    x = x.astype(np.uint64)
    out = np.full(len(x), _U32, np.int64)
    nz = x != 0
    out[nz] = 31 - np.floor(np.log2(x[nz].astype(np.float64))).astype(np.int64)
    # log2 of a uint32 in float64 is exact enough except just below powers of two
    fix = nz & ((x >> (31 - out).astype(np.uint64)) == 0)
    out[fix] += 1
    return out


def _ffbl(x):
    x = x.astype(np.uint64)
    out = np.full(len(x), _U32, np.int64)
    nz = x != 0
    low = x[nz] & (~x[nz] + np.uint64(1))
    out[nz] = np.round(np.log2(low.astype(np.float64))).astype(np.int64)
    return out


def _popc(x):
    return V.popcount(x.astype(np.uint32))


def _brev(x):
    x = x.astype(np.uint64)
    r = np.zeros(len(x), np.uint64)
    for k in range(32):
        r |= ((x >> np.uint64(k)) & np.uint64(1)) << np.uint64(31 - k)
    return r


def _round_f(fn, dtype):
    return lambda x: fn(x.astype(np.float64)).astype(dtype)


def _rcp(x):
    with np.errstate(all="ignore"):
        return (1.0 / x.astype(np.float64)).astype(x.dtype)


def _rsq(x):
    with np.errstate(all="ignore"):
        return (1.0 / np.sqrt(x.astype(np.float64))).astype(x.dtype)


def _fract(x):
    r = x - np.floor(x)
    lim = np.nextafter(x.dtype.type(1), x.dtype.type(0))
    return np.where(np.isinf(x), np.nan, np.where(np.isnan(x), x, np.minimum(r, lim))).astype(x.dtype)


def _frexp_mant(x):
    m, _ = np.frexp(x)
    return np.where(np.isinf(x) | np.isnan(x), x, m).astype(x.dtype)


def _frexp_exp(x):
    _, e = np.frexp(x)
    return np.where(np.isinf(x) | np.isnan(x), 0, e).astype(np.int64)


def _ldexp(x, e):
    e = np.clip(e.astype(np.int64), -2000, 2000)
    return np.ldexp(x.astype(np.float64), e).astype(x.dtype)


def _legacy_mul(a, b):
    r = a * b
    return np.where((a == 0) | (b == 0), x0(a), r).astype(a.dtype)


def x0(a):
    return np.zeros_like(a)


def _legacy_fma(a, b, c):
    r = V.fma_f32(a, b, c)
    return np.where((a == 0) | (b == 0), c + x0(c), r).astype(np.float32)


def _med3(a, b, c):
    if a.dtype.kind == "f":
        if np.isnan(a).any() or np.isnan(b).any() or np.isnan(c).any():
            mx = V.fmax_ieee(V.fmax_ieee(a, b), c)
            return np.where(mx == a, V.fmax_ieee(b, c), np.where(mx == b, V.fmax_ieee(a, c),
                                                                  V.fmax_ieee(a, b)))
        return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))
    return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))


def _div_scale(dtype):
    """v_div_scale_f32/f64 (from the ISA's pseudo-code): (result, VCC)."""
    big, tiny_exp = (96, 23) if dtype == np.float32 else (768, 53)
    k = 64 if dtype == np.float32 else 128

    def fn(s0, s1, s2):
        e1, e2 = V.exponent(s1), V.exponent(s2)
        tiny = np.finfo(dtype).tiny
        with np.errstate(all="ignore"):
            inv = (dtype(1) / s1)
            q = (s2 / s1)
        den1 = (np.abs(s1) < tiny) & (s1 != 0)
        den_inv = (np.abs(inv) < tiny) & (inv != 0)
        den_q = (np.abs(q) < tiny) & (q != 0)
        up = _ldexp(s0, np.full(len(s0), k)).astype(dtype)
        down = _ldexp(s0, np.full(len(s0), -k)).astype(dtype)
        d = s0.copy()
        vcc = np.zeros(len(s0), bool)
        done = np.zeros(len(s0), bool)

        def case(cond, val=None, setvcc=False, only=None):
            nonlocal d, vcc, done
            c = cond & ~done
            if setvcc:
                vcc = vcc | c
            if val is not None:
                apply = c if only is None else c & only
                d = np.where(apply, val, d)
            done = done | c

        case((s2 == 0) | (s1 == 0), np.full(len(s0), np.nan, dtype))
        case(e2 - e1 >= big, up, True, s0 == s1)
        case(den1, up)
        case(den_inv & den_q, up, True, s0 == s1)
        case(den_inv, down)
        case(den_q, up, True, s0 == s2)
        case(e2 <= tiny_exp, up)
        return d.astype(dtype), vcc
    return fn


def _div_fmas(dtype):
    lim = 126 if dtype == np.float32 else 1022
    k = 64 if dtype == np.float32 else 128

    def fn(a, b, c, vcc):
        r = V.fma_f32(a, b, c) if dtype == np.float32 else V.fma_f64(a, b, c)
        scale = np.where(V.exponent(c) >= lim, k, -k)
        return np.where(vcc, _ldexp(r, scale), r).astype(dtype)
    return fn


def _div_fixup(dtype):
    """v_div_fixup: S0 quotient, S1 denominator, S2 numerator."""
    def fn(s0, s1, s2):
        neg = np.signbit(s1) ^ np.signbit(s2)
        inf = np.where(neg, -np.inf, np.inf).astype(dtype)
        zero = np.where(neg, dtype(-0.0), dtype(0.0)).astype(dtype)
        d = np.where(neg, -np.abs(s0), np.abs(s0)).astype(dtype)
        d = np.where(np.abs(s1) == np.inf, zero, d)
        d = np.where(s2 == 0, zero, d)
        d = np.where((s1 == 0) | (np.abs(s2) == np.inf), inf, d)
        d = np.where((np.abs(s1) == np.inf) & (np.abs(s2) == np.inf), dtype(np.nan), d)
        d = np.where((s1 == 0) & (s2 == 0), dtype(np.nan), d)
        d = np.where(np.isnan(s1), V.quiet(s1), d)
        d = np.where(np.isnan(s2), V.quiet(s2), d)
        return d.astype(dtype)
    return fn


def _cvt_pkrtz(a, b):
    """v_cvt_pkrtz_f16_f32: two floats to halves rounded toward zero, packed."""
    def rtz(x):
        x64 = x.astype(np.float64)
        h = x64.astype(np.float16)
        over = np.abs(h.astype(np.float64)) > np.abs(x64)
        h = np.where(over & np.isfinite(x64), np.nextafter(h, np.float16(0)), h).astype(np.float16)
        return h.view(np.uint16).astype(np.uint32)
    return rtz(a) | (rtz(b) << np.uint32(16))


def _dot2_f32_f16(a, b, c):
    """v_dot2(c)_f32_f16 model: a.lo*b.lo + a.hi*b.hi + c in double, rounded once."""
    alo = V.typed(a, "f16").astype(np.float64)
    ahi = V.typed(a >> np.uint32(16), "f16").astype(np.float64)
    blo = V.typed(b, "f16").astype(np.float64)
    bhi = V.typed(b >> np.uint32(16), "f16").astype(np.float64)
    return (alo * blo + ahi * bhi + V.typed(c, "f32").astype(np.float64)).astype(np.float32)


def _pk(fn, t):
    """A packed 16-bit operation from its 16-bit function (sources are uint32 pairs)."""
    def f(*srcs):
        lo = fn(*(V.typed(s, t) for s in srcs))
        hi = fn(*(V.typed(s >> np.uint32(16), t) for s in srcs))
        return V.raw(lo, t) | (V.raw(hi, t) << np.uint32(16))
    return f


def _sat(lo, hi):
    return lambda v: np.clip(v, lo, hi)


VALU: dict[str, tuple] = {
    # -- moves and bit operations
    "v_mov_b32": ("alu", "b32", ("b32",), lambda a: a),
    "v_mov_b64": ("alu", "b64", ("b64",), lambda a: a),
    "v_not_b32": ("alu", "b32", ("b32",), lambda a: ~a),
    "v_and_b32": ("alu", "b32", ("b32", "b32"), lambda a, b: a & b),
    "v_or_b32": ("alu", "b32", ("b32", "b32"), lambda a, b: a | b),
    "v_xor_b32": ("alu", "b32", ("b32", "b32"), lambda a, b: a ^ b),
    "v_xnor_b32": ("alu", "b32", ("b32", "b32"), lambda a, b: ~(a ^ b)),
    "v_or3_b32": ("alu", "b32", ("b32", "b32", "b32"), lambda a, b, c: a | b | c),
    "v_xor3_b32": ("alu", "b32", ("b32", "b32", "b32"), lambda a, b, c: a ^ b ^ c),
    "v_and_or_b32": ("alu", "b32", ("b32", "b32", "b32"), lambda a, b, c: (a & b) | c),
    "v_lshlrev_b32": ("alu", "b32", ("b32", "b32"), lambda a, b: _u64(b) << _sh(a, 32)),
    "v_lshrrev_b32": ("alu", "b32", ("b32", "b32"), lambda a, b: _u64(b) >> _sh(a, 32)),
    "v_ashrrev_i32": ("alu", "i32", ("u32", "i32"), lambda a, b: _i64(b) >> _i64(a & 31)),
    "v_lshlrev_b64": ("alu", "b64", ("u32", "u64"), lambda a, b: b << _sh(a, 64)),
    "v_lshrrev_b64": ("alu", "b64", ("u32", "u64"), lambda a, b: b >> _sh(a, 64)),
    "v_ashrrev_i64": ("alu", "i64", ("u32", "i64"), lambda a, b: b >> (a & 63).astype(np.int64)),
    "v_lshlrev_b16": ("alu", "u16", ("u16", "u16"), lambda a, b: _u64(b) << _sh(a, 16)),
    "v_lshrrev_b16": ("alu", "u16", ("u16", "u16"), lambda a, b: _u64(b) >> _sh(a, 16)),
    "v_ashrrev_i16": ("alu", "i16", ("u16", "i16"), lambda a, b: _i64(b) >> _i64(a & 15)),
    "v_lshl_add_u32": ("alu", "u32", ("u32", "u32", "u32"), lambda a, b, c: (_u64(a) << _sh(b, 32)) + c),
    "v_add_lshl_u32": ("alu", "u32", ("u32", "u32", "u32"),
                       lambda a, b, c: ((_u64(a) + b) & np.uint64(_U32)) << _sh(c, 32)),
    "v_lshl_or_b32": ("alu", "u32", ("u32", "u32", "u32"), lambda a, b, c: (_u64(a) << _sh(b, 32)) | c),
    "v_bfe_u32": ("alu", "u32", ("u32", "u32", "u32"), lambda a, b, c: _bfe(a, b, c, False)),
    "v_bfe_i32": ("alu", "i32", ("u32", "u32", "u32"), lambda a, b, c: _bfe(a, b, c, True)),
    "v_bfi_b32": ("alu", "b32", ("b32", "b32", "b32"), lambda a, b, c: (a & b) | (~a & c)),
    "v_bfm_b32": ("alu", "b32", ("u32", "u32"),
                  lambda a, b: ((np.uint64(1) << _sh(a, 32)) - np.uint64(1)) << _sh(b, 32)),
    "v_alignbit_b32": ("alu", "b32", ("u32", "u32", "u32"),
                       lambda a, b, c: (((_u64(a) << np.uint64(32)) | b) >> _sh(c, 32))),
    "v_alignbyte_b32": ("alu", "b32", ("u32", "u32", "u32"),
                        lambda a, b, c: (((_u64(a) << np.uint64(32)) | b) >> ((_u64(c) & np.uint64(3)) * np.uint64(8)))),
    "v_perm_b32": ("alu", "b32", ("u32", "u32", "u32"), None),  # filled below
    "v_bcnt_u32_b32": ("alu", "u32", ("u32", "u32"), lambda a, b: _popc(a) + b),
    "v_bfrev_b32": ("alu", "u32", ("u32",), _brev),
    "v_ffbh_u32": ("alu", "u32", ("u32",), _ffbh_u32),
    "v_ffbl_b32": ("alu", "u32", ("u32",), _ffbl),
    "v_mbcnt_lo_u32_b32": ("alu", "u32", ("u32", "u32"), None),  # lane dependent: program.py
    "v_mbcnt_hi_u32_b32": ("alu", "u32", ("u32", "u32"), None),
    # -- integer arithmetic
    "v_add_nc_u32": ("alu", "u32", ("u32", "u32"), lambda a, b: _u64(a) + b),
    "v_sub_nc_u32": ("alu", "u32", ("u32", "u32"), lambda a, b: _i64(a) - _i64(b)),
    "v_subrev_nc_u32": ("alu", "u32", ("u32", "u32"), lambda a, b: _i64(b) - _i64(a)),
    "v_add_nc_i32": ("alu", "i32", ("i32", "i32"), lambda a, b: _i64(a) + b),
    "v_sub_nc_i32": ("alu", "i32", ("i32", "i32"), lambda a, b: _i64(a) - b),
    "v_add_nc_u16": ("alu", "u16", ("u16", "u16"), lambda a, b: _i64(a) + b),
    "v_sub_nc_u16": ("alu", "u16", ("u16", "u16"), lambda a, b: _i64(a) - b),
    "v_add_nc_i16": ("alu", "i16", ("i16", "i16"), lambda a, b: _i64(a) + b),
    "v_mul_lo_u16": ("alu", "u16", ("u16", "u16"), lambda a, b: _u64(a) * b),
    "v_xad_u32": ("alu", "u32", ("u32", "u32", "u32"), lambda a, b, c: _u64(a ^ b) + c),
    "v_add3_u32": ("alu", "u32", ("u32", "u32", "u32"), lambda a, b, c: _u64(a) + b + c),
    "v_mul_lo_u32": ("alu", "u32", ("u32", "u32"), lambda a, b: _u64(a) * b),
    "v_mul_hi_u32": ("alu", "u32", ("u32", "u32"), _mulhi_u),
    "v_mul_hi_i32": ("alu", "i32", ("i32", "i32"), _mulhi_i),
    "v_mul_u32_u24": ("alu", "u32", ("u32", "u32"), lambda a, b: _u24(a) * _u24(b)),
    "v_mul_i32_i24": ("alu", "i32", ("u32", "u32"), lambda a, b: _i24(a) * _i24(b)),
    "v_mul_hi_u32_u24": ("alu", "u32", ("u32", "u32"), lambda a, b: (_u24(a) * _u24(b)) >> np.uint64(32)),
    "v_mul_hi_i32_i24": ("alu", "i32", ("u32", "u32"), lambda a, b: (_i24(a) * _i24(b)) >> 32),
    "v_mad_u32_u24": ("alu", "u32", ("u32", "u32", "u32"), lambda a, b, c: _u24(a) * _u24(b) + c),
    "v_mad_i32_i24": ("alu", "i32", ("u32", "u32", "i32"), lambda a, b, c: _i24(a) * _i24(b) + c),
    "v_mad_u32_u16": ("alu", "u32", ("u16", "u16", "u32"), lambda a, b, c: _u64(a) * b + c),
    "v_min_i32": ("alu", "i32", ("i32", "i32"), np.minimum),
    "v_max_i32": ("alu", "i32", ("i32", "i32"), np.maximum),
    "v_min_u32": ("alu", "u32", ("u32", "u32"), np.minimum),
    "v_max_u32": ("alu", "u32", ("u32", "u32"), np.maximum),
    "v_min3_i32": ("alu", "i32", ("i32", "i32", "i32"), lambda a, b, c: np.minimum(np.minimum(a, b), c)),
    "v_max3_i32": ("alu", "i32", ("i32", "i32", "i32"), lambda a, b, c: np.maximum(np.maximum(a, b), c)),
    "v_min3_u32": ("alu", "u32", ("u32", "u32", "u32"), lambda a, b, c: np.minimum(np.minimum(a, b), c)),
    "v_max3_u32": ("alu", "u32", ("u32", "u32", "u32"), lambda a, b, c: np.maximum(np.maximum(a, b), c)),
    "v_med3_i32": ("alu", "i32", ("i32", "i32", "i32"), _med3),
    "v_med3_u32": ("alu", "u32", ("u32", "u32", "u32"), _med3),
    "v_min_i16": ("alu", "i16", ("i16", "i16"), np.minimum),
    "v_max_i16": ("alu", "i16", ("i16", "i16"), np.maximum),
    "v_min_u16": ("alu", "u16", ("u16", "u16"), np.minimum),
    "v_max_u16": ("alu", "u16", ("u16", "u16"), np.maximum),
    "v_sad_u32": ("alu", "u32", ("u32", "u32", "u32"), lambda a, b, c: np.abs(_i64(a) - _i64(b)) + c),
    "v_cvt_f32_i32": ("alu", "f32", ("i32",), lambda a: a.astype(np.float32)),
    "v_cvt_f32_u32": ("alu", "f32", ("u32",), lambda a: a.astype(np.float32)),
    "v_cvt_i32_f32": ("alu", "i32", ("f32",), _cvt_i32_f32),
    "v_cvt_flr_i32_f32": ("alu", "i32", ("f32",), lambda a: _cvt_i32_f32(np.floor(a))),
    "v_cvt_rpi_i32_f32": ("alu", "i32", ("f32",), lambda a: _cvt_i32_f32(np.floor(a + np.float32(0.5)))),
    "v_cvt_u32_f32": ("alu", "u32", ("f32",), _cvt_u32_f32),
    "v_cvt_f32_f16": ("alu", "f32", ("f16",), lambda a: a.astype(np.float32)),
    "v_cvt_f16_f32": ("alu", "f16", ("f32",), lambda a: a.astype(np.float16)),
    "v_cvt_f64_f32": ("alu", "f64", ("f32",), lambda a: a.astype(np.float64)),
    "v_cvt_f32_f64": ("alu", "f32", ("f64",), lambda a: a.astype(np.float32)),
    "v_cvt_f64_i32": ("alu", "f64", ("i32",), lambda a: a.astype(np.float64)),
    "v_cvt_f64_u32": ("alu", "f64", ("u32",), lambda a: a.astype(np.float64)),
    "v_cvt_i32_f64": ("alu", "i32", ("f64",), _cvt_i32_f32),
    "v_cvt_u32_f64": ("alu", "u32", ("f64",), _cvt_u32_f32),
    "v_cvt_f16_u16": ("alu", "f16", ("u16",), lambda a: a.astype(np.float16)),
    "v_cvt_f16_i16": ("alu", "f16", ("i16",), lambda a: a.astype(np.float16)),
    "v_cvt_u16_f16": ("alu", "u16", ("f16",), _cvt_u16_f16),
    "v_cvt_i16_f16": ("alu", "i16", ("f16",), _cvt_i16_f16),
    "v_cvt_f32_ubyte0": ("alu", "f32", ("u32",), lambda a: (a & 0xFF).astype(np.float32)),
    "v_cvt_f32_ubyte1": ("alu", "f32", ("u32",), lambda a: ((a >> 8) & 0xFF).astype(np.float32)),
    "v_cvt_f32_ubyte2": ("alu", "f32", ("u32",), lambda a: ((a >> 16) & 0xFF).astype(np.float32)),
    "v_cvt_f32_ubyte3": ("alu", "f32", ("u32",), lambda a: ((a >> 24) & 0xFF).astype(np.float32)),
    "v_cvt_pkrtz_f16_f32": ("alu", "b32", ("f32", "f32"), _cvt_pkrtz),
    # saturating packs (ISA: u32_to_u16 / i32_to_i16 clamp to the 16-bit range)
    "v_cvt_pk_u16_u32": ("alu", "b32", ("u32", "u32"),
                         lambda a, b: np.minimum(_u64(a), 0xFFFF) | (np.minimum(_u64(b), 0xFFFF) << np.uint64(16))),
    "v_cvt_pk_i16_i32": ("alu", "b32", ("i32", "i32"),
                         lambda a, b: (np.clip(_i64(a), -2 ** 15, 2 ** 15 - 1) & 0xFFFF)
                         | ((np.clip(_i64(b), -2 ** 15, 2 ** 15 - 1) & 0xFFFF) << 16)),
    "v_pack_b32_f16": ("alu", "b32", ("f16", "f16"),
                       lambda a, b: V.raw(a, "f16") | (V.raw(b, "f16") << np.uint32(16))),
    # -- f32
    "v_add_f32": ("alu", "f32", ("f32", "f32"), lambda a, b: a + b),
    "v_sub_f32": ("alu", "f32", ("f32", "f32"), lambda a, b: a - b),
    "v_subrev_f32": ("alu", "f32", ("f32", "f32"), lambda a, b: b - a),
    "v_mul_f32": ("alu", "f32", ("f32", "f32"), lambda a, b: a * b),
    "v_mul_legacy_f32": ("alu", "f32", ("f32", "f32"), _legacy_mul),
    "v_fma_f32": ("alu", "f32", ("f32", "f32", "f32"), V.fma_f32),
    "v_fmac_f32": ("alu", "f32", ("f32", "f32", "f32"), V.fma_f32),
    "v_fmamk_f32": ("alu", "f32", ("f32", "f32", "f32"), V.fma_f32),
    "v_fmaak_f32": ("alu", "f32", ("f32", "f32", "f32"), V.fma_f32),
    "v_fma_legacy_f32": ("alu", "f32", ("f32", "f32", "f32"), _legacy_fma),
    "v_fmac_legacy_f32": ("alu", "f32", ("f32", "f32", "f32"), _legacy_fma),
    "v_min_f32": ("alu", "f32", ("f32", "f32"), V.fmin_ieee),
    "v_max_f32": ("alu", "f32", ("f32", "f32"), V.fmax_ieee),
    "v_min3_f32": ("alu", "f32", ("f32", "f32", "f32"), lambda a, b, c: V.fmin_ieee(V.fmin_ieee(a, b), c)),
    "v_max3_f32": ("alu", "f32", ("f32", "f32", "f32"), lambda a, b, c: V.fmax_ieee(V.fmax_ieee(a, b), c)),
    "v_med3_f32": ("alu", "f32", ("f32", "f32", "f32"), _med3),
    "v_floor_f32": ("alu", "f32", ("f32",), np.floor),
    "v_ceil_f32": ("alu", "f32", ("f32",), np.ceil),
    "v_trunc_f32": ("alu", "f32", ("f32",), np.trunc),
    "v_rndne_f32": ("alu", "f32", ("f32",), np.rint),
    "v_fract_f32": ("alu", "f32", ("f32",), _fract),
    "v_sqrt_f32": ("alu", "f32", ("f32",), np.sqrt),
    "v_rcp_f32": ("alu", "f32", ("f32",), _rcp),
    "v_rcp_iflag_f32": ("alu", "f32", ("f32",), _rcp),
    "v_rsq_f32": ("alu", "f32", ("f32",), _rsq),
    "v_exp_f32": ("alu", "f32", ("f32",), _round_f(np.exp2, F32)),
    "v_log_f32": ("alu", "f32", ("f32",), _round_f(np.log2, F32)),
    "v_sin_f32": ("alu", "f32", ("f32",), _round_f(lambda x: np.sin(2 * np.pi * x), F32)),
    "v_cos_f32": ("alu", "f32", ("f32",), _round_f(lambda x: np.cos(2 * np.pi * x), F32)),
    "v_frexp_mant_f32": ("alu", "f32", ("f32",), _frexp_mant),
    "v_frexp_exp_i32_f32": ("alu", "i32", ("f32",), _frexp_exp),
    "v_ldexp_f32": ("alu", "f32", ("f32", "i32"), _ldexp),
    "v_div_scale_f32": ("dscale", "f32", ("f32", "f32", "f32"), _div_scale(F32)),
    "v_div_fmas_f32": ("dfmas", "f32", ("f32", "f32", "f32"), _div_fmas(F32)),
    "v_div_fixup_f32": ("alu", "f32", ("f32", "f32", "f32"), _div_fixup(F32)),
    "v_dot2c_f32_f16": ("alu", "f32", ("b32", "b32", "b32"), _dot2_f32_f16),
    "v_dot2_f32_f16": ("alu", "f32", ("b32", "b32", "b32"), _dot2_f32_f16),
    # -- f64
    "v_add_f64": ("alu", "f64", ("f64", "f64"), lambda a, b: a + b),
    "v_mul_f64": ("alu", "f64", ("f64", "f64"), lambda a, b: a * b),
    "v_fma_f64": ("alu", "f64", ("f64", "f64", "f64"), V.fma_f64),
    "v_min_f64": ("alu", "f64", ("f64", "f64"), V.fmin_ieee),
    "v_max_f64": ("alu", "f64", ("f64", "f64"), V.fmax_ieee),
    "v_ldexp_f64": ("alu", "f64", ("f64", "i32"), _ldexp),
    "v_floor_f64": ("alu", "f64", ("f64",), np.floor),
    "v_ceil_f64": ("alu", "f64", ("f64",), np.ceil),
    "v_trunc_f64": ("alu", "f64", ("f64",), np.trunc),
    "v_rndne_f64": ("alu", "f64", ("f64",), np.rint),
    "v_fract_f64": ("alu", "f64", ("f64",), _fract),
    "v_sqrt_f64": ("alu", "f64", ("f64",), np.sqrt),
    "v_rcp_f64": ("alu", "f64", ("f64",), _rcp),
    "v_rsq_f64": ("alu", "f64", ("f64",), _rsq),
    "v_frexp_mant_f64": ("alu", "f64", ("f64",), _frexp_mant),
    "v_frexp_exp_i32_f64": ("alu", "i32", ("f64",), _frexp_exp),
    "v_div_scale_f64": ("dscale", "f64", ("f64", "f64", "f64"), _div_scale(F64)),
    "v_div_fmas_f64": ("dfmas", "f64", ("f64", "f64", "f64"), _div_fmas(F64)),
    "v_div_fixup_f64": ("alu", "f64", ("f64", "f64", "f64"), _div_fixup(F64)),
    # -- f16
    "v_add_f16": ("alu", "f16", ("f16", "f16"), lambda a, b: a + b),
    "v_sub_f16": ("alu", "f16", ("f16", "f16"), lambda a, b: a - b),
    "v_subrev_f16": ("alu", "f16", ("f16", "f16"), lambda a, b: b - a),
    "v_mul_f16": ("alu", "f16", ("f16", "f16"), lambda a, b: a * b),
    "v_fma_f16": ("alu", "f16", ("f16", "f16", "f16"), V.fma_f16),
    "v_fmac_f16": ("alu", "f16", ("f16", "f16", "f16"), V.fma_f16),
    "v_min_f16": ("alu", "f16", ("f16", "f16"), V.fmin_ieee),
    "v_max_f16": ("alu", "f16", ("f16", "f16"), V.fmax_ieee),
    "v_sqrt_f16": ("alu", "f16", ("f16",), _round_f(np.sqrt, F16)),
    "v_rcp_f16": ("alu", "f16", ("f16",), _rcp),
    "v_floor_f16": ("alu", "f16", ("f16",), np.floor),
    "v_ceil_f16": ("alu", "f16", ("f16",), np.ceil),
    "v_trunc_f16": ("alu", "f16", ("f16",), np.trunc),
    "v_rndne_f16": ("alu", "f16", ("f16",), np.rint),
    "v_exp_f16": ("alu", "f16", ("f16",), _round_f(np.exp2, F16)),
    "v_log_f16": ("alu", "f16", ("f16",), _round_f(np.log2, F16)),
    "v_rsq_f16": ("alu", "f16", ("f16",), _rsq),
    "v_sin_f16": ("alu", "f16", ("f16",), _round_f(lambda x: np.sin(2 * np.pi * x), F16)),
    "v_cos_f16": ("alu", "f16", ("f16",), _round_f(lambda x: np.cos(2 * np.pi * x), F16)),
    "v_ldexp_f16": ("alu", "f16", ("f16", "i16"), _ldexp),
    # -- packed 16-bit (VOP3P): sources arrive as uint32 pairs after op_sel
    "v_pk_add_f16": ("pk", "f16", ("f16", "f16"), lambda a, b: a + b),
    "v_pk_mul_f16": ("pk", "f16", ("f16", "f16"), lambda a, b: a * b),
    "v_pk_fma_f16": ("pk", "f16", ("f16", "f16", "f16"), V.fma_f16),
    "v_pk_min_f16": ("pk", "f16", ("f16", "f16"), V.fmin_ieee),
    "v_pk_max_f16": ("pk", "f16", ("f16", "f16"), V.fmax_ieee),
    "v_pk_add_u16": ("pk", "u16", ("u16", "u16"), lambda a, b: _i64(a) + b),
    "v_pk_sub_u16": ("pk", "u16", ("u16", "u16"), lambda a, b: _i64(a) - b),
    "v_pk_add_i16": ("pk", "i16", ("i16", "i16"), lambda a, b: _i64(a) + b),
    "v_pk_sub_i16": ("pk", "i16", ("i16", "i16"), lambda a, b: _i64(a) - b),
    "v_pk_mul_lo_u16": ("pk", "u16", ("u16", "u16"), lambda a, b: _i64(a) * b),
    "v_pk_lshlrev_b16": ("pk", "u16", ("u16", "u16"), lambda a, b: _u64(b) << _sh(a, 16)),
    "v_pk_lshrrev_b16": ("pk", "u16", ("u16", "u16"), lambda a, b: _u64(b) >> _sh(a, 16)),
    "v_pk_ashrrev_i16": ("pk", "i16", ("u16", "i16"), lambda a, b: _i64(b) >> _i64(a & 15)),
    "v_pk_max_i16": ("pk", "i16", ("i16", "i16"), np.maximum),
    "v_pk_min_i16": ("pk", "i16", ("i16", "i16"), np.minimum),
    "v_pk_max_u16": ("pk", "u16", ("u16", "u16"), np.maximum),
    "v_pk_min_u16": ("pk", "u16", ("u16", "u16"), np.minimum),
    # -- carries and selects
    "v_add_co_u32": ("co", "u32", ("u32", "u32"), lambda a, b: _split_carry(_u64(a) + b)),
    "v_sub_co_u32": ("co", "u32", ("u32", "u32"), lambda a, b: _borrow(_i64(a) - _i64(b))),
    "v_subrev_co_u32": ("co", "u32", ("u32", "u32"), lambda a, b: _borrow(_i64(b) - _i64(a))),
    "v_add_co_ci_u32": ("ci", "u32", ("u32", "u32"), lambda a, b, c: _split_carry(_u64(a) + b + c)),
    "v_sub_co_ci_u32": ("ci", "u32", ("u32", "u32"), lambda a, b, c: _borrow(_i64(a) - _i64(b) - _i64(c))),  # noqa
    "v_subrev_co_ci_u32": ("ci", "u32", ("u32", "u32"),
                           lambda a, b, c: _borrow(_i64(b) - _i64(a) - _i64(c))),
    "v_mad_u64_u32": ("co", "u64", ("u32", "u32", "u64"), lambda a, b, c: _mad64(a, b, c, False)),
    "v_mad_i64_i32": ("co", "i64", ("i32", "i32", "i64"), lambda a, b, c: _mad64(a, b, c, True)),
    "v_cndmask_b32": ("mask", "b32", ("b32", "b32"), lambda a, b, m: np.where(m, b, a)),
}


def _split_carry(s):
    return s & np.uint64(_U32), (s >> np.uint64(32)) != 0


def _borrow(d):
    return d & _U32, d < 0


def _mad64(a, b, c, signed):
    if signed:
        p = a.astype(object) * b.astype(object) + c.astype(object)
        res = np.array([int(x) & _U64 for x in p], np.uint64)
        return res, np.zeros(len(a), bool)  # the carry-out of the signed form is not modelled (0)
    p = a.astype(object) * b.astype(object) + c.astype(object)
    res = np.array([int(x) & _U64 for x in p], np.uint64)
    carry = np.array([int(x) >> 64 != 0 for x in p], bool)
    return res, carry


def _perm(a, b, sel):
    """v_perm_b32: each result byte chosen from the 8 bytes {a, b} by a selector byte."""
    src = (_u64(a) << np.uint64(32)) | _u64(b)
    out = np.zeros(len(a), np.uint64)
    for k in range(4):
        s = (_u64(sel) >> np.uint64(8 * k)) & np.uint64(0xFF)
        byte = (src >> ((s & np.uint64(7)) * np.uint64(8))) & np.uint64(0xFF)
        # selectors >= 8: 8..11 sign of a byte pair, 12 -> 0x00, >=13 -> 0xFF
        sgn = lambda bit: np.where((src >> np.uint64(bit)) & np.uint64(1) == 1, np.uint64(0xFF), np.uint64(0))
        byte = np.where(s == 8, sgn(15), byte)
        byte = np.where(s == 9, sgn(31), byte)
        byte = np.where(s == 10, sgn(47), byte)
        byte = np.where(s == 11, sgn(63), byte)
        byte = np.where(s == 12, np.uint64(0), byte)
        byte = np.where(s >= 13, np.uint64(0xFF), byte)
        out |= byte << np.uint64(8 * k)
    return out


def _idot(bits, signed):
    """Integer dot product of packed ``bits``-bit elements plus an accumulator (wraps at 32 bits)."""
    def fn(a, b, c):
        a, b = _u64(a), _u64(b)
        m = np.uint64((1 << bits) - 1)
        total = c.astype(np.int64)
        for k in range(32 // bits):
            x = ((a >> np.uint64(bits * k)) & m).astype(np.int64)
            y = ((b >> np.uint64(bits * k)) & m).astype(np.int64)
            if signed:
                x = np.where(x >> (bits - 1) & 1, x - (1 << bits), x)
                y = np.where(y >> (bits - 1) & 1, y - (1 << bits), y)
            total = total + x * y
        return total & _U32
    return fn


for _n, _b, _sg in (("v_dot4_i32_i8", 8, True), ("v_dot4c_i32_i8", 8, True), ("v_dot4_u32_u8", 8, False),
                    ("v_dot2_i32_i16", 16, True), ("v_dot2_u32_u16", 16, False), ("v_dot8_i32_i4", 4, True),
                    ("v_dot8_u32_u4", 4, False), ("v_dot8c_i32_i4", 4, True), ("v_dot2c_i32_i16", 16, True)):
    VALU[_n] = ("alu", "u32", ("u32", "u32", "i32"), _idot(_b, _sg))

VALU["v_perm_b32"] = ("alu", "b32", ("u32", "u32", "u32"), _perm)
def _mad(legacy: bool):
    """v_mad_f32 / v_mac_f32 (and the legacy forms): the product rounded to
    f32 before the add, f32 denormals flushed (inputs and result) whatever
    the mode, as the ISA says of MAD; legacy: 0 * anything = 0."""
    def fn(a, b, c):
        a, b, c = V.flush_denormals(a), V.flush_denormals(b), V.flush_denormals(c)
        p = V.flush_denormals((a * b).astype(np.float32))
        if legacy:
            p = np.where((a == 0) | (b == 0), x0(p), p)
        return V.flush_denormals((p + c).astype(np.float32))
    return fn


for _n, _lg in (("v_mac_legacy_f32", True), ("v_mad_legacy_f32", True), ("v_mac_f32", False),
                ("v_mad_f32", False), ("v_madmk_f32", False), ("v_madak_f32", False)):
    VALU[_n] = ("alu", "f32", ("f32", "f32", "f32"), _mad(_lg))

# -- comparisons ---------------------------------------------------------------
_FCMP = {
    "f": lambda a, b: np.zeros(len(a), bool), "lt": np.less, "eq": np.equal, "le": np.less_equal,
    "gt": np.greater, "lg": lambda a, b: (a < b) | (a > b), "ge": np.greater_equal,
    "o": lambda a, b: ~(np.isnan(a) | np.isnan(b)), "u": lambda a, b: np.isnan(a) | np.isnan(b),
    "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)), "ngt": lambda a, b: ~(a > b),
    "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b), "nlt": lambda a, b: ~(a < b),
    "tru": lambda a, b: np.ones(len(a), bool),
}
_ICMP = {
    "f": _FCMP["f"], "lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater,
    "ne": np.not_equal, "lg": np.not_equal, "ge": np.greater_equal, "t": _FCMP["tru"],
}


def _class(x, mask):
    """v_cmp_class: mask bits 0 sNaN, 1 qNaN, 2 -inf, 3 -normal, 4 -denorm, 5 -0,
    6 +0, 7 +denorm, 8 +normal, 9 +inf."""
    m = mask.astype(np.int64)
    neg = np.signbit(x)
    tiny = np.finfo(x.dtype).tiny
    isn = np.isnan(x)
    ibits = x.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize]).astype(np.uint64)
    qbit = {2: 9, 4: 22, 8: 51}[x.dtype.itemsize]
    quiet = ((ibits >> np.uint64(qbit)) & np.uint64(1)) == 1
    inf = np.isinf(x)
    zero = x == 0
    den = (~zero) & (np.abs(x) < tiny) & ~isn
    norm = ~(isn | inf | zero | den)
    cls = np.select([isn & ~quiet, isn & quiet, inf & neg, norm & neg, den & neg, zero & neg,
                     zero & ~neg, den & ~neg, norm & ~neg, inf & ~neg],
                    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 0)
    return ((m >> cls) & 1) == 1


def compare(base: str):
    """(source type, function) of ``v_cmp[x]_OP_TYPE``, or None."""
    parts = base.split("_")
    if len(parts) != 4 or parts[0] != "v" or parts[1] not in ("cmp", "cmpx"):
        return None
    op, t = parts[2], parts[3]
    if op == "class":
        return (t, "u32"), _class
    table = _FCMP if t.startswith("f") else _ICMP
    fn = table.get(op)
    if fn is None or t not in ("f16", "f32", "f64", "i16", "u16", "i32", "u32", "i64", "u64"):
        return None
    return (t, t), fn


# -- scalar ALU ---------------------------------------------------------------
def _s32(x):
    return x - (1 << 32) if x & 0x80000000 else x


def _s64(x):
    return x - (1 << 64) if x >> 63 else x


def _sbfe(x, ctl, bits, signed):
    off = ctl & (bits - 1)
    width = (ctl >> 16) & 0x7F
    v = (x >> off) & ((1 << width) - 1) if width else 0
    if signed and width and v >> (width - 1):
        v -= 1 << width
    return v


def _ff1(x, bits):
    if x == 0:
        return _U32
    return (x & -x).bit_length() - 1


def _flbit(x, bits):
    if x == 0:
        return _U32
    return bits - x.bit_length()


def _flbit_i32(x):
    """s_flbit_i32: position, counted from the MSB, of the first bit that
    differs from the sign bit; -1 when every bit equals it."""
    v = _s32(x)
    if v in (0, -1):
        return _U32
    y = ~v if v < 0 else v
    return 32 - y.bit_length()


_M = {32: _U32, 64: _U64}

#: name -> (dst bits, source bits tuple, fn(*sources, scc) -> (result, scc or None))
SALU: dict[str, tuple] = {
    "s_mov_b32": (32, (32,), lambda a, c: (a, None)),
    "s_mov_b64": (64, (64,), lambda a, c: (a, None)),
    "s_movk_i32": (32, (), None),
    "s_cmov_b32": (32, (32,), None),
    "s_cmov_b64": (64, (64,), None),
    "s_not_b32": (32, (32,), lambda a, c: (~a & _U32, (~a & _U32) != 0)),
    "s_not_b64": (64, (64,), lambda a, c: (~a & _U64, (~a & _U64) != 0)),
    "s_brev_b32": (32, (32,), lambda a, c: (int(f"{a:032b}"[::-1], 2), None)),
    "s_bcnt1_i32_b32": (32, (32,), lambda a, c: (bin(a).count("1"), bin(a).count("1") != 0)),
    "s_bcnt1_i32_b64": (32, (64,), lambda a, c: (bin(a).count("1"), bin(a).count("1") != 0)),
    "s_bcnt0_i32_b32": (32, (32,), lambda a, c: (32 - bin(a).count("1"), 32 - bin(a).count("1") != 0)),
    "s_ff1_i32_b32": (32, (32,), lambda a, c: (_ff1(a, 32), None)),
    "s_ff1_i32_b64": (32, (64,), lambda a, c: (_ff1(a, 64), None)),
    "s_flbit_i32_b32": (32, (32,), lambda a, c: (_flbit(a, 32), None)),
    "s_flbit_i32_b64": (32, (64,), lambda a, c: (_flbit(a, 64), None)),
    "s_flbit_i32": (32, (32,), lambda a, c: (_flbit_i32(a) & _U32, None)),
    "s_sext_i32_i8": (32, (32,), lambda a, c: ((((a & 0xFF) ^ 0x80) - 0x80) & _U32, None)),
    "s_sext_i32_i16": (32, (32,), lambda a, c: ((((a & 0xFFFF) ^ 0x8000) - 0x8000) & _U32, None)),
    "s_abs_i32": (32, (32,), lambda a, c: (abs(_s32(a)) & _U32, abs(_s32(a)) & _U32 != 0)),
    "s_add_u32": (32, (32, 32), lambda a, b, c: ((a + b) & _U32, (a + b) >> 32 != 0)),
    "s_sub_u32": (32, (32, 32), lambda a, b, c: ((a - b) & _U32, a < b)),
    "s_addc_u32": (32, (32, 32), lambda a, b, c: ((a + b + c) & _U32, (a + b + c) >> 32 != 0)),
    "s_subb_u32": (32, (32, 32), lambda a, b, c: ((a - b - c) & _U32, a < b + c)),
    "s_add_i32": (32, (32, 32), lambda a, b, c: ((a + b) & _U32, not -2**31 <= _s32(a) + _s32(b) < 2**31)),
    "s_sub_i32": (32, (32, 32), lambda a, b, c: ((a - b) & _U32, not -2**31 <= _s32(a) - _s32(b) < 2**31)),
    "s_mul_i32": (32, (32, 32), lambda a, b, c: ((a * b) & _U32, None)),
    "s_mul_hi_u32": (32, (32, 32), lambda a, b, c: ((a * b) >> 32, None)),
    "s_mul_hi_i32": (32, (32, 32), lambda a, b, c: (((_s32(a) * _s32(b)) >> 32) & _U32, None)),
    "s_min_i32": (32, (32, 32), lambda a, b, c: ((a if _s32(a) < _s32(b) else b), _s32(a) < _s32(b))),
    "s_max_i32": (32, (32, 32), lambda a, b, c: ((a if _s32(a) > _s32(b) else b), _s32(a) > _s32(b))),
    "s_min_u32": (32, (32, 32), lambda a, b, c: (min(a, b), a < b)),
    "s_max_u32": (32, (32, 32), lambda a, b, c: (max(a, b), a > b)),
    "s_cselect_b32": (32, (32, 32), lambda a, b, c: (a if c else b, None)),
    "s_cselect_b64": (64, (64, 64), lambda a, b, c: (a if c else b, None)),
    "s_absdiff_i32": (32, (32, 32), lambda a, b, c: (abs(_s32(a) - _s32(b)) & _U32, a != b)),
    "s_lshl1_add_u32": (32, (32, 32), lambda a, b, c: (((a << 1) + b) & _U32, ((a << 1) + b) >> 32 != 0)),
    "s_lshl2_add_u32": (32, (32, 32), lambda a, b, c: (((a << 2) + b) & _U32, ((a << 2) + b) >> 32 != 0)),
    "s_lshl3_add_u32": (32, (32, 32), lambda a, b, c: (((a << 3) + b) & _U32, ((a << 3) + b) >> 32 != 0)),
    "s_lshl4_add_u32": (32, (32, 32), lambda a, b, c: (((a << 4) + b) & _U32, ((a << 4) + b) >> 32 != 0)),
    "s_pack_ll_b32_b16": (32, (32, 32), lambda a, b, c: ((a & 0xFFFF) | ((b & 0xFFFF) << 16), None)),
    "s_pack_lh_b32_b16": (32, (32, 32), lambda a, b, c: ((a & 0xFFFF) | (b & 0xFFFF0000), None)),
    "s_pack_hh_b32_b16": (32, (32, 32), lambda a, b, c: ((a >> 16) | (b & 0xFFFF0000), None)),
    "s_bfm_b32": (32, (32, 32), lambda a, b, c: ((((1 << (a & 31)) - 1) << (b & 31)) & _U32, None)),
    "s_bfm_b64": (64, (32, 32), lambda a, b, c: ((((1 << (a & 63)) - 1) << (b & 63)) & _U64, None)),
    "s_bfe_u32": (32, (32, 32), lambda a, b, c: (_sbfe(a, b, 32, False) & _U32, _sbfe(a, b, 32, False) != 0)),
    "s_bfe_i32": (32, (32, 32), lambda a, b, c: (_sbfe(a, b, 32, True) & _U32, _sbfe(a, b, 32, True) != 0)),
    "s_bfe_u64": (64, (64, 32), lambda a, b, c: (_sbfe(a, b, 64, False) & _U64, _sbfe(a, b, 64, False) != 0)),
    "s_bfe_i64": (64, (64, 32), lambda a, b, c: (_sbfe(a, b, 64, True) & _U64, _sbfe(a, b, 64, True) != 0)),
}
for _bits in (32, 64):
    _m = _M[_bits]
    _sfx = f"b{_bits}"
    for _name, _f in (("and", lambda a, b: a & b), ("or", lambda a, b: a | b), ("xor", lambda a, b: a ^ b),
                      ("andn2", lambda a, b, m=_m: a & ~b & m), ("orn2", lambda a, b, m=_m: (a | ~b) & m),
                      ("nand", lambda a, b, m=_m: ~(a & b) & m), ("nor", lambda a, b, m=_m: ~(a | b) & m),
                      ("xnor", lambda a, b, m=_m: ~(a ^ b) & m)):
        SALU[f"s_{_name}_{_sfx}"] = (_bits, (_bits, _bits), lambda a, b, c, f=_f: (f(a, b), f(a, b) != 0))
    SALU[f"s_lshl_{_sfx}"] = (_bits, (_bits, 32),
                              lambda a, b, c, m=_m, n=_bits: ((a << (b & (n - 1))) & m, (a << (b & (n - 1))) & m != 0))
    SALU[f"s_lshr_{_sfx}"] = (_bits, (_bits, 32), lambda a, b, c, n=_bits: (a >> (b & (n - 1)), a >> (b & (n - 1)) != 0))
    _sgn = _s32 if _bits == 32 else _s64
    SALU[f"s_ashr_i{_bits}"] = (_bits, (_bits, 32),
                                lambda a, b, c, m=_m, n=_bits, s=_sgn: ((s(a) >> (b & (n - 1))) & m,
                                                                         (s(a) >> (b & (n - 1))) & m != 0))
SALU["s_mul_i32"] = (32, (32, 32), lambda a, b, c: ((a * b) & _U32, None))

#: s_cmp_*: (source bits, signed, fn)
SCMP = {}
for _t, _bits, _signed in (("i32", 32, True), ("u32", 32, False), ("u64", 64, False)):
    for _op, _f in (("eq", lambda a, b: a == b), ("lg", lambda a, b: a != b), ("gt", lambda a, b: a > b),
                    ("ge", lambda a, b: a >= b), ("lt", lambda a, b: a < b), ("le", lambda a, b: a <= b)):
        if _bits == 64 and _op not in ("eq", "lg"):
            continue
        SCMP[f"s_cmp_{_op}_{_t}"] = (_bits, _signed, _f)
SCMP["s_bitcmp0_b32"] = (32, False, lambda a, b: (a >> (b & 31)) & 1 == 0)
SCMP["s_bitcmp1_b32"] = (32, False, lambda a, b: (a >> (b & 31)) & 1 == 1)
SCMP["s_bitcmp0_b64"] = (64, False, None)
SCMP["s_bitcmp1_b64"] = (64, False, None)
