"""Offload bundles embedded in host ELF files (HIP executables, shared
libraries and relocatable objects).

HIP puts each translation unit's bundle (plain or CCOB) in section
``.hip_fatbin``; a linked file has them back to back, each starting at a
4 KiB boundary, each followed by a NUL byte and zero padding.  Section
``.hipFatBinSegment`` holds one ``__hip_fatbin_wrapper`` per bundle:
``{u32 magic 0x48495046 ('HIPF'), u32 version 1, ptr bundle, ptr 0}``.  The
pointer is filled in by a relocation (R_*_RELATIVE in a shared library, an
absolute relocation against ``.hip_fatbin`` in a ``.o``) or stored inline.

The file is mapped, never read whole: memory use does not grow with file
size.  Only the ELF header, section headers, the names, the bundle headers
and the relocations near ``.hipFatBinSegment`` are touched.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from kpatch.containers.bundle import BUNDLE_MAGIC, CCOB_MAGIC, bundle_extent, ccob_extent
from kpatch.containers.limits import open_input
from kpatch.elf.layout import Layout
from kpatch.elf.reader import (
    EHDR, ELF_MAGIC, ELFCLASS64, ELFDATA2LSB, ET_REL, REL, RELA, SHDR, SHN_LORESERVE, SHN_UNDEF, SHN_XINDEX,
    SHT_NOBITS, SHT_REL, SHT_RELA, SYM, Section)
from kpatch.errors import FormatError, UsageError

FATBIN_SECTION = ".hip_fatbin"
WRAPPER_SECTION = ".hipFatBinSegment"
WRAPPER_MAGIC = 0x48495046
WRAPPER_VERSION = 1


# --- the ELF records (kpatch.elf.reader's) and the HIP wrapper ------------

#: ``__hip_fatbin_wrapper`` (HIP's own record, not an ELF one)
WRAPPER = Layout("__hip_fatbin_wrapper", [("magic", "I"), ("version", "I"), ("binary", "Q"), ("dummy", "Q")])

#: e_machine -> (absolute 64-bit relocation types, relative relocation types)
RELOC_KINDS: dict[int, tuple[frozenset[int], frozenset[int]]] = {
    62: (frozenset({1}), frozenset({8})),  # x86-64: R_X86_64_64, R_X86_64_RELATIVE
    183: (frozenset({257}), frozenset({1027})),  # AArch64: R_AARCH64_ABS64, R_AARCH64_RELATIVE
    21: (frozenset({38}), frozenset({22})),  # PPC64: R_PPC64_ADDR64, R_PPC64_RELATIVE
}


@dataclass(frozen=True)
class FatbinBundle:
    """One bundle in ``.hip_fatbin``: its file offset and byte length,
    whether it is a CCOB, and whether a ``__hip_fatbin_wrapper`` points at it."""

    offset: int
    size: int
    compressed: bool
    wrapper_checked: bool


class _NotHipHost(Exception):
    """A valid ELF file that cannot be a HIP host (32-bit or big endian)."""


class _Elf:
    """Just enough of an ELF64 LE file: header and section table, over a
    byte buffer (an mmap).  (:class:`kpatch.elf.reader.ElfFile` holds a
    file's bytes in memory; a host library is hundreds of megabytes, of
    which only the headers and a few sections are read here.)"""

    def __init__(self, buf: memoryview, where: str):
        self.buf = buf
        self.where = where
        n = len(buf)
        if n < 4 or bytes(buf[:4]) != ELF_MAGIC:
            raise FormatError("not an ELF file", where)
        if n < EHDR.size:
            raise FormatError(f"ELF header truncated: {n} bytes, need {EHDR.size}", where)
        h = EHDR.read(buf)
        if h.ei_class != ELFCLASS64 or h.ei_data != ELFDATA2LSB:
            raise _NotHipHost()  # HIP hosts are 64-bit little endian
        self.type, self.machine = h.e_type, h.e_machine
        self.sections = self._read_sections(h)

    def _fail(self, reason: str) -> FormatError:
        return FormatError(reason, self.where)

    def _read_sections(self, h) -> list[Section]:
        n = len(self.buf)
        shoff, shnum, entsize, shstrndx = h.e_shoff, h.e_shnum, h.e_shentsize, h.e_shstrndx
        if shoff == 0:
            return []
        if entsize < SHDR.size:
            raise self._fail(f"section header size {entsize} is smaller than {SHDR.size}")
        if shoff > n or n - shoff < entsize:
            raise self._fail(f"section header table at {shoff} lies outside the {n}-byte file")
        first = SHDR.read(self.buf, shoff)
        if shnum == 0:  # extended numbering: the count is in section 0
            shnum = first.sh_size
        if shstrndx == SHN_XINDEX:
            shstrndx = first.sh_link
        if shnum > (n - shoff) // entsize:
            raise self._fail(
                f"section header table ({shnum} entries of {entsize} bytes at {shoff}) runs past the end of the {n}-byte file"
            )
        raw = list(SHDR.read_many(self.buf, shoff, shnum, entsize))
        if not raw:
            return []
        if shstrndx >= shnum:
            raise self._fail(f"section name table index {shstrndx} is not below the section count {shnum}")
        names = raw[shstrndx]
        if names.sh_type == SHT_NOBITS or not self._inside(names.sh_offset, names.sh_size):
            raise self._fail("section name table lies outside the file")
        strtab = (names.sh_offset, names.sh_size)
        return [Section(i, self._name(strtab, s.sh_name), s.sh_type, s.sh_flags, s.sh_addr, s.sh_offset,
                        s.sh_size, s.sh_link, s.sh_info, s.sh_addralign, s.sh_entsize)
                for i, s in enumerate(raw)]

    def _inside(self, offset: int, size: int) -> bool:
        return offset <= len(self.buf) and size <= len(self.buf) - offset

    def _name(self, strtab: tuple[int, int], index: int) -> str:
        off, size = strtab
        if index >= size:
            raise self._fail(f"section name offset {index} is outside the name table ({size} bytes)")
        raw = bytes(self.buf[off + index : off + min(size, index + 256)])  # names are short
        return raw.split(b"\0", 1)[0].decode("utf-8", "replace")

    def contents(self, s: Section) -> memoryview:
        """The bytes of a section (FormatError if they are outside the file)."""
        if s.type == SHT_NOBITS:
            return self.buf[0:0]
        if not self._inside(s.offset, s.size):
            raise self._fail(f"section {s.name} (bytes {s.offset}..{s.offset + s.size}) lies outside the file")
        return self.buf[s.offset : s.offset + s.size]

    def named(self, name: str) -> list[Section]:
        return [s for s in self.sections if s.name == name]


@contextmanager
def _mapped(path: str) -> Iterator[memoryview]:
    """Map a file read-only; yield a memoryview (empty for an empty file)."""
    with open_input(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            yield memoryview(b"")
            return
        try:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            raise UsageError(f"cannot map the file: {e}", path) from None
        mv = memoryview(mm)
        try:
            yield mv
        finally:
            try:
                mv.release()
                mm.close()
            except BufferError:  # a view is still alive; the GC will unmap it
                pass


def has_fatbin(path: str) -> bool:
    """Is this an ELF file with a ``.hip_fatbin`` section?  Reads only the
    headers.  False for anything that is not a regular ELF file; FormatError
    for an ELF file whose headers are broken."""
    if not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as f:
            if f.read(4) != ELF_MAGIC:
                return False
    except OSError as e:
        raise UsageError(f"cannot read: {e.strerror}", path) from None
    with _mapped(path) as buf:
        try:
            return bool(_Elf(buf, path).named(FATBIN_SECTION))
        except _NotHipHost:
            return False


_NONZERO = re.compile(rb"[^\x00]")


def _walk(elf: _Elf, sec: Section) -> list[tuple[int, int, bool]]:
    """``(file offset, size, compressed)`` of each bundle in one section."""
    data = elf.contents(sec)
    out = []
    pos = 0
    while True:
        m = _NONZERO.search(data, pos)
        if m is None:
            return out
        pos = m.start()
        rest = data[pos:]
        head = bytes(rest[: len(BUNDLE_MAGIC)])
        try:
            if head == BUNDLE_MAGIC:
                size, compressed = bundle_extent(rest), False
            elif head.startswith(CCOB_MAGIC):
                size, compressed = ccob_extent(rest), True
                if size is None:
                    raise FormatError("cannot find where the version-1 CCOB ends")
            else:
                raise FormatError(f"neither a bundle nor zero padding: starts with {head[:8]!r}")
        except FormatError as e:
            raise FormatError(f"{sec.name} at section offset {pos:#x}: {e.reason}", elf.where) from None
        out.append((sec.offset + pos, size, compressed))
        pos += size


def _wrapper_targets(elf: _Elf, seg: Section) -> list[tuple[int, int]]:
    """For each ``__hip_fatbin_wrapper`` record: ``(index, target)``, where
    target is a file offset (relocatable objects and linked files alike)."""
    data = elf.contents(seg)
    if len(data) % WRAPPER.size:
        raise elf._fail(f"{seg.name} is {len(data)} bytes, not a multiple of the {WRAPPER.size}-byte wrapper")
    records = list(WRAPPER.read_many(data, 0, len(data) // WRAPPER.size))
    for i, (magic, version, _, _) in enumerate(records):
        if magic != WRAPPER_MAGIC:
            raise elf._fail(f"__hip_fatbin_wrapper {i}: magic {magic:#010x}, expected {WRAPPER_MAGIC:#010x}")
        if version != WRAPPER_VERSION:
            raise elf._fail(f"__hip_fatbin_wrapper {i}: version {version}, expected {WRAPPER_VERSION}")
    field = WRAPPER.offset_of("binary")  # of the bundle pointer inside a record
    relocated = _relocated_pointers(elf, seg, {i * WRAPPER.size + field for i in range(len(records))})
    out = []
    for i, rec in enumerate(records):
        place = i * WRAPPER.size + field
        if place in relocated:
            out.append((i, relocated[place]))
        elif elf.type == ET_REL:
            raise elf._fail(f"__hip_fatbin_wrapper {i}: no relocation for its bundle pointer")
        else:
            out.append((i, _vaddr_to_offset(elf, rec.binary, i)))
    return out


def _vaddr_to_offset(elf: _Elf, addr: int, i: int) -> int:
    for s in elf.sections:
        if s.addr and s.type != SHT_NOBITS and s.addr <= addr < s.addr + s.size:
            return s.offset + (addr - s.addr)
    raise elf._fail(f"__hip_fatbin_wrapper {i}: bundle pointer {addr:#x} is in no section")


def _relocated_pointers(elf: _Elf, seg: Section, places: set[int]) -> dict[int, int]:
    """Resolve relocations that patch ``seg`` at the given section-relative
    places; return {place: file offset of the target}."""
    abs_types, rel_types = RELOC_KINDS.get(elf.machine, (frozenset(), frozenset()))
    out: dict[int, int] = {}
    for rs in elf.sections:
        if rs.type not in (SHT_RELA, SHT_REL):
            continue
        if elf.type == ET_REL:
            if rs.info != seg.index:
                continue
            base = 0  # r_offset is relative to the patched section
        else:
            base = seg.addr  # r_offset is a virtual address
        layout = RELA if rs.type == SHT_RELA else REL
        data = elf.contents(rs)
        for rec in layout.read_many(data, 0, len(data) // layout.size):
            place = rec[0] - base
            if place not in places:
                continue
            rtype, sym = rec[1] & 0xFFFFFFFF, rec[1] >> 32
            addend = rec.r_addend if layout is RELA else _inline_pointer(elf, seg, place)
            if elf.type == ET_REL:
                if rtype not in abs_types:
                    raise elf._fail(f"{rs.name}: relocation type {rtype} for a fatbin pointer is not absolute 64-bit")
                out[place] = _symbol_file_offset(elf, rs, sym, addend)
            elif rtype in rel_types:
                out[place] = _vaddr_to_offset(elf, addend, place // WRAPPER.size)
            elif rtype in abs_types:
                out[place] = _vaddr_to_offset(elf, _symbol(elf, rs, sym).st_value + addend, place // WRAPPER.size)
            else:
                raise elf._fail(f"{rs.name}: unexpected relocation type {rtype} for a fatbin pointer")
    return out


def _inline_pointer(elf: _Elf, seg: Section, place: int) -> int:
    return struct.unpack_from("<Q", elf.contents(seg), place)[0]


def _symbol(elf: _Elf, rs: Section, sym: int):
    """Entry ``sym`` of the symbol table relocation section ``rs`` links to (a SYM record)."""
    if rs.link >= len(elf.sections):
        raise elf._fail(f"{rs.name}: symbol table index {rs.link} out of range")
    table = elf.contents(elf.sections[rs.link])
    if (sym + 1) * SYM.size > len(table):
        raise elf._fail(f"{rs.name}: symbol {sym} is outside its symbol table")
    return SYM.read(table, sym * SYM.size)


def _symbol_file_offset(elf: _Elf, rs: Section, sym: int, addend: int) -> int:
    """File offset that symbol + addend designates in a relocatable object."""
    entry = _symbol(elf, rs, sym)
    shndx, value = entry.st_shndx, entry.st_value
    if shndx == SHN_UNDEF or shndx >= SHN_LORESERVE or shndx >= len(elf.sections):
        raise elf._fail(f"{rs.name}: fatbin pointer symbol {sym} is not defined in a section (index {shndx})")
    target = elf.sections[shndx]
    return target.offset + value + addend


def fatbin_sections(path: str) -> list[tuple[int, int]]:
    """(file offset, end) of each ``.hip_fatbin`` section of ``path``, in
    section-table order ([] for an ELF file that cannot be a HIP host)."""
    with _mapped(path) as buf:
        try:
            elf = _Elf(buf, path)
        except _NotHipHost:
            return []
        return [(s.offset, s.offset + s.size) for s in elf.named(FATBIN_SECTION)]


def find_fatbin_bundles(path: str) -> list[FatbinBundle]:
    """The bundles in ``path``'s ``.hip_fatbin`` section(s), in file order
    ([] when there is none).  Each wrapper in ``.hipFatBinSegment`` must point
    at the start of one of them (FormatError otherwise); those get
    ``wrapper_checked=True``."""
    with _mapped(path) as buf:
        try:
            elf = _Elf(buf, path)
        except _NotHipHost:
            return []
        found: list[tuple[int, int, bool]] = []
        for sec in elf.named(FATBIN_SECTION):
            found.extend(_walk(elf, sec))
        if not found and not elf.named(WRAPPER_SECTION):
            return []
        starts = {off for off, _, _ in found}
        checked: set[int] = set()
        for seg in elf.named(WRAPPER_SECTION):
            for i, target in _wrapper_targets(elf, seg):
                if target not in starts:
                    raise FormatError(
                        f"__hip_fatbin_wrapper {i} points at file offset {target:#x}, "
                        f"which is not the start of a bundle in {FATBIN_SECTION}",
                        path,
                    )
                checked.add(target)
        return [FatbinBundle(off, size, comp, off in checked) for off, size, comp in found]
