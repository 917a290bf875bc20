"""Bytes + target -> instructions.

Decoding a buffer takes three steps:

1. sizes: :class:`~kpatch.isa.sizes.Sizer` computes, with numpy, the size
   every dword position would have as an instruction start;
2. boundaries: a short loop follows the sizes from the start (skipping zero
   runs like llvm-objdump when asked) - the only per-instruction Python step;
3. identity: every instruction's encoding (its dwords) is looked up in a
   per-target cache of :class:`~kpatch.isa.instruction.Decoded`; real code
   repeats encodings heavily, so only the distinct new ones are decoded -
   format, opcode entry, form and validity (:mod:`kpatch.isa.validity`, or
   the printer for the rarer forms).  Fields and text are worked out lazily.

An encoding LLVM would reject decodes to an unknown 4-byte word (LLVM prints
``.long 0x...``) and decoding resumes after it; the decoder never raises on
bad bytes.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from itertools import compress
from operator import not_
from typing import Iterator

import numpy as np

from kpatch.isa import formats as F
from kpatch.isa.instruction import Decoded, Instruction
from kpatch.isa.sizes import OPCODE_KEY, TOP9, VOPE32, measure, op_facts, sizer_for, vop_kind
from kpatch.isa.tables import OpInfo, Tables, load
from kpatch.isa.text import render
from kpatch.isa.validity import checker

#: re-walks of one segment after finding rejected encodings before falling
#: back to the one-instruction-at-a-time walk (only hostile input gets there)
MAX_RESYNC = 16


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


_CACHES: dict[str, DecodeCache] = {}


def cache_for(target: str) -> DecodeCache:
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


def words_of(data: bytes) -> np.ndarray:
    """The little-endian dwords of ``data`` (trailing partial dword dropped)."""
    return np.frombuffer(data, "<u4", len(data) // 4)


class Buffer:
    """One code buffer prepared for decoding: its dwords and, per dword
    position, the size an instruction starting there would have."""

    def __init__(self, data: bytes, cache: DecodeCache):
        self.data = data
        self.cache = cache
        self.words = words_of(data)
        self.nwords = len(self.words)
        #: sizes in dwords, 0 where no instruction can start ...
        self.sz0 = sizer_for(cache.tables).sizes(self.words)
        #: ... and with those counted as 1-dword unknown words
        self.sz = np.maximum(self.sz0, 1)
        self.step = self.sz.tolist()
        self._jump = None

    def jumps(self) -> list[int]:
        """``step``, except -n where a run of n >= 2 zero dwords starts."""
        if self._jump is None:
            n = self.nwords
            idx = np.arange(n)
            nz = np.where(self.words != 0, idx, n)
            zrun = np.minimum.accumulate(nz[::-1])[::-1] - idx
            self._jump = np.where(zrun >= 2, -zrun, self.sz).tolist()
        return self._jump

    def reject(self, p: int) -> None:
        """Record that the word at dword ``p`` starts no instruction."""
        self.sz0[p] = 0
        self.sz[p] = self.step[p] = 1
        if self._jump is not None and self._jump[p] > 0:
            self._jump[p] = 1

    def starts(self, first: int, end: int, skip_zeros: bool) -> list[int]:
        """Dword positions of the instructions from ``first`` up to ``end``
        (the last may run past it); with ``skip_zeros`` runs of 8+ zero
        bytes are passed over like llvm-objdump does."""
        out = []
        append = out.append
        p = first
        if skip_zeros:
            jump = self.jumps()
            step = self.step
            while p < end:
                j = jump[p]
                if j > 0:
                    append(p)
                    p += j
                elif end - p >= 2:
                    p -= j
                else:  # a lone zero dword just before the end: an instruction
                    append(p)
                    p += step[p]
        else:
            step = self.step
            while p < end:
                append(p)
                p += step[p]
        return out

    def lookup(self, starts: list[int], s: np.ndarray | None = None
               ) -> tuple[list[Decoded], int | None]:
        """The Decoded of the instruction at each start, decoding new
        encodings, and the index of the first start whose encoding LLVM
        rejects although the sizes made it longer than a dword (or None).
        ``s`` may give ``starts`` as an array already."""
        cache = self.cache
        n = len(starts)
        if not n:
            return [], None
        if s is None:
            s = np.fromiter(starts, np.int64, n)
        ndw = self.sz0[s]
        w = self.words
        one = np.flatnonzero(ndw == 1)
        two = np.flatnonzero(ndw == 2)
        out = np.empty(n, object)
        bad = None
        s1 = s[one]
        s2 = s[two]
        groups = [(one, w[s1].tolist(), cache.c4)]
        if len(two):
            k2 = w[s2].astype(np.uint64) | (w[s2 + 1].astype(np.uint64) << np.uint64(32))
            groups.append((two, k2.tolist(), cache.c8))
        for idx, keys, tab in groups:
            ds = list(map(tab.get, keys))
            if not all(ds):  # (a Decoded is always true: this finds a missing one fastest)
                k = 1 if tab is cache.c4 else 2
                fresh = {}
                rejected = False
                for key in set(compress(keys, map(not_, ds))):
                    d = fresh[key] = identify_word(key, k, cache)
                    if d.size == 4 * k:
                        cache.store(tab, key, d)
                    else:  # a rejected 2-dword encoding: a 4-byte unknown word
                        rejected = True
                ds = list(map(fresh.get, keys, ds))
                if rejected:
                    for j, d in enumerate(ds):
                        if d.size != 4 * k:
                            i = int(idx[j])
                            if bad is None or i < bad:
                                bad = i
                            break
            out[idx] = np.fromiter(ds, object, len(ds))
        if len(one) + len(two) < n:
            data = self.data
            big = cache.big
            step = self.step
            for i in np.flatnonzero((ndw > 2) | (ndw == 0)).tolist():
                p = starts[i]
                if step[p] > 2:
                    d = big.get(data[4 * p:4 * (p + step[p])])
                    if d is None:
                        d = self._new(p)
                        if d.size != 4 * step[p] and (bad is None or i < bad):
                            bad = i
                else:  # no instruction starts here: an unknown word
                    d = self._new(p)
                out[i] = d
        return out.tolist(), bad

    def _new(self, p: int) -> Decoded:
        return decode_at(self.data, 4 * p, self.cache, len(self.data))

    def decode(self, first: int, end: int, skip_zeros: bool, base_address: int,
               out: list) -> None:
        """Append the instructions from dword ``first`` to byte ``end``."""
        end_dw = min(end, 4 * self.nwords) // 4
        p = first
        for _ in range(MAX_RESYNC):
            starts = self.starts(p, end_dw, skip_zeros)
            ds, bad = self.lookup(starts)
            if bad is None:
                _emit(out, base_address, starts, ds)
                p = max(p, end_dw)  # the walk reached the last whole dword
                break
            # a rejected encoding is a 4-byte unknown word: walk on after it
            q = starts[bad]
            self.reject(q)
            _emit(out, base_address, starts[:bad + 1], ds[:bad + 1])
            p = q + self.step[q]
        else:
            return self.decode_slow(4 * p, end, skip_zeros, base_address, out)
        if 4 * p < end:  # a tail shorter than a dword
            self.decode_slow(4 * p, end, skip_zeros, base_address, out)

    def decode_slow(self, pos: int, end: int, skip_zeros: bool, base_address: int,
                    out: list) -> None:
        """One instruction at a time from byte ``pos`` (any alignment)."""
        data = self.data
        n_all = len(data)
        while pos < end:
            if skip_zeros and not data[pos]:
                z = pos
                while z < end and data[z] == 0:
                    z += 1
                if z - pos >= 8:
                    pos += (z - pos) & ~3
                    continue
            d = decode_at(data, pos, self.cache, n_all)
            out.append(Instruction(base_address + pos, d))
            pos += d.size


def _emit(out: list, base_address: int, starts, ds: list[Decoded]) -> None:
    """Append Instructions at dword positions ``starts`` (list or array)."""
    if isinstance(starts, np.ndarray):
        addrs = (starts * 4 + base_address).tolist()
    else:
        addrs = [base_address + 4 * p for p in starts]
    out.extend(map(Instruction, addrs, ds))


def walk_segments(data: bytes, bounds: list[tuple[int, int]], cache: DecodeCache,
                  base_address: int, out: list, skip_zeros: bool = False) -> None:
    """Decode each ``data[start:end]`` of ``bounds`` (in order) into ``out``:
    all at once when every segment is dword-aligned and no encoding is
    rejected (the common case), else segment by segment."""
    addrs, ds = walk_columns(data, bounds, cache, base_address, skip_zeros)
    out.extend(map(Instruction, addrs.tolist() if isinstance(addrs, np.ndarray) else addrs, ds))


def walk_columns(data: bytes, bounds: list[tuple[int, int]], cache: DecodeCache,
                 base_address: int, skip_zeros: bool = False) -> tuple[np.ndarray | list[int], list[Decoded]]:
    """:func:`walk_segments` as two columns, no Python object per
    instruction: the addresses (an int64 array, or a list of ints when they
    do not fit one) and the :class:`Decoded` of each instruction (shared by
    every occurrence of an encoding)."""
    buf = Buffer(data, cache)
    if not len(data) & 3 and all(not (a & 3 or b & 3) for a, b in bounds):
        starts: list[int] = []
        for a, b in bounds:
            starts += buf.starts(a // 4, b // 4, skip_zeros)
        s = np.fromiter(starts, np.int64, len(starts))
        ds, bad = buf.lookup(starts, s)
        if bad is None:
            if 0 <= base_address and base_address + len(data) < 2**62:
                return s * 4 + base_address, ds
            return [base_address + 4 * p for p in starts], ds
    out: list[Instruction] = []
    for a, b in bounds:
        walk(data, a, b, cache, base_address, out, skip_zeros, buf)
    return [i.address for i in out], [i.d for i in out]


def walk(data: bytes, start: int, end: int, cache: DecodeCache, base_address: int,
         out: list, skip_zeros: bool = False, buf: Buffer | None = None) -> None:
    """Decode ``data[start:end]`` into ``out``; the instruction at ``start``
    may run past ``end``.  ``buf`` reuses a :class:`Buffer` of ``data``."""
    if buf is None:
        buf = Buffer(data, cache)
    if start & 3 or end & 3 and end != len(data):
        buf.decode_slow(start, end, skip_zeros, base_address, out)
    else:
        buf.decode(start // 4, end, skip_zeros, base_address, out)


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
