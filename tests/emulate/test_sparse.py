"""The rocsparse recipe (kpatch/emulate/sparse.py): parameter types read from
rocSPARSE kernels' mangled names, index arrays valid as CSR/COO row pointers
and indices at once, rocSPARSE enums given valid values.

The demangler is checked against llvm-cxxfilt-16 on real rocSPARSE 5.3
kernel names (librocsparse.so.0.1 of Debian bookworm).  The kernels run are
rocSPARSE-like ones written for this test (data/sparse_kernels.hip, built by
data/build.sh with Debian's hipcc): their outputs in the emulator, on the
ORIGINAL gfx1030 code with the synthesised inputs, must equal what numpy
computes from the same inputs; the gfx1010 build of the same source is
proven equal to it, and a mutant (one store's data register changed) is
DIFFERENT.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from kpatch.emulate import recipes, sparse
from kpatch.emulate.verify import (DIFFERENT, EQUAL, GUARD_BYTES, CannotSynthesise, _execute, synthesise,
                                   verify_kernel)

HERE = os.path.dirname(__file__)
OBJ = {t: os.path.join(HERE, "data", f"sparse_kernels.{t}.hsaco") for t in ("gfx1030", "gfx1010")}
AXPYI = "_ZL12axpyi_kernelILj256EifEvT0_T1_PKS1_PKS0_PS1_21rocsparse_index_base_"
GTHR = "_ZL11gthr_kernelILj256EldEvT0_PKT1_PS1_PKS0_21rocsparse_index_base_"
SCTR = "_ZL11sctr_kernelILj256EifEvT0_PKT1_PKS0_PS1_21rocsparse_index_base_"
CSRMV = "_ZL19csrmv_scalar_kernelILj256EiifEvT1_T2_PKT0_PKS0_PKS1_S8_S1_PS1_21rocsparse_index_base_"

#: Real rocSPARSE 5.3 kernel names (librocsparse.so.0.1, Debian bookworm).
REAL = [
    "_ZL12axpyi_kernelILj256EifPKfEvT0_T2_PKT1_PKS2_PS4_21rocsparse_index_base_",
    "_ZL19gebsrmvn_2xn_kernelILj128ELj15ELj64E21rocsparse_complex_numIfES1_Evi20rocsparse_direction_T3_PKiS5_"
    "PKT2_S8_S3_PS6_21rocsparse_index_base_",
    "_ZL16sddmm_csx_kernelILi512ELi1EL20rocsparse_direction_1EllfPKfEv20rocsparse_operation_S3_16rocsparse_order_"
    "S4_T3_S4_S4_T2_T5_PKT4_S3_S9_S3_S5_PS7_PKS4_PKS3_21rocsparse_index_base_PS4_",
    "_ZL16csr2dense_kernelILi16ELi32ElifEviT2_S0_PKT3_PKT1_PKS0_PS1_S4_16rocsparse_order_",
    "_ZL12csrsv_kernelILj1024ELj32ELb0Eii21rocsparse_complex_numIfEPKS1_EvT3_T5_PKT2_PKS4_PKT4_SD_PSB_PiPS4_iSG_"
    "21rocsparse_index_base_20rocsparse_fill_mode_20rocsparse_diag_type_",
    "_ZL11sctr_kernelILj512EiiEvT0_PKT1_PKS0_PS1_21rocsparse_index_base_",
]


def _text(t: sparse.Type) -> str:
    """A parameter type as llvm-cxxfilt writes it."""
    names = {("int", 1, True): "signed char", ("int", 1, False): "unsigned char", ("int", 2, True): "short",
             ("int", 2, False): "unsigned short", ("int", 4, True): "int", ("int", 4, False): "unsigned int",
             ("int", 8, True): "long", ("int", 8, False): "unsigned long"}
    if t.kind == "ptr":
        return _text(t.to) + "*"
    base = {"bool": "bool", "void": "void", "enum": t.name}.get(t.kind)
    if t.kind == "int":
        base = names[(t.kind, t.size, t.signed)]
    elif t.kind == "float":
        base = "float" if t.size == 4 else "double"
    elif t.kind == "class":
        base = t.name + (f"<{', '.join(_text(a) for a in t.args)}>" if t.args else "")
    return base + (" const" if t.const else "")


@pytest.mark.skipif(shutil.which("llvm-cxxfilt-16") is None, reason="needs llvm-cxxfilt-16")
@pytest.mark.parametrize("name", REAL + [AXPYI, CSRMV])
def test_parameters_are_llvm_cxxfilts(name):
    """Every parameter type read from the name is the one llvm-cxxfilt-16
    prints (substitutions, template parameters, const pointers, enums,
    complex class templates)."""
    out = subprocess.run(["llvm-cxxfilt-16", name], capture_output=True, text=True, check=True).stdout.strip()
    inner = out[out.rindex(">(") + 2:-1] if ">(" in out else out[out.index("(") + 1:-1]
    want = [p.strip() for p in inner.replace(", ", ",").split(",")]
    # template arguments inside a parameter (complex_num<float>) hold no comma here
    assert [_text(t) for t in sparse.parameters(name)] == want


@pytest.mark.parametrize("bad", ["_ZN9rocsparse6kernelEv", "_ZL6kernelIXadL_Z1fEEEvv", "_ZL6kernelSt4pair",
                                 "_ZL6kernelPKS3_", "_ZL6kernelDh", "not_mangled"])
def test_what_is_not_read_is_refused(bad):
    with pytest.raises(sparse.NotParsed):
        sparse.parameters(bad)


def _md(kinds):
    return {".args": [{".value_kind": k, ".size": s, ".offset": 8 * i, ".address_space": "global"}
                      for i, (k, s) in enumerate(kinds)]}


def test_a_name_that_does_not_line_up_with_the_metadata_gives_no_arguments():
    """sctr's five parameters against four explicit arguments, or an int
    where the metadata has a pointer: 'recipe rocsparse does not hold'."""
    g, b4 = ("global_buffer", 8), ("by_value", 4)
    with pytest.raises(CannotSynthesise, match="recipe rocsparse does not hold: 5 parameters"):
        synthesise(_md([b4, g, g, g]), 0, 0, SCTR)
    with pytest.raises(CannotSynthesise, match="recipe rocsparse does not hold: parameter 0"):
        synthesise(_md([g, g, g, g, b4]), 0, 0, SCTR)
    unknown = "_ZL6kernelILj64EfEvPT0_21rocsparse_spmv_stage_"
    with pytest.raises(CannotSynthesise, match="no valid values known for rocsparse_spmv_stage_"):
        synthesise(_md([g, b4]), 0, 0, unknown)


def test_index_arrays_are_row_pointers_and_indices_at_once():
    """Starting at the base, steps of 0 or 1, never past base + s - 1: a
    CSR row-pointer array (non-decreasing, ptr[0] = base, ptr[m] - base <=
    s - 1 entries) and column indices inside an s x s matrix."""
    rng = np.random.default_rng(3)
    for s, base in [(4, 0), (2, 1), (3, 1), (1, 0)]:
        a = np.frombuffer(sparse.index_array(s, base, 500, 4, rng), "<i4")
        assert a[0] == base and (np.diff(a) >= 0).all() and (np.diff(a) <= 1).all()
        assert a.min() >= base and a.max() <= base + s - 1


def _inputs(plan, image, i, dtype, n):
    """Argument i's first n elements before (from the plan) and after (from the run's image)."""
    name = f"arg{i}"
    before = next(d for nm, d in plan.buffers if nm == name)
    after = next(d for nm, d in image if nm == name)

    def read(d):
        if hasattr(d, "page"):
            raw = d.page(0).tobytes()
        elif isinstance(d, (bytes, bytearray)):
            raw = bytes(d)
        else:
            raw = np.asarray(d, np.uint8).tobytes()
        return np.frombuffer(raw[GUARD_BYTES:GUARD_BYTES + n * np.dtype(dtype).itemsize], dtype).copy()
    return read(before), read(after)


def _run(name, run):
    with open(OBJ["gfx1030"], "rb") as f:
        data = f.read()
    from kpatch.emulate.dispatch import Machine
    md = Machine(data).kernel(name).metadata
    plan = synthesise(md, run, 5, name)
    assert plan.recipe == "rocsparse"
    image = _execute(data, name, plan, 5, None)[0]
    assert not isinstance(image, Exception), image
    return plan, image


@pytest.mark.parametrize("run", [0, 1, 2])
def test_axpyi_matches_numpy(run):
    """y[x_ind[i] - base] += alpha * x_val[i] for i < nnz, with the recipe's
    nnz = s, index base run % 2 and alpha from the name's float."""
    plan, image = _run(AXPYI, run)
    nnz, alpha, base = plan.values[0], np.frombuffer(plan.values[1], "<f4")[0], plan.values[5]
    assert (nnz, base) == (sparse.SIZES[run % 4], run % 2)
    xv, _ = _inputs(plan, image, 2, "<f4", nnz)
    xi, _ = _inputs(plan, image, 3, "<i4", nnz)
    y0, y1 = _inputs(plan, image, 4, "<f4", 64)
    # one wave: every lane loads y, adds, stores; of equal indices the higher lane's store is
    # the one left (numpy's fancy assignment keeps the last too); the add may be fused (fma)
    j = xi - base
    with np.errstate(all="ignore"):
        plain, fused = y0.copy(), y0.copy()
        plain[j] = y0[j] + np.float32(alpha) * xv
        fused[j] = (y0[j].astype(np.float64) + np.float64(alpha) * xv.astype(np.float64)).astype(np.float32)
    ok = (y1.view("<u4") == plain.view("<u4")) | (y1.view("<u4") == fused.view("<u4"))
    assert ok.all(), (y1, plain, fused)
    untouched = np.setdiff1d(np.arange(64), xi - base)
    assert np.array_equal(y1[untouched], y0[untouched])


