"""The V# detector's backward walk to the writers of an SGPR (vsharp.reaching_writers,
which reads each block's last writer, worked out for all blocks at once) against the plain
walk it replaced, instruction by instruction: the same writers, the same
entry flag, the same give-up point after MAX_STEPS instructions; and the
buffer instructions it starts from (vsharp.descriptor_reads, a column per
encoding) against the per-instruction rule."""

from __future__ import annotations

import glob
import os

import pytest

from conftest import ROCBLAS_LIBRARY
from kpatch.analysis.detectors import vsharp
from kpatch.analysis.engine import bounded_jumps, function_ranges, unit_context
from kpatch.analysis.codescan import scan_text
from kpatch.analysis.facts import M_BUFFER, mask_of
from kpatch.isa.operands import sgpr_number
from kpatch.codeobject import CodeObject

HERE = os.path.dirname(os.path.abspath(__file__))
OBJECTS = [os.path.join(HERE, "..", "fixtures", "hazards", "bin", "descriptors.gfx1030.hsaco")] + sorted(glob.glob(
    os.path.join(ROCBLAS_LIBRARY, "TensileLibrary_Type_BB_HPA_Contraction_l_Ailk_Bjlk_Cijk_Dijk_fallback_gfx1030.hsaco")))


def plain_walk(ctx, k: int, bit: int, max_steps: int) -> tuple[list[int], bool]:
    """The reference: look at every instruction going back, block by block."""
    cfg, facts = ctx.cfg, ctx.facts
    found, entry, seen, steps = set(), False, set(), 0
    work = [(cfg.block_at(k), k - 1)]
    while work and steps < max_steps:
        b, j = work.pop()
        start = int(cfg.block_start[b])
        while j >= start:
            steps += 1
            if mask_of(facts[j].inst.writes) >> bit & 1:
                found.add(j)
                break
            j -= 1
        else:
            entry = entry or not cfg.preds[b]
            for p in cfg.preds[b]:
                if p not in seen:
                    seen.add(p)
                    work.append((p, int(cfg.block_end[p]) - 1))
    return sorted(found), entry


def _context(path: str):
    co = CodeObject.from_bytes(open(path, "rb").read())
    scan = scan_text(co, "gfx1030")
    return unit_context(co, "gfx1030", co.target.processor, [r for r in function_ranges(co) if r[3] >= 0],
                        jumps=bounded_jumps(scan))


@pytest.mark.parametrize("max_steps", [vsharp.MAX_STEPS, 1, 7, 60])
@pytest.mark.parametrize("path", OBJECTS, ids=os.path.basename)
def test_the_walk_finds_what_the_plain_walk_finds(path, max_steps, monkeypatch):
    monkeypatch.setattr(vsharp, "MAX_STEPS", max_steps)
    ctx = _context(path)
    buffers = list(ctx.marked(M_BUFFER))[:150]
    assert buffers
    memo: dict = {}
    for n, k in enumerate(buffers):
        word3 = ctx.insts[k].fields["srsrc"] * 4 + 3
        for bit in (word3, word3 - 3, n % 106, 106, 126):
            assert vsharp.reaching_writers(ctx, k, bit, memo) == plain_walk(ctx, k, bit, max_steps), (k, bit)


def plain_descriptor_reads(ctx) -> list[tuple[int, int]]:
    """The reference: each buffer instruction, its srsrc's last SGPR if it reads it."""
    out = []
    for k in ctx.marked(M_BUFFER):
        word3 = sgpr_number("srsrc", ctx.insts[k].fields["srsrc"]) + 3
        if ctx.facts[k].sreads >> word3 & 1:
            out.append((k, word3))
    return out


@pytest.mark.parametrize("path", OBJECTS, ids=os.path.basename)
def test_descriptor_reads_are_those_of_each_instruction(path):
    """vsharp.descriptor_reads (a column per encoding) picks the buffer
    instructions the per-instruction rule picks, buffer_gl*_inv left out."""
    ctx = _context(path)
    want = plain_descriptor_reads(ctx)
    assert want
    assert vsharp.descriptor_reads(ctx) == want


def test_a_selection_that_keeps_every_buffer_instruction_is_seen(monkeypatch):
    """The comparison above sees a column that forgets the descriptor-read test."""
    from kpatch.analysis.facts import FACTS
    path = OBJECTS[-1]
    ctx = _context(path)
    assert any(ctx.insts[k].mnemonic.startswith("buffer_gl") for k in ctx.marked(M_BUFFER))
    broken = ("vsharp", "word3", "broken")
    monkeypatch.setattr(vsharp, "_WORD3", broken)
    monkeypatch.setattr(vsharp, "_word3", lambda f: sgpr_number("srsrc", f.inst.fields["srsrc"]) + 3
                        if f.marks & M_BUFFER else -1)
    try:
        assert vsharp.descriptor_reads(ctx) != plain_descriptor_reads(ctx)
    finally:
        FACTS.columns.pop(broken, None)
        FACTS.buffers.pop(broken, None)
