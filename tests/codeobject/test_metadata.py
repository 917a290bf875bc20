"""The NT_AMDGPU_METADATA note: byte-exact round trips and correct values.

Oracles: the bytes LLVM wrote (round trip), the msgpack C library (values),
llvm-readelf-16 --notes (kernel names, symbols, target, version), and
llvm-readelf-16 reading a note kpatch re-encoded after an edit.
"""

from __future__ import annotations

import math
import re
import struct

import msgpack
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kpatch.codeobject import CodeObject, decode_metadata, encode_metadata
from kpatch.codeobject import mpack
from kpatch.elf.reader import ElfFile
from kpatch.errors import FormatError

from .conftest import CLANG19, READELF16, compile_cl, read, run, tool


def _metadata_desc(path: str) -> bytes:
    """The descriptor of the AMDGPU/32 note, found with llvm-readelf's section table
    and the ELF note format (independently of kpatch's reader)."""
    data = read(path)
    for m in re.finditer(r"^\s*\[\s*\d+\]\s+\S+\s+NOTE\s+[0-9a-f]{16}\s+([0-9a-f]+)\s+([0-9a-f]+)",
                         run(tool(READELF16), "-S", "-W", path), re.M):
        pos, end = int(m.group(1), 16), int(m.group(1), 16) + int(m.group(2), 16)
        while pos < end:
            namesz, descsz, ntype = struct.unpack_from("<III", data, pos)
            name_at = pos + 12
            desc_at = name_at + ((namesz + 3) & ~3)
            if data[name_at:name_at + namesz] == b"AMDGPU\0" and ntype == 32:
                return data[desc_at:desc_at + descsz]
            pos = desc_at + ((descsz + 3) & ~3)
    raise AssertionError(f"no metadata note in {path}")


def _readelf_notes(path: str) -> dict:
    text = run(tool(READELF16), "--notes", path)
    return {
        # kernel-level keys are indented by 4 (or start a list item "  - ")
        "names": re.findall(r"^(?:    |  - )\.name:\s+(.+?)\s*$", text, re.M),
        "symbols": re.findall(r"^(?:    |  - )\.symbol:\s+(.+?)\s*$", text, re.M),
        "target": (re.findall(r"^amdhsa\.target:\s+(\S+)\s*$", text, re.M) or [None])[0],
        "version": [int(v) for v in re.findall(
            r"^amdhsa\.version:\s*\n\s*-\s*(\d+)\s*\n\s*-\s*(\d+)", text, re.M)[0]],
    }


def _check_note(path: str) -> None:
    desc = _metadata_desc(path)
    md = decode_metadata(desc)
    assert encode_metadata(md) == desc
    assert md.to_python() == msgpack.unpackb(desc, raw=False, strict_map_key=False)
    # Real notes are canonical: everything decodes to plain Python types.
    assert md.root == md.to_python()
    notes = _readelf_notes(path)
    assert [k[".name"] for k in md.kernels] == [n.strip("'\"") for n in notes["names"]]
    assert [k[".symbol"] for k in md.kernels] == [n.strip("'\"") for n in notes["symbols"]]
    assert md.target == (notes["target"].strip("'") if notes["target"] else None)
    assert list(md.version) == notes["version"]
    co = CodeObject.from_bytes(read(path))
    assert co.metadata == md


def test_fixture_notes_round_trip_and_match_readelf(fixture_paths):
    for path in fixture_paths:
        _check_note(path)


@pytest.mark.corpus
def test_rocrand_notes_round_trip_and_match_readelf(rocrand_objects):
    assert len(rocrand_objects) == 7
    for path in rocrand_objects.values():
        _check_note(path)


def test_v3_note_has_no_target(tmp_path):
    path = compile_cl(tmp_path, "gfx1010", 3)
    _check_note(path)
    md = CodeObject.from_bytes(read(path)).metadata
    assert md.version == (1, 0) and md.target is None


def test_v6_generic_note(tmp_path):
    path = compile_cl(tmp_path, "gfx10-1-generic", 6, clang=CLANG19, link=False)
    _check_note(path)
    co = CodeObject.from_bytes(read(path))
    assert co.metadata.version == (1, 2)
    assert co.metadata.target == "amdgcn-amd-amdhsa--gfx10-1-generic" == co.target.hsa_target
    assert co.target.generic_version == 1 and co.kernels[0].metadata[".name"] == "k"


def test_edit_is_read_back_by_llvm(tmp_path, fixture_paths):
    """Change amdhsa.target (same length) and a kernel's .sgpr_count; splice the
    re-encoded note in; llvm-readelf-16 reads the new values."""
    path = next(p for p in fixture_paths if "gfx1030.v4" in p and "vecops" in p)
    co = CodeObject.from_bytes(read(path))
    md = co.metadata
    keys_before = list(md.keys())
    md["amdhsa.target"] = "amdgcn-amd-amdhsa--gfx1010"
    md.kernels[0][".sgpr_count"] = 99  # was < 128: stays a one-byte fixint
    new = encode_metadata(md)
    old = co.metadata_note.desc
    assert len(new) == len(old) and new != old
    assert list(decode_metadata(new).keys()) == keys_before
    data = bytearray(co.data)
    data[co.metadata_note.desc_offset:co.metadata_note.desc_offset + len(new)] = new
    out = tmp_path / "edited.hsaco"
    out.write_bytes(bytes(data))
    text = run(tool(READELF16), "--notes", str(out))
    assert "amdhsa.target:   amdgcn-amd-amdhsa--gfx1010" in text
    assert re.search(r"\.sgpr_count:\s+99\b", text)


