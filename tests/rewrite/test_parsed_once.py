"""The rewriter takes its caller's parse of the object (apply_edits(parsed=...),
issue 14: the patcher has parsed it and read its kernels already) only for
the very bytes it rewrites: the result is the one of its own parse, and a
parse of other bytes is not used."""

from __future__ import annotations

from conftest import gfx1030_code_objects
from kpatch.codeobject import CodeObject
from kpatch.rewrite import relocate
from kpatch.rewrite.edits import Edit

NOP0 = bytes.fromhex("000080bf")  # s_nop 0


def test_parse_of_these_bytes_only(monkeypatch, librocrand):
    co = gfx1030_code_objects(librocrand)[0]
    data = co.data
    edits = [Edit(e.start, "insert_before", NOP0, "test") for e in co.function_extents()[:3]]
    own = relocate.apply_edits(data, "gfx1030", edits)
    assert own.data != data and own.relocations["edits_applied"] == 3
    other = own.data  # (another object: this one, patched)

    parses = []
    real = CodeObject.from_bytes.__func__
    monkeypatch.setattr(CodeObject, "from_bytes", classmethod(lambda cls, b, **k: (parses.append(b), real(cls, b, **k))[1]))
    given = relocate.apply_edits(data, "gfx1030", edits, parsed=CodeObject.from_bytes(data, lossless=False))
    assert given.data == own.data and given.relocations == own.relocations
    assert parses.count(data) == 1  # only the caller's parse

    parses.clear()
    wrong = relocate.apply_edits(data, "gfx1030", edits, parsed=CodeObject.from_bytes(other, lossless=False))
    assert wrong.data == own.data
    assert data in parses  # parsed again: the given parse is of other bytes
