"""Decoding that remembers, while a code object is being worked on.

Patching one code object decodes the same functions more than once: the
analysis and the rewriter's scan of ``.text``.  :func:`decode_ranges`
decodes the functions of a section all in one go (the decoder's per-call
work, sizing every dword with numpy and looking the encodings up, is done
once rather than once per function); inside :func:`decode_memo` (a ``with``
block) it keeps every list it returns, keyed by (target, address, bytes),
and hands back the same list for the same key.  The lists returned must
not be changed by the caller.  It also keeps, for each list it decoded, the
decode's :class:`~kpatch.isa.bulk.Columns` (:func:`columns_of`: the
addresses, and per instruction the index of its encoding in a table of
:class:`~kpatch.isa.instruction.Decoded`, one per distinct encoding), so
that work per encoding (the analysis' facts) needs no work per instruction
to find which encoding each one is.

Code whose instruction starts are known beforehand (the rewriter knows
where every instruction of a patched object went) is decoded without
walking it: :func:`expect_starts` gives candidate start addresses, and a
range whose candidates tile it exactly as the decoder's walk would (checked
with numpy against the sizes of the encodings there) takes them as its
starts; any other range is walked as before.  A candidate may also name
the instruction of the code the memo last forgot (:func:`forget` keeps the
encoding of each of its instructions, by address) that was moved there
(the rewriter copies most instructions unchanged): that encoding is the
expected one, and the instruction is that encoding when the dwords there
are exactly its dwords, of the size the decoder measures there
(:func:`_expected_ids`, with numpy); only the others are looked up
(:meth:`~kpatch.isa.bulk.Buffer.lookup_ids`).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from itertools import chain
from typing import Iterator

import numpy as np

from kpatch.isa.bulk import decode as _decode
from kpatch.isa.bulk import Buffer, Columns, per_instruction
from kpatch.isa.columnlist import ColumnInstructions
from kpatch.isa.decoder import cache_for, no_gc

#: ``memo``: this thread's active memo (None outside :func:`decode_memo`),
#: and ``cols``: the columns of the lists it holds (:func:`columns_of`).
#: ``seeds``: the expected starts (:func:`expect_starts`), ``expect``:
#: their expected encodings (or None), and ``before``: the encodings of the
#: code last forgotten, by address (:func:`forget`).  Per thread, so that
#: two threads patching at once never share or clear each other's memo.
_LOCAL = threading.local()


@contextmanager
def decode_memo() -> Iterator[None]:
    """Remember decodes until the block ends (nested blocks share the outer memo)."""
    if getattr(_LOCAL, "memo", None) is not None:
        yield
        return
    _LOCAL.memo = {}
    _LOCAL.cols = {}
    _LOCAL.seeds = _LOCAL.expect = _LOCAL.before = None
    try:
        yield
    finally:
        _LOCAL.memo = _LOCAL.cols = _LOCAL.seeds = _LOCAL.expect = _LOCAL.before = None


def expect_starts(addresses: np.ndarray | None, was: np.ndarray | None = None) -> None:
    """Candidate instruction start addresses (any integer array; None: none)
    for the code the active :func:`decode_memo` decodes next, e.g. the
    rewriter's new address of every instruction of a patched object.  They
    are only candidates: :func:`decode_ranges` takes a range's candidates
    as its starts only when they are exactly the decoder's walk of it (see
    :func:`_seeded_starts`), so wrong or stale ones cost only the walk.

    ``was`` (aligned with ``addresses``; -1: none): the address, in the code
    the memo last forgot (:func:`forget`), of the instruction expected at
    each candidate (the rewriter's old address of an instruction it moved).
    Its encoding, as that code's decode found it, is the expected encoding
    there: taken only when the dwords there are exactly its own
    (:func:`_expected_ids`), so a wrong one costs only the lookup.  Outside
    a memo nothing is kept."""
    if getattr(_LOCAL, "memo", None) is None:
        return
    _LOCAL.expect = None
    before, _LOCAL.before = getattr(_LOCAL, "before", None), None  # (read once: it is as large as the code)
    if addresses is None:
        _LOCAL.seeds = None
        return
    # sorted (a stable sort: the rewriter's are a few sorted runs, which it
    # merges in linear time) and without repeats (the first of each kept)
    a = np.asarray(addresses, dtype=np.int64)
    order = np.argsort(a, kind="stable")
    a = a[order]
    first = None
    if len(a) > 1:
        first = np.concatenate(([True], a[1:] != a[:-1]))
        a = a[first]
    _LOCAL.seeds = a
    if was is not None and len(was) == len(order) and before is not None:
        w = np.asarray(was, dtype=np.int64)[order]
        _LOCAL.expect = _encodings_at(before, w if first is None else w[first])


def _encodings_by_address() -> tuple | None:
    """The encodings of the instructions the memo holds, by address: ``(lo,
    at, table, ndw, num)``: ``at[(address - lo) // 4]`` is the index in
    ``table`` of the encoding of the instruction at ``address`` (-1: none),
    ``ndw`` and ``num`` each entry's dword count when it is 1 or 2 (else 0)
    and those dwords as a number (:attr:`Columns.words`); from the columns
    of the lists decoded together with the first it holds (one table),
    None when there are none.  ``at`` is as long as the code (4 bytes a
    dword), a fraction of the decode it stands for, so that the decode can
    be dropped before the expected starts are worked out."""
    cols = getattr(_LOCAL, "cols", None)
    if not cols:
        return None
    parts = list(cols.values())
    table = parts[0][1].table
    parts = [c for _, c in parts if c.table is table and c.words is not None and isinstance(c.addrs, np.ndarray)]
    if not parts or len(parts[0].words[0]) != len(table):
        return None
    addrs = np.concatenate([c.addrs for c in parts])
    if not len(addrs):
        return None
    # every decode of one position of one code is the same: a repeated address is no conflict
    lo, hi = int(addrs.min()), int(addrs.max())
    at = np.full((hi - lo) // 4 + 2, -1, np.int32)  # (the last: for the addresses outside)
    at[(addrs - lo) >> 2] = np.concatenate([c.ids for c in parts])
    ndw, num = parts[0].words
    return lo, at, table, ndw, num


def _encodings_at(before: tuple, was: np.ndarray) -> tuple[np.ndarray, list, np.ndarray, np.ndarray]:
    """(per address of ``was`` the index of its instruction's encoding in
    the table of ``before`` (:func:`_encodings_by_address`), -1 for none;
    that table, its ``ndw`` and ``num``).  An address between instructions
    finds a wrong encoding: only a candidate, which the check refuses."""
    lo, at, table, ndw, num = before
    rel = (was - lo) >> 2
    rel[(rel < 0) | (rel >= len(at))] = len(at) - 1
    return at[rel], table, ndw, num


def forget() -> None:
    """Drop what the active memo holds (the block goes on remembering):
    code that will not be decoded again, e.g. the original once patching
    is done and the patched object is verified.  The encoding of each of
    its instructions is kept by address (:func:`_encodings_by_address`),
    for the next :func:`expect_starts` to name the instructions moved.
    The freed memory is given back to the system when the decode covered
    at least :data:`TRIM_FROM` bytes of code (:func:`return_freed_memory`)."""
    memo = getattr(_LOCAL, "memo", None)
    if memo is not None:
        _LOCAL.before = _encodings_by_address()
        code = sum(len(key[2]) for key in memo)
        memo.clear()
        _LOCAL.cols.clear()
        if code >= TRIM_FROM:
            return_freed_memory()


#: The bytes of code from which :func:`forget` gives the freed decode's memory
#: back to the system.  Below it the freed memory stays with the process,
#: which reuses it for the next decode (the patched object's, as large); a
#: trim walks the whole heap, ~3 ms with the decode caches of a long
#: ``apply --db``, for every object however small.  What it is for is a
#: Tensile object's decode (tens of MiB of code; its freed decode stayed
#: resident, about a third of a GiB, under the patched object's analysis).
TRIM_FROM = 1 << 20


_TRIM: list = []  # [glibc's malloc_trim, or None where there is none], once looked up


def return_freed_memory() -> None:
    """Give the free pages of the C heap back to the system (glibc's
    ``malloc_trim``; nothing elsewhere).  Freeing a whole object's decode
    does not shrink the heap: what was allocated after it (numpy arrays,
    lists) pins the top, so its pages stay resident -- about a third of a
    GiB on the largest Tensile object, under the patched object's analysis
    (apply's peak)."""
    if not _TRIM:
        try:  # (the C library is in the process's own namespace: no search, no ldconfig run)
            import ctypes
            _TRIM.append(getattr(ctypes.CDLL(None), "malloc_trim", None))
        except (OSError, ImportError):
            _TRIM.append(None)
    if _TRIM[0] is not None:
        _TRIM[0](0)


def decode_ranges(code: bytes, target: str, base_address: int, ranges: list[tuple[int, int]]) -> list[list]:
    """``[kpatch.isa.decode(code[a:b], target, base_address + a) for a, b
    in ranges]``, remembered inside :func:`decode_memo`, with the ranges not
    remembered yet decoded together."""
    keys = [(target, base_address + a, bytes(code[a:b])) for a, b in ranges]
    memo = getattr(_LOCAL, "memo", None)
    cols = None
    if memo is None:
        memo = {}
    else:
        cols = _LOCAL.cols
    out = [memo.get(key) for key in keys]
    todo = [j for j, got in enumerate(out) if got is None]
    if todo:
        together = _decode_together(bytes(code), target, base_address, [ranges[j] for j in todo],
                                    getattr(_LOCAL, "seeds", None), getattr(_LOCAL, "expect", None))
        for j, got in zip(todo, together):
            key = keys[j]
            if got is None:
                out[j] = memo[key] = _decode(key[2], target, key[1])
                continue
            insts, columns = got
            out[j] = memo[key] = insts
            if cols is not None:
                cols[id(insts)] = got
    return out


def columns_of(insts: list) -> Columns | None:
    """The :class:`~kpatch.isa.bulk.Columns` of a list :func:`decode_ranges`
    returned inside the active :func:`decode_memo` (``table[ids[k]]`` is the
    :class:`~kpatch.isa.instruction.Decoded` of ``insts[k]``; one table
    shared by the lists decoded together); None for a list it does not
    know (decoded outside the memo, or one by one after a rejected
    encoding)."""
    cols = getattr(_LOCAL, "cols", None)
    got = cols.get(id(insts)) if cols else None
    if got is None or got[0] is not insts:
        return None
    return got[1]


def _decode_together(code: bytes, target: str, base_address: int, ranges: list[tuple[int, int]],
                     seeds: np.ndarray | None = None, expect: tuple | None = None) -> list:
    """``(instructions, their Columns)`` of each range of ``code`` (the
    table of Decoded shared by all the ranges), or None for a range whose
    instructions could differ from decoding its bytes alone: one that is not
    whole dwords, or whose last instruction runs past its end (alone it
    would be cut short); every range is None if the walk meets an encoding
    LLVM rejects (the decoder then resynchronises, range by range).
    ``seeds``: candidate start addresses (sorted, see :func:`expect_starts`);
    a range they tile is not walked.  ``expect``: the seeds' expected
    encodings (:func:`_encodings_at`), taken where they are exactly the
    code's (:func:`_lookup_expected`)."""
    with no_gc():
        buf = Buffer(code, cache_for(target))
        whole = [not (a & 3 or b & 3) and b <= 4 * buf.nwords for a, b in ranges]
        src = None
        if seeds is not None and len(seeds):
            at, counts, src = _seeded_starts(buf, seeds, base_address, ranges, whole)
        else:
            starts = [buf.starts(a // 4, b // 4, False) if ok else [] for (a, b), ok in zip(ranges, whole)]
            counts = list(map(len, starts))
            at = np.fromiter(chain.from_iterable(starts), np.int64, sum(counts))
        words: list = []
        if expect is not None and src is not None and len(expect[0]) == len(seeds):
            ids, table, bad = _lookup_expected(buf, at, np.where(src >= 0, expect[0][src], -1), expect, words)
        else:
            ids, table, bad = buf.lookup_ids(at, words)
        if bad is not None:
            return [None] * len(ranges)
        if 0 <= base_address and base_address + len(code) < 2**62:
            address = at * 4 + base_address
        else:  # beyond int64 (a damaged header can put code anywhere)
            address = [base_address + 4 * p for p in at.tolist()]
        insts = ColumnInstructions(address, ids, table)  # (each Instruction made when read)
        out: list = []
        i = 0
        for (a, b), ok, n in zip(ranges, whole, counts):
            if not ok or (n and 4 * int(at[i + n - 1]) + table[ids[i + n - 1]].size > b):
                out.append(None)
            else:
                out.append((insts[i:i + n], Columns(address[i:i + n], ids[i:i + n], table, words[0])))
            i += n
        return out


def _expected_ids(buf: Buffer, at: np.ndarray, e: np.ndarray, ndw: np.ndarray, num: np.ndarray) -> np.ndarray:
    """Per dword position of ``at``: ``e``'s entry (an index into a table
    of encodings whose dword counts are ``ndw``, 1 or 2 when known, and
    dwords ``num``; -1: none) when the decoder would decode exactly that
    encoding there, else -1.  It would when the size it measures there
    (``Buffer.sz0``) is the entry's dword count and the dwords there are
    the entry's: the decode of a position is the encoding those dwords
    make (the cache's entry for them, :meth:`Buffer.lookup_ids`)."""
    if not len(at) or not len(ndw):
        return np.full(len(at), -1, np.int64)
    # per entry, with one more for e = -1 that nothing matches
    size = np.append(np.where(ndw > 0, ndw, -1).astype(np.int64), -1)  # (-1: dwords not known)
    lo = np.append((num & np.uint64(0xFFFFFFFF)).astype(np.uint32), np.uint32(0))
    w = buf.words
    se = size[e]
    ok = (buf.sz0[at] == se) & (w[at] == lo[e])
    two = np.flatnonzero(ok & (se == 2))  # (a size of 2 measured there: the next dword is in the buffer)
    ok[two] = w[at[two] + 1] == (num[e[two]] >> np.uint64(32)).astype(np.uint32)
    return np.where(ok, e, -1).astype(np.int64, copy=False)


def _lookup_expected(buf: Buffer, at: np.ndarray, e: np.ndarray, expect: tuple, words: list
                     ) -> tuple[np.ndarray, list, int | None]:
    """:meth:`Buffer.lookup_ids` of ``at`` (the same Decoded per
    instruction, one table entry per distinct encoding, ``words`` filled
    alike), taking the expected encodings ``e`` (indices into ``expect``'s
    table, -1: none) where :func:`_expected_ids` proves them and looking up
    only the others.  The table is ``expect``'s (entries no instruction
    here uses included, as in a table shared by ranges decoded together),
    then the encodings looked up that are not in it."""
    _, table, ndw, num = expect
    ids = _expected_ids(buf, at, e, ndw, num)
    miss = np.flatnonzero(ids < 0)
    more: list = []
    ids2, table2, bad = buf.lookup_ids(at[miss], more)
    if bad is not None:
        return ids2, table2, int(miss[bad])
    k2, n2 = more[0]
    to = np.full(len(table2), -1, np.int64)  # each looked-up encoding's index in ``table``, if there
    for k in (1, 2):
        mine, theirs = np.flatnonzero(ndw == k), np.flatnonzero(k2 == k)
        if mine.size and theirs.size:
            known = num[mine]
            if len(known) > 1 and not (known[1:] > known[:-1]).all():  # (a table lookup_ids made is sorted so)
                order = np.argsort(known)
                mine, known = mine[order], known[order]
            j = np.minimum(np.searchsorted(known, n2[theirs]), len(known) - 1)
            same = known[j] == n2[theirs]
            to[theirs[same]] = mine[j[same]]
    fresh = np.flatnonzero(to < 0)
    to[fresh] = len(table) + np.arange(len(fresh))
    ids[miss] = to[ids2]
    words.append((np.concatenate((ndw, k2[fresh])), np.concatenate((num, n2[fresh]))))
    return ids, table + per_instruction(fresh, table2), None


def _seeded_starts(buf: Buffer, seeds: np.ndarray, base_address: int, ranges: list[tuple[int, int]],
                   whole: list[bool]) -> tuple[np.ndarray, list[int], np.ndarray]:
    """The dword positions of the instructions of every range (concatenated)
    and their number per range, as :meth:`Buffer.starts` walks them (none
    for a range not ``whole``), taken from the candidates ``seeds`` where
    they tile the range and walked elsewhere; and per position the index
    in ``seeds`` of the candidate it was taken from (-1: walked).

    Candidates tile a range [a, b) when the first is a, each one plus the
    size of the encoding at it (``Buffer.sz``, the walk's step) is the next,
    and the last plus its size is b: the walk from a, which steps by those
    sizes and stops at b, then visits exactly them.  Checked for all ranges
    at once with numpy."""
    n = len(ranges)
    rs = np.array(ranges, dtype=np.int64).reshape(-1, 2)
    ok = np.array(whole, dtype=bool)
    lo_dw, hi_dw = rs[:, 0] // 4, rs[:, 1] // 4
    # the seeds as dword positions of this code (those outside it, or not on a dword, dropped)
    rel = seeds - base_address
    inside = np.flatnonzero((rel >= 0) & (rel < 4 * buf.nwords) & (rel & 3 == 0))
    rel = rel[inside] // 4
    lo = np.searchsorted(rel, lo_dw)
    hi = np.searchsorted(rel, hi_dw)
    cnt = np.where(ok, hi - lo, 0)
    total = int(cnt.sum())
    first = np.cumsum(cnt) - cnt  # each range's first index in flat
    pick = np.repeat(lo - first, cnt) + np.arange(total)
    flat = rel[pick]
    nxt = flat + buf.sz[flat]
    want = np.empty(total, np.int64)
    want[:-1] = flat[1:]
    has = cnt > 0
    want[(first + cnt - 1)[has]] = hi_dw[has]  # the last of a range ends at its end
    wrong = np.cumsum(np.concatenate(([0], nxt != want)))
    tiles = ok & (wrong[first + cnt] == wrong[first])
    head = np.full(n, -1, np.int64)  # each range's first candidate (-1: none)
    head[has] = flat[first[has]]
    tiles &= np.where(has, head == lo_dw, lo_dw == hi_dw)
    src = inside[pick]
    if tiles.all():
        return flat, cnt.tolist(), src
    parts = []
    srcs = []
    counts = []
    for k in range(n):
        if tiles[k]:
            parts.append(flat[first[k]:first[k] + cnt[k]])
            srcs.append(src[first[k]:first[k] + cnt[k]])
        else:
            parts.append(np.array(buf.starts(int(lo_dw[k]), int(hi_dw[k]), False) if whole[k] else [],
                                  dtype=np.int64))
            srcs.append(np.full(len(parts[-1]), -1, np.int64))
        counts.append(len(parts[-1]))
    if not parts:
        return np.zeros(0, np.int64), counts, np.zeros(0, np.int64)
    return np.concatenate(parts), counts, np.concatenate(srcs)
