"""Verify's decode of a patched object from where the rewriter put every
instruction (issue 14): the rewriter hands the new instruction starts
(RewriteResult.instruction_starts) to the decode memo (expect_starts), and
decode_ranges takes a range's candidates as its starts, without the
per-range walk (Buffer.starts), only when they tile the range as the walk
would.  The decode must be the plain one, instruction for instruction,
and wrong candidates must fall back to the walk."""

from __future__ import annotations

import os

import numpy as np

from conftest import gfx1030_code_objects
from kpatch.analysis.engine import decode_family, function_ranges
from kpatch.codeobject import CodeObject
from kpatch.isa import bulk
from kpatch.isa.decodememo import columns_of, decode_memo, decode_ranges, expect_starts
from kpatch.rewrite import patcher

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TENSILE = os.path.join(ROOT, "kdb_cache", "sid-root", "usr", "lib", "x86_64-linux-gnu", "rocblas", "4.4.1",
                       "library")
#: a small Tensile gfx1030 object that override mode patches (kernels with hazards to mitigate)
TENSILE_OBJECT = "TensileLibrary_Type_BS_HPA_Contraction_l_Alik_Bjlk_Cijk_Dijk_fallback_gfx1030.hsaco"


def _patched_with_starts(data: bytes, monkeypatch) -> tuple[bytes, np.ndarray]:
    """Patch ``data`` (override mode); the patched bytes and the starts the
    patcher handed to verify's decode."""
    seen = []

    def capture(starts):
        seen.append(None if starts is None else np.array(starts))
        expect_starts(starts)

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


def _decode(co: CodeObject, seeds) -> list[list]:
    """decode_ranges of every function of ``co`` in a fresh memo, with
    ``seeds`` as expected starts (None: none), as (address, bytes) lists,
    checked against the memo's columns."""
    source = decode_family(co.target.processor)
    ranges = sorted((a, b) for _, _, _, a, b in function_ranges(co) if a >= 0)
    with decode_memo():
        expect_starts(seeds)
        lists = decode_ranges(co.text, source, co.text_vaddr, ranges)
        out = []
        for insts in lists:
            c = columns_of(insts)
            if c is not None:
                assert c.addrs.tolist() == [i.address for i in insts]
                assert all(c.table[k] is i.d for k, i in zip(c.ids.tolist(), insts))
            out.append([(i.address, i.raw) for i in insts])
        return out


def test_seeded_decode_is_the_plain_decode_without_walking(monkeypatch, librocrand):
    """On real patched objects (librocrand, every @sample entry the patcher
    writes, a Tensile object) the rewriter's starts tile every function:
    the decode walks no range and gives exactly the plain decode."""
    objs = _objects(librocrand)
    assert any(name == "tensile" for name, _ in objs) or not os.path.isdir(TENSILE)
    patched = 0
    for name, data in objs:
        try:
            new, starts = _patched_with_starts(data, monkeypatch)
        except AssertionError:
            if name.startswith("sample"):  # (entries whose kernels are all refused are not written)
                continue
            raise
        patched += 1
        co = CodeObject.from_bytes(new)
        plain = _decode(co, None)
        walks = _Walks(monkeypatch)
        seeded = _decode(co, starts)
        assert walks.n == 0, name
        assert seeded == plain, name
        assert sum(map(len, plain)) > 0
        monkeypatch.undo()
    assert patched >= 4


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

