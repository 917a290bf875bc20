"""run_detectors orders every finding of a unit at once (one argsort by
function, address and class; kernel-level findings inserted in their
place), so that no function's list is sorted again: against the plain way,
each detector's findings appended to the function holding their address,
the kernel-level ones after them, each list sorted by (address, class)
(stable), on the hazard fixtures (kernel-level LdsMisalignedBug and Xnack
among them) and a large librocrand object."""

from __future__ import annotations

import glob
import os
import sys

import numpy as np
import pytest

from conftest import ROOT
from kpatch.analysis import engine
from kpatch.analysis.codescan import scan_text
from kpatch.analysis.detectors import DETECTORS
from kpatch.analysis.engine import bounded_jumps, function_ranges, unit_context
from kpatch.codeobject import CodeObject

pytestmark = pytest.mark.llvm

OBJECTS = sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "hazards", "bin", "*.hsaco")))


def _context(blob: bytes):
    co = CodeObject.from_bytes(blob)
    scan = scan_text(co, "gfx1030")
    return unit_context(co, "gfx1030", co.target.processor, [r for r in function_ranges(co) if r[3] >= 0],
                        jumps=bounded_jumps(scan))


def _key(f) -> tuple:
    return (-1 if f.address is None else f.address, f.cls)


def plain(ctx) -> list[list]:
    """The findings per function, placed one by one and sorted per function."""
    per_span: list[list] = [[] for _ in ctx.functions]
    starts = ctx.cfg.func_starts
    for _, detect in DETECTORS:
        for f in detect(ctx):
            k = int(np.searchsorted(ctx.addresses, f.address))
            per_span[int(np.searchsorted(starts, k, "right")) - 1].append(f)
    for span, f in ctx.attached:
        per_span[ctx.functions.index(span)].append(f)
    for fs in per_span:
        fs.sort(key=_key)
    return per_span


def _large_object() -> bytes:
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    try:
        from isa_corpus import gfx1030_objects
        return next(blob for _, blob in gfx1030_objects(("librocrand.so.1.1",)) if len(blob) > 1 << 20)
    finally:
        sys.path.pop(0)


def _same(ctx_a, ctx_b) -> None:
    got = engine.run_detectors(ctx_a)
    want = plain(ctx_b)
    assert [[(f.address, f.cls, f.detail) for f in fs] for fs in got] == \
        [[(f.address, f.cls, f.detail) for f in fs] for fs in want]


@pytest.mark.parametrize("path", OBJECTS, ids=os.path.basename)
def test_findings_come_in_order_on_the_fixtures(path):
    with open(path, "rb") as fh:
        blob = fh.read()
    _same(_context(blob), _context(blob))


def test_findings_come_in_order_on_real_code():
    blob = _large_object()
    a, b = _context(blob), _context(blob)
    assert sum(map(len, plain(b))) > 500 and b.attached  # (kernel-level ones among them)
    _same(a, _context(blob))  # (each context runs the detectors once: they attach)


def test_kernel_level_findings_are_placed_among_the_others():
    """A kernel-level finding whose address falls among its kernel's other
    findings (the descriptor lies before the code here, so it comes first)."""
    path = next(p for p in OBJECTS if "lds" in os.path.basename(p) or "vmem_to_scalar" in os.path.basename(p))
    with open(path, "rb") as fh:
        ctx = _context(fh.read())
    per_span = engine.run_detectors(ctx)
    for fs in per_span:
        assert fs == sorted(fs, key=_key)
