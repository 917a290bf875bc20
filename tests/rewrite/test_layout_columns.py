"""The code layout worked out over whole columns (issue 14): where every
instruction goes (textlayout._place: the units placed one after the other,
then every instruction's addresses at once with numpy) and the new .text
(TextLayout._build: the original bytes copied a run at a time, the inserted
code in one loop over the marked instructions) must be what placing and
writing them one unit and one instruction at a time gives -- the plain
algorithm, written out here -- on real patched objects (librocrand, a
Tensile library), and that comparison must catch a layout that is wrong."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import gfx1030_code_objects
from rw_common import built_layouts, librocrand_and_tensile
from kpatch.rewrite import patcher, textlayout


def _plain_place(lay) -> dict:
    """Where every group, instruction and unit of ``lay``'s code goes, one
    unit and one instruction at a time (sizes read from each instruction and
    its edits)."""
    sc, slots, nops = lay.scan, lay.slots, lay.nops3f
    marked = {sc.unit_of[i] for i in (*slots, *nops)}
    landing, new_addr, unit_start, unit_end, gap_len = {}, {}, [], [], []
    pos = sc.start
    for ui, u in enumerate(sc.units):
        need = pos + sc.gaps[ui].rigid
        start = u.start + textlayout._align_up(max(0, need - u.start), u.align)
        gap_len.append(start - pos)
        unit_start.append(start)
        if ui not in marked:
            for i in range(u.first, u.first + u.count):
                landing[i] = new_addr[i] = sc.insts[i].address + start - u.start
            pos = u.end + start - u.start
        else:
            pos = start
            for i in range(u.first, u.first + u.count):
                s = slots.get(i)
                landing[i] = pos
                if s is not None:
                    pos += sum(len(e.code) for e in s.before)
                new_addr[i] = pos
                pos += len(s.body(sc.insts[i].raw)) if s is not None else sc.insts[i].size
                pos += 4 * nops.get(i, 0)
                if s is not None:
                    pos += sum(len(e.code) for e in s.after)
        unit_end.append(pos)
    return {"landing": [landing[i] for i in range(len(sc.insts))],
            "new_addr": [new_addr[i] for i in range(len(sc.insts))],
            "unit_start": unit_start, "unit_end": unit_end, "gap_len": gap_len[:len(sc.units)],
            "end": pos + len(sc.gaps[-1].data)}


def _plain_text(lay) -> bytes:
    """The new .text of ``lay`` written one instruction at a time: each
    group's inserted code, its own bytes (``Instruction.raw``) or its
    replacement, its Offset3fBug nops (branches retargeted as the rewriter
    does it: that is tested in test_layout_sizes)."""
    sc = lay.scan
    out = bytearray(lay.size)
    for gi, g in enumerate(sc.gaps):
        n = lay.gap_len[gi]
        raw = g.data[:min(n, len(g.data))]
        raw += g.fill_word * ((n - len(raw)) // 4)
        at = lay.gap_start[gi] - sc.start
        out[at:at + n] = raw
    for ui, u in enumerate(sc.units):
        at = lay.unit_start[ui] - sc.start
        out[at:at + u.end - u.start] = sc.data[u.start - sc.start:u.end - sc.start]
    for ui in sorted({sc.unit_of[i] for i in (*lay.slots, *lay.nops3f)}):
        u = sc.units[ui]
        for j in range(u.first, u.first + u.count):  # a unit with edits, group by group
            s = lay.slots.get(j)
            pos = lay.landing[j] - sc.start
            code = (b"".join(e.code for e in s.before) + s.body(sc.insts[j].raw) if s is not None
                    else sc.insts[j].raw) + textlayout.NOP * lay.nops3f.get(j, 0)
            code += b"".join(e.code for e in s.after) if s is not None else b""
            out[pos:pos + len(code)] = code
    lay._retarget_branches(out)
    return bytes(out)


def _check(lay, text: bytes) -> None:
    # (booleans asserted: a failing comparison of these long lists would have pytest diff them,
    # quadratic, and with CI set it does not truncate: minutes for the broken variants below)
    plain = _plain_place(lay)
    same_places = lay.landing == plain["landing"] and lay.new_addr == plain["new_addr"]
    assert same_places, "instructions placed differently"
    same_units = (lay.unit_start, lay.unit_end, lay.gap_len[:len(lay.scan.units)], lay.end) == \
        (plain["unit_start"], plain["unit_end"], plain["gap_len"], plain["end"])
    assert same_units, "units or gaps placed differently"
    same_text = text == _plain_text(lay)
    assert same_text, "a different .text"


def test_columns_place_and_write_as_one_by_one(monkeypatch, librocrand):
    seen = {"slots": 0, "replaced": 0, "units": 0, "marked": 0}
    for data in librocrand_and_tensile(librocrand, 3):
        for lay, text in built_layouts(data, monkeypatch):
            _check(lay, text)
            seen["slots"] += len(lay.slots)
            seen["replaced"] += sum(s.replace is not None for s in lay.slots.values())
            seen["units"] += len(lay.scan.units)
            seen["marked"] += len({lay.scan.unit_of[i] for i in lay.slots})
    # the objects exercise what the columns stand for: edits, replacements, units with and without edits
    assert seen["slots"] > 500 and seen["replaced"] > 0 and seen["units"] > seen["marked"] > 10


def test_a_wrong_layout_is_caught(monkeypatch, librocrand):
    """Two deliberately broken variants: every unit taken for one without
    edits (the inserted code not making room), and the original bytes of a
    unit with edits copied as one run (over the inserted code)."""
    data = gfx1030_code_objects(librocrand)[0].data

    def no_unit_marked(scan, units):
        return np.zeros(len(textlayout._unit_columns(scan)[3]), dtype=bool)

    def one_run_per_unit(self, out, marked):
        sc = self.scan
        for ui in marked:
            u = sc.units[ui]
            at = int(self.new_addr_array[u.first]) - sc.start
            out[at:at + u.end - u.start] = sc.data[u.start - sc.start:u.end - sc.start]

    for name, broken in (("_in_units", no_unit_marked), ("_copy_runs", one_run_per_unit)):
        owner = textlayout if name == "_in_units" else textlayout.TextLayout
        with monkeypatch.context() as m:
            m.setattr(owner, name, broken)
            built = []
            real = textlayout.TextLayout._build
            m.setattr(textlayout.TextLayout, "_build",
                      lambda lay: (got := real(lay), built.append((lay, bytes(got[0]))))[0])
            try:
                patcher.patch_code_object(data, mode="override")
            except Exception:
                pass  # (a broken layout may also fail later checks; what it built is compared)
        assert built
        with pytest.raises(AssertionError):
            for lay, text in built:
                _check(lay, text)


def _stacked_layouts(data: bytes, monkeypatch) -> list:
    """(layout, the .text it built) of the rewrite of ``data`` with slots of
    shapes the patcher's rules do not make in the corpus (one piece of code
    before an instruction almost everywhere): two pieces before, with none,
    one or two after, at the first instruction of several functions."""
    from kpatch.codeobject import CodeObject
    from kpatch.rewrite.edits import Edit
    from kpatch.rewrite.relocate import apply_edits
    from rw_common import NOP0, NOP6, NOP7

    co = CodeObject.from_bytes(data)
    edits = []
    for n, e in enumerate(co.function_extents()[:6]):
        a = e.start  # (a function's first instruction)
        edits += [Edit(a, "insert_before", NOP7, "t"), Edit(a, "insert_before", NOP0 * 2, "t")]
        if n % 3 >= 1:
            edits.append(Edit(a, "insert_after", NOP6 * 3, "t"))
        if n % 3 == 2:
            edits.append(Edit(a, "insert_after", NOP0, "t"))
    built = []
    real = textlayout.TextLayout._build
    with monkeypatch.context() as m:
        m.setattr(textlayout.TextLayout, "_build",
                  lambda lay: (got := real(lay), built.append((lay, bytes(got[0]))))[0])
        r = apply_edits(data, "gfx1030", edits)
    assert r.relocations["edits_applied"] == len(edits)
    return built


def test_stacked_edits_place_and_write_as_one_by_one(monkeypatch, librocrand):
    data = gfx1030_code_objects(librocrand)[0].data
    built = _stacked_layouts(data, monkeypatch)
    assert built
    for lay, text in built:
        assert any(len(s.before) > 1 for s in lay.slots.values())
        assert any(len(s.after) > 1 for s in lay.slots.values())
        _check(lay, text)


def test_a_slot_read_as_its_first_edit_is_caught(monkeypatch, librocrand):
    """Two broken variants: the size of the code before an instruction taken
    from its first piece only (_slot_sizes), and only the first piece of
    code before an instruction written (_place_inserted)."""
    from kpatch.rewrite.edits import Slot
    data = gfx1030_code_objects(librocrand)[0].data
    real_sizes, real_place = textlayout._slot_sizes, textlayout.TextLayout._place_inserted

    def first_size(scan, slots):
        return real_sizes(scan, {i: Slot(s.before[:1], s.replace, s.after) for i, s in slots.items()})

    def first_piece(self, out, marked):
        slots = self.slots
        try:
            self.slots = {i: Slot(s.before[:1], s.replace, s.after) for i, s in slots.items()}
            return real_place(self, out, marked)
        finally:
            self.slots = slots

    for owner, name, broken in ((textlayout, "_slot_sizes", first_size),
                                (textlayout.TextLayout, "_place_inserted", first_piece)):
        with monkeypatch.context() as m:
            m.setattr(owner, name, broken)
            try:
                built = _stacked_layouts(data, monkeypatch)
            except AssertionError:
                continue  # (caught already: the counts differ)
        with pytest.raises(AssertionError):
            for lay, text in built:
                _check(lay, text)
