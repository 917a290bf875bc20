"""What in ``.text`` has to follow when code moves.

:func:`scan_text` cuts ``.text`` into *units* (functions, from the STT_FUNC
symbols and kernel entry points) and the padding between them, decodes each
unit, and finds every PC-relative construct:

* SOPP branches and ``s_call_b64`` (target = address + 4 + 4 * simm16);
* ``s_getpc_b64 s[N:N+1]`` immediately followed by ``s_add_u32 sN, sN, lo``
  and ``s_addc_u32 sN+1, sN+1, hi`` (what LLVM emits for every reference to
  a symbol: target = address of the ``s_add_u32`` + the 64-bit constant);
* Tensile's long branch (rocBLAS' generated assembly): ``s_getpc_b64
  s[N:N+1]; s_add_i32 sT, LIT, C; s_add_u32 sN, sN, sT; s_addc_u32 sN+1,
  sN+1, 0`` (target = address of the ``s_add_i32`` + the 32-bit value
  LIT + C, zero-extended), accepted only when sT is dead after the sequence
  on every path (relocation changes the value it holds: :func:`_tmp_dead`);
* ``s_setpc_b64`` / ``s_swappc_b64``, whose register pair is followed back
  through the unit's control flow to such a pattern (a direct call or tail
  call), or is ``s[30:31]`` in a non-kernel function (a return: the AMDGPU
  calling convention keeps the return address written by ``s_swappc_b64``
  there).

Anything else becomes a :class:`RelocationProblem`: class ``A`` problems (an
``s_getpc_b64`` used otherwise, undecodable words, branches into the middle
of an instruction, code that falls off the end of its function) pin every
address of the object, so no code may move at all; class ``B`` problems (a
computed jump to an address loaded at run time) make the rewriter refuse the
kernels that reach them.

Call edges (direct calls, tail calls, branches into another unit, function
addresses taken by a getpc pattern) let the rewriter find which kernels
share which functions.
"""

from __future__ import annotations

import bisect
import heapq
import re
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter

import numpy as np

from kpatch.codeobject import CodeObject
from kpatch.errors import FormatError
from kpatch.isa.columnlist import decoded_of, join
from kpatch.isa.decodememo import columns_of, decode_ranges
from kpatch.analysis.facts import FACTS, KnownIds, dword_counts, encoding_ids, encoding_ids_of_columns
from kpatch.analysis.flow import (CALL, END, ENDS_BLOCK, ENDS_FUNCTION, FALLS_THROUGH, INDIRECT, JUMP, TRAP,
                                  UNMODELLED, UNMODELLED_MNEMONICS, kind)
from kpatch.isa.instruction import Instruction
from kpatch.isa.operands import inline_int

S_CODE_END = 0xBF9F0000
S_NOP_0 = 0xBF800000
PAD_WORDS = frozenset({S_CODE_END, S_NOP_0, 0})

#: PC-relative instructions kpatch does not relocate (nor follow: kpatch.analysis.flow).
UNSUPPORTED_PCREL = UNMODELLED_MNEMONICS
#: Mnemonics that read or write the program counter (inserted code may hold none).
PC_MNEMONICS = frozenset({"s_getpc_b64", "s_setpc_b64", "s_swappc_b64", "s_call_b64"}) | UNSUPPORTED_PCREL
#: SGPRs a callee may clobber (AMDGPU calling convention: s[4:31] are
#: caller-saved, s[0:3] hold the scratch descriptor; s30/s31 get the return
#: address).  Everything from s32 up is preserved across a call.
CALL_CLOBBERED_SGPRS = range(0, 32)
RETURN_ADDRESS = 30


def is_pc_relative(inst: Instruction) -> bool:
    """Does this instruction read or write the program counter?"""
    return inst.is_branch or inst.mnemonic in PC_MNEMONICS


@dataclass
class TextUnit:
    """One function (kernel or not) or run of symbol-less code in ``.text``."""

    name: str
    start: int
    end: int
    kind: str  # "kernel", "function" or "code"
    first: int = 0  # index of its first instruction in TextScan.insts
    count: int = 0  # number of instructions
    align: int = 4  # alignment its start keeps when code moves
    sized: bool = True  # its extent comes from a symbol size (else it was trimmed)

    @property
    def last(self) -> int:
        return self.first + self.count - 1


@dataclass
class Gap:
    """Bytes of ``.text`` between units (or before the first / after the last).

    ``rigid`` bytes (the ``s_code_end`` run LLVM leaves after a module's last
    function, or the whole region before the first unit) move unchanged; the
    rest is alignment fill that may shrink or grow.
    """

    start: int
    end: int
    data: bytes
    rigid: int  # length of the leading part that is kept as is

    @property
    def fill_word(self) -> bytes:
        """The word used to lengthen the fill."""
        if len(self.data) > self.rigid:
            return self.data[-4:]
        if self.rigid:
            return self.data[self.rigid - 4:self.rigid]
        return S_NOP_0.to_bytes(4, "little")


@dataclass
class GetPc:
    """``s_getpc_b64 s[N:N+1]; s_add_u32 sN, sN, lo; s_addc_u32 sN+1, sN+1, hi``
    (``tmp`` None), or Tensile's long branch ``s_getpc_b64 s[N:N+1]; s_add_i32
    sT, LIT, C; s_add_u32 sN, sN, sT; s_addc_u32 sN+1, sN+1, 0`` (``tmp`` = T)."""

    index: int  # instruction index of s_getpc_b64
    reg: int  # N
    target: int  # address the pair holds after the s_addc_u32
    hi_literal: bool  # the high half is a 32-bit literal (else an inline constant)
    tmp: int | None = None  # T of Tensile's form
    addend: int = 0  # C of Tensile's form (the literal is LIT = offset - C)

    @property
    def last(self) -> int:
        """Instruction index of the s_addc_u32 that completes the address."""
        return self.index + (3 if self.tmp is not None else 2)


@dataclass
class RelocationProblem:
    """Something the rewriter cannot relocate."""

    unit: str
    address: int
    cls: str  # "A": pins every address; "B": refuse the kernels that reach it
    kind: str  # a kpatch.rewrite.edits.REFUSAL_KINDS key
    reason: str
    ui: int = -1  # unit index


