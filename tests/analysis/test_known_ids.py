"""The analysis identifies each instruction's encoding once per code object
(issue 14): unit_context takes the eids the scan of ``.text`` worked out
(``TextScan.known``, by address and dword count) instead of hashing every
instruction again, and gets exactly the eids each instruction's own bytes
give; an instruction the scan decoded otherwise (another size at that
address) or eids from an emptied cache are not taken."""

from __future__ import annotations


import numpy as np

import kpatch.analysis.facts as facts_mod
from conftest import fixture_and_corpus_objects
from kpatch.analysis import analyse
from kpatch.analysis.codescan import scan_text
from kpatch.analysis.engine import build_unit, decode_family, function_ranges
from kpatch.analysis.facts import FACTS, KnownIds, dword_counts, encoding_ids, known_ids, known_unit
from kpatch.isa.decodememo import decode_memo


def _objects():
    return iter(fixture_and_corpus_objects())


def _unit(co, parts=None):
    source = decode_family(co.target.processor)
    insts, spans = build_unit(co, source, [r for r in function_ranges(co) if r[3] >= 0], parts)
    addresses = np.array([i.address for i in insts], dtype=np.int64)
    ends = np.full(len(insts), -1, dtype=np.int64)
    for s in spans:
        if s.end > s.start:
            ends[s.end - 1] = s.address + s.size
    return source, insts, addresses, ends


def test_known_ids_are_the_eids_of_the_bytes():
    for co in _objects():
        with decode_memo():
            FACTS.clear()
            scan = scan_text(co, source := decode_family(co.target.processor), keep_ids=True)
            parts: list = []
            source, insts, addresses, ends = _unit(co, parts)
            assert scan.known is not None
            assert scan_text(co, source).known is None  # (the rewriter's scans keep no ids)
            text = co.text[:len(co.text) // 4 * 4]
            got = known_ids(scan.known, insts, source, addresses, text, co.text_vaddr, ends)
            by_bytes = encoding_ids(insts, source)  # each instruction by its own bytes
            assert got.tolist() == by_bytes.tolist()
            # the same lists as the scan's: its columns, sliced
            whole = known_unit(scan.known, parts, source)
            assert whole is not None
            assert whole[0].tolist() == addresses.tolist() and whole[1].tolist() == by_bytes.tolist()


def test_a_different_size_or_an_emptied_cache_is_not_taken():
    co = next(_objects())
    with decode_memo():
        FACTS.clear()
        source, insts, addresses, ends = _unit(co)
        text = co.text[:len(co.text) // 4 * 4]
        right = encoding_ids(insts, source).tolist()
        wrong = np.full(len(insts), 10**9, dtype=np.int64)
        sizes = dword_counts(addresses, ends)
        bad = KnownIds(source, addresses, sizes + 1, wrong)  # another decoding at each address
        assert known_ids(bad, insts, source, addresses, text, co.text_vaddr, ends).tolist() == right
        stale = KnownIds(source, addresses, sizes, wrong)
        parts: list = []
        _unit(co, parts)
        stale.lists = {id(p): (p, 0) for p in parts}
        assert known_unit(stale, parts[:1], source) is not None  # (this generation)
        FACTS.clear()  # (the eids of the last generation mean nothing now)
        right = encoding_ids(insts, source).tolist()
        assert known_ids(stale, insts, source, addresses, text, co.text_vaddr, ends).tolist() == right
        assert known_unit(stale, parts[:1], source) is None
        assert known_unit(KnownIds(source, addresses, sizes, wrong), parts, source) is None  # (lists not its own)


def test_no_hash_lookup_per_object(monkeypatch):
    """The scan of ``.text`` takes each instruction's encoding from the
    decode's columns (facts.encoding_ids_of_columns) and the functions take
    the scan's eids: no instruction is hashed (test above: the eids are
    those of each instruction's bytes)."""
    calls = []
    real = facts_mod.FactsCache.lookup_hashes

    def counted(self, *a, **k):
        calls.append(1)
        return real(self, *a, **k)

    monkeypatch.setattr(facts_mod.FactsCache, "lookup_hashes", counted)
    co = next(_objects())
    assert analyse(co).kernels
    assert len(calls) == 0


def test_function_ranges_copies_text_once(monkeypatch):
    """function_ranges reads ``.text`` (a copy of the section) once, not once per kernel."""
    from kpatch.analysis.engine import function_ranges
    from kpatch.codeobject.model import CodeObject as Model

    co = next(_objects())
    assert len(co.kernels) >= 2
    calls = []
    real = Model.text
    monkeypatch.setattr(Model, "text", property(lambda self: calls.append(1) or real.fget(self)))
    assert len(function_ranges(co)) >= len(co.kernels)
    assert len(calls) <= 1



def _sliced(known, parts):
    """A broken known_unit: the scan's columns from the first part on, as
    long as all the parts together, whether or not they lie back to back."""
    lo = known.lists[id(parts[0])][1]
    n = sum(map(len, parts))
    return known.addresses[lo:lo + n], known.eids[lo:lo + n]


def test_known_unit_views_and_gathers():
    """known_unit gives each part's own addresses and eids (those of its
    instructions and of their bytes) whether the parts lie back to back in
    the scan (all of a unit's functions, in order: views, read-only) or not
    (one left out, or the order turned round: gathered); a version that
    took the back-to-back slice regardless would be caught."""
    caught = 0
    for co in _objects():
        with decode_memo():
            FACTS.clear()
            source = decode_family(co.target.processor)
            scan = scan_text(co, source, keep_ids=True)
            parts: list = []
            _unit(co, parts)
            parts = [p for p in parts if p]
            cases = [parts, parts[::-1]] + ([parts[:1] + parts[2:]] if len(parts) > 2 else [])
            for i, case in enumerate(cases):
                flat = [ins for p in case for ins in p]
                ref = (np.array([ins.address for ins in flat], dtype=np.int64), encoding_ids(flat, source))
                got = known_unit(scan.known, case, source)
                assert got is not None
                assert got[0].tolist() == ref[0].tolist() and got[1].tolist() == ref[1].tolist()
                if i == 0:
                    assert not got[0].flags.writeable and not got[1].flags.writeable  # (views of the scan's)
                    assert np.shares_memory(got[1], scan.known.eids)
                else:
                    bad = _sliced(scan.known, case)
                    caught += bad[0].tolist() != ref[0].tolist() or bad[1].tolist() != ref[1].tolist()
    assert caught
