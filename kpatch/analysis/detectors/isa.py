"""UnsupportedInstruction, OpcodeReuse, InstFwdPrefetchBug: what gfx1010's
decoder makes of each encoding.

Each distinct encoding of gfx103x code is decoded again for gfx1010 (through
:func:`kpatch.isa.decode_one`): an encoding gfx1010 does not decode is
unsupported, one it decodes as another instruction is reused.  Two operand
modes decode on both targets but are gfx1030-only: scratch "ST" mode
(saddr = 0x7F, no address register) and hwreg 29 (HW_REG_SHADER_CYCLES) in
s_getreg/s_setreg.
"""

from __future__ import annotations

from kpatch.analysis.detectors.context import Context, local_hits
from kpatch.analysis.facts import M_LOCAL, UNKNOWN, Facts
from kpatch.analysis.findings import Finding
from kpatch.isa import decode_one

#: saddr value of GFX10.3 scratch "ST" mode (neither VGPR nor SGPR address)
SCRATCH_ST_SADDR = 0x7F
#: hardware register id of SHADER_CYCLES (GFX10.3 only)
HWREG_SHADER_CYCLES = 29
_HWREG_OPS = ("s_getreg_b32", "s_setreg_b32", "s_setreg_imm32_b32")

_MEMO_1030: dict = {}
_MEMO_1010: dict = {}


def _own_target(f: Facts):
    """Checks that apply to code of any target."""
    if f.mnemonic == "s_inst_prefetch":
        return ("InstFwdPrefetchBug", f"{f.inst.text()} must not execute on gfx101x")
    if f.cls & UNKNOWN:
        return ("UnsupportedInstruction", f"{f.inst.text()} is not a valid instruction")
    return None


def _gfx103x(f: Facts):
    """Checks for gfx103x code: does gfx1010 read these bytes the same way?"""
    r = _own_target(f)
    if r is not None:
        return r
    inst = f.inst
    fields = inst.fields
    text = inst.text()
    if inst.format == "FLAT" and f.seg == 1 and fields.get("saddr") == SCRATCH_ST_SADDR:
        return ("UnsupportedInstruction", f"{text}: scratch ST mode (no address register) is gfx1030-only")
    if f.mnemonic in _HWREG_OPS and (f.simm16 or 0) & 0x3F == HWREG_SHADER_CYCLES:
        return ("UnsupportedInstruction", f"{text}: HW_REG_SHADER_CYCLES does not exist on gfx1010")
    other = decode_one(inst.raw, "gfx1010")
    if other.is_unknown or other.size != inst.size:
        return ("UnsupportedInstruction", f"{text} does not exist on gfx1010")
    if other.mnemonic != inst.mnemonic:
        return ("OpcodeReuse", f"{text} (gfx1030) is {other.text()} on gfx1010")
    return None


def detect(ctx: Context) -> list[Finding]:
    if ctx.compiled_for_gfx101x:
        hits = local_hits(ctx, _own_target, _MEMO_1010, ctx.marked(M_LOCAL))
    else:
        hits = local_hits(ctx, _gfx103x, _MEMO_1030)
    out = []
    for k, (cls, detail) in hits:
        out.append(Finding(cls, ctx.insts[k].address, detail))
    return out
