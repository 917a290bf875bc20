"""Bytes + target -> instructions.

The decoder finds each instruction's format from the top 9 bits of its
first dword (a 512-entry table), looks the opcode up in the target's tables,
works out the size (base + literal + SDWA/DPP dword + MIMG NSA dwords) and
renders the text once per distinct encoding: real code repeats encodings
heavily, so decoding is mostly a dictionary lookup.  An encoding LLVM would
reject decodes to an unknown 4-byte word (LLVM prints ``.long 0x...``); the
decoder never raises on bad bytes.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

from kpatch.isa import formats as F
from kpatch.isa.instruction import Decoded, Instruction
from kpatch.isa.tables import OpInfo, Tables, load
from kpatch.isa.text import PRINTERS, Ctx, print_dpp, print_sdwa

#: format by the top 9 bits of the first dword
TOP9: list[F.Format | None] = [None] * 512
for _t in range(512):
    _w = _t << 23
    TOP9[_t] = F.classify(_w)

_VOPE32 = ("VOP1", "VOP2", "VOPC")
_EXTRA_SRC = {F.SRC_SDWA: "sdwa", F.SRC_DPP16: "dpp16", F.SRC_DPP8: "dpp8", F.SRC_DPP8_FI: "dpp8"}
_FIELDS_OF = {name: {f.name: f for f in fmt.fields} for name, fmt in F.FORMATS.items()}
_EXTRACT = {name: fmt.extractor() for name, fmt in F.FORMATS.items()}
_EXTRACT_X = {name: F.make_extractor(fields) for name, fields in F.EXTRA_FORMATS.items()}


class _Plan:
    """Per-opcode precomputation: literal source fields, extras."""

    __slots__ = ("lit_fields", "mandatory_lit", "src0_is_src")

    def __init__(self, info: OpInfo):
        fields = _FIELDS_OF[info.fmt.name]
        self.lit_fields = tuple(fields[n] for n in info.literal_fields if n in fields)
        self.mandatory_lit = info.has_mandatory_literal
        # VOP1/VOP2/VOPC: does src0 take SDWA/DPP/literal markers at all?
        self.src0_is_src = "src0" in info.literal_fields


_PLANS: dict[int, _Plan] = {}


def _plan(info: OpInfo) -> _Plan:
    p = _PLANS.get(id(info))
    if p is None:
        p = _PLANS[id(info)] = _Plan(info)
    return p


class DecodeCache:
    """Decoded encodings of one target, keyed by their bytes (bounded)."""

    def __init__(self, target: str, limit: int = 400_000):
        self.tables: Tables = load(target)
        self.target = target
        self.limit = limit
        self.map: dict[bytes, Decoded] = {}  # 12+ byte encodings
        self.c4: dict[int, Decoded] = {}  # 4-byte encodings by dword
        self.c8: dict[int, Decoded] = {}  # 8-byte encodings by w0 | w1 << 32
        self.unknown: dict[bytes, Decoded] = {}  # words LLVM rejects

    def get(self, raw: bytes) -> Decoded | None:
        n = len(raw)
        if n == 4:
            return self.c4.get(int.from_bytes(raw, "little"))
        if n == 8:
            return self.c8.get(int.from_bytes(raw, "little"))
        return self.map.get(raw)

    def put(self, raw: bytes, d: Decoded) -> None:
        n = len(raw)
        m = self.c4 if n == 4 else self.c8 if n == 8 else self.map
        if len(m) >= self.limit:
            m.clear()
        m[int.from_bytes(raw, "little") if n in (4, 8) else raw] = d


_CACHES: dict[str, DecodeCache] = {}


def cache_for(target: str) -> DecodeCache:
    c = _CACHES.get(target)
    if c is None:
        c = _CACHES[target] = DecodeCache(target)
    return c


def _measure(data: bytes, pos: int, end: int, tables: Tables):
    """(size, fmt, info, kind) of the instruction at ``pos``, or None if unknown.

    kind is None for the base form or "sdwa"/"dpp16"/"dpp8".
    """
    if pos + 4 > end:
        return None
    w0 = int.from_bytes(data[pos:pos + 4], "little")
    fmt = TOP9[w0 >> 23]
    if fmt is None:
        return None
    size = fmt.size
    if size == 8:
        if pos + 8 > end:
            return None
        w = w0 | (int.from_bytes(data[pos + 4:pos + 8], "little") << 32)
    else:
        w = w0
    op = fmt.opcode(w)
    if fmt is F.FLAT:
        op |= ((w >> 14) & 3) << 7
    info = tables.ops.get(fmt.name, {}).get(op)
    if info is None:
        return None
    kind = None
    plan = _plan(info)
    lit = plan.mandatory_lit
    if fmt.name in _VOPE32 and plan.src0_is_src:
        s0 = w0 & 0x1FF
        kind = _EXTRA_SRC.get(s0)
        if kind is not None:
            if getattr(info, kind) is None:
                return None
            size += 4
        elif s0 == 0xFF:
            lit = True
    else:
        for fld in plan.lit_fields:
            if (w >> fld.lo) & fld.mask == 0xFF:
                lit = True
                break
        if fmt is F.MIMG:
            size += 4 * ((w0 >> 1) & 3)
    if lit:
        size += 4
    if pos + size > end:
        return None
    return size, fmt, info, kind


def _render(raw: bytes, fmt: F.Format, info: OpInfo, kind: str | None, tables: Tables) -> Decoded | None:
    """Build the Decoded for a measured encoding (None: LLVM would reject it)."""
    w = int.from_bytes(raw[:fmt.size], "little")
    fields = _EXTRACT[fmt.name](w)
    form = info.form if kind is None else getattr(info, kind)
    for z, required in form.zero:
        if z in fields and fields[z] != required:
            return None
    x = None
    rest = raw[fmt.size:]
    if kind is not None:
        xw = int.from_bytes(rest[:4], "little")
        xname = "SDWA_VOPC" if (kind == "sdwa" and fmt.name == "VOPC") else {
            "sdwa": "SDWA", "dpp16": "DPP16", "dpp8": "DPP8"}[kind]
        x = _EXTRACT_X[xname](xw)
        rest = rest[4:]
    elif fmt is F.MIMG and fields["nsa"]:
        rest = rest[4 * fields["nsa"]:]
    literal = int.from_bytes(rest[:4], "little") if len(rest) >= 4 else None
    ctx = Ctx(fields, literal, x, tables, info)
    if kind == "sdwa":
        text = print_sdwa(ctx)
    elif kind == "dpp16":
        text = print_dpp(ctx, False)
    elif kind == "dpp8":
        text = print_dpp(ctx, True)
    else:
        text = PRINTERS[fmt.name](ctx)
    if text is None:
        return None
    return Decoded(raw, fmt, info, kind, fields, x, literal, text, tables.target)


def unknown(raw: bytes, target: str) -> Decoded:
    return Decoded(raw, None, None, None, {}, None, None, None, target)


def decode_at(data: bytes, pos: int, cache: DecodeCache, end: int | None = None) -> Decoded:
    """Decode the instruction at byte offset ``pos`` of ``data``."""
    if end is None:
        end = len(data)
    m = _measure(data, pos, end, cache.tables)
    if m is not None:
        size = m[0]
        raw = bytes(data[pos:pos + size])
        d = cache.get(raw)
        if d is not None:
            return d
        d = _render(raw, m[1], m[2], m[3], cache.tables)
        if d is not None:
            cache.put(raw, d)
            return d
    raw = bytes(data[pos:min(pos + 4, end)])
    d = cache.unknown.get(raw)
    if d is None:
        d = unknown(raw, cache.target)
        if len(cache.unknown) < cache.limit:
            cache.unknown[raw] = d
    return d


def _size_entry(w0: int, tables: Tables):
    """Size facts that depend on the first dword only:
    (size, w1 literal shifts) with size 0 for words that start no valid
    instruction; for VOP3/VOP3P a literal depends on dword-1 source fields,
    listed as shifts within dword 1."""
    fmt = TOP9[w0 >> 23]
    if fmt is None:
        return (0, ())
    size = fmt.size
    if size == 8 and fmt.name not in ("VOP3", "VOP3P"):
        # opcode lives in dword 0 for every 8-byte format except MTBUF (op3 bit)
        if fmt is F.MTBUF:
            return (-1, ())
    op = fmt.opcode(w0) if fmt is not F.MTBUF else None
    if fmt is F.FLAT:
        op |= ((w0 >> 14) & 3) << 7
    info = tables.ops.get(fmt.name, {}).get(op)
    if info is None:
        return (0, ())
    plan = _plan(info)
    lit = plan.mandatory_lit
    shifts = ()
    if fmt.name in _VOPE32 and plan.src0_is_src:
        s0 = w0 & 0x1FF
        kind = _EXTRA_SRC.get(s0)
        if kind is not None:
            if getattr(info, kind) is None:
                return (0, ())
            size += 4
        elif s0 == 0xFF:
            lit = True
    elif size == 4:
        for fld in plan.lit_fields:
            if (w0 >> fld.lo) & fld.mask == 0xFF:
                lit = True
                break
    else:
        shifts = tuple(fld.lo - 32 for fld in plan.lit_fields if fld.lo >= 32)
        if fmt is F.MIMG:
            size += 4 * ((w0 >> 1) & 3)
    if lit:
        size += 4
    return (size, shifts)


_SIZE_MEMO: dict[str, dict[int, tuple]] = {}


@contextmanager
def no_gc():
    """Pause the cyclic garbage collector: decoding allocates one small
    acyclic object per instruction, and collections triggered by them would
    repeatedly traverse the (large) decode caches for nothing."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def words_of(data: bytes) -> list[int]:
    """The little-endian dwords of ``data`` (trailing partial dword dropped)."""
    n = len(data) // 4
    return list(memoryview(data)[:n * 4].cast("I")) if n else []


