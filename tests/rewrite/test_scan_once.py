"""The patcher scans the original ``.text`` once (issue 14): the scan it
makes serves the analysis, the reach of kernels (calls) and the rewriter,
instead of each scanning the same code again.  Verification scans the
patched ``.text`` once more (it is other code).  The rewrite with the
shared scan gives the same bytes and outcomes as one that scans for itself."""

from __future__ import annotations

import os

import pytest

from kpatch.analysis import codescan
from kpatch.codeobject import CodeObject
from kpatch.rewrite import patcher, relocate

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
OBJECTS = ["calls.hip.gfx1030.hsaco", "reloc_cases.gfx1030.hsaco", "calls_dot.hip.gfx1030.hsaco"]


def _read(name: str) -> bytes:
    with open(os.path.join(DATA, name), "rb") as fh:
        return fh.read()


def _scanned_texts(monkeypatch) -> list[bytes]:
    """The ``.text`` bytes of every scan made from now on."""
    seen: list[bytes] = []
    real = codescan._decode_units

    def spy(co, text_index, start, end, data, *a, **k):
        seen.append(bytes(data))
        return real(co, text_index, start, end, data, *a, **k)

    monkeypatch.setattr(codescan, "_decode_units", spy)
    return seen


def test_original_text_is_scanned_once(monkeypatch):
    data = _read("calls.hip.gfx1030.hsaco")  # calls: the reach of kernels is worked out too
    text = CodeObject.from_bytes(data).text
    seen = _scanned_texts(monkeypatch)
    r = patcher.patch_code_object(data, mode="override")
    assert r.data is not None and any(k.status == "patched" for k in r.kernels)
    new_text = CodeObject.from_bytes(r.data).text
    assert new_text != text
    assert seen.count(text) == 1  # the analysis, reachable_units and the rewriter share it
    assert seen.count(new_text) == 1  # verify


@pytest.mark.parametrize("name", OBJECTS)
@pytest.mark.parametrize("mode", ["override", "native"])
def test_shared_scan_gives_what_an_own_scan_gives(name, mode, monkeypatch):
    data = _read(name)
    shared = patcher.patch_code_object(data, mode=mode)
    real = relocate.rewrite

    def own_scan(*a, scan=None, **k):
        return real(*a, **k)

    monkeypatch.setattr(relocate, "rewrite", own_scan)
    own = patcher.patch_code_object(data, mode=mode)
    assert shared.data == own.data
    assert [(k.name, k.status, k.reason, k.rules) for k in shared.kernels] == \
        [(k.name, k.status, k.reason, k.rules) for k in own.kernels]
    assert shared.relocations == own.relocations
