"""The decode memo keeps the decode's columns of each list it hands out
(decodememo.columns_of): per instruction the index of its encoding in a
table of Decoded; the facts lookup works from them per distinct encoding
(facts.encoding_ids_of_columns) and must give the eids of the bytes."""

from __future__ import annotations


import numpy as np

from conftest import fixture_and_corpus_objects
from kpatch.analysis.engine import decode_family, function_ranges
from kpatch.analysis.facts import FACTS, encoding_ids, encoding_ids_of_columns
from kpatch.isa.decodememo import columns_of, decode_memo, decode_ranges


def _objects():
    return iter(fixture_and_corpus_objects())


def _ranges(co):
    return sorted((a, b) for _, _, _, a, b in function_ranges(co) if a >= 0)


def test_columns_describe_each_list_and_give_the_eids_of_the_bytes():
    for co in _objects():
        source = decode_family(co.target.processor)
        with decode_memo():
            lists = decode_ranges(co.text, source, co.text_vaddr, _ranges(co))
            parts = []
            for insts in lists:
                got = columns_of(insts)
                assert got is not None
                ids, table = got.ids, got.table
                assert len(ids) == len(insts)
                assert all(table[i] is ins.d for i, ins in zip(ids.tolist(), insts))
                assert got.addrs.tolist() == [ins.address for ins in insts]
                parts.append((insts, ids, table))
            flat = [i for insts in lists for i in insts]
            FACTS.clear()
            cols = encoding_ids_of_columns(parts, source).tolist()
            n_cols = len(FACTS.all)
            FACTS.clear()
            by_bytes = encoding_ids(flat, source).tolist()  # each instruction by its own bytes
            assert cols == by_bytes  # (same eids, new ones numbered in the same order)
            assert len(FACTS.all) == n_cols
            # again: each Decoded's eid is remembered (FACTS.by_decoded), no new facts
            assert encoding_ids_of_columns(parts, source).tolist() == by_bytes
            assert len(FACTS.all) == n_cols and len(FACTS.by_decoded) > 0
            # a part whose ids point at the wrong table entries gives other eids
            insts, ids, table = parts[0]
            if len(set(ids.tolist())) > 1:
                FACTS.clear()
                wrong = encoding_ids_of_columns([(insts, np.roll(ids, 1), table)], source).tolist()
                assert wrong != by_bytes[:len(insts)]


def test_no_columns_outside_the_memo_or_for_a_copy():
    co = next(_objects())
    source = decode_family(co.target.processor)
    lists = decode_ranges(co.text, source, co.text_vaddr, _ranges(co))
    assert columns_of(lists[0]) is None  # (decoded outside a memo)
    with decode_memo():
        lists = decode_ranges(co.text, source, co.text_vaddr, _ranges(co))
        assert columns_of(lists[0]) is not None
        assert columns_of(list(lists[0])) is None
    assert columns_of(lists[0]) is None  # (the memo is over)


def test_a_decoded_made_again_gets_the_eid_of_its_bytes():
    """After the decoder's cache is emptied the same bytes decode to new
    Decoded objects: they get the eids of their bytes, not new facts."""
    from kpatch.isa.decoder import cache_for
    co = next(_objects())
    source = decode_family(co.target.processor)

    def eids():
        with decode_memo():
            lists = decode_ranges(co.text, source, co.text_vaddr, _ranges(co))
            return encoding_ids_of_columns([(i, columns_of(i).ids, columns_of(i).table) for i in lists], source).tolist(), lists

    FACTS.clear()
    first, lists = eids()
    n = len(FACTS.all)
    cache = cache_for(source)
    for m in (cache.c4, cache.c8, cache.big):
        m.clear()
    again, lists2 = eids()
    assert lists2[0][0].d is not lists[0][0].d  # (decoded anew)
    assert again == first and len(FACTS.all) == n