class AddressIndex:
    """Address -> index of the instruction that starts there, over a scan's
    instructions: the addresses as one sorted int64 column, looked up by
    bisection (a dict of boxed ints costs about 70 bytes per instruction,
    and a Tensile library has millions).  ``get`` / ``[]`` / ``in`` as a dict's."""

    __slots__ = ("addresses", "_lo", "_hi")

    def __init__(self, addresses: np.ndarray):
        self.addresses = addresses  # strictly increasing (see index_of)
        n = len(addresses)
        self._lo, self._hi = (int(addresses[0]), int(addresses[-1])) if n else (0, -1)

    def get(self, address: int, default=None):
        if not self._lo <= address <= self._hi:
            return default
        a = self.addresses
        i = int(a.searchsorted(address))
        return i if a[i] == address else default

    def __getitem__(self, address: int) -> int:
        i = self.get(address)
        if i is None:
            raise KeyError(address)
        return i

    def __contains__(self, address: int) -> bool:
        return self.get(address) is not None

    def __len__(self) -> int:
        return len(self.addresses)

    def indices(self, addresses: np.ndarray) -> np.ndarray:
        """The index of each of ``addresses`` (every one must start an instruction: KeyError otherwise)."""
        a = self.addresses
        i = a.searchsorted(addresses)
        if len(i) and (i.max() >= len(a) or np.any(a[i] != addresses)):
            raise KeyError("not an instruction address")
        return i


def index_of(insts: list[Instruction], addresses: np.ndarray | None = None) -> AddressIndex | dict[int, int]:
    """Address -> instruction index of ``insts``: an :class:`AddressIndex`
    when the addresses strictly increase and fit int64 (what one pass over
    ``.text`` gives), else a dict (the last instruction at an address wins).
    ``addresses``: those of ``insts`` as an int64 array, when known (the
    decode's column)."""
    at = addresses
    if at is None or len(at) != len(insts):
        try:
            at = np.fromiter(map(attrgetter("address"), insts), dtype=np.int64, count=len(insts))
        except OverflowError:  # (a damaged header can put code beyond int64)
            at = None
    if at is not None and (len(at) < 2 or bool(np.all(at[1:] > at[:-1]))):
        return AddressIndex(at)
    return dict(zip([ins.address for ins in insts], range(len(insts))))


@dataclass
class TextScan:
    """Units, gaps, instructions and PC-relative constructs of ``.text``."""

    section_index: int
    start: int
    end: int
    data: bytes
    target: str
    units: list[TextUnit]
    gaps: list[Gap]  # gaps[i] lies before units[i]; gaps[-1] after the last unit
    insts: list[Instruction]
    unit_of: list[int]  # instruction index -> unit index
    branches: dict[int, int] = field(default_factory=dict)  # instruction index -> target address
    getpcs: list[GetPc] = field(default_factory=list)
    getpc_at: dict[int, GetPc] = field(default_factory=dict)  # index of each of the 3 instructions
    edges: dict[int, set[int]] = field(default_factory=dict)  # unit -> units it reaches
    problems: list[RelocationProblem] = field(default_factory=list)
    #: address -> instruction index (:func:`index_of`; ``.addresses`` is the column of
    #: every instruction's address when it is an AddressIndex)
    index_at: AddressIndex | dict[int, int] = field(default_factory=dict)
    #: s_setpc_b64 index -> the indices of every instruction it may jump to (bounded
    #: jumps only; a return to a caller adds none)
    jumps: dict[int, frozenset[int]] = field(default_factory=dict)
    #: the encoding ids of the instructions, by address (None: not worked out
    #: with numpy), for the analysis of the same code (:func:`kpatch.analysis.facts.known_ids`)
    known: KnownIds | None = None
    _starts: list[int] = field(default_factory=list)

    def unit_at(self, address: int) -> int | None:
        """Index of the unit whose [start, end) holds ``address``."""
        i = bisect.bisect_right(self._starts, address) - 1
        if i >= 0 and address < self.units[i].end:
            return i
        return None

    def problems_of(self, cls: str) -> list[RelocationProblem]:
        return [p for p in self.problems if p.cls == cls]

    def eids(self) -> np.ndarray | None:
        """The encoding id of every instruction (:attr:`known`'s), when it
        holds exactly these instructions' (the same addresses column) of the
        current generation of :data:`~kpatch.analysis.facts.FACTS`; else None."""
        known = self.known
        if (known is None or known.target != self.target or len(known.eids) != len(self.insts)
                or known.generation != FACTS.generation
                or known.addresses is not getattr(self.index_at, "addresses", None)):
            return None
        return known.eids

    def reach(self, ui: int) -> set[int]:
        """Indices of the units unit ``ui`` can reach through :attr:`edges`
        (calls, tail calls, branches into other units, addresses taken), ``ui`` included."""
        seen, todo = {ui}, [ui]
        while todo:
            for v in self.edges.get(todo.pop(), ()):
                if v not in seen:
                    seen.add(v)
                    todo.append(v)
        return seen


#: a run of padding words (:data:`PAD_WORDS`), matched from wherever it starts
_PAD_RUN = re.compile(b"(?:" + b"|".join(re.escape(w.to_bytes(4, "little")) for w in sorted(PAD_WORDS)) + b")*")
#: a run of s_code_end words
_CODE_END_RUN = re.compile(b"(?:" + re.escape(S_CODE_END.to_bytes(4, "little")) + b")*")


def _first_code_word(data: bytes, a: int, b: int) -> int | None:
    """Index of the first dword of ``data[a:b]`` (a trailing partial dword
    dropped) that is not padding (:data:`PAD_WORDS`); None if all are."""
    e = _PAD_RUN.match(data, a, b).end()
    return (e - a) // 4 if e + 4 <= b else None


def _trim_padding(insts: list[Instruction]) -> int:
    """How many instructions to keep: up to the last instruction that may end a
    function (:data:`kpatch.analysis.flow.ENDS_FUNCTION`) followed only by padding."""
    n = len(insts)
    while n and int.from_bytes(insts[n - 1].raw[:4], "little") in PAD_WORDS and insts[n - 1].size == 4:
        n -= 1
    if n and kind(insts[n - 1]) in ENDS_FUNCTION:
        return n
    return len(insts)


def _alignment(address: int) -> int:
    a = 4
    while a < 256 and address % (a * 2) == 0:
        a *= 2
    return a


#: the first address scan_text refuses code at (instruction addresses are int64 columns)
ADDRESS_LIMIT = 2**63


