"""UnsupportedInstruction, OpcodeReuse, InstFwdPrefetchBug: what gfx1010's
decoder makes of each encoding.

Each distinct encoding of gfx103x code is decoded again for gfx1010 (through
:func:`kpatch.isa.decode_one`), once, when its facts are made (the checks
here are registered as encoding checks): an encoding gfx1010 does not decode
is unsupported, one it decodes as another instruction is reused.  Two operand
modes decode on both targets but are gfx1030-only: scratch "ST" mode
(saddr = 0x7F, no address register) and hwreg 29 (HW_REG_SHADER_CYCLES) in
s_getreg/s_setreg.
"""

from __future__ import annotations

from kpatch.analysis.detectors.context import Context
from kpatch.analysis.facts import M_LOCAL, UNKNOWN, Facts, register_encoding_check
from kpatch.analysis.findings import Finding
from kpatch.isa import decode_one
from kpatch.isa.dots import int_dot
from kpatch.isa.tables import OpInfo, load

#: saddr value of GFX10.3 scratch "ST" mode (neither VGPR nor SGPR address)
SCRATCH_ST_SADDR = 0x7F
#: hardware register id of SHADER_CYCLES (GFX10.3 only)
HWREG_SHADER_CYCLES = 29
_HWREG_OPS = ("s_getreg_b32", "s_setreg_b32", "s_setreg_imm32_b32")


def _own_target(f: Facts):
    """Checks that apply to code of any target."""
    if f.mnemonic == "s_inst_prefetch":
        return ("InstFwdPrefetchBug", f"{f.inst.text()} must not execute on gfx101x")
    if f.cls & UNKNOWN:
        return ("UnsupportedInstruction", f"{f.inst.text()} is not a valid instruction")
    return None


def _gfx1010_reading(f: Facts):
    """For gfx103x code: does gfx1010 read these bytes the same way?  A
    finding is (class, detail), or (class, detail, rule set or None,
    [mitigation]) when it is not the class's default."""
    inst = f.inst
    d = inst.d  # (its slots read directly: this runs for every new encoding)
    if d.target == "gfx1010":
        return None
    if f.seg == 1 and d.fmt is not None and d.fmt.name == "FLAT" and d.fields.get("saddr") == SCRATCH_ST_SADDR:
        return ("UnsupportedInstruction", f"{inst.text()}: scratch ST mode (no address register) is gfx1030-only")
    if f.mnemonic in _HWREG_OPS and (f.simm16 or 0) & 0x3F == HWREG_SHADER_CYCLES:
        return ("UnsupportedInstruction", f"{inst.text()}: HW_REG_SHADER_CYCLES does not exist on gfx1010")
    if f.cls & UNKNOWN:
        return None  # reported by _own_target
    info = d.info
    if _read_alike(d.target).get(id(info)) is info:
        return None  # gfx1010's decoder reads it exactly as the source's (see _read_alike)
    other = decode_one(inst.raw, "gfx1010")
    if other.is_unknown or other.size != inst.size:
        dot = int_dot(inst.mnemonic, inst.format, inst.d.fields)
        if dot is not None and dot.problem is None:  # exact: fix int-dot-expand (rule KI006)
            return ("UnsupportedInstruction", f"{inst.text()} does not exist on gfx1010", "gfx1010-isa",
                    INT_DOT_MITIGATION)
        if dot is not None:
            return ("UnsupportedInstruction", f"{inst.text()} with {dot.problem}",
                    None)
        return ("UnsupportedInstruction", f"{inst.text()} does not exist on gfx1010")
    if other.mnemonic != inst.mnemonic:
        text = inst.text()
        if f.mnemonic in EXACT_GFX1010_FORM:
            return ("OpcodeReuse", f"{text} (gfx1030) is {other.text()} on gfx1010")
        return ("OpcodeReuse", f"{text} (gfx1030) is {other.text()} on gfx1010", None)
    return None


