"""Argument recipes (kpatch/emulate/recipes.py): a kernel of a family whose
consistent inputs the metadata cannot tell is proven equal with its
recipe; a recipe whose argument signature does not hold gives no
arguments ("not verified"); a recipe never makes a wrong patch pass.

The kernels are rocPRIM's (tests/fixtures/bin/rocprim, compiled by
Debian's hipcc); the patched object is what `kpatch apply --mode override`
writes; the mutant is that object with one instruction's offset changed here.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kpatch.codeobject import CodeObject
from kpatch.emulate import recipes
from kpatch.emulate.verify import DIFFERENT, EQUAL, CannotSynthesise, synthesise, verify_kernel

HERE = os.path.dirname(__file__)
ROCPRIM = os.path.join(HERE, "..", "fixtures", "bin", "rocprim", "rocprim_algos.gfx1030.hsaco")
SCAN = ("_ZN7rocprim6detail20lookback_scan_kernelILb0ENS0_19default_scan_configILj0EiEEPiS4_NS_4plusIiEEiNS0_"
        "19lookback_scan_stateIiLb1ELb1EEEEEvT1_T2_mT4_T3_T5_jNS0_16ordered_block_idIjEEPNS0_18input_value_tr")


@pytest.fixture(scope="module")
def rocprim_pair(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("rp") / "rocprim.patched")
    p = subprocess.run([sys.executable, "-m", "kpatch", "apply", "--mode", "override", ROCPRIM, "-o", out],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    with open(ROCPRIM, "rb") as f:
        a = f.read()
    with open(out, "rb") as f:
        b = f.read()
    return a, b


def _kernel(data: bytes, prefix: str) -> str:
    names = [k.name for k in CodeObject(data).kernels if k.name.startswith(prefix)]
    assert names, prefix
    return names[0]


def test_lookback_scan_is_proven_with_its_recipe(rocprim_pair):
    """Without a recipe the scan state and the ordered block id are random
    bytes: the kernel faults on both sides (not verified).  With rocPRIM's
    layout (padding entries PREFIX_INVALID, block entries empty, counter 0)
    both runs finish and agree, over one workgroup (the partial last block)
    and several (look-back across workgroups)."""
    a, b = rocprim_pair
    name = _kernel(a, SCAN[:120])
    v = verify_kernel(a, b, name, runs=2, patched_target="gfx1010", limit=150000)
    assert v.status == EQUAL, v.detail
    assert v.recipe == "rocprim-lookback-scan"


@pytest.mark.parametrize("prefix", ["_ZN7rocprim6detail23sort_and_scatter_kernelILj256ELj17ELj7E",
                                    "_ZN7rocprim6detail31init_lookback_scan_state_kernelINS0_19lookback_scan_stateIdLb1ELb0E",
                                    "_ZN7rocprim6detail18block_merge_kernelILj128ELj8EPiS2_PfS3_",
                                    "_ZN7rocprim6detail34scan_and_scatter_carry_outs_kernelILj256ELj2Ef",
                                    "_ZN7rocprim6detail20reduce_by_key_kernelILj256ELj10EPiNS_17constant_iterator",
                                    "_ZN7rocprim6detail23segmented_reduce_kernelINS0_21default_reduce_configILj0EfE"])
def test_other_families_are_proven_with_their_recipes(rocprim_pair, prefix):
    a, b = rocprim_pair
    v = verify_kernel(a, b, _kernel(a, prefix), runs=1, patched_target="gfx1010", limit=150000)
    assert v.status == EQUAL and v.recipe, v.detail


def test_a_recipe_that_does_not_hold_gives_no_arguments():
    """A kernel named like a recipe's family whose arguments differ is not
    given any: 'recipe ... does not hold', never a guess."""
    md = {".args": [{".value_kind": "global_buffer", ".size": 8, ".offset": 0, ".address_space": "global"},
                    {".value_kind": "by_value", ".size": 4, ".offset": 8}]}
    name = "_ZN7rocprim6detail20lookback_scan_kernelILb0Ewhatever"
    with pytest.raises(CannotSynthesise, match="recipe rocprim-lookback-scan does not hold"):
        synthesise(md, 0, 0, name)
    with pytest.raises(recipes.RecipeDoesNotHold):
        recipes.find(name, md)


def test_a_recipe_does_not_make_a_wrong_patch_pass(rocprim_pair):
    """The scan kernel's patched code with its first global store's data
    register changed (v -> v+1): with the recipe's inputs the run writes
    other bytes, and the check says DIFFERENT."""
    from tests.emulate.test_verify import mutate, with_field
    from kpatch.isa import formats as F
    a, b = rocprim_pair
    name = _kernel(a, SCAN[:120])
    bad = mutate(b, name, lambda i: i.mnemonic == "global_store_dword",
                 lambda i: with_field(i, F.FLAT, "data", i.field("data") + 1))
    v = verify_kernel(a, bad, name, runs=2, patched_target="gfx1010", limit=150000)
    assert v.status == DIFFERENT and v.recipe == "rocprim-lookback-scan", v.detail


ROCBLAS = os.path.join(HERE, "..", "..", "kdb_cache", "sid-root", "usr", "lib", "x86_64-linux-gnu", "rocblas",
                       "4.4.1", "library", "TensileLibrary_Type_SS_Contraction_l_Alik_Bjlk_Cijk_Dijk_gfx1030.co")


@pytest.mark.parametrize("batched", [False, True])
def test_tensile_recipe_computes_the_gemm_numpy_computes(batched):
    """rocBLAS's Tensile kernels take pointers, sizes and strides as plain
    by-value arguments named in the metadata; the tensile-gemm recipe makes
    them agree (kdb_cache: tools/fetch_sid.sh).  A real SGEMM kernel
    (Alik_Bjlk: A[l + i*L], B[j + l*J], C and D[i + j*I]; batched: the
    addresses are arrays holding the batch's pointer) run on them writes
    D = 1.5 * A.B + 0.5 * C as numpy computes it (float64, relative 1e-5),
    for three sizes (partial tiles included), and the recipe's inputs hold no
    NaN."""
    import struct

    import numpy as np

    from kpatch.emulate.verify import GUARD_BYTES, _execute
    if not os.path.exists(ROCBLAS):
        pytest.skip("rocBLAS 4.4.1's library not fetched (tools/fetch_sid.sh)")
    with open(ROCBLAS, "rb") as f:
        data = f.read()
    co = CodeObject.from_bytes(data)
    prefix = "Cijk_Alik_Bjlk_SB_GB_MT128x128x8_" if batched else "Cijk_Alik_Bjlk_SB_MT128x128x8_"
    name = next(k.name for k in co.kernels if k.name.startswith(prefix) and "_GSU1_" in k.name)
    md = co.kernel(name).metadata
    for run in range(3):
        plan = synthesise(md, run, 0, name)
        assert plan.recipe == "tensile-gemm"
        image = dict(_execute(data, name, plan, run, None, 1_000_000)[0])
        names = [str(a.get(".name")) for a in md[".args"]]
        i, j, k = struct.unpack("<III", plan.values[names.index("SizesFree")])
        n_l = plan.values[names.index("SizesSum")]

        def buffer(arg):  # the tensor's buffer index (through the pointer array when batched)
            index = plan.values[names.index(arg)][1]
            return next(t for b, off, t in plan.links if b == index) if batched else index

        def given(arg, count):
            raw = plan.buffers[buffer(arg)][1][GUARD_BYTES:GUARD_BYTES + 4 * count].tobytes()
            return np.frombuffer(raw, np.float32).astype(np.float64)
        a = given("AddressA", n_l * i).reshape(i, n_l)
        b = given("AddressB", n_l * j).reshape(n_l, j)
        c = given("AddressC", i * j).reshape(j, i)
        assert np.isfinite(a).all() and np.isfinite(b).all() and k == 1
        out = image[plan.buffers[buffer("AddressD")][0]]
        d = np.frombuffer(out[GUARD_BYTES:GUARD_BYTES + 4 * i * j], np.float32).reshape(j, i)
        want = (1.5 * a @ b).T + 0.5 * c
        assert np.allclose(d, want, rtol=1e-5, atol=1e-5), (run, i, j, n_l)


def test_tensile_recipe_leaves_the_source_kernels_of_the_same_name_alone():
    """Tensile's source (HIP) fallback kernels carry the assembly kernels'
    names but take unnamed global buffers: they are synthesised as usual,
    not refused by tensile-gemm's signature."""
    fallback = ROCBLAS.replace("_gfx1030.co", "_fallback_gfx1030.hsaco")
    if not os.path.exists(fallback):
        pytest.skip("rocBLAS 4.4.1's library not fetched (tools/fetch_sid.sh)")
    with open(fallback, "rb") as f:
        co = CodeObject.from_bytes(f.read())
    k = next(k for k in co.kernels if k.name.startswith("Cijk_Alik_Bjlk_SB_MT"))
    assert recipes._TENSILE_NAME.match(k.name) and synthesise(k.metadata, 0, 0, k.name).recipe == ""
