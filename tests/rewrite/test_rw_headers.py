"""Header-level edits (e_flags, metadata note, descriptor fields) and the provenance note."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from rw_common import CALLS, FIXTURES, IMMOVABLE, RELOC, fixture_objects, read, readelf_notes, write_tmp
from rw_oracle import check_rewrite, descriptor_entries, load_with_pyelftools, readelf, sections
from kpatch.errors import FormatError
from kpatch.rewrite.edits import Refusal
from kpatch.rewrite.provenance import (NT_KPATCH_PROVENANCE, add_provenance, provenance_record,
                                       read_provenance)
from kpatch.rewrite.headers import set_descriptor_field, set_e_flags, set_metadata

GFX1010_XNACK_OFF = "amdgcn-amd-amdhsa--gfx1010:xnack-"


def _clean(path: str) -> None:
    out, err = readelf(path, "-a", "--wide")
    assert err == "" and "warning" not in out.lower()
    assert load_with_pyelftools(path) > 0


def test_set_e_flags(tmp_path):
    data = read(RELOC)
    new = set_e_flags(data, 0x233)
    p = write_tmp(tmp_path, "f.hsaco", new)
    out = subprocess.run(["llvm-readobj-16", "-h", p], capture_output=True, text=True,
                         check=True).stdout
    assert "EF_AMDGPU_MACH_AMDGCN_GFX1010 (0x33)" in out and "EF_AMDGPU_FEATURE_XNACK_OFF_V4" in out
    assert [i for i in range(len(data)) if data[i] != new[i]] == [48, 49]


@pytest.mark.parametrize("path", fixture_objects(), ids=os.path.basename)
def test_set_metadata_that_grows_the_note(path, tmp_path):
    """The note grows by 7 bytes: everything after it moves; descriptors, getpc
    literals into .rodata, symbols and DT_* entries follow (checked by the oracle)."""
    def retarget(md):
        md["amdhsa.target"] = GFX1010_XNACK_OFF

    new = write_tmp(tmp_path, "m.hsaco", set_metadata(read(path), retarget))
    _clean(new)
    assert f"amdhsa.target:   '{GFX1010_XNACK_OFF}'" in readelf_notes(new)
    assert check_rewrite(path, new).problems == []
    assert descriptor_entries(new) == {k: v - sections(path)[".text"].addr + sections(new)[".text"].addr
                                       for k, v in descriptor_entries(path).items()}


def test_set_metadata_same_size_changes_only_the_note():
    data = read(RELOC)
    # .sgpr_count 40 -> 41: both are one-byte MessagePack fixints
    new = set_metadata(data, lambda md: md.kernels[0].__setitem__(".sgpr_count", 41))
    s = sections(RELOC)[".note"]
    diff = [i for i in range(len(data)) if data[i] != new[i]]
    assert diff and all(s.offset <= i < s.offset + s.size for i in diff)
    assert len(new) == len(data)


def test_set_metadata_unchanged_is_identity():
    data = read(CALLS)
    assert set_metadata(data, lambda md: None) == data


def test_growing_the_note_of_an_immovable_object_is_refused():
    def retarget(md):
        md["amdhsa.target"] = GFX1010_XNACK_OFF

    with pytest.raises(Refusal) as e:
        set_metadata(read(IMMOVABLE), retarget)
    assert e.value.kind == "immovable" and e.value.kernel is None


def test_set_descriptor_field(tmp_path):
    data = read(RELOC)
    new = set_descriptor_field(data, "k_plain", "WGP_MODE", 0)
    p = write_tmp(tmp_path, "d.hsaco", new)
    out = subprocess.run(["llvm-objdump-16", "-D", "--disassemble-symbols=k_plain.kd", p],
                         capture_output=True, text=True, check=True).stdout
    assert ".amdhsa_workgroup_processor_mode 0" in out
    old = subprocess.run(["llvm-objdump-16", "-D", "--disassemble-symbols=k_plain.kd", RELOC],
                         capture_output=True, text=True, check=True).stdout
    assert ".amdhsa_workgroup_processor_mode 1" in old
    diff = [i for i in range(len(data)) if data[i] != new[i]]
    assert len(diff) == 1  # bit 29 of RSRC1: one byte


def test_provenance_roundtrip_and_replace(tmp_path):
    data = read(RELOC)
    assert read_provenance(data) is None
    rec = provenance_record(data, rules=["gfx1010-isa", "gfx1010-hazards"], made_safe_for="gfx1010",
                            mode="override")
    new = add_provenance(data, rec)
    assert read_provenance(new) == rec
    p = write_tmp(tmp_path, "p.hsaco", new)
    _clean(p)
    notes = readelf_notes(p)
    assert notes.count("kpatch ") == 1 and f"(0x{NT_KPATCH_PROVENANCE:08x})" in notes
    assert check_rewrite(RELOC, p).problems == []
    # the note is plain JSON, visible with llvm-readelf's hex dump
    hexdata = notes.split("description data:")[-1].split()
    assert json.loads(bytes(int(h, 16) for h in hexdata).decode()) == rec
    # writing again replaces it
    rec2 = dict(rec, rules=["cu-mode"], extra={"n": 2})
    again = add_provenance(new, rec2)
    assert read_provenance(again) == rec2
    p2 = write_tmp(tmp_path, "p2.hsaco", again)
    assert readelf_notes(p2).count("kpatch ") == 1
    assert check_rewrite(RELOC, p2).problems == []
    # metadata is untouched
    assert readelf_notes(p2).split("kpatch")[0].rstrip() == readelf_notes(RELOC).rstrip()


def test_provenance_on_a_fixture_with_a_larger_note(tmp_path):
    path = os.path.join(FIXTURES, "miopen_like.cl.gfx1030.v5.hsaco")
    new = add_provenance(read(path), {"made_safe_for": "gfx1010", "rules": []})
    p = write_tmp(tmp_path, "p.hsaco", new)
    _clean(p)
    assert check_rewrite(path, p).problems == []
    assert read_provenance(new)["made_safe_for"] == "gfx1010"


def test_corrupt_provenance_is_a_format_error():
    new = bytearray(add_provenance(read(RELOC), {"x": 1}))
    at = bytes(new).find(b'{"x":1}')
    new[at] = ord("[")
    with pytest.raises(FormatError):
        read_provenance(bytes(new))


def test_set_metadata_that_shrinks_the_note_moves_nothing_else(tmp_path):
    """A smaller note leaves a gap: no section after it moves, the NOTE segment shrinks."""
    def drop(md):
        for k in md.kernels:
            del k[".max_flat_workgroup_size"]

    new = write_tmp(tmp_path, "s.hsaco", set_metadata(read(RELOC), drop))
    _clean(new)
    old_s, new_s = sections(RELOC), sections(new)
    assert new_s[".note"].size < old_s[".note"].size
    for name, s in old_s.items():
        if name != ".note":
            assert (new_s[name].addr, new_s[name].offset) == (s.addr, s.offset)
    assert "max_flat_workgroup_size" not in readelf_notes(new)
    assert check_rewrite(RELOC, new).problems == []
    out, _ = readelf(new, "-l", "--wide")
    note = next(line.split() for line in out.splitlines() if line.split()[:1] == ["NOTE"])
    assert int(note[4], 16) == new_s[".note"].size
