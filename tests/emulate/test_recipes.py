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
    from tests.emulate.common import mutate, with_field
    from kpatch.isa import formats as F
    a, b = rocprim_pair
    name = _kernel(a, SCAN[:120])
    bad = mutate(b, name, lambda i: i.mnemonic == "global_store_dword",
                 lambda i: with_field(i, F.FLAT, "data", i.field("data") + 1))
    v = verify_kernel(a, bad, name, runs=2, patched_target="gfx1010", limit=150000)
    assert v.status == DIFFERENT and v.recipe == "rocprim-lookback-scan", v.detail


# -- MIOpen's naive convolutions ------------------------------------------------------------

MIOPEN_KDB = os.path.join(HERE, "..", "fixtures", "miopen", "gfx1030.kdb")


@pytest.fixture(scope="module")
def naive_conv_pair():
    """MIOpen's naive_conv.cpp code object of the real-kernel DB and what the
    override patch makes of it."""
    from kpatch.diff.compare import collect_side
    from kpatch.rewrite.patcher import patch_code_object
    found, _ = collect_side(MIOPEN_KDB)
    for f in found:
        if any(k.name.startswith("naive_conv_ab_") for k in CodeObject(f.data).kernels):
            res = patch_code_object(f.data, mode="override")
            assert res.data is not None and res.data != f.data
            return f.data, res.data
    pytest.fail("no naive_conv code object in the MIOpen fixture")


@pytest.mark.parametrize("name", ["naive_conv_ab_packed_bwd_ncdhw_float_double_float",
                                  "naive_conv_ab_nonpacked_wrw_ndhwc_half_double_half"])
def test_naive_conv_is_proven_with_its_recipe(naive_conv_pair, name, monkeypatch):
    """With the recipe's small consistent problems (every run a few thousand
    wave-instructions) the kernel is proven equal over three runs; with every
    integer argument 8 (no recipe) its loops do not finish within the limit
    (these two: 3-D backward and weight-gradient; others merely take long)."""
    a, b = naive_conv_pair
    v = verify_kernel(a, b, name, runs=3, patched_target="gfx1010", limit=150000)
    assert v.status == EQUAL and v.recipe == "miopen-naive-conv", v.detail
    assert max(v.instructions) < 150000
    monkeypatch.setattr(recipes, "RECIPES", tuple(r for r in recipes.RECIPES if r.name != "miopen-naive-conv"))
    v = verify_kernel(a, b, name, runs=1, patched_target="gfx1010", limit=150000)
    assert v.status != EQUAL and not v.recipe


def test_naive_conv_strides_are_miopens():
    """The strides the recipe passes are MIOpen's: the packed tensor's, C
    (K for weights) split into (G, C per group), sorted ascending.  NCHW
    input n=2 g=2 c=2 h=4 w=4: w 1, h 4, c 16, g 32, n 64; NHWC: c 1, g 2,
    w 4, h 16, n 64; KCYX weights g=2 k=2 c=2 3x3: x 1, y 3, c 9, k 18, g 36."""
    act = dict(n=2, g=2, c=2, y=4, x=4)
    assert recipes._packed_strides(act, "ngcyx") == [1, 4, 16, 32, 64]
    assert recipes._packed_strides(act, "nyxgc") == [1, 2, 4, 16, 64]
    assert recipes._packed_strides(dict(g=2, k=2, c=2, y=3, x=3), "gkcyx") == [1, 3, 9, 18, 36]
    md = {".args": [{".value_kind": k, ".size": s} for k, s in
                    [("global_buffer", 8)] * 2 + [("by_value", 8)] * 2 + [("global_buffer", 8)]
                    + [("by_value", 40)] * 3 + [("by_value", 4)] * 16]}
    r, sig = recipes.find("naive_conv_ab_packed_fwd_nchw_float_double_float", md)
    import numpy as np
    ctx = recipes.Context(0, 1, (256, 1, 1), np.random.default_rng(0), md)
    vals = r.build(ctx, sig, "naive_conv_ab_packed_fwd_nchw_float_double_float")
    # run 0: hi wi 4x4, 3x3 filter, stride 1, dilation 1, pad 1: ho wo 4x4
    assert [vals[i] for i in range(8, 24)] == [4, 4, 2, 2, 2, 4, 4, 1, 1, 1, 1, 1, 1, 3, 3, 2]
    import struct
    assert struct.unpack("<5Q", vals[5].data) == (1, 4, 16, 32, 64)
    assert struct.unpack("<5Q", vals[7].data) == (1, 4, 16, 32, 64)
