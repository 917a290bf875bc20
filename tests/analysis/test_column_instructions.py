"""The decode's instruction lists are columns whose instruction objects are
made when read (:class:`kpatch.isa.columnlist.ColumnInstructions`; issue
14: about 0.3% of the 14 M instructions of ``kpatch apply``'s corpus were
ever read, and making and freeing an object for each was the largest cost
of decoding there).

On real code (librocrand's gfx1030 objects, Tensile objects, the mathops
fixture):
- every index, slice, negative index, iteration and join gives the
  instruction the plain decoder (:func:`kpatch.isa.decode`, one function at
  a time, with lists) gives there: its address, bytes and text; so do the
  addresses, encodings and sizes read from the columns without making
  instructions (``addresses_of``, ``decoded_of``, ``sizes_of``);
- reading an instruction twice, through a view or a join, gives the same
  object (as a list does);
- the analysis' findings, their details and addresses, and the bytes
  ``patch_code_object`` writes are exactly those made with every
  instruction made up front as a list (the decoder's lists as they were);
- a report keeps no object per instruction alive.
Each check is shown to catch a deliberately broken variant."""

from __future__ import annotations

import gc
import glob
import os

import numpy as np
import pytest

import kpatch.isa.decodememo as decodememo
from conftest import ROCBLAS_LIBRARY, fixture_and_corpus_objects
from kpatch.analysis import analyse
from kpatch.analysis.codescan import scan_text
from kpatch.analysis.engine import decode_family, function_ranges
from kpatch.codeobject import CodeObject
from kpatch.isa import decode
from kpatch.isa.bulk import per_instruction
from kpatch.isa.columnlist import ColumnInstructions, _Root, addresses_of, decoded_of, join, sizes_of
from kpatch.isa.decodememo import decode_memo, decode_ranges
from kpatch.isa.instruction import Instruction
from kpatch.rewrite.patcher import patch_code_object

TENSILE = sorted(glob.glob(os.path.join(
    ROCBLAS_LIBRARY, "TensileLibrary_Type_[BS]S_*Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback_gfx1030.hsaco")))


def _objects() -> list:
    objs = fixture_and_corpus_objects()
    for p in TENSILE:
        with open(p, "rb") as fh:
            objs.append(CodeObject.from_bytes(fh.read()))
    return objs


def _as_lists(addrs, ids, table) -> list:
    """The decoder's lists as they were: every instruction made up front."""
    return list(map(Instruction, addrs.tolist() if isinstance(addrs, np.ndarray) else list(addrs),
                    per_instruction(ids, table)))


def _function_bodies(co) -> tuple[list, list]:
    """(the memo's list of each function, the plain decoder's list of each)."""
    source = decode_family(co.target.processor)
    text, base = co.text, co.text_vaddr or 0
    ranges = [(a, b) for _, _, _, a, b in function_ranges(co) if a >= 0]
    got = decode_ranges(text, source, base, ranges)
    plain = [decode(text[a:b], source, base + a) for a, b in ranges]
    return got, plain