def walk(data: bytes, start: int, end: int, cache: DecodeCache, base_address: int,
         out: list, skip_zeros: bool = False, words: list[int] | None = None) -> None:
    """Decode ``data[start:end]`` into ``out`` (the hot loop).

    The size of an instruction is memoised per first dword, the decoded
    instruction per distinct encoding (keyed by its dwords); anything unusual
    (unaligned position, truncated tail) goes through :func:`decode_at`.
    With ``skip_zeros`` runs of 8+ zero bytes are skipped like llvm-objdump.
    """
    memo = _SIZE_MEMO.setdefault(cache.target, {})
    c4, c8, cbig = cache.c4, cache.c8, cache.map
    tables = cache.tables
    n_all = len(data)
    if words is None:
        words = words_of(data)
    nwords = len(words)
    pos = start
    append = out.append
    while pos < end:
        if pos & 3 or pos + 4 > n_all:
            d = decode_at(data, pos, cache, n_all)
            append(Instruction(base_address + pos, d))
            pos += d.size
            continue
        i = pos >> 2
        w0 = words[i]
        if not w0 and skip_zeros:
            z = pos
            while z < end and data[z] == 0:
                z += 1
            z = (z - pos) & ~3 if z - pos >= 8 else 0
            if z:
                pos += z
                continue
        # fast path: a known 4- or 8-byte encoding (sizes depend only on the
        # dwords used as keys, so a hit is always the right instruction)
        d = c4.get(w0)
        if d is None and i + 1 < nwords:
            d = c8.get(w0 | (words[i + 1] << 32))
        if d is None:
            e = memo.get(w0)
            if e is None:
                e = memo[w0] = _size_entry(w0, tables)
            size = e[0]
            if size > 8 and pos + size <= n_all:
                d = cbig.get(data[pos:pos + size])
            elif size == 8 and e[1] and i + 1 < nwords:
                w1 = words[i + 1]
                for sh in e[1]:
                    if (w1 >> sh) & 0x1FF == 0xFF:
                        if pos + 12 <= n_all:
                            d = cbig.get(data[pos:pos + 12])
                        break
        if d is None:
            d = decode_at(data, pos, cache, n_all)
        append(Instruction(base_address + pos, d))
        pos += d.size


def iter_decode(data: bytes, target: str, base_address: int = 0) -> Iterator[Instruction]:
    """Decode ``data`` (code starting at ``base_address``) instruction by instruction."""
    yield from decode(data, target, base_address)


def decode(data: bytes, target: str, base_address: int = 0) -> list[Instruction]:
    """All instructions of ``data`` for ``target`` ('gfx1010' or 'gfx1030')."""
    data = bytes(data)
    out: list[Instruction] = []
    with no_gc():
        walk(data, 0, len(data), cache_for(target), base_address, out)
    return out


def decode_one(data: bytes, target: str, address: int = 0) -> Instruction:
    """The first instruction of ``data``."""
    cache = cache_for(target)
    return Instruction(address, decode_at(bytes(data), 0, cache))
