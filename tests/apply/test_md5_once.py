"""The MD5 of an entry's code object is computed once per apply (issue 14):
reading the row checks it against ``kernel_hash``, and the provenance
record's ``source_md5`` of the same bytes is that digest, not a second
pass over the object (a Tensile object can be most of a GiB)."""

from __future__ import annotations

import hashlib

from kpatch.apply.db import apply_to_db
from kpatch.apply.modes import default_patch_fn, default_provenance_fn
from kpatch.containers import kdb as kdb_module
from kpatch.containers.kdb import KernelDB, md5_hex
from kpatch.data import expand
from kpatch.rewrite import provenance
from kpatch.rewrite.provenance import provenance_record


_MD5 = hashlib.md5


class _Counting:
    """hashlib.md5 that counts the bytes objects it hashes, by content."""

    def __init__(self):
        self.seen: dict[bytes, int] = {}

    def __call__(self, data=b"", **kw):
        b = bytes(data)
        self.seen[b] = self.seen.get(b, 0) + 1
        return _MD5(b, **kw)


def test_each_source_object_is_hashed_once(monkeypatch, tmp_path):
    src = expand("@sample")
    with KernelDB.open(src) as db:
        originals = {e.code() for e in db.entries()}
    counting = _Counting()
    # every MD5 kpatch takes goes through kdb.md5_hex; before, provenance hashed with hashlib itself
    monkeypatch.setattr(kdb_module.hashlib, "md5", counting)
    res = apply_to_db([src], str(tmp_path / "gfx1030_18.ukdb"), mode="override", rule_sets=[],
                      patch_fn=default_patch_fn("override"), is_patched=default_provenance_fn(),
                      dry_run=False, jobs=1)
    assert res.counts()["changed"] >= 1
    assert all(counting.seen.get(o, 0) == 1 for o in originals), sorted(counting.seen.get(o, 0) for o in originals)
    # the records written still name the MD5 of their sources (hashlib's own, independently)
    with KernelDB.open(str(tmp_path / "gfx1030_18.ukdb")) as out:
        sources = {provenance.read_provenance(c)["source_md5"] for c in (e.code() for e in out.entries())
                   if c[:4] == b"\x7fELF"}  # (the bundles' records are inside their entries)
    monkeypatch.undo()
    assert sources <= {hashlib.md5(o).hexdigest() for o in originals} and sources


def test_the_memo_is_by_identity_and_content():
    a = bytes(range(256)) * 4
    b = bytearray(a)
    assert md5_hex(a) == hashlib.md5(a).hexdigest()
    b[0] ^= 1  # a mutable buffer changed in place: hashed again
    assert md5_hex(b) == hashlib.md5(b).hexdigest()
    assert md5_hex(a) == hashlib.md5(a).hexdigest()
    assert provenance_record(a, rules=[], made_safe_for="gfx1010", mode="override")["source_md5"] == \
        hashlib.md5(a).hexdigest()
