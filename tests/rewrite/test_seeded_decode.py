"""Verify's decode of a patched object from where the rewriter put every
instruction (issue 14): the rewriter hands the new instruction starts
(RewriteResult.instruction_starts) to the decode memo (expect_starts), and
decode_ranges takes a range's candidates as its starts, without the
per-range walk (Buffer.starts), only when they tile the range as the walk
would.  With each start the rewriter also hands the original address of
the instruction it put there (RewriteResult.instruction_origins): its
encoding in the original's decode is the one expected there, taken only
when the patched object's dwords there are exactly its dwords, of the size
the decoder measures (decodememo._expected_ids); the others are looked up.
The decode must be the plain one, instruction for instruction, and wrong
candidates and expectations must fall back to the walk and the lookup."""

from __future__ import annotations

import os

import numpy as np

from conftest import ROCBLAS_LIBRARY, ROOT, gfx1030_code_objects
from kpatch.analysis.engine import decode_family, function_ranges
from kpatch.codeobject import CodeObject
from kpatch.isa import bulk
from kpatch.isa import decodememo
from kpatch.isa.decodememo import columns_of, decode_memo, decode_ranges, expect_starts, forget
from kpatch.rewrite import patcher

TENSILE = ROCBLAS_LIBRARY
#: a small Tensile gfx1030 object that override mode patches (kernels with hazards to mitigate)
TENSILE_OBJECT = "TensileLibrary_Type_BS_HPA_Contraction_l_Alik_Bjlk_Cijk_Dijk_fallback_gfx1030.hsaco"


def _patched_with_starts(data: bytes, monkeypatch, origins: list | None = None) -> tuple[bytes, np.ndarray]:
    """Patch ``data`` (override mode); the patched bytes and the starts the
    patcher handed to verify's decode (``origins``, if given, receives the
    original addresses it handed with them)."""
    seen = []

    def capture(starts, was=None):
        seen.append(None if starts is None else np.array(starts))
        if origins is not None:
            origins.append(None if was is None else np.array(was))
        expect_starts(starts, was)

    monkeypatch.setattr(patcher, "expect_starts", capture)
    r = patcher.patch_code_object(data, mode="override")
    assert r.data is not None, r.note
    assert len(seen) == 1 and seen[0] is not None
    return r.data, seen[0]


def _sample_objects() -> list[bytes]:
    from kpatch.containers.kdb import KernelDB
    kdb = KernelDB.open(os.path.join(ROOT, "kpatch", "data", "sample.kdb"))
    from kpatch.containers.bundle import open_bundle_bytes
    out = []
    try:
        for e in kdb.entries():
            code = e.code()
            if code[:4] == b"\x7fELF":
                out.append(code)
            else:  # an offload bundle: its gfx1030 code objects
                _, bundle, parts = open_bundle_bytes(code)
                out += [bytes(p.data(bundle)) for p in parts if p.id.endswith("gfx1030")]
        return out
    finally:
        kdb.close()


def _objects(lib: str) -> list[tuple[str, bytes]]:
    out = [("librocrand", co.data) for co in gfx1030_code_objects(lib)]
    out += [(f"sample {k}", b) for k, b in enumerate(_sample_objects())]
    with open(os.path.join(os.path.dirname(__file__), "data", "calls.hip.gfx1030.hsaco"), "rb") as fh:
        out.append(("calls fixture", fh.read()))  # (device functions, calls)
    path = os.path.join(TENSILE, TENSILE_OBJECT)
    if os.path.exists(path):
        with open(path, "rb") as fh:
            out.append(("tensile", fh.read()))
    return out


class _Walks:
    """Counts Buffer.starts calls (the per-range walk)."""

    def __init__(self, monkeypatch):
        self.n = 0
        real = bulk.Buffer.starts

        def counted(buf, *a):
            self.n += 1
            return real(buf, *a)

        monkeypatch.setattr(bulk.Buffer, "starts", counted)


def _ranges(co: CodeObject) -> list[tuple[int, int]]:
    return sorted((a, b) for _, _, _, a, b in function_ranges(co) if a >= 0)


