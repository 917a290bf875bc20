"""The scan's address -> instruction index (codescan.AddressIndex): the same
answers as a dict built from the instructions, at 8 bytes per instruction
(a dict of boxed ints costs ~70: 160+ MB on the largest Tensile library)."""

from __future__ import annotations

import numpy as np
import pytest

from kpatch.analysis.codescan import AddressIndex, index_of, scan_text
from kpatch.codeobject import CodeObject
from kpatch.containers.discover import Found, discover
from kpatch.data import expand
from kpatch.isa.instruction import Instruction


def _sample_objects():
    return [CodeObject.from_bytes(item.data) for item in discover([expand("@sample")]) if isinstance(item, Found)]


def test_the_index_answers_as_a_dict_and_holds_one_int64_per_instruction():
    cos = _sample_objects()
    assert cos
    for co in cos:
        scan = scan_text(co, "gfx1030")
        ix = scan.index_at
        assert isinstance(ix, AddressIndex)
        assert ix.addresses.dtype == np.int64 and ix.addresses.nbytes == 8 * len(scan.insts)
        want = {ins.address: i for i, ins in enumerate(scan.insts)}
        assert len(want) == len(ix)
        for a, i in want.items():
            assert ix.get(a) == i and ix[a] == i and a in ix
        for a in (scan.start - 4, scan.end, scan.end + 4, -1, 2**64 + scan.start, 2**200):
            assert ix.get(a) is None and a not in ix
        odd = [a + 2 for a in want if a + 2 not in want]
        assert odd and all(ix.get(a) is None for a in odd)
        with pytest.raises(KeyError):
            ix[odd[0]]
        some = np.array(list(want)[::7], dtype=np.int64)
        assert ix.indices(some).tolist() == [want[a] for a in some.tolist()]
        with pytest.raises(KeyError):
            ix.indices(np.array([odd[0]], dtype=np.int64))


def test_addresses_that_do_not_strictly_increase_or_fit_int64_keep_a_dict():
    ins = _sample_objects()[0]
    d = scan_text(ins, "gfx1030").insts[0].d
    same = [Instruction(0x100, d), Instruction(0x100, d)]
    assert index_of(same) == {0x100: 1}
    huge = [Instruction(2**64 + 4, d), Instruction(2**64 + 8, d)]
    assert index_of(huge) == {2**64 + 4: 0, 2**64 + 8: 1}
    assert isinstance(index_of([Instruction(4, d), Instruction(8, d)]), AddressIndex)


def test_the_analysis_keeps_no_instruction_table_of_the_scan_while_detectors_run(monkeypatch):
    """The analysis reads the scan's bounded jumps first; the detectors then
    run with the scan's per-instruction tables released (only its units,
    edges and problems are read after them), and the verdicts do not change."""
    from kpatch.analysis import analyse, engine
    seen = []
    real = engine._relocation_verdicts
    monkeypatch.setattr(engine, "_relocation_verdicts", lambda rep, scan: (seen.append(scan), real(rep, scan)))
    for co in _sample_objects():
        rep = analyse(co, "gfx1010")
        assert rep.kernels
    assert seen and all(s.insts == [] and s.unit_of == [] and s.units for s in seen)


def test_branch_targets_by_columns_are_those_of_the_instructions(monkeypatch):
    """The scan's branch targets (codescan._Control: with numpy from the
    decode's addresses) are each branch's own target and the index of the
    instruction there, as without the addresses (one by one, a dict index)."""
    import kpatch.analysis.codescan as cs
    from conftest import fixture_and_corpus_objects

    for co in [*_sample_objects(), *fixture_and_corpus_objects()]:
        scan = scan_text(co, "gfx1030")
        want = {i: (ins.branch_target, scan.index_at.get(ins.branch_target, -1)) for i, ins in enumerate(scan.insts)
                if ins.is_branch or ins.mnemonic == "s_call_b64"}
        got = {}
        for which in ("columns", "dict"):
            if which == "dict":
                monkeypatch.setattr(cs, "index_of", lambda insts, addresses=None: dict(
                    (ins.address, k) for k, ins in enumerate(insts)))
                scan = scan_text(co, "gfx1030")
            c = cs._Control(scan, scan.data, scan.start)
            got[which] = {i: (t, j) for i, r, t, j in zip(c.at, c.role, c.target, c.index) if r == cs.R_BRANCH}
        assert got["columns"] == got["dict"] == {i: v for i, v in want.items() if i in got["columns"]}
        assert len(got["columns"]) > 0.9 * len(want)
        monkeypatch.undo()


def test_the_scan_records_every_branch_to_an_instruction_and_its_unit_edge():
    """_scan_unit records the branches whose targets are instructions
    (scan.branches: in instruction order, each its own target) and an edge
    to the unit of each target in another unit (none in these objects: their
    calls go through s_getpc_b64), all at once per unit."""
    from conftest import fixture_and_corpus_objects

    import os
    calls = os.path.join(os.path.dirname(__file__), "..", "rewrite", "data", "calls.hip.gfx1030.hsaco")
    with open(calls, "rb") as fh:  # (kernels calling device functions: branches between units)
        objs = [CodeObject.from_bytes(fh.read())]
    edges = 0
    for co in [*objs, *_sample_objects(), *fixture_and_corpus_objects()]:
        scan = scan_text(co, "gfx1030")
        bad = {p.ui for p in scan.problems if p.kind == "undecodable"}
        assert list(scan.branches) == sorted(scan.branches)
        want = {}
        for i, ins in enumerate(scan.insts):
            if (ins.is_branch or ins.mnemonic == "s_call_b64") and scan.unit_of[i] not in bad:
                t = ins.branch_target
                if scan.index_at.get(t) is not None:
                    want[i] = t
        assert scan.branches == want and want
        for i, t in want.items():
            u, v = scan.unit_of[i], scan.unit_of[scan.index_at[t]]
            if u != v:
                assert v in scan.edges[u]
                edges += 1
        # (a unit reaches itself only through an address it takes or a jump it bounds)
        own = {scan.unit_of[gp.index] for gp in scan.getpcs} | {scan.unit_of[i] for i in scan.jumps}
        assert all(u not in e for u, e in scan.edges.items() if u not in own)
