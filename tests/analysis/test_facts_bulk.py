"""Per-encoding facts in bulk (issue 14): encodings that differ only in
the VGPRs they name share one Facts (one eid, so per-eid columns and the
hazard engine's compiled roles are worked out once for them); the numpy
path of encoding_ids gives every instruction the eid its own bytes give,
hash collisions included.  Encodings from llvm-mc-16."""

from __future__ import annotations

import numpy as np
import pytest

import kpatch.analysis.facts as facts_mod
from kpatch.analysis.facts import FACTS, encoding_ids
from kpatch.isa import decode
from tests.analysis.asm import assemble

pytestmark = pytest.mark.llvm

SOURCE = """
  v_add_f32 v0, v1, v2
  v_add_f32 v7, v9, v4
  v_add_f32 v0, s1, v2
  v_add_f32 v0, s3, v2
  v_cmp_eq_u32 vcc_lo, v1, v2
  v_cmp_eq_u32 vcc_lo, v5, v6
  v_cmp_eq_u32 s4, v1, v2
  v_cmp_eq_u32 s6, v8, v9
  ds_read_b64 v[0:1], v2
  ds_read_b64 v[4:5], v7
  global_load_dword v2, v[0:1], off
  global_load_dword v5, v[6:7], off
  global_load_dword v2, v0, s[4:5]
  global_load_dword v2, v0, s[6:7]
  s_add_u32 s0, s1, s2
  s_add_u32 s0, s1, s3
  s_endpgm
"""


def _insts():
    code, _ = assemble(SOURCE)
    return code, decode(code, "gfx1030", 0x1000)


def _numpy_ids(code, insts):
    addresses = np.array([i.address for i in insts], dtype=np.int64)
    ends = np.full(len(insts), -1, dtype=np.int64)
    ends[-1] = insts[-1].address + insts[-1].size
    return encoding_ids(insts, "gfx1030", addresses=addresses, code=code, base=0x1000, ends=ends)


def test_vgpr_variants_share_their_facts():
    FACTS.clear()
    code, insts = _insts()
    e = _numpy_ids(code, insts).tolist()
    pairs = [(2 * j, 2 * j + 1) for j in range(8)]
    same = [e[a] == e[b] for a, b in pairs]
    # VGPRs only: one eid; an SGPR (scalar source, sdst, saddr) differs: two
    assert same == [True, False, True, False, True, True, False, False]
    # and the facts hold the scalar registers of the first of them
    assert FACTS.all[e[6]].sdefs == 0 and FACTS.all[e[4]].valu_sdst == FACTS.all[e[5]].valu_sdst != 0


def test_numpy_path_matches_the_bytes_even_on_hash_collisions(monkeypatch):
    FACTS.clear()
    code, insts = _insts()
    by_bytes = encoding_ids(insts, "gfx1030").tolist()  # no addresses: each by its bytes
    FACTS.clear()
    monkeypatch.setattr(facts_mod, "_hash", lambda rows: np.zeros(len(rows), dtype=np.uint64))
    got = _numpy_ids(code, insts).tolist()
    assert got == by_bytes
    assert _numpy_ids(code, insts).tolist() == by_bytes  # a second time, through the sorted hashes


def test_numpy_path_works_in_chunks_with_the_eids_of_one_pass(monkeypatch):
    """encoding_ids hashes and looks up at most ID_CHUNK instructions at a
    time (its per-instruction arrays were those of a whole 18 MB .text:
    apply's peak memory on the largest Tensile object), and the chunks give
    every instruction the eid its own bytes give, new encodings numbered in
    the order of their first occurrence as in one pass."""
    code, insts = _insts()
    insts = insts * 3  # (the same addresses again: a chunk meets hashes an earlier one added)
    FACTS.clear()
    by_bytes = encoding_ids(insts, "gfx1030").tolist()
    seen = []
    real = FACTS.lookup_hashes
    monkeypatch.setattr(FACTS, "lookup_hashes", lambda target, h, *a: seen.append(len(h)) or real(target, h, *a))
    monkeypatch.setattr(facts_mod, "ID_CHUNK", 5)
    FACTS.clear()
    addresses = np.array([i.address for i in insts], dtype=np.int64)
    ends = np.full(len(insts), -1, dtype=np.int64)
    n = len(insts) // 3
    for r in range(3):
        ends[r * n + n - 1] = insts[-1].address + insts[-1].size
    # (three runs of the same code, each at the same addresses: ids by the bytes)
    got = []
    for r in range(3):
        got += encoding_ids(insts[r * n:(r + 1) * n], "gfx1030", addresses=addresses[r * n:(r + 1) * n],
                            code=code, base=0x1000, ends=ends[r * n:(r + 1) * n]).tolist()
    assert got == by_bytes
    assert seen and max(seen) <= 5 and sum(seen) == len(insts)


def blind_keys(ds: list, raws: list[bytes]) -> list:
    """vgpr_blind_key of each of the encodings ``ds`` (``raws``: their
    bytes) as tuples, read from facts.blind_key_rows (the same keys,
    element for element, where the rows describe them)."""
    from kpatch.analysis.facts import _blind_key, _raw_rows, blind_key_rows

    rows = _raw_rows(raws)
    if rows is None:
        return [_blind_key(d) for d in ds]
    has, base, _, size = blind_key_rows(ds, rows)
    return [(d.target, w, raw[n:]) if h == 1 else _blind_key(d) if h < 0 else None
            for d, raw, h, w, n in zip(ds, raws, has.tolist(), base.tolist(), size.tolist())]


def test_blind_keys_in_bulk_are_the_one_by_one_keys():
    """blind_key_rows (numpy over per-opcode field rows) gives vgpr_blind_key's
    key for every distinct encoding of a fixture, the llvm-mc list above
    and the first corpus object (VALU with literals, DS, FLAT, SDWA/DPP and
    scalar forms among them)."""
    from conftest import fixture_and_corpus_objects
    from kpatch.analysis.codescan import scan_text
    from kpatch.analysis.facts import vgpr_blind_key
    from kpatch.isa.decodememo import decode_memo

    objs = fixture_and_corpus_objects()
    _, insts = _insts()
    groups = [insts]
    keyed = 0
    for co in objs:
        with decode_memo():
            scan = scan_text(co, "gfx1030")
            seen = {}
            for ins in scan.insts:
                seen.setdefault(ins.raw, ins)
            groups.append(list(seen.values()))
            for group in groups:
                want = [vgpr_blind_key(i) for i in group]
                assert blind_keys([i.d for i in group], [i.raw for i in group]) == want
                keyed += sum(k is not None for k in want)
    assert keyed > 100
