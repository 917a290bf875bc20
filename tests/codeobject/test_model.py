"""CodeObject on real objects, compared with llvm-readelf; malformed input.

Real objects: the fixtures (clang 15, V4/V5, gfx1010/gfx1030), librocrand's
seven code objects, a V2 object from clang-15 and V6 generic objects from
clang-19.  Expected values come from llvm-readelf-16/-19, the fixture
MANIFEST (written by LLVM's tools) and the ELF format rules.
"""

from __future__ import annotations

import os
import re
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kpatch.codeobject import CodeObject, TargetId
from kpatch.codeobject.model import Kernel
from kpatch.errors import FormatError

from conftest import FIXTURES

from .conftest import (
    CLANG19, READELF16, READELF19, compile_asm, compile_cl, kd_symbols, manifest, read,
    readelf_header, readelf_sections, readelf_symbols, run, tool)


def _check_against_readelf(path: str) -> CodeObject:
    co = CodeObject.from_bytes(read(path), name=os.path.basename(path))
    h = readelf_header(path)
    assert co.e_flags == h["e_flags"]
    assert co.abi_version == h["abi_version"]
    assert co.code_object_version == h["abi_version"] + 2
    assert not co.is_legacy
    # sections: names, addresses, offsets, sizes
    theirs = {s["name"]: s for s in readelf_sections(path) if s["name"]}
    assert set(co.sections) == set(theirs)
    for name, s in theirs.items():
        mine = co.sections[name]
        assert (mine.vaddr, mine.offset, mine.size) == (s["addr"], s["offset"], s["size"]), name
    text = theirs[".text"]
    assert co.text == read(path)[text["offset"]:text["offset"] + text["size"]]
    assert co.text_vaddr == text["addr"]
    # kernels: one per defined NAME.kd symbol, each with its code
    assert {k.symbol for k in co.kernels} == kd_symbols(path)
    syms = readelf_symbols(path)
    assert sorted((s.table, s.name, s.value, s.size) for s in co.symbols()) == \
        sorted((s["table"], s["name"], s["value"], s["size"]) for s in syms)
    for k in co.kernels:
        kd = next(s for s in syms if s["name"] == k.symbol and s["ndx"] != "UND")
        fn = next(s for s in syms if s["name"] == k.name and s["type"] == "FUNC")
        assert k.descriptor_vaddr == kd["value"] and kd["size"] == 64
        assert k.entry == fn["value"], "descriptor entry offset points at the function"
        assert k.code_size == fn["size"]
        assert k.code_offset == fn["value"] - text["addr"] + text["offset"]
        assert k.metadata is not None and k.metadata[".symbol"] == k.symbol
        assert k.descriptor.layout == co.target.mach.descriptor_layout
    # target id: LLVM writes the same one into the metadata (V4+)
    if co.code_object_version >= 4:
        assert co.metadata.target == "amdgcn-amd-amdhsa--" + co.target_id
    return co


def test_fixtures_match_readelf_and_manifest(fixture_paths):
    files = manifest()["files"]
    for path in fixture_paths:
        co = _check_against_readelf(path)
        facts = files[os.path.basename(path)]["llvm"]
        assert co.e_flags == facts["e_flags"]
        assert co.code_object_version == facts["code_object_version"]
        assert co.metadata.target == facts["target_id"]
        assert sorted(k.symbol for k in co.kernels) == \
            sorted(d["name"] for d in facts["kernel_descriptors"])
        assert co.target.processor in ("gfx1010", "gfx1030")


@pytest.mark.corpus
def test_rocrand_objects_match_readelf(rocrand_objects):
    assert sorted(rocrand_objects) == sorted(["gfx803", "gfx900:xnack-", "gfx906:xnack-",
                                              "gfx908:xnack-", "gfx90a:xnack+", "gfx90a:xnack-",
                                              "gfx1030"])
    for target, path in rocrand_objects.items():
        co = _check_against_readelf(path)
        assert co.target_id == target  # the bundle entry id clang wrote
        assert len(co.kernels) == 80
        text = run(tool(READELF19), "-h", path)
        name = re.search(r"Flags:\s+0x[0-9A-F]+, ([\w-]+)", text).group(1)
        assert co.target.processor == name


def test_v2_object_is_legacy(tmp_path):
    path = compile_cl(tmp_path, "gfx900", 2)
    co = CodeObject.from_bytes(read(path))
    assert readelf_header(path)["abi_version"] == 0
    assert co.code_object_version == 2 and co.is_legacy
    assert co.metadata is None and co.kernels == []
    assert co.legacy_kernel_names == ["k"]
    notes = run(tool(READELF16), "--notes", path)
    assert "NT_AMD_HSA_ISA_NAME" in notes
    assert {n.type for n in co.legacy_notes} >= {1, 3, 10, 11}
    assert co.target is not None and co.target.processor == "gfx900"


@pytest.mark.parametrize("mcpu, processor, generic_version", [
    ("gfx10-1-generic", "gfx10-1-generic", 1), ("gfx10-3-generic", "gfx10-3-generic", 1),
    ("gfx1030", "gfx1030", None), ("gfx1010:xnack-", "gfx1010", None)])
