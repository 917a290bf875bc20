"""Once the detectors ran, a unit's graph reads its instructions from the
decode columns (:class:`~kpatch.analysis.detectors.context.ColumnInstructions`,
:meth:`Context.release_instructions`): the findings' lazy details do not
keep one object per instruction alive (issue 14: the collection after
``analyse()`` traversed all of them).

On real code (librocrand's gfx1030 objects, Tensile objects): the columns
give, at every index, the instruction the decoder made (its address and its
very Decoded), and the findings' details and addresses read after the
release are those read with the instructions kept as they were; the report
keeps no instruction objects alive.  Each check is shown to catch a
deliberately broken variant."""

from __future__ import annotations

import gc
import glob
import os

import numpy as np
import pytest

import kpatch.analysis.detectors.context as context
from conftest import ROCBLAS_LIBRARY, fixture_and_corpus_objects
from kpatch.analysis import analyse, engine
from kpatch.analysis.detectors.context import ColumnInstructions, Context
from kpatch.codeobject import CodeObject

TENSILE = sorted(glob.glob(os.path.join(
    ROCBLAS_LIBRARY, "TensileLibrary_Type_[BS]S_*Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback_gfx1030.hsaco")))


def _objects() -> list:
    objs = fixture_and_corpus_objects()
    for p in TENSILE:
        with open(p, "rb") as fh:
            objs.append(CodeObject.from_bytes(fh.read()))
    return objs


def _contexts(monkeypatch) -> list:
    """Each unit's (context, its instruction list as the detectors saw it), as
    the analysis makes them."""
    seen = []
    real = engine.unit_context

    def spy(*a, **k):
        ctx = real(*a, **k)
        seen.append((ctx, ctx.cfg.insts))
        return ctx

    monkeypatch.setattr(engine, "unit_context", spy)
    return seen


def _mismatch(cols, insts: list) -> str | None:
    """Where ``cols`` differs from the decoder's list ``insts`` (None: nowhere):
    its length, every index's address and Decoded (the same object), the
    text of every 61st instruction, slices and negative indices."""
    if len(cols) != len(insts):
        return f"length {len(cols)} != {len(insts)}"
    for k, ins in enumerate(insts):
        got = cols[k]
        if got.address != ins.address or got.d is not ins.d:
            return f"instruction {k}: {got.address:#x} {got.text()!r} != {ins.address:#x} {ins.text()!r}"
        if k % 61 == 0 and got.text() != ins.text():
            return f"text of instruction {k}"
    n = len(insts)
    if n and ([(i.address, i.d) for i in cols[n // 3:n // 3 + 5]] != [(i.address, i.d) for i in insts[n // 3:n // 3 + 5]]
              or (cols[-1].address, cols[-1].d) != (insts[-1].address, insts[-1].d)):
        return "slice or negative index"
    with pytest.raises(IndexError):
        cols[n]
    return None


def test_columns_are_the_decoded_instructions(monkeypatch):
    objs = _objects()
    assert len(objs) >= 2  # (the fixture and at least one real object)
    seen = _contexts(monkeypatch)
    units = 0
    for co in objs:
        seen.clear()
        analyse(co)
        for ctx, insts in seen:
            assert isinstance(ctx.cfg.insts, ColumnInstructions)  # (released)
            assert ctx.columns is ctx.cfg.insts
            assert all(part is not None and not isinstance(part, list) for part in ctx.columns._parts)  # (columns)
            assert _mismatch(ctx.columns, insts) is None
            units += 1
    assert units >= len(objs)


def test_the_comparison_sees_a_shifted_part(monkeypatch):
    """Deliberately broken: one part's instructions taken one further on."""
    seen = _contexts(monkeypatch)
    analyse(fixture_and_corpus_objects()[0])
    ctx, insts = seen[0]
    cols = ctx.columns
    addrs, ids, table = cols._parts[-1]
    broken = ColumnInstructions([])
    broken._starts, broken._n = cols._starts, cols._n
    broken._parts = cols._parts[:-1] + [(addrs, np.roll(ids, -1), table)]
    assert _mismatch(cols, insts) is None
    assert _mismatch(broken, insts) is not None


def _explained(report) -> list:
    """Every finding, its detail and addresses read (after the analysis)."""
    return [(fr.name, f.cls, f.address, f.detail, tuple(f.addresses), f.fix, f.blocker)
            for fr in (*report.kernels, *report.functions) for f in fr.findings]


def _kept_analysis(monkeypatch):
    monkeypatch.setattr(Context, "release_instructions", lambda self: None)


def test_details_after_the_release_are_those_of_the_kept_instructions(monkeypatch):
    for co in _objects():
        released = _explained(analyse(co))
        with monkeypatch.context() as m:
            _kept_analysis(m)
            kept = _explained(analyse(co))
        assert released == kept
        assert released  # (real code: findings to explain)


def test_the_detail_comparison_sees_a_wrong_instruction(monkeypatch):
    """Deliberately broken: the columns give the instruction after the one asked for."""
    co = fixture_and_corpus_objects()[-1]
    with monkeypatch.context() as m:
        _kept_analysis(m)
        kept = _explained(analyse(co))
    real = ColumnInstructions.__getitem__
    monkeypatch.setattr(ColumnInstructions, "__getitem__",
                        lambda self, k: real(self, k + 1 if isinstance(k, int) and k + 1 < len(self) else k))
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
    report holds fewer objects than the code has instructions (it held one
    per instruction, and more, with them kept)."""
    co = _objects()[-1]
    n = sum(k.instructions for k in analyse(co).kernels)
    if n < 1000:
        pytest.skip("no real code object (corpus not fetched)")
    assert _tracked_after(co) < n // 2
    _kept_analysis(monkeypatch)  # deliberately broken: the instruction objects kept: the count sees them
    assert _tracked_after(co) > n
