"""Verification after patching re-analyses only what it must (issue 14):
the refused kernels and device functions (whose findings it does not read)
and those that were clean and are exactly as they were
(:meth:`patcher.Unchanged.same_in`) are not analysed again.

The proof that this is a full re-analysis's answer: on every object of the
corpus DB (and @sample), the incremental verify's problems equal the full
one's, the findings of every function analysed alone equal the whole
analysis's, and every function it skips as unchanged has, in the full
analysis of the patched object, no finding verify would report.  A wrong
claim of "unchanged" (bytes that are not the object's, or a unit that was
not clean) is caught: the unit is analysed again."""

from __future__ import annotations

import os

import pytest

from kpatch.analysis import analyse
from kpatch.analysis.engine import function_ranges
from kpatch.codeobject import CodeObject
from kpatch.containers.discover import Found, discover
from kpatch.data import expand
from kpatch.rewrite import patcher
from kpatch.rewrite.outcome import KernelOutcome

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS_DB = os.path.join(HERE, "..", "..", "kdb_cache", "corpus_gfx1030.kdb")
CALLS = os.path.join(HERE, "data", "calls.hip.gfx1030.hsaco")


def _objects(path: str) -> list[bytes]:
    return [item.data for item in discover([path]) if isinstance(item, Found)]


def _seen(kr) -> tuple:
    return (sorted((f.cls, f.address, f.detail) for f in kr.findings), tuple(kr.unseen))


def _units(report) -> dict:
    return {kr.name: kr for kr in (*report.kernels, *report.functions)}


def _check_object(data: bytes, monkeypatch) -> tuple[int, int, int]:
    """Patch ``data``; compare the incremental verify with the full one.
    Returns (units, skipped as unchanged, skipped as refused)."""
    calls = []
    real = patcher.verify

    def spy(new, outcomes, mode, kept=(), before=None):
        calls.append((new, dict(outcomes), mode, list(kept), before))
        return real(new, outcomes, mode, kept=kept, before=before)

    monkeypatch.setattr(patcher, "verify", spy)
    patcher.patch_code_object(data, mode="override")
    monkeypatch.setattr(patcher, "verify", real)
    if not calls:
        return 0, 0, 0
    new, outcomes, mode, kept, before = calls[0]
    assert before is not None
    incremental = real(new, outcomes, mode, kept=kept, before=before)
    full = real(new, outcomes, mode, kept=kept)
    assert sorted(incremental) == sorted(full)
    co = CodeObject.from_bytes(new)
    whole = _units(analyse(co, "gfx1010"))
    unchanged = before.same_in(co)
    refused = {n for n, o in outcomes.items() if o.status == "refused"}
    for name in unchanged:  # skipped: the full analysis finds nothing verify would report
        kr = whole[name]
        assert not kr.unseen, name
        assert all(f.cls in patcher.OVERRIDE_ACCEPTS for f in kr.findings), (name, kr.findings)
    names = {r[0] for r in function_ranges(co)}
    rest = names - unchanged - refused
    part = _units(analyse(co, "gfx1010", only=rest))
    assert set(part) == rest
    for name in rest:  # analysed alone: exactly what the whole analysis finds
        assert _seen(part[name]) == _seen(whole[name]), name
    # every other function alone, too (no function's findings depend on another's)
    odd = set(sorted(names)[::2])
    alone = _units(analyse(co, "gfx1010", only=odd))
    for name in odd:
        assert _seen(alone[name]) == _seen(whole[name]), name
    return len(names), len(unchanged), len(refused & names)


def test_incremental_verify_equals_full_on_sample(monkeypatch):
    total = 0
    for data in _objects(expand("@sample")):
        total += _check_object(data, monkeypatch)[0]
    assert total


def test_incremental_verify_equals_full_on_calls(monkeypatch):
    """Device functions (calls, returns through s_setpc_b64)."""
    n, _, _ = _check_object(open(CALLS, "rb").read(), monkeypatch)
    assert n >= 3


@pytest.mark.corpus
def test_incremental_verify_equals_full_on_the_corpus(monkeypatch):
    db = os.path.normpath(CORPUS_DB)
    if not os.path.exists(db):
        pytest.skip("corpus DB not built (tools/build_corpus_kdb.py)")
    counts = [_check_object(data, monkeypatch) for data in _objects(db)]
    assert len(counts) > 100
    print("units, unchanged, refused:", [sum(c[i] for c in counts) for i in range(3)])


def _clean_unit_claim(data: bytes) -> tuple[CodeObject, patcher.Unchanged]:
    co = CodeObject.from_bytes(data)
    return co, patcher.Unchanged.of(co, analyse(co, "gfx1010"), "override")


def test_a_wrong_unchanged_claim_is_caught():
    """``before`` says every kernel of the patched object was clean and is
    unchanged; the object verified is the original, whose kernels still have
    their hazards: their bytes differ from the claim, so they are analysed
    and the problems found."""
    data = open(CALLS, "rb").read()
    res = patcher.patch_code_object(data, mode="override")
    assert res.data is not None
    outcomes = {o.name: o for o in (*res.kernels, *res.functions)}
    _, claim = _clean_unit_claim(res.data)  # the patched object's units: all clean
    assert claim.units
    assert not patcher.verify(res.data, outcomes, "override", before=claim)
    problems = patcher.verify(data, outcomes, "override", before=claim)
    full = patcher.verify(data, outcomes, "override")
    assert full and sorted(problems) == sorted(full)


def test_a_unit_that_was_not_clean_is_analysed_again():
    """Same bytes, but the original analysis found a hazard in it: not
    skipped (the claim records only clean units)."""
    data = open(CALLS, "rb").read()
    co, claim = _clean_unit_claim(data)
    dirty = [kr.name for kr in (*analyse(co, "gfx1010").kernels, *analyse(co, "gfx1010").functions)
             if [f for f in kr.findings if f.cls not in patcher.OVERRIDE_ACCEPTS]]
    assert dirty and not set(dirty) & set(claim.units)
    # a forged claim naming them with their own bytes: same_in skips them, so
    # verify would miss their hazards -- which is why only Unchanged.of makes claims
    outcomes = {n: KernelOutcome(n, "untouched") for n in {r[0] for r in function_ranges(co)}}
    problems = patcher.verify(data, outcomes, "override", before=claim)
    assert {p.split(":")[0] for p in problems} >= set(dirty)


def test_a_moved_unit_with_getpc_is_analysed_again():
    """A unit whose bytes are the same but whose address changed is skipped
    only when nothing in it depends on where it lies."""
    assert patcher._position_free(bytes.fromhex("000080bf"), 0x1000)  # s_nop 0
    getpc = bytes.fromhex("001f80be")  # s_getpc_b64 s[0:1]
    assert not patcher._position_free(getpc, 0x1000)
    assert not patcher._position_free(bytes.fromhex("ffffffff"), 0x1000)  # not a known instruction
