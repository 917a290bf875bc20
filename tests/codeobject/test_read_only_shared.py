"""One read-only parse per code object while apply works on it (issue 14:
apply's check of a code object, the patcher and its kernel header edits each
parsed the same bytes and read their kernels again): CodeObject.read_only
gives the last parse again only for the very bytes object it parsed; other
bytes, even equal ones, are parsed anew, and what it gives reads as a plain
read-only parse does."""

from __future__ import annotations

import os

import pytest

from conftest import FIXTURES, gfx1030_code_objects
from kpatch.apply.blob import patch_code_object_checked
from kpatch.apply.modes import default_patch_fn, default_provenance_fn
from kpatch.codeobject import CodeObject
from kpatch.codeobject import model


def _parses(monkeypatch) -> list[bytes]:
    """The bytes every read-only CodeObject (lossless=False) is made from, from now on."""
    made: list[bytes] = []
    real = CodeObject.__init__

    def spy(self, data, name="", lossless=True):
        if not lossless:
            made.append(data)
        real(self, data, name, lossless)

    monkeypatch.setattr(CodeObject, "__init__", spy)
    return made


def _reads_alike(a: CodeObject, b: CodeObject) -> bool:
    return (a.data == b.data and a.lossless == b.lossless and a.target_id == b.target_id
            and [(k.name, k.symbol, k.descriptor_offset, k.entry, k.code_offset, k.code_size)
                 for k in a.kernels] ==
            [(k.name, k.symbol, k.descriptor_offset, k.entry, k.code_offset, k.code_size) for k in b.kernels]
            and a.function_extents() == b.function_extents() and a.metadata.root == b.metadata.root)


def test_the_same_bytes_object_only(librocrand):
    objs = [gfx1030_code_objects(librocrand)[0].data, open(os.path.join(FIXTURES, "mathops.hip.gfx1030.v4.hsaco"), "rb").read()]
    first = CodeObject.read_only(objs[0])
    assert CodeObject.read_only(objs[0]) is first
    assert _reads_alike(first, CodeObject.from_bytes(objs[0], lossless=False))
    copy = bytes(bytearray(objs[0]))  # equal bytes, another object
    assert copy == objs[0] and copy is not objs[0]
    assert CodeObject.read_only(copy) is not first
    other = CodeObject.read_only(objs[1])
    assert other.data is objs[1] and _reads_alike(other, CodeObject.from_bytes(objs[1], lossless=False))
    assert CodeObject.read_only(objs[0]) is not first  # (the last parse is the only one kept)


def test_apply_and_the_patcher_share_one_parse(monkeypatch, librocrand):
    data = gfx1030_code_objects(librocrand)[0].data
    kw = dict(mode="override", rule_sets=[], patch_fn=default_patch_fn("override"),
              is_patched=default_provenance_fn())
    plain = patch_code_object_checked(data, **kw)
    model._READ_ONLY[0] = None
    made = _parses(monkeypatch)
    shared = patch_code_object_checked(data, **kw)
    assert shared == plain and shared.data is not None
    # apply's check, the patcher and its header edits read the original through one parse
    assert sum(1 for b in made if b is data) == 1


def test_a_parse_of_other_bytes_is_caught(monkeypatch, librocrand):
    """A broken variant that gives the last parse whatever the bytes: the
    first test sees the other object read as the first one."""
    def any_bytes(cls, data):
        last = model._READ_ONLY[0]
        if last is not None:
            return last
        co = model._READ_ONLY[0] = cls.from_bytes(data, lossless=False)
        return co

    monkeypatch.setattr(CodeObject, "read_only", classmethod(any_bytes))
    with pytest.raises(AssertionError):
        test_the_same_bytes_object_only(librocrand)