def scan_text(co: CodeObject, target: str, keep_ids: bool = False) -> TextScan | None:
    """Units and PC-relative constructs of the object's ``.text`` (None if it
    has none); with ``keep_ids`` also the encoding ids of the instructions
    (:attr:`TextScan.known`, for the analysis of the same code: 16 bytes per
    instruction more, so only when asked)."""
    text = co.section(".text")
    if text is None or text.size == 0:
        return None
    data = co.text
    start, end = text.addr, text.addr + text.size
    if end >= ADDRESS_LIMIT:
        raise FormatError(f".text at {start:#x}..{end:#x} lies beyond address 2^63 (a damaged section header: "
                          f"no GPU maps code there, and kpatch indexes addresses as 64-bit signed numbers)")
    # the functions where CodeObject.function_extents bounds them (an unsized
    # one, up to the next function, is trimmed of its padding when decoded);
    # overlapping ones are merged into one unit, named after a kernel
    extents = sorted(co.function_extents(), key=lambda e: (e.start, e.kind != "kernel"))
    units: list[TextUnit] = []
    for e in extents:
        if units and e.start < units[-1].end:
            units[-1].end = max(units[-1].end, e.end)
            if e.kind == "kernel" and units[-1].kind != "kernel":
                units[-1].kind, units[-1].name = "kernel", e.name
            continue
        units.append(TextUnit(e.name, e.start, e.end, e.kind, align=_alignment(e.start), sized=e.sized))
    units = _add_anonymous_code(units, data, start, end)
    return _decode_units(co, text.index, start, end, data, target, units, keep_ids)


def _add_anonymous_code(units: list[TextUnit], data: bytes, start: int, end: int) -> list[TextUnit]:
    """Units for code that no symbol covers (any word but padding)."""
    out: list[TextUnit] = []
    pos = start
    for u in units + [None]:
        stop = u.start if u is not None else end
        if stop > pos:
            real = _first_code_word(data, pos - start, stop - start)
            if real is not None:
                a = pos + 4 * real
                out.append(TextUnit(f"<code@{a:#x}>", a, stop, "code", align=4, sized=False))
        if u is not None:
            out.append(u)
            pos = max(pos, u.end)
    return out


def _decode_units(co, text_index, start, end, data, target, units, keep_ids: bool = False) -> TextScan:
    pieces: list = []  # each unit's instructions (joined without making them: columnlist.join)
    count = 0
    unit_of: list[int] = []
    problems: list[RelocationProblem] = []
    bodies = decode_ranges(data, target, start, [(u.start - start, u.end - start) for u in units])
    whole: list[tuple[list, int]] = []  # (list decode_ranges gave, its first index) kept whole
    cols: list | None = []  # (instructions, ids, table, words) of each unit, if the decode kept them all
    addrs: list | None = []  # the addresses of each unit's instructions, if the decode kept them all
    for ui, (u, got) in enumerate(zip(units, bodies)):
        c = columns_of(got) if cols is not None else None
        if c is None:
            cols = None
        if not u.sized:
            keep = _trim_padding(got)
            if keep < len(got):
                got = got[:keep]
            u.end = got[-1].address + got[-1].size if got else u.start
        if cols is not None:
            cols.append((got, c.ids[:len(got)], c.table, c.words))
            if addrs is not None and isinstance(c.addrs, np.ndarray):
                addrs.append(c.addrs[:len(got)])
            else:
                addrs = None
        if got is bodies[ui]:
            whole.append((got, count))
        u.first, u.count = count, len(got)
        pieces.append(got)
        count += len(got)
        unit_of.extend([ui] * len(got))
    insts = join(pieces)
    gaps = []
    pos = start
    for u in units:
        gaps.append(_gap(data, start, pos, u.start, leading=(pos == start)))
        pos = u.end
    gaps.append(_gap(data, start, pos, end, leading=False, trailing=True))
    scan = TextScan(text_index, start, end, data, target, units, gaps, insts, unit_of,
                    problems=problems)
    scan._starts = [u.start for u in units]
    scan.index_at = index_of(insts, np.concatenate(addrs) if cols is not None and addrs else None)
    for ui in range(len(units)):
        scan.edges[ui] = set()
    control = _Control(scan, data, start, cols)
    if not keep_ids:
        scan.known = None
    elif scan.known is not None:
        scan.known.lists = {id(got): (got, first) for got, first in whole}
    _scan_units(scan, control)
    return scan


def _gap(data: bytes, base: int, a: int, b: int, *, leading: bool, trailing: bool = False) -> Gap:
    raw = data[a - base:b - base]
    if leading:
        return Gap(a, b, raw, len(raw))
    rigid = _CODE_END_RUN.match(raw).end()
    if trailing:  # nothing after it needs alignment: keep it all
        rigid = len(raw)
    return Gap(a, b, raw, rigid)


def _problem(scan: TextScan, ui: int, address: int, cls: str, kind: str, reason: str) -> None:
    scan.problems.append(RelocationProblem(scan.units[ui].name, address, cls, kind,
                                           f"cannot relocate: {reason}", ui))


def _inline_u32(code: int) -> int | None:
    """The 32-bit value of an inline integer constant scalar source (0..64,
    -1..-16); None for anything else (the float constants too)."""
    i = inline_int(code)
    return None if i is None else i & 0xFFFFFFFF


def _sources(ins: Instruction) -> tuple[int, int]:
    f = ins.fields
    return f["ssrc0"], f["ssrc1"]


def _tensile_pattern(insts: list[Instruction], g: int, last: int, n: int):
    """GetPc for Tensile's long branch at insts[g], or a reason."""
    gp = insts[g]
    if g + 3 > last:
        return f"s_getpc_b64 s[{n}:{n + 1}] at {gp.address:#x} is not followed by a whole long branch"
    imm, add, addc = insts[g + 1], insts[g + 2], insts[g + 3]
    t = imm.field("sdst")
    s0, s1 = _sources(imm)
    consts = [imm.literal if c == 255 else _inline_u32(c) for c in (s0, s1)]
    if t > 105 or t in (n, n + 1) or None in consts or (s0 == 255) == (s1 == 255):
        return (f"s_add_i32 at {imm.address:#x} after s_getpc_b64 does not add a 32-bit literal and an inline "
                f"constant into another SGPR")
    if add.mnemonic != "s_add_u32" or add.field("sdst") != n or set(_sources(add)) != {n, t}:
        return f"s_add_u32 at {add.address:#x} does not add s{t} to s{n}"
    if (addc.mnemonic != "s_addc_u32" or addc.field("sdst") != n + 1
            or sorted(_sources(addc)) != sorted((n + 1, 128))):
        return f"s_addc_u32 at {addc.address:#x} does not add 0 and the carry to s{n + 1}"
    addend = consts[1] if s0 == 255 else consts[0]
    offset = (consts[0] + consts[1]) & 0xFFFFFFFF  # s_add_u32 + carry: a zero-extended 32-bit offset
    return GetPc(g, n, imm.address + offset, False, tmp=t, addend=addend)