def test_v6_objects(tmp_path, mcpu, processor, generic_version):
    path = compile_asm(tmp_path, CLANG19, mcpu, 6, link=False)
    co = CodeObject.from_bytes(read(path))
    assert co.code_object_version == 6 and co.abi_version == 4
    assert co.target.processor == processor and co.target.generic_version == generic_version
    flags = run(tool(READELF19), "-h", path)
    assert f", {processor}" in flags
    assert (f"generic_v{generic_version}" in flags) == (generic_version is not None)
    assert [k.name for k in co.kernels] == ["k"]
    k = co.kernels[0]
    assert k.code_offset == co.sections[".text"].offset and k.code_size == 4


def test_kernel_lookup_and_repr(fixture_paths):
    co = CodeObject.from_bytes(read(fixture_paths[0]), name="x.hsaco")
    k = co.kernels[0]
    assert co.kernel(k.name) is k and co.kernel(k.symbol) is k and co.kernel("nope") is None
    assert isinstance(k, Kernel) and "x.hsaco" in repr(co)


# -- malformed input -----------------------------------------------------------------

def _base() -> bytes:
    return read(os.path.join(FIXTURES, "vecops.hip.gfx1030.v4.hsaco"))


def _patch(data: bytes, offset: int, fmt: str, value) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


def _shdr(data: bytes, index: int) -> int:
    shoff = struct.unpack_from("<Q", data, 40)[0]
    return shoff + 64 * index


def _section_index(path_data: bytes, name: str) -> int:
    co = CodeObject.from_bytes(path_data)
    return co.sections[name].index


MALFORMED = {
    "empty": lambda d: b"",
    "not ELF": lambda d: b"MZ" + d[2:],
    "too short": lambda d: d[:40],
    "32-bit": lambda d: d[:4] + b"\x01" + d[5:],
    "big endian": lambda d: d[:5] + b"\x02" + d[6:],
    "x86-64": lambda d: _patch(d, 18, "<H", 62),
    "PAL OS/ABI": lambda d: d[:7] + b"\x41" + d[8:],
    "ABI version 5": lambda d: d[:8] + b"\x05" + d[9:],
    "unknown mach": lambda d: _patch(d, 48, "<I", 0x27),
    "reserved e_flags bits": lambda d: _patch(d, 48, "<I", 0x10036),
    "section table past end": lambda d: _patch(d, 40, "<Q", len(d) - 10),
    "bad e_shentsize": lambda d: _patch(d, 58, "<H", 40),
    "program headers past end": lambda d: _patch(d, 32, "<Q", len(d)),
    "truncated": lambda d: d[:len(d) // 2],
    "section past end": lambda d: _patch(d, _shdr(d, 1) + 32, "<Q", 1 << 40),
    "section name out of range": lambda d: _patch(d, _shdr(d, 1), "<I", 1 << 30),
    "shstrndx out of range": lambda d: _patch(d, 62, "<H", 500),
    "note descsz too big": lambda d: _patch(d, CodeObject.from_bytes(d).metadata_note.offset + 4,
                                            "<I", 1 << 20),
    "symtab entsize": lambda d: _patch(d, _shdr(d, _section_index(d, ".symtab")) + 56, "<Q", 16),
    "kd outside its section": lambda d: _patch(
        d, _shdr(d, _section_index(d, ".rodata")) + 32, "<Q", 8),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_objects_are_format_errors(case):
    data = MALFORMED[case](_base())
    with pytest.raises(FormatError) as info:
        co = CodeObject.from_bytes(data, name="bad.hsaco")
        co.metadata
        co.kernels
    assert info.value.item == "bad.hsaco"
    assert "\n" not in str(info.value)


def _touch_everything(co: CodeObject) -> None:
    co.target_id, co.sections, co.text, co.legacy_notes, co.legacy_kernel_names
    md = co.metadata
    if md is not None:
        md.version, md.target, md.kernels, md.to_bytes()
    for k in co.kernels:
        k.descriptor.fields(), k.metadata, k.entry


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_real_objects_parse_or_format_error(data):
    base = bytearray(_base())
    shoff = struct.unpack_from("<Q", base, 40)[0]
    note = CodeObject.from_bytes(bytes(base)).metadata_note
    regions = {  # hit the headers and tables more often than the code
        "header": (0, 63), "section table": (shoff, len(base) - 1),
        "note": (note.offset, note.desc_offset + len(note.desc) - 1), "anywhere": (0, len(base) - 1)}
    for _ in range(data.draw(st.integers(1, 8))):
        lo, hi = regions[data.draw(st.sampled_from(sorted(regions)))]
        base[data.draw(st.integers(lo, hi))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        base = base[:data.draw(st.integers(0, len(base)))]
    try:
        co = CodeObject.from_bytes(bytes(base))
        _touch_everything(co)
    except FormatError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_random_bytes_parse_or_format_error(data):
    for blob in (data, b"\x7fELF\x02\x01\x01\x40\x02" + data):
        try:
            _touch_everything(CodeObject.from_bytes(blob))
        except FormatError:
            pass


def test_parsing_is_cheap(fixture_paths):
    """Parsing stays lazy: no symbol table or metadata is read until asked."""
    co = CodeObject.from_bytes(read(fixture_paths[0]))
    assert "kernels" not in co.__dict__ and "metadata" not in co.__dict__
    assert "symbol_tables" not in co.elf.__dict__
    assert co.target == TargetId.parse(co.metadata.target)
