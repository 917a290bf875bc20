"""The hazard engine (kpatch.analysis.dataflow: prefix counts, windows of
gens, block states propagated in numpy, rounds of the lean iteration that
reuse what did not change) against the plain dataflow it computes, written
out instruction by instruction in Python: in-states of the blocks by a
worklist to the fixpoint, then every instruction checked against the state
before it, killed, genned; the lean rounds as the module docstring defines
them.  On real code (the hazard fixtures, librocrand's and librocsparse's
first gfx1030 objects over 1 MB: loops, thousands of blocks, hits of four
of the five rules): the same
hits, and the same state bits met at each (``RuleHits.mask``).  The rules'
per-encoding roles and masks are their Python forms (``HazardEngine.compiled``;
their column forms are test_hazard_columns.py's)."""

from __future__ import annotations

import glob
import os
import sys

import numpy as np
import pytest

from conftest import ROOT
from kpatch.analysis import dataflow
from kpatch.analysis.codescan import scan_text
from kpatch.analysis.detectors.waitstates import ENGINE
from kpatch.analysis.engine import bounded_jumps, function_ranges, unit_context
from kpatch.codeobject import CodeObject

pytestmark = pytest.mark.llvm

HAZARDS = sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "hazards", "bin", "*.gfx1030.hsaco")))


def _corpus_objects() -> list[tuple[str, bytes]]:
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    try:
        from isa_corpus import gfx1030_objects
        out = []
        for lib in ("librocrand.so.1.1", "librocsparse.so.0.1"):
            for name, blob in gfx1030_objects((lib,)):
                if len(blob) > 1 << 20:  # (the first large one: thousands of blocks)
                    out.append((name, blob))
                    break
        return out
    finally:
        sys.path.pop(0)


def _context(blob: bytes):
    co = CodeObject.from_bytes(blob)
    scan = scan_text(co, "gfx1030")
    return unit_context(co, "gfx1030", co.target.processor, [r for r in function_ranges(co) if r[3] >= 0],
                        jumps=bounded_jumps(scan))


def _hits(engine, cfg, i: int, sites: frozenset[int]) -> dict[int, int]:
    """F(sites): each hazardous instruction of rule ``i`` and the state bits
    it meets, when the instructions ``sites`` also kill (before their gen)."""
    rule = engine.rules[i]
    comp = [engine.compiled(f) for f in cfg.facts]
    kill = [bool((c[0] >> (3 * i)) & 4) or k in sites for k, c in enumerate(comp)]
    chk = [c[1][i][0] for c in comp]
    gen = [c[1][i][1] for c in comp]
    start, end = cfg.block_start.tolist(), cfg.block_end.tolist()

    def through(b: int, state: int, seen: dict | None = None) -> int:
        for k in range(start[b], end[b]):
            if seen is not None and chk[k] & state:
                seen[k] = chk[k] & state
            if kill[k]:
                state = 0
            state |= gen[k]
        if rule.on_branch is not None and cfg.branchy[b]:
            state = rule.on_branch(state)
        return state

    inn = [0] * cfg.nblocks
    out: list[int | None] = [None] * cfg.nblocks
    work = list(range(cfg.nblocks))
    while work:
        b = work.pop()
        o = through(b, inn[b])
        if o == out[b]:
            continue
        out[b] = o
        for s in cfg.succs(b):
            if inn[s] | o != inn[s]:
                inn[s] |= o
                work.append(s)
    seen: dict[int, int] = {}
    for b in range(cfg.nblocks):
        through(b, inn[b], seen)
    return seen


def reference(engine, cfg, i: int) -> dict[int, int]:
    """The hits of rule ``i`` (and the bits each meets): F(S0 = {}) for a rule
    that is not lean; else S(n+1) = F(S(n)) until it settles, as
    :mod:`kpatch.analysis.dataflow` defines it."""
    first = _hits(engine, cfg, i, frozenset())
    kills = [bool((engine.compiled(cfg.facts[k])[0] >> (3 * i)) & 4) for k in first]
    if not engine.rules[i].lean or all(kills):
        return first
    seq, runs = [frozenset(), frozenset(first)], [first]
    while len(runs) < engine.LEAN_ROUNDS:
        if seq[-1] == seq[-2]:
            return runs[-1]
        if len(seq) >= 3 and seq[-1] == seq[-3]:
            return runs[-1] if len(seq[-1]) >= len(seq[-2]) else runs[-2]
        runs.append(_hits(engine, cfg, i, seq[-1]))
        seq.append(frozenset(runs[-1]))
    return runs[-1] if len(seq) % 2 == 0 else runs[-2]


