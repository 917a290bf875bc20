"""Where each function starts and ends: ``CodeObject.function_extents()``,
the one table every user of function extents reads (issue 12).

The rule: a function symbol's st_size when it is not 0; otherwise up to the
next function start or the end of ``.text``, whichever comes first (the
conservative choice: analysing more bytes can only find more).

The objects are built here with clang-15 (llvm-mc and ld.lld): a kernel
``k`` that calls ``f``, a device function without ``.size`` (st_size 0)
whose hazard (VMEMtoScalarWriteHazard: ``global_load_dword`` reads s[2:3],
``s_add_u32`` then writes s2) lies in its unsized bytes, a sized ``g`` and
an unsized ``h`` that ends .text.  Expected extents come from
llvm-readelf-16 (-s, -S), instruction addresses and texts from
llvm-objdump-16; every user - the analysis, the rewriter's scan of .text,
the patcher, the spare-register choice and the diff - must see ``f``'s code.
"""

from __future__ import annotations

import bisect
import re
import subprocess

import pytest

from conftest import need_tool, objdump_functions
from kpatch.analysis import analyse
from kpatch.analysis.codescan import scan_text
from kpatch.codeobject import CodeObject
from kpatch.codeobject.model import END_BY_NEXT, END_BY_SECTION, END_BY_SIZE
from kpatch.diff.compare import diff_objects
from kpatch.rewrite.patcher import DEFAULT_RULE_SETS, patch_code_object
from kpatch.rewrite.spareregs import KernelCode, VgprBudget

from .conftest import readelf_sections, readelf_symbols

pytestmark = pytest.mark.llvm

_DESCRIPTOR = """
    .rodata
    .p2align 6
    .amdhsa_kernel k
        .amdhsa_user_sgpr_kernarg_segment_ptr 1
        .amdhsa_wavefront_size32 1
        .amdhsa_next_free_vgpr 32
        .amdhsa_next_free_sgpr 32
    .end_amdhsa_kernel
.amdgpu_metadata
---
amdhsa.version: [ 1, 1 ]
amdhsa.target: amdgcn-amd-amdhsa--gfx1030
amdhsa.kernels:
  - .name: k
    .symbol: k.kd
    .kind: normal
    .kernarg_segment_size: 0
    .kernarg_segment_align: 4
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: 32
    .sgpr_count: 32
    .vgpr_count: 32
    .max_flat_workgroup_size: 256
    .args: []
...
.end_amdgpu_metadata
"""

#: k (sized) calls f (no .size: st_size 0, its hazard inside); g is sized;
#: h (no .size) is the last function of .text.
CALLS_UNSIZED = """
    .text
    .globl k
    .p2align 8
    .type k,@function
k:
    flat_load_dword v2, v[4:5] offset:8
    s_call_b64 s[30:31], f
    s_endpgm
.Lk_end:
    .size k, .Lk_end - k

    .p2align 8
    .type f,@function
f:
    global_load_dword v1, v0, s[2:3]
    s_add_u32 s2, s2, 4
    v_mov_b32 v40, 0
    s_setpc_b64 s[30:31]

    .p2align 8
    .type g,@function
g:
    s_setpc_b64 s[30:31]
.Lg_end:
    .size g, .Lg_end - g

    .p2align 2
    .type h,@function
h:
    s_setpc_b64 s[30:31]
""" + _DESCRIPTOR

#: the kernel itself has no .size; a sized function follows it.
KERNEL_UNSIZED = """
    .text
    .globl k
    .p2align 8
    .type k,@function
k:
    global_load_dword v1, v[2:3], off
    s_endpgm

    .p2align 8
    .type g,@function
g:
    s_setpc_b64 s[30:31]
.Lg_end:
    .size g, .Lg_end - g
""" + _DESCRIPTOR


def _build(tmp_path, name: str, source: str) -> str:
    clang = need_tool("clang-15")
    (tmp_path / f"{name}.s").write_text(source)
    subprocess.run([clang, "-x", "assembler", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1030",
                    "-mcode-object-version=4", f"{name}.s", "-o", f"{name}.hsaco"], cwd=tmp_path, check=True)
    return str(tmp_path / f"{name}.hsaco")


