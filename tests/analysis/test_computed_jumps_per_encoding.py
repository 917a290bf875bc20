"""codescan's bound of computed jumps and its check that a long branch's
temporary is dead ask their per-instruction questions once per encoding
(``codescan._PerEncoding``, ``codescan._step``): the jumps it bounds, the
problems it records and the units it links are exactly those of asking every
instruction (the plain class below, and no answers kept), on real code with computed jumps: a rocBLAS Tensile
library (every kernel ends in an ``s_setpc_b64`` long-branch sequence) and
the calls fixture (``s_swappc_b64`` calls and returns).  A per-encoding
table keyed by less than the encoding (the format) is caught."""

from __future__ import annotations

import os

import pytest

from conftest import ROCBLAS_LIBRARY
from kpatch.analysis import codescan
from kpatch.codeobject import CodeObject

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TENSILE = os.path.join(ROCBLAS_LIBRARY, "TensileLibrary_Type_I8I_HPA_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx1030.co")
CALLS = os.path.join(ROOT, "tests", "rewrite", "data", "calls.hip.gfx1030.hsaco")


class _EveryInstruction:
    """The plain questions: each instruction asked on its own."""

    def __init__(self, insts: list, answers: dict) -> None:
        self.insts = insts

    def column(self, question, f) -> list:
        return [f(ins) for ins in self.insts]

    def having(self, question, f) -> list[int]:
        return [k for k, ins in enumerate(self.insts) if f(ins)]


class _ByFormat(codescan._PerEncoding):
    """Broken: one answer per instruction format (SOPP, SOP1, ...), whatever the opcode and operands."""

    def __init__(self, insts: list, answers: dict) -> None:
        self.insts = insts
        self.ds = [ins.format for ins in insts]
        self.last = dict(zip(self.ds, range(len(self.ds))))
        self.answers = answers


class _Forgetful(dict):
    """Answers that are never kept: every question asked again."""

    def setdefault(self, key, default=None):
        return {}


def _bounds(path: str, monkeypatch, per, keep: bool = True) -> tuple:
    monkeypatch.setattr(codescan, "_PerEncoding", per)
    if not keep:
        real = codescan._tmp_dead
        monkeypatch.setattr(codescan, "_tmp_dead", lambda scan, ui, gp, answers: real(scan, ui, gp, _Forgetful()))
    s = codescan.scan_text(CodeObject.from_bytes(open(path, "rb").read()), "gfx1030")
    return (sorted((k, sorted(v)) for k, v in s.jumps.items()),
            [(p.unit, p.address, p.cls, p.kind, p.reason, p.ui) for p in s.problems],
            sorted((k, sorted(v)) for k, v in s.edges.items()))


@pytest.mark.parametrize("path", [TENSILE, CALLS], ids=["tensile", "calls"])
def test_per_encoding_equals_every_instruction(path, monkeypatch):
    if not os.path.exists(path):
        pytest.skip(f"{path} is not fetched (tools/fetch_sid.sh)")
    want = _bounds(path, monkeypatch, _EveryInstruction, keep=False)
    assert want[0]  # there are computed jumps to bound
    assert _bounds(path, monkeypatch, codescan._PerEncoding) == want


def test_a_table_keyed_by_format_is_caught(monkeypatch):
    if not os.path.exists(TENSILE):
        pytest.skip(f"{TENSILE} is not fetched (tools/fetch_sid.sh)")
    assert _bounds(TENSILE, monkeypatch, _ByFormat) != _bounds(TENSILE, monkeypatch, _EveryInstruction)

