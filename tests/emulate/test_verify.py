"""`kpatch verify --emulate`: patches kpatch writes are proven equal on the
fixtures, and wrong patches are caught (mutation tests: an offset flipped,
a register swapped, a long branch's getpc literal shifted by 4).

The originals are LLVM's output (tests/fixtures/bin, and assembly kernels
in tests/emulate/data assembled here by clang-15); the patched objects are
what `kpatch apply --mode override` writes; the mutants are those bytes
with one field changed here.
"""

from __future__ import annotations

import json
import os
import re

import pytest

from kpatch.codeobject import CodeObject
from kpatch.emulate.verify import DIFFERENT, EQUAL, NOT_VERIFIED, verify, verify_kernel
from kpatch.isa import formats as F
from tests.emulate.common import FIXTURES, assemble, kernel, kpatch, mutate, read, with_field

HERE = os.path.dirname(__file__)


REWRITE_DATA = os.path.join(HERE, "..", "rewrite", "data")


def long_branch(tmp_path) -> str:
    """tests/rewrite/data/long_branch.s (kernel lb) with a VALU add as the
    first instruction at the long branch's target."""
    with open(os.path.join(REWRITE_DATA, "long_branch.s")) as f:
        text = f.read().replace("TARGET_FIRST", "v_add_f32 v1, 1.0, v1")
    return assemble(tmp_path, "long_branch", text)


def int_dot_run(tmp_path) -> str:
    """The integer dot products of tests/rewrite/data/int_dot.s (the body of
    kernel idot) made runnable (kernel idot_run): the operands v2 v3 v5 v8
    v9 v10 v11 v1 come from the buffer (32 dwords each) and the 7 results
    go to byte 1024 + 128*k; descriptor and metadata are idot's, renamed."""
    with open(os.path.join(REWRITE_DATA, "int_dot.s")) as f:
        text = f.read()
    body = re.search(r"^idot:\n(.*?)^    s_endpgm", text, re.M | re.S).group(1)
    loads = "".join(f"    global_load_dword v{r}, v0, s[2:3] offset:{128 * k}\n"
                    for k, r in enumerate((2, 3, 5, 8, 9, 10, 11, 1)))
    stores = "".join(f"    global_store_dword v0, v{r}, s[2:3] offset:{1024 + 128 * k}\n"
                     for k, r in enumerate((1, 4, 6, 7, 8, 10, 11)))
    run = ("idot_run:\n    s_load_dwordx2 s[2:3], s[0:1], 0\n    v_lshlrev_b32 v0, 2, v0\n"
           "    s_mov_b32 s7, 0x12345\n    s_waitcnt lgkmcnt(0)\n" + loads + "    s_waitcnt vmcnt(0)\n"
           + body + stores + "    s_endpgm\n")
    text = re.sub(r"^idot:\n.*?^    s_endpgm\n", lambda _: run.replace("idot_run:", "idot:"), text, count=1,
                  flags=re.M | re.S)
    text = re.sub(r"\bidot\b", "idot_run", text)
    return assemble(tmp_path, "int_dot_run", text)


def patched(tmp_path, src: str) -> str:
    out = str(tmp_path / (os.path.basename(src) + ".patched"))
    p = kpatch("apply", "--mode", "override", src, "-o", out)
    assert p.returncode == 0 and os.path.exists(out), p.stdout + p.stderr
    return out


def statuses(orig: str, new: str) -> dict:
    return {v.name: v.status for v in verify(read(orig), read(new), runs=2, patched_target="gfx1010")}


# ---- what kpatch writes is proven equal ------------------------------------------

@pytest.mark.parametrize("fixture", ["vecops.hip", "miopen_like.cl"])
def test_patched_fixtures_are_equal(tmp_path, fixture):
    src = os.path.join(FIXTURES, f"{fixture}.gfx1030.v4.hsaco")
    st = statuses(src, patched(tmp_path, src))
    assert st and set(st.values()) == {EQUAL}, st