def _engine_hits(engine, cfg) -> dict[str, dict[int, int]]:
    return {rh.rule.name: {k: rh.mask(k) for k in rh.ks} for rh in engine.run(cfg)}


def _reference_hits(engine, cfg) -> dict[str, dict[int, int]]:
    out = {}
    for i, rule in enumerate(engine.rules):
        got = reference(engine, cfg, i)
        if got:
            out[rule.name] = got
    return out


@pytest.fixture(scope="module")
def corpus_contexts():
    return [(name, _context(blob)) for name, blob in _corpus_objects()]


@pytest.mark.parametrize("path", HAZARDS, ids=os.path.basename)
def test_engine_is_the_plain_dataflow_on_the_fixtures(path):
    with open(path, "rb") as fh:
        cfg = _context(fh.read()).cfg
    assert _engine_hits(ENGINE, cfg) == _reference_hits(ENGINE, cfg)


def test_engine_is_the_plain_dataflow_on_real_code(corpus_contexts):
    assert len(corpus_contexts) >= 1
    for name, ctx in corpus_contexts:
        cfg = ctx.cfg
        want = _reference_hits(ENGINE, cfg)
        assert want and cfg.nblocks > 1000, name  # (real work: hits, many blocks)
        got = _engine_hits(ENGINE, cfg)
        assert got.keys() == want.keys(), name
        for rule in want:
            assert got[rule] == want[rule], (name, rule)


def test_a_broken_engine_is_seen(corpus_contexts, monkeypatch):
    """The comparison above catches an engine that counts the gen at a
    check's own position as before it (a prefix count off by one)."""
    real = dataflow._prefix_count

    def inclusive(a):
        out = real(a)
        out[:-1] = out[1:]
        return out
    monkeypatch.setattr(dataflow, "_prefix_count", inclusive)
    cfg = corpus_contexts[0][1].cfg
    assert _engine_hits(ENGINE, cfg) != _reference_hits(ENGINE, cfg)


def _rule_inputs(engine, cfg):
    """A fresh :class:`dataflow._RuleInput` for each rule that has checks and gens in ``cfg``."""
    cols = engine._columns()
    roles = cols[0][cfg.eids].astype(engine._roles_dtype)
    out = []
    for i in range(len(engine.rules)):
        ri = dataflow._RuleInput(engine, cols, cfg, roles, i)
        if ri.C.size and ri.G.size:
            out.append(ri)
    return out


def _round(engine, ri, sites) -> dict[int, int]:
    rh = engine._hits(ri, np.array(sorted(sites), dtype=np.int64))
    return {} if rh is None else {k: rh.mask(k) for k in rh.ks}


def _site_sets(ri, n: int) -> list[frozenset[int]]:
    """Kills to add: every third check, the checks of the first round (as the
    lean iteration adds them), and instructions that are not all checks (every
    seventh instruction); each a different pattern of blocks with and without
    sites, sites before and after checks."""
    C = ri.C.tolist()
    return [frozenset(C[::3]), frozenset(C[1::2]), frozenset(range(3, n, 7))]


def _check_rounds(engine, cfg):
    for ri in _rule_inputs(engine, cfg):
        assert _round(engine, ri, frozenset()) == _hits(engine, cfg, ri.i, frozenset())
        for sites in _site_sets(ri, cfg.n):
            assert _round(engine, ri, sites) == _hits(engine, cfg, ri.i, sites), (ri.rule.name, len(sites))


@pytest.mark.parametrize("path", HAZARDS, ids=os.path.basename)
def test_a_round_with_sites_is_the_plain_dataflow_on_the_fixtures(path):
    """A round with sites reworks only the checks after a site in its block
    and the site blocks' states (``HazardEngine._with_sites``): the same
    hits and bits as the plain dataflow with those sites as kills."""
    with open(path, "rb") as fh:
        _check_rounds(ENGINE, _context(fh.read()).cfg)


