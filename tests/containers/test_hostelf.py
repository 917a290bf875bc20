"""Bundles in host ELF files, checked against llvm-readelf-16 (section
headers, relocations, hex dumps) and clang-offload-bundler --list."""

from __future__ import annotations

import os
import shutil
import struct
import tracemalloc

import pytest

from kpatch.containers.bundle import bundle_extent, decompress_ccob, parse_bundle
from kpatch.containers.hostelf import FatbinBundle, fatbin_sections, find_fatbin_bundles, has_fatbin
from kpatch.containers import hostelf
from kpatch.containers.discover import Found, Problem
from kpatch.containers.uri import parse_uri
from kpatch.errors import FormatError

from .conftest import BUNDLER19, bundler_list, fixture, read, relative_relocs, run, section_headers

OBJCOPY = "llvm-objcopy-16"


def tool(name: str) -> str:
    path = shutil.which(name)
    if not path:
        pytest.skip(f"{name} not installed")
    return path


@pytest.mark.parametrize("stem", ["vecops", "mathops"])
def test_host_object_fixture(stem):
    path = fixture(f"{stem}.hip.host.o")
    _, off, size = section_headers(path)[".hip_fatbin"]
    bundle = read(fixture(f"{stem}.hip.bundle"))
    assert has_fatbin(path)
    # the .o's wrapper relocation is ".hip_fatbin + 0" (llvm-readelf -r)
    assert ".hip_fatbin + 0" in run("llvm-readelf-16", "-r", "-W", path)
    assert find_fatbin_bundles(path) == [FatbinBundle(off, len(bundle), False, True)]
    assert read(path)[off : off + len(bundle)] == bundle
    assert size == len(bundle) + 1  # clang appends a NUL
    assert fatbin_sections(path) == [(off, off + size)]  # what apply's room for growth comes from


@pytest.mark.corpus
def test_librocrand(librocrand, tmp_path):
    (b,) = find_fatbin_bundles(librocrand)
    addr, off, size = section_headers(librocrand)[".hip_fatbin"]
    seg_addr, _, _ = section_headers(librocrand)[".hipFatBinSegment"]
    # the wrapper's bundle pointer is relocated R_X86_64_RELATIVE to the section address
    assert relative_relocs(librocrand)[seg_addr + 8] == addr
    assert (b.offset, b.compressed, b.wrapper_checked) == (off, False, True)
    assert b.size == size - 1
    with open(librocrand, "rb") as f:
        f.seek(b.offset)
        data = f.read(b.size)
    out = tmp_path / "b"
    out.write_bytes(data)
    assert sorted(e.id for e in parse_bundle(data)) == bundler_list(str(out))


@pytest.mark.corpus
def test_librocrand_memory_is_independent_of_file_size(librocrand):
    tracemalloc.start()
    try:
        find_fatbin_bundles(librocrand)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # the file is 25 MB; only headers are touched


@pytest.fixture
def linked(tmp_path) -> dict[str, str]:
    """Shared libraries linked (GNU ld, and lld with packed RELR relocations)
    from the two fixture host objects, one of them with its bundle replaced by
    the clang-19 CCOB of the same entries."""
    tool("clang-15")
    tool(OBJCOPY)
    vec = fixture("vecops.hip.host.o")
    mat_ccob = str(tmp_path / "m_ccob.o")
    run(OBJCOPY, f"--update-section=.hip_fatbin={fixture('mathops.hip.ccob')}", fixture("mathops.hip.host.o"), mat_ccob)
    out = {"obj": mat_ccob}
    out["bfd"] = str(tmp_path / "two_bfd.so")
    run("clang-15", "-shared", "-o", out["bfd"], vec, mat_ccob)
    if shutil.which("ld.lld-15") or shutil.which("ld.lld"):
        out["lld"] = str(tmp_path / "two_lld.so")
        run("clang-15", "-fuse-ld=lld", "-shared", "-o", out["lld"], vec, mat_ccob, "-Wl,-z,pack-relative-relocs")
    return out


def wrapper_pointers(path: str) -> list[int]:
    """Bundle pointers of the __hip_fatbin_wrapper records, from
    llvm-readelf-16 -x .hipFatBinSegment (inline values)."""
    words = []
    for line in run("llvm-readelf-16", "-x", ".hipFatBinSegment", path).splitlines():
        parts = line.split()
        if parts and parts[0].startswith("0x"):
            words += [bytes.fromhex(w) for w in parts[1:5] if len(w) == 8]
    raw = b"".join(words)
    return [struct.unpack_from("<Q", raw, i + 8)[0] for i in range(0, len(raw), 24)]


