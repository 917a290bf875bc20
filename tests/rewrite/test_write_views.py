"""elfpatch.write copies a section it does not fix straight into the new
file (issue 14: every section was copied into a bytearray first, a whole
object per write, twice per patched object); the one thing that writes into
such a section -- the linker-written addend at an R_AMDGPU_RELATIVE64
relocation's place, which must follow the moved target -- works on a copy
of its own (elfpatch._writable), so the new value lands in the file and
neither the original bytes nor a caller's new contents are changed.

calls.hip's .data holds two R_AMDGPU_RELATIVE64 function pointers whose
places the linker left 0; the tests write each relocation's addend at its
place (what linkers that apply dynamic relocations do) and move the code:
the new place must hold the new addend, as the new relocation record says
(test_rw_insert checks those records against llvm-readelf)."""

from __future__ import annotations

import struct

import pytest

from rw_common import CALLS, NOP7, function_lines, read
from kpatch.codeobject import CodeObject
from kpatch.rewrite import elfpatch
from kpatch.rewrite.edits import Edit
from kpatch.rewrite.relocate import apply_edits, rewrite

RELA = struct.Struct("<QQq")  # r_offset, r_info, r_addend (ELF64)


def _places(data: bytes) -> list[tuple[int, int, int]]:
    """(file offset of the place, the addend, the 8 bytes at the place) of
    each relocation of .rela.dyn (all in .data here)."""
    co = CodeObject.from_bytes(data)
    rela, dsec = co.section(".rela.dyn"), co.section(".data")
    body = co.elf.section_bytes(rela)
    out = []
    for at in range(0, len(body), RELA.size):
        off, _, addend = RELA.unpack_from(body, at)
        assert dsec.addr <= off < dsec.addr + dsec.size
        fo = dsec.offset + off - dsec.addr
        out.append((fo, addend, int.from_bytes(data[fo:fo + 8], "little")))
    return out


def _with_addends_in_place() -> bytes:
    data = bytearray(read(CALLS))
    places = _places(bytes(data))
    assert len(places) == 2 and all(v == 0 for _, _, v in places)  # (what the linker left)
    for fo, addend, _ in places:
        data[fo:fo + 8] = addend.to_bytes(8, "little")
    return bytes(data)


def _edits() -> list[Edit]:
    lines = function_lines(CALLS)
    return [Edit(lines["k_calls"][3].addr, "insert_before", NOP7 * 1100, "big"),
            Edit(lines["_Z3f_af"][0].addr, "insert_before", NOP7, "entry")]


def test_a_written_addend_follows_its_moved_target():
    data = _with_addends_in_place()
    kept = bytes(bytearray(data))
    r = apply_edits(data, "gfx1030", _edits())
    assert data == kept  # (the original bytes are read, never written)
    old, new = _places(data), _places(r.data)
    assert [a for _, a, _ in new] != [a for _, a, _ in old]  # the targets moved
    assert all(value == addend for _, addend, value in new)
    assert r.relocations["relocations_fixed"] == 2


def test_a_callers_contents_are_not_changed():
    data = _with_addends_in_place()
    dsec = CodeObject.from_bytes(data).section(".data")
    given = bytearray(data[dsec.offset:dsec.offset + dsec.size])
    before = bytes(given)
    r = rewrite(data, "gfx1030", _edits(), section_contents={".data": given})
    assert given == before
    assert all(value == addend for _, addend, value in _places(r.data))


def test_a_lost_or_misplaced_write_is_caught(monkeypatch):
    """Two broken variants of elfpatch._writable: one whose copy is not what
    goes into the file (the new addend is lost), one that writes into the
    section's bytes as given (a caller's contents changed)."""
    def lost(body, index):
        return bytearray(body[index])

    def into_given(body, index):
        b = body[index]
        return b.obj if isinstance(b, memoryview) and isinstance(b.obj, bytearray) else bytearray(b)

    with monkeypatch.context() as m:
        m.setattr(elfpatch, "_writable", lost)
        with pytest.raises(AssertionError):
            test_a_written_addend_follows_its_moved_target()
    with monkeypatch.context() as m:
        m.setattr(elfpatch, "_writable", into_given)
        with pytest.raises(AssertionError):
            test_a_callers_contents_are_not_changed()