def _decode(co: CodeObject, seeds, before: CodeObject | None = None, was=None) -> list[list]:
    """decode_ranges of every function of ``co`` in a fresh memo, with
    ``seeds`` as expected starts (None: none), as (address, bytes) lists,
    checked against the memo's columns.  ``before`` (with ``was``): the
    object decoded first in the memo, as the patcher decodes the original,
    whose instructions at ``was`` are expected at ``seeds``."""
    source = decode_family(co.target.processor)
    with decode_memo():
        if before is not None:
            decode_ranges(before.text, source, before.text_vaddr, _ranges(before))
        forget()  # (as the patcher: the original's encodings kept by address)
        expect_starts(seeds, was)
        lists = decode_ranges(co.text, source, co.text_vaddr, _ranges(co))
        out = []
        for insts in lists:
            c = columns_of(insts)
            if c is not None:
                assert c.addrs.tolist() == [i.address for i in insts]
                assert all(c.table[k] is i.d for k, i in zip(c.ids.tolist(), insts))
                ndw, num = c.words
                for k, i in zip(c.ids.tolist(), insts):  # (the numbers the table's encodings go by)
                    assert ndw[k] in (0, i.size // 4)
                    assert not ndw[k] or int(num[k]) == int.from_bytes(i.raw, "little")
            out.append([(i.address, i.raw) for i in insts])
        return out


class _Lookups:
    """Counts the positions Buffer.lookup_ids looks up."""

    def __init__(self, monkeypatch):
        self.n = 0
        real = bulk.Buffer.lookup_ids

        def counted(buf, s, *a):
            self.n += len(s)
            return real(buf, s, *a)

        monkeypatch.setattr(bulk.Buffer, "lookup_ids", counted)


def test_seeded_decode_is_the_plain_decode_without_walking(monkeypatch, librocrand):
    """On real patched objects (librocrand, every @sample entry the patcher
    writes, a Tensile object) the rewriter's starts tile every function:
    the decode walks no range and gives exactly the plain decode."""
    objs = _objects(librocrand)
    assert any(name == "tensile" for name, _ in objs) or not os.path.isdir(TENSILE)
    patched = 0
    for name, data in objs:
        origins: list = []
        try:
            new, starts = _patched_with_starts(data, monkeypatch, origins)
        except AssertionError:
            if name.startswith("sample"):  # (entries whose kernels are all refused are not written)
                continue
            raise
        monkeypatch.undo()
        patched += 1
        co = CodeObject.from_bytes(new)
        plain = _decode(co, None)
        walks = _Walks(monkeypatch)
        seeded = _decode(co, starts)
        assert walks.n == 0, name
        assert seeded == plain, name
        assert sum(map(len, plain)) > 0
        # with the expected encodings: most are taken, the rest looked up
        hits = _Hits(monkeypatch)
        assert origins[0] is not None and len(origins[0]) == len(starts)
        assert _decode(co, starts, CodeObject.from_bytes(data), origins[0]) == plain, name
        assert hits.taken > sum(map(len, plain)) // 2, name
        monkeypatch.undo()
    assert patched >= 4


class _Hits:
    """Counts the instructions whose expected encoding _expected_ids takes."""

    def __init__(self, monkeypatch):
        self.taken = 0
        real = decodememo._expected_ids

        def counted(*a):
            got = real(*a)
            self.taken += int((got >= 0).sum())
            return got

        monkeypatch.setattr(decodememo, "_expected_ids", counted)


def _patched_example(monkeypatch, librocrand):
    """A librocrand object, its patched bytes, starts and origins."""
    data = gfx1030_code_objects(librocrand)[0].data
    origins: list = []
    new, starts = _patched_with_starts(data, monkeypatch, origins)
    monkeypatch.undo()
    return data, new, starts, origins[0]


def test_wrong_expected_encodings_are_looked_up(monkeypatch, librocrand):
    """Expectations that are wrong -- origins moved by a dword (into other
    instructions), rotated by one instruction, all -1, another object's
    decode as the original, every expected encoding replaced by another
    entry of the table -- are refused where the dwords differ, and the
    decode is still the plain one."""
    data, new, starts, was = _patched_example(monkeypatch, librocrand)
    co, orig = CodeObject.from_bytes(new), CodeObject.from_bytes(data)
    plain = _decode(co, None)
    with open(os.path.join(os.path.dirname(__file__), "data", "calls.hip.gfx1030.hsaco"), "rb") as fh:
        other = CodeObject.from_bytes(fh.read())
    for before, wrong in ((orig, was + 4), (orig, np.roll(was, 1)), (orig, np.full(len(was), -1)),
                          (other, was)):
        assert _decode(co, starts, before, wrong) == plain
    real = decodememo._encodings_at

    def shifted(b, w):  # each expected encoding another one of the table
        ids, table, ndw, num = real(b, w)
        return np.where(ids >= 0, (ids + 1) % len(table), -1), table, ndw, num

    monkeypatch.setattr(decodememo, "_encodings_at", shifted)
    hits = _Hits(monkeypatch)
    assert _decode(co, starts, orig, was) == plain
    # (taken only where the next entry is what lies there: a replaced instruction's place)
    assert hits.taken < sum(map(len, plain)) // 100


def _siblings(ids: np.ndarray, ndw: np.ndarray, num: np.ndarray) -> np.ndarray:
    """``ids`` with each two-dword entry replaced by another two-dword
    entry of the same first dword (a different second one), where there is one."""
    two = np.flatnonzero(ndw == 2)
    order = two[np.argsort(num[two] & np.uint64(0xFFFFFFFF), kind="stable")]
    lo = num[order] & np.uint64(0xFFFFFFFF)
    nxt = np.roll(order, -1)
    same = np.roll(lo, -1) == lo
    to = np.arange(len(ndw))
    to[order[same]] = nxt[same]
    out = ids.copy()
    out[ids >= 0] = to[ids[ids >= 0]]
    return out


def test_a_check_that_skips_the_second_dword_is_caught(monkeypatch, librocrand):
    """The deliberately broken variant: an _expected_ids that compares only
    the first dword takes two-dword expectations whose second dword
    differs, and the decode is no longer the plain one (what the tests
    above assert); the real check refuses them."""
    data, new, starts, was = _patched_example(monkeypatch, librocrand)
    co, orig = CodeObject.from_bytes(new), CodeObject.from_bytes(data)
    plain = _decode(co, None)
    real = decodememo._encodings_at

    def siblings(b, w):
        ids, table, ndw, num = real(b, w)
        return _siblings(ids, ndw, num), table, ndw, num

    monkeypatch.setattr(decodememo, "_encodings_at", siblings)
    assert _decode(co, starts, orig, was) == plain  # (the real check refuses them)
    taken = []

    def broken(buf, at, e, ndw, num):
        size = np.append(np.where(ndw > 0, ndw, -1).astype(np.int64), -1)
        lo = np.append((num & np.uint64(0xFFFFFFFF)).astype(np.uint32), np.uint32(0))
        ok = (buf.sz0[at] == size[e]) & (buf.words[at] == lo[e])
        taken.append(int(ok.sum()))
        return np.where(ok, e, -1)

    monkeypatch.setattr(decodememo, "_expected_ids", broken)
    assert _decode(co, starts, orig, was) != plain
    assert sum(taken) > 0


def test_expected_ids_on_crafted_entries(librocrand):
    """_expected_ids against the dwords and sizes of a real object: an
    entry is taken only with the size measured there and all its dwords."""
    co = CodeObject.from_bytes(gfx1030_code_objects(librocrand)[0].data)
    buf = bulk.Buffer(bytes(co.text), bulk.cache_for(decode_family(co.target.processor)))
    starts = np.array(buf.starts(0, buf.nwords, False), np.int64)
    p = int(starts[np.flatnonzero(buf.sz0[starts] == 2)[0]])
    q = int(starts[np.flatnonzero(buf.sz0[starts] == 1)[0]])
    w = [int(x) for x in buf.words]
    two, one = w[p] | w[p + 1] << 32, w[q]
    cases = [  # (position, dword count, number, taken)
        (p, 2, two, True), (p, 1, w[p], False), (p, 2, two ^ (1 << 40), False), (p, 0, two, False),
        (q, 1, one, True), (q, 1, one ^ 1, False), (q, 2, one | w[q + 1] << 32, False), (q, 0, one, False),
    ]
    at = np.array([c[0] for c in cases], np.int64)
    ndw = np.array([c[1] for c in cases], np.uint8)
    num = np.array([c[2] for c in cases], np.uint64)
    got = decodememo._expected_ids(buf, at, np.arange(len(cases)), ndw, num)
    assert got.tolist() == [k if c[3] else -1 for k, c in enumerate(cases)]
    none = decodememo._expected_ids(buf, at, np.full(len(cases), -1), ndw, num)
    assert none.tolist() == [-1] * len(cases)


def test_wrong_candidates_fall_back_to_the_walk(monkeypatch, librocrand):
    """Candidates that do not tile a range -- one start left out, one
    inside an instruction, all moved by a dword, the original object's
    starts for the patched one -- are rejected for that range (it is
    walked) and the decode is still the plain one."""
    data = gfx1030_code_objects(librocrand)[0].data
    new, starts = _patched_with_starts(data, monkeypatch)
    monkeypatch.undo()
    co = CodeObject.from_bytes(new)
    plain = _decode(co, None)
    ranges = [r for r in plain if len(r) > 3]
    starts = np.unique(starts)
    # a start in the middle of a range left out
    mid = ranges[len(ranges) // 2]
    dropped = starts[starts != mid[len(mid) // 2][0]]
    # a start inside an 8-byte instruction added
    eight = next((a, raw) for r in ranges for a, raw in r if len(raw) == 8)
    inside = np.append(starts, eight[0] + 4)
    # the original object's starts (the code moved: they do not tile)
    old = np.array([a for r in _decode(CodeObject.from_bytes(data), None) for a, _ in r], np.int64)
    for wrong, at_least in ((dropped, 1), (inside, 1), (starts + 4, len(ranges)), (old, 1)):
        walks = _Walks(monkeypatch)
        assert _decode(co, wrong) == plain
        assert walks.n >= at_least
        monkeypatch.undo()
    # and the right ones again: no walk
    walks = _Walks(monkeypatch)
    assert _decode(co, starts) == plain and walks.n == 0


def test_ranges_the_seeds_do_not_reach_are_walked(monkeypatch, librocrand):
    """A seed list covering only some ranges: those are taken, the others walked."""
    data = gfx1030_code_objects(librocrand)[0].data
    new, starts = _patched_with_starts(data, monkeypatch)
    monkeypatch.undo()
    co = CodeObject.from_bytes(new)
    plain = _decode(co, None)
    half = np.sort(starts)[:len(starts) // 2]
    walks = _Walks(monkeypatch)
    assert _decode(co, half) == plain
    assert 0 < walks.n < len(plain)