@pytest.mark.parametrize("run", [0, 1])
def test_gthr_and_sctr_match_numpy(run):
    plan, image = _run(GTHR, run)
    nnz, base = plan.values[0], plan.values[4]
    y, _ = _inputs(plan, image, 1, "<f8", 64)
    xi, _ = _inputs(plan, image, 3, "<i8", nnz)
    _, xv = _inputs(plan, image, 2, "<f8", nnz)
    assert np.array_equal(xv.view("<u8"), y[xi - base].view("<u8"))
    plan, image = _run(SCTR, run)
    nnz, base = plan.values[0], plan.values[4]
    xv, _ = _inputs(plan, image, 1, "<u4", nnz)
    xi, _ = _inputs(plan, image, 2, "<i4", nnz)
    y0, y1 = _inputs(plan, image, 3, "<u4", 64)
    want = y0.copy()
    want[xi - base] = xv  # numpy: the last of equal indices wins, as the higher lane's store does
    assert np.array_equal(y1, want)


@pytest.mark.parametrize("run", [0, 1, 2])
def test_csrmv_matches_numpy(run):
    """y = alpha * A x + beta * y with A the CSR matrix the recipe's arrays
    make (row pointers and column indices from the same construction)."""
    plan, image = _run(CSRMV, run)
    m, base = plan.values[0], plan.values[8]
    alpha, beta = (np.frombuffer(plan.values[i], "<f4")[0] for i in (1, 6))
    ptr, _ = _inputs(plan, image, 2, "<i4", m + 1)
    col, _ = _inputs(plan, image, 3, "<i4", 64)
    val, _ = _inputs(plan, image, 4, "<f4", 64)
    x, _ = _inputs(plan, image, 5, "<f4", 64)
    y0, y1 = _inputs(plan, image, 7, "<f4", m)
    assert ptr[0] == base and (col[:ptr[m] - base] - base < m).all()
    with np.errstate(all="ignore"):
        for r in range(m):
            s = np.float32(0)
            for j in range(ptr[r] - base, ptr[r + 1] - base):
                s = np.float32(s + np.float32(val[j] * x[col[j] - base]))
            want = np.float32(np.float32(alpha * s) + np.float32(beta * y0[r]))
            got = y1[r]
            # the compiler may contract to fma: allow one rounding of difference
            assert got == want or abs(float(got) - float(want)) <= 2 * np.spacing(abs(want)) or \
                (np.isnan(got) and np.isnan(want)), (r, got, want)


@pytest.mark.parametrize("name", [AXPYI, GTHR, SCTR, CSRMV])
def test_gfx1010_build_is_proven_equal_and_a_mutant_is_different(name):
    """The gfx1010 build of the same source is proven equal to the gfx1030
    one with the recipe's inputs (three runs); the gfx1010 build with its
    first global store's data register changed is DIFFERENT."""
    from kpatch.isa import formats as F
    from tests.emulate.common import mutate, with_field
    with open(OBJ["gfx1030"], "rb") as f:
        a = f.read()
    with open(OBJ["gfx1010"], "rb") as f:
        b = f.read()
    v = verify_kernel(a, b, name, runs=3, patched_target="gfx1010")
    assert v.status == EQUAL and v.recipe == "rocsparse", v.detail
    bad = mutate(b, name, lambda i: i.mnemonic.startswith("global_store"),
                 lambda i: with_field(i, F.FLAT, "data", i.field("data") + 1))
    v = verify_kernel(a, bad, name, runs=3, patched_target="gfx1010")
    assert v.status == DIFFERENT, v.detail


def test_other_families_are_not_claimed():
    """Tensile, rocPRIM, MIOpen and rocRAND names are not the rocsparse recipe's."""
    md = _md([("global_buffer", 8)])
    for name in ("_ZN7rocprim6detail18scan_digits_kernelILj6EjEEvPT0_", "naive_conv_ab_packed_fwd_nchw_float",
                 "_ZL10rocblas_fooILi1EEvPf", "Cijk_Ailk_Bljk_SB_MT64x64x8_ISA000_foo"):
        found = None
        try:
            found = recipes.find(name, md)
        except recipes.RecipeDoesNotHold:
            pass
        assert found is None or found[0].name != "rocsparse", name


