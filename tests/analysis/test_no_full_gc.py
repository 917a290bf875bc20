"""No full (generation 2) garbage collection runs inside analyse() (issue
14: full collections over the decode caches, about 1.9 M objects, landed
inside the timed work).  The check (gc.callbacks) is shown to catch a
deliberate one; without analyse()'s pause of the collector the first test
fails (checked)."""

from __future__ import annotations

import gc
import os
import sys

import pytest

import kpatch.analysis.engine as engine
from conftest import FIXTURES, ROOT
from kpatch.analysis import analyse
from kpatch.codeobject import CodeObject


def _full_collections(fn) -> int:
    """How many generation-2 collections start while the analysis works
    (inside ``engine._analyse``, with every decode cache alive).  One that
    the re-enabled collector starts as ``analyse()`` returns, after the
    decode memo is dropped, is not inside the work and not counted: with the
    eager thresholds below it comes at once, so counting it made this test
    depend on what earlier tests left allocated."""
    seen = []
    inside = [False]
    real = engine._analyse

    def working(*args, **kw):
        inside[0] = True
        try:
            return real(*args, **kw)
        finally:
            inside[0] = False

    def cb(phase, info):
        if phase == "start" and info["generation"] == 2 and inside[0]:
            seen.append(1)

    engine._analyse = working
    gc.callbacks.append(cb)
    try:
        fn()
    finally:
        gc.callbacks.remove(cb)
        engine._analyse = real
    return len(seen)


def _objects():
    """A fixture code object, and the first gfx1030 code object of the corpus when fetched."""
    with open(os.path.join(FIXTURES, "mathops.hip.gfx1030.v5.hsaco"), "rb") as fh:
        yield CodeObject.from_bytes(fh.read())
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    try:
        from isa_corpus import gfx1030_objects
        for _, blob in gfx1030_objects(("librocrand.so.1.1",)):
            yield CodeObject.from_bytes(blob)
            break
    finally:
        sys.path.pop(0)


@pytest.fixture
def eager_gc():
    """Collections as often as the collector allows (any allocation may start a full one)."""
    old = gc.get_threshold()
    gc.set_threshold(1, 1, 1)
    try:
        yield
    finally:
        gc.set_threshold(*old)


def test_no_full_collection_inside_analyse(eager_gc):
    for co in _objects():
        assert _full_collections(lambda: analyse(co)) == 0


def test_the_check_sees_a_full_collection_inside_analyse(monkeypatch):
    real = engine.run_detectors

    def collecting(ctx):  # deliberately broken: a full collection in the middle of the analysis
        gc.collect()
        return real(ctx)

    monkeypatch.setattr(engine, "run_detectors", collecting)
    co = next(_objects())
    assert _full_collections(lambda: analyse(co)) == 1


def test_a_dropped_report_leaves_no_cycles():
    """What analyse() makes is freed by reference counts when its report
    goes: no reference cycle is left for the collector, whose next full
    collection (over the decode caches) would otherwise come after the
    analysis of every object.  The descriptors fixture has kernel-level
    findings whose detail is made when read (a detail made from the
    analysis context, which holds the finding, was such a cycle)."""
    with open(os.path.join(ROOT, "tests", "fixtures", "hazards", "bin", "descriptors.gfx1030.hsaco"), "rb") as fh:
        co = CodeObject.from_bytes(fh.read())
    analyse(co)  # (caches filled)
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        rep = analyse(co)
        assert any(f.cls == "LdsMisalignedBug" for k in rep.kernels for f in k.findings)
        del rep
        assert gc.collect() == 0
    finally:
        if was:
            gc.enable()
