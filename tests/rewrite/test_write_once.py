"""The patched object is written once (issue 14): the patcher's finalize
(headers and the provenance record, which stores the rewrite's relocation
counts) is given the rewrite's result before the object is written, and the
object is then written with what it adds.  The counts must be those of
writing the object without the record, and an object nothing changes must
still come back as it was."""

from __future__ import annotations

import os

from conftest import gfx1030_code_objects
from kpatch.rewrite import elfpatch, relocate
from kpatch.rewrite.patcher import patch_code_object
from kpatch.rewrite.provenance import read_provenance


def _count_writes(monkeypatch) -> list[bool]:
    """Record, for every elfpatch.write call, whether it assembled a file."""
    calls: list[bool] = []
    real = elfpatch.write

    def counted(layout, contents, amap, **kw):
        out = real(layout, contents, amap, **kw)
        calls.append(out[0] is not None)
        return out

    monkeypatch.setattr(relocate, "write", counted)
    return calls


def test_patched_object_written_once_with_the_first_layouts_counts(monkeypatch, librocrand):
    data = gfx1030_code_objects(librocrand)[0].data
    calls = _count_writes(monkeypatch)
    r = patch_code_object(data, mode="override")
    assert r.data is not None
    assert calls.count(True) == 1  # (before: the object was written twice, once without the record)
    rec = read_provenance(r.data)
    # the record's counts are those of writing the rewrite without the record
    # (a layout with another note size): written here in full, independently
    monkeypatch.undo()
    seen = {}

    def keep(result):
        seen["counts"] = dict(result.relocations)
        seen["data"] = result.written()
        return None  # (nothing added: the rewrite as it is)

    calls2 = _count_writes(monkeypatch)
    edits = _patch_edits(data, monkeypatch)
    calls2.clear()
    out = relocate.apply_edits(data, "gfx1030", edits, offset3f=True, finalize=keep)
    assert calls2.count(True) == 1
    assert out.data == seen["data"]
    assert rec["relocations"] == seen["counts"]
    assert rec["relocations"]["edits_applied"] > 0 and rec["relocations"]["symbols_fixed"] > 0


def _patch_edits(data: bytes, monkeypatch) -> list:
    """The edits the patcher hands the rewriter for ``data`` (override mode)."""
    from kpatch.rewrite import patcher
    got = []
    real = patcher.apply_edits

    def capture(d, target, edits, **kw):
        got.append(list(edits))
        return real(d, target, edits, **kw)

    monkeypatch.setattr(patcher, "apply_edits", capture)
    patch_code_object(data, mode="override")
    monkeypatch.setattr(patcher, "apply_edits", real)
    return got[0]


def test_unchanged_object_comes_back_as_it_was(monkeypatch):
    """No edits and a finalize that adds nothing: the result is the object,
    written (once) although finalize was given no bytes."""
    path = os.path.join(os.path.dirname(__file__), "data", "calls.hip.gfx1030.hsaco")
    with open(path, "rb") as fh:
        data = fh.read()
    calls = _count_writes(monkeypatch)
    given = []

    def nothing(result):
        given.append(result.data)
        return None

    out = relocate.apply_edits(data, "gfx1030", [], finalize=nothing)
    assert given == [None]  # (finalize reads no bytes: the object is not written yet)
    assert out.data == relocate.apply_edits(data, "gfx1030", []).data
    assert calls.count(True) == 2  # (once here, once for the plain rewrite compared with)