@pytest.mark.parametrize("run", [0, 1])
def test_an_int_index_base_gets_the_base(run):
    """rocSPARSE 5.3's csr2dense_kernel takes its index base as a plain int
    (csr2dense_device.h: ``rocsparse_int base`` first): it gets the base the
    index arrays are shifted by, not the size every other int gets."""
    name = "_ZL16csr2dense_kernelILi16ELi32ElifEviT2_S0_PKT3_PKT1_PKS0_PS1_S4_16rocsparse_order_"
    g, b4, b8 = ("global_buffer", 8), ("by_value", 4), ("by_value", 8)
    plan = synthesise(_md([b4, b4, b4, g, g, g, g, b8, b4]), run, 0, name)
    assert plan.values[0] == run % 2 and plan.values[1] == plan.values[2] == plan.values[7] == sparse.SIZES[run]


CSRMMNT_REMAINDER = ("_ZL34csrmmnt_row_split_remainder_kernelILj256ELj32ElidPKdEvbbT2_S2_S2_S2_S2_T1_T4_PKS3_PKS2_"
                     "PKT3_SB_S2_S4_PS9_S2_16rocsparse_order_21rocsparse_index_base_")
COOMMNN_REMAINDER = ("_ZL24coommnn_atomic_remainderILj256ELj2ELb1Ei21rocsparse_complex_numIfEPKS1_EvbbT2_S4_S4_S4_"
                     "T4_PKS4_S7_PKT3_SA_S4_S4_PS8_S4_S4_16rocsparse_order_21rocsparse_index_base_")
GTSV_LBM_RHS = "_ZL19gtsv_LBM_rhs_kernelILj256ELj32ELj2E21rocsparse_complex_numIdEEviiiPKT2_S4_S4_PS2_S4_PKi"
CHECK_CSR = ("_ZL23check_matrix_csr_deviceILj256ELj32E21rocsparse_complex_numIdEliEvT3_S2_T2_PKT1_PKS3_PKS2_SA_"
             "21rocsparse_index_base_22rocsparse_matrix_type_20rocsparse_fill_mode_23rocsparse_storage_mode_"
             "P22rocsparse_data_status_")


def _md_for(name):
    """Metadata whose explicit arguments are the name's parameters (pointers global buffers)."""
    return _md([("global_buffer", 8) if t.kind == "ptr" else ("by_value", sparse._size_of(t))
                for t in sparse.parameters(name)])


@pytest.mark.parametrize("run", [0, 1, 2, 3])
@pytest.mark.parametrize("name,chunk", [(CSRMMNT_REMAINDER, 8), (COOMMNN_REMAINDER, 64)])
def test_a_remainder_kernel_starts_where_the_host_puts_it(name, chunk, run):
    """rocSPARSE 5.3's remainder kernels (csrmmnt_row_split_remainder_kernel,
    coommnn_atomic_remainder: ``for l = offset; l < n``) get the offset the
    host computes, ``main = n - n % chunk`` (rocsparse_csrmm_template_row_split.cpp:
    chunks of 8 and more; rocsparse_coomm_template_atomic.cpp: 64 and more), so
    their column loop has columns to do; n (the next int) is the size."""
    plan = synthesise(_md_for(name), run, 0, name)
    offset, n = plan.values[2], plan.values[3]
    assert n == sparse.SIZES[run]
    assert offset == n - n % chunk and offset < n


@pytest.mark.parametrize("run", [0, 1])
def test_gtsv_lbm_rows_are_padded_to_whole_blocks(run):
    """gtsv_LBM_rhs_kernel<BLOCKSIZE 256, BLOCKDIM 32, 2> does nothing unless
    ``nblocks = m_pad / BLOCKDIM`` > 0; the host pads m to a multiple of
    BLOCKDIM x BLOCKSIZE (rocsparse_gtsv.cpp), and so does the recipe; the
    other ints stay the size."""
    plan = synthesise(_md_for(GTSV_LBM_RHS), run, 0, GTSV_LBM_RHS)
    m_pad = plan.values[0]
    assert m_pad > 0 and m_pad % (256 * 32) == 0
    assert plan.values[1] == plan.values[2] == sparse.SIZES[run]


def test_a_matrix_checker_gets_values_it_must_report():
    """check_matrix_csr_device stores a status only for what is wrong
    (check_matrix_csr_device.h: record_data_status): its complex<double>
    values hold infinities and NaNs among finite numbers; a kernel that is
    not a checker keeps random values (no recipe buffer)."""
    plan = synthesise(_md_for(CHECK_CSR), 0, 0, CHECK_CSR)
    v = _buffer_head(plan, "arg3", 16 * 300).view("<f8").reshape(300, 2)
    bad = ~np.isfinite(v).all(axis=1)
    assert bad.any() and (~bad).any()
    assert np.isnan(v).any() and np.isinf(v).any()
    assert (np.abs(v[~bad]) <= 2).all()
    plan = synthesise(_md_for(CSRMMNT_REMAINDER), 0, 0, CSRMMNT_REMAINDER)
    assert hasattr(next(d for nm, d in plan.buffers if nm == "arg11"), "page")  # csr_val: the random buffer


def _buffer_head(plan, name, n):
    """The first n bytes (after the guard zone) of the plan's buffer ``name``."""
    d = next(d for nm, d in plan.buffers if nm == name)
    raw = d.page(0).tobytes() if hasattr(d, "page") else np.asarray(d, np.uint8).tobytes()
    return np.frombuffer(raw[GUARD_BYTES:GUARD_BYTES + n], np.uint8).copy()


def test_row_zero_of_an_index_array_has_an_entry():
    """Kernels that give one row to each workgroup (csrgemm's
    *_fill_block_per_row: ``row = perm[blockIdx.x + *offset]``, which is row
    0 with the recipe's arrays) write only the entries of their row: row 0
    (ptr[1] - ptr[0]) holds one entry whenever the matrix has more than one
    column to put it in."""
    rng = np.random.default_rng(0)
    for seed in range(20):
        for s, base in [(4, 0), (2, 1), (3, 1)]:
            a = np.frombuffer(sparse.index_array(s, base, 64, 8, np.random.default_rng(seed)), "<i8")
            assert a[1] - a[0] == 1
    a = np.frombuffer(sparse.index_array(1, 0, 64, 4, rng), "<i4")
    assert (a == 0).all()


# -- real rocSPARSE 5.3 kernels (librocsparse.so.0.1 of Debian bookworm, tools/fetch_corpus.sh --all) ------

ROCSPARSE = os.path.join(HERE, "..", "..", "kdb_cache", "root", "usr", "lib", "x86_64-linux-gnu",
                         "librocsparse.so.0.1")