def _getpc_pattern(insts: list[Instruction], g: int, last: int):
    """A GetPc if insts[g] starts the getpc/add/addc pattern (or Tensile's
    long branch), else a reason."""
    gp = insts[g]
    n = gp.field("sdst")
    if n > 104 or n % 2:
        return f"s_getpc_b64 at {gp.address:#x} writes {gp.text().split(' ', 1)[-1]}, not an SGPR pair"
    if g + 1 <= last and insts[g + 1].mnemonic == "s_add_i32":
        return _tensile_pattern(insts, g, last, n)
    if g + 2 > last:
        return f"s_getpc_b64 at {gp.address:#x} is not followed by s_add_u32/s_addc_u32"
    add, addc = insts[g + 1], insts[g + 2]
    if add.mnemonic != "s_add_u32" or addc.mnemonic != "s_addc_u32":
        return (f"s_getpc_b64 s[{n}:{n + 1}] at {gp.address:#x} is followed by "
                f"{add.mnemonic}, not s_add_u32/s_addc_u32")
    fa, fc = add.fields, addc.fields
    if fa["sdst"] != n or fc["sdst"] != n + 1:
        return f"s_getpc_b64 s[{n}:{n + 1}] at {gp.address:#x}: the adds do not write its result"
    if {fa["ssrc0"], fa["ssrc1"]} != {n, 255} or add.literal is None:
        return f"s_add_u32 at {add.address:#x} does not add a 32-bit literal to s{n}"
    other = fc["ssrc1"] if fc["ssrc0"] == n + 1 else fc["ssrc0"] if fc["ssrc1"] == n + 1 else None
    if other is None:
        return f"s_addc_u32 at {addc.address:#x} does not add to s{n + 1}"
    if other == 255:
        hi, hi_literal = addc.literal, True
    else:
        hi, hi_literal = _inline_u32(other), False
    if hi is None:
        return f"s_addc_u32 at {addc.address:#x} adds a register, not a constant"
    delta = (hi << 32) | add.literal
    if delta & (1 << 63):
        delta -= 1 << 64
    return GetPc(g, n, add.address + delta, hi_literal)


_SCALAR_CONTROL = frozenset({"SOPP", "SOPK", "SOP1"})  # the formats PC-relative instructions use
#: every branch's mnemonic starts so (a cheap test before Instruction.is_branch)
_BRANCH_PREFIXES = ("s_branch", "s_cbranch_")

#: What :func:`_scan_unit` does with an instruction (its "scan role"): nothing,
#: or it is undecodable, a computed jump (s_setpc_b64 / s_swappc_b64), a
#: branch or direct call (target = address + 4 + 4 * simm16), s_getpc_b64, or
#: PC-relative and not relocated.
R_NONE, R_UNKNOWN, R_JUMP, R_BRANCH, R_GETPC, R_UNSUPPORTED = range(6)


def _scan_role(f) -> int:
    """The scan role of an encoding (from its facts' representative: the
    role depends on the format and opcode only)."""
    ins = f.inst
    d = ins.d
    if d.fmt is None:
        return R_UNKNOWN
    if d.fmt.name not in _SCALAR_CONTROL:
        return R_NONE
    m = ins.mnemonic
    if m in ("s_setpc_b64", "s_swappc_b64"):
        return R_JUMP
    if m == "s_call_b64" or m.startswith(_BRANCH_PREFIXES) and ins.is_branch:
        return R_BRANCH
    if m == "s_getpc_b64":
        return R_GETPC
    if m in UNSUPPORTED_PCREL:
        return R_UNSUPPORTED
    return R_NONE


def _simm16(f) -> int:  # (the CFG's column of the same name: kpatch.analysis.cfg)
    return f.simm16 or 0