def _mismatch(cols, insts: list) -> str | None:
    """Where ``cols`` differs from the plain decoder's ``insts`` (None:
    nowhere): its length, every index's address and bytes, the text of
    every 61st instruction, a slice, negative indices, iteration, the end."""
    if len(cols) != len(insts):
        return f"length {len(cols)} != {len(insts)}"
    for k, ins in enumerate(insts):
        got = cols[k]
        if got.address != ins.address or got.raw != ins.raw:
            return f"instruction {k}: {got.address:#x} {got.text()!r} != {ins.address:#x} {ins.text()!r}"
        if k % 61 == 0 and got.text() != ins.text():
            return f"text of instruction {k}"
    n = len(insts)
    if (addresses_of(cols).tolist() != [i.address for i in insts]
            or [d.raw for d in decoded_of(cols)] != [i.raw for i in insts]
            or sizes_of(cols).tolist() != [i.size for i in insts]):
        return "the columns read without making instructions (addresses_of, decoded_of, sizes_of)"
    key = [(i.address, i.raw) for i in insts]
    if n and ([(i.address, i.raw) for i in cols[n // 3:n // 3 + 5]] != key[n // 3:n // 3 + 5]
              or (cols[-1].address, cols[-1].raw) != key[-1]
              or [(i.address, i.raw) for i in cols] != key):
        return "slice, negative index or iteration"
    try:
        cols[n]
    except IndexError:
        return None
    return "no IndexError past the end"


def test_columns_are_the_plain_decoders_instructions():
    objs = _objects()
    assert len(objs) >= 2  # (the fixture and at least one real object)
    functions = 0
    for co in objs:
        with decode_memo():
            got, plain = _function_bodies(co)
            for g, p in zip(got, plain):
                assert isinstance(g, ColumnInstructions)
                assert _mismatch(g, p) is None
                functions += 1
            # the scan's whole .text: its units' instructions joined, as decoded one by one
            scan = scan_text(co, decode_family(co.target.processor))
            assert isinstance(scan.insts, ColumnInstructions)
            base = co.text_vaddr or 0
            whole = [i for u in scan.units for i in decode(co.text[u.start - base:u.end - base], scan.target, u.start)]
            assert _mismatch(scan.insts, whole) is None
    assert functions >= len(objs)


def test_iterating_alone_gives_the_plain_decoders_instructions():
    """Each function's list iterated before anything in it was read (the
    lists of one decode share what was made: a list iterated after a longer
    one must still make its own)."""
    for co in _objects():
        with decode_memo():
            got, plain = _function_bodies(co)
            for g, p in sorted(zip(got, plain), key=lambda gp: -len(gp[1])):
                assert [(i.address, i.raw) for i in g] == [(i.address, i.raw) for i in p]


def test_the_comparison_sees_a_shifted_encoding():
    """Deliberately broken: the columns name the next instruction's encoding."""
    co = fixture_and_corpus_objects()[-1]
    with decode_memo():
        got, plain = _function_bodies(co)
        g, p = max(zip(got, plain), key=lambda gp: len(gp[1]))
        root = g._root
        broken = ColumnInstructions(root.addrs, np.roll(root.ids, -1), root.table)[g._lo:g._lo + len(g)]
        assert _mismatch(g, p) is None
        assert _mismatch(broken, p) is not None


def test_the_comparison_sees_wrong_sizes(monkeypatch):
    """Deliberately broken: the sizes read from the columns are those of the next encoding of the table."""
    co = fixture_and_corpus_objects()[-1]
    with decode_memo():
        got, plain = _function_bodies(co)
        g, p = max(zip(got, plain), key=lambda gp: len(gp[1]))
        assert _mismatch(g, p) is None
        real = _Root.sizes
        monkeypatch.setattr(_Root, "sizes", lambda self, ids: real(self, (ids + 1) % len(self.table)))
        assert _mismatch(g, p) is not None


def _same_objects(cols) -> bool:
    """Whether reading an instruction again, through a view or a join,
    gives the same object."""
    n = len(cols)
    if n < 4:
        return True
    a, b = cols[: n // 2], cols[n // 2:]
    joined = join([a, b])
    return (cols[1] is cols[1] and cols[-1] is cols[n - 1] and a[1] is cols[1] and b[0] is cols[n // 2]
            and joined[n - 1] is cols[n - 1] and joined[2] is a[2] and next(iter(b)) is cols[n // 2])


def test_an_instruction_read_again_is_the_same_object(monkeypatch):
    co = fixture_and_corpus_objects()[-1]
    with decode_memo():
        got, _ = _function_bodies(co)
        longest = max(got, key=len)
        assert len(longest) >= 4
        assert all(_same_objects(g) for g in got)
        # deliberately broken: each read makes a new object
        monkeypatch.setattr(_Root, "at", lambda self, r: Instruction(int(self.addrs[r]),
                                                                      self.table[int(self.ids[r])]))
        assert not _same_objects(longest)


def _lists(monkeypatch) -> None:
    """The decoder's lists as they were (every instruction made at once)."""
    monkeypatch.setattr(decodememo, "ColumnInstructions", _as_lists)


def _explained(report) -> list:
    """Every finding, its detail and addresses read (after the analysis)."""
    return [(fr.name, f.cls, f.address, f.detail, tuple(f.addresses), f.fix, f.blocker)
            for fr in (*report.kernels, *report.functions) for f in fr.findings]


def test_findings_and_patches_are_those_made_with_lists(monkeypatch):
    for co in _objects():
        columns = _explained(analyse(co))
        patched = patch_code_object(co.data, mode="override").data
        with monkeypatch.context() as m:
            _lists(m)
            assert _explained(analyse(co)) == columns
            assert patch_code_object(co.data, mode="override").data == patched
        assert columns  # (real code: findings to explain)


def test_the_finding_comparison_sees_a_wrong_instruction(monkeypatch):
    """Deliberately broken: the columns give the instruction after the one asked for."""
    co = fixture_and_corpus_objects()[-1]
    with monkeypatch.context() as m:
        _lists(m)
        kept = _explained(analyse(co))
    real = ColumnInstructions.__getitem__
    monkeypatch.setattr(ColumnInstructions, "__getitem__",
                        lambda self, k: real(self, k + 1 if isinstance(k, int) and 0 <= k < len(self) - 1 else k))
    assert _explained(analyse(co)) != kept


def _tracked_after(co) -> int:
    """How many more objects the collector tracks while ``analyse(co)``'s
    report is held than before (caches warmed by an earlier analysis, so
    that only the report counts)."""
    analyse(co)
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        before = len(gc.get_objects())
        rep = analyse(co)
        after = len(gc.get_objects())
        assert rep.findings()
        del rep
    finally:
        if was:
            gc.enable()
    return after - before


def test_the_report_keeps_no_instruction_objects(monkeypatch):
    """A real object with findings whose details are made when read: its
    report holds fewer objects than the code has instructions (with lists,
    it holds one per instruction, and more)."""
    co = _objects()[-1]
    n = sum(k.instructions for k in analyse(co).kernels)
    if n < 1000:
        pytest.skip("no real code object (corpus not fetched)")
    assert _tracked_after(co) < n // 2
    _lists(monkeypatch)  # deliberately broken: the instruction objects made and kept: the count sees them
    assert _tracked_after(co) > n