def _llvm_extents(path: str) -> dict[str, tuple[int, int, str]]:
    """name -> (start, end, how the end was decided), by the rule, from llvm-readelf-16 alone."""
    text = next(s for s in readelf_sections(path) if s["name"] == ".text")
    lo, hi = text["addr"], text["addr"] + text["size"]
    funcs = {s["name"]: (s["value"], s["size"]) for s in readelf_symbols(path)
             if s["table"] == ".symtab" and s["type"] == "FUNC" and s["ndx"] == str(text["index"])}
    starts = sorted({v for v, _ in funcs.values()})
    out = {}
    for name, (value, size) in funcs.items():
        if size:
            out[name] = (value, value + size, END_BY_SIZE)
            continue
        i = bisect.bisect_right(starts, value)
        out[name] = (value, starts[i], END_BY_NEXT) if i < len(starts) else (value, hi, END_BY_SECTION)
    return out


def _objdump(path: str) -> list[tuple[int, str]]:
    """(address, text) of every instruction llvm-objdump-16 decodes."""
    out = subprocess.run([need_tool("llvm-objdump-16"), "-d", path], capture_output=True, text=True,
                         check=True).stdout
    return [(int(m.group(2), 16), m.group(1)) for m in re.finditer(r"^\t(.*?)\s*// ([0-9A-F]+):", out, re.M)]


def _address_of(path: str, text: str) -> int:
    [a] = [a for a, t in _objdump(path) if t == text]
    return a


def test_the_table_follows_the_rule(tmp_path):
    path = _build(tmp_path, "calls", CALLS_UNSIZED)
    want = _llvm_extents(path)
    # what the object is: f and h have no size, f is followed by g, h ends .text
    assert want["f"][2] == END_BY_NEXT and want["f"][1] == want["g"][0]
    assert want["h"][2] == END_BY_SECTION and want["k"][2] == want["g"][2] == END_BY_SIZE
    got = CodeObject.from_bytes(open(path, "rb").read()).function_extents()
    assert {e.name: (e.start, e.end, e.end_from) for e in got} == want
    assert {e.name: e.kind for e in got} == {"k": "kernel", "f": "function", "g": "function", "h": "function"}
    [k] = [e for e in got if e.kind == "kernel"]
    assert k.kernel is not None and k.kernel.name == "k"


def test_a_kernel_without_a_size_ends_at_the_next_function(tmp_path):
    path = _build(tmp_path, "unsized", KERNEL_UNSIZED)
    want = _llvm_extents(path)
    assert want["k"] == (want["k"][0], want["g"][0], END_BY_NEXT)
    got = CodeObject.from_bytes(open(path, "rb").read()).function_extents()
    assert {e.name: (e.start, e.end, e.end_from) for e in got} == want


def test_the_analysis_sees_the_hazard_in_an_unsized_function(tmp_path):
    path = _build(tmp_path, "calls", CALLS_UNSIZED)
    want = _llvm_extents(path)
    report = analyse(CodeObject.from_bytes(open(path, "rb").read()), "gfx1010")
    functions = {f.name: f for f in report.functions}
    assert set(functions) == {"f", "g", "h"}
    f = functions["f"]
    assert f.address == want["f"][0] and f.address + f.size == want["f"][1]
    write = _address_of(path, "s_add_u32 s2, s2, 4")
    assert [(x.cls, x.address) for x in f.findings] == [("VMEMtoScalarWriteHazard", write)]
    # k calls: the device functions' verdict is its own too
    [k] = report.kernels
    assert "VMEMtoScalarWriteHazard" in f.verdict.rules or f.verdict.status != "ok"
    assert k.verdict.status != "ok" and set(f.verdict.rules) <= set(k.verdict.rules)


def test_the_rewriters_scan_covers_the_unsized_function(tmp_path):
    path = _build(tmp_path, "calls", CALLS_UNSIZED)
    want = _llvm_extents(path)
    scan = scan_text(CodeObject.from_bytes(open(path, "rb").read()), "gfx1030")
    units = {u.name: u for u in scan.units}
    # an unsized unit ends after its last instruction before the padding (s_nop 0 up to g)
    setpc = [a for a, t in _objdump(path) if t == "s_setpc_b64 s[30:31]" and want["f"][0] <= a < want["f"][1]]
    assert units["f"].start == want["f"][0] and units["f"].end == setpc[0] + 4
    assert [i.mnemonic for i in scan.insts[units["f"].first:units["f"].first + units["f"].count]] == [
        "global_load_dword", "s_add_u32", "v_mov_b32_e32", "s_setpc_b64"]