def test_a_refused_kernel_is_not_verified(tmp_path):
    """mathops: kpatch patches fma_loop and refuses half2_dot (v_dot2c_f32_f16,
    which gfx1010 lacks): the one is equal, the other cannot run as gfx1010
    code and is reported, not passed."""
    src = os.path.join(FIXTURES, "mathops.hip.gfx1030.v4.hsaco")
    res = {v.name: v for v in verify(read(src), read(patched(tmp_path, src)), runs=1, patched_target="gfx1010")}
    assert res["fma_loop"].status == EQUAL
    assert res["half2_dot"].status == NOT_VERIFIED
    assert "cannot emulate" in res["half2_dot"].detail


def test_int_dot_expansion_is_equal(tmp_path):
    src = int_dot_run(tmp_path)
    st = statuses(src, patched(tmp_path, src))
    assert st["idot_run"] == EQUAL, st


def test_long_branch_relocation_is_equal(tmp_path):
    src = long_branch(tmp_path)
    assert statuses(src, patched(tmp_path, src)) == {"lb": EQUAL}


# ---- mutation tests: wrong patches are caught --------------------------------------

def test_mutant_offset_is_caught(tmp_path):
    src = os.path.join(FIXTURES, "vecops.hip.gfx1030.v4.hsaco")
    good = read(patched(tmp_path, src))
    bad = mutate(good, "vec_add", lambda i: i.mnemonic == "global_load_dword",
                 lambda i: with_field(i, F.FLAT, "offset", i.field("offset") ^ 4))
    assert verify_kernel(read(src), good, "vec_add", runs=1, patched_target="gfx1010").status == EQUAL
    v = verify_kernel(read(src), bad, "vec_add", runs=1, patched_target="gfx1010")
    assert v.status == DIFFERENT and "arg2" in v.detail, v.detail


def test_mutant_register_is_caught(tmp_path):
    src = int_dot_run(tmp_path)
    good = read(patched(tmp_path, src))
    bad = mutate(good, "idot_run", lambda i: i.mnemonic == "v_mul_i32_i24_sdwa",
                 lambda i: with_field(i, F.VOP2, "vsrc1", 5))  # v3 -> v5
    v = verify_kernel(read(src), bad, "idot_run", runs=1, patched_target="gfx1010")
    assert v.status == DIFFERENT, v.detail


def test_mutant_getpc_literal_is_caught(tmp_path):
    src = long_branch(tmp_path)
    good = read(patched(tmp_path, src))

    def shift(i):
        return i.raw[:4] + ((i.literal + 4) & 0xFFFFFFFF).to_bytes(4, "little")
    bad = mutate(good, "lb", lambda i: i.mnemonic == "s_add_i32" and i.literal is not None, shift)
    v = verify_kernel(read(src), bad, "lb", runs=1, patched_target="gfx1010")
    assert v.status == DIFFERENT, v.detail


# ---- the command -------------------------------------------------------------------

def test_cli(tmp_path):
    src = os.path.join(FIXTURES, "vecops.hip.gfx1030.v4.hsaco")
    out = patched(tmp_path, src)
    p = kpatch("verify", "--emulate", "--runs", "1", src, out)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "equal         vec_add (1 runs" in p.stdout
    assert "2 kernels: 2 equal, 0 different, 0 not verified" in p.stdout
    p = kpatch("verify", "--emulate", "--json", "--kernel", "vec_add", "--runs", "1", src, out)
    doc = json.loads(p.stdout)
    assert [k["status"] for k in doc["kernels"]] == ["equal"] and p.returncode == 0
    bad = str(tmp_path / "bad.hsaco")
    with open(bad, "wb") as f:
        f.write(mutate(read(out), "vec_add", lambda i: i.mnemonic == "global_load_dword",
                       lambda i: with_field(i, F.FLAT, "offset", i.field("offset") ^ 4)))
    p = kpatch("verify", "--emulate", "--runs", "1", "--kernel", "vec_add", src, bad)
    assert p.returncode == 1 and "DIFFERENT     vec_add: run 1" in p.stdout
    assert p.stderr.startswith("error: vec_add: different: ")
    p = kpatch("verify", src, out)
    assert p.returncode == 2 and "only --emulate" in p.stderr
    p = kpatch("verify", "--emulate", str(tmp_path / "missing"), out)
    assert p.returncode == 1 and p.stderr.strip().endswith("no such file")
    assert "Traceback" not in p.stderr


