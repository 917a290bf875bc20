"""`kpatch diff` on librocrand's gfx1030 code object (compiler-made, ~44,500
instructions, 80 kernels): cache bits changed in place on loads across the
object show up as exactly those changes, and the control-flow check
passes."""

from __future__ import annotations

import pytest

from kpatch.codeobject import CodeObject
from kpatch.containers.discover import Found, discover
from kpatch.isa import encode
from kpatch.diff.align import CHANGED, FieldChange
from kpatch.diff.branchcheck import check_branches
from kpatch.diff.compare import diff_objects
from kpatch.diff.functions import units

from .conftest import objdump, write


@pytest.mark.corpus
def test_rocrand_gfx1030_glc_changes(librocrand, tmp_path):
    (data,) = [f.data for f in discover([librocrand]) if isinstance(f, Found)
               and f.origin.get("bundle_entry", "").endswith("--gfx1030")]
    co = CodeObject.from_bytes(data)
    off = co.text_offset - co.text_vaddr
    patched = bytearray(data)
    picked = []
    # every 7th global/buffer load without glc, over the whole object
    loads = [i for u in units(co, "gfx1030") for i in u.insts
             if i.format in ("FLAT", "MUBUF") and "_load_" in i.mnemonic and i.fields["glc"] == 0]
    for i in loads[::7]:
        new = encode(i, glc=1)
        patched[i.address + off:i.address + off + len(new)] = new
        picked.append(i.address)
    assert len(picked) > 20
    patched = bytes(patched)
    d = diff_objects(data, patched)
    changed = [r for u in d.units for r in u.rows if r.kind != "equal"]
    assert sorted(r.old.address for r in changed) == sorted(picked)
    assert all(r.kind == CHANGED and r.changes == [FieldChange("glc", 0, 1)] for r in changed)
    assert d.problems == [] and d.header == [] and d.symbols == []
    after = dict(objdump(write(str(tmp_path / "p.co"), patched)))
    assert all(r.new.text() == after[r.new.address] for r in changed)
    assert check_branches(co, CodeObject.from_bytes(patched)) == []