def test_linked_library_with_two_bundles(linked, tmp_path):
    ccob = read(fixture("mathops.hip.ccob"))
    plain = read(fixture("vecops.hip.bundle"))
    for kind in ("bfd", "lld"):
        if kind not in linked:
            continue
        path = linked[kind]
        addr, off, _ = section_headers(path)[".hip_fatbin"]
        seg_addr = section_headers(path)[".hipFatBinSegment"][0]
        if kind == "bfd":
            rel = relative_relocs(path)
            targets = [rel[seg_addr + 8], rel[seg_addr + 24 + 8]]
        else:  # RELR: the pointers are stored inline
            targets = wrapper_pointers(path)
        expected = [
            FatbinBundle(off + targets[0] - addr, len(plain), False, True),
            FatbinBundle(off + targets[1] - addr, len(ccob), True, True),
        ]
        assert find_fatbin_bundles(path) == expected
        data = read(path)
        assert data[expected[0].offset : expected[0].offset + expected[0].size] == plain
        assert data[expected[1].offset : expected[1].offset + expected[1].size] == ccob
        assert expected[1].offset % 4096 == 0  # back to back at 4 KiB boundaries
        piece = tmp_path / "piece"
        piece.write_bytes(ccob)
        assert sorted(e.id for e in parse_bundle(decompress_ccob(ccob))) == bundler_list(str(piece), BUNDLER19)


def test_object_with_ccob(linked):
    path = linked["obj"]
    _, off, size = section_headers(path)[".hip_fatbin"]
    assert find_fatbin_bundles(path) == [FatbinBundle(off, size, True, True)]


def test_no_fatbin():
    assert find_fatbin_bundles(fixture("vecops.hip.gfx1030.v4.hsaco")) == []
    assert not has_fatbin(fixture("vecops.hip.gfx1030.v4.hsaco"))
    assert not has_fatbin(fixture("vecops.hip.bundle"))  # not ELF
    with pytest.raises(FormatError, match="not an ELF file"):
        find_fatbin_bundles(fixture("vecops.hip.bundle"))


# --- bad input --------------------------------------------------------------


def _patched(tmp_path, src: str, edits: list[tuple[int, bytes]], name: str = "bad") -> str:
    data = bytearray(read(src))
    for off, b in edits:
        data[off : off + len(b)] = b
    out = tmp_path / name
    out.write_bytes(bytes(data))
    return str(out)


E_SHOFF, E_SHENTSIZE, E_SHNUM, E_SHSTRNDX = 0x28, 0x3A, 0x3C, 0x3E


def test_bad_elf_headers(tmp_path):
    src = fixture("vecops.hip.host.o")
    n = os.path.getsize(src)
    cases = [
        ([(E_SHOFF, struct.pack("<Q", n + 100))], "section header table at"),
        ([(E_SHNUM, struct.pack("<H", 5000))], "runs past the end of the"),
        ([(E_SHSTRNDX, struct.pack("<H", 400))], "section name table index 400"),
        ([(E_SHENTSIZE, struct.pack("<H", 10))], "section header size 10"),
    ]
    for edits, message in cases:
        with pytest.raises(FormatError, match=message):
            find_fatbin_bundles(_patched(tmp_path, src, edits))
        with pytest.raises(FormatError, match=message):
            has_fatbin(_patched(tmp_path, src, edits))
    short = tmp_path / "short"
    short.write_bytes(read(src)[:40])
    with pytest.raises(FormatError, match="ELF header truncated"):
        find_fatbin_bundles(str(short))
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    with pytest.raises(FormatError, match="not an ELF file"):
        find_fatbin_bundles(str(empty))


def _section_header_offset(path: str, name: str) -> int:
    """File offset of a section's header, from llvm-readelf's section list
    (index) and the ELF header's e_shoff / e_shentsize."""
    data = read(path)
    shoff = struct.unpack_from("<Q", data, E_SHOFF)[0]
    entsize = struct.unpack_from("<H", data, E_SHENTSIZE)[0]
    for line in run("llvm-readelf-16", "-S", "-W", path).splitlines():
        line = line.strip()
        if line.startswith("[") and line.split("]", 1)[1].split()[:1] == [name]:
            return shoff + int(line[1:].split("]")[0]) * entsize
    raise AssertionError(name)


def test_section_outside_the_file(tmp_path):
    src = fixture("vecops.hip.host.o")
    hdr = _section_header_offset(src, ".hip_fatbin")
    bad = _patched(tmp_path, src, [(hdr + 0x18, struct.pack("<Q", os.path.getsize(src) - 10))])  # sh_offset
    with pytest.raises(FormatError, match=r"section \.hip_fatbin .* lies outside the file"):
        find_fatbin_bundles(bad)


