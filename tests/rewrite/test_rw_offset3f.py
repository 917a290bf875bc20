"""The Offset3fBug fixpoint: no relocated SOPP branch may end up with simm16 0x3f."""

from __future__ import annotations

import os

from rw_common import FIXTURES, MARK_BEFORE, NOP7, RELOC, function_lines, read, write_tmp
from rw_oracle import check_rewrite, objdump
from kpatch.rewrite.edits import Edit
from kpatch.rewrite.relocate import apply_edits


def _after(lines, addr):
    i = next(k for k, x in enumerate(lines) if x.addr == addr)
    return lines[i + 1]


def _branches(path, func):
    return [x for x in function_lines(path)[func] if x.mnemonic.startswith("s_cbranch")]


def test_one_insertion_makes_0x3f_and_gets_a_nop(tmp_path):
    """k_main skips 62 dwords; one word inserted inside the skipped code gives 0x3f."""
    lines = function_lines(RELOC)["k_main"]
    br = next(x for x in lines if x.text == "s_cbranch_scc1 62")
    inside = _after(lines, br.addr + 8)  # a v_add in the skipped range, not the target
    r = apply_edits(read(RELOC), "gfx1030", [Edit(inside.addr, "insert_before", NOP7, "t")])
    new = write_tmp(tmp_path, "new.hsaco", r.data)
    assert check_rewrite(RELOC, new, {MARK_BEFORE}).problems == []
    nl = function_lines(new)["k_main"]
    nbr = next(x for x in nl if x.mnemonic == "s_cbranch_scc1" and x.text.endswith(" 64"))
    assert _after(nl, nbr.addr).text == "s_nop 0"
    assert r.relocations["offset3f_fixed"] == 1
    assert ("offset3f" in {rule for _, _, rule in r.inserted})


def test_without_offset3f_the_branch_keeps_0x3f(tmp_path):
    lines = function_lines(RELOC)["k_main"]
    br = next(x for x in lines if x.text == "s_cbranch_scc1 62")
    inside = _after(lines, br.addr + 8)
    r = apply_edits(read(RELOC), "gfx1030", [Edit(inside.addr, "insert_before", NOP7, "t")],
                    offset3f=False)
    new = write_tmp(tmp_path, "new.hsaco", r.data)
    nl = function_lines(new)["k_main"]
    assert any(x.text == "s_cbranch_scc1 63" for x in nl)
    assert r.relocations["offset3f_fixed"] == 0


def test_fixpoint_needs_a_second_round(tmp_path):
    """k_chain: the inner branch's s_nop 0 pushes the outer branch to 0x3f."""
    lines = function_lines(RELOC)["k_chain"]
    inner = next(x for x in lines if x.text == "s_cbranch_scc1 62")
    outer = next(x for x in lines if x.text == "s_cbranch_vccz 61")
    first_skipped = _after(lines, inner.addr)
    r = apply_edits(read(RELOC), "gfx1030", [Edit(first_skipped.addr, "insert_before", NOP7, "t")])
    new = write_tmp(tmp_path, "new.hsaco", r.data)
    assert check_rewrite(RELOC, new, {MARK_BEFORE}).problems == []
    nl = function_lines(new)["k_chain"]
    texts = [x.text for x in nl]
    i = texts.index("s_cbranch_vccz 64")
    assert texts[i + 1] == "s_nop 0" and texts[i + 2] == "s_cbranch_scc1 64"
    assert texts[i + 3] == "s_nop 0"
    assert r.relocations["offset3f_fixed"] == 2
    assert outer.addr < inner.addr


def test_preexisting_0x3f_branch_is_left_to_the_rules(tmp_path):
    """asm_lds_swap already has a 0x3f branch: untouched when its distance does not change."""
    path = os.path.join(FIXTURES, "asm_kernels.s.gfx1030.v4.hsaco")
    lines = function_lines(path)["asm_lds_swap"]
    assert any(x.text == "s_cbranch_scc1 63" for x in lines)
    r = apply_edits(read(path), "gfx1030", [Edit(lines[1].addr, "insert_before", NOP7, "t")])
    new = write_tmp(tmp_path, "new.hsaco", r.data)
    assert check_rewrite(path, new, {MARK_BEFORE}).problems == []
    assert any(x.text == "s_cbranch_scc1 63" for x in function_lines(new)["asm_lds_swap"])
    assert r.relocations["offset3f_fixed"] == 0


def test_insertion_inside_a_0x3f_range_gives_0x40_without_a_nop(tmp_path):
    path = os.path.join(FIXTURES, "asm_kernels.s.gfx1030.v4.hsaco")
    lines = function_lines(path)["asm_lds_swap"]
    br = next(x for x in lines if x.text == "s_cbranch_scc1 63")
    r = apply_edits(read(path), "gfx1030", [Edit(_after(lines, br.addr + 4).addr, "insert_before",
                                                 NOP7, "t")])
    new = write_tmp(tmp_path, "new.hsaco", r.data)
    nl = objdump(new)
    nbr = next(x for x in nl if x.text == "s_cbranch_scc1 64")
    assert _after(nl, nbr.addr).text != "s_nop 0"
    assert r.relocations["offset3f_fixed"] == 0
