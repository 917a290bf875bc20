"""analyse() decodes each function once: the rewriter's scan of .text and
the analysis of the functions share one decode (issue 14: analysis cost)."""

from __future__ import annotations

import os

import kpatch.isa.decodememo as dm
from conftest import FIXTURES
from kpatch.analysis import analyse
from kpatch.codeobject import CodeObject


def test_analyse_decodes_the_code_once(monkeypatch):
    walks = []
    real = dm._decode_together

    def counting(code, target, base, ranges, *seeds):
        walks.append(list(ranges))
        return real(code, target, base, ranges, *seeds)

    monkeypatch.setattr(dm, "_decode_together", counting)
    with open(os.path.join(FIXTURES, "mathops.hip.gfx1030.v5.hsaco"), "rb") as fh:
        co = CodeObject.from_bytes(fh.read())
    report = analyse(co)
    assert report.kernels
    assert len(walks) == 1, walks
    # and the memo ends with the analysis: a second one decodes again
    analyse(co)
    assert len(walks) == 2