def test_junk_in_fatbin_section(tmp_path):
    src = fixture("vecops.hip.host.o")
    _, off, size = section_headers(src)[".hip_fatbin"]
    bad = _patched(tmp_path, src, [(off + size - 1, b"\x07")])  # the NUL terminator
    with pytest.raises(FormatError, match=r"\.hip_fatbin at section offset 0x43c8: neither a bundle nor zero padding"):
        find_fatbin_bundles(bad)
    bad = _patched(tmp_path, src, [(off + 24, struct.pack("<Q", 10**6))])  # entry count
    with pytest.raises(FormatError, match=r"\.hip_fatbin at section offset 0x0: offload bundle claims 1000000"):
        find_fatbin_bundles(bad)


def test_wrapper_pointing_elsewhere(tmp_path, linked):
    path = linked["bfd"]
    addr, _, _ = section_headers(path)[".hip_fatbin"]
    seg_addr = section_headers(path)[".hipFatBinSegment"][0]
    rel = relative_relocs(path)
    target = rel[seg_addr + 8]
    record = struct.pack("<QQq", seg_addr + 8, 8, target)  # R_X86_64_RELATIVE, from llvm-readelf -r
    data = read(path)
    assert data.count(record) == 1
    bad = _patched(tmp_path, path, [(data.index(record) + 16, struct.pack("<q", target + 16))])
    with pytest.raises(FormatError, match="__hip_fatbin_wrapper 0 points at file offset .* not the start of a bundle"):
        find_fatbin_bundles(bad)
    # a wrapper with a wrong magic
    seg_off = section_headers(path)[".hipFatBinSegment"][1]
    bad = _patched(tmp_path, path, [(seg_off + 24, b"XXXX")], "bad2")
    with pytest.raises(FormatError, match="__hip_fatbin_wrapper 1: magic"):
        find_fatbin_bundles(bad)


def test_bundle_size_points_past_the_section(tmp_path):
    src = fixture("vecops.hip.host.o")
    _, off, size = section_headers(src)[".hip_fatbin"]
    entries = parse_bundle(read(src)[off : off + size - 1])
    last = len(entries) - 1
    # entry headers: 32 + sum(24 + id) ...; patch the last entry's size field
    pos = off + 32 + sum(24 + len(e.id) for e in entries[:last]) + 8
    bad = _patched(tmp_path, src, [(pos, struct.pack("<Q", entries[last].size + 4096))])
    with pytest.raises(FormatError, match=f"entry {last} .*lie outside"):
        find_fatbin_bundles(bad)
    assert bundle_extent(read(src)[off : off + size]) == size - 1


def test_bundles_read_one_after_another_through_one_buffer(monkeypatch, tmp_path):
    """discover reads each bundle of a host ELF into one buffer kept from
    bundle to bundle: a bundle past the end of the file is one Problem, a
    smaller bundle after a larger one gives its own code objects (not bytes
    left from the larger), and every Found holds its own copy."""
    from kpatch.containers import discover as disc
    from kpatch.containers.bundle import write_bundle
    small = write_bundle([("hipv4-amdgcn-amd-amdhsa--gfx1030", b"\x7fELF" + b"s" * 60)])
    large = write_bundle([("hipv4-amdgcn-amd-amdhsa--gfx1010", b"\x7fELF" + b"L" * 9000),
                          ("hipv4-amdgcn-amd-amdhsa--gfx1030", b"\x7fELF" + b"M" * 5000)])
    path = tmp_path / "lib.so"
    path.write_bytes(large + small)
    f = hostelf.FatbinBundle
    fields = {n: False for n in f.__dataclass_fields__ if n not in ("offset", "size")}
    monkeypatch.setattr(hostelf, "find_fatbin_bundles", lambda p: [
        f(offset=0, size=len(large), **fields), f(offset=len(large), size=len(small), **fields),
        f(offset=len(large) + len(small) - 8, size=64, **fields)])
    items = list(disc._hostelf_items(str(path), parse_uri(str(path)), ""))
    found = [i for i in items if isinstance(i, Found)]
    assert [i.data for i in found] == [b"\x7fELF" + b"L" * 9000, b"\x7fELF" + b"M" * 5000, b"\x7fELF" + b"s" * 60]
    assert all(type(i.data) is bytes for i in found)
    assert [i.error for i in items if isinstance(i, Problem)] == ["bundle lies beyond the end of the file"]
