"""One AMDGPU code object: header checks, target, metadata, kernels.

``CodeObject.from_bytes(data)`` checks the ELF header (64-bit little-endian,
EM_AMDGPU, OS/ABI AMDGPU_HSA, a known EI_ABIVERSION), the section and
program header tables and the notes; the target comes from ``e_flags``.
The metadata map and the kernel list are read on first use.  Anything
malformed is a :class:`~kpatch.errors.FormatError`, whenever it is found.

Code object V2 (EI_ABIVERSION 0) uses another metadata note and another
kernel format (``amd_kernel_code_t``); such objects are reported with
``is_legacy = True``, no metadata and no kernels.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from functools import cached_property

from kpatch.codeobject.descriptor import KD_SIZE, KernelDescriptor
from kpatch.elf.reader import (
    ELFOSABI_AMDGPU_HSA, ELFOSABI_NAMES, EM_AMDGPU, ET_DYN, ET_EXEC, ET_REL, SHN_UNDEF,
    STT_AMDGPU_HSA_KERNEL, STT_FUNC, ElfFile, Note, Section, Symbol)
from kpatch.codeobject.metadata import (
    LEGACY_NOTE_OWNER, NOTE_OWNER, NT_AMDGPU_METADATA, Metadata, decode_metadata, merge_metadata)
from kpatch.codeobject.target import (
    TargetId, code_object_version_for_abi, target_from_e_flags)
from kpatch.errors import FormatError

KD_SUFFIX = ".kd"
#: The hardware starts a kernel at an address that is a multiple of this
#: (AMDGPUUsage: KERNEL_CODE_ENTRY_BYTE_OFFSET "must be 256 byte aligned").
ENTRY_ALIGN = 256
_SYMBOL_TABLE_ORDER = (".symtab", ".dynsym")
#: How a function's end was decided (:attr:`FunctionExtent.end_from`).
END_BY_SIZE = "symbol size"
END_BY_NEXT = "next function"
END_BY_SECTION = "end of .text"


@dataclass
class Kernel:
    """One kernel: its descriptor (``NAME.kd``) and, if found, its code."""

    name: str
    symbol: str  # NAME.kd
    descriptor: KernelDescriptor
    descriptor_offset: int  # file offset of the 64-byte descriptor
    descriptor_vaddr: int  # st_value of NAME.kd (section-relative in ET_REL)
    entry: int  # descriptor_vaddr + KERNEL_CODE_ENTRY_BYTE_OFFSET
    code_offset: int | None = None  # file offset of the code (STT_FUNC NAME)
    code_size: int | None = None  # st_size of the STT_FUNC symbol
    #: why the descriptor's entry cannot be trusted ('' if it can); then
    #: ``code_offset`` is None: the code the hardware would run is unknown
    entry_problem: str = ""
    _owner: "CodeObject | None" = field(default=None, repr=False, compare=False)

    @property
    def metadata(self) -> dict | None:
        """This kernel's map from ``amdhsa.kernels`` (matched by ``.symbol``), or None."""
        md = self._owner.metadata if self._owner is not None else None
        return md.kernel(self.symbol) if md is not None else None


@dataclass(frozen=True)
class FunctionExtent:
    """Where one function's code lies in ``.text``: addresses [start, end).
    A row of :meth:`CodeObject.function_extents`."""

    name: str
    start: int
    end: int
    kind: str  # "kernel" or "function" (a device function)
    end_from: str  # END_BY_SIZE, END_BY_NEXT or END_BY_SECTION
    kernel: Kernel | None = field(default=None, repr=False, compare=False)

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def sized(self) -> bool:
        """Does a symbol's st_size say where it ends (else the end was inferred)?"""
        return self.end_from == END_BY_SIZE


#: The last :meth:`CodeObject.read_only` parse (a one-item list; it holds its
#: bytes, so the identity it is looked up by cannot be reused by other bytes).
_READ_ONLY: list["CodeObject | None"] = [None]