# -- non-canonical encodings ---------------------------------------------------

NON_CANONICAL = [
    b"\x81\xa1a\xcd\x00\x05",  # uint16 holding 5
    b"\x81\xa1a\xd0\x05",  # int8 holding 5
    b"\x81\xa1a\xd3\xff\xff\xff\xff\xff\xff\xff\xff",  # int64 holding -1
    b"\x81\xa1a\xdc\x00\x02\x01\x02",  # array16 with 2 items
    b"\xde\x00\x01\xa1a\xc0",  # map16 with 1 entry
    b"\x81\xd9\x01a\xc3",  # str8 key of length 1
    b"\x81\xa1a\xdb\x00\x00\x00\x02hi",  # str32
    b"\x81\xa1a\xca\x3f\xc0\x00\x00",  # float32 1.5
    b"\x81\xa1a\xca\x7f\x80\x00\x01",  # float32 signalling NaN
    b"\x81\xa1a\xc5\x00\x01\x00",  # bin16 with one byte
    b"\x81\xa1a\xd4\x05\x01",  # fixext1
    b"\x81\xa1a\xc7\x03\x05abc",  # ext8
    b"\x81\xa1a\xa2\xff\xfe",  # str that is not UTF-8
]


@pytest.mark.parametrize("data", NON_CANONICAL)
def test_non_canonical_forms_round_trip(data):
    md = decode_metadata(data)
    assert encode_metadata(md) == data
    expected = msgpack.unpackb(data, raw=True, strict_map_key=False)
    value = md.root[next(iter(md.root))]
    want = next(iter(expected.values()))
    if isinstance(want, float) and math.isnan(want):
        assert math.isnan(value)
    elif isinstance(want, msgpack.ExtType):
        assert (value.code, value.data) == (want.code, want.data)
    elif isinstance(want, bytes) and isinstance(value, str):
        assert value.encode("utf-8", "surrogateescape") == want
    else:
        assert value == want


def test_setters_keep_float_width_and_fix_container_forms():
    md = decode_metadata(b"\x82\xa1f\xca\x3f\xc0\x00\x00\xa1l\xdc\x00\x01\x01")
    md["f"] = 2.5
    assert encode_metadata(md)[:8] == b"\x82\xa1f\xca\x40\x20\x00\x00"
    md["l"].extend(range(2, 70000))  # no longer fits array16: becomes array32
    out = encode_metadata(md)
    assert decode_metadata(out)["l"] == list(range(1, 70000))
    assert out[8:11] == b"\xa1l\xdd"


@pytest.mark.parametrize("data, reason", [
    (b"", "truncated"), (b"\x92\x01", "truncated"), (b"\xc1", "reserved"),
    (b"\x82\xa1a\x01\xa1a\x02", "repeats"), (b"\x81\x91\x01\x02", "not a scalar"),
    (b"\x01", "not a map"), (b"\x91" * 200 + b"\x01", "nesting"),
    (b"\x81\xaeamdhsa.kernels\x01", "not a list"),
    (b"\x81\xaeamdhsa.version\x91\xa1x", "integers"),
])
def test_bad_notes_are_format_errors(data, reason):
    with pytest.raises(FormatError, match=reason):
        decode_metadata(data)


# -- fuzzing ---------------------------------------------------------------------

scalars = (st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 64) - 1)
           | st.floats(allow_nan=False) | st.text(max_size=40) | st.binary(max_size=40))
documents = st.recursive(scalars, lambda inner: st.lists(inner, max_size=20) | st.dictionaries(
    st.text(max_size=12), inner, max_size=20), max_leaves=60)


@settings(max_examples=150, deadline=None)
@given(documents, st.booleans())
def test_msgpack_library_output_round_trips(doc, single_float):
    try:
        data = msgpack.packb(doc, use_single_float=single_float, use_bin_type=True)
    except OverflowError:  # a float64 that float32 cannot hold
        assume(False)
    value = mpack.unpack(data)
    assert mpack.pack(value) == data
    assert value == msgpack.unpackb(data, strict_map_key=False)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_decode_or_format_error(data):
    try:
        md = decode_metadata(data)
    except FormatError:
        return
    assert encode_metadata(md) == data


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=300), st.data())
def test_mutated_real_note_decodes_or_format_error(suffix, data):
    base = bytearray(b"\x83\xaeamdhsa.version\x92\x01\x01\xadamdhsa.target\xba"
                     b"amdgcn-amd-amdhsa--gfx1030\xaeamdhsa.kernels\x91\x82\xa5.name\xa1k"
                     b"\xa7.symbol\xa4k.kd")
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(base) - 1))
        base[i] = data.draw(st.integers(0, 255))
    blob = bytes(base) + (suffix if data.draw(st.booleans()) else b"")
    try:
        md = decode_metadata(blob)
    except FormatError:
        return
    assert encode_metadata(md) == blob


def test_elf_reader_finds_the_same_note_bytes(fixture_paths):
    for path in fixture_paths:
        notes = [n for n in ElfFile(read(path)).notes if n.owner == "AMDGPU" and n.type == 32]
        assert len(notes) == 1 and notes[0].desc == _metadata_desc(path)
