"""The rewriter asks :func:`relocate._edit_problem` only of slots that can
have one (issue 14: an object takes hundreds of thousands of insertions of
a few sequences): a slot that replaces nothing, is not part of a getpc
sequence and puts only code a slot before it was found clean with is
passed.  On real patched objects (librocrand's, a Tensile library) that
must give exactly what asking every slot gives, and the comparison must
catch a pass that skips a slot it should have asked (PC-relative code
inserted after clean code)."""

from __future__ import annotations

from rw_common import librocrand_and_tensile
from kpatch.isa import build
from kpatch.rewrite import patcher, relocate
from kpatch.rewrite.edits import Edit, Slot

GETPC = build.instruction("s_getpc_b64", "gfx1030", sdst=4)


def _plain(scan, slots, conflicts) -> dict:
    """Every slot asked, one at a time."""
    out = dict(conflicts)
    for i, slot in slots.items():
        if i not in out:
            p = relocate._edit_problem(scan, i, slot)
            if p is not None:
                out[i] = p
    return out


def _rows(problems: dict) -> list:
    return [(i, p.reason, p.kind, p.address) for i, p in problems.items()]


def _plans(data: bytes, monkeypatch) -> list:
    """(scan, slots, conflicts) of every layout planned while ``data`` is patched (override mode)."""
    got = []
    real = relocate._plan_layout

    def keep(scan, slots, conflicts, offset3f):
        got.append((scan, dict(slots), dict(conflicts)))
        return real(scan, slots, conflicts, offset3f)

    with monkeypatch.context() as m:
        m.setattr(relocate, "_plan_layout", keep)
        patcher.patch_code_object(data, mode="override")
    return got


def test_passing_clean_slots_finds_what_asking_every_slot_finds(monkeypatch, librocrand):
    slots_seen = 0
    for data in librocrand_and_tensile(librocrand):
        for scan, slots, conflicts in _plans(data, monkeypatch):
            assert _rows(relocate._edit_problems(scan, slots, conflicts)) == _rows(_plain(scan, slots, conflicts))
            slots_seen += len(slots)
    assert slots_seen > 500


def _with_late_getpc(scan, slots, code: bytes) -> dict:
    """``slots`` and, at an instruction after them that has none, ``code``
    followed by an s_getpc_b64 (PC-relative code: refused)."""
    free = [i for i in range(max(slots) + 1, len(scan.insts)) if i not in slots and i not in scan.getpc_at]
    i = free[0]
    a = scan.insts[i].address
    out = dict(slots)
    out[i] = Slot(before=[Edit(a, "insert_before", code, "t"), Edit(a, "insert_before", GETPC, "t")])
    return out


def test_pc_relative_code_after_clean_code_is_still_found(monkeypatch, librocrand):
    data = librocrand_and_tensile(librocrand)[0]
    scan, slots, conflicts = next((s, sl, c) for s, sl, c in _plans(data, monkeypatch) if sl)
    # code the object's slots insert (found clean on the way), then the getpc
    code = next(e.code for s in slots.values() for e in (*s.before, *s.after))
    late = _with_late_getpc(scan, slots, code)
    want = _rows(_plain(scan, late, conflicts))
    assert want and want[-1][2] == "edit-pc-relative"
    assert _rows(relocate._edit_problems(scan, late, conflicts)) == want

    # a pass that took every slot without a replacement outside getpc sequences as clean misses it
    def careless(scan, slots, conflicts):
        return _plain(scan, {i: s for i, s in slots.items() if s.replace is not None or i in scan.getpc_at},
                      conflicts)

    assert _rows(careless(scan, late, conflicts)) != want
