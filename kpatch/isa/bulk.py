"""Bytes + target -> instructions: decoding whole buffers with numpy.

Decoding a buffer takes three steps:

1. sizes: :class:`Sizer` computes, with numpy, the size every dword
   position would have as an instruction start (the vectorised
   :func:`kpatch.isa.sizes.measure`);
2. boundaries: a short loop follows the sizes from the start (skipping zero
   runs like llvm-objdump when asked) - the only per-instruction Python step;
3. identity: every instruction's encoding (its dwords) is looked up in the
   per-target cache of :mod:`kpatch.isa.decoder`; real code repeats
   encodings heavily, so only the distinct new ones are decoded.

An encoding LLVM would reject decodes to an unknown 4-byte word (LLVM prints
``.long 0x...``) and decoding resumes after it; the decoder never raises on
bad bytes.
"""

from __future__ import annotations

from itertools import compress
from operator import attrgetter, not_
from typing import Iterator

import numpy as np

from kpatch.isa import formats as F
from kpatch.isa.decoder import DecodeCache, cache_for, decode_at, identify_word, no_gc, unknown
from kpatch.isa.instruction import Decoded, Instruction
from kpatch.isa.sizes import EXTRA_SRC, TOP9, VOPE32, measure, op_facts
from kpatch.isa.tables import OpInfo, Tables
from kpatch.isa.validity import checker

#: re-walks of one segment after finding rejected encodings before falling
#: back to the one-instruction-at-a-time walk (only hostile input gets there)
MAX_RESYNC = 16

#: rounds of :meth:`Buffer.starts_many` peeling off positions no walk
#: reaches before it gives up (a chain of that many instructions decoded
#: out of step with the real ones and never meeting them: built data)
MAX_PEEL = 256


