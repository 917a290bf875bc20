"""The integer dot products, and when gfx1010 can compute one exactly.

gfx1030 has ``v_dot4c_i32_i8`` (VOP2: D = D + dot), ``v_dot4_i32_i8``,
``v_dot4_u32_u8``, ``v_dot2_i32_i16``, ``v_dot2_u32_u16`` (VOP3P: D = C +
dot) and the 4-bit dots; gfx1010 has none of them.  Without clamp each is
the sum, modulo 2^32, of the products of the sign- or zero-extended 8- or
16-bit elements of its two sources plus the accumulator.  gfx1010 computes
the same sum with one SDWA ``v_mul_{i32_i24,u32_u24}`` per element (SDWA
selects and extends byte/word k of both sources; the product of two 8- or
16-bit integers is exact in 32 bits) and one ``v_add_nc_u32`` each.

:func:`int_dot` reads an instruction's operands in that light; the
analysis uses it to tell an expandable dot from one kpatch must refuse, the
rewriter (fix ``int-dot-expand``) to build the sequence: one rule, one place.
"""

from __future__ import annotations

from dataclasses import dataclass

from kpatch.isa.operands import VGPR_BASE, inline_int

#: mnemonic (as llvm-objdump prints it) -> (signed, bits per element, elements)
INT_DOTS = {
    "v_dot4c_i32_i8_e32": (True, 8, 4),
    "v_dot4_i32_i8": (True, 8, 4),
    "v_dot4_u32_u8": (False, 8, 4),
    "v_dot2_i32_i16": (True, 16, 2),
    "v_dot2_u32_u16": (False, 16, 2),
}
#: VOP3P fields of the plain form (no clamp, no op_sel, no negation)
VOP3P_PLAIN = dict(op_sel=0, op_sel_hi=3, op_sel_hi2=1, neg=0, neg_hi=0, clamp=0)
#: 9-bit source values s0..s105
SGPR_MAX = 105
VGPR0 = VGPR_BASE


@dataclass(frozen=True)
class IntDot:
    """An integer dot's meaning: ``d = c + sum(a[k] * b[k])`` over ``n``
    elements of ``bits`` bits (``signed``: sign-extended), as 9-bit source
    values (VGPR n = 256 + n) and the destination VGPR number ``d``;
    ``problem`` names what kpatch's expansion cannot translate (None: it
    can): clamp (saturation) or operand modifiers, a multiplicand that is
    not a VGPR (SDWA selects elements of VGPRs), an unusual accumulator."""

    signed: bool
    bits: int
    n: int
    a: int
    b: int
    c: int
    d: int
    problem: str | None = None


def int_dot(mnemonic: str, fmt: str, f: dict[str, int]) -> IntDot | None:
    """The dot product an instruction (its mnemonic, format name and fields)
    computes, or None if it is not one of :data:`INT_DOTS`."""
    shape = INT_DOTS.get(mnemonic)
    if shape is None:
        return None
    problem = None
    if fmt == "VOP2":
        a, b, c, d = f["src0"], VGPR0 + f["vsrc1"], VGPR0 + f["vdst"], f["vdst"]
    else:
        a, b, c, d = f["src0"], f["src1"], f["src2"], f["vdst"]
        if any(f.get(k) != v for k, v in VOP3P_PLAIN.items()):
            problem = "clamp or operand modifiers"
    if problem is None and (a < VGPR0 or b < VGPR0):
        problem = "an SGPR or constant multiplicand"
    if problem is None and not (c >= VGPR0 or c <= SGPR_MAX or inline_int(c) is not None):
        problem = "an accumulator that is not a VGPR, SGPR or inline integer"
    return IntDot(*shape, a, b, c, d, problem)
