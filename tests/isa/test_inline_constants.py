"""The inline-constant rule, in its one place (kpatch.isa.operands), against
llvm-mc-16's encodings: every integer -16..64 and every float constant."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess

import pytest

from kpatch.isa.operands import inline_code, inline_int, inline_u32

LLVM_MC = "llvm-mc-16"
FLOATS = ("0.5", "-0.5", "1.0", "-1.0", "2.0", "-2.0", "4.0", "-4.0", "0.15915494")


def _ssrc0(lines: list[str]) -> list[int]:
    """The first encoding byte (SOP1 ssrc0) of each ``s_mov_b32 s0, X`` line, as llvm-mc encodes it."""
    if shutil.which(LLVM_MC) is None:
        pytest.skip(f"{LLVM_MC} is not installed")
    p = subprocess.run([LLVM_MC, "-arch=amdgcn", "-mcpu=gfx1030", "-show-encoding"],
                       input="".join(f"s_mov_b32 s0, {x}\n" for x in lines), capture_output=True, text=True,
                       check=True)
    return [int(m.group(1), 16) for m in re.finditer(r"encoding: \[(0x[0-9a-f]+),", p.stdout)]


def test_integers_match_llvm():
    ns = list(range(-16, 65))
    codes = _ssrc0([str(n) for n in ns])
    assert [inline_code(n) for n in ns] == codes
    assert [inline_int(c) for c in codes] == ns
    assert [inline_u32(c) for c in codes] == [n & 0xFFFFFFFF for n in ns]
    assert inline_code(65) is None and inline_code(-17) is None


def test_floats_match_llvm():
    codes = _ssrc0(list(FLOATS))
    assert codes == list(range(240, 249))
    bits = [struct.unpack("<I", struct.pack("<f", float(x)))[0] for x in FLOATS[:8]] + [0x3E22F983]  # 1/(2*pi)
    assert [inline_u32(c) for c in codes] == bits
    assert inline_int(240) is None and inline_u32(255) is None and inline_u32(105) is None
