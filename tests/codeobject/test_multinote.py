"""Code objects linked from several objects carry one NT_AMDGPU_METADATA note
per object (rocBLAS' Tensile libraries: hundreds).  kpatch reads them as the
runtime does (comgr merges every note's kernels into one map), writes each
kernel's metadata back into the note that describes it, and refuses notes
that disagree.

The object is built here as Tensile's are: two relocatable objects (an
OpenCL file by clang-15, an assembly file by clang-15's assembler) linked by
ld.lld-15.  Expected values come from llvm-readelf-16 --notes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import FIXTURES
from kpatch.codeobject import CodeObject
from kpatch.errors import FormatError
from kpatch.rewrite.headers import set_metadata

SRC = os.path.join(os.path.dirname(FIXTURES), "src")
DEVICE_LIBS = "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode"


@pytest.fixture(scope="module")
def linked(tmp_path_factory) -> str:
    for tool in ("clang-15", "ld.lld-15", "llvm-readelf-16"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    d = tmp_path_factory.mktemp("multinote")
    a, b, out = str(d / "a.o"), str(d / "b.o"), str(d / "linked.hsaco")
    subprocess.run(["clang-15", "-x", "cl", "-Xclang", "-finclude-default-header", "-target", "amdgcn-amd-amdhsa",
                    "-mcpu=gfx1030", "-O3", "-mcode-object-version=4", f"--rocm-device-lib-path={DEVICE_LIBS}",
                    "-c", os.path.join(SRC, "miopen_like.cl"), "-o", a], check=True)
    subprocess.run(["clang-15", "-x", "assembler", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1030",
                    "-mcode-object-version=4", "-Wa,-defsym,COV=4", "-c", os.path.join(SRC, "asm_kernels.s"),
                    "-o", b], check=True)
    subprocess.run(["ld.lld-15", "-shared", a, b, "-o", out], check=True)
    return out


def readelf_notes(path: str) -> list[str]:
    """The text llvm-readelf-16 prints for each NT_AMDGPU_METADATA note."""
    text = subprocess.run(["llvm-readelf-16", "--notes", path], capture_output=True, text=True, check=True).stdout
    parts = re.split(r"\n\s*AMDGPU\s+0x[0-9a-f]+\s+NT_AMDGPU_METADATA[^\n]*\n", text)
    return parts[1:]


def symbols_in(note_text: str) -> list[str]:
    return re.findall(r"^\s+\.symbol:\s+(\S+)", note_text, re.M)


def test_every_note_is_read_and_merged(linked):
    notes = readelf_notes(linked)
    assert len(notes) == 2
    want = [s for n in notes for s in symbols_in(n)]
    co = CodeObject.from_bytes(open(linked, "rb").read())
    assert len(co.metadata_notes) == 2
    assert [k[".symbol"] for k in co.metadata.kernels] == want
    assert sorted(k.symbol for k in co.kernels) == sorted(want)
    for k in co.kernels:  # each kernel finds its own map, whichever note holds it
        assert k.metadata is not None and k.metadata[".symbol"] == k.symbol


def test_a_kernel_edit_goes_into_its_own_note(linked, tmp_path):
    data = open(linked, "rb").read()
    before = readelf_notes(linked)
    second = symbols_in(before[1])[-1]

    def update(md):
        md.kernel(second)[".vgpr_count"] = 77

    out = tmp_path / "edited.hsaco"
    out.write_bytes(set_metadata(data, update))
    after = readelf_notes(str(out))
    assert after[0] == before[0]  # the other note is untouched
    assert after[1] != before[1]
    block = after[1][after[1].index(f".symbol:         {second}"):]
    assert re.search(r"\.vgpr_count:\s+77", after[1]) and ".vgpr_count:     77" not in after[0]
    assert block  # the edited kernel is in the second note


def test_a_target_change_goes_into_every_note(linked, tmp_path):
    data = open(linked, "rb").read()

    def update(md):
        md["amdhsa.target"] = "amdgcn-amd-amdhsa--gfx1010:xnack-"

    out = tmp_path / "retargeted.hsaco"
    out.write_bytes(set_metadata(data, update))
    for text in readelf_notes(str(out)):
        assert "amdhsa.target:   'amdgcn-amd-amdhsa--gfx1010:xnack-'" in text


def _second_note_edited(data: bytes, old: bytes, new: bytes) -> bytes:
    """``data`` with ``old`` replaced by ``new`` (same length) in the second metadata note only."""
    assert len(old) == len(new)
    co = CodeObject.from_bytes(data)
    note = co.metadata_notes[1]
    at = data.index(old, note.desc_offset, note.desc_offset + len(note.desc))
    return data[:at] + new + data[at + len(old):]


def test_notes_that_disagree_are_refused(linked, tmp_path):
    data = open(linked, "rb").read()
    # amdhsa.version [1, 1] in note 2 becomes [1, 2]: comgr would drop that note's kernels
    version = b"\xaeamdhsa.version\x92\x01\x01"
    bad = _second_note_edited(data, version, version[:-1] + b"\x02")
    with pytest.raises(FormatError, match=r"metadata notes disagree: note 1 says amdhsa.version \[1, 1\], "
                                          r"note 2 says \[1, 2\]"):
        CodeObject.from_bytes(bad).metadata
    bad = _second_note_edited(data, b"amdgcn-amd-amdhsa--gfx1030", b"amdgcn-amd-amdhsa--gfx1031")
    with pytest.raises(FormatError, match="note 2 says 'amdgcn-amd-amdhsa--gfx1031'"):
        CodeObject.from_bytes(bad).metadata
    path = tmp_path / "bad.hsaco"
    path.write_bytes(bad)
    p = subprocess.run([sys.executable, "-m", "kpatch", "scan", "--target", "gfx1010", str(path)],
                       capture_output=True, text=True)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert p.stderr.startswith(f"error: file://{path}: metadata notes disagree: note 1 says amdhsa.target")
