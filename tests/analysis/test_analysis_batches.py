"""The analysis works on functions in batches of at most ``BATCH_BYTES`` of
code (issue 14, memory): its findings are those of one whole analysis, and
no working context holds more than a batch (or one larger function)."""

from __future__ import annotations

import os

import pytest

from kpatch.analysis import analyse, engine
from kpatch.codeobject import CodeObject
from kpatch.containers.discover import Found, discover
from kpatch.data import expand

HERE = os.path.dirname(os.path.abspath(__file__))
CALLS = os.path.join(HERE, "..", "rewrite", "data", "calls.hip.gfx1030.hsaco")
LIBROCRAND = os.path.join(HERE, "..", "..", "kdb_cache", "root", "usr", "lib", "x86_64-linux-gnu",
                          "librocrand.so.1.1")


def _all(report) -> list:
    return [(kr.name, kr.kind, kr.address, kr.size, sorted((f.cls, f.address, f.detail, tuple(f.addresses))
                                                             for f in kr.findings),
             tuple(kr.unseen), kr.verdict.status, tuple(kr.verdict.reasons), tuple(kr.calls or ()),
             kr.instructions, kr.blocks, kr.loops, tuple(kr.notes))
            for kr in (*report.kernels, *report.functions)]


def _objects() -> list[bytes]:
    out = [item.data for item in discover([expand("@sample")]) if isinstance(item, Found)]
    return out + [open(CALLS, "rb").read()]


def _contexts(monkeypatch) -> list[int]:
    sizes = []
    real = engine.unit_context

    def spy(*a, **k):
        ctx = real(*a, **k)
        sizes.append(ctx.cfg.n)
        return ctx

    monkeypatch.setattr(engine, "unit_context", spy)
    return sizes


@pytest.mark.parametrize("batch", [4, 4096])
def test_batches_find_what_one_analysis_finds(monkeypatch, batch):
    for data in _objects():
        whole = _all(analyse(CodeObject.from_bytes(data), "gfx1010"))
        monkeypatch.setattr(engine, "BATCH_BYTES", batch)
        parts = _all(analyse(CodeObject.from_bytes(data), "gfx1010"))
        monkeypatch.undo()
        assert parts == whole


def test_no_context_holds_more_than_a_batch(monkeypatch):
    """Every function its own batch (4 bytes): each context holds one function."""
    data = open(CALLS, "rb").read()
    co = CodeObject.from_bytes(data)
    sizes = _contexts(monkeypatch)
    monkeypatch.setattr(engine, "BATCH_BYTES", 4)
    report = analyse(co, "gfx1010")
    units = [kr.instructions for kr in (*report.kernels, *report.functions)]
    assert len(units) >= 3
    assert sorted(sizes) == sorted(units)


@pytest.mark.corpus
def test_librocrand_in_batches(monkeypatch):
    """librocrand's gfx1030 object (several MB of code): the same findings in
    batches of 64 KiB as in one, and no context larger than a batch or one
    function."""
    from kpatch.containers.bundle import open_bundle_bytes
    from kpatch.containers.hostelf import find_fatbin_bundles
    lib = os.path.normpath(LIBROCRAND)
    if not os.path.exists(lib):
        pytest.skip("corpus not fetched (tools/fetch_corpus.sh)")
    b = find_fatbin_bundles(lib)[0]
    with open(lib, "rb") as f:
        f.seek(b.offset)
        raw = f.read(b.size)
    _, bundle, entries = open_bundle_bytes(raw)
    data = bytes(next(e for e in entries if e.target_id == "gfx1030").data(bundle))
    monkeypatch.setattr(engine, "BATCH_BYTES", 1 << 40)
    whole = analyse(CodeObject.from_bytes(data), "gfx1010")
    monkeypatch.undo()
    sizes = _contexts(monkeypatch)
    monkeypatch.setattr(engine, "BATCH_BYTES", 1 << 16)
    parts = analyse(CodeObject.from_bytes(data), "gfx1010")
    assert _all(parts) == _all(whole)
    largest = max(kr.instructions for kr in (*whole.kernels, *whole.functions))
    total = sum(kr.instructions for kr in (*whole.kernels, *whole.functions))
    assert len(sizes) > 1
    assert max(sizes) <= max(largest, (1 << 16) // 4) < total
