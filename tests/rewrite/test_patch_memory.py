"""Patching never holds the original's analysis while the patched object is
verified: nothing of it (its control-flow graph, and through it every
instruction of the object) is alive when verify() starts."""

from __future__ import annotations

import gc

from kpatch.analysis.cfg import CFG
from kpatch.containers.discover import Found, discover
from kpatch.data import expand
from kpatch.rewrite import patcher


def test_the_originals_analysis_is_gone_before_verify(monkeypatch):
    """Only graphs made while patching count: tests that ran before may keep
    their own analyses alive (module caches, fixtures)."""
    alive = []
    real = patcher.verify
    gc.collect()
    earlier = [o for o in gc.get_objects() if type(o) is CFG]  # held, so their ids stay theirs
    known = {id(o) for o in earlier}

    def spy(*a, **k):
        gc.collect()
        alive.append(sum(1 for o in gc.get_objects() if type(o) is CFG and id(o) not in known))
        return real(*a, **k)

    monkeypatch.setattr(patcher, "verify", spy)
    written = 0
    for item in discover([expand("@sample")]):
        if isinstance(item, Found):
            written += patcher.patch_code_object(item.data, mode="override").data is not None
    assert written and len(alive) == written
    assert alive == [0] * written


def test_the_collection_before_verify_is_of_the_youngest_generation_only(monkeypatch):
    """The garbage of the original's analysis is collected before verify
    without a full collection (which would traverse every decode cache of
    the process, seconds in a long `apply --db`): every collection while
    patching is of generation 0, and it leaves no graph of the original
    alive (counted without collecting again)."""
    gens = []

    def seen(phase, info):
        if phase == "start":
            gens.append(info["generation"])

    alive = []
    real = patcher.verify
    gc.collect()
    known = {id(o) for o in gc.get_objects() if type(o) is CFG}

    def spy(*a, **k):
        alive.append(sum(1 for o in gc.get_objects() if type(o) is CFG and id(o) not in known))
        return real(*a, **k)

    monkeypatch.setattr(patcher, "verify", spy)
    monkeypatch.setattr(patcher, "_COLLECT_FROM", 0)  # collect for every object
    gc.callbacks.append(seen)
    try:
        for item in discover([expand("@sample")]):
            if isinstance(item, Found):
                patcher.patch_code_object(item.data, mode="override")
    finally:
        gc.callbacks.remove(seen)
    assert alive and alive == [0] * len(alive)
    assert gens and set(gens) == {0}