class _FormatArrays:
    """Per-opcode facts of one format as numpy arrays indexed by opcode key."""

    def __init__(self, fmt: F.Format, ops: dict[int, OpInfo]):
        n = fmt.opcode_count << (2 if fmt is F.FLAT else 0)
        self.fmt = fmt
        self.ok = np.zeros(n, bool)
        self.mand = np.zeros(n, bool)
        self.src0 = np.zeros(n, bool)
        self.kinds = np.zeros(n, np.uint8)
        lit_at: dict[F.Field, np.ndarray] = {}
        self.vope32 = fmt.name in VOPE32
        for op, info in ops.items():
            facts = op_facts(info)
            self.ok[op] = True
            self.mand[op] = facts.mandatory_lit
            self.src0[op] = facts.src0_is_src
            self.kinds[op] = facts.kinds
            for fld in (facts.lit_other if self.vope32 and facts.src0_is_src else facts.lit_fields):
                lit_at.setdefault(fld, np.zeros(n, bool))[op] = True
        self.lit_at = sorted(lit_at.items(), key=lambda kv: kv[0].lo)

    def opcodes(self, w: np.ndarray) -> np.ndarray:
        op = np.zeros(len(w), np.int64)
        shift = 0
        for lo, width in self.fmt.opcode_bits:
            op |= ((w >> np.uint64(lo)) & np.uint64((1 << width) - 1)).astype(np.int64) << shift
            shift += width
        if self.fmt is F.FLAT:
            op |= ((w >> np.uint64(14)) & np.uint64(3)).astype(np.int64) << 7
        return op

    def sizes(self, w: np.ndarray) -> np.ndarray:
        """Sizes in dwords (0: no opcode / not a valid form) of encodings ``w``
        (uint64: first dword | second dword << 32)."""
        op = self.opcodes(w)
        ok = self.ok[op]
        size = np.full(len(w), self.fmt.size // 4, np.int64)
        lit = self.mand[op]
        w0 = w & np.uint64(0xFFFFFFFF)
        if self.vope32:
            src0 = self.src0[op]
            s0 = (w0 & np.uint64(0x1FF)).astype(np.int64)
            kbit = np.zeros(len(w), np.uint8)
            kbit[s0 == F.SRC_SDWA] = 1
            kbit[s0 == F.SRC_DPP16] = 2
            kbit[(s0 == F.SRC_DPP8) | (s0 == F.SRC_DPP8_FI)] = 4
            avail = (self.kinds[op] & kbit) != 0
            x0 = ((w >> np.uint64(32)) & np.uint64(0xFF)) == 0
            has_x = (kbit != 0) & (src0 | (avail & x0))  # see vop_kind
            ok &= ~has_x | avail
            size += has_x
            lit |= src0 & (s0 == F.SRC_LITERAL)
            for fld, arr in self.lit_at:  # other literal fields, without an extra dword
                lit |= arr[op] & ~has_x & (
                    ((w >> np.uint64(fld.lo)) & np.uint64(fld.mask)) == F.SRC_LITERAL)
        else:
            for fld, arr in self.lit_at:
                lit |= arr[op] & (((w >> np.uint64(fld.lo)) & np.uint64(fld.mask)) == F.SRC_LITERAL)
            if self.fmt is F.MIMG:
                size += ((w0 >> np.uint64(1)) & np.uint64(3)).astype(np.int64)
        size += lit
        size[~ok] = 0
        return size


class Sizer:
    """Vectorised :func:`measure` over every dword position of a buffer."""

    def __init__(self, tables: Tables):
        self.tables = tables
        fmt_id = np.full(512, -1, np.int8)
        self.formats: list[_FormatArrays] = []
        for fmt in F.FORMAT_ORDER:
            ops = tables.ops.get(fmt.name)
            if not ops:
                continue
            k = len(self.formats)
            self.formats.append(_FormatArrays(fmt, ops))
            for t in range(512):
                if TOP9[t] is fmt:
                    fmt_id[t] = k
        self.fmt_id = fmt_id

    def sizes(self, words: np.ndarray) -> np.ndarray:
        """For each dword position i: the size in dwords of the instruction
        that would start there (0: unknown word, or it runs past the end)."""
        n = len(words)
        out = np.zeros(n, np.int64)
        if not n:
            return out
        w = words.astype(np.uint64)
        w[:-1] |= w[1:] << np.uint64(32)
        fid = self.fmt_id[(words >> 23).astype(np.int64)]
        order = np.argsort(fid, kind="stable")
        bounds = np.searchsorted(fid[order], np.arange(-1, len(self.formats) + 1))
        for k, fa in enumerate(self.formats):
            idx = order[bounds[k + 1]:bounds[k + 2]]
            if len(idx):
                out[idx] = fa.sizes(w[idx])
        out[np.arange(n) + out > n] = 0
        # the last word has no next one (the arrays above assumed zeros)
        m = measure(words[-1:].tobytes(), 0, 4, self.tables)
        out[n - 1] = 0 if m is None else m[0] // 4
        return out


_SIZERS: dict[str, Sizer] = {}


def sizer_for(tables: Tables) -> Sizer:
    s = _SIZERS.get(tables.target)
    if s is None:
        s = _SIZERS[tables.target] = Sizer(tables)
    return s


def identify_words(keys: list[int], ndw: int, cache: DecodeCache) -> list[Decoded]:
    """:func:`kpatch.isa.decoder.identify_word` of each of ``keys`` (distinct
    encodings of ``ndw`` dwords as the sizes measured them, as ints: for
    more than 2 dwords the answer of :func:`kpatch.isa.decoder.decode_at`,
    tests/isa/test_validity.py), with the per-opcode work done once
    per opcode: the keys are grouped by format and opcode with numpy, and
    an opcode whose validity is a compiled check (:mod:`kpatch.isa.validity`)
    only runs that check per key."""
    n = len(keys)
    if n < 16:
        return [identify_word(w, ndw, cache) for w in keys]
    tables = cache.tables
    target = cache.target
    sizer = sizer_for(tables)
    a = np.fromiter(keys if ndw <= 2 else (w & 0xFFFFFFFFFFFFFFFF for w in keys), np.uint64, n)  # (format, opcode)
    fid = sizer.fmt_id[((a & np.uint64(0xFFFFFFFF)) >> np.uint64(23)).astype(np.int64)].astype(np.int64)
    opc = np.zeros(n, np.int64)
    for j, fa in enumerate(sizer.formats):
        sel = np.flatnonzero(fid == j)
        if len(sel):
            opc[sel] = fa.opcodes(a[sel])
    group = (fid << 32) | opc
    order = np.argsort(group, kind="stable")
    g = group[order]
    cuts = np.flatnonzero(g[1:] != g[:-1]) + 1
    out: list = [None] * n
    nbytes = 4 * ndw
    for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), n]):
        idx = order[lo:hi].tolist()
        j = int(fid[idx[0]])
        info = None
        if j >= 0:
            fa = sizer.formats[j]
            info = tables.ops[fa.fmt.name].get(int(opc[idx[0]]))
        if info is None:
            for i in idx:
                out[i] = unknown(keys[i].to_bytes(nbytes, "little")[:4], target)
            continue
        fmt = fa.fmt
        check = checker(info, None, tables)
        if check is None:  # only printing can tell
            for i in idx:
                out[i] = identify_word(keys[i], ndw, cache)
            continue
        facts = op_facts(info)
        marked = fa.vope32 and (facts.src0_is_src or facts.kinds)  # src0 may announce SDWA/DPP
        for i in idx:  # (bits past the base encoding are ignored by the check)
            w = keys[i]
            if marked and w & 0x1FF in EXTRA_SRC:
                out[i] = identify_word(w, ndw, cache)
                continue
            raw = w.to_bytes(nbytes, "little")
            out[i] = Decoded(raw, fmt, info, None, target) if check(w) else unknown(raw[:4], target)
    return out


