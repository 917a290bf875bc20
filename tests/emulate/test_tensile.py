"""Tensile's assembly GEMM kernels (rocBLAS 4.4.1, Debian unstable's
librocblas4) under ``verify --emulate`` with the tensile-gemm recipe
(kpatch/emulate/tensile.py).

The recipe is checked independently: the ORIGINAL kernel, run on the
recipe's arguments, must compute numpy's alpha * A @ B + beta * C (in
float64 / int64, rounded once to D's type) for each covered data type,
over full and edge tiles and a summation tail.  A kernel whose names do
not match what the recipe expects gets no arguments ("not verified"), and a
wrong instruction in the kernel makes the check DIFFERENT.  The DS d16
forms these kernels need are checked on tests/emulate/data/ds_d16_run.s
against the ISA's definition computed here with numpy.

Without the rocBLAS library (tools/fetch_sid.sh) the real-kernel tests are skipped.
"""

from __future__ import annotations

import glob
import os
import re

import numpy as np
import pytest

from conftest import ROCBLAS_LIBRARY
from kpatch.codeobject import CodeObject
from kpatch.emulate import tensile
from kpatch.emulate.verify import (DIFFERENT, EQUAL, GUARD_BYTES, CannotSynthesise, _execute,
                                   synthesise, verify_kernel)
from kpatch.isa import decode
from tests.emulate.common import assemble, read, with_field

LIBRARY = ROCBLAS_LIBRARY


def library_file(kind: str) -> str:
    found = glob.glob(os.path.join(LIBRARY, f"TensileLibrary_Type_{kind}_Cijk_Dijk_gfx1030.co"))
    if not found:
        pytest.skip(f"rocBLAS library not fetched ({LIBRARY}: run tools/fetch_sid.sh)")
    return found[0]


def smallest_kernel(data: bytes, types: str, gb: bool = False):
    """The strided-batched (or general-batched) GlobalSplitU 1 kernel of ``types`` with the smallest macro tile."""
    ks = [k for k in CodeObject(data).kernels if re.match(rf"Cijk_A..k_B..k_{types}_{'GB_' if gb else ''}MT", k.name)
          and "_GSU1_" in k.name]
    assert ks, types
    return min(ks, key=lambda k: (tensile.parse(k.name).mt0 * tensile.parse(k.name).mt1, k.name))


# (object, type code, general batched): one object per covered data type; the
# general-batched kernels (arrays of pointers, element offsets) of two
TYPES = [("SS_Contraction_l_Alik_Bjlk", "SB", False), ("HH_Contraction_l_Ailk_Bjlk", "HB", False),
         ("HH_HPA_Contraction_l_Alik_Bjlk", "HHS_BH", False), ("I8I_HPA_Contraction_l_Ailk_Bljk", "I8II_BH", False),
         ("SS_Contraction_l_Alik_Bjlk", "SB", True), ("HH_Contraction_l_Ailk_Bjlk", "HB", True)]