def real_object(offset: int, size: int) -> bytes:
    """The gfx1030 code object of the offload bundle at ``offset`` (``size`` bytes) of librocsparse.so.0.1."""
    from kpatch.containers.bundle import parse_bundle
    if not os.path.exists(ROCSPARSE):
        pytest.skip(f"rocSPARSE not fetched ({ROCSPARSE}: run tools/fetch_corpus.sh --all)")
    with open(ROCSPARSE, "rb") as f:
        f.seek(offset)
        bundle = f.read(size)
    entry = next(e for e in parse_bundle(bundle) if e.target_id.endswith("gfx1030"))
    return bytes(entry.data(bundle))


def gebsrmvn_mxn(blocksize: int, r: int, c: int) -> str:
    """gebsrmvn_mxn_kernel<BLOCKSIZE, ROWBSRDIM, COLBSRDIM, float, const float*>'s name."""
    return (f"_ZL19gebsrmvn_mxn_kernelILj{blocksize}ELj{r}ELj{c}EfPKfEvi20rocsparse_direction_T3_PKiS5_PKT2_iiS8_"
            "S3_PS6_21rocsparse_index_base_")


#: The bundle of librocsparse.so.0.1 holding the float gebsrmvn_mxn_kernels (offset, size).
GEBSRMVN_BUNDLE = (367669248, 12622200)


@pytest.mark.parametrize("blocksize,r,c,direction,base", [(56, 7, 8, 1, 0), (56, 7, 8, 1, 1), (60, 5, 6, 0, 0),
                                                          (60, 5, 6, 0, 1), (60, 5, 6, 1, 1)])
def test_the_real_gebsrmvn_mxn_kernel_computes_numpys_product(blocksize, r, c, direction, base):
    """rocSPARSE 5.3's gebsrmvn_mxn_kernel (one workgroup per block row,
    launched as rocsparse_gebsrmv_template_row_block_dim_5_8.cpp does: grid
    mb, block BLOCKSIZE, row and column block dims the template's) gives y =
    alpha A x + beta y with A the r x c-block GEBSR matrix numpy builds from
    the same arrays (blocks row- or column-major by the direction), for a
    3x4-block matrix with an empty block row; <60, 5, 6> works on two blocks
    at once (NBLOCKS 2).  Not the row direction of <56, 7, 8>: its last
    reduction steps (gebsrmv_device.h, ``if(lid < 4) sdata[tid] += sdata[tid
    + 4]; __threadfence_block();`` ... ``sum = sdata[tid * COLBSRDIM]``) read
    across the two wave32 waves of the workgroup with no barrier between, so
    what rows 4-6 hold depends on the waves' schedule (a race in rocSPARSE
    5.3; its later versions put ``__syncthreads()`` there in the _16 kernel)."""
    from kpatch.emulate.launch import run
    code = real_object(*GEBSRMVN_BUNDLE)
    R, C, mb, nb = r, c, 3, 4
    rng = np.random.default_rng(direction * 2 + base)
    ptr = np.array([0, 3, 3, 5], np.int32)  # block row 1 is empty
    col = np.array([0, 2, 3, 1, 2], np.int32)
    val = rng.uniform(-1, 1, (len(col), R, C)).astype(np.float32)
    x = rng.uniform(-1, 1, nb * C).astype(np.float32)
    y = rng.uniform(-1, 1, mb * R).astype(np.float32)
    alpha, beta = np.float32(1.5), np.float32(-0.75)
    stored = val if direction == 0 else val.transpose(0, 2, 1)  # rocsparse_direction_column: blocks column-major
    a = np.zeros((mb * R, nb * C))
    for i in range(mb):
        for j in range(ptr[i], ptr[i + 1]):
            a[i * R:(i + 1) * R, col[j] * C:(col[j] + 1) * C] = val[j]
    want = alpha * (a @ x.astype(np.float64)) + beta * y.astype(np.float64)
    args = [mb, direction, np.array([alpha]), ptr + base, col + base, np.ascontiguousarray(stored).reshape(-1),
            R, C, x, np.array([beta]), y.copy(), base]
    got = run(code, gebsrmvn_mxn(blocksize, r, c), args, (mb * blocksize,), (blocksize,)).array(10)
    assert np.allclose(got, want, rtol=1e-5, atol=1e-5), np.abs(got - want).max()


#: csrmmnt_general_remainder_kernel<256, 16, long, long, float, const float*> and its bundle (offset, size).
CSRMMNT_GENERAL_REMAINDER = ("_ZL32csrmmnt_general_remainder_kernelILj256ELj16EllfPKfEvbbT2_S2_S2_S2_S2_T1_S3_S3_T4_"
                             "PKS3_PKS2_PKT3_SB_S2_S3_S4_PS9_S2_S3_16rocsparse_order_21rocsparse_index_base_")
CSRMM_BUNDLE = (422100992, 93378400)


