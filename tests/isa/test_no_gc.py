"""The decode caches stay out of later garbage collections (issue 14): after
a ``no_gc`` block the objects it built are frozen, so a full collection
inside later timed work (analysis, patching) does not traverse them."""

from __future__ import annotations

import gc

from kpatch.isa import decode
from kpatch.isa.decoder import cache_for, no_gc


def _tracked_ids() -> set[int]:
    return {id(o) for o in gc.get_objects()}


def test_objects_built_inside_no_gc_are_not_collected_over_again():
    gc.unfreeze()
    code = bytes.fromhex("0200047e" "0300067e" "ff00087e" "78563412" "00009fbf") * 3  # v_mov_b32s + a literal
    insts = decode(code, "gfx1030")
    d = insts[0].d
    assert cache_for("gfx1030").c4.get(int.from_bytes(code[:4], "little")) is d  # it is the cached one
    assert gc.is_tracked(d)
    # the collector no longer sees it: collections (gen 0, 1 or 2) skip it
    assert id(d) not in _tracked_ids()
    assert gc.get_freeze_count() > 0
    gc.collect()
    assert cache_for("gfx1030").c4.get(int.from_bytes(code[:4], "little")) is d


def test_nested_blocks_freeze_once_at_the_end():
    gc.unfreeze()
    with no_gc():
        with no_gc():
            pass
        assert gc.get_freeze_count() == 0  # the inner block ended: the collector is still off
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() > 0


def test_no_gc_leaves_a_disabled_collector_disabled():
    gc.unfreeze()
    gc.disable()
    try:
        with no_gc():
            pass
        assert not gc.isenabled() and gc.get_freeze_count() == 0
    finally:
        gc.enable()


def test_cycles_that_became_garbage_inside_the_block_are_freed():
    import weakref

    class Node:
        pass

    gc.unfreeze()
    with no_gc():
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the collector frees it
        gone = weakref.ref(a)
        del a, b
        assert gone() is not None
    assert gone() is None  # not frozen as garbage for the rest of the process
