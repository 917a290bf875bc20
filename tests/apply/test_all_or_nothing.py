"""All or nothing (issue 9, item 2): in native mode a code object with a
refused kernel is not written (its gfx1030 code would otherwise run, labelled
gfx1010, instead of what MIOpen compiles for gfx1010); in override mode it may
be written, and apply says which kernels keep their original code.

Oracles: llvm-readelf-16 for the label, llvm-objdump-16 --mcpu=gfx1010 for
"nothing gfx1010 cannot decode", and the sample DB's source kernels (the
refused kernels' instruction text must equal the original's)."""

from __future__ import annotations

import re
import subprocess

import pytest

from conftest import FIXTURES, need_tool, objdump_functions
from kpatch.analysis import analyse
from kpatch.codeobject import CodeObject
from kpatch.containers.bundle import is_bundle, parse_bundle
from kpatch.containers.kdb import KernelDB
from kpatch.apply.blob import ALL_OR_NOTHING, patch_code_object_checked
from kpatch.rewrite.outcome import KernelOutcome, PatchResult
from kpatch.rewrite.patcher import patch_code_object
from kpatch.rewrite.provenance import read_provenance
from apply.conftest import python_cli

def _label(data: bytes, tmp_path) -> str:
    p = tmp_path / "l.co"
    p.write_bytes(data)
    out = subprocess.run(["llvm-readelf-16", "--notes", str(p)], capture_output=True, text=True, check=True).stdout
    return re.search(r"amdhsa\.target:\s*'?([^'\s]+)", out).group(1)


def _rows(path: str):
    """(name, args, code object) of every AMDGPU code object in the DB (bundle entries opened)."""
    out = []
    with KernelDB.open(path) as db:
        for e in db.entries():
            code = e.code()
            if is_bundle(code[:24]):
                out += [(e.kernel_name, e.kernel_args, bytes(b.data(code))) for b in parse_bundle(code)
                        if not b.is_host]
            else:
                out.append((e.kernel_name, e.kernel_args, code))
    return out


@pytest.mark.llvm
def test_native_output_has_no_kernel_with_a_finding(tmp_path):
    need_tool("llvm-readelf-16")
    need_tool("llvm-objdump-16")
    out = tmp_path / "out"
    r = python_cli("apply", "--db", "@sample", "--mode", "native", "--cu", "18", "--out-dir", str(out))
    assert r.returncode == 0, r.stderr
    rows = _rows(str(out / "gfx1010_18.ukdb"))
    assert rows
    written = {name for name, _, _ in rows}
    # the sample's objects with kernels gfx1010 cannot run exactly are not written at all
    assert "mathops.cpp.o" not in written and "asm_kernels.s.o" not in written
    for name, args, code in rows:
        assert args.endswith("-mcpu=gfx1010")
        assert _label(code, tmp_path) == "amdgcn-amd-amdhsa--gfx1010:xnack-", name
        report = analyse(CodeObject.from_bytes(code), "gfx1010")
        for fr in (*report.kernels, *report.functions):
            assert fr.findings == [] and fr.verdict.status == "ok", (name, fr.name, fr.findings)
        for fn, text in objdump_functions(code, tmp_path, "gfx1010").items():
            assert not [t for t in text if t.startswith(".long") or "s_inst_prefetch" in t], (name, fn)
    # and the refusals are reported per kernel, with the reason
    assert "half2_dot" in r.stdout and "fma_loop: not written: native mode" in r.stdout


def test_native_patcher_refuses_the_whole_object():
    data = open(f"{FIXTURES}/mathops.hip.gfx1030.v5.hsaco", "rb").read()
    res = patch_code_object(data, mode="native")
    assert res.data is None and not res.changed
    by = {k.name: k for k in res.kernels}
    assert by["half2_dot"].status == "refused" and "UnsupportedInstruction" in by["half2_dot"].reason
    others = [k for k in res.kernels if k.name != "half2_dot"]
    assert others and all(k.status == "refused" and "half2_dot" in k.reason for k in others)


def test_override_writes_the_object_and_says_which_kernels_are_unchanged(tmp_path):
    need_tool("llvm-objdump-16")
    data = open(f"{FIXTURES}/mathops.hip.gfx1030.v5.hsaco", "rb").read()
    res = patch_code_object(data, mode="override")
    assert res.data is not None
    assert [k.name for k in res.unchanged] == ["half2_dot"]
    assert "half2_dot" in read_provenance(res.data)["refused"]
    # the refused kernel's code is the original's, instruction for instruction
    before, after = objdump_functions(data, tmp_path, "gfx1030"), objdump_functions(res.data, tmp_path, "gfx1030")
    assert after["half2_dot"] == before["half2_dot"]
    # apply says so in one line
    src = tmp_path / "m.hsaco"
    src.write_bytes(data)
    r = python_cli("apply", str(src), "-o", str(tmp_path / "m.out"), "--mode", "override")
    assert r.returncode == 0, r.stderr
    line = next(l for l in r.stdout.splitlines() if l.startswith("partial"))
    n = len(CodeObject.from_bytes(data).kernels)
    assert f"written with 1 of {n} kernels unchanged" in line and "half2_dot (UnsupportedInstruction" in line


@pytest.mark.parametrize("mode", ALL_OR_NOTHING)
def test_orchestration_never_writes_a_partly_refused_object_in_native_or_relabel(mode):
    # any patch function (not only kpatch's) that returns bytes with a refused kernel
    src = "gfx1030" if mode == "native" else "gfx1010"
    data = open(f"{FIXTURES}/vecops.hip.{src}.v5.hsaco", "rb").read()
    names = [k.name for k in CodeObject.from_bytes(data).kernels]
    assert len(names) >= 2

    def half_refused(code, *, mode, rule_sets):
        from kpatch.apply.relabel import relabel_code_object
        from kpatch.codeobject import TargetId, e_flags_for
        import struct
        new = bytearray(code)
        target = TargetId("gfx1010", xnack="-") if mode == "native" else TargetId("gfx1030")
        struct.pack_into("<I", new, 48, e_flags_for(target, 5))
        if mode == "relabel":
            new = bytearray(relabel_code_object(code).data)
        return PatchResult(bytes(new), (KernelOutcome(names[0], "refused", "test refusal"),
                                        *(KernelOutcome(n, "patched", "", ("X",)) for n in names[1:])))

    r = patch_code_object_checked(data, mode=mode, rule_sets=[], patch_fn=half_refused, is_patched=lambda d: None)
    assert r.data is None
    assert all(k.status == "refused" for k in r.kernels)
    assert "test refusal" in r.kernels[1].reason