def test_the_patcher_fixes_the_unsized_function_and_its_caller(tmp_path):
    path = _build(tmp_path, "calls", CALLS_UNSIZED)
    data = open(path, "rb").read()
    res = patch_code_object(data, mode="override")
    assert res.data is not None and [(k.name, k.status) for k in res.kernels] == [("k", "patched")]
    old, new = objdump_functions(data, tmp_path), objdump_functions(res.data, tmp_path)
    # LLVM's view: the write of s2 now has the mitigation in front of it
    i = new["f"].index("s_add_u32 s2, s2, 4")
    assert new["f"][i - 1].startswith("s_waitcnt_depctr") and not any(
        t.startswith("s_waitcnt_depctr") for t in old["f"])
    after = analyse(CodeObject.from_bytes(res.data), "gfx1010")
    assert all(not r.findings for r in (*after.kernels, *after.functions))


def test_the_spare_registers_are_above_what_the_unsized_function_names(tmp_path):
    # k calls f, which names v40: nothing up to v40 is spare (from the source: k names v2..v5,
    # f names v0, v1 and v40; the metadata's .vgpr_count is 32)
    path = _build(tmp_path, "calls", CALLS_UNSIZED)
    co = CodeObject.from_bytes(open(path, "rb").read())
    [k] = co.kernels
    code = KernelCode.of(co, k)
    assert VgprBudget.of(co, k, code).first_free == 41


def test_pattern_rules_reach_a_kernel_without_a_size(tmp_path):
    # cache-policy's KC001 sets glc and dlc on every global load: the kernel's one load must get them
    path = _build(tmp_path, "unsized", KERNEL_UNSIZED)
    data = open(path, "rb").read()
    res = patch_code_object(data, mode="override", rule_sets=[*DEFAULT_RULE_SETS["override"], "cache-policy"])
    assert res.data is not None and [(k.name, k.status) for k in res.kernels] == [("k", "patched")]
    new = objdump_functions(res.data, tmp_path)["k"]
    assert new[0] == "global_load_dword v1, v[2:3], off glc dlc"


def test_the_diff_shows_the_unsized_function(tmp_path):
    # the other side is built by clang as well, with the mitigation written in the source
    path = _build(tmp_path, "calls", CALLS_UNSIZED)
    fixed = _build(tmp_path, "fixed", CALLS_UNSIZED.replace(
        "    s_add_u32 s2, s2, 4", "    s_waitcnt_depctr 0xffe3\n    s_add_u32 s2, s2, 4"))
    d = diff_objects(open(path, "rb").read(), open(fixed, "rb").read())
    units = {u.name: u for u in d.units}
    assert set(units) == {"k", "f", "g", "h"}
    f = units["f"]
    assert f.status == "changed" and f.old_range == _llvm_extents(path)["f"][:2]
    assert f.new_range == _llvm_extents(fixed)["f"][:2]
    inserted = [r.new.text() for r in f.rows if r.kind == "inserted"]
    assert inserted == [t for a, t in _objdump(fixed) if t.startswith("s_waitcnt_depctr")]
    assert [u.name for u in d.units if u.status == "changed"] == ["f"]


def test_disasm_of_a_kernel_without_a_size_lists_its_code(tmp_path):
    from conftest import kpatch_in_process
    path = _build(tmp_path, "unsized", KERNEL_UNSIZED)
    want = _llvm_extents(path)["k"]
    r = kpatch_in_process("disasm", "--kernel", "k", "--format", "lines", path)
    assert r.returncode == 0, r.stderr
    got = [(int(a, 16), t) for a, t in (line.split("\t") for line in r.stdout.splitlines() if line)]
    assert got == [(a, t) for a, t in _objdump(path) if want[0] <= a < want[1]]
    assert got[0][1] == "global_load_dword v1, v[2:3], off"
