"""A small, lazy ELF64 little-endian reader (what AMDGPU code objects use).

Only what kpatch needs: the file header, section and program header tables,
symbol tables and notes.  Every table is read on first use and checked
against the size of the data; anything out of range is a
:class:`~kpatch.errors.FormatError`.  Nothing here is AMDGPU-specific except
the constants at the top, which the code-object model uses.  Host ELF
files (:mod:`kpatch.containers.hostelf`) are mapped, not held in memory:
they read these records (EHDR, SHDR, SYM, RELA, REL) and :class:`Section`
through their own walk of the mapping.  The
constants are kpatch's one set: every module that names an ELF value
imports it from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from kpatch.elf.layout import Layout
from kpatch.errors import FormatError

ELF_MAGIC = b"\x7fELF"
ELFCLASS64 = 2
ELFDATA2LSB = 1
EV_CURRENT = 1

ET_REL, ET_EXEC, ET_DYN = 1, 2, 3
EM_AMDGPU = 224

ELFOSABI_NAMES = {0: "NONE", 64: "AMDGPU_HSA", 65: "AMDGPU_PAL", 66: "AMDGPU_MESA3D"}
ELFOSABI_AMDGPU_HSA = 64

SHT_NULL, SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA = 0, 1, 2, 3, 4
SHT_DYNAMIC, SHT_NOTE, SHT_NOBITS, SHT_REL, SHT_DYNSYM = 6, 7, 8, 9, 11
SHF_ALLOC, SHF_EXECINSTR = 0x2, 0x4
SHN_UNDEF, SHN_LORESERVE, SHN_XINDEX = 0, 0xFF00, 0xFFFF

PT_LOAD, PT_NOTE = 1, 4

STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION = 0, 1, 2, 3
STT_AMDGPU_HSA_KERNEL = 10  # code object V2 kernels

EHDR = Layout("ELF header", [
    ("ei_magic", "4s"), ("ei_class", "B"), ("ei_data", "B"), ("ei_version", "B"),
    ("ei_osabi", "B"), ("ei_abiversion", "B"), ("ei_pad", "7s"),
    ("e_type", "H"), ("e_machine", "H"), ("e_version", "I"), ("e_entry", "Q"),
    ("e_phoff", "Q"), ("e_shoff", "Q"), ("e_flags", "I"), ("e_ehsize", "H"),
    ("e_phentsize", "H"), ("e_phnum", "H"), ("e_shentsize", "H"), ("e_shnum", "H"),
    ("e_shstrndx", "H"),
])
SHDR = Layout("section header", [
    ("sh_name", "I"), ("sh_type", "I"), ("sh_flags", "Q"), ("sh_addr", "Q"),
    ("sh_offset", "Q"), ("sh_size", "Q"), ("sh_link", "I"), ("sh_info", "I"),
    ("sh_addralign", "Q"), ("sh_entsize", "Q"),
])
PHDR = Layout("program header", [
    ("p_type", "I"), ("p_flags", "I"), ("p_offset", "Q"), ("p_vaddr", "Q"),
    ("p_paddr", "Q"), ("p_filesz", "Q"), ("p_memsz", "Q"), ("p_align", "Q"),
])
SYM = Layout("symbol", [
    ("st_name", "I"), ("st_info", "B"), ("st_other", "B"), ("st_shndx", "H"),
    ("st_value", "Q"), ("st_size", "Q"),
])
NHDR = Layout("note header", [("n_namesz", "I"), ("n_descsz", "I"), ("n_type", "I")])
RELA = Layout("relocation with addend", [("r_offset", "Q"), ("r_info", "Q"), ("r_addend", "q")])
REL = Layout("relocation", [("r_offset", "Q"), ("r_info", "Q")])


@dataclass(frozen=True)
class Section:
    """One section header, with its name resolved."""

    index: int
    name: str
    type: int
    flags: int
    addr: int  # virtual address (0 when not allocated / relocatable)
    offset: int  # file offset
    size: int
    link: int
    info: int
    addralign: int
    entsize: int

    @property
    def vaddr(self) -> int:
        """Virtual address (same as ``addr``)."""
        return self.addr

    @property
    def file_size(self) -> int:
        """Bytes the section occupies in the file (0 for SHT_NOBITS)."""
        return 0 if self.type == SHT_NOBITS else self.size


@dataclass(frozen=True)
class Segment:
    """One program header."""

    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int
    align: int


@dataclass(frozen=True)
class Symbol:
    """One symbol table entry, with its name resolved."""

    name: str
    value: int
    size: int
    type: int  # STT_*
    bind: int  # STB_*
    visibility: int  # STV_*
    shndx: int
    table: str  # name of the symbol table section it came from


@dataclass(frozen=True)
class Note:
    """One ELF note: owner name, type and descriptor (with its file offset)."""

    owner: str
    type: int
    desc: bytes
    offset: int  # file offset of the note header
    desc_offset: int  # file offset of the descriptor
    align: int  # 4 or 8


def _cstring(table: bytes, start: int, what: str) -> str:
    """The NUL-terminated string at ``start`` of a string table."""
    if start >= len(table):
        raise FormatError(f"{what} name offset {start} is outside its string table "
                          f"({len(table)} bytes)")
    end = table.find(b"\0", start)
    if end < 0:
        raise FormatError(f"{what} name at {start} is not NUL-terminated")
    return table[start:end].decode("utf-8", "surrogateescape")


def _read_symbols(body: bytes, strings: bytes, table: str, where: str) -> list[Symbol]:
    """The Symbols of the entries ``body`` of a symbol table (whole
    entries) named ``table``, names read from ``strings``.  (A library's
    code objects hold hundreds of thousands of symbols: each Symbol is made
    with its attributes set at once, as its generated ``__init__`` would
    set them one by one.)"""
    out = []
    append = out.append
    new = object.__new__
    n_strings = len(strings)
    find = strings.find
    for i, (st_name, info, other, shndx, value, size) in enumerate(SYM.struct.iter_unpack(body)):
        if st_name:
            end = find(b"\0", st_name) if st_name < n_strings else -2
            if end < 0:
                _cstring(strings, st_name, f"{where} entry {i}")  # (raises: says why)
            name = strings[st_name:end].decode("utf-8", "surrogateescape")
        else:
            name = ""
        sym = new(Symbol)
        sym.__dict__.update(name=name, value=value, size=size, type=info & 0xF, bind=info >> 4,
                            visibility=other & 0x3, shndx=shndx, table=table)
        append(sym)
    return out


#: Symbol tables read lately, by (section name, entries, string table):
#: one code object is parsed many times while it is patched (and its
#: symbol tables are the slow part); Symbols are immutable, so the same
#: ones serve every parse of the same bytes.
_SYMBOL_MEMO: dict[tuple[str, bytes, bytes], tuple[Symbol, ...]] = {}
_SYMBOL_MEMO_SIZE = 8


class ElfFile:
    """An ELF64 little-endian file held in memory; tables are read lazily."""

    def __init__(self, data: bytes):
        self.data = bytes(data)
        if len(self.data) < 4 or self.data[:4] != ELF_MAGIC:
            raise FormatError("not an ELF file (bad magic)")
        if len(self.data) < EHDR.size:
            raise FormatError(f"file of {len(self.data)} bytes is too short for an ELF64 header")
        h = self.header = EHDR.read(self.data)
        if h.ei_class != ELFCLASS64:
            raise FormatError(f"not a 64-bit ELF (EI_CLASS={h.ei_class})")
        if h.ei_data != ELFDATA2LSB:
            raise FormatError(f"not a little-endian ELF (EI_DATA={h.ei_data})")
        if h.ei_version != EV_CURRENT:
            raise FormatError(f"unknown ELF version EI_VERSION={h.ei_version}")
        if h.e_ehsize < EHDR.size:
            raise FormatError(f"e_ehsize {h.e_ehsize} is smaller than {EHDR.size}")
        if h.e_phnum and h.e_phentsize != PHDR.size:
            raise FormatError(f"e_phentsize is {h.e_phentsize}, expected {PHDR.size}")
        if h.e_phnum and h.e_phoff + h.e_phnum * PHDR.size > len(self.data):
            raise FormatError("program header table runs past the end of the file")
        if h.e_shoff and h.e_shentsize != SHDR.size:
            raise FormatError(f"e_shentsize is {h.e_shentsize}, expected {SHDR.size}")
        if h.e_shoff and h.e_shoff + SHDR.size > len(self.data):
            raise FormatError("section header table runs past the end of the file")

    # -- header ------------------------------------------------------------
    @property
    def e_type(self) -> int:
        return self.header.e_type

    @property
    def e_machine(self) -> int:
        return self.header.e_machine

    @property
    def e_flags(self) -> int:
        return self.header.e_flags

    @property
    def osabi(self) -> int:
        return self.header.ei_osabi

    @property
    def abi_version(self) -> int:
        return self.header.ei_abiversion

    # -- sections ------------------------------------------------------------
    @cached_property
    def _raw_sections(self) -> list:
        h = self.header
        if not h.e_shoff:
            return []
        count = h.e_shnum
        if count == 0:  # extended numbering: the count is in section 0's sh_size
            count = SHDR.read(self.data, h.e_shoff).sh_size
        if count * SHDR.size > len(self.data) - h.e_shoff:
            raise FormatError(f"section header table ({count} entries) runs past the end of the file")
        return list(SHDR.read_many(self.data, h.e_shoff, count))

    @cached_property
    def sections(self) -> tuple[Section, ...]:
        """All section headers in table order, names resolved and ranges checked."""
        raw = self._raw_sections
        if not raw:
            return ()
        strndx = self.header.e_shstrndx
        if strndx == SHN_XINDEX:
            strndx = raw[0].sh_link
        names: bytes = b""
        if strndx != SHN_UNDEF:
            if strndx >= len(raw):
                raise FormatError(f"e_shstrndx {strndx} is not a section index (have {len(raw)})")
            names = self._range(raw[strndx].sh_offset, raw[strndx].sh_size, "section name table")
        out = []
        for i, s in enumerate(raw):
            if s.sh_type != SHT_NOBITS and s.sh_type != SHT_NULL and not self._inside(s.sh_offset, s.sh_size):
                self._range(s.sh_offset, s.sh_size, f"section {i}")  # (raises: says why)
            name = _cstring(names, s.sh_name, f"section {i}") if (names and i) else ""
            out.append(Section(i, name, s.sh_type, s.sh_flags, s.sh_addr, s.sh_offset,
                               s.sh_size, s.sh_link, s.sh_info, s.sh_addralign, s.sh_entsize))
        return tuple(out)

    def section(self, name: str) -> Section | None:
        """The first section called ``name``, or None."""
        for s in self.sections:
            if s.name == name:
                return s
        return None

    def section_bytes(self, section: Section) -> bytes:
        """The file contents of ``section`` (empty for SHT_NOBITS)."""
        if section.type == SHT_NOBITS:
            return b""
        return self._range(section.offset, section.size, f"section {section.name or section.index}")

    def _inside(self, offset: int, size: int) -> bool:
        """Are the ``size`` bytes at ``offset`` inside the file?  (:meth:`_range`'s
        check without copying them: the headers' ranges are checked on every parse.)"""
        return offset >= 0 and size >= 0 and offset + size <= len(self.data)

    def _range(self, offset: int, size: int, what: str) -> bytes:
        if not self._inside(offset, size):
            raise FormatError(f"{what} ({size} bytes at {offset:#x}) runs past the end of the "
                              f"file ({len(self.data)} bytes)")
        return self.data[offset:offset + size]

    # -- segments ------------------------------------------------------------
    @cached_property
    def segments(self) -> tuple[Segment, ...]:
        """All program headers, file ranges checked."""
        h = self.header
        if not h.e_phnum:
            return ()
        out = []
        for i, p in enumerate(PHDR.read_many(self.data, h.e_phoff, h.e_phnum)):
            if not self._inside(p.p_offset, p.p_filesz):
                self._range(p.p_offset, p.p_filesz, f"segment {i}")  # (raises: says why)
            out.append(Segment(p.p_type, p.p_flags, p.p_offset, p.p_vaddr, p.p_filesz,
                               p.p_memsz, p.p_align))
        return tuple(out)

    def vaddr_to_offset(self, vaddr: int, size: int = 1) -> int | None:
        """File offset of virtual address ``vaddr`` (through PT_LOAD), or None."""
        for seg in self.segments:
            if seg.type == PT_LOAD and seg.vaddr <= vaddr and vaddr + size <= seg.vaddr + seg.filesz:
                return seg.offset + (vaddr - seg.vaddr)
        return None

    # -- symbols ---------------------------------------------------------------
    def symbols(self, section: Section) -> list[Symbol]:
        """The entries of symbol table ``section`` (SHT_SYMTAB or SHT_DYNSYM)."""
        where = f"symbol table {section.name or section.index}"
        if section.entsize not in (0, SYM.size):
            raise FormatError(f"{where} has entry size {section.entsize}, expected {SYM.size}")
        if section.size % SYM.size:
            raise FormatError(f"{where} size {section.size} is not a multiple of {SYM.size}")
        if section.link >= len(self.sections):
            raise FormatError(f"{where} links to string table {section.link}, which does not exist")
        strings = bytes(self.section_bytes(self.sections[section.link]))
        body = bytes(self.section_bytes(section))
        key = (section.name, body, strings)
        got = _SYMBOL_MEMO.get(key)
        if got is None:
            got = tuple(_read_symbols(body, strings, section.name, where))
            if len(_SYMBOL_MEMO) >= _SYMBOL_MEMO_SIZE:
                _SYMBOL_MEMO.pop(next(iter(_SYMBOL_MEMO)))
            _SYMBOL_MEMO[key] = got
        return list(got)

    @cached_property
    def symbol_tables(self) -> dict[str, list[Symbol]]:
        """Symbols of every SHT_SYMTAB / SHT_DYNSYM section, keyed by section name."""
        return {s.name: self.symbols(s) for s in self.sections
                if s.type in (SHT_SYMTAB, SHT_DYNSYM)}

    def symbol_offset(self, sym: Symbol, size: int = 0) -> int | None:
        """File offset of the ``size`` bytes at ``sym`` (through its section), or None."""
        if sym.shndx == SHN_UNDEF or sym.shndx >= SHN_LORESERVE or sym.shndx >= len(self.sections):
            return None
        sec = self.sections[sym.shndx]
        if sec.type == SHT_NOBITS:
            return None
        rel = sym.value if self.e_type == ET_REL else sym.value - sec.addr
        if rel < 0 or rel + size > sec.size:
            return None
        return sec.offset + rel

    # -- notes -----------------------------------------------------------------
    @cached_property
    def notes(self) -> tuple[Note, ...]:
        """Every note, from SHT_NOTE sections (or PT_NOTE segments if there are none)."""
        spans = [(s.offset, s.size, s.addralign) for s in self.sections if s.type == SHT_NOTE]
        if not spans:
            spans = [(p.offset, p.filesz, p.align) for p in self.segments if p.type == PT_NOTE]
        out: list[Note] = []
        for offset, size, align in spans:
            out.extend(self._read_notes(offset, size, 8 if align == 8 else 4))
        return tuple(out)

    def _read_notes(self, offset: int, size: int, align: int) -> list[Note]:
        self._range(offset, size, "note area")
        end = offset + size
        pos = offset
        out = []
        pad = align - 1
        while pos < end:
            if end - pos < NHDR.size:
                raise FormatError(f"truncated note header at {pos:#x}")
            n = NHDR.read(self.data, pos)
            name_at = pos + NHDR.size
            desc_at = name_at + ((n.n_namesz + pad) & ~pad)
            nxt = desc_at + ((n.n_descsz + pad) & ~pad)
            if desc_at + n.n_descsz > end:
                raise FormatError(f"note at {pos:#x} (name {n.n_namesz} bytes, descriptor "
                                  f"{n.n_descsz} bytes) runs past the end of its note area")
            owner = self.data[name_at:name_at + n.n_namesz].rstrip(b"\0")
            out.append(Note(owner.decode("utf-8", "surrogateescape"), n.n_type,
                            self.data[desc_at:desc_at + n.n_descsz], pos, desc_at, align))
            pos = nxt
        return out
