"""The hazard engine's per-encoding roles and masks in bulk (issue 14):
each wait-state rule's column form (``MaskRule.columns``, numpy over
per-encoding attribute columns) gives, encoding by encoding, exactly the
row its Python form gives (``HazardEngine._row``: check, gen and kill of
every rule), over every distinct encoding of a fixture and of the first
librocrand object (SALU, SMEM, VALU with SGPR destinations, v_cmpx,
permlane, DS, FLAT, MUBUF among them)."""

from __future__ import annotations

import dataclasses
from operator import attrgetter

import numpy as np
import pytest

from kpatch.analysis.detectors import waitstates
from kpatch.analysis.facts import FACTS, FactsCache, FactsColumns, Facts
from kpatch.analysis.dataflow import HazardEngine

pytestmark = pytest.mark.llvm


def _objects():
    from conftest import fixture_and_corpus_objects
    return fixture_and_corpus_objects()


#: encodings the objects may lack: every rule's check, gen and kill (llvm-mc-16)
EXTRA = """
  v_cmpx_eq_u32 v1, v2
  v_cmpx_eq_u32_e64 v1, v2
  v_permlane16_b32 v0, v1, s2, s3
  v_permlanex16_b32 v0, v1, s2, s3
  v_nop
  v_readlane_b32 s5, v1, 2
  s_waitcnt_depctr 0xffe3
  s_waitcnt_depctr 0xfffe
  s_waitcnt_vscnt null, 0
  s_waitcnt_lgkmcnt null, 0
  s_waitcnt 0
  s_waitcnt lgkmcnt(0)
  s_and_saveexec_b32 s4, s6
  s_mov_b32 exec_lo, s0
  s_cbranch_execz 1
  s_load_dword s7, s[0:1], 0x0
  buffer_load_dword v1, v2, s[4:7], 0 offen
  global_load_dword v2, v[0:1], off
  scratch_load_dword v2, v0, off
  flat_load_dword v2, v[0:1]
  ds_read_b32 v1, v2
  s_endpgm
"""


@pytest.fixture(scope="module")
def distinct_facts() -> list[Facts]:
    from kpatch.analysis import analyse
    from kpatch.analysis.facts import encoding_ids
    from kpatch.isa import decode
    from tests.analysis.asm import assemble
    FACTS.clear()
    for co in _objects():
        analyse(co)
    code, _ = assemble(EXTRA)
    encoding_ids(decode(code, "gfx1030", 0), "gfx1030")
    assert len(FACTS.all) > 1000
    return list(FACTS.all)


def _python_rows(engine: HazardEngine, facts: list[Facts]) -> np.ndarray:
    return np.array([engine._row(f) for f in facts], dtype=np.uint64)


def test_column_forms_give_the_rows_of_the_python_forms(distinct_facts):
    engine = HazardEngine(waitstates.RULES)  # (a fresh engine: nothing compiled or cached yet)
    bulk = engine._rows_bulk(0, len(distinct_facts))
    want = _python_rows(engine, distinct_facts)
    assert bulk.shape == want.shape
    assert (bulk == want).all()
    # every rule checks, gens and kills somewhere in these encodings
    roles = want[:, 0]
    for i in range(len(waitstates.RULES)):
        for bit in range(3):
            assert (roles & np.uint64(1 << (3 * i + bit))).any(), (waitstates.RULES[i].name, bit)


def test_a_column_form_that_disagrees_is_seen(distinct_facts):
    """The comparison above catches a column form that drops one case
    (VMEMtoScalarWriteHazard's gens without DS)."""
    from kpatch.analysis.facts import DS, FLAT, VMEM
    rules = list(waitstates.RULES)
    broken = dataclasses.replace(rules[0], columns=lambda c: (
        waitstates._where(c.int("cls") & (waitstates.SALU | waitstates.SMEM), c.mask("sdefs", 2)),
        waitstates._where(c.int("cls") & (VMEM | FLAT), c.mask("sreads", 2)), c.int("kill_vm")))
    assert DS  # (the class the broken form forgets)
    engine = HazardEngine([broken, *rules[1:]])
    bulk = engine._rows_bulk(0, len(distinct_facts))
    assert not (bulk == _python_rows(engine, distinct_facts)).all()


def test_the_engine_takes_the_bulk_rows():
    """The wait-state engine's columns come from the column forms (no
    per-encoding Python row)."""
    assert all(r.columns is not None for r in waitstates.RULES)
    FACTS.clear()
    from kpatch.analysis import analyse
    calls = []
    real = HazardEngine._row
    try:
        HazardEngine._row = lambda self, f: calls.append(f) or real(self, f)
        analyse(_objects()[0])
    finally:
        HazardEngine._row = real
    assert calls == []
    assert FactsColumns  # (the columns the forms read)


_M64 = (1 << 64) - 1
_MASKS = ("sreads", "sdefs", "valu_sdst", "swrites")


def _chunk_rows(facts: list[Facts], name: str, chunks: int) -> list[list[int]]:
    """Each 64-bit chunk of a mask attribute, by shifting (the definition)."""
    return [[(getattr(f, name) >> (64 * ch)) & _M64 for f in facts] for ch in range(chunks)]


def test_mask_columns_are_the_chunks_of_the_masks(distinct_facts):
    """FactsCache.mask_columns (every value's chunks from its bytes) gives
    each 64-bit chunk of the register masks, the high one (VCC, EXEC,
    ttmp, m0) included."""
    cache = FactsCache()  # (its own: the module's cache stays as the fixture left it)
    n = len(distinct_facts)
    cache.all.extend(distinct_facts)
    high = 0
    for name in _MASKS:
        cols = cache.mask_columns(name, 2)
        want = _chunk_rows(distinct_facts, name, 2)
        assert [c.tolist() for c in cols] == want, name
        high += sum(map(bool, want[1]))
        low = FactsCache()  # (the low chunk alone, worked out on its own: the same)
        low.all.extend(distinct_facts)
        assert low.mask_columns(name, 1)[0].tolist() == want[0]
    assert high
    # a version that read the bytes in the other order would be caught
    name = "sreads"
    swapped = np.frombuffer(b"".join(v.to_bytes(16, "big") for v in map(attrgetter(name), distinct_facts)),
                            dtype="<u8").reshape(n, 2)
    assert [swapped[:, ch].tolist() for ch in range(2)] != _chunk_rows(distinct_facts, name, 2)