@pytest.mark.parametrize("run", [0, 1, 2, 3])
def test_the_real_csrmmnt_general_remainder_kernel_does_every_column_with_the_recipes_ints(run):
    """With the integers the recipe gives (offset = main = 0 as
    rocsparse_csrmm_template_general.cpp computes it for n below 8, n = m =
    k = ldb = ldc = s, the run's order and index base), rocSPARSE 5.3's
    csrmmnt_general_remainder_kernel computes every column of C = alpha A B
    + beta C (B row-major with ldb, C in the order given) that numpy does,
    for a CSR matrix A built in the test; launched as the host launches it
    (grid (16 m - 1) / 256 + 1 workgroups of 256)."""
    from kpatch.codeobject import CodeObject
    from kpatch.emulate.launch import run as launch
    code = real_object(*CSRMM_BUNDLE)
    md = CodeObject(code).kernel(CSRMMNT_GENERAL_REMAINDER).metadata
    v = synthesise(md, run, 0, CSRMMNT_GENERAL_REMAINDER).values
    offset, ncol, m, n, k, ldb, ldc, order, base = (v[i] for i in (2, 3, 4, 5, 6, 15, 19, 21, 22))
    assert offset == 0 and ncol == n == m == k == ldb == ldc == sparse.SIZES[run] and base == run % 2
    rng = np.random.default_rng(run)
    dense = np.where(rng.random((m, k)) < 0.6, rng.uniform(-1, 1, (m, k)), 0).astype(np.float32)
    rows, cols = np.nonzero(dense)
    ptr = np.searchsorted(rows, np.arange(m + 1)).astype(np.int64)
    b = rng.uniform(-1, 1, (k, ldb)).astype(np.float32)
    c0 = rng.uniform(-1, 1, (n, ldc) if order == 0 else (m, ldc)).astype(np.float32)  # 0: rocsparse_order_row
    alpha, beta = np.float32(1.25), np.float32(0.5)
    prod = dense.astype(np.float64) @ b[:, :n].astype(np.float64)
    want = c0.astype(np.float64)
    if order == 0:
        want[:m, :n] = alpha * prod + beta * want[:m, :n]
    else:  # column order: C[row + col * ldc]
        want[:n, :m] = (alpha * prod + beta * want[:n, :m].T).T
    args = list(v)
    args[10], args[17] = np.array([alpha]), np.array([beta])
    args[11], args[12] = ptr + base, cols.astype(np.int64) + base
    args[13], args[14], args[18] = dense[rows, cols], b.reshape(-1), c0.reshape(-1).copy()
    args[7] = len(rows)  # nnz (the batch strides: one batch, blockIdx.y 0)
    got = launch(code, CSRMMNT_GENERAL_REMAINDER, args, (((16 * m - 1) // 256 + 1) * 256,), (256,)).array(18)
    assert np.allclose(got, want.reshape(-1), rtol=1e-5, atol=1e-6), (got, want.reshape(-1))


#: csrmvt_symm_general_kernel<256, 16, int, int, float, float> and its bundle (offset, size).
CSRMVT_SYMM = "_ZL26csrmvt_symm_general_kernelILj256ELj16EiiffEvbT2_T4_PKT1_PKS0_PKT3_S9_PS7_21rocsparse_index_base_"
CSRMV_BUNDLE = (128438272, 48351608)


@pytest.mark.parametrize("run", [0, 1, 2, 3])
def test_the_real_csrmvt_symm_kernel_adds_the_off_diagonal_entries_of_the_recipes_matrix(run):
    """rocSPARSE 5.3's csrmvt_symm_general_kernel (csrmv_symm_device.h: for
    each entry (row, col) with col != row, y[col] += alpha val x[row]) on the
    recipe's row pointers and column indices (:data:`sparse.OFF_DIAGONAL`)
    and values, x and y made here: y is numpy's; and for every s > 1 some
    entry lies off the diagonal, so y changes (with row pointers and columns
    made alike, run 0's matrix was diagonal and y stayed as it was)."""
    from kpatch.codeobject import CodeObject
    from kpatch.emulate.launch import run as launch
    code = real_object(*CSRMV_BUNDLE)
    md = CodeObject(code).kernel(CSRMVT_SYMM).metadata
    plan = synthesise(md, run, 0, CSRMVT_SYMM)
    m, base = plan.values[1], plan.values[8]
    alpha = np.frombuffer(plan.values[2], "<f4")[0]
    ptr = _buffer_head(plan, "arg3", 4 * (m + 1)).view("<i4")
    nnz = ptr[m] - base
    col = _buffer_head(plan, "arg4", 4 * max(nnz, 1)).view("<i4")[:nnz]
    assert ptr[0] == base and (np.diff(ptr) >= 0).all() and ((col >= base) & (col < base + m)).all()
    rng = np.random.default_rng(run)
    val, x, y = (rng.uniform(-1, 1, n).astype(np.float32) for n in (max(nnz, 1), m, m))
    want = y.astype(np.float64)
    for r in range(m):
        for j in range(ptr[r] - base, ptr[r + 1] - base):
            if col[j] - base != r:
                want[col[j] - base] += float(alpha) * float(val[j]) * float(x[r])
    args = list(plan.values)
    args[3], args[4], args[5], args[6], args[7] = ptr.copy(), col.copy(), val, x, y.copy()
    got = launch(code, CSRMVT_SYMM, args, plan.grid, plan.block).array(7)
    assert np.allclose(got, want, rtol=1e-5, atol=1e-6), (got, want)
    if m > 1:
        assert not np.array_equal(got, y)


def test_column_arrays_are_valid_columns_starting_off_the_diagonal():
    """column_array: every entry a column of an s x s matrix (base .. base +
    s - 1), the first at base + s - 1 (row 0's entry is off the diagonal
    for s > 1), steps of 0 or -1."""
    for s, base in [(4, 0), (2, 1), (3, 1), (1, 0)]:
        a = np.frombuffer(sparse.column_array(s, base, 300, 8, np.random.default_rng(s)), "<i8")
        assert a[0] == base + s - 1 and set(np.diff(a)) <= {0, -1}
        assert a.min() >= base and a.max() <= base + s - 1


#: gtsv_LBM_wv_kernel<256, 64, double>, gtsv_LBM_rhs_kernel<256, 64, 2, double> and their bundle (offset, size).
GTSV_WV = "_ZL18gtsv_LBM_wv_kernelILj256ELj64EdEviiiPKT1_S2_S2_PS0_S3_S3_Pi"
GTSV_RHS = "_ZL19gtsv_LBM_rhs_kernelILj256ELj64ELj2EdEviiiPKT2_S2_S2_PS0_S2_PKi"
GTSV_SPIKE = "_ZL33gtsv_solve_spike_propagate_kernelILj256ELj64EdEviiiPT1_PKS0_S3_S3_"
GTSV_BACKWARD = "_ZL39gtsv_spike_backward_substitution_kernelILj256ELj64EdEviiiPT1_PKS0_S3_"
GTSV_BUNDLE = (958640128, 34721736)


def test_builtin_typed_gtsv_kernels_are_claimed_with_padded_rows():
    """gtsv's kernels on float and double name no rocSPARSE type; the
    recipe claims them by name (:data:`sparse.UNTYPED`) and pads their rows
    (gtsv_solve_spike_propagate_kernel too: ``if(gid < nblocks)`` around its
    stores, nblocks = m_pad / BLOCKDIM); other _ZL names stay unclaimed."""
    for name in (GTSV_WV, GTSV_RHS, GTSV_SPIKE, GTSV_BACKWARD):
        assert sparse.claims(name)
        plan = synthesise(_md_for(name), 0, 0, name)
        assert plan.recipe == "rocsparse" and plan.values[0] == 256 * 64, name
    assert not sparse.claims("_ZL18gtsv_LBM_wv_kernelv") and not sparse.claims("_ZL10rocblas_fooILi1EEvPf")


def test_the_real_gtsv_lbm_kernels_solve_the_diagonal_blocks():
    """rocSPARSE 5.3's gtsv_LBM_wv_kernel then gtsv_LBM_rhs_kernel, launched
    as rocsparse_gtsv.cpp launches them (w and v zeroed, grid m_pad /
    BLOCKDIM / BLOCKSIZE) with the recipe's m_pad (one workgroup of 256
    threads, BLOCKDIM 64): thread g owns the rows g + t * 256 (t < 64), a
    tridiagonal system T_g (sub-diagonal a, diagonal b, super-diagonal c of
    those rows); the pair gives numpy's T_g^-1 rhs for both columns and the
    spikes w = T_g^-1 (a[g] e_0), v = T_g^-1 (c[g + 63 * 256] e_63)."""
    from kpatch.emulate.launch import run as launch
    code = real_object(*GTSV_BUNDLE)
    m_pad = synthesise(_md_for(GTSV_RHS), 0, 0, GTSV_RHS).values[0]
    bs, dim = 256, 64
    assert m_pad == bs * dim
    rng = np.random.default_rng(7)
    a, c = rng.uniform(-1, 1, m_pad), rng.uniform(-1, 1, m_pad)
    b = rng.uniform(0.2, 2, m_pad) * rng.choice([-1, 1], m_pad)  # some 2x2 pivots (Bunch-Kaufman)
    rhs = rng.uniform(-1, 1, 2 * m_pad)
    w, v, mt, pivot = np.zeros(m_pad), np.zeros(m_pad), np.zeros(m_pad), np.zeros(m_pad, np.int32)
    r = launch(code, GTSV_WV, [m_pad, 2, m_pad, a, b, c, w, v, mt, pivot], (bs,), (bs,))
    w, v, mt, pivot = (r.array(i) for i in (6, 7, 8, 9))
    assert set(pivot.tolist()) == {1, 2}
    out = launch(code, GTSV_RHS, [m_pad, 2, m_pad, a, b, c, rhs.copy(), mt, pivot], (bs,), (bs,)).array(6)
    rows = np.arange(bs)[:, None] + bs * np.arange(dim)[None, :]  # rows[g, t]
    t = np.zeros((bs, dim, dim))
    i = np.arange(dim)
    t[:, i, i] = b[rows]
    t[:, i[1:], i[:-1]] = a[rows[:, 1:]]
    t[:, i[:-1], i[1:]] = c[rows[:, :-1]]
    for col in range(2):
        want = np.linalg.solve(t, rhs[col * m_pad:(col + 1) * m_pad][rows][..., None])[..., 0]
        assert np.allclose(out[col * m_pad:(col + 1) * m_pad][rows], want, rtol=1e-8, atol=1e-8), col
    e0 = np.zeros((bs, dim))
    e0[:, 0] = a[rows[:, 0]]
    assert np.allclose(w[rows], np.linalg.solve(t, e0[..., None])[..., 0], rtol=1e-8, atol=1e-8)
    e1 = np.zeros((bs, dim))
    e1[:, -1] = c[rows[:, -1]]
    assert np.allclose(v[rows], np.linalg.solve(t, e1[..., None])[..., 0], rtol=1e-8, atol=1e-8)


#: csr2csr_compress_kernel<1024, 256, 4, 32, float, const float*> (a wave32 instance, the one the
#: host launches on gfx1030 for short rows) and its bundle (offset, size).
CSR2CSR_COMPRESS = ("_ZL23csr2csr_compress_kernelILi1024ELi256ELi4ELi32EfPKfEvii21rocsparse_index_base_PKT3_PKiS7_"
                    "iS2_PS3_S7_PiT4_")
COMPRESS_BUNDLE = (1067479040, 3535896)


def test_the_real_csr2csr_compress_kernel_keeps_the_recipes_entries_above_the_tolerance():
    """rocSPARSE 5.3's csr2csr_compress_kernel on the recipe's matrix, values
    and tolerance (:data:`sparse.THRESHOLDS`: tol 0.5 through the pointer,
    values alternately above and below it) and row pointers of C made as the
    host's nnz_compress does (an exclusive scan of the kept entries per
    row): C's values and column indices (shifted to C's base) are numpy's
    entries of A with |v| > tol; over runs 0-3 some entries are kept and
    some dropped."""
    from kpatch.codeobject import CodeObject
    from kpatch.emulate.launch import run as launch
    code = real_object(*COMPRESS_BUNDLE)
    md = CodeObject(code).kernel(CSR2CSR_COMPRESS).metadata
    kept = dropped = 0
    for run in range(4):
        plan = synthesise(md, run, 0, CSR2CSR_COMPRESS)
        m, base_a, base_c = plan.values[0], plan.values[2], plan.values[7]
        tol = _buffer_head(plan, "arg11", 4).view("<f4")[0]
        assert tol == sparse.TOLERANCE
        ptr = _buffer_head(plan, "arg4", 4 * (m + 1)).view("<i4")
        nnz = ptr[m] - base_a
        col = _buffer_head(plan, "arg5", 4 * 64).view("<i4")
        val = _buffer_head(plan, "arg3", 4 * 64).view("<f4")
        keep = np.abs(val[:nnz]) > tol
        per_row = [int(keep[ptr[r] - base_a:ptr[r + 1] - base_a].sum()) for r in range(m)]
        ptr_c = (np.concatenate([[0], np.cumsum(per_row)]) + base_c).astype(np.int32)
        args = list(plan.values)
        args[3], args[4], args[5] = val.copy(), ptr.copy(), col.copy()
        args[8], args[9], args[10], args[11] = (np.zeros(64, np.float32), ptr_c, np.full(64, -7, np.int32),
                                                np.array([tol], np.float32))
        r = launch(code, CSR2CSR_COMPRESS, args, plan.grid, plan.block)
        n_c = ptr_c[m] - base_c
        assert r.array(8)[:n_c].tolist() == val[:nnz][keep].tolist(), run
        assert r.array(10)[:n_c].tolist() == (col[:nnz][keep] - base_a + base_c).tolist(), run
        assert (r.array(10)[n_c:] == -7).all()  # nothing past C's entries
        kept, dropped = kept + n_c, dropped + nnz - n_c
    assert kept > 0 and dropped > 0


CSR2CSC_PERMUTE = "_ZL22csr2csc_permute_kernelILj512EdEviPKiPKT0_S1_PiPS2_"
CSR2CSC_BUNDLE = (1043935232, 5080984)
COOMVN_REDUCE = "_ZL29coomvn_segmented_loops_reduceILj256EiddEvT0_T2_PKS0_PKT1_PS4_"
COOMV_BUNDLE = (119455744, 5209120)


@pytest.mark.parametrize("run", [0, 1, 2])
def test_the_real_csr2csc_permute_kernel_gathers_through_the_recipes_permutation(run):
    """csr2csc_permute_kernel (a name with no rocSPARSE type, claimed by
    :data:`sparse.UNTYPED`) gets a permutation of 0 .. nnz - 1 as its map
    (:data:`sparse.PERMUTATIONS`); run in the emulator on the recipe's inputs,
    the original kernel writes out1 = in1[map] and out2 = in2[map] for the
    nnz = s entries, as numpy's fancy indexing does."""
    data = real_object(*CSR2CSC_BUNDLE)
    from kpatch.codeobject import CodeObject
    md = CodeObject(data).kernel(CSR2CSC_PERMUTE).metadata
    plan = synthesise(md, run, 5, CSR2CSC_PERMUTE)
    assert plan.recipe == "rocsparse"
    nnz = plan.values[0]
    image = _execute(data, CSR2CSC_PERMUTE, plan, 5, None)[0]
    assert not isinstance(image, Exception), image
    perm, _ = _inputs(plan, image, 3, "<i4", nnz)
    assert sorted(perm.tolist()) == list(range(nnz))
    in1, _ = _inputs(plan, image, 1, "<i4", nnz)
    in2, _ = _inputs(plan, image, 2, "<u8", nnz)
    _, out1 = _inputs(plan, image, 4, "<i4", nnz)
    _, out2 = _inputs(plan, image, 5, "<u8", nnz)
    assert out1.tolist() == in1[perm].tolist() and out2.tolist() == in2[perm].tolist()


@pytest.mark.parametrize("run", [0, 1, 2])
def test_the_real_coomvn_segmented_reduce_adds_each_rows_partial_sums(run):
    """coomvn_segmented_loops_reduce<256, int, double, double> (claimed by
    name) gets row numbers without the index base (:data:`sparse.ZERO_BASED`:
    row 0 first whatever the run's base) and adds, for each row, the partial
    sums of its blocks into y[row]: numpy's y + bincount(rows, vals).
    Launched as rocsparse_coomv.cpp launches it, one workgroup (the
    verifier's plan has one too: see the test below)."""
    from kpatch.codeobject import CodeObject
    from kpatch.emulate.launch import run as launch
    code = real_object(*COOMV_BUNDLE)
    md = CodeObject(code).kernel(COOMVN_REDUCE).metadata
    plan = synthesise(md, run, 0, COOMVN_REDUCE)
    assert plan.recipe == "rocsparse"
    nblocks = plan.values[0]
    rows = _buffer_head(plan, "arg2", 4 * nblocks).view("<i4")
    assert rows[0] == 0 and (np.diff(rows) >= 0).all() and rows.max() < nblocks
    rng = np.random.default_rng(run)
    vals, y = rng.uniform(-1, 1, nblocks), rng.uniform(-1, 1, nblocks)
    want = y + np.bincount(rows, vals, minlength=nblocks)
    args = list(plan.values)
    args[2], args[3], args[4] = rows.copy(), vals, y.copy()
    got = launch(code, COOMVN_REDUCE, args, plan.block, plan.block).array(4)
    assert np.allclose(got, want, rtol=1e-12, atol=1e-12), (got, want)


CHECK_GEBSR = ("_ZL25check_matrix_gebsr_deviceILj256E21rocsparse_complex_numIdEllEv20rocsparse_direction_T2_S3_T1_S3_"
               "S3_PKT0_PKS4_PKS3_SB_21rocsparse_index_base_22rocsparse_matrix_type_20rocsparse_fill_mode_"
               "23rocsparse_storage_mode_P22rocsparse_data_status_")
CHECK_GEBSR_BUNDLE = (1239597056, 68328888)


@pytest.mark.parametrize("run", [0, 1, 2])
def test_the_real_gebsr_checker_reports_the_recipes_infinities_and_nans(run):
    """check_matrix_gebsr_device is one of :data:`sparse.CHECKERS`: its
    complex<double> block values hold infinities and NaNs; the original
    kernel run on the recipe's inputs stores the status numpy finds for the
    last block row with an entry (its lane's store is the last; a row's
    entries pass the column checks, so the first infinite or NaN value of
    its block decides: rocsparse_data_status_inf 1 for +inf, _nan 2)."""
    data = real_object(*CHECK_GEBSR_BUNDLE)
    from kpatch.codeobject import CodeObject
    md = CodeObject(data).kernel(CHECK_GEBSR).metadata
    plan = synthesise(md, run, 5, CHECK_GEBSR)
    mb, nb, r, c = plan.values[1], plan.values[2], plan.values[4], plan.values[5]
    image = _execute(data, CHECK_GEBSR, plan, 5, None)[0]
    assert not isinstance(image, Exception), image
    ptr, _ = _inputs(plan, image, 7, "<i8", mb + 1)
    vals, _ = _inputs(plan, image, 6, "<f8", 2 * r * c * (ptr[mb] - ptr[0]))
    _, status = _inputs(plan, image, 14, "<i4", 1)
    rows = [i for i in range(mb) if ptr[i + 1] > ptr[i]]
    assert rows and nb == mb
    j = ptr[rows[-1]] - ptr[0]
    block = vals[2 * r * c * j:2 * r * c * (j + 1)].reshape(-1, 2)
    # common.h: rocsparse_is_inf(z) is real(z) == +inf or imag(z) == +inf (-inf is not one), is_nan either part NaN
    first = next(v for v in block if (v == np.inf).any() or np.isnan(v).any())
    assert status[0] == (1 if (first == np.inf).any() else 2)


def test_a_checkers_first_value_is_one_it_must_report():
    """Row 0 of the recipe's matrices always has an entry, the first
    (rocsparse_index_array: ptr[1] - ptr[0] = 1, its column array's first
    entry); a checker's first value is infinite or NaN whatever the seed and
    run, so that every run of check_matrix_csr_device stores a status (with a
    random start, a seed whose specials all fell past the s - 1 entries of
    its matrix left the kernel writing nothing)."""
    for seed in range(12):
        for run in range(4):
            plan = synthesise(_md_for(CHECK_CSR), run, seed, CHECK_CSR)
            first = _buffer_head(plan, "arg3", 16).view("<f8")
            assert (first == np.inf).any() or np.isnan(first).any(), (seed, run)


GTSV_RHS4 = "_ZL19gtsv_LBM_rhs_kernelILj256ELj4ELj2EdEviiiPKT2_S2_S2_PS0_S2_PKi"


@pytest.mark.parametrize("run", [0, 1])
def test_gtsv_rhs_gets_pivots_lbm_wv_could_have_chosen(run):
    """gtsv_LBM_rhs_kernel<256, 4, 2, double> steps through the pivots
    gtsv_LBM_wv_kernel chose (``k -= nblocks * pivot[k + gid]``): the
    recipe's pivot array (:data:`sparse.PIVOTS`) holds, for each thread g,
    a sequence of 1 and pairs 2, 2 over the rows g + 256 t (no pair starts
    at the last t), with both kinds present; the original kernel runs on the
    recipe's inputs inside its buffers (the recipe's index array as pivots
    sent it 2^31 bytes past rhs) and writes rhs."""
    plan = synthesise(_md_for(GTSV_RHS4), run, 0, GTSV_RHS4)
    m_pad = plan.values[0]
    assert m_pad == 256 * 4
    p = _buffer_head(plan, "arg8", 4 * m_pad).view("<i4").reshape(4, 256)
    assert set(p.reshape(-1).tolist()) == {1, 2}
    for g in range(256):
        t = 0
        while t < 4:
            if p[t, g] == 2:
                assert t < 3 and p[t + 1, g] == 2, (g, p[:, g])
                t += 2
            else:
                t += 1
    data = real_object(*GTSV_BUNDLE)
    from kpatch.codeobject import CodeObject
    plan = synthesise(CodeObject(data).kernel(GTSV_RHS4).metadata, run, 0, GTSV_RHS4)
    image = _execute(data, GTSV_RHS4, plan, 0, None)[0]
    assert not isinstance(image, Exception), image
    before, after = _inputs(plan, image, 6, "<u8", 2 * m_pad)
    assert (before != after).any()


BSRPAD = "_ZL28bsrpad_value_kernel_unsortedILi1024EdEviiiT0_21rocsparse_index_base_PS0_PKiS4_"
BSRPAD_BUNDLE = (1162592256, 410568)


@pytest.mark.parametrize("run", [0, 1, 2])
def test_the_real_bsrpad_kernel_pads_the_recipes_last_block(run):
    """bsrpad_value_kernel_unsorted<1024, double> with the recipe's
    arguments (:data:`sparse.BLOCK_PADDING`: block_dim s + 1, mb = s, m =
    mb block_dim - 1, a block-diagonal matrix): as numpy computes it, the
    diagonal entries i >= m % block_dim of the last block row's diagonal
    block (block mb - 1) become the value, nothing else changes."""
    data = real_object(*BSRPAD_BUNDLE)
    from kpatch.codeobject import CodeObject
    plan = synthesise(CodeObject(data).kernel(BSRPAD).metadata, run, 0, BSRPAD)
    m, mb, bd = plan.values[0], plan.values[1], plan.values[2]
    value = np.frombuffer(plan.values[3], "<f8")[0]
    assert (mb, bd) == (sparse.SIZES[run], sparse.SIZES[run] + 1) and 0 < m % bd and -(-m // bd) == mb
    image = _execute(data, BSRPAD, plan, 0, None)[0]
    assert not isinstance(image, Exception), image
    before, after = _inputs(plan, image, 5, "<f8", mb * bd * bd)
    want = before.copy().reshape(mb, bd, bd)
    for i in range(m % bd, bd):
        want[mb - 1, i, i] = value
    assert after.view("<u8").tolist() == want.reshape(-1).view("<u8").tolist()
    assert (after != before).any()


# -- the launch as rocSPARSE's host code makes it (block size, one workgroup) -------------------------------

CSRGEMM_MULTIPASS = ("_ZL51csrgemm_fill_block_per_row_multipass_device_pointerILj512ELj16ELj2048EiifEvT3_PKS0_S2_"
                     "PKT4_PKT2_S2_S5_S8_S2_S5_S5_S8_S2_S5_S8_PS0_PS3_PS6_21rocsparse_index_base_SC_SC_SC_bb")
CSRGEMM_BUNDLE = (856563712, 25376680)
CSRSV_1024 = ("_ZL12csrsv_kernelILj1024ELj32ELb0EiifPKfEvT3_T5_PKT2_PKS2_PKT4_SB_PS9_PiPS2_iSE_21rocsparse_index_base_"
              "20rocsparse_fill_mode_20rocsparse_diag_type_")
CSRSV_BUNDLE = (205549568, 4503064)
BSRXMVN_GENERAL = ("_ZL22bsrxmvn_general_kernelILj1024ELj32EfiiPKfEv20rocsparse_direction_T4_T3_PKS4_PKT2_S9_S6_PKT1_S4_SC_"
                   "S3_PSA_21rocsparse_index_base_")
BSRXMVN_BUNDLE = (105615360, 3443432)
CSR2DENSE = "_ZL16csr2dense_kernelILi16ELi32EiifEviT2_S0_PKT3_PKT1_PKS0_PS1_S4_16rocsparse_order_"
CSR2DENSE_BUNDLE = (1038733312, 1229368)


def _real_md(bundle, name):
    from kpatch.codeobject import CodeObject
    return CodeObject(real_object(*bundle)).kernel(name).metadata


@pytest.mark.parametrize("bundle,name,threads", [
    # rocsparse_csrgemm.cpp: hipLaunchKernelGGL((csrgemm_fill_block_per_row_multipass_device_pointer<CSRGEMM_DIM,
    #   ...>), dim3(m), dim3(CSRGEMM_DIM), ...) with CSRGEMM_DIM 512
    (CSRGEMM_BUNDLE, CSRGEMM_MULTIPASS, 512),
    # rocsparse_csrsv_solve.cpp: dim3 csrsv_threads(CSRSV_DIM); csrsv_kernel<CSRSV_DIM, 32, ...> with CSRSV_DIM 1024
    (CSRSV_BUNDLE, CSRSV_1024, 1024),
    # rocsparse_bsrxmv_spzl_general.cpp: bsrxmvn_general_kernel<1024, 32, ...> launched with dim3(32 * 32)
    (BSRXMVN_BUNDLE, BSRXMVN_GENERAL, 1024),
])
@pytest.mark.parametrize("run", [0, 1])
def test_a_real_kernel_is_launched_with_the_block_its_host_gives_it(bundle, name, threads, run):
    """rocSPARSE 5.3 launches these kernels with dim3(BLOCKSIZE), their first
    template argument, more than verify's default 256 work-items; the plan
    has that block (the metadata allows it), and the grid whole workgroups
    of it."""
    md = _real_md(bundle, name)
    assert int(md[".max_flat_workgroup_size"]) >= threads
    plan = synthesise(md, run, 0, name)
    assert plan.recipe == "rocsparse"
    assert plan.block == (threads, 1, 1)
    assert plan.grid == (threads * (1 + run), 1, 1)


def test_a_kernel_whose_first_template_argument_is_not_its_block_keeps_the_default():
    """csr2dense_kernel<NROWS_PER_BLOCK 16, WF_SIZE 32, ...> is launched with
    ``dim3 k_threads(WF_SIZE * NROWS_PER_BLOCK)`` (rocsparse_csx2dense.hpp):
    its first template argument is not the block, so the plan keeps
    verify's default, min(.max_flat_workgroup_size, 256)."""
    md = _real_md(CSR2DENSE_BUNDLE, CSR2DENSE)
    assert sparse.host_blocksize(CSR2DENSE) is None
    plan = synthesise(md, 0, 0, CSR2DENSE)
    assert plan.recipe == "rocsparse"
    assert plan.block == (min(int(md[".max_flat_workgroup_size"]), 256), 1, 1)


def test_a_block_the_metadata_does_not_allow_is_refused():
    """The host's block (512) above the metadata's .max_flat_workgroup_size,
    or other than its .reqd_workgroup_size, is no launch the library makes:
    the kernel is not verified (no arguments), never run with a smaller block."""
    md = _real_md(CSRGEMM_BUNDLE, CSRGEMM_MULTIPASS)
    for change in ({".max_flat_workgroup_size": 256}, {".reqd_workgroup_size": [256, 1, 1]}):
        with pytest.raises(CannotSynthesise, match="launches csrgemm_fill_block_per_row_multipass_device_pointer "
                                                   "with 512 work-items"):
            synthesise({**md, **change}, 0, 0, CSRGEMM_MULTIPASS)


@pytest.mark.parametrize("run", [0, 1, 2])
def test_coomvn_segmented_reduce_is_launched_with_one_workgroup(run):
    """rocsparse_coomv.cpp and rocsparse_coomv_aos.cpp launch
    coomvn_segmented_loops_reduce<COOMVN_DIM> with dim3(1) workgroups of
    dim3(COOMVN_DIM): every run's grid is one workgroup of 256 work-items
    (verify's runs otherwise have 1, 2 and 3)."""
    md = _real_md(COOMV_BUNDLE, COOMVN_REDUCE)
    plan = synthesise(md, run, 0, COOMVN_REDUCE)
    assert plan.block == (256, 1, 1) and plan.grid == (256, 1, 1)


def test_other_kernels_keep_one_to_three_workgroups():
    """A kernel not launched with one workgroup (axpyi) keeps 1, 2, 3 workgroups by run."""
    assert sparse.launch_groups(AXPYI) is None
    assert [synthesise(_md_for(AXPYI), r, 0, AXPYI).grid[0] // 256 for r in (0, 1, 2)] == [1, 2, 3]
