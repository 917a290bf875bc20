"""The decode caches stay out of later garbage collections (issue 14): a
``no_gc`` block that grew the caches freezes what it built, so a full
collection inside later timed work (analysis, patching) does not traverse
them; blocks that add little freeze nothing, so that garbage cycles alive at
their end are still collected later."""

from __future__ import annotations

import gc
import weakref

import pytest

from kpatch.isa import decode
from kpatch.isa import decoder
from kpatch.isa.decoder import cache_for, no_gc


class Node:
    pass


def _tracked_ids() -> set[int]:
    return {id(o) for o in gc.get_objects()}


@pytest.fixture
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_a_block_that_grew_the_caches_freezes_them(unfrozen, monkeypatch):
    monkeypatch.setattr(decoder, "FREEZE_AFTER", 1)
    code = bytes.fromhex("0200047e" "0300067e" "ff00087e" "78563412" "00009fbf") * 3
    insts = decode(code, "gfx1030")
    d = insts[0].d
    assert cache_for("gfx1030").c4.get(int.from_bytes(code[:4], "little")) is d  # the cached one
    assert gc.is_tracked(d)
    assert id(d) not in _tracked_ids()  # the collector no longer traverses it
    assert gc.get_freeze_count() > 0
    gc.collect()
    assert cache_for("gfx1030").c4.get(int.from_bytes(code[:4], "little")) is d


def test_many_new_objects_are_frozen_few_are_not(unfrozen):
    with no_gc():
        few = [Node() for _ in range(10)]
    assert gc.get_freeze_count() == 0 and id(few[0]) in _tracked_ids()
    with no_gc():
        many = [Node() for _ in range(decoder.FREEZE_AFTER)]
    assert gc.get_freeze_count() >= len(many) and id(many[0]) not in _tracked_ids()


def test_nested_blocks_freeze_once_at_the_end(unfrozen, monkeypatch):
    monkeypatch.setattr(decoder, "FREEZE_AFTER", 1)
    with no_gc():
        with no_gc():
            keep = [Node() for _ in range(10)]
        assert gc.get_freeze_count() == 0  # the inner block ended: the collector is still off
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() > 0 and keep


def test_no_gc_leaves_a_disabled_collector_disabled(unfrozen):
    gc.disable()
    try:
        with no_gc():
            keep = [Node() for _ in range(decoder.FREEZE_AFTER)]
        assert not gc.isenabled() and gc.get_freeze_count() == 0 and keep
    finally:
        gc.enable()


def test_cycles_that_became_garbage_inside_a_freezing_block_are_freed(unfrozen):
    with no_gc():
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the collector frees it
        gone = weakref.ref(a)
        del a, b
        keep = [Node() for _ in range(decoder.FREEZE_AFTER)]
        assert gone() is not None
    assert gc.get_freeze_count() > 0 and keep
    assert gone() is None  # not frozen as garbage for the rest of the process


def test_a_cycle_alive_at_the_end_of_a_small_block_is_collected_later(unfrozen):
    with no_gc():
        a, b = Node(), Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
    del a, b
    gc.collect()
    assert gone() is None
