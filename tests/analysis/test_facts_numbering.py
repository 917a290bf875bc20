"""The numbering of new encodings by VGPR-blind key in bulk (issue 14):
FactsCache._eids_of_new groups the new encodings by their keys as numbers
(facts.blind_key_rows, numpy) and does Python work once per new key and
once per encoding without one, giving the numbers the one-by-one rule
gives (facts.encoding_ids without code: every instruction by its bytes,
FactsCache.new per new encoding, the reference), on the mathops fixture
and librocrand's gfx1030 code; also when an encoding check names the VGPRs
(such facts are not shared: each encoding of the key has its own)."""

from __future__ import annotations

import numpy as np
import kpatch.analysis.facts as facts_mod
from conftest import fixture_and_corpus_objects
from kpatch.analysis.engine import decode_family, function_ranges
from kpatch.analysis.facts import FACTS, VALU, encoding_ids, encoding_ids_of_columns, vgpr_blind_key
from kpatch.isa.decodememo import columns_of, decode_memo, decode_ranges


def _units():
    """(parts as encoding_ids_of_columns takes them, the instructions, source) of each object."""
    out = []
    for co in fixture_and_corpus_objects():
        source = decode_family(co.target.processor)
        with decode_memo():
            lists = decode_ranges(co.text, source, co.text_vaddr,
                                  sorted((a, b) for _, _, _, a, b in function_ranges(co) if a >= 0))
            parts = [(i, columns_of(i).ids, columns_of(i).table, columns_of(i).words) for i in lists]
        out.append((parts, [i for insts in lists for i in insts], source))
    return out


def _both(parts, flat, source):
    """(eids by the columns, eids by the bytes, facts made by each), each from an empty cache."""
    FACTS.clear()
    cols = encoding_ids_of_columns(parts, source).tolist()
    n_cols = len(FACTS.all)
    FACTS.clear()
    ref = encoding_ids(flat, source).tolist()
    return cols, ref, n_cols, len(FACTS.all)


def test_numbering_by_keys_is_the_numbering_by_bytes():
    for parts, flat, source in _units():
        cols, ref, n_cols, n_ref = _both(parts, flat, source)
        assert cols == ref and n_cols == n_ref
        assert len(set(ref)) < len({i.raw for i in flat})  # (keys shared: the grouping was used)


def _vgpr_naming_check(f):
    """A check whose finding names the VGPRs (so its facts are not shared)
    for every VALU encoding with a scalar source... here: v_add_* and v_mul_*."""
    if f.cls & VALU and f.mnemonic.startswith(("v_add_", "v_mul_")):
        return ("Test", f.inst.text())
    return None


def test_numbering_when_a_check_names_the_vgprs(monkeypatch):
    monkeypatch.setattr(facts_mod, "ENCODING_CHECKS", [*facts_mod.ENCODING_CHECKS, _vgpr_naming_check])
    for parts, flat, source in _units():
        cols, ref, n_cols, n_ref = _both(parts, flat, source)
        assert cols == ref and n_cols == n_ref
        local = [f for f in FACTS.all if any(r[0] == "Test" for r in f.local)]
        keyed = {vgpr_blind_key(f.inst) for f in local} - {None}
        assert len(local) > len(keyed) > 0  # (several encodings of one key, each with its own facts)
    FACTS.clear()


class _CountingDict(dict):
    """A dict that counts its ``get`` calls."""

    gets = 0

    def get(self, key, default=None):
        _CountingDict.gets += 1
        return super().get(key, default)


def test_python_work_once_per_new_key(monkeypatch):
    """The templates are looked up once per distinct key among the new
    encodings (and once more for a key whose first encoding made new
    facts), not once per encoding."""
    parts, flat, source = _units()[-1]
    FACTS.clear()
    FACTS.templates = _CountingDict()
    _CountingDict.gets = 0
    encoding_ids_of_columns(parts, source)
    ds = list(dict.fromkeys(d for p in parts for d in p[2]))
    keys = [facts_mod._blind_key(d) for d in ds]
    keyed = sum(k is not None for k in keys)
    distinct = len(set(keys) - {None})
    assert keyed > 2 * distinct  # (the corpus repeats keys: a per-encoding lookup would show)
    assert _CountingDict.gets <= 2 * distinct + (len(keys) - keyed)
    FACTS.clear()


def test_a_broken_key_is_caught(monkeypatch):
    """The comparison above catches keys that lose a part (here the
    literal: encodings with different literals would share facts)."""
    real = facts_mod.blind_key_rows

    def no_literal(ds, rows):
        has, base, rest, size = real(ds, rows)
        return has, base, rest & np.uint64(0xFFFFFFFF00000000), size
    monkeypatch.setattr(facts_mod, "blind_key_rows", no_literal)
    differ = 0
    for parts, flat, source in _units():
        cols, ref, _, _ = _both(parts, flat, source)
        differ += cols != ref
    assert differ
    FACTS.clear()


