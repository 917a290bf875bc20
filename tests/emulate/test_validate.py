"""The emulator against independent results: kernels written for this test
(tests/emulate/data/emu_kernels.hip) and rocPRIM's block-level reduce, scan
and radix sort, compiled by Debian's hipcc for gfx1010 and gfx1030
(data/build.sh), run in kpatch.emulate on random inputs; every output must
equal what numpy computes from the same inputs, for both builds.  The two
builds then give byte-identical outputs.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from kpatch.emulate import run

DATA = os.path.join(os.path.dirname(__file__), "data")
TARGETS = ("gfx1010", "gfx1030")


def code(target: str) -> bytes:
    with open(os.path.join(DATA, f"emu_kernels.{target}.hsaco"), "rb") as f:
        return f.read()


def wrap32(x) -> np.ndarray:
    return (np.asarray(x, dtype=object).astype(np.int64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32) \
        if np.asarray(x).dtype == object else (np.asarray(x).astype(np.int64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def int_inputs(n: int, seed: int):
    rng = np.random.default_rng(seed)
    a = rng.integers(-2 ** 31, 2 ** 31, n, dtype=np.int64).astype(np.int32)
    b = rng.integers(-2 ** 31, 2 ** 31, n, dtype=np.int64).astype(np.int32)
    b[:16] = 0
    b[16:80] = rng.integers(-40, 40, 64)
    a[80:90] = -2 ** 31
    b[80:85] = -1
    return a, b


def expected_int(a, b):
    x, y = a.astype(np.int64), b.astype(np.int64)
    ux, uy = x & 0xFFFFFFFF, y & 0xFFFFFFFF
    safe = np.where(y == 0, 1, y)
    q = np.where(y == 0, 0, np.sign(x) * np.sign(safe) * (np.abs(x) // np.abs(safe)))
    r = np.where(y == 0, 0, x - q * safe)
    uq = np.where(uy == 0, 0, ux // np.where(uy == 0, 1, uy))
    popc = np.array([bin(int(v)).count("1") for v in ux])
    clz = np.array([32 - int(v).bit_length() for v in ux])
    return [x + y, x - y, x * y, q, r, uq, x >> (y & 31), ux >> (uy & 31), x << (y & 31),
            np.minimum(x, y), np.maximum(x, y), popc, clz, (ux * uy) >> 32, x ^ (y | 0x0F0F), (x * y) >> 32]


@pytest.mark.parametrize("target", TARGETS)
def test_int_ops(target):
    n = 300  # not a multiple of the workgroup: the last wave is partial
    a, b = int_inputs(n, 1)
    out = np.zeros(16 * n, np.int32)
    r = run(code(target), "emu_int_ops", [a, b, out, n], (512,), (256,))
    got = r.array(2).reshape(16, n)
    for k, e in enumerate(expected_int(a, b)):
        assert (got[k] == wrap32(e)).all(), f"row {k}"


@pytest.mark.parametrize("target", TARGETS)
def test_i64_ops(target):
    n = 64
    rng = np.random.default_rng(2)
    a = rng.integers(-2 ** 63, 2 ** 63, n, dtype=np.int64)
    b = rng.integers(-2 ** 63, 2 ** 63, n, dtype=np.int64)
    out = np.zeros(6 * n, np.int64)
    r = run(code(target), "emu_i64_ops", [a, b, out, n], (64,), (64,))
    got = r.array(2).reshape(6, n)
    with np.errstate(over="ignore"):
        exp = [a + b, a - b, a * b, a >> (b & 63), (a.view(np.uint64) >> (b & 63).astype(np.uint64)).view(np.int64),
               np.minimum(a, b)]
    for k, e in enumerate(exp):
        assert (got[k] == e).all(), f"row {k}"


def f32_inputs(n, seed):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal(n) * 100).astype(np.float32)
    b = (rng.standard_normal(n) * 10).astype(np.float32)
    c = (rng.standard_normal(n)).astype(np.float32)
    a[:4] = [0.0, -0.0, 1e-40, 3.0]  # a denormal among them
    b[:4] = [1.0, 2.0, 3.0, 1e-39]
    return a, b, c


def exact_fma(a, b, c):
    from fractions import Fraction
    return np.array([float(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))) for x, y, z in zip(a, b, c)],
                    np.float64).astype(np.float32)


@pytest.mark.parametrize("target", TARGETS)
def test_float_ops(target):
    n = 256
    a, b, c = f32_inputs(n, 3)
    out = np.zeros(12 * n, np.float32)
    r = run(code(target), "emu_float_ops", [a, b, c, out, n], (256,), (256,))
    got = r.array(3).reshape(12, n)
    with np.errstate(all="ignore"):
        exp = [a + b, exact_fma(a, b, -c), exact_fma(a, b, c),  # hipcc contracts x*y-z (-ffp-contract=fast)
                np.fmin(a, b), np.fmax(a, c),
               a.astype(np.int32).astype(np.float32), np.floor(b), np.abs(c) * np.float32(-2.0),
               np.where(a < b, c, a), (np.abs(b) * np.float32(100)).astype(np.uint32).astype(np.float32),
               a / b, np.trunc(c) + np.ceil(a)]
    for k, e in enumerate(exp):
        e = np.asarray(e, np.float32)
        assert (got[k].view(np.uint32) == e.view(np.uint32)).all(), \
            f"row {k}: {got[k][got[k] != e][:4]} vs {e[got[k] != e][:4]}"


@pytest.mark.parametrize("target", TARGETS)
def test_half_ops(target):
    n = 128
    rng = np.random.default_rng(4)
    a = (rng.standard_normal(2 * n) * 4).astype(np.float16)
    b = (rng.standard_normal(2 * n) * 4).astype(np.float16)
    out = np.zeros(5 * 2 * n, np.float16)
    r = run(code(target), "emu_half_ops", [a, b, out, n], (128,), (128,))
    got = r.array(2).reshape(5, n, 2)
    x, y = a.reshape(n, 2), b.reshape(n, 2)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    lo, hi = x[:, 0], y[:, 1]
    exp = [x + y, x * y, (x64 * y64 + x64).astype(np.float16),
           np.stack([lo - hi, lo * hi], 1),
           np.stack([(lo.astype(np.float32) * np.float32(3)).astype(np.float16),
                     (hi.astype(np.float32) + np.float32(1)).astype(np.float16)], 1)]
    for k, e in enumerate(exp):
        assert (got[k].view(np.uint16) == np.asarray(e, np.float16).view(np.uint16)).all(), f"row {k}"


@pytest.mark.parametrize("target", TARGETS)
def test_rocprim_block_reduce(target):
    blocks = 2
    rng = np.random.default_rng(5)
    x = rng.integers(-10 ** 6, 10 ** 6, 256 * blocks).astype(np.int32)
    out = np.zeros(2 * blocks, np.int32)
    r = run(code(target), "emu_rp_block_reduce", [x, out], (256 * blocks,), (256,))
    got = r.array(1).reshape(blocks, 2)
    xs = x.reshape(blocks, 256)
    assert (got[:, 0] == xs.sum(1)).all()
    assert (got[:, 1] == xs.max(1)).all()


@pytest.mark.parametrize("target", TARGETS)
def test_rocprim_block_scan(target):
    rng = np.random.default_rng(6)
    x = rng.integers(-1000, 1000, 512).astype(np.int32)
    incl = np.zeros(512, np.int32)
    excl = np.zeros(512, np.int32)
    r = run(code(target), "emu_rp_block_scan", [x, incl, excl], (256,), (256,))
    assert (r.array(1) == np.cumsum(x)).all()
    assert (r.array(2) == np.concatenate([[0], np.cumsum(x)[:-1]])).all()


@pytest.mark.parametrize("target", TARGETS)
def test_rocprim_block_radix_sort(target):
    rng = np.random.default_rng(7)
    k = rng.integers(0, 2 ** 32, 1024, dtype=np.uint64).astype(np.uint32)
    k[:100] = k[100:200]  # duplicates: the sort is stable
    v = np.arange(1024, dtype=np.int32)
    ko = np.zeros(1024, np.uint32)
    vo = np.zeros(1024, np.int32)
    r = run(code(target), "emu_rp_block_sort", [k, ko, v, vo], (256,), (256,))
    order = np.argsort(k, kind="stable")
    assert (r.array(1) == k[order]).all()
    assert (r.array(3) == v[order]).all()


@pytest.mark.parametrize("target", TARGETS)
def test_rocprim_warp(target):
    rng = np.random.default_rng(8)
    f = rng.integers(-100, 100, 256).astype(np.float32)  # integers: the sum is exact in any order
    i = rng.integers(-1000, 1000, 256).astype(np.int32)
    fs = np.zeros(8, np.float32)
    sc = np.zeros(256, np.int32)
    r = run(code(target), "emu_rp_warp", [f, i, fs, sc], (256,), (256,))
    assert (r.array(2) == f.reshape(8, 32).sum(1)).all()
    assert (r.array(3) == np.cumsum(i.reshape(8, 32), 1).reshape(-1)).all()


KERNEL_CASES = {
    "emu_int_ops": lambda: (lambda a, b: [a, b, np.zeros(16 * 300, np.int32), 300])(*int_inputs(300, 9)),
    "emu_float_ops": lambda: (lambda a, b, c: [a, b, c, np.zeros(12 * 256, np.float32), 256])(*f32_inputs(256, 9)),
    "emu_rp_block_sort": lambda: [np.random.default_rng(9).integers(0, 2 ** 32, 1024, dtype=np.uint64).astype(np.uint32),
                                  np.zeros(1024, np.uint32), np.arange(1024, dtype=np.int32), np.zeros(1024, np.int32)],
}


@pytest.mark.parametrize("kernel", sorted(KERNEL_CASES))
def test_builds_agree(kernel):
    """gfx1010 and gfx1030 builds of the same source write the same bytes."""
    outs = []
    for t in TARGETS:
        args = KERNEL_CASES[kernel]()
        r = run(code(t), kernel, args, (256 if kernel != "emu_int_ops" else 512,), (256,))
        outs.append([r.array(i).tobytes() for i, a in enumerate(args) if isinstance(a, np.ndarray)])
    assert outs[0] == outs[1]


# ---- rocPRIM's device reduce (the real library kernels of tests/fixtures/bin/rocprim) ----

ROCPRIM = os.path.join(os.path.dirname(__file__), "..", "fixtures", "bin", "rocprim")
_TYPES = {"EiEE": np.int32, "EfEE": np.float32, "EdEE": np.float64, "EyEE": np.uint64}


def rocprim_reduce_kernels(target: str):
    from kpatch.codeobject import CodeObject
    with open(os.path.join(ROCPRIM, f"rocprim_algos.{target}.hsaco"), "rb") as f:
        data = f.read()
    names = [k.name for k in CodeObject.from_bytes(data).kernels if "19block_reduce_kernel" in k.name]
    return data, names


@pytest.mark.parametrize("target", TARGETS)
def test_rocprim_device_reduce(target):
    """rocprim::reduce's block_reduce_kernel (int, float, double, unsigned long
    long; plus and maximum; with and without an initial value) on one
    workgroup of 256 covering 1500 items, as rocprim::reduce launches it for
    small inputs: output[0] is the reduction numpy computes.  Floats hold
    integers, so the sum is exact in any order."""
    data, names = rocprim_reduce_kernels(target)
    assert len(names) == 16
    rng = np.random.default_rng(10)
    for name in names:
        ty = next(t for k, t in _TYPES.items() if k in name)
        x = rng.integers(-1000, 1000, 1500).astype(ty)
        init = ty(5)
        out = np.zeros(4, ty)
        r = run(data, name, [x, len(x), out, init.tobytes(), b"\0"], (256,), (256,))
        exp = x.sum(dtype=ty) if "4plus" in name else x.max()
        if "ILb1E" in name:
            exp = exp + init if "4plus" in name else max(exp, init)
        assert r.array(2)[0] == exp, name


# ---- wave64 (OpenCL, -mwavefrontsize64: 64-bit EXEC/VCC, s_*_b64 mask operations) ----

def w64(target: str) -> bytes:
    with open(os.path.join(DATA, f"emu_w64.{target}.hsaco"), "rb") as f:
        return f.read()


@pytest.mark.parametrize("target", TARGETS)
def test_wave64(target):
    assert __import__("kpatch.codeobject", fromlist=["CodeObject"]).CodeObject.from_bytes(
        w64(target)).kernel("w64_ops").descriptor.wavefront_size == 64
    n = 200  # a partial last wave
    a, b = int_inputs(n, 11)
    out = np.zeros(2 * n, np.int32)
    r = run(w64(target), "w64_ops", [a, b, out, n], (256,), (128,))
    x, y = a.astype(np.int64), b.astype(np.int64)
    d = y | 1
    q = np.sign(x) * np.sign(d) * (np.abs(x) // np.abs(d))
    e0 = q + np.where(x > y, 3, -4)
    rem = x - np.trunc(x / 1000).astype(np.int64) * 1000
    rem = np.fmod(x, 1000)
    e1 = np.where(rem > 500, x * 3, y - x)
    got = r.array(2).reshape(2, n)
    assert (got[0] == wrap32(e0)).all() and (got[1] == wrap32(e1)).all()

    x = np.random.default_rng(12).integers(-1000, 1000, 512).astype(np.int32)
    out = np.zeros(2, np.int32)
    r = run(w64(target), "w64_reduce", [x, out], (512,), (256,))
    assert (r.array(1) == x.reshape(2, 256).sum(1)).all()

    sums = np.zeros(4, np.int32)
    scan = np.zeros(256, np.int32)
    x = x[:256].copy()
    r = run(w64(target), "w64_subgroup", [x, sums, scan], (256,), (256,))
    assert (r.array(1) == x.reshape(4, 64).sum(1)).all()
    assert (r.array(2) == np.cumsum(x.reshape(4, 64), 1).reshape(-1)).all()


@pytest.mark.parametrize("target", TARGETS)
def test_private_memory_and_calls(target):
    n = 100
    x = np.random.default_rng(13).integers(-1000, 1000, n).astype(np.int32)
    out = np.zeros(64, np.int32)
    r = run(code(target), "emu_private_call", [x, out, n], (64,), (64,))
    i = np.arange(64)
    buf = x[(i[:, None] * 16 + np.arange(16)) % n]
    idx = x[i % n] & 15
    assert (r.array(1) == buf[i, idx] * 3 + buf[i, (idx + 3) & 15]).all()
