"""Re-laying out an ELF file when sections change size.

:class:`ElfLayout` reads the headers of a linked ELF64 (ET_DYN / ET_EXEC)
and, given new sizes for some sections (``.text`` after an insertion, the
``.note`` section after a metadata change), places every section again:

* nothing moves backwards and nothing before the first change moves;
* the sections of one PT_LOAD move together, by the same delta in the file
  and in memory; a segment's file delta and address delta may differ by a
  multiple of its ``p_align`` (so ``p_offset == p_vaddr (mod p_align)``
  holds), which lets ``.text`` grow into the rest of its memory page while
  the file makes room: addresses after it then stay where they were;
* when the original segments did not share a memory page, the moved ones do
  not either;
* sections after the change keep their alignment; non-allocated sections
  and the section header table follow in file order.

:meth:`ElfLayout.write` then produces the new file: sections at their new
places, program headers (LOAD, DYNAMIC, NOTE, GNU_RELRO, ...) grown or
moved with their sections, symbol values and sizes (``.symtab``,
``.dynsym``), ``.dynamic`` pointers, dynamic relocations (places and
``R_AMDGPU_RELATIVE64`` addends) and ``e_shoff`` / ``e_entry``.  Addresses
inside code sections are mapped by the caller's code maps (the code moved
inside the section); other addresses move with their section.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from operator import itemgetter
from typing import Callable

from kpatch.elf.reader import (
    EHDR, PHDR, SHDR, SHF_ALLOC, SHN_LORESERVE, SHN_UNDEF, SHT_DYNAMIC, SHT_DYNSYM, SHT_NOBITS, SHT_NULL, SHT_REL,
    SHT_RELA, SHT_SYMTAB, STT_SECTION, SYM, ElfFile, PT_LOAD)
from kpatch.rewrite.edits import Refusal

#: d_tag values whose d_un is an address (d_ptr).
DT_POINTERS = {
    3: "DT_PLTGOT", 4: "DT_HASH", 5: "DT_STRTAB", 6: "DT_SYMTAB", 7: "DT_RELA", 12: "DT_INIT",
    13: "DT_FINI", 17: "DT_REL", 23: "DT_JMPREL", 25: "DT_INIT_ARRAY", 26: "DT_FINI_ARRAY",
    32: "DT_PREINIT_ARRAY", 36: "DT_RELR", 0x6FFFFEF5: "DT_GNU_HASH", 0x6FFFFFF0: "DT_VERSYM",
    0x6FFFFFFC: "DT_VERDEF", 0x6FFFFFFE: "DT_VERNEED",
}
#: d_tag values whose d_un is a size, count, flag or string offset (unchanged).
DT_VALUES = {
    0: "DT_NULL", 1: "DT_NEEDED", 2: "DT_PLTRELSZ", 8: "DT_RELASZ", 9: "DT_RELAENT",
    10: "DT_STRSZ", 11: "DT_SYMENT", 14: "DT_SONAME", 15: "DT_RPATH", 16: "DT_SYMBOLIC",
    18: "DT_RELSZ", 19: "DT_RELENT", 20: "DT_PLTREL", 21: "DT_DEBUG", 22: "DT_TEXTREL",
    24: "DT_BIND_NOW", 27: "DT_INIT_ARRAYSZ", 28: "DT_FINI_ARRAYSZ", 29: "DT_RUNPATH",
    30: "DT_FLAGS", 33: "DT_PREINIT_ARRAYSZ", 35: "DT_RELRSZ", 37: "DT_RELRENT",
    0x6FFFFFF9: "DT_RELACOUNT", 0x6FFFFFFA: "DT_RELCOUNT", 0x6FFFFFFB: "DT_FLAGS_1",
    0x6FFFFFFD: "DT_VERDEFNUM", 0x6FFFFFFF: "DT_VERNEEDNUM",
}
DYN = struct.Struct("<qQ")
RELA = struct.Struct("<QQq")

#: AMDGPU relocation types found in linked code objects (LLVM ELFRelocs/AMDGPU.def).
R_AMDGPU_NONE, R_AMDGPU_ABS32_LO, R_AMDGPU_ABS32_HI, R_AMDGPU_ABS64 = 0, 1, 2, 3
R_AMDGPU_ABS32, R_AMDGPU_RELATIVE64 = 6, 13
_SYMBOL_RELOCS = {R_AMDGPU_ABS32_LO, R_AMDGPU_ABS32_HI, R_AMDGPU_ABS64, R_AMDGPU_ABS32}

#: code map: (old address, kind) -> new address or None; kind is "entry"
#: (where control or a pointer lands), "end" (one past an object) or "inst".
CodeMap = Callable[[int, str], "int | None"]


def align_up(value: int, align: int) -> int:
    if align <= 1:
        return value
    return (value + align - 1) // align * align


def _refuse(reason: str) -> Refusal:
    return Refusal(f"cannot relocate: {reason}", None, kind="layout")


@dataclass
class Sec:
    """One section header, old values and new placement."""

    index: int
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    align: int
    entsize: int
    new_offset: int = 0
    new_addr: int = 0
    new_size: int = 0

    @property
    def alloc(self) -> bool:
        return bool(self.flags & SHF_ALLOC)

    @property
    def file_size(self) -> int:
        return 0 if self.type in (SHT_NOBITS, SHT_NULL) else self.size

    @property
    def new_file_size(self) -> int:
        return 0 if self.type in (SHT_NOBITS, SHT_NULL) else self.new_size

    @property
    def delta(self) -> int:
        return self.new_addr - self.addr

    @property
    def moved(self) -> bool:
        return self.new_offset != self.offset or self.new_addr != self.addr


@dataclass
class Seg:
    """One program header, old and new values."""

    index: int
    type: int
    flags: int
    offset: int
    vaddr: int
    paddr: int
    filesz: int
    memsz: int
    align: int
    new: tuple = ()


class ElfLayout:
    """Section and segment placement of one linked ELF file, old and new."""

    def __init__(self, data: bytes):
        self.data = bytes(data)
        self.elf = ElfFile(self.data)
        self.header = self.elf.header
        self.secs = [Sec(s.index, s.name, s.type, s.flags, s.addr, s.offset, s.size, s.link,
                         s.info, s.addralign, s.entsize) for s in self.elf.sections]
        h = self.header
        self.segs = [Seg(i, p.p_type, p.p_flags, p.p_offset, p.p_vaddr, p.p_paddr, p.p_filesz,
                         p.p_memsz, p.p_align)
                     for i, p in enumerate(PHDR.read_many(self.data, h.e_phoff, h.e_phnum))]
        for s in self.secs:
            s.new_offset, s.new_addr, s.new_size = s.offset, s.addr, s.size
        self.new_shoff = h.e_shoff
        for g in self.segs:
            g.new = (g.offset, g.vaddr, g.paddr, g.filesz, g.memsz)
        self._alloc: tuple[list[Sec], dict[int, list[Sec]]] | None = None  # (see _allocated)
        self._check()

    # -- reading -------------------------------------------------------------
    def _check(self) -> None:
        for s in self.secs:
            if s.align & (s.align - 1):
                raise _refuse(f"section {s.name} has alignment {s.align}, not a power of two")
        for g in self.segs:
            if g.type == PT_LOAD and g.align & (g.align - 1):
                raise _refuse(f"PT_LOAD alignment {g.align:#x} is not a power of two")
        alloc = sorted((s for s in self.secs if s.alloc and s.type != SHT_NULL),
                       key=lambda s: (s.offset, s.addr))
        for a, b in zip(alloc, alloc[1:]):
            if b.addr < a.addr + a.size and b.size and a.size:
                raise _refuse(f"sections {a.name} and {b.name} overlap in memory")
            if b.addr < a.addr:
                raise _refuse(f"sections {a.name} and {b.name} are in a different order in the "
                              f"file and in memory")
        files = sorted((s for s in self.secs if s.file_size), key=lambda s: s.offset)
        for a, b in zip(files, files[1:]):
            if b.offset < a.offset + a.size:
                raise _refuse(f"sections {a.name} and {b.name} overlap in the file")

    def section(self, name: str) -> Sec | None:
        for s in self.secs:
            if s.name == name:
                return s
        return None

    def contents(self, index: int) -> bytes:
        s = self.secs[index]
        return self.data[s.offset:s.offset + s.file_size]

    def load_of(self, s: Sec) -> Seg | None:
        """The PT_LOAD segment holding allocated section ``s``."""
        for g in self.segs:
            if g.type == PT_LOAD and _inside(s, g):
                return g
        return None

    # -- placing ---------------------------------------------------------------
    def plan(self, new_sizes: dict[int, int]) -> None:
        """Place every section for the new sizes (section index -> size)."""
        h = self.header
        page = max([g.align for g in self.segs if g.type == PT_LOAD] + [1])
        file_end = h.e_ehsize
        if h.e_phnum:
            file_end = max(file_end, h.e_phoff + h.e_phnum * PHDR.size)
        for s in self.secs:
            s.new_size = new_sizes.get(s.index, s.size)
        order = sorted((s for s in self.secs if s.type != SHT_NULL), key=lambda s: (s.offset, s.index))
        seg_first: dict[int, Seg] = {}
        for g in self.segs:
            if g.type != PT_LOAD:
                continue
            inside = [s for s in order if s.alloc and _inside(s, g)]
            if inside and inside[0].offset == g.offset:
                seg_first[inside[0].index] = g
        placed: list[Sec] = []
        couple = 0  # new (offset - address) shift of the current segment's sections
        for s in order:
            if s.alloc:
                mem_need = placed[-1].new_addr + placed[-1].new_size if placed else s.addr
                file_need = file_end if s.file_size else s.offset
                g = seg_first.get(s.index)
                if g is not None and placed:
                    da, df = self._segment_start(s, g, mem_need, file_need, placed, page)
                    couple = df - da
                else:
                    da = align_up(max(s.addr, mem_need), s.align) - s.addr
                    while s.file_size and s.offset + da + couple < file_need:
                        da = align_up(s.addr + da + (file_need - s.offset - da - couple),
                                      s.align) - s.addr
                    df = da + couple
                s.new_offset, s.new_addr = s.offset + df, s.addr + da
                placed.append(s)
            else:
                s.new_offset = max(s.offset, align_up(file_end, s.align))
                s.new_addr = s.addr
            if s.file_size:
                file_end = max(file_end, s.new_offset + s.new_file_size)
        if h.e_shoff:
            self.new_shoff = max(h.e_shoff, align_up(file_end, 8))
            file_end = self.new_shoff + len(self.secs) * SHDR.size
        growth = sum(max(0, s.new_size - s.size) for s in self.secs)
        slack = (len(self.secs) + len(self.segs) + 1) * max([page] + [s.align for s in self.secs])
        if file_end > len(self.data) + growth + slack:
            raise _refuse(f"the new layout would need {file_end} bytes for a {len(self.data)}-byte "
                          f"file (odd alignments or offsets)")
        self._place_segments(page)

    def _segment_start(self, s: Sec, g: Seg, mem_need: int, file_need: int,
                       placed: list[Sec], page: int) -> tuple[int, int]:
        """(address delta, file delta) of ``s``, the first section of PT_LOAD ``g``.

        The address moves as little as alignment and the previous segment allow
        (keeping segments on separate pages when they were); the file offset as
        little as the file allows, congruent with the address modulo p_align.
        """
        step = max(g.align, 1)
        prev = self.load_of(placed[-1])
        need = mem_need
        if prev is not None and prev is not g:
            prev_secs = [x for x in placed if _inside(x, prev)]
            old_prev_end = prev.vaddr + prev.memsz
            slack = old_prev_end - max(x.addr + x.size for x in prev_secs)
            new_prev_end = max(x.new_addr + x.new_size for x in prev_secs) + max(slack, 0)
            if (s.addr // page) * page >= align_up(old_prev_end, page):
                new_prev_end = align_up(new_prev_end, page)
            need = max(need, new_prev_end)
        da = align_up(max(s.addr, need), s.align) - s.addr
        df_min = max(0, file_need - s.offset) if s.file_size else 0
        df = df_min + ((da - df_min) % step)
        return da, df

    def _place_segments(self, page: int) -> None:
        first_change = min((s.offset for s in self.secs if s.moved or s.new_size != s.size),
                           default=None)
        for g in self.segs:
            inside = [s for s in self.secs if s.type != SHT_NULL and s.alloc and _inside(s, g)]
            if not inside:
                if (first_change is not None and g.filesz and g.offset + g.filesz > first_change
                        and g.type != PT_LOAD):
                    raise _refuse(f"program header {g.index} (type {g.type:#x}) holds no "
                                  f"section; kpatch cannot move it")
                g.new = (g.offset, g.vaddr, g.paddr, g.filesz, g.memsz)
                continue
            first = min(inside, key=lambda s: (s.addr, s.offset))
            da = first.delta
            df = first.new_offset - first.offset
            off, vaddr, paddr = g.offset + df, g.vaddr + da, g.paddr + da
            with_file = [s for s in inside if s.file_size]
            if with_file:
                old_end = max(s.offset + s.file_size for s in with_file)
                new_end = max(s.new_offset + s.new_file_size for s in with_file)
                filesz = new_end + (g.offset + g.filesz - old_end) - off
            else:
                filesz = g.filesz
            old_mem = max(s.addr + s.size for s in inside)
            new_mem = max(s.new_addr + s.new_size for s in inside)
            slack = g.vaddr + g.memsz - old_mem
            end = new_mem + slack
            if slack > 0 and (g.vaddr + g.memsz) % page == 0:
                end = align_up(new_mem, page)
            g.new = (off, vaddr, paddr, max(filesz, 0), max(end - vaddr, 0))

    # -- mapping addresses ------------------------------------------------------
    def section_at(self, addr: int, *, prefer: str = "inside") -> Sec | None:
        """The allocated section holding address ``addr`` (None: ambiguous or outside).

        ``prefer="start"``: an address where one section ends and the next
        starts belongs to the next (DT_* pointers name section starts).
        """
        alloc, ending = self._allocated()
        for s in alloc:
            if s.addr <= addr < s.addr + s.size:
                if prefer != "start":
                    ends_here = [x for x in ending.get(addr, ()) if x.size and x is not s]
                    if ends_here and ends_here[0].delta != s.delta:
                        return None
                return s
        ends = ending.get(addr)
        if ends:
            return ends[0]
        before = [s for s in alloc if s.addr + s.size <= addr]
        after = [s for s in alloc if s.addr > addr]
        if before and after:
            b = max(before, key=lambda s: s.addr + s.size)
            a = min(after, key=lambda s: s.addr)
            if b.delta == a.delta:
                return b
        return None

    def _allocated(self) -> tuple[list[Sec], dict[int, list[Sec]]]:
        """The allocated sections (in header order) and, by old end address,
        those that end there (made once: what :meth:`section_at` looks up,
        for every symbol and descriptor; old addresses and sizes do not change)."""
        got = self._alloc
        if got is None:
            alloc = [s for s in self.secs if s.alloc and s.type != SHT_NULL]
            ending: dict[int, list[Sec]] = {}
            for s in alloc:
                ending.setdefault(s.addr + s.size, []).append(s)
            got = self._alloc = (alloc, ending)
        return got


def _inside(s: Sec, g: Seg) -> bool:
    """Does segment ``g`` hold section ``s`` (by file range; by memory for NOBITS)?"""
    if s.type == SHT_NOBITS:
        return g.vaddr <= s.addr < g.vaddr + g.memsz and s.addr + s.size <= g.vaddr + g.memsz
    if s.size == 0:
        return g.offset <= s.offset < g.offset + g.filesz
    return g.offset <= s.offset and s.offset + s.size <= g.offset + g.filesz


class AddressMap:
    """Old address -> new address, through code maps for code sections."""

    def __init__(self, layout: ElfLayout, code_maps: dict[int, CodeMap] | None = None):
        self.layout = layout
        self.code_maps = code_maps or {}

    def map(self, addr: int, kind: str = "entry", *, prefer: str = "inside",
            what: str = "address") -> int:
        """New address of ``addr``; Refusal if kpatch cannot tell where it went."""
        s = self.layout.section_at(addr, prefer=prefer)
        if s is None:
            raise _refuse(f"{what} {addr:#x} is not inside one section")
        return self.in_section(s.index, addr, kind, what=what)

    def in_section(self, index: int, addr: int, kind: str = "entry", *, what: str = "address") -> int:
        s = self.layout.secs[index]
        cm = self.code_maps.get(index)
        if cm is not None:
            new = cm(addr, kind)
            if new is None:
                raise _refuse(f"{what} {addr:#x} in {s.name} does not point at an instruction")
            return new
        return addr + s.delta


# ---------------------------------------------------------------------------
# writing


@dataclass
class WriteStats:
    symbols_fixed: int = 0
    dynamic_fixed: int = 0
    relocations_fixed: int = 0
    sections_moved: int = 0
    segments_fixed: int = 0


def write(layout: ElfLayout, contents: dict[int, bytes], amap: AddressMap, *,
          assemble: bool = True) -> tuple[bytes | None, WriteStats]:
    """The new file: ``contents`` (new bytes of some sections) placed by
    ``layout``, and the counts of what was fixed; with ``assemble`` false
    only the counts (the same; None for the file)."""
    stats = WriteStats()
    secs = layout.secs
    moved = any(s.moved for s in secs) or any(cm is not None for cm in amap.code_maps.values())
    # the sections' new bytes; counting only, just those of the tables that are fixed
    # (what is written into the others, e.g. a relocation's place, counts nothing)
    # (a table that is fixed is a copy; the others are read-only views of
    # their bytes, copied once, into the file: see _writable)
    tables = (SHT_SYMTAB, SHT_DYNSYM, SHT_DYNAMIC, SHT_RELA)
    body: dict[int, bytearray | memoryview] = {}
    data = memoryview(layout.data)
    for s in secs:
        if s.file_size or s.new_file_size:
            raw = contents.get(s.index)
            if raw is None:
                raw = data[s.offset:s.offset + s.file_size]  # (layout.contents without the copy)
            if len(raw) != s.new_file_size:
                raise _refuse(f"section {s.name} has {len(raw)} bytes, planned {s.new_file_size}")
            if moved and s.type in tables:
                body[s.index] = bytearray(raw)
            elif assemble:
                body[s.index] = memoryview(raw).toreadonly()
    if moved:
        for s in secs:
            if s.type in (SHT_SYMTAB, SHT_DYNSYM):
                stats.symbols_fixed += _fix_symbols(layout, s, body[s.index], amap)
            elif s.type == SHT_DYNAMIC:
                stats.dynamic_fixed += _fix_dynamic(s, body[s.index], amap)
        for s in secs:
            if s.type == SHT_RELA and s.alloc:
                stats.relocations_fixed += _fix_relocations(layout, s, body, amap)
            elif s.type == SHT_REL and s.alloc and s.size:
                raise _refuse(f"{s.name} holds REL relocations (addends in place); kpatch only "
                              f"moves RELA")
    stats.sections_moved = sum(1 for s in secs if s.moved)
    stats.segments_fixed = sum(1 for g in layout.segs if g.new != (g.offset, g.vaddr, g.paddr, g.filesz, g.memsz))
    if not assemble:
        return None, stats
    h = layout.header
    size = max([layout.new_shoff + (len(secs) * SHDR.size if h.e_shoff else 0)]
               + [s.new_offset + s.new_file_size for s in secs if s.new_file_size]
               + [h.e_phoff + h.e_phnum * PHDR.size, h.e_ehsize])
    writes = _gap_writes(layout)
    for s in secs:
        if s.new_file_size:
            writes.append((s.new_offset, s.new_offset + s.new_file_size, body[s.index]))
    entry = h.e_entry
    if entry and moved:
        entry = amap.map(entry, "entry", what="e_entry")
    hdr = h._replace(e_shoff=layout.new_shoff, e_entry=entry)
    writes.append((0, EHDR.size, EHDR.pack(hdr)))
    for g in layout.segs:
        off, vaddr, paddr, filesz, memsz = g.new
        rec = PHDR.record(g.type, g.flags, off, vaddr, paddr, filesz, memsz, g.align)
        at = h.e_phoff + g.index * PHDR.size
        writes.append((at, at + PHDR.size, PHDR.pack(rec)))
    if h.e_shoff:
        for s in secs:
            rec = SHDR.record(_sh_name(layout, s.index), s.type, s.flags, s.new_addr, s.new_offset,
                              s.new_size, s.link, s.info, s.align, s.entsize)
            at = layout.new_shoff + s.index * SHDR.size
            writes.append((at, at + SHDR.size, SHDR.pack(rec)))
    return assemble_file(size, writes), stats


def assemble_file(size: int, writes: list[tuple[int, int, bytes]]) -> bytes:
    """The file :func:`write` lays out: ``size`` zero bytes, then each of
    ``writes`` ``(start, end, data)`` done in turn as ``out[start:end] =
    data`` on a bytearray.

    When the writes do not overlap and each one's data is exactly its range
    inside the file (what :func:`write` gives: the gaps are copied only
    between the items, never over them) the pieces are joined in file order
    with zeros between, each byte copied once into the new bytes (a zeroed
    bytearray written and then copied into bytes touched the whole file
    three times, twice in fresh memory); otherwise the writes are done in
    turn (:func:`_painted`)."""
    pieces = sorted(writes, key=itemgetter(0))
    pos = 0
    for start, end, data in pieces:
        if len(data) != end - start or start < pos or end > size:
            return _painted(size, writes)
        pos = end
    parts: list = []
    pos = 0
    for start, end, data in pieces:
        if start > pos:
            parts.append(bytes(start - pos))
        parts.append(data)
        pos = end
    if pos < size:
        parts.append(bytes(size - pos))
    return b"".join(parts)


def _painted(size: int, writes: list[tuple[int, int, bytes]]) -> bytes:
    """:func:`assemble_file` the plain way: each write done on a zeroed bytearray."""
    out = bytearray(size)
    for start, end, data in writes:
        out[start:end] = data
    return bytes(out)


def _sh_name(layout: ElfLayout, index: int) -> int:
    h = layout.header
    return SHDR.read(layout.data, h.e_shoff + index * SHDR.size).sh_name


def _gap_writes(layout: ElfLayout) -> list[tuple[int, int, bytes]]:
    """The bytes between file items whose distance did not change, as
    :func:`assemble_file` writes (start, end, data) in the new file."""
    h = layout.header
    items = [(0, h.e_ehsize, 0, h.e_ehsize)]
    if h.e_phnum:
        n = h.e_phnum * PHDR.size
        items.append((h.e_phoff, h.e_phoff + n, h.e_phoff, h.e_phoff + n))
    for s in layout.secs:
        if s.file_size or s.new_file_size:
            items.append((s.offset, s.offset + s.file_size, s.new_offset, s.new_offset + s.new_file_size))
    if h.e_shoff:
        n = len(layout.secs) * SHDR.size
        items.append((h.e_shoff, h.e_shoff + n, layout.new_shoff, layout.new_shoff + n))
    items.sort()
    data = memoryview(layout.data)
    out = []
    for a, b in zip(items, items[1:]):
        old_gap = b[0] - a[1]
        if old_gap > 0 and b[2] - a[3] == old_gap:
            out.append((a[3], b[2], data[a[1]:b[0]]))
    return out


def _fix_symbols(layout: ElfLayout, table: Sec, body: bytearray, amap: AddressMap) -> int:
    changed = 0
    n = len(body) // SYM.size
    rec = SYM.struct
    secs = layout.secs
    code_maps = amap.code_maps
    # (each record is read from a copy and written back in its own place)
    for i, (name, info, other, shndx, value, size) in enumerate(
            rec.iter_unpack(bytes(body[SYM.size:n * SYM.size])), 1):
        if shndx == SHN_UNDEF or shndx >= SHN_LORESERVE or shndx >= len(secs):
            continue
        s = secs[shndx]
        if not s.alloc:
            continue
        if shndx in code_maps and info & 0xF != STT_SECTION:
            what = f"symbol {i} of {table.name}"
            new_value = amap.in_section(shndx, value, "entry", what=what)
            new_size = size
            if size:
                end = amap.in_section(shndx, value + size, "end", what=what + " (end)")
                new_size = end - new_value
        else:
            new_value, new_size = value + s.delta, size
        if new_value != value or new_size != size:
            rec.pack_into(body, i * SYM.size, name, info, other, shndx, new_value, new_size)
            changed += 1
    return changed


def _fix_dynamic(s: Sec, body: bytearray, amap: AddressMap) -> int:
    changed = 0
    for at in range(0, len(body) - DYN.size + 1, DYN.size):
        tag, val = DYN.unpack_from(body, at)
        if tag == 0:
            break
        if tag in DT_POINTERS:
            new = amap.map(val, "entry", prefer="start", what=DT_POINTERS[tag])
            if new != val:
                DYN.pack_into(body, at, tag, new)
                changed += 1
        elif tag not in DT_VALUES:
            raise _refuse(f"{s.name} has dynamic tag {tag:#x}, which kpatch does not know")
    return changed


def _fix_relocations(layout: ElfLayout, s: Sec, body: dict[int, bytearray], amap: AddressMap) -> int:
    rel = body[s.index]
    changed = 0
    for at in range(0, len(rel) - RELA.size + 1, RELA.size):
        off, info, addend = RELA.unpack_from(rel, at)
        rtype, sym = info & 0xFFFFFFFF, info >> 32
        if rtype == R_AMDGPU_NONE:
            continue
        new_off = amap.map(off, "entry", prefer="start", what=f"relocation place in {s.name}")
        new_add = addend
        if rtype == R_AMDGPU_RELATIVE64:
            new_add = amap.map(addend, "entry", what=f"R_AMDGPU_RELATIVE64 addend in {s.name}")
            _fix_place(layout, body, off, new_off, addend, new_add)
        elif rtype in _SYMBOL_RELOCS and sym:
            if addend and _symbol_in_code(layout, s, sym, amap):
                raise _refuse(f"relocation at {off:#x} points {addend} bytes into a function")
        else:
            raise _refuse(f"relocation type {rtype} at {off:#x} in {s.name} is not one kpatch "
                          f"can move")
        if (new_off, new_add) != (off, addend):
            RELA.pack_into(rel, at, new_off, info, new_add)
            changed += 1
    return changed


def _fix_place(layout: ElfLayout, body: dict[int, bytearray | memoryview], off: int, new_off: int,
               old: int, new: int) -> None:
    """If the linker also wrote the addend at the place, write the new one there."""
    s = layout.section_at(off)
    if s is None or s.index not in body or old == new:
        return
    at = new_off - s.new_addr
    b = body[s.index]
    if 0 <= at <= len(b) - 8 and int.from_bytes(b[at:at + 8], "little") == old & (2**64 - 1):
        _writable(body, s.index)[at:at + 8] = (new & (2**64 - 1)).to_bytes(8, "little")


def _writable(body: dict[int, bytearray | memoryview], index: int) -> bytearray:
    """:func:`write`'s new bytes of section ``index``, as a copy that may be
    changed: a section :func:`write` does not fix is a read-only view of its
    bytes (the original's, or the caller's new contents, which are never
    changed), copied here the first time something is written into it."""
    b = body[index]
    if type(b) is not bytearray:
        b = body[index] = bytearray(b)
    return b


def _symbol_in_code(layout: ElfLayout, rel: Sec, sym: int, amap: AddressMap) -> bool:
    table = layout.secs[rel.link] if rel.link < len(layout.secs) else None
    if table is None:
        return False
    data = layout.contents(table.index)
    if (sym + 1) * SYM.size > len(data):
        raise _refuse(f"relocation names symbol {sym}, which {table.name} does not have")
    return SYM.read(data, sym * SYM.size).st_shndx in amap.code_maps