#: Name tables the decoder's text reads only for an opcode's immediate of
#: that style (:func:`kpatch.isa.special.imm_text`); the others (DPP
#: controls, buffer formats, export targets) any opcode of a format may read.
_IMM_NAMES = frozenset({"hwreg", "sendmsg"})
_ALIKE: dict[str, dict[int, OpInfo]] = {}


def _read_alike(target: str) -> dict[int, OpInfo]:
    """The opcodes (id -> OpInfo of ``target``'s tables) whose encodings
    gfx1010 decodes exactly as ``target`` does, so that decoding them again
    would give the same instruction: gfx1010's entry for the same format and
    opcode key is equal to ``target``'s (mnemonic, operand forms, SDWA/DPP
    forms, zero fields, literal and image sizing -- everything measuring,
    validating and printing an encoding reads from the opcode), and every
    name table the printing may read for it is the same on both targets.
    The decoder's one other target test, scratch "ST" mode on gfx1010, is
    :func:`_gfx1010_reading`'s own check, made first."""
    got = _ALIKE.get(target)
    if got is None:
        got = _ALIKE[target] = {}
        src, dst = load(target), load("gfx1010")
        differ = {k for k in src.names.keys() | dst.names.keys() if src.names.get(k) != dst.names.get(k)}
        if differ <= _IMM_NAMES:  # (else every opcode is decoded again)
            for fmt, ops in src.ops.items():
                for key, info in ops.items():
                    if info.imm not in differ and dst.get(fmt, key) == info:
                        got[id(info)] = info
    return got


#: how an integer dot product gfx1010 can compute exactly is fixed
INT_DOT_MITIGATION = "expand into SDWA 24-bit multiplies and adds (rule KI006, int-dot-expand)"

#: Reused encodings whose gfx1030 meaning has an exact gfx1010 form (none
#: known: the legacy fused multiply-adds have no gfx1010 counterpart).
EXACT_GFX1010_FORM: frozenset[str] = frozenset()

def _own_target_may_find(o, d) -> bool:
    """Whether :func:`_own_target` can find anything in an opcode's encodings."""
    return o.mnemonic == "s_inst_prefetch" or bool(o.cls & UNKNOWN)


def _gfx1010_reading_may_find(o, d) -> bool:
    """Whether :func:`_gfx1010_reading` can find anything in the encodings
    of an opcode (``o``: its facts, ``d``: one Decoded of it), decided once
    per opcode: not for gfx1010 code, nor for an unknown word, nor for an
    opcode gfx1010 reads alike (:func:`_read_alike`) -- unless its
    encodings can be scratch ST mode (FLAT) or name a hardware register
    (s_getreg/s_setreg), which are decided by their fields."""
    if d.target == "gfx1010":
        return False
    if o.fmt == "FLAT" or o.mnemonic in _HWREG_OPS:
        return True
    if o.cls & UNKNOWN:
        return False
    return _read_alike(d.target).get(id(d.info)) is not d.info


register_encoding_check(_own_target, _own_target_may_find)
register_encoding_check(_gfx1010_reading, _gfx1010_reading_may_find)
_CLASSES = ("InstFwdPrefetchBug", "UnsupportedInstruction", "OpcodeReuse")


def detect(ctx: Context) -> list[Finding]:
    facts = ctx.facts
    insts = ctx.insts
    out = []
    prev = -2
    for k in ctx.marked(M_LOCAL):
        unknown = bool(facts[k].cls & UNKNOWN)
        if unknown and prev == k - 1 and ctx.function_of(k).start < k:
            prev = k
            continue  # one finding for a run of undecodable words
        prev = k if unknown else -2
        for r in facts[k].local:
            if r[0] in _CLASSES:
                if len(r) > 2:  # the rule set that fixes it (None: no exact gfx1010 replacement), how
                    out.append(Finding(r[0], insts[k].address, r[1], *r[3:], fix=r[2],
                                       blocker=None if r[2] else f"{r[0]}: {r[1]} has no exact gfx1010 form"))
                else:
                    out.append(Finding(r[0], insts[k].address, r[1]))
    return out