class CodeObject:
    """An AMDGPU code object (ELF) held in memory."""

    def __init__(self, data: bytes, name: str = "", lossless: bool = True):
        self.name = name
        #: False: the metadata is read as plain values by the C msgpack
        #: library and cannot be written back (for readers: scan, disasm, diff)
        self.lossless = lossless
        self.elf = ElfFile(data)
        self.data = self.elf.data
        h = self.elf.header
        if h.e_machine != EM_AMDGPU:
            raise FormatError(f"not an AMDGPU code object (e_machine {h.e_machine}, "
                              f"expected EM_AMDGPU {EM_AMDGPU})")
        if h.ei_osabi != ELFOSABI_AMDGPU_HSA:
            osabi = ELFOSABI_NAMES.get(h.ei_osabi, str(h.ei_osabi))
            raise FormatError(f"OS/ABI is {osabi}, not AMDGPU_HSA: not an HSA code object")
        if h.e_type not in (ET_REL, ET_EXEC, ET_DYN):
            raise FormatError(f"unexpected ELF type e_type={h.e_type}")
        self.e_type: int = h.e_type
        self.e_flags: int = h.e_flags
        self.abi_version: int = h.ei_abiversion
        self.code_object_version: int = code_object_version_for_abi(h.ei_abiversion)
        self.is_legacy: bool = self.code_object_version == 2
        # Read the tables now: their errors belong to from_bytes.
        self.elf.sections
        self.elf.segments
        self.elf.notes
        if self.is_legacy:
            try:
                self.target: TargetId | None = target_from_e_flags(self.e_flags, 2)
            except FormatError:
                self.target = None
        else:
            self.target = target_from_e_flags(self.e_flags, self.code_object_version)
        found = [n for n in self.elf.notes
                 if n.owner == NOTE_OWNER and n.type == NT_AMDGPU_METADATA]
        #: every NT_AMDGPU_METADATA note, in order (a linked object may have one per object linked)
        self.metadata_notes: tuple[Note, ...] = tuple(found) if not self.is_legacy else ()
        self.metadata_note: Note | None = self.metadata_notes[0] if self.metadata_notes else None

    @classmethod
    def from_bytes(cls, data: bytes, *, name: str = "", lossless: bool = True) -> "CodeObject":
        """Parse a code object; FormatError (with ``item=name``) if malformed.
        ``lossless=False`` for a reader that writes nothing back (see
        :func:`~kpatch.codeobject.metadata.decode_metadata`)."""
        try:
            return cls(data, name, lossless)
        except FormatError as e:
            raise e.with_item(name) if name else e

    @classmethod
    def read_only(cls, data: bytes) -> "CodeObject":
        """``from_bytes(data, lossless=False)``, shared by the readers of one
        bytes object: the same CodeObject as the last call when ``data`` is
        the very object it was given (:data:`_READ_ONLY`).  Apply checks a
        code object (its metadata and kernels) and hands the same bytes to
        the patcher, which reads them again, as do its header edits: each
        parse and its kernels cost a millisecond or more.  Read only, like
        every ``lossless=False`` parse; what is worked out on it (kernels,
        function extents) is worked out once for all its readers."""
        last = _READ_ONLY[0]
        if last is not None and last.data is data:
            return last
        co = cls.from_bytes(data, lossless=False)
        _READ_ONLY[0] = co if co.data is data else None  # (keyed by identity: a copy would never match)
        return co

    def __repr__(self) -> str:
        return (f"CodeObject({self.name or '<bytes>'}, V{self.code_object_version}, "
                f"{self.target_id or '?'}, {len(self.data)} bytes)")

    # -- identity --------------------------------------------------------------
    @property
    def target_id(self) -> str:
        """The target id as LLVM writes it (``gfx1030``, ``gfx90a:xnack+``), or ''."""
        return str(self.target) if self.target is not None else ""

    @property
    def legacy_notes(self) -> list[Note]:
        """Code object V2 notes (owner ``AMD``), e.g. NT_AMD_HSA_ISA_NAME (type 11)."""
        return [n for n in self.elf.notes if n.owner == LEGACY_NOTE_OWNER]

    # -- sections ----------------------------------------------------------------
    @cached_property
    def sections(self) -> dict[str, Section]:
        """Sections by name (first of each name); each has vaddr, offset, size."""
        out: dict[str, Section] = {}
        for s in self.elf.sections:
            if s.name and s.name not in out:
                out[s.name] = s
        return out

    def section(self, name: str) -> Section | None:
        return self.sections.get(name)

    @property
    def text(self) -> bytes:
        """Contents of ``.text`` (empty if there is none)."""
        s = self.sections.get(".text")
        return self.elf.section_bytes(s) if s is not None else b""

    @property
    def text_vaddr(self) -> int | None:
        s = self.sections.get(".text")
        return s.addr if s is not None else None

    @property
    def text_offset(self) -> int | None:
        s = self.sections.get(".text")
        return s.offset if s is not None else None

    # -- metadata ------------------------------------------------------------------
    @cached_property
    def metadata_parts(self) -> list[Metadata]:
        """Each NT_AMDGPU_METADATA note decoded, in note order."""
        out = []
        for n, note in enumerate(self.metadata_notes, 1):
            try:
                out.append(decode_metadata(note.desc, self.lossless))
            except FormatError as e:
                if len(self.metadata_notes) > 1:
                    e = FormatError(f"metadata note {n} of {len(self.metadata_notes)}: {e.reason}")
                raise self._named(e) from None
        return out

    @cached_property
    def metadata(self) -> Metadata | None:
        """The metadata map the runtime reads (V3+), or None if there is none:
        the one note's, or several notes merged
        (:func:`~kpatch.codeobject.metadata.merge_metadata`: each kernel's map
        is the one in the note that describes it)."""
        parts = self.metadata_parts
        if not parts:
            return None
        try:
            return merge_metadata(parts)
        except FormatError as e:
            raise self._named(e) from None

    # -- symbols and kernels ---------------------------------------------------------
    def symbols(self) -> list[Symbol]:
        """Every symbol: ``.symtab`` first, then ``.dynsym``, then any other table
        (a name can appear in more than one)."""
        try:
            tables = self.elf.symbol_tables
        except FormatError as e:
            raise self._named(e) from None
        out: list[Symbol] = []
        for name in _SYMBOL_TABLE_ORDER:
            out.extend(tables.get(name, ()))
        for name, syms in tables.items():
            if name not in _SYMBOL_TABLE_ORDER:
                out.extend(syms)
        return out

    _symbols = symbols  # older name, kept for callers

    def function_symbols(self) -> list[Symbol]:
        """Every defined function symbol (``STT_FUNC``, not ``SHN_UNDEF``), in
        :meth:`symbols` order, duplicates kept.  The one rule for what is a
        function: the kernels' code (:attr:`kernels`) and
        :meth:`function_extents` (where each starts and ends, which the
        analysis, the rewriter, the spare-register choice and the diff read)
        start from this list."""
        return [s for s in self.symbols() if s.type == STT_FUNC and s.shndx != SHN_UNDEF]

    def function_extents(self) -> list[FunctionExtent]:
        """Where every function (kernel or device function) whose code starts
        in ``.text`` starts and ends: the one table the analysis, the
        rewriter's scan of ``.text``, the patcher, the spare-register choice
        and the diff read.

        The functions: each kernel whose code kpatch found
        (:attr:`Kernel.code_offset` inside ``.text``), named after the kernel,
        and each other :meth:`function_symbols` name defined in ``.text``
        (first symbol of each name).  A function starts at its symbol's value
        (a kernel: where its code is).

        The one rule for where it ends: ``start + st_size`` when a symbol at
        that start has a non-zero st_size (the largest, if several do;
        clipped to the end of ``.text``); otherwise the next function start
        or the end of ``.text``, whichever is first.  That is the
        conservative choice: analysing more bytes can only find more, never
        hide something (the bytes up to the next function may be padding;
        users that move code trim it, see :mod:`kpatch.analysis.codescan`).

        Order: kernels as :attr:`kernels` lists them, then device functions
        in symbol order."""
        return list(self._function_extents)

    def function_extent(self, name: str) -> FunctionExtent | None:
        """The row of :meth:`function_extents` called ``name``, or None."""
        return next((e for e in self._function_extents if e.name == name), None)

    @cached_property
    def _function_extents(self) -> tuple[FunctionExtent, ...]:
        text = self.sections.get(".text")
        if text is None or text.size == 0:
            return ()
        lo, hi = text.addr, text.addr + text.size
        sizes: dict[int, int] = {}  # start -> the largest st_size of a symbol there
        functions: dict[str, int] = {}  # name -> start
        for s in self.function_symbols():
            if s.shndx != text.index or not lo <= s.value < hi or not s.name:
                continue
            sizes[s.value] = max(sizes.get(s.value, 0), s.size)
            functions.setdefault(s.name, s.value)
        kernels: dict[str, tuple[int, Kernel]] = {}
        for k in self.kernels:
            if k.code_offset is not None and text.offset <= k.code_offset < text.offset + text.size:
                start = lo + k.code_offset - text.offset
                kernels.setdefault(k.name, (start, k))
                sizes.setdefault(start, 0)
        starts = sorted(sizes)

        def extent(name: str, start: int, kind: str, kernel: Kernel | None) -> FunctionExtent:
            if sizes[start]:
                return FunctionExtent(name, start, min(start + sizes[start], hi), kind, END_BY_SIZE, kernel)
            i = bisect.bisect_right(starts, start)
            if i < len(starts):
                return FunctionExtent(name, start, starts[i], kind, END_BY_NEXT, kernel)
            return FunctionExtent(name, start, hi, kind, END_BY_SECTION, kernel)

        out = [extent(name, start, "kernel", k) for name, (start, k) in kernels.items()]
        out += [extent(name, start, "function", None) for name, start in functions.items() if name not in kernels]
        return tuple(out)

    def _named(self, error: FormatError) -> FormatError:
        return error.with_item(self.name) if self.name else error

    @cached_property
    def kernels(self) -> list[Kernel]:
        """One Kernel per defined ``NAME.kd`` symbol (none for V2 objects)."""
        try:
            return self._read_kernels()
        except FormatError as e:
            raise self._named(e) from None

    def _read_kernels(self) -> list[Kernel]:
        if self.is_legacy:
            return []
        layout = self.target.mach.descriptor_layout if self.target is not None else "gfx10"
        symbols = self.symbols()
        funcs: dict[str, Symbol] = {}
        for s in self.function_symbols():
            funcs.setdefault(s.name, s)
        out: list[Kernel] = []
        seen: set[str] = set()
        for s in symbols:
            if not s.name.endswith(KD_SUFFIX) or s.shndx == SHN_UNDEF or s.name in seen:
                continue
            seen.add(s.name)
            offset = self.elf.symbol_offset(s, KD_SIZE)
            if offset is None:
                raise FormatError(f"kernel descriptor {s.name} is not 64 bytes inside its section")
            kd = KernelDescriptor.from_bytes(self.data[offset:offset + KD_SIZE], layout)
            name = s.name[:-len(KD_SUFFIX)]
            entry = s.value + kd.kernel_code_entry_byte_offset
            code_offset = code_size = None
            f = funcs.get(name)
            problem = "" if self.e_type == ET_REL else self._entry_problem(kd, entry, f)
            if problem:
                pass
            elif f is not None:
                code_offset = self.elf.symbol_offset(f, f.size)
                code_size = f.size if code_offset is not None else None
            elif self.e_type != ET_REL:
                code_offset = self.elf.vaddr_to_offset(entry)
            out.append(Kernel(name, s.name, kd, offset, s.value, entry, code_offset, code_size,
                              problem, self))
        return out

    def _entry_problem(self, kd: KernelDescriptor, entry: int, func: Symbol | None) -> str:
        """Why the entry a (linked) descriptor gives cannot be where its code
        is, or ''.  (In a relocatable object the field is filled by a
        relocation, so it is not checked there.)  The entry must lie inside
        ``.text``, be 256-byte aligned, and be the kernel's function symbol
        when there is one: that symbol is where kpatch reads the code."""
        text = self.sections.get(".text")
        if text is None:
            why = "and the object has no .text"
        elif not text.addr <= entry < text.addr + text.size:
            why = f"outside .text ({text.addr:#x}..{text.addr + text.size:#x})"
        elif entry % ENTRY_ALIGN:
            why = f"which is not {ENTRY_ALIGN}-byte aligned"
        elif func is not None and func.value != entry:
            why = f"not at the kernel's code ({func.name} at {func.value:#x})"
        else:
            return ""  # (checked for every kernel of every parse: the sentence is made only when needed)
        off = kd.kernel_code_entry_byte_offset
        return f"the kernel descriptor's entry offset {off:+#x} puts the entry at {entry:#x}, {why}"

    def kernel(self, name: str) -> Kernel | None:
        """The kernel called ``name`` (or whose descriptor symbol is ``name``)."""
        for k in self.kernels:
            if name in (k.name, k.symbol):
                return k
        return None

    @property
    def legacy_kernel_names(self) -> list[str]:
        """V2 only: names of STT_AMDGPU_HSA_KERNEL symbols (kernels kpatch does not read)."""
        symbols = self.symbols()
        names: list[str] = []
        for s in symbols:
            if s.type == STT_AMDGPU_HSA_KERNEL and s.shndx != SHN_UNDEF and s.name not in names:
                names.append(s.name)
        return names