MEMTIME = kernel("mt", """    s_memtime s[2:3]
""")


def test_unmodelled_instruction_is_named_not_guessed(tmp_path):
    src = assemble(tmp_path, "memtime", MEMTIME)
    v = verify_kernel(read(src), read(src), "mt", runs=1)
    assert v.status == NOT_VERIFIED
    co = CodeObject.from_bytes(read(src))
    assert v.detail == f"original: cannot emulate s_memtime at {co.kernel('mt').entry:#x}"


def test_a_write_into_a_guard_zone_is_caught(tmp_path):
    """A store moved before its buffer lands in the guard zone: seen, not faulted."""
    src = os.path.join(FIXTURES, "vecops.hip.gfx1030.v4.hsaco")
    good = read(patched(tmp_path, src))
    bad = mutate(good, "vec_add", lambda i: i.mnemonic == "global_store_dword",
                 lambda i: with_field(i, F.FLAT, "offset", (i.field("offset") - 2048) & 0xFFF))
    v = verify_kernel(read(src), bad, "vec_add", runs=1, patched_target="gfx1010")
    assert v.status == DIFFERENT and "(guard zone)" in v.detail, v.detail


def test_arguments_that_cannot_be_synthesised_are_not_passed():
    from kpatch.emulate.verify import CannotSynthesise, synthesise
    for kind in ("image", "sampler", "pipe", "queue", "dynamic_shared_pointer", "hidden_something_new"):
        with pytest.raises(CannotSynthesise):
            synthesise({".args": [{".value_kind": kind, ".size": 8, ".offset": 0}]}, 0, 0)


def test_an_approximation_is_measured_in_ulps(tmp_path):
    """dot2-fma-mix (two roundings where gfx1030's dot rounds once) is not
    equal; with an ulp allowance it passes as "within ulp" and the largest
    difference is reported."""
    from kpatch.emulate.verify import WITHIN
    src = os.path.join(FIXTURES, "mathops.hip.gfx1030.v4.hsaco")
    out = str(tmp_path / "approx.hsaco")
    p = kpatch("apply", "--mode", "override", "--allow-approx", "dot2-fma-mix", src, "-o", out)
    assert p.returncode == 0, p.stdout + p.stderr
    strict = verify_kernel(read(src), read(out), "half2_dot", runs=3, patched_target="gfx1010")
    assert strict.status == DIFFERENT and "ulp" in strict.detail
    loose = verify_kernel(read(src), read(out), "half2_dot", runs=3, patched_target="gfx1010", max_ulp=1 << 20)
    assert loose.status == WITHIN and 0 < loose.max_ulp <= 1 << 20


_MASKED_BODY = """    s_load_dwordx2 s[4:5], s[0:1], 0
    v_lshlrev_b32 v2, 2, v0
    s_waitcnt lgkmcnt(0)
    global_load_dword v1, v2, s[4:5]
    s_waitcnt vmcnt(0)
    v_add_nc_u32 v1, 1, v1
    v_cmp_gt_u32 vcc_lo, LIMIT, v0
    s_and_saveexec_b32 s6, vcc_lo
    global_store_dword v2, v1, s[4:5] offset:128
"""


def masked_kernel(limit: int, const: str = "") -> str:
    """Kernel ``masked``: its lanes below ``limit`` add 1 to their dword of
    its buffer ``data`` (metadata ``const`` added to the argument's line)."""
    arg = "{ .name: data, .size: 8, .offset: OFFSET, .value_kind: global_buffer, .address_space: global" + const + " }"
    return kernel("masked", _MASKED_BODY.replace("LIMIT", str(limit)), args=(arg,), sgprs=16)