def test_numeric_keys_are_equal_exactly_when_the_keys_are():
    literals = 0
    for parts, _, _ in _units():
        ds = list(dict.fromkeys(d for p in parts for d in p[2]))
        has, base, rest, _ = facts_mod.blind_key_rows(ds, facts_mod._raw_rows([d.raw for d in ds]))
        keys = [facts_mod._blind_key(d) for d in ds]
        assert [k is not None for k in keys] == (has == 1).tolist()
        by_number: dict = {}
        by_tuple: dict = {}
        for k, h, b, r in zip(keys, has.tolist(), base.tolist(), rest.tolist()):
            if h == 1:
                by_number.setdefault((b, r), set()).add(k)
                by_tuple.setdefault(k, set()).add((b, r))
        assert all(len(v) == 1 for v in by_number.values()) and all(len(v) == 1 for v in by_tuple.values())
        literals += sum(bool(k[2]) for k in by_tuple)
    assert literals  # (keys with literals among them)


def test_bytes_then_find_the_eids_the_columns_gave():
    """The encodings numbered through their key's template are not kept by
    their bytes (FactsCache.table), yet looking them up by their bytes
    afterwards gives the same eids and makes no facts."""
    for parts, flat, source in _units():
        FACTS.clear()
        cols = encoding_ids_of_columns(parts, source).tolist()
        n = len(FACTS.all)
        assert len(FACTS.table(source)) < len({i.raw for i in flat})  # (some only by their key)
        assert encoding_ids(flat, source).tolist() == cols and len(FACTS.all) == n
    FACTS.clear()


def test_the_decodes_words_are_the_bytes_of_its_encodings():
    """Columns.words (the numbers the decode looked each encoding up by,
    which the numbering looks eids up by) are the bytes of each table
    entry of one or two dwords, and asking for them leaves the decode as
    it is (every range as kpatch.isa.decode gives it; encodings of three
    dwords and more among them)."""
    from kpatch.isa import decode
    longer = 0
    for co in fixture_and_corpus_objects():
        source = decode_family(co.target.processor)
        ranges = sorted((a, b) for _, _, _, a, b in function_ranges(co) if a >= 0)
        with decode_memo():
            lists = decode_ranges(co.text, source, co.text_vaddr, ranges)
            cols = [columns_of(i) for i in lists]
        for (a, b), insts in zip(ranges, lists):
            alone = decode(co.text[a:b], source, co.text_vaddr + a)
            assert [(i.address, i.raw) for i in insts] == [(i.address, i.raw) for i in alone]
            longer += sum(i.size > 8 for i in insts)
        ndw, w = cols[0].words
        table = cols[0].table
        assert len(ndw) == len(table) and (ndw > 0).sum() > 0.9 * len(table)
        for d, k, x in zip(table, ndw.tolist(), w.tolist()):
            if k:
                assert d.raw == x.to_bytes(8, "little")[:4 * k]
    assert longer


def test_rows_from_the_decodes_numbers_are_the_rows_of_the_bytes():
    """facts._number_rows (the dwords of new encodings of one or two dwords
    from Columns.words, the others from their bytes) gives what _raw_rows
    gives from every encoding's bytes; with a number's high dword dropped
    it does not (the comparison sees it)."""
    seen = 0
    for parts, _, _ in _units():
        for _, _, table, (ndw, w) in parts[:3]:
            want = facts_mod._raw_rows([d.raw for d in table])
            got = facts_mod._number_rows(table, ndw, w)
            assert got is not None and np.array_equal(got, want)
            two = ndw == 2
            if two.any():
                seen += 1
                broken = facts_mod._number_rows(table, ndw, w & np.uint64(0xFFFFFFFF))
                assert not np.array_equal(broken, want)
    assert seen


def test_sorted_ids_take_numbers_in_any_order():
    """_SortedIds.add sorts only numbers not given sorted: numbers added
    sorted, unsorted and in several calls (merged into the large part) are
    each found with their id, numbers not added are not (-1)."""
    rng = np.random.default_rng(7)
    # 3000 distinct numbers 1 + 977k below 2^40, drawn without making the 1.1G candidates
    # (np.arange of them peaked the test process at 8.8 GiB)
    k = rng.choice((1 << 40) // 977, size=3000, replace=False).astype(np.uint64)
    nums = np.uint64(1) + k * np.uint64(977)
    ids = np.arange(len(nums), dtype=np.int64) * 3 + 1
    s = facts_mod._SortedIds()
    o = np.argsort(nums)
    rest = np.sort(o[100:])  # (the others, in their given order)
    s.add(nums[o[:100]], ids[o[:100]])  # sorted
    s.add(nums[rest[:1900]][::-1], ids[rest[:1900]][::-1])  # unsorted
    for lo in range(1900, len(rest), 250):  # a few small calls
        s.add(nums[rest[lo:lo + 250]], ids[rest[lo:lo + 250]])
    sorted_nums = np.sort(nums)
    assert len(s) == len(nums)
    got = s.get(nums)
    assert np.array_equal(got, ids)  # every number, its own id
    absent = nums + np.uint64(1)
    assert (s.get(absent) == -1).all()
    assert np.array_equal(s.get(sorted_nums), ids[np.argsort(nums)])
