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


class _Plan:
    """Per-opcode precomputation: literal source fields, extras."""

    __slots__ = ("lit_fields", "mandatory_lit")

    def __init__(self, info: OpInfo):
        fields = _FIELDS_OF[info.fmt.name]
        self.lit_fields = tuple(fields[n] for n in info.literal_fields if n in fields)
        self.mandatory_lit = info.has_mandatory_literal


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
        self.map: dict[bytes, Decoded] = {}

    def get(self, raw: bytes) -> Decoded | None:
        return self.map.get(raw)

    def put(self, raw: bytes, d: Decoded) -> None:
        if len(self.map) >= self.limit:
            self.map.clear()
        self.map[raw] = d


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
    if fmt.name in _VOPE32:
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
    fields = {f.name: (w >> f.lo) & f.mask for f in fmt.fields}
    form = info.form if kind is None else getattr(info, kind)
    for z, required in form.zero:
        if z in fields and fields[z] != required:
            return None
    x = None
    rest = raw[fmt.size:]
    if kind is not None:
        xw = int.from_bytes(rest[:4], "little")
        xf = F.SDWA_VOPC if (kind == "sdwa" and fmt.name == "VOPC") else F.EXTRA_FORMATS[
            {"sdwa": "SDWA", "dpp16": "DPP16", "dpp8": "DPP8"}[kind]]
        x = {f.name: (xw >> f.lo) & f.mask for f in xf}
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
    d = cache.get(raw)
    if d is None or not d.is_unknown:
        d = unknown(raw, cache.target)
        if len(raw) == 4 and cache.get(raw) is None:
            cache.put(raw, d)
    return d


def iter_decode(data: bytes, target: str, base_address: int = 0) -> Iterator[Instruction]:
    """Decode ``data`` (code starting at ``base_address``) instruction by instruction."""
    cache = cache_for(target)
    pos = 0
    end = len(data)
    mv = memoryview(data) if not isinstance(data, bytes) else data
    while pos < end:
        d = decode_at(mv, pos, cache, end)
        yield Instruction(base_address + pos, d)
        pos += d.size


def decode(data: bytes, target: str, base_address: int = 0) -> list[Instruction]:
    """All instructions of ``data`` for ``target`` ('gfx1010' or 'gfx1030')."""
    return list(iter_decode(bytes(data), target, base_address))


def decode_one(data: bytes, target: str, address: int = 0) -> Instruction:
    """The first instruction of ``data``."""
    cache = cache_for(target)
    return Instruction(address, decode_at(bytes(data), 0, cache))
