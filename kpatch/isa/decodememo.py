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
starts; any other range is walked as before.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from itertools import chain
from typing import Iterator

import numpy as np

from kpatch.isa.bulk import decode as _decode
from kpatch.isa.bulk import Buffer, Columns, per_instruction
from kpatch.isa.decoder import cache_for, no_gc
from kpatch.isa.instruction import Instruction

#: ``memo``: this thread's active memo (None outside :func:`decode_memo`),
#: and ``cols``: the columns of the lists it holds (:func:`columns_of`).
#: Per thread, so that two threads patching at once never share or clear
#: each other's memo.
_LOCAL = threading.local()


@contextmanager
def decode_memo() -> Iterator[None]:
    """Remember decodes until the block ends (nested blocks share the outer memo)."""
    if getattr(_LOCAL, "memo", None) is not None:
        yield
        return
    _LOCAL.memo = {}
    _LOCAL.cols = {}
    _LOCAL.seeds = None
    try:
        yield
    finally:
        _LOCAL.memo = _LOCAL.cols = _LOCAL.seeds = None


def expect_starts(addresses: np.ndarray | None) -> None:
    """Candidate instruction start addresses (any integer array; None: none)
    for the code the active :func:`decode_memo` decodes next, e.g. the
    rewriter's new address of every instruction of a patched object.  They
    are only candidates: :func:`decode_ranges` takes a range's candidates
    as its starts only when they are exactly the decoder's walk of it (see
    :func:`_seeded_starts`), so wrong or stale ones cost only the walk.
    Outside a memo nothing is kept."""
    if getattr(_LOCAL, "memo", None) is None:
        return
    if addresses is None:
        _LOCAL.seeds = None
        return
    # sorted (a stable sort: the rewriter's are a few sorted runs, which it
    # merges in linear time) and without repeats
    a = np.sort(np.asarray(addresses, dtype=np.int64), kind="stable")
    if len(a) > 1:
        a = a[np.concatenate(([True], a[1:] != a[:-1]))]
    _LOCAL.seeds = a


def forget() -> None:
    """Drop what the active memo holds (the block goes on remembering):
    code that will not be decoded again, e.g. the original once patching
    is done and the patched object is verified."""
    memo = getattr(_LOCAL, "memo", None)
    if memo is not None:
        memo.clear()
        _LOCAL.cols.clear()
        return_freed_memory()


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
                                    getattr(_LOCAL, "seeds", None))
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
                     seeds: np.ndarray | None = None) -> list:
    """``(instructions, their Columns)`` of each range of ``code`` (the
    table of Decoded shared by all the ranges), or None for a range whose
    instructions could differ from decoding its bytes alone: one that is not
    whole dwords, or whose last instruction runs past its end (alone it
    would be cut short); every range is None if the walk meets an encoding
    LLVM rejects (the decoder then resynchronises, range by range).
    ``seeds``: candidate start addresses (sorted, see :func:`expect_starts`);
    a range they tile is not walked."""
    with no_gc():
        buf = Buffer(code, cache_for(target))
        whole = [not (a & 3 or b & 3) and b <= 4 * buf.nwords for a, b in ranges]
        if seeds is not None and len(seeds):
            at, counts = _seeded_starts(buf, seeds, base_address, ranges, whole)
        else:
            starts = [buf.starts(a // 4, b // 4, False) if ok else [] for (a, b), ok in zip(ranges, whole)]
            counts = list(map(len, starts))
            at = np.fromiter(chain.from_iterable(starts), np.int64, sum(counts))
        words: list = []
        ids, table, bad = buf.lookup_ids(at, words)
        if bad is not None:
            return [None] * len(ranges)
        ds = per_instruction(ids, table)
        if 0 <= base_address and base_address + len(code) < 2**62:
            address = at * 4 + base_address
            addrs = address.tolist()
        else:  # beyond int64 (a damaged header can put code anywhere)
            address = addrs = [base_address + 4 * p for p in at.tolist()]
        insts = list(map(Instruction, addrs, ds))
        out: list = []
        i = 0
        for (a, b), ok, n in zip(ranges, whole, counts):
            if not ok or (n and 4 * int(at[i + n - 1]) + ds[i + n - 1].size > b):
                out.append(None)
            else:
                out.append((insts[i:i + n], Columns(address[i:i + n], ids[i:i + n], table, words[0])))
            i += n
        return out


def _seeded_starts(buf: Buffer, seeds: np.ndarray, base_address: int, ranges: list[tuple[int, int]],
                   whole: list[bool]) -> tuple[np.ndarray, list[int]]:
    """The dword positions of the instructions of every range (concatenated)
    and their number per range, as :meth:`Buffer.starts` walks them (none
    for a range not ``whole``), taken from the candidates ``seeds`` where
    they tile the range and walked elsewhere.

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
    rel = rel[(rel >= 0) & (rel < 4 * buf.nwords) & (rel & 3 == 0)] // 4
    lo = np.searchsorted(rel, lo_dw)
    hi = np.searchsorted(rel, hi_dw)
    cnt = np.where(ok, hi - lo, 0)
    total = int(cnt.sum())
    first = np.cumsum(cnt) - cnt  # each range's first index in flat
    flat = rel[np.repeat(lo - first, cnt) + np.arange(total)]
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
    if tiles.all():
        return flat, cnt.tolist()
    parts = []
    counts = []
    for k in range(n):
        if tiles[k]:
            parts.append(flat[first[k]:first[k] + cnt[k]])
        elif whole[k]:
            parts.append(np.array(buf.starts(int(lo_dw[k]), int(hi_dw[k]), False), dtype=np.int64))
        else:
            parts.append(np.zeros(0, np.int64))
        counts.append(len(parts[-1]))
    return (np.concatenate(parts) if parts else np.zeros(0, np.int64)), counts
