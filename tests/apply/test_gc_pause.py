"""Apply pauses the garbage collector while it reads and patches a code
object (issue 14: reading a real object's metadata note, symbols and
descriptors makes hundreds of thousands of small acyclic objects, and the
collections they triggered traversed the decode caches of the objects
patched before: full collections inside ``apply --db``)."""

from __future__ import annotations

import gc
import os
import sys

import kpatch

from kpatch.apply.blob import patch_code_object_checked
from kpatch.apply.modes import default_patch_fn, default_provenance_fn
from kpatch.codeobject import CodeObject
from kpatch.containers.discover import Found, discover
from kpatch.data import expand

#: kpatch's folders that read and patch code objects
WORK = tuple(os.path.join(os.path.dirname(kpatch.__file__), d) + os.sep
             for d in ("elf", "codeobject", "isa", "analysis", "rewrite"))


def _gfx1030_object() -> bytes:
    for item in discover([expand("@sample")]):
        if isinstance(item, Found):
            co = CodeObject.from_bytes(item.data, lossless=False)
            if co.target is not None and co.target.processor == "gfx1030" and co.kernels:
                return item.data
    raise AssertionError("@sample has no gfx1030 code object")


def _collections_during(fn) -> tuple[int, object]:
    """How many collections started while ``fn()`` ran, with a threshold
    that collects on nearly every allocation, inside the reading or
    patching of an object (a frame of :data:`WORK` on the stack; those on
    entering and leaving the pause are not), and what it returned."""
    started = []

    def watch(phase, info):
        if phase == "start":
            f = sys._getframe(1)
            while f is not None and not (f.f_code.co_filename.startswith(WORK) and f.f_code.co_name != "no_gc"):
                f = f.f_back
            if f is not None:
                started.append((info["generation"], f.f_code.co_filename, f.f_lineno))

    thresholds = gc.get_threshold()
    gc.callbacks.append(watch)
    gc.set_threshold(1, 1, 1)
    try:
        got = fn()
    finally:
        gc.set_threshold(*thresholds)
        gc.callbacks.remove(watch)
    return len(started), got


def test_no_collection_while_an_object_is_read_and_patched():
    data = _gfx1030_object()
    assert gc.isenabled()
    n, result = _collections_during(lambda: patch_code_object_checked(
        data, mode="override", rule_sets=[], patch_fn=default_patch_fn("override"),
        is_patched=default_provenance_fn()))
    assert n == 0
    assert gc.isenabled()  # (resumed after)
    assert result.kernels  # (the object was read and its kernels reported)


def test_the_watch_sees_collections_outside_the_pause():
    # the check above can fail: reading the same object without the pause collects
    data = _gfx1030_object()
    n, _ = _collections_during(lambda: CodeObject.from_bytes(data, lossless=False).kernels)
    assert n > 0
