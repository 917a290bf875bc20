"""The VGPR bound the spare-register fixes start above
(:func:`kpatch.rewrite.spareregs._max_vgpr`, per encoding) and the bound of a
whole ``.text``, worked out once per object (every kernel of a Tensile
library's ``.co`` has a symbol without a size, so each needs it).

Expected values: the highest VGPR llvm-objdump-16 prints in the same bytes,
and the plain walk of every instruction in order (written here, as the
module's docstring states the rule)."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess

import pytest

from conftest import ROCBLAS_LIBRARY, need_tool
from kpatch.codeobject import CodeObject
from kpatch.isa import decode
from kpatch.isa.tables import IMPLICIT_FORMATS, implicit_uses
from kpatch.rewrite import spareregs
from kpatch.rewrite.spareregs import SOURCE_ISA, KernelCode, VgprBudget, _max_vgpr

#: small Tensile gfx1030 objects whose .text starts at the same address and names different VGPRs
SMALL = "TensileLibrary_Type_DD_Contraction_l_Alik_Bljk_Cijk_Dijk_fallback_gfx1030.hsaco"
OTHER = "TensileLibrary_Type_DD_Contraction_l_Alik_Bjlk_Cijk_Dijk_fallback_gfx1030.hsaco"
LARGER = "TensileLibrary_Type_SS_Contraction_l_Alik_Bjlk_Cijk_Dijk_fallback_gfx1030.hsaco"


def _object(name: str) -> bytes:
    path = os.path.join(ROCBLAS_LIBRARY, name)
    if not os.path.exists(path):
        pytest.skip(f"{path} is not fetched (tools/fetch_sid.sh)")
    return open(path, "rb").read()


def _walk(insts) -> tuple[int, str]:
    """The rule, one instruction at a time in order."""
    uses = implicit_uses(SOURCE_ISA)
    top = 0
    for i in insts:
        if i.is_unknown:
            return top, f"the word {int.from_bytes(i.raw[:4], 'little'):#010x} at {i.address:#x} does not decode"
        if i.format in IMPLICIT_FORMATS:
            implicit = uses.get((i.format, i.opcode))
            if implicit is None or "m0" in implicit:
                return top, f"{i.mnemonic} at {i.address:#x}"
        for r in (*i.reads, *i.writes):
            if r.file == "v":
                top = max(top, r.index + r.count)
    return top, ""


def _llvm_top(path: str) -> int:
    """One past the highest VGPR in llvm-objdump-16's disassembly of ``path``'s .text."""
    out = subprocess.run([need_tool("llvm-objdump-16"), "-d", "--mcpu=gfx1030", "-j", ".text", path],
                         capture_output=True, text=True, check=True).stdout
    top = 0
    for line in out.splitlines():
        code = line.split("//")[0]
        for m in re.finditer(r"\bv\[(\d+):(\d+)\]|\bv(\d+)\b", code):
            top = max(top, int(m.group(2)) + 1 if m.group(2) else int(m.group(3)) + 1)
    return top


@pytest.mark.llvm
@pytest.mark.parametrize("name", [SMALL, LARGER])
def test_whole_text_bound_is_llvms(tmp_path, name):
    data = _object(name)
    path = tmp_path / "t.hsaco"
    path.write_bytes(data)
    co = CodeObject.from_bytes(data)
    insts = decode(co.text, SOURCE_ISA, co.section(".text").addr)
    top, why = _max_vgpr(insts)
    assert why == "" and top == _llvm_top(str(path)) and (top, why) == _walk(insts)


def _blocking(insts: list, bad_at: int, word: bytes) -> list:
    """``insts`` with the instruction that ``word`` decodes to put at index ``bad_at``."""
    [bad] = decode(word, SOURCE_ISA, insts[bad_at].address)
    return insts[:bad_at] + [bad] + insts[bad_at + 1:]


@pytest.mark.parametrize("word, says", [
    (b"\xff\xff\xff\xff", "does not decode"),  # no gfx1030 instruction (llvm-objdump-16 prints .long)
    (bytes.fromhex("0287007e"), "reads M0 implicitly"),  # v_movrels_b32 v0, v2 (llvm-mc-16 -show-encoding)
])
def test_the_first_blocking_instruction_and_the_bound_before_it(word, says):
    co = CodeObject.from_bytes(_object(LARGER))
    insts = decode(co.text, SOURCE_ISA, co.section(".text").addr)
    for at in (0, 17, len(insts) // 2, len(insts) - 1):
        got = _max_vgpr(_blocking(insts, at, word))
        want = _walk(_blocking(insts, at, word))
        assert got[0] == want[0] and says in got[1] and f"{insts[at].address:#x}" in got[1]
    # two blocking instructions: the first is named
    twice = _blocking(_blocking(insts, 3000, word), 1200, word)
    assert f"{insts[1200].address:#x}" in _max_vgpr(twice)[1] and _max_vgpr(twice)[0] == _walk(insts[:1200])[0]


def test_each_object_gets_its_own_whole_text_bound(monkeypatch):
    """The bound kept for the last object is taken only for the same bytes at
    the same address: a kept bound keyed by less (here: the address alone) is
    caught, because the two objects' bounds differ."""
    a, b = CodeObject.from_bytes(_object(SMALL)), CodeObject.from_bytes(_object(OTHER))
    want = {}
    for co in (a, b):
        want[id(co)] = _walk(decode(co.text, SOURCE_ISA, co.section(".text").addr))
    assert want[id(a)] != want[id(b)] and a.section(".text").addr == b.section(".text").addr
    for co in (a, b, a):
        # as for a kernel that calls or whose symbol has no size (every one of a Tensile library's .co):
        # the whole .text is the scope
        k = co.kernels[-1]
        code = dataclasses.replace(KernelCode.of(co, k), calls=True)
        budget = VgprBudget.of(co, k, code)
        assert budget.first_free == max(want[id(co)][0], budget.vgpr_count or 0)
        assert spareregs._whole_text_max_vgpr(co) == want[id(co)]
    # the broken variant: kept by address alone
    spareregs._WHOLE_TEXT.clear()
    real = spareregs._whole_text_max_vgpr

    def by_address(co):
        if spareregs._WHOLE_TEXT and spareregs._WHOLE_TEXT[1] == co.section(".text").addr:
            return spareregs._WHOLE_TEXT[2]
        return real(co)

    assert by_address(a) == want[id(a)] and by_address(b) != want[id(b)]
