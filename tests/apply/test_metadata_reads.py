"""Apply reads a code object's metadata with the lossless (pure-Python)
MessagePack reader only where it writes the note back (issue 14: the C
reader is several times faster); everything that only reads it (apply's
checks, the patcher's decisions, verification) uses the C reader."""

from __future__ import annotations

from kpatch.apply.blob import patch_code_object_checked
from kpatch.apply.modes import default_patch_fn, default_provenance_fn
from kpatch.codeobject import CodeObject, mpack
from kpatch.containers.discover import Found, discover
from kpatch.data import expand


def _notes(data: bytes) -> list[bytes]:
    return [bytes(n.desc) for n in CodeObject.from_bytes(data, lossless=False).metadata_notes]


def test_lossless_reads_only_for_notes_written(monkeypatch):
    lossless = []
    real = mpack.unpack

    def counting(*a, **k):
        lossless.append(1)
        return real(*a, **k)

    objects = [item.data for item in discover([expand("@sample")]) if isinstance(item, Found)]
    assert objects
    same = written = 0
    for data in objects:
        monkeypatch.setattr(mpack, "unpack", counting)
        lossless.clear()
        r = patch_code_object_checked(data, mode="override", rule_sets=[], patch_fn=default_patch_fn("override"),
                                      is_patched=default_provenance_fn())
        n = len(lossless)
        monkeypatch.undo()
        if r.data is None or _notes(r.data) == _notes(data):
            assert n == 0  # nothing written back: no lossless read at all
            same += 1
        else:
            assert n <= 2  # the note rewritten (descriptor actions, then the map they change)
            written += 1
    assert same