_SIZE = attrgetter("size")


def distinct(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` of unsigned integer keys
    (uint32 or uint64), sorted by a radix sort on 16-bit digits (numpy's
    stable sort of 16-bit values is one): 2-3 times faster on 32-bit keys
    than np.unique's comparison sort."""
    n = len(keys)
    if n < 2:
        return keys.copy(), np.zeros(n, np.intp)
    order = np.argsort(keys.astype(np.uint16), kind="stable")
    for shift in range(16, 8 * keys.itemsize, 16):
        digit = (keys >> keys.dtype.type(shift)).astype(np.uint16)[order]
        order = order[np.argsort(digit, kind="stable")]
    ordered = keys[order]
    first = np.empty(n, bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    inverse = np.empty(n, np.intp)
    inverse[order] = np.cumsum(first) - 1
    return ordered[first], inverse


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
        self._step = None
        self._jarr = None
        self._jump = None

    @property
    def step(self) -> list[int]:
        """``sz`` as a list (the walks of :meth:`starts` read it)."""
        if self._step is None:
            self._step = self.sz.tolist()
        return self._step

    def jump_array(self) -> np.ndarray:
        """``sz``, except -n where a run of n >= 2 zero dwords starts."""
        if self._jarr is None:
            n = self.nwords
            idx = np.arange(n)
            nz = np.where(self.words != 0, idx, n)
            zrun = np.minimum.accumulate(nz[::-1])[::-1] - idx
            self._jarr = np.where(zrun >= 2, -zrun, self.sz)
        return self._jarr

    def jumps(self) -> list[int]:
        """:meth:`jump_array` as a list."""
        if self._jump is None:
            self._jump = self.jump_array().tolist()
        return self._jump

    def reject(self, p: int) -> None:
        """Record that the word at dword ``p`` starts no instruction."""
        self.sz0[p] = 0
        self.sz[p] = 1
        if self._step is not None:
            self._step[p] = 1
        if self._jarr is not None and self._jarr[p] > 0:
            self._jarr[p] = 1
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

    def starts_many(self, bounds: list[tuple[int, int]], skip_zeros: bool) -> np.ndarray | None:
        """:meth:`starts` of each ``(first, end)`` of ``bounds`` (dword
        positions, ascending and not overlapping), concatenated, as an int64
        array found with numpy, no Python step per instruction; None when
        the bounds are not so (the caller walks them one by one).

        How: every dword position ``p`` of a segment gets the position the
        walk goes to from it (``nxt``: past the instruction or the zero run
        there; the segment's end for one that leaves it) and whether the
        walk lists it.  The positions the walk visits are those reachable
        from the segments' first positions; every other one is peeled off,
        round by round, from those nothing leads to (a position whose every
        predecessor is peeled off goes next).  What remains is exactly the
        walk: ``nxt`` only goes forward, so a chain of positions not reached
        from a segment's start has a first element, peeled in the first
        round, and the next one in the next round, and so on.  Real code
        resynchronises within a few instructions; a chain of more than
        :data:`MAX_PEEL` rounds (only built data gets there) returns None."""
        if not bounds:
            return np.zeros(0, np.int64)
        fe = np.array(bounds, np.int64).reshape(-1, 2)
        firsts, ends = fe[:, 0], fe[:, 1]
        n = self.nwords
        if (firsts < 0).any() or (ends > n).any() or (ends <= firsts).any() or (firsts[1:] < ends[:-1]).any():
            return None
        pos = np.arange(n, dtype=np.int64)
        if firsts[0] == 0 and ends[-1] == n and (firsts[1:] == ends[:-1]).all():
            lim = np.repeat(ends, ends - firsts)  # the end of each position's segment
        else:
            mark = np.zeros(n, np.int64)
            mark[firsts] = np.arange(1, len(firsts) + 1)
            seg = np.maximum.accumulate(mark) - 1
            lim = np.where(seg >= 0, ends[seg], 0)  # (0: in no segment)
        inseg = pos < lim
        if skip_zeros:
            jump = self.jump_array().copy()
            listed = jump > 0
            last = ends - 1  # a zero run at the segment's last dword: an instruction
            listed[last] = True
            jump[last] = self.sz[last]
            nxt = pos + np.abs(jump)
        else:
            listed = None
            nxt = pos + self.sz
        nxt[(nxt >= lim) | ~inseg] = n  # n: the walk is over
        indeg = np.bincount(nxt[inseg], minlength=n + 1)
        indeg[firsts] += 1
        front = np.flatnonzero(inseg & (indeg[:n] == 0))
        alive = inseg
        for _ in range(MAX_PEEL):
            if not len(front):
                break
            alive[front] = False
            t = nxt[front]
            t = t[t < n]
            if len(t) > n >> 4:
                indeg -= np.bincount(t, minlength=n + 1)
                front = np.flatnonzero(alive & (indeg[:n] == 0))
            else:
                u, c = np.unique(t, return_counts=True)
                indeg[u] -= c
                front = u[indeg[u] == 0]
        else:
            if len(front):
                return None
        if listed is not None:
            alive &= listed
        return np.flatnonzero(alive)

    def lookup(self, starts: list[int], s: np.ndarray | None = None
               ) -> tuple[list[Decoded], int | None]:
        """The Decoded of the instruction at each start, decoding new
        encodings, and the index of the first start whose encoding LLVM
        rejects although the sizes made it longer than a dword (or None).
        ``s`` may give ``starts`` as an array already
        (:meth:`lookup_ids` with a list per instruction)."""
        if s is None:
            s = np.fromiter(starts, np.int64, len(starts))
        ids, table, bad = self.lookup_ids(s)
        return per_instruction(ids, table), bad

    def lookup_ids(self, s: np.ndarray, words: list | None = None
                   ) -> tuple[np.ndarray, list[Decoded], int | None]:
        """The encoding of the instruction at each dword position of ``s``
        (int64 array) as a column: ``ids``, per instruction the index in
        ``table`` of its :class:`Decoded`, one per distinct encoding (the
        encodings are made distinct with numpy, then looked up in the
        target's cache, new ones decoded and kept there); and the index
        of the first instruction whose encoding LLVM rejects although the
        sizes made it longer than a dword (or None: see :meth:`lookup`).
        ``words``, when given, receives ``(ndw, w)``: per entry of
        ``table`` its dword count when it is 1 or 2 (else 0) and those
        dwords (first | second << 32), the numbers it was looked up by."""
        n = len(s)
        ids = np.zeros(n, np.int64)
        table: list[Decoded] = []
        ndws: list = []
        ws: list = []
        if not n:
            if words is not None:
                words.append((np.zeros(0, np.uint8), np.zeros(0, np.uint64)))
            return ids, table, None
        cache = self.cache
        ndw = self.sz0[s]
        w = self.words
        bad = None
        one = np.flatnonzero(ndw == 1)
        two = np.flatnonzero(ndw == 2)
        groups = []
        if len(one):
            groups.append((one, w[s[one]], 1, cache.c4))
        if len(two):
            s2 = s[two]
            groups.append((two, w[s2].astype(np.uint64) | (w[s2 + 1].astype(np.uint64) << np.uint64(32)), 2,
                           cache.c8))
        for idx, keys, k, tab in groups:
            numbers, inverse = distinct(keys)
            uniq = numbers.tolist()
            ds = list(map(tab.get, uniq))
            if not all(ds):  # (a Decoded is always true: this finds a missing one fastest)
                new = list(compress(uniq, map(not_, ds)))
                fresh = identify_words(new, k, cache)
                got = dict(zip(new, fresh))
                rejected = sum(map(_SIZE, fresh)) != 4 * k * len(fresh)
                # (a rejected 2-dword encoding is a 4-byte unknown word, not kept)
                cache.store_many(tab, {key: d for key, d in got.items() if d.size == 4 * k} if rejected else got)
                ds = list(map(got.get, uniq, ds))
                if rejected:
                    no = np.array([d.size != 4 * k for d in ds])
                    first = int(idx[np.flatnonzero(no[inverse])[0]])
                    if bad is None or first < bad:
                        bad = first
            ids[idx] = inverse.reshape(-1) + len(table)
            table += ds
            if words is not None:
                counts = np.full(len(ds), k, np.uint8)
                if bad is not None:  # (a rejected encoding: a 4-byte unknown word, not these dwords)
                    counts[np.fromiter(map(_SIZE, ds), np.int64, len(ds)) != 4 * k] = 0
                ndws.append(counts)
                ws.append(numbers.astype(np.uint64, copy=False))
        if len(one) + len(two) < n:
            data = self.data
            big = cache.big
            at: dict = {}  # encoding (bytes; the Decoded of an unknown word) -> index in table
            new: dict[bytes, list[int]] = {}  # new encodings longer than 2 dwords -> where
            rest = np.flatnonzero((ndw > 2) | (ndw == 0))
            for i, p, size in zip(rest.tolist(), s[rest].tolist(), ndw[rest].tolist()):
                if size > 2:
                    raw = data[4 * p:4 * (p + size)]
                    j = at.get(raw)
                    if j is None:
                        d = big.get(raw)
                        if d is None:
                            new.setdefault(raw, []).append(i)
                            continue
                        j = at[raw] = len(table)
                        table.append(d)
                else:  # no instruction starts here: an unknown word
                    d = self._new(p)
                    j = at.get(d)
                    if j is None:
                        j = at[d] = len(table)
                        table.append(d)
                ids[i] = j
            by_size: dict[int, list[bytes]] = {}
            for raw in new:
                by_size.setdefault(len(raw) // 4, []).append(raw)
            for k, raws in by_size.items():
                for raw, d in zip(raws, identify_words([int.from_bytes(r, "little") for r in raws], k, cache)):
                    if d.size == len(raw):
                        cache.store(big, raw, d)
                    elif bad is None or new[raw][0] < bad:  # rejected: a 4-byte unknown word
                        bad = new[raw][0]
                    ids[new[raw]] = len(table)
                    table.append(d)
        if words is not None:
            rest = len(table) - sum(map(len, ndws))
            words.append((np.concatenate([*ndws, np.zeros(rest, np.uint8)]),
                          np.concatenate([*ws, np.zeros(rest, np.uint64)])))
        return ids, table, bad

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


class Columns:
    """Instructions as columns, no Python object per instruction:
    ``addrs`` (an int64 array, or a list of ints when they do not fit one),
    ``ids`` (an int64 array: the index of each instruction's encoding in
    ``table``) and ``table`` (the :class:`Decoded` of each distinct
    encoding, shared by all its occurrences); ``words``, when known, the
    numbers of the table's encodings (:meth:`Buffer.lookup_ids`)."""

    __slots__ = ("addrs", "ids", "table", "words")

    def __init__(self, addrs, ids: np.ndarray, table: list[Decoded], words: tuple | None = None):
        self.addrs, self.ids, self.table, self.words = addrs, ids, table, words

    @classmethod
    def of(cls, addrs, ds: list[Decoded]) -> "Columns":
        """The columns of instructions given as addresses and Decoded."""
        index: dict[Decoded, int] = {}
        ids = np.fromiter((index.setdefault(d, len(index)) for d in ds), np.int64, len(ds))
        return cls(addrs, ids, list(index))

    def __len__(self) -> int:
        return len(self.ids)

    def ds(self) -> list[Decoded]:
        """The Decoded of each instruction."""
        return per_instruction(self.ids, self.table)

    def per_instruction(self, values: list) -> list:
        """``values`` (one per entry of ``table``) spread over the instructions."""
        return per_instruction(self.ids, values)

    def address_list(self) -> list[int]:
        return self.addrs if isinstance(self.addrs, list) else self.addrs.tolist()


def per_instruction(ids: np.ndarray, table: list) -> list:
    """``[table[i] for i in ids]``, made by numpy."""
    arr = np.empty(len(table), object)
    arr[:] = table
    return arr[ids].tolist()


def walk_segments(data: bytes, bounds: list[tuple[int, int]], cache: DecodeCache,
                  base_address: int, out: list, skip_zeros: bool = False) -> None:
    """Decode each ``data[start:end]`` of ``bounds`` (in order) into ``out``:
    all at once when every segment is dword-aligned and no encoding is
    rejected (the common case), else segment by segment."""
    addrs, ds = walk_columns(data, bounds, cache, base_address, skip_zeros)
    out.extend(map(Instruction, addrs.tolist() if isinstance(addrs, np.ndarray) else addrs, ds))


def walk_columns(data: bytes, bounds: list[tuple[int, int]], cache: DecodeCache,
                 base_address: int, skip_zeros: bool = False) -> tuple[np.ndarray | list[int], list[Decoded]]:
    """:func:`walk_segments` as two columns: the addresses (an int64 array,
    or a list of ints when they do not fit one) and the :class:`Decoded` of
    each instruction (shared by every occurrence of an encoding)."""
    cols = walk_ids(data, bounds, cache, base_address, skip_zeros)
    return cols.addrs, cols.ds()


def walk_ids(data: bytes, bounds: list[tuple[int, int]], cache: DecodeCache,
             base_address: int, skip_zeros: bool = False) -> Columns:
    """:func:`walk_segments` as :class:`Columns`: when every segment is
    dword-aligned (the common case) the boundaries of all segments are
    found at once (:meth:`Buffer.starts_many`) and each distinct encoding
    is looked up once (:meth:`Buffer.lookup_ids`); if an encoding is
    rejected, segment by segment."""
    buf = Buffer(data, cache)
    if not len(data) & 3 and all(not (a & 3 or b & 3) for a, b in bounds):
        dw = [(a // 4, b // 4) for a, b in bounds]
        s = buf.starts_many(dw, skip_zeros)
        if s is None:
            starts: list[int] = []
            for a, b in dw:
                starts += buf.starts(a, b, skip_zeros)
            s = np.fromiter(starts, np.int64, len(starts))
        ids, table, bad = buf.lookup_ids(s)
        if bad is None:
            if 0 <= base_address and base_address + len(data) < 2**62:
                return Columns(s * 4 + base_address, ids, table)
            return Columns([base_address + 4 * p for p in s.tolist()], ids, table)
    out: list[Instruction] = []
    for a, b in bounds:
        walk(data, a, b, cache, base_address, out, skip_zeros, buf)
    return Columns.of([i.address for i in out], [i.d for i in out])


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