def test_a_kernel_that_writes_nothing_is_not_verified(tmp_path):
    """Both sides running to the end with every store masked off (EXEC 0:
    no lane has v0 < 0) prove nothing: "not verified (wrote nothing)", not
    equal.  The same kernel with its stores on (v0 < 32) is equal and
    reports the bytes it wrote (32 lanes x 4 bytes in each of the 1 + 2 + 3
    workgroups of runs 1-3); one whose only
    buffer is const says that nothing it computes can be compared."""
    def code(limit, const=""):
        return open(assemble(tmp_path, f"masked{limit}{bool(const)}", masked_kernel(limit, const)), "rb").read()
    off = code(0)
    v = verify_kernel(off, off, "masked", runs=3)
    assert v.status == NOT_VERIFIED and v.detail.startswith("wrote nothing") and "data" in v.detail, v.detail
    assert v.written == (0, 0) and v.runs == 3
    on = code(32)
    v = verify_kernel(on, on, "masked", runs=3)
    assert v.status == EQUAL and v.written == (32 * 4 * 6, 32 * 4 * 6), v
    ro = code(0, ", .is_const: true")
    v = verify_kernel(ro, ro, "masked", runs=1)
    assert v.status == NOT_VERIFIED and "no writable argument" in v.detail, v.detail


# -- untouched kernels ----------------------------------------------------------------------

def test_a_kernel_the_same_in_both_is_untouched():
    """vecops' kernels against themselves are all the same bytes reaching
    nothing else: UNTOUCHED (not run) when asked; one kernel changed (its
    first global load's offset) is verified and DIFFERENT, the others stay
    UNTOUCHED.  store_global (tests/emulate/data/global_store.hip) reads a
    global through s_getpc: the same bytes, but not shown untouched (the data
    it reaches might differ): it is run and equal."""
    from kpatch.emulate.verify import UNTOUCHED
    with open(os.path.join(FIXTURES, "vecops.hip.gfx1030.v4.hsaco"), "rb") as f:
        good = f.read()
    names = [k.name for k in CodeObject(good).kernels]
    vs = verify(good, good, runs=1, skip_untouched=True)
    assert [v.status for v in vs] == [UNTOUCHED] * len(names), [(v.name, v.detail) for v in vs]
    bad = mutate(good, "vec_add", lambda i: i.mnemonic == "global_load_dword",
                 lambda i: with_field(i, F.FLAT, "offset", i.field("offset") ^ 4), target="gfx1030")
    vs = {v.name: v for v in verify(good, bad, runs=1, skip_untouched=True)}
    assert vs["vec_add"].status == DIFFERENT, vs["vec_add"].detail
    assert all(v.status == UNTOUCHED for n, v in vs.items() if n != "vec_add")
    with open(os.path.join(HERE, "data", "global_store.gfx1030.hsaco"), "rb") as f:
        gs = f.read()
    assert [v.status for v in verify(gs, gs, runs=1, skip_untouched=True)] == [EQUAL]


def test_cli_reports_untouched_and_exits_0(tmp_path):
    """rocPRIM's transform_kernel of empty_type (4 bytes: s_endpgm; writes
    nothing) is the same in the original and in what apply writes: the CLI
    says "untouched", not "not verified", and exits 0."""
    src = os.path.join(FIXTURES, "rocprim", "rocprim_algos.gfx1030.hsaco")
    out = str(tmp_path / "rp.hsaco")
    p = kpatch("apply", "--mode", "override", src, "-o", out)
    assert p.returncode == 0, p.stderr
    name = next(k.name for k in CodeObject(read(src)).kernels if "transform_kernelILj256ELj16ENS_10empty_type" in k.name)
    p = kpatch("verify", "--emulate", src, out, "--kernel", name, "--runs", "1")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("untouched"), p.stdout
    assert "0 not verified, 1 untouched" in p.stdout
