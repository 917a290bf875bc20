"""Bytes + target -> one instruction, and the per-target cache of decoded encodings.

What one encoding is: its format, opcode entry, form and validity
(:mod:`kpatch.isa.validity`, or the printer for the rarer forms), looked up
in a per-target cache of :class:`~kpatch.isa.instruction.Decoded` keyed by
its dwords (:class:`DecodeCache`).  Fields and text are worked out lazily.
Whole buffers are decoded by :mod:`kpatch.isa.bulk` over this cache.

An encoding LLVM would reject decodes to an unknown 4-byte word (LLVM prints
``.long 0x...``) and decoding resumes after it; the decoder never raises on
bad bytes.  No numpy here: building and checking one instruction (the rule
loader does) starts fast.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager

from kpatch.isa import formats as F
from kpatch.isa.instruction import Decoded, Instruction
from kpatch.isa.sizes import OPCODE_KEY, TOP9, VOPE32, measure, op_facts, vop_kind
from kpatch.isa.tables import OpInfo, Tables, load
from kpatch.isa.text import render
from kpatch.isa.validity import checker

class DecodeCache:
    """Decoded encodings of one target, keyed by their dwords (bounded).

    ``c4`` maps a first dword to what a 1-dword instruction there is (valid
    or unknown), ``c8`` a 64-bit value to what a 2-dword instruction is (a
    4-byte unknown when LLVM rejects it), ``big`` the bytes of longer ones.
    """

    def __init__(self, target: str, limit: int = 400_000):
        self.tables: Tables = load(target)
        self.target = target
        self.limit = limit
        self.c4: dict[int, Decoded] = {}
        self.c8: dict[int, Decoded] = {}
        self.big: dict[bytes, Decoded] = {}

    def table(self, ndw: int) -> dict:
        return self.c4 if ndw <= 1 else self.c8 if ndw == 2 else self.big

    def store(self, m: dict, key, d: Decoded) -> None:
        if len(m) >= self.limit:
            m.clear()
        m[key] = d

    def store_many(self, m: dict, items: dict) -> None:
        """:meth:`store` of every item of ``items`` (the table emptied first
        when they would take it past the limit)."""
        if len(m) + len(items) > self.limit:
            m.clear()
        m.update(items)


_CACHES: dict[str, DecodeCache] = {}


def cache_for(target: str) -> DecodeCache:
    """The process-wide cache of decoded encodings of ``target``: every
    decode of the package goes through it.

    Threads: the ISA's caches (this one, the vectorised sizers of
    :mod:`kpatch.isa.bulk`, the operand texts of :mod:`kpatch.isa.text`,
    the tables) are shared by all threads and safe to use from several at
    once under the GIL: each entry is a pure function of its key, written
    whole by one dict assignment, and a lazily computed part of a
    :class:`Decoded` (fields, text, registers) is computed the same by any
    thread; a cache cleared at its size limit by one thread only makes
    another decode an encoding again.  What is per thread is the decode
    memo of a code object being worked on (:mod:`kpatch.isa.decodememo`)."""
    c = _CACHES.get(target)
    if c is None:
        c = _CACHES[target] = DecodeCache(target)
    return c


def identify(raw: bytes, fmt: F.Format, info: OpInfo, kind: str | None,
             tables: Tables) -> Decoded | None:
    """The Decoded of a measured encoding, or None if LLVM rejects it."""
    check = checker(info, kind, tables)
    if check is not None:
        if check(int.from_bytes(raw[:fmt.size], "little")):
            return Decoded(raw, fmt, info, kind, tables.target)
        return None
    return identify_by_printing(raw, fmt, info, kind, tables)


def identify_by_printing(raw: bytes, fmt: F.Format, info: OpInfo, kind: str | None,
                         tables: Tables) -> Decoded | None:
    """:func:`identify` deciding validity by rendering the text (the
    reference the compiled checkers of :mod:`kpatch.isa.validity` follow)."""
    w = int.from_bytes(raw[:fmt.size], "little")
    form = info.form if kind is None else getattr(info, kind)
    fields = _FIELDS[fmt.name]
    for name, required in form.zero:
        fld = fields.get(name)
        if fld is not None and (w >> fld.lo) & fld.mask != required:
            return None
    d = Decoded(raw, fmt, info, kind, tables.target)
    text = render(d)
    if text is None:
        return None
    d._text = text
    return d


def identify_word(w: int, ndw: int, cache: DecodeCache) -> Decoded:
    """What the 1- or 2-dword instruction ``w`` (dwords as one int) is, given
    that the sizes say it has ``ndw`` dwords: the lean path for new
    encodings of :meth:`Buffer.lookup` (same answers as :func:`decode_at`)."""
    tables = cache.tables
    fmt = TOP9[(w & 0xFFFFFFFF) >> 23]
    info = None
    if fmt is not None:
        name = fmt.name
        info = tables.ops.get(name, _NONE).get(OPCODE_KEY[name](w))
    raw = w.to_bytes(4 * ndw, "little")
    if info is None:
        return unknown(raw[:4], cache.target)
    kind = None
    if name in VOPE32:
        facts = op_facts(info)
        if facts.src0_is_src or facts.kinds:
            kind = vop_kind(facts, w & 0x1FF, (w >> 32) & 0xFF if ndw > 1 else 1) or None
    if kind is None:
        check = checker(info, None, tables)
        if check is not None:  # (bits past the base encoding are ignored)
            if check(w):
                return Decoded(raw, fmt, info, None, cache.target)
            return unknown(raw[:4], cache.target)
    d = identify_by_printing(raw, fmt, info, kind, tables)
    return d if d is not None else unknown(raw[:4], cache.target)


_NONE: dict = {}
_FIELDS = {name: {f.name: f for f in fmt.fields} for name, fmt in F.FORMATS.items()}


def unknown(raw: bytes, target: str) -> Decoded:
    return Decoded(raw, None, None, None, target)


def decode_at(data: bytes, pos: int, cache: DecodeCache, end: int | None = None) -> Decoded:
    """Decode the instruction at byte offset ``pos`` of ``data``."""
    if end is None:
        end = len(data)
    m = measure(data, pos, end, cache.tables)
    if m is not None:
        size = m[0]
        raw = bytes(data[pos:pos + size])
        tab = cache.table(size // 4)
        key = int.from_bytes(raw, "little") if size <= 8 else raw
        d = tab.get(key)
        if d is None:
            d = identify(raw, m[1], m[2], m[3], cache.tables)
            if d is None:
                d = unknown(raw[:4], cache.target)
                if size > 4:
                    # not cached under its measured size: a lookup by size
                    # must never take it for an instruction that long
                    return d
            cache.store(tab, key, d)
        return d
    raw = bytes(data[pos:min(pos + 4, end)])
    if len(raw) == 4:
        key = int.from_bytes(raw, "little")
        d = cache.c4.get(key)
        if d is None:
            d = unknown(raw, cache.target)
            cache.store(cache.c4, key, d)
        return d
    return unknown(raw, cache.target)


@contextmanager
def no_gc():
    """Pause the cyclic garbage collector: decoding (and the analysis and
    patching built on it) allocates many small acyclic objects, one per
    instruction at least, and collections triggered by them would repeatedly
    traverse the (large) decode caches for nothing.  The one such switch:
    :mod:`kpatch.analysis.engine` and the patcher use it too.

    (Freezing what a block built, ``gc.freeze()``, would keep later full
    collections off the caches, about 6% of the analysis' time, but it also
    freezes the garbage cycles alive at that moment -- a patched code object
    and its ELF reader form one -- which then stay allocated: ``apply --db``
    of the corpus in one process peaked at 1.1-1.7 GiB instead of 0.93.)"""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def decode_one(data: bytes, target: str, address: int = 0) -> Instruction:
    """The first instruction of ``data``."""
    cache = cache_for(target)
    return Instruction(address, decode_at(bytes(data), 0, cache))