class _Control:
    """The instructions of ``.text`` :func:`_scan_unit` looks at, found with
    the per-encoding columns of :mod:`kpatch.analysis.facts` (one hash
    lookup per instruction, numpy after that), as int64/int8 columns: ``at``
    (sorted instruction indices), their ``role``, and for branches the
    ``target`` address and the index of the instruction there (-1: none);
    ``eids`` (every instruction's encoding id) and ``ends`` (the end address
    of each unit's last instruction, at its index; -1 elsewhere)."""

    def __init__(self, scan: TextScan, data: bytes, start: int, cols: list | None = None):
        insts = scan.insts
        n = len(insts)
        addresses = scan.index_at.addresses if isinstance(scan.index_at, AddressIndex) else None
        ends = np.full(n, -1, dtype=np.int64)
        for u in scan.units:  # each unit's instructions run back to back
            if u.count:
                e = insts[u.last]
                ends[u.last] = e.address + e.size
        if cols is not None and addresses is not None and not start % 4:  # the decode's columns: no work per instruction
            eids = encoding_ids_of_columns(cols, scan.target)
            scan.known = KnownIds(scan.target, addresses, dword_counts(addresses, ends), eids)
        elif start % 4 or addresses is None:
            eids = encoding_ids(insts, scan.target)  # by their bytes
        else:
            eids = encoding_ids(insts, scan.target, addresses=addresses, code=data[:len(data) // 4 * 4],
                                base=start, ends=ends)
            scan.known = KnownIds(scan.target, addresses, dword_counts(addresses, ends), eids)
        roles = FACTS.column("scan-role", _scan_role, dtype=np.int8)[eids]
        at = np.flatnonzero(roles)
        self.at = at
        self.role = role = roles[at]
        br = np.flatnonzero(role == R_BRANCH)
        target = np.full(len(at), -1, dtype=np.int64)
        index = np.full(len(at), -1, dtype=np.int64)
        if br.size and addresses is not None:  # (scattered with numpy: no Python step per branch)
            k = at[br]
            simm = FACTS.column("simm16", _simm16)[eids[k]]
            t = addresses[k] + 4 + 4 * np.where(simm & 0x8000, simm - 0x10000, simm)
            j = np.minimum(np.searchsorted(addresses, t), n - 1)
            target[br] = t
            index[br] = np.where(addresses[j] == t, j, -1)
        else:
            for b in br.tolist():
                x = target[b] = insts[at[b]].branch_target
                index[b] = scan.index_at.get(x, -1)
        self.target, self.index = target, index
        self.eids, self.ends = eids, ends


def _scan_units(scan: TextScan, control: _Control) -> None:
    """Scan every unit (:func:`_scan_unit`).  The branches (all but a few of
    the PC-relative instructions) of the units whose code decodes whole and
    ends where they do are recorded at once, with numpy; so are the checks of
    every unit: :func:`_scan_unit` runs only for the units that have a
    problem or another PC-relative instruction (``special``)."""
    units = scan.units
    at, role, index = control.at, control.role, control.index
    firsts = np.fromiter((u.first for u in units), dtype=np.int64, count=len(units))
    counts = np.fromiter((u.count for u in units), dtype=np.int64, count=len(units))
    lasts = firsts + counts - 1
    lo = np.searchsorted(at, firsts, "left")
    hi = np.searchsorted(at, lasts, "right")
    special = np.flatnonzero((role != R_BRANCH) | (index < 0))  # positions in ``at``
    s_lo = np.searchsorted(special, lo, "left")
    s_hi = np.searchsorted(special, hi, "left")
    unknown = np.concatenate(([0], np.cumsum(role == R_UNKNOWN)))
    aligned = np.fromiter((not (u.start % 4 or u.end % 4) for u in units), dtype=bool, count=len(units))
    nonempty = counts > 0
    last = np.where(nonempty, lasts, 0)
    ends_at = np.fromiter((u.end for u in units), dtype=np.int64, count=len(units))
    # the unit's branches are recorded: _scan_unit gets past its checks of the code's bytes
    whole = aligned & nonempty & (unknown[hi] == unknown[lo]) & (control.ends[last] == ends_at)
    # ... and it finds nothing more: the last instruction may end a function, and no other PC-relative one
    flows = FACTS.column("flow")[control.eids[last]] if len(control.eids) else np.zeros(len(last), dtype=np.int64)
    quiet = aligned & (~nonempty | (whole & np.isin(flows, list(ENDS_FUNCTION)) & (s_hi == s_lo)))
    sel = np.flatnonzero((role == R_BRANCH) & (index >= 0))
    if sel.size:
        src = at[sel]
        su = np.searchsorted(firsts, src, "right") - 1  # the unit of each (its first <= i, the next's > i)
        keep = whole[su]
        sel, src, su = sel[keep], src[keep], su[keep]
        scan.branches.update(zip(src.tolist(), control.target[sel].tolist()))  # (in instruction order)
        tu = np.searchsorted(firsts, index[sel], "right") - 1
        cross = su != tu
        for a, b in set(zip(su[cross].tolist(), tu[cross].tolist())):
            scan.edges[a].add(b)
    at_l, role_l = at[special].tolist(), role[special].tolist()
    special_l = special.tolist()
    s_lo, s_hi = s_lo.tolist(), s_hi.tolist()
    answers: dict = {}  # (_PerEncoding: one decode, so the units share their encodings)
    for ui in np.flatnonzero(~quiet).tolist():
        u = units[ui]
        if u.start % 4 or u.end % 4:
            _problem(scan, ui, u.start, "A", "undecodable",
                     f"{u.name} spans {u.start:#x}..{u.end:#x}, not whole 4-byte words")
            continue
        a, b = s_lo[ui], s_hi[ui]
        _scan_unit(scan, ui, u, control, at_l[a:b], role_l[a:b], special_l[a:b], answers)


def _scan_unit(scan: TextScan, ui: int, u: TextUnit, control: _Control, at: list[int], role: list[int],
               pos: list[int], answers: dict) -> None:
    """The problems, getpc sequences, computed jumps and their edges of one
    unit: ``at`` / ``role`` / ``pos`` are the instruction indices, roles and
    positions in :class:`_Control` of its instructions other than the
    branches to an instruction (:func:`_scan_units` records those);
    ``answers``: :class:`_PerEncoding`'s, shared by the units of the scan."""
    insts = scan.insts
    first, last = u.first, u.last
    if u.count == 0:
        return
    if R_UNKNOWN in role:
        ins = insts[at[role.index(R_UNKNOWN)]]
        _problem(scan, ui, ins.address, "A", "undecodable",
                 f"word {ins.raw.hex()} at {ins.address:#x} in {u.name} does not decode for "
                 f"{scan.target}")
        return
    end = insts[last]
    if end.address + end.size != u.end:
        _problem(scan, ui, end.address, "A", "undecodable",
                 f"the last instruction of {u.name} runs past its end {u.end:#x}")
        return
    if kind(end) not in ENDS_FUNCTION:
        _problem(scan, ui, end.address, "A", "falls-through",
                 f"{u.name} does not end with s_endpgm/s_setpc_b64/s_branch "
                 f"({end.mnemonic} at {end.address:#x}): code falls through its end")
    jumps = []
    long_branches = []  # this unit's Tensile long branches (checked once the jumps are known)
    for i, r, p in zip(at, role, pos):
        if r == R_JUMP:
            jumps.append(i)
        elif r == R_BRANCH:  # (one to an instruction is recorded by _scan_units)
            ins = insts[i]
            _problem(scan, ui, ins.address, "A", "branch-target",
                     f"{ins.mnemonic} at {ins.address:#x} targets {int(control.target[p]):#x}, "
                     f"which is not an instruction")
        elif r == R_GETPC:
            ins = insts[i]
            got = _getpc_pattern(insts, i, last)
            if isinstance(got, str):
                _problem(scan, ui, ins.address, "A", "pc-relative", got)
                continue
            gp, t = got, got.target
            scan.getpcs.append(gp)
            if gp.tmp is not None:
                long_branches.append(gp)
            for k in range(i, gp.last + 1):
                scan.getpc_at[k] = gp
            if scan.start <= t < scan.end:
                j = scan.index_at.get(t)
                if j is None:
                    _problem(scan, ui, ins.address, "A", "branch-target",
                             f"s_getpc_b64 at {ins.address:#x} computes {t:#x} inside .text, "
                             f"which is not an instruction")
                else:
                    scan.edges[ui].add(scan.unit_of[j])
        elif r == R_UNSUPPORTED:
            ins = insts[i]
            _problem(scan, ui, ins.address, "A", "unsupported",
                     f"{ins.mnemonic} at {ins.address:#x} is PC-relative and kpatch does not relocate it")
    if jumps:
        _computed_jumps(scan, ui, u, jumps, answers)
    for gp in long_branches:
        why = _tmp_dead(scan, ui, gp, answers)
        if why:
            _problem(scan, ui, insts[gp.index].address, "A", "pc-relative", why)


# ---------------------------------------------------------------------------
# computed jumps: which addresses can a register pair hold?
#
# A forward may-analysis over the unit's control flow.  The state maps an SGPR
# (int key) to the set of (value, half) it may hold, and an even SGPR N (key
# ("p", N)) to the set of values the pair s[N:N+1] may hold when it was
# written whole (by a getpc sequence, s_call_b64 or s_mov_b64 of such a
# pair): only then do both halves come from the same value on every path.  A
# value is ("g", T) (an address built by a getpc sequence: relocation
# rewrites its constant for T), ("r", T) (a return address s_call_b64 wrote:
# the hardware writes pc+4 at run time, so it follows the code) or ("in", 0)
# (a function's incoming return address in s[30:31]).  Anything else is a
# tuple (why, instruction index): why the register may hold any number (what
# wrote it; :func:`_why` says it in words).  A key that is absent holds a
# value from outside the unit.  Only the registers a computed jump reads, and
# those copied into them, are tracked (``track``).

_OUTSIDE = ("outside", -1)
_UNREACHED = ("unreached", -1)


def _why(scan: TextScan, why: tuple) -> str:
    kind, i = why
    if kind == "outside":
        return "a value from outside the unit"
    if kind == "unreached":
        return "anything: the unit's entry does not reach it by any path kpatch follows"
    ins = scan.insts[i]
    if kind == "undecodable":
        return f"anything after the word at {ins.address:#x}, which does not decode"
    if kind == "halves":
        return "values from different paths in its two halves"
    if kind == "call":
        return f"what the call {ins.text()} at {ins.address:#x} leaves there"
    return f"the value {ins.text()} at {ins.address:#x} writes"


def _written_sgprs(ins: Instruction) -> list[int]:
    out = []
    for r in ins.writes:
        if r.file == "s":
            out.extend(range(r.index, r.index + r.count))
    return out


def _kill(state: dict, regs, why: str) -> None:
    """Registers ``regs`` may now hold any number (``why``); so may the pairs they are part of."""
    for r in regs:
        state[r] = why
        state[("p", r - r % 2)] = why


def _set_pair(state: dict, n: int, values: frozenset) -> None:
    state[n] = frozenset((v, "lo") for v in values)
    state[n + 1] = frozenset((v, "hi") for v in values)
    state[("p", n)] = values


def _transfer(scan: TextScan, i: int, state: dict, internal_call: bool, track: frozenset) -> dict:
    """State after instruction i (see above); ``internal_call``: an s_call_b64
    whose target is inside the unit (its callee's code is followed, not skipped)."""
    ins = scan.insts[i]
    m = ins.mnemonic
    gp = scan.getpc_at.get(i)
    if gp is not None and i == gp.last:
        if gp.reg not in track:
            return state
        state = dict(state)
        _set_pair(state, gp.reg, frozenset({("g", gp.target)}))
        return state
    if ins.is_unknown:
        return {k: ("undecodable", i) for k in set(state) | set(track)}
    written = [r for r in _written_sgprs(ins) if r in track]
    if m in ("s_swappc_b64", "s_call_b64"):
        if m == "s_call_b64" and internal_call:
            d = ins.field("sdst")
            if d not in track:
                return state
            new = dict(state)
            _set_pair(new, d, frozenset({("r", ins.address + ins.size)}))
            return new
        # a callee kpatch does not follow may change these
        written += [r for r in CALL_CLOBBERED_SGPRS if r in track]
        if not written:
            return state
        new = dict(state)
        _kill(new, written, ("call", i))
        return new
    if not written:
        return state
    new = dict(state)
    where = ("write", i)
    if m in ("s_mov_b64", "s_mov_b32") and ins.fields.get("ssrc0", 999) <= 105:
        n = ins.fields["ssrc0"]
        d = ins.fields["sdst"]
        width = 2 if m == "s_mov_b64" else 1
        copied = [state.get(n + k, _OUTSIDE) for k in range(width)]
        pair = state.get(("p", n), _OUTSIDE) if width == 2 and n % 2 == 0 else None
        _kill(new, written, where)
        for k in range(width):
            new[d + k] = copied[k]
        if isinstance(pair, frozenset) and d % 2 == 0:
            new[("p", d)] = pair
        return new
    _kill(new, written, where)
    return new


def _join(cur: dict, st: dict) -> dict:
    """What either state may hold."""
    if cur is st:
        return cur
    out = {}
    for k in cur.keys() | st.keys():
        a, b = cur.get(k, _OUTSIDE), st.get(k, _OUTSIDE)
        if a is b or isinstance(a, tuple):
            out[k] = a
        elif isinstance(b, tuple):
            out[k] = b
        else:
            out[k] = a | b
    return out


def _pair_values(state: dict, n: int):
    """The values s[n:n+1] may hold (a frozenset), or why it may hold any number (a tuple)."""
    p = state.get(("p", n), _OUTSIDE)
    if isinstance(p, frozenset):
        return p
    lo, hi = state.get(n, _OUTSIDE), state.get(n + 1, _OUTSIDE)
    if isinstance(lo, frozenset) and isinstance(hi, frozenset) and len(lo) == 1 and len(hi) == 1:
        (v, a), = lo
        (w, b), = hi
        if v == w and (a, b) == ("lo", "hi"):
            return frozenset({v})
    for x in (p, lo, hi):
        if isinstance(x, tuple) and x != _OUTSIDE:
            return x
    if isinstance(lo, frozenset) and isinstance(hi, frozenset):
        return ("halves", -1)
    return _OUTSIDE


def _computed_jumps(scan: TextScan, ui: int, u: TextUnit, jumps: list[int], answers: dict) -> None:
    """Bound each s_setpc_b64/s_swappc_b64 register pair (a forward may-analysis
    of the values register pairs hold, see above); an s_setpc_b64 goes on to
    every address its pair may hold (those inside the unit are followed)."""
    insts = scan.insts
    first, last = u.first, u.last
    index_at = scan.index_at

    def inside(addr: int) -> int | None:
        j = index_at.get(addr)
        return j if j is not None and first <= j <= last else None

    # blocks by the one rule (kpatch.analysis.flow): a block starts at the
    # entry, at every branch target, after every instruction whose kind ends a
    # block or that has a known edge (an s_call_b64 to a callee in the unit;
    # its return address, the one a pair can hold, is a jump target then), and
    # at every getpc target (where a jump through a pair can land)
    seg = insts[first:last + 1]
    per = _PerEncoding(seg, answers)
    kinds = per.column("kind", kind)
    internal: dict[int, int] = {}  # s_call_b64 index -> its target's index, inside the unit
    leaders = {first}
    for i in range(first, last + 1):
        k = kinds[i - first]
        t = scan.branches.get(i)
        if t is not None:
            j = inside(t)
            if j is not None:
                leaders.add(j)
                if k == CALL:
                    internal[i] = j
        if (k in ENDS_BLOCK or i in internal) and i < last:
            leaders.add(i + 1)
    for gp in scan.getpcs:
        j = inside(gp.target)
        if j is not None:
            leaders.add(j)
    order = sorted(leaders)
    block_end = {b: (order[k + 1] - 1 if k + 1 < len(order) else last) for k, b in enumerate(order)}
    succs: dict[int, list[int]] = {}
    for b in order:
        e = block_end[b]
        k = kinds[e - first]
        out = []
        if e in internal:
            out.append(internal[e])  # the callee; it comes back through its s_setpc_b64
        else:
            t = scan.branches.get(e)
            if t is not None and k != CALL:
                j = inside(t)
                if j is not None:
                    out.append(j)
            if k in FALLS_THROUGH and e < last:
                out.append(e + 1)
        succs[b] = out

    # the registers worth tracking: those the jumps read, and (transitively)
    # those s_mov copies into them
    track = set()
    for i in jumps:
        n = insts[i].field("ssrc0")
        track |= {n, n + 1}
    movs = per.having("copy", lambda ins: ins.mnemonic in ("s_mov_b64", "s_mov_b32")
                      and ins.fields.get("ssrc0", 999) <= 105)
    movs = [insts[first + k] for k in movs]
    while True:
        more = set()
        for ins in movs:
            d, n = ins.fields["sdst"], ins.fields["ssrc0"]
            width = 2 if ins.mnemonic == "s_mov_b64" else 1
            if any(d + k in track for k in range(width)):
                more |= {n + k for k in range(width)}
        if more <= track:
            break
        track |= more
    track |= {r + 1 for r in track if r % 2 == 0} | {r - 1 for r in track if r % 2}
    track = frozenset(track)

    # the instructions that can change the tracked state, per block
    getpc_last = {gp.last for gp in scan.getpcs}
    acts: dict[int, list[int]] = {b: [] for b in order}
    writes = per.column("sgprs written", _sgprs_written)
    acts_on = {w: w is None or not track.isdisjoint(w) for w in set(writes)}
    acting = set(compress(range(first, last + 1), map(acts_on.__getitem__, writes)))
    acting.update(i for i in getpc_last if first <= i <= last)
    for i in sorted(acting):
        acts[order[bisect.bisect_right(order, i) - 1]].append(i)
    jumping = [first + k for k in per.having("jumps", lambda ins: ins.mnemonic in ("s_setpc_b64", "s_swappc_b64"))]

    def run(b: int, st: dict) -> dict:
        for i in acts[b]:
            st = _transfer(scan, i, st, i in internal, track)
        return st

    def dynamic(b: int, st: dict) -> list[int]:
        """Where the s_setpc_b64 ending block b goes, inside the unit."""
        e = block_end[b]
        if insts[e].mnemonic != "s_setpc_b64":
            return []
        vals = _pair_values(st, insts[e].field("ssrc0"))
        if isinstance(vals, tuple):
            return []
        return [j for kind, t in vals if kind in ("g", "r") and (j := inside(t)) is not None]

    jumping_set = set(jumping)
    entry_state: dict[int, dict | None] = {b: None for b in order}  # None: not reached (yet)
    start: dict = {}
    if u.kind != "kernel":
        _set_pair(start, RETURN_ADDRESS, frozenset({("in", 0)}))
    entry_state[first] = start
    work = [first]  # a heap: blocks in address order, each once
    queued = {first}
    while work:
        b = heapq.heappop(work)
        queued.discard(b)
        st = run(b, entry_state[b])
        for s in succs[b] + dynamic(b, st):
            cur = entry_state[s]
            merged = st if cur is None else _join(cur, st)
            if cur is None or merged != cur:
                entry_state[s] = merged
                if s not in queued:
                    queued.add(s)
                    heapq.heappush(work, s)
    for b in order:
        st = entry_state[b]
        reached = st is not None
        if not reached:  # unreachable from the entry: unknown inputs
            st = {}
        acted = set(acts[b])
        e = block_end[b]
        for i in sorted({*acts[b], *jumping[bisect.bisect_left(jumping, b):bisect.bisect_right(jumping, e)]}):
            if i in jumping_set:
                _check_jump(scan, ui, u, i, st if reached else None)
            if i in acted:
                st = _transfer(scan, i, st, i in internal, track)


class _PerEncoding:
    """Answers to questions about instructions that depend on their encoding
    alone (their shared :class:`~kpatch.isa.instruction.Decoded`, compared by
    identity), worked out once per encoding and question: a Tensile library
    is hundreds of kernels of 100k+ instructions each, of a few thousand
    encodings, and :func:`_computed_jumps` asks four questions of each
    instruction.  ``answers`` (question -> encoding -> answer) is shared by
    the units of one scan (one decode: the same Decoded objects), so a
    question may only be about the encoding; :func:`_tmp_dead` also keeps
    there, under ``"ds"``, the encoding of every instruction of the scan."""

    def __init__(self, insts: list, answers: dict) -> None:
        self.insts = insts
        self.ds = decoded_of(insts)  # (read from the decode's columns: no instruction made)
        self.last = dict(zip(self.ds, range(len(self.ds))))  # encoding -> the last instruction that has it
        self.answers = answers

    def _table(self, question, f) -> dict:
        table = self.answers.setdefault(question, {})
        for d in [d for d in self.last if d not in table]:
            table[d] = f(self.insts[self.last[d]])
        return table

    def column(self, question, f) -> list:
        """``[f(ins) for ins in insts]``."""
        return list(map(self._table(question, f).__getitem__, self.ds))

    def having(self, question, f) -> list[int]:
        """The positions of the instructions for which ``f`` is true."""
        return list(compress(range(len(self.ds)), map(self._table(question, f).__getitem__, self.ds)))


def _step(ins) -> tuple[int, frozenset, frozenset]:
    """What :func:`_tmp_dead` asks of an instruction: its control-flow kind and
    the SGPRs it reads and writes (about its encoding alone)."""
    return (kind(ins), frozenset(r.index + k for r in ins.reads if r.file == "s" for k in range(r.count)),
            frozenset(r.index + k for r in ins.writes if r.file == "s" for k in range(r.count)))


def _sgprs_written(ins) -> frozenset | None:
    """The SGPRs ``ins`` writes; None for one that changes what a register pair
    may hold whatever it writes (an undecodable word, a call)."""
    if ins.is_unknown or ins.mnemonic in ("s_call_b64", "s_swappc_b64"):
        return None
    return frozenset(r.index + k for r in ins.writes if r.file == "s" for k in range(r.count))


def _check_jump(scan: TextScan, ui: int, u: TextUnit, i: int, state: dict | None) -> None:
    """Record where the s_setpc_b64/s_swappc_b64 at i goes (``state``: before it;
    None if the unit's entry does not reach it), or the problem."""
    ins = scan.insts[i]
    n = ins.field("ssrc0")
    vals = _UNREACHED if state is None else _pair_values(state, n)
    setpc = ins.mnemonic == "s_setpc_b64"
    returns = setpc and n == RETURN_ADDRESS and u.kind != "kernel"
    if isinstance(vals, frozenset) and (returns or ("in", 0) not in vals):
        targets = set()
        for kind, t in sorted(vals):
            if kind == "in":
                continue  # the caller's return address
            j = scan.index_at.get(t)
            if j is None:
                what = "a getpc sequence's target" if kind == "g" else "a return address"
                _problem(scan, ui, ins.address, "A", "branch-target",
                         f"{ins.mnemonic} at {ins.address:#x} jumps to {t:#x} ({what}), which is not "
                         f"an instruction")
                continue
            targets.add(j)
            scan.edges[ui].add(scan.unit_of[j])
        if setpc:
            scan.jumps[i] = frozenset(targets)
        return
    if returns:
        return  # a return: s[30:31] holds the address s_swappc_b64 wrote at run time
    what = "jumps" if setpc else "calls"
    why = _why(scan, vals) if isinstance(vals, tuple) else "the caller's return address, in another pair"
    _problem(scan, ui, ins.address, "B", "computed-jump",
             f"{ins.mnemonic} at {ins.address:#x} in {u.name} {what} to s[{n}:{n + 1}], an address "
             f"computed at run time that kpatch cannot bound (it may hold {why})")


# ---------------------------------------------------------------------------
# Tensile's long branch: is its temporary register dead after it?

#: Steps :func:`_tmp_dead` takes before giving up (then the pattern is refused).
TMP_WALK_LIMIT = 200_000


def _tmp_dead(scan: TextScan, ui: int, gp: GetPc, answers: dict) -> str:
    """'' when no path from the end of ``gp``'s sequence reads its temporary
    sT before writing all of it (relocation changes the value sT holds, so a
    later read would see another number); else why not.  Paths follow
    branches, the jumps whose targets are known and fall-through (as
    :mod:`kpatch.analysis.flow` says: ``s_trap`` falls through unless it ends
    the unit); ``s_endpgm`` ends a path; a call, a return, a jump to an
    unknown address, a PC change kpatch does not model or code outside the
    unit count as reads (anything may read sT there).  ``answers``: as
    :class:`_PerEncoding`'s (each encoding's kind and SGPRs, :func:`_step`)."""
    insts = scan.insts
    steps_of = answers.setdefault("step", {})
    ds = answers.get("ds")
    if ds is None:  # (every instruction's encoding, from the decode's columns: the walk makes no instruction)
        ds = answers["ds"] = decoded_of(insts)
    u = scan.units[ui]
    t = gp.tmp
    where = f"s_getpc_b64 at {insts[gp.index].address:#x}"
    seen: set[int] = set()
    work = [gp.last + 1]
    steps = 0
    while work:
        i = work.pop()
        while True:
            if i in seen:
                break
            if not u.first <= i <= u.last:
                return f"{where}: after its long branch, execution leaves {u.name} while s{t} may still be read"
            seen.add(i)
            steps += 1
            if steps > TMP_WALK_LIMIT:
                return f"{where}: cannot tell whether s{t} is read after its long branch (too many paths)"
            d = ds[i]
            step = steps_of.get(d)
            if step is None:
                step = steps_of[d] = _step(insts[i])
            k, reads, writes = step
            if t in reads:
                ins = insts[i]
                return (f"{where}: s{t}, which holds the long branch's offset, is read at {ins.address:#x} "
                        f"({ins.text()}) before it is written")
            if t in writes:
                break  # written whole (SGPR writes are whole registers): dead on this path
            if k == END or k == TRAP and i == u.last:
                break  # the wave ends
            if k == INDIRECT:
                js = scan.jumps.get(i)
                if js is None:
                    return f"{where}: s{t} may be read where s_setpc_b64 at {insts[i].address:#x} goes"
                if not js or any(not u.first <= j <= u.last for j in js):
                    return f"{where}: after its long branch, execution leaves {u.name} while s{t} may still be read"
                work.extend(js)
                break
            if k == CALL:
                return f"{where}: s{t} may be read by the function called at {insts[i].address:#x}"
            if k == UNMODELLED:
                return f"{where}: s{t} may be read where {insts[i].mnemonic} at {insts[i].address:#x} goes"
            target = scan.branches.get(i)
            if target is not None:
                work.append(scan.index_at[target])
                if k == JUMP:
                    break
            i += 1
    return ""