@pytest.mark.parametrize("kind,types,gb", TYPES)
def test_the_original_kernel_computes_numpys_gemm(kind, types, gb):
    """Runs 1 and 2: two and three tiles in I with an edge tile in I and J,
    a summation tail (K = 2 DU + 1, 2 DU + 5), beta 3 and 0."""
    data = read(library_file(kind))
    k = smallest_kernel(data, types, gb)
    kk = tensile.parse(k.name)
    for run in (1, 2):
        plan = synthesise(k.metadata, run, 0, k.name)
        assert plan.recipe == "tensile-gemm"
        image, instructions, _, _ = _execute(data, k.name, plan, 0, None, limit=2_000_000)
        assert not isinstance(image, Exception), image
        # the recipe's problem again, from the same generator state synthesise gave it
        p = tensile.problem(kk, plan.grid[0] // plan.block[0], run, np.random.default_rng(0 + 7919 * run))
        start = GUARD_BYTES + (tensile.GB_OFFSETS["D"] * p.d.itemsize if gb else 0)
        d = dict(image)["arg2+0>0" if gb else "arg2+0"][start:start + p.d.nbytes]
        got, want = p.result(bytes(d), kk), p.expected(kk)
        assert got.shape == (p.i, p.j) and np.array_equal(got, want), (k.name, run, np.argwhere(got != want)[:4])


def test_a_kernel_whose_arguments_differ_is_not_verified():
    """A Tensile kernel with an argument renamed, or whose name says another
    argument list (a general-batched name on a strided kernel's arguments),
    gets no arguments: not verified, never a guess."""
    data = read(library_file("HH_Contraction_l_Ailk_Bjlk"))
    k = smallest_kernel(data, "HB")
    md = dict(k.metadata)
    md[".args"] = [dict(a, **{".name": "SizesSumX"}) if a.get(".name") == "SizesSum" else a for a in md[".args"]]
    with pytest.raises(CannotSynthesise, match="recipe tensile-gemm does not hold"):
        synthesise(md, 0, 0, k.name)
    with pytest.raises(CannotSynthesise, match="recipe tensile-gemm does not hold"):
        synthesise(k.metadata, 0, 0, k.name.replace("_HB_", "_HB_GB_"))


def mutate(data: bytes, kernel: str, pick, change, nth: int = 0) -> bytes:
    """``data`` with the ``nth`` gfx1030 instruction of ``kernel`` that ``pick``
    accepts (-1: the last) replaced by ``change(instruction)`` (Tensile's kernel
    symbols have size 0: the code is the function extent, up to the next symbol)."""
    co = CodeObject.from_bytes(data)
    k, ext = co.kernel(kernel), co.function_extent(kernel)
    off0 = k.code_offset
    insts = decode(co.data[off0:off0 + ext.size], "gfx1030", base_address=ext.start)
    inst = [i for i in insts if pick(i)][nth]
    new = change(inst)
    assert len(new) == inst.size and new != inst.raw
    off = off0 + (inst.address - ext.start)
    return data[:off] + new + data[off + len(new):]


def test_a_wrong_instruction_is_different():
    """The kernel against itself is equal with the recipe's inputs; with its
    first multiply-add's B register changed (vN -> vN^1), or its last store's data
    register (v -> v+1), it is DIFFERENT."""
    from kpatch.isa import formats as F
    data = read(library_file("SS_Contraction_l_Alik_Bjlk"))
    k = smallest_kernel(data, "SB")
    v = verify_kernel(data, data, k.name, runs=1, patched_target="gfx1030")
    assert v.status == EQUAL and v.recipe == "tensile-gemm", v.detail
    bad = mutate(data, k.name, lambda i: i.mnemonic == "v_fmac_f32_e32",
                 lambda i: with_field(i, F.VOP2, "vsrc1", i.field("vsrc1") ^ 1))
    v = verify_kernel(data, bad, k.name, runs=1, patched_target="gfx1030")
    assert v.status == DIFFERENT and "arg2+0" in v.detail, v.detail
    # the last store (runs 0-2 take the full/edge x beta/no-beta store paths; the first
    # store group of this kernel is on a path none of them takes)
    bad = mutate(data, k.name, lambda i: i.mnemonic == "buffer_store_dword",
                 lambda i: with_field(i, F.MUBUF, "vdata", i.field("vdata") + 1), nth=-1)
    v = verify_kernel(data, bad, k.name, runs=3, patched_target="gfx1030")
    assert v.status == DIFFERENT and "arg2+0" in v.detail, v.detail


def test_small_magic_number_divides():
    """Tensile's smallMagicNumber m(x) = 2^31 / x + 1: (n * m) >> 31 == n // x
    for the work-group counts a kernel divides by it."""
    for x in range(1, 17):
        m = tensile.small_magic_number(x)
        n = np.arange(0, 4096, dtype=np.uint64)
        assert ((n * np.uint64(m)) >> np.uint64(31) == n // np.uint64(x)).all(), x


def test_ds_d16_forms_match_the_isa(tmp_path):
    from kpatch.emulate.launch import run
    src = assemble(tmp_path, "ds_d16_run")
    rng = np.random.default_rng(3)
    buf = np.zeros(512, np.uint32)
    buf[:64] = rng.integers(0, 1 << 32, 64, dtype=np.uint64).astype(np.uint32)
    out = run(read(src), "ds16_run", [buf.copy()], (32,), (32,)).array(0)
    a, b = buf[:32].astype(np.int64), buf[32:64].astype(np.int64)
    byte = lambda x, i: (x >> (8 * i)) & 0xFF  # noqa: E731
    sext16 = lambda x: np.where(x & 0x80, x | 0xFF00, x)  # noqa: E731
    lo, hi = b & 0xFFFF, b & 0xFFFF0000
    want = [
        (a & 0x00FF0000) | (byte(b, 2) << 24) | (b >> 16),  # b16_d16_hi to the low short, b8_d16_hi to byte 3
        ((a >> 16) << 16) | lo,  # u16_d16_hi of a's high short
        hi | byte(a, 1),  # u8_d16
        (sext16(byte(a, 3)) << 16) | lo,  # i8_d16_hi
        hi | (a & 0xFFFF),  # u16_d16
        (byte(a, 2) << 16) | lo,  # u8_d16_hi
        hi | sext16(byte(a, 1)),  # i8_d16
    ]
    for k, w in enumerate(want):
        assert (out[64 + 32 * k:96 + 32 * k] == w.astype(np.uint32)).all(), k


def fallback_file(kind: str) -> str:
    found = glob.glob(os.path.join(LIBRARY, f"TensileLibrary_Type_{kind}_Cijk_Dijk_fallback_gfx1030.hsaco"))
    if not found:
        pytest.skip(f"rocBLAS library not fetched ({LIBRARY}: run tools/fetch_sid.sh)")
    return found[0]


@pytest.mark.parametrize("kind", ["DD_Contraction_l_Alik_Bljk", "HH_HPA_Contraction_l_Alik_Bjlk",
                                  "I8I_HPA_Contraction_l_Ailk_Bljk", "CC_Contraction_l_AlikC_Bljk",
                                  "ZZ_Contraction_l_Ailk_BjlkC", "BB_HPA_Contraction_l_Alik_Bjlk"])
def test_the_original_source_kernels_compute_numpys_gemm(kind):
    """Tensile's HIP source kernels (the fallback objects; D, C, A, B as global
    buffers, arrays of pointers when general-batched), each launched with the
    workgroup its name gives (WG8_8_1: 64, not the 256 of its launch bounds); complex
    types with a conjugated operand (AlikC, BjlkC: numpy's conj), bfloat16 (rounded to
    nearest even from the exact result, compared by value: -0 == 0 where beta is 0)."""
    data = read(fallback_file(kind))
    # GlobalSplitU 1: a kernel with GSU > 1 runs its first summation split only (the grid's one
    # workgroup in y), a part of the GEMM
    ks = [k for k in CodeObject(data).kernels if k.name.startswith("Cijk_") and "_GSU1_" in k.name]
    assert ks
    for k in ks[:4]:
        kk, gb = tensile.parse(k.name), "_GB_" in k.name
        plan = synthesise(k.metadata, 2, 0, k.name)
        assert plan.recipe == "tensile-gemm-source" and plan.block == tensile.launch_block(k.name, k.metadata)
        image, _, _, _ = _execute(data, k.name, plan, 0, None, limit=2_000_000)
        assert not isinstance(image, Exception), image
        p = tensile.problem(kk, plan.grid[0] // plan.block[0], 2, np.random.default_rng(2 * 7919))
        start = GUARD_BYTES + (tensile.GB_OFFSETS["D"] * p.d.itemsize if gb else 0)
        d = dict(image)["arg0>0" if gb else "arg0"][start:start + p.d.nbytes]
        got, want = p.result(bytes(d), kk), p.expected(kk)
        assert np.array_equal(got, want), (k.name, np.argwhere(got != want)[:4])


def test_private_memory_through_the_private_segment_buffer(tmp_path):
    """A MUBUF spill through the private segment buffer resource the
    dispatch gives (s[0:3], its base plus the wave offset) reaches the
    lane's private memory (Tensile's bf16 GSU kernels spill this way); the
    resource's base is 48 bits, so the sentinel base must fit in them."""
    from kpatch.emulate.launch import run
    src = assemble(tmp_path, "scratch_buffer_run")
    buf = np.zeros(64, np.uint32)
    buf[:32] = np.random.default_rng(4).integers(0, 1 << 31, 32)
    out = run(read(src), "scratch_run", [buf.copy()], (32,), (32,)).array(0)
    assert (out[32:64] == buf[:32] + 1).all()


def test_a_one_wide_macro_tile_gets_a_problem_of_one_tile():
    """MT64x1 (Tensile's GEMV-like kernels): J is never 0 and I's last tile never empty."""
    k = tensile.parse("Cijk_Ailk_Bjlk_BSS_BH_MT64x1x64_SE_GSU1_ISA000_SU0_SUS0_WG64_1_1_WGM1")
    for run in range(3):
        p = tensile.problem(k, 1 + run % 3, run, np.random.default_rng(run))
        assert p.j == 1 and -(-p.i // 64) == 1 + run % 3 and p.i > 0
    k = tensile.parse("Cijk_Ailk_Bjlk_SB_MT1x16x8_SE_GSU1_ISA000_SU0_SUS0_WG1_16_1_WGM1")
    assert tensile.problem(k, 3, 2, np.random.default_rng(0)).i == 3


def test_global_split_u_kernels_run_every_split_and_the_splits_sum_to_the_gemm():
    """GlobalSplitU > 1 (MultipleBuffer, Tensile's HIP source kernels): the launch has GSU
    workgroups in y, each writes its partial sum (no alpha, no beta) into its own packed
    I x J slice of the compute-type workspace, and the slices add up to numpy's A @ B
    (runs 1 and 2: a summation tail, which only one split takes)."""
    found = []
    for path in sorted(glob.glob(os.path.join(LIBRARY, "TensileLibrary_Type_*_fallback_gfx1030.hsaco"))):
        data = read(path)
        ks = [k for k in CodeObject(data).kernels if re.search(r"_GSU([2-9]|\d\d+)_GSUAMB_", k.name)]
        found += [(data, k) for k in ks[:1]]
        if len(found) == 2:
            break
    if not found:
        pytest.skip(f"rocBLAS library not fetched ({LIBRARY}: run tools/fetch_sid.sh)")
    for data, k in found:
        kk = tensile.parse(k.name)
        assert kk.workspace and kk.gsu > 1
        for run in (1, 2):
            plan = synthesise(k.metadata, run, 0, k.name)
            assert plan.recipe == "tensile-gemm-source" and plan.grid[1] == kk.gsu * plan.block[1], plan.grid
            image, _, _, _ = _execute(data, k.name, plan, 0, None, limit=4_000_000)
            assert not isinstance(image, Exception), image
            p = tensile.problem(kk, plan.grid[0] // plan.block[0], run, np.random.default_rng(run * 7919))
            d = dict(image)["arg0"][GUARD_BYTES:GUARD_BYTES + p.d.nbytes]  # a plain pointer, even when _GB_
            ws = np.frombuffer(bytes(d), np.float32).reshape(kk.gsu, p.j, p.i)
            am = tensile.decode(p.matrix_a(kk), tensile.TYPES[kk.types][0])
            bm = tensile.decode(p.matrix_b(kk), tensile.TYPES[kk.types][0])
            assert tensile.TYPES[kk.types][2][0] is np.float32  # the compute type of these kernels
            want = am @ bm  # numpy, float64
            assert np.array_equal(ws.astype(np.float64).sum(axis=0).T, want), (k.name, run)
            # the first split alone is not the GEMM (its share of the unroll loop only)
            assert not np.array_equal(ws[0].astype(np.float64).T, want), (k.name, run)


# (object, kernel name pattern): the SingleBuffer GSU kernel and MultipleBuffer-named ones,
# strided and general batched, all assembly
GSU_ASM = [("SS_Contraction_l_Ailk_Bljk", r"_SB_MT.*_GSU4_GSUASB_"),
           ("SS_Contraction_l_Ailk_Bjlk", r"_SB_MT.*_GSU4_GSUAMB_"),
           ("SS_Contraction_l_Alik_Bljk", r"_SB_GB_MT.*_GSU4_GSUAMB_")]


@pytest.mark.parametrize("kind,pattern", GSU_ASM)
def test_assembly_global_split_u_kernels_add_alpha_ab_into_d_over_every_split(kind, pattern):
    """An assembly kernel with GlobalSplitU 4 runs GSU workgroups in y, each adding alpha times
    its share of the summation into D with buffer_atomic_cmpswap loops (beta is a separate
    kernel's): D ends as its initial value + alpha * A @ B, computed here by numpy in float64,
    over full and edge tiles and a summation tail; C is not read into it."""
    data = read(library_file(kind))
    ks = [k for k in CodeObject(data).kernels if re.search(pattern, k.name)]
    assert ks, pattern
    k = min(ks, key=lambda k: (tensile.parse(k.name).mt0 * tensile.parse(k.name).mt1, k.name))
    kk = tensile.parse(k.name)
    assert kk.atomic and not kk.workspace
    gb = kk.batched_pointers
    for run in (0, 1, 2):
        plan = synthesise(k.metadata, run, 0, k.name)
        assert plan.recipe == "tensile-gemm" and plan.grid[1] == kk.gsu, plan.grid
        image, _, _, _ = _execute(data, k.name, plan, 0, None, limit=2_000_000)
        assert not isinstance(image, Exception), image
        p = tensile.problem(kk, plan.grid[0] // plan.block[0], run, np.random.default_rng(0 + 7919 * run))
        start = GUARD_BYTES + (tensile.GB_OFFSETS["D"] * p.d.itemsize if gb else 0)
        d = dict(image)["arg2+0>0" if gb else "arg2+0"][start:start + p.d.nbytes]
        got = p.result(bytes(d), kk).astype(np.float64)
        am, bm = p.matrix_a(kk).astype(np.float64), p.matrix_b(kk).astype(np.float64)
        d0 = p.d[:p.ldc * p.j].reshape(p.j, p.ldc).T[:p.i, :].astype(np.float64)
        assert np.array_equal(got, d0 + p.alpha * (am @ bm)), (k.name, run)
        assert np.array_equal(got, p.expected(kk).astype(np.float64)), (k.name, run)
