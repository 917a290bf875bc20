"""Tensile's long branch (rocBLAS' generated assembly) is relocated exactly,
and refused when its temporary register is read after the jump.

The kernel (tests/rewrite/data/long_branch.s) is assembled by clang-15 and
patched for gfx1010; llvm-objdump-16 then shows where the long branch goes:
its target (the address of the s_add_i32 + LIT + 4) must be the label
``label_Target`` in the patched object, as in the original.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from conftest import kpatch_in_process

HERE = os.path.join(os.path.dirname(__file__), "data", "long_branch.s")


def build(tmp_path, first: str) -> str:
    if shutil.which("clang-15") is None or shutil.which("llvm-objdump-16") is None:
        pytest.skip("clang-15 / llvm-objdump-16 not installed")
    src = tmp_path / "lb.s"
    src.write_text(open(HERE).read().replace("TARGET_FIRST", first))
    out = str(tmp_path / "lb.hsaco")
    subprocess.run(["clang-15", "-x", "assembler", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1030",
                    "-mcode-object-version=4", str(src), "-o", out], check=True)
    return out


def long_branch(path: str) -> tuple[int, int]:
    """(where llvm-objdump-16 says the long branch goes, address of label_Target)."""
    text = subprocess.run(["llvm-objdump-16", "-d", "--mcpu=gfx1030", path], capture_output=True, text=True,
                          check=True).stdout
    m = re.search(r"s_add_i32 s36, (\d+), 4\s+// ([0-9A-F]+):", text)
    label = re.search(r"^([0-9a-f]+) <label_Target>:", text, re.M)
    return int(m.group(2), 16) + int(m.group(1)) + 4, int(label.group(1), 16)


def kpatch(*args: str) -> subprocess.CompletedProcess:
    """The command's output and status (in this process: only they are checked)."""
    return kpatch_in_process(*args)


def test_the_offset_follows_the_code(tmp_path):
    src = build(tmp_path, "s_mov_b32 s36, 0")
    target, label = long_branch(src)
    assert target == label  # the fixture is what it claims
    out = str(tmp_path / "out.hsaco")
    p = kpatch("apply", "--mode", "override", src, "-o", out)
    assert p.returncode == 0 and "1 patched" in p.stdout, p.stdout + p.stderr
    new_target, new_label = long_branch(out)
    assert new_label > label  # code was inserted before the target ...
    assert new_target == new_label  # ... and the long branch still lands on it
    scan = kpatch("scan", "--target", "gfx1010", out)
    assert "1 ok, 0 patchable, 0 unpatchable" in scan.stdout


def test_a_temporary_read_after_the_jump_is_refused(tmp_path):
    src = build(tmp_path, "s_mov_b32 s37, s36")
    out = str(tmp_path / "out.hsaco")
    p = kpatch("apply", "--mode", "override", src, "-o", out)
    assert p.returncode == 0 and not os.path.exists(out)
    assert "s36, which holds the long branch's offset, is read at" in p.stdout
    assert "(s_mov_b32 s37, s36) before it is written" in p.stdout


def test_the_control_flow_check_follows_the_long_branch(tmp_path):
    """kpatch diff's independent control-flow check evaluates the long branch
    (getpc + constants, then setpc) in the original and the patched object:
    the real patch passes; a copy whose s_add_i32 literal is 4 bytes off
    (one dword: the jump lands on the instruction after the target) is
    caught as a wrong pc-relative target."""
    import struct

    from kpatch.codeobject import CodeObject
    from kpatch.diff.branchcheck import WRONG_PC_TARGET, check_branches

    src = build(tmp_path, "s_mov_b32 s36, 0")
    out = str(tmp_path / "out.hsaco")
    assert kpatch("apply", "--mode", "override", src, "-o", out).returncode == 0
    old, new = CodeObject.from_bytes(open(src, "rb").read()), CodeObject.from_bytes(open(out, "rb").read())
    assert check_branches(old, new) == []
    text = subprocess.run(["llvm-objdump-16", "-d", "--mcpu=gfx1030", out], capture_output=True, text=True,
                          check=True).stdout
    m = re.search(r"s_add_i32 s36, (\d+), 4\s+// ([0-9A-F]+): 812484FF ([0-9A-F]{8})", text)
    assert m is not None, text
    lit_at = int(m.group(2), 16) + 4  # the literal dword follows the SOP2 word
    data = bytearray(open(out, "rb").read())
    sec = new.section(".text")
    off = lit_at - sec.addr + sec.offset
    (lit,) = struct.unpack_from("<I", data, off)
    assert lit == int(m.group(1))
    struct.pack_into("<I", data, off, lit + 4)
    problems = check_branches(old, CodeObject.from_bytes(bytes(data)))
    assert [p.kind for p in problems] == [WRONG_PC_TARGET], problems
