"""The scan of ``.text`` records every branch and direct call of the units
whose code decodes whole (kpatch.analysis.codescan._scan_units, with numpy),
with the target llvm-objdump-16 gives (address + 4 + 4 * simm16), the
call edges between units, and none of a unit that holds an undecodable word
(f; and e, whose symbol size cuts its last instruction: the cut word does
not decode).  Such a unit pins every address: its branches are not followed.
h's only instruction, a branch into g, is its first (the unit of a branch
is the last unit starting at or before it).  n, with no PC-relative
instruction at all, falls through its end."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from kpatch.analysis.codescan import scan_text
from kpatch.codeobject import CodeObject

SOURCE = """
.amdgcn_target "amdgcn-amd-amdhsa--gfx1030"
.text
.globl k
.p2align 8
.type k,@function
k:
    s_cmp_eq_u32 s0, 0
    s_cbranch_scc1 k_skip
    s_getpc_b64 s[30:31]
    s_add_u32 s30, s30, g@rel32@lo+4
    s_addc_u32 s31, s31, g@rel32@hi+12
    s_swappc_b64 s[30:31], s[30:31]
.Lk_loop:
    s_sub_u32 s1, s1, 1
    s_cbranch_scc0 .Lk_loop
    s_call_b64 s[30:31], g
k_skip:
    s_branch .Lk_end0
    v_mov_b32 v0, 0x12345678
.Lk_end0:
    s_endpgm
.Lk_end:
    .size k, .Lk_end - k

.p2align 2
.type g,@function
g:
    s_cmp_lg_u32 s2, 0
    s_cbranch_scc0 .Lg_out
    s_mov_b32 s3, 1
.Lg_out:
    s_setpc_b64 s[30:31]
.Lg_end:
    .size g, .Lg_end - g

.p2align 2
.type h,@function
h:
    s_branch g
.Lh_end:
    .size h, .Lh_end - h

.p2align 2
.type n,@function
n:
    s_mov_b32 s0, 0
.Ln_end:
    .size n, .Ln_end - n

.p2align 2
.type f,@function
f:
    s_cmp_lg_u32 s2, 0
    s_cbranch_scc0 .Lf_out
    .long 0xFFFFFFFF
.Lf_out:
    s_setpc_b64 s[30:31]
.Lf_end:
    .size f, .Lf_end - f

.p2align 2
.type e,@function
e:
    s_cmp_lg_u32 s2, 0
    s_cbranch_scc0 .Le_x
.Le_x:
    s_mov_b32 s0, 0x12345678
.Le_end:
    .size e, .Le_end - e - 4

.rodata
.p2align 6
.amdhsa_kernel k
    .amdhsa_user_sgpr_private_segment_buffer 1
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_next_free_vgpr 8
    .amdhsa_next_free_sgpr 40
    .amdhsa_wavefront_size32 1
.end_amdhsa_kernel

.amdgpu_metadata
---
amdhsa.version: [ 1, 1 ]
amdhsa.kernels:
  - .name: k
    .symbol: k.kd
    .kernarg_segment_size: 0
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .sgpr_count: 40
    .vgpr_count: 8
    .max_flat_workgroup_size: 256
...
.end_amdgpu_metadata
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if shutil.which("clang-15") is None or shutil.which("llvm-objdump-16") is None:
        pytest.skip("clang-15 / llvm-objdump-16 not installed")
    d = tmp_path_factory.mktemp("branches")
    src, out = d / "k.s", d / "k.hsaco"
    src.write_text(SOURCE)
    subprocess.run(["clang-15", "-x", "assembler", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1030",
                    "-mcode-object-version=4", str(src), "-o", str(out)], check=True)
    listing = subprocess.run(["llvm-objdump-16", "-d", "--mcpu=gfx1030", str(out)], capture_output=True,
                             text=True, check=True).stdout
    syms = subprocess.run(["llvm-objdump-16", "-t", str(out)], capture_output=True, text=True, check=True).stdout
    labels = {ln.split()[-1]: int(ln.split()[0], 16) for ln in syms.splitlines()
              if ln[:1].isdigit() and len(ln.split()) >= 2}
    return CodeObject(out.read_bytes()), listing, labels


def _objdump_branches(listing: str) -> dict[int, int]:
    """Address -> target of every SOPP branch and s_call_b64 llvm-objdump-16
    lists (target = address + 4 + 4 * the signed 16-bit immediate, the low
    half of the word it prints)."""
    out = {}
    for m in re.finditer(r"^\s*(?:s_branch|s_cbranch_\w+|s_call_b64) .*// ([0-9A-F]+): ([0-9A-F]{8})", listing, re.M):
        simm = int(m.group(2), 16) & 0xFFFF
        simm = simm - 0x10000 if simm >= 0x8000 else simm
        addr = int(m.group(1), 16)
        out[addr] = addr + 4 + 4 * simm
    return out


def test_every_branch_of_the_whole_units_is_recorded_with_its_target(built):
    co, listing, labels = built
    scan = scan_text(co, "gfx1030")
    got = {scan.insts[i].address: t for i, t in scan.branches.items()}
    want = _objdump_branches(listing)
    bad = {a for a in want if labels["f"] <= a}  # f and e, the last functions: their branches are not recorded
    assert len(want) == 8 and len(bad) == 2  # (the fixture is what it claims)
    assert got == {a: t for a, t in want.items() if a not in bad}
    assert list(scan.branches) == sorted(scan.branches)  # in instruction order


def test_call_edges_and_the_undecodable_unit(built):
    co, listing, labels = built
    scan = scan_text(co, "gfx1030")
    names = [u.name for u in scan.units]
    k, g, h, f, e = (names.index(x) for x in "kghfe")
    assert scan.edges[k] == {g}  # the direct call and the getpc/swappc call both reach g
    assert scan.edges[h] == {g}  # a branch into another unit, from the unit's first instruction
    assert scan.edges[g] == set() and scan.edges[f] == set() and scan.edges[e] == set()
    assert [(p.unit, p.kind) for p in scan.problems if p.unit in names[:e + 1]] == [
        ("n", "falls-through"), ("f", "undecodable"), ("e", "undecodable")]
    assert ".long 0xffffffff" in listing.split("<f>:")[1]  # (llvm-objdump does not decode that word either)


def test_a_branch_into_the_middle_of_an_instruction_is_a_problem(built):
    co, listing, labels = built
    data = bytearray(co.data)
    # s_branch .Lk_end0 -> one dword further: into v_mov_b32's literal (llvm-objdump shows the word)
    sk = labels["k_skip"]
    off = co.section(".text").offset + sk - co.section(".text").addr
    word = int.from_bytes(data[off:off + 4], "little")
    assert word >> 16 == 0xBF82  # s_branch
    data[off:off + 4] = (word - 1).to_bytes(4, "little")
    scan = scan_text(CodeObject(bytes(data)), "gfx1030")
    assert [(p.unit, p.kind, p.address) for p in scan.problems if p.unit in "kghnfe"] == [
        ("k", "branch-target", sk), ("n", "falls-through", labels["n"]), ("f", "undecodable", labels["f"] + 8),
        ("e", "undecodable", labels["e"] + 8)]
    got = {scan.insts[i].address for i in scan.branches}
    want = set(_objdump_branches(listing)) - {sk} - {a for a in _objdump_branches(listing) if a >= labels["f"]}
    assert got == want  # the unit's other branches are recorded still
