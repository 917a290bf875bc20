"""Plain metadata maps shared by the readers of the same note bytes (issue
14: apply's check of a blob, the patcher, the header edits and the
verification each parse the object anew): decode_metadata(lossless=False)
gives every reader of equal bytes the one map it decoded, which must be
what the C reader gives for those bytes, and never a map of other bytes."""

from __future__ import annotations

import pytest

from conftest import gfx1030_code_objects
from kpatch.codeobject import metadata, mpack
from kpatch.codeobject.metadata import decode_metadata
from kpatch.rewrite import headers


def _changed_note(co) -> tuple[bytes, bytes]:
    """(the note of ``co``, the note of ``co`` with its first kernel's .vgpr_count one higher)."""
    from kpatch.codeobject import CodeObject
    kmd = co.metadata.kernels[0]
    new = headers.set_kernel_metadata(co.data, {kmd[".symbol"]}, lambda k: k.__setitem__(
        ".vgpr_count", k[".vgpr_count"] + 1))
    return bytes(co.metadata_notes[0].desc), bytes(CodeObject.from_bytes(new).metadata_notes[0].desc)


def _check(old: bytes, new: bytes) -> None:
    a = decode_metadata(old, lossless=False)
    assert decode_metadata(bytearray(old), lossless=False) is a  # equal bytes: the same map
    assert a.root == mpack.unpack_plain(old, allow_trailing=True)[0]
    b = decode_metadata(new, lossless=False)
    assert b.root == mpack.unpack_plain(new, allow_trailing=True)[0]
    assert b.kernels[0][".vgpr_count"] == a.kernels[0][".vgpr_count"] + 1
    assert decode_metadata(old, lossless=True) is not decode_metadata(old, lossless=True)  # never shared


def test_equal_note_bytes_share_one_plain_map(librocrand):
    for co in gfx1030_code_objects(librocrand)[:3]:
        old, new = _changed_note(co)
        assert len(old) == len(new) and old != new  # (one value changed in place)
        _check(old, new)


def test_a_map_of_other_bytes_is_caught(monkeypatch, librocrand):
    """A deliberately broken memo, keyed by the note's length only, hands
    the changed note the old map: the check sees it."""

    class ByLength(dict):
        def get(self, key, default=None):
            return next((v for k, v in self.items() if len(k) == len(key)), default)

    old, new = _changed_note(gfx1030_code_objects(librocrand)[0])
    monkeypatch.setattr(metadata, "_PLAIN_MEMO", ByLength())
    with pytest.raises(AssertionError):
        _check(old, new)
