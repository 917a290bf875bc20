"""Offset3fBug, FlatSegmentOffsetBug, NegativeUnalignedScratchOffsetBug:
encodings that are valid on gfx1010 but hit a gfx101x bug by their fields
alone."""

from __future__ import annotations

from kpatch.analysis.detectors.context import Context
from kpatch.analysis.facts import FLAT, M_LOCAL, Facts, register_encoding_check
from kpatch.analysis.flow import COND, JUMP
from kpatch.analysis.findings import Finding
from kpatch.isa.operands import signed12

OFFSET_3F = 0x3F
SADDR_OFF = 0x7D  # FLAT saddr "off": the address is in VGPRs
SEG_FLAT, SEG_SCRATCH = 0, 1


def _check(f: Facts):
    if f.flow in (JUMP, COND) and f.simm16 == OFFSET_3F:
        return ("Offset3fBug", f"{f.inst.text()}: branch offset 0x3f")
    if f.cls & FLAT and f.offset:
        if f.seg == SEG_FLAT:
            return ("FlatSegmentOffsetBug", f"{f.inst.text()}: flat access with immediate offset {f.offset}")
        off = signed12(f.offset)
        if f.seg == SEG_SCRATCH and f.inst.fields.get("saddr") == SADDR_OFF and off < 0 and off % 4:
            return ("NegativeUnalignedScratchOffsetBug",
                    f"{f.inst.text()}: VGPR address with negative unaligned offset {off}")
    return None


def _may_find(o, d) -> bool:
    """Whether :func:`_check` can find anything in an encoding of ``o``'s
    opcode: only branches (their offset) and FLAT (its segment and offset)
    are looked at, and both are decided by the opcode (``o.flow``, and
    ``o.cls``'s FLAT bit, which the segment does not change)."""
    return o.flow in (JUMP, COND) or bool(o.cls & FLAT)


register_encoding_check(_check, _may_find)
_CLASSES = ("Offset3fBug", "FlatSegmentOffsetBug", "NegativeUnalignedScratchOffsetBug")


def detect(ctx: Context) -> list[Finding]:
    facts = ctx.facts
    insts = ctx.insts
    return [Finding(r[0], insts[k].address, r[1]) for k in ctx.marked(M_LOCAL) for r in facts[k].local
            if r[0] in _CLASSES]