def test_a_round_with_sites_is_the_plain_dataflow_on_real_code(corpus_contexts):
    for name, ctx in corpus_contexts:
        _check_rounds(ENGINE, ctx.cfg)


def test_a_round_that_ignores_the_checks_after_sites_is_seen(corpus_contexts, monkeypatch):
    """The comparison above catches a round with sites that keeps the checks
    after a site as they were without it."""
    monkeypatch.setattr(dataflow, "_checks_after", lambda C, first, ends: dataflow._EMPTY)
    with pytest.raises(AssertionError):
        _check_rounds(ENGINE, corpus_contexts[0][1].cfg)


def _plain_propagate(cfg, rule, local: list[int], through: list[bool]) -> list[int]:
    """In-states at the fixpoint, block by block in Python ints: a block passes
    on ``on_branch`` (if it ends in a branch) of its own state, OR its
    in-state when ``through``; a block's in-state is the OR of what its
    predecessors pass on."""
    def out_of(b: int, inn: int) -> int:
        v = local[b] | (inn if through[b] else 0)
        return rule.on_branch(v) if rule.on_branch is not None and cfg.branchy[b] else v

    inn = [0] * cfg.nblocks
    out = [out_of(b, 0) for b in range(cfg.nblocks)]
    work = list(range(cfg.nblocks))
    while work:
        b = work.pop()
        for s in cfg.succs(b):
            if inn[s] | out[b] != inn[s]:
                inn[s] |= out[b]
                new = out_of(s, inn[s])
                if new != out[s]:
                    out[s] = new
                    work.append(s)
    return inn


@pytest.mark.parametrize("density", [0.002, 0.05, 0.5])
def test_propagation_is_the_plain_fixpoint(corpus_contexts, density):
    """``HazardEngine._propagate`` (level by level in numpy, a frontier's
    successors ORed at once -- several of them may share one -- the last few
    blocks one by one) against the plain fixpoint, for random block states of
    a 128-bit rule and of the 4-bit rule with ``on_branch``, on a real graph
    (loops, joins, thousands of blocks)."""
    from kpatch.analysis.detectors.waitstates import LDS_BRANCH_VMEM, VMEM_TO_SCALAR
    cfg = corpus_contexts[0][1].cfg
    rng = np.random.default_rng(14)
    for rule in (VMEM_TO_SCALAR, LDS_BRANCH_VMEM):
        nch = (rule.width + 63) // 64
        live = rng.random(cfg.nblocks) < density
        local = [np.where(live, rng.integers(0, 1 << min(rule.width, 63), cfg.nblocks, dtype=np.uint64)
                          | np.uint64(1), np.uint64(0)) for _ in range(nch)]
        through = rng.random(cfg.nblocks) < 0.8
        got = dataflow.HazardEngine._propagate(cfg, rule, local, through)
        want = _plain_propagate(cfg, rule, [sum(int(a[b]) << (64 * ch) for ch, a in enumerate(local))
                                            for b in range(cfg.nblocks)], through.tolist())
        got = [0] * cfg.nblocks if got is None else [sum(int(a[b]) << (64 * ch) for ch, a in enumerate(got))
                                                     for b in range(cfg.nblocks)]
        assert got == want, (rule.name, density)


def test_or_linear():
    """The propagation is skipped when the checks cannot meet the closure of
    the blocks' bits under ``on_branch`` -- sound only for an ``on_branch``
    that keeps 0 and distributes over OR, which ``_or_linear`` tries on
    every pair of states: LdsBranchVmemWARHazard's does; one that sets a bit
    from nothing, one that needs two bits together, and any state wider
    than 8 bits are not taken as such."""
    from kpatch.analysis.detectors.waitstates import LDS_BRANCH_VMEM
    assert dataflow._or_linear(LDS_BRANCH_VMEM.on_branch, LDS_BRANCH_VMEM.width)
    assert not dataflow._or_linear(lambda v: v | 1, 4)
    assert not dataflow._or_linear(lambda v: 8 if v & 3 == 3 else 0, 4)
    assert not dataflow._or_linear(lambda v: v, 9)
    assert ENGINE._or_linear == [False, False, False, False, True]
