"""Operand values of GFX10 instructions and their llvm-objdump spelling.

What an operand field denotes, for the printer (:mod:`kpatch.isa.text`),
the register lists (:mod:`kpatch.isa.regs`), the analysis, the rewriter and
the emulator alike: the SGPR a scaled scalar field names
(:func:`sgpr_number`), the VGPRs of a FLAT address (:func:`flat_addr_width`),
the register widths of an image instruction (:func:`mimg_operands`), inline
constants, signed offsets and clause lengths.

A scalar operand field (SOP ``sdst``/``ssrc``, SMEM, MUBUF ``soffset``...) and
a 9-bit VOP source field share one value space: 0-105 SGPRs, 106/107 VCC,
108-123 trap temporaries, 124 M0, 125 null, 126/127 EXEC, 128-208 integer
inline constants, 235-239 and 251-254 special sources, 240-248 float inline
constants, 255 a literal, 256-511 VGPRs.  This module names those values and
spells inline constants and literals by operand type, the way LLVM's
AMDGPUInstPrinter does.

Operand *types* (``b32``, ``b64``, ``i16``, ``f16``, ``v2i16``, ``v2f16``)
only matter for constants: they are recorded per source operand in the
opcode tables.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kpatch.isa.tables import OpInfo

VGPR_BASE = 256
LITERAL = 255

#: Special scalar register values (single dword) and their names.
SPECIAL32 = {
    106: "vcc_lo", 107: "vcc_hi", 124: "m0", 125: "null", 126: "exec_lo", 127: "exec_hi",
    235: "src_shared_base", 236: "src_shared_limit", 237: "src_private_base",
    238: "src_private_limit", 239: "src_pops_exiting_wave_id", 251: "src_vccz",
    252: "src_execz", 253: "src_scc", 254: "src_lds_direct",
}
#: Names of special values used as 64-bit operands (missing: invalid as 64-bit).
SPECIAL64 = {
    106: "vcc", 125: "null", 126: "exec",
    235: "src_shared_base", 236: "src_shared_limit", 237: "src_private_base",
    238: "src_private_limit", 239: "src_pops_exiting_wave_id", 251: "src_vccz",
    252: "src_execz", 253: "src_scc",
}

_F32 = {0.5: 0x3F000000, -0.5: 0xBF000000, 1.0: 0x3F800000, -1.0: 0xBF800000,
        2.0: 0x40000000, -2.0: 0xC0000000, 4.0: 0x40800000, -4.0: 0xC0800000}
#: Inline float constants 240..248 by value, text per width.
INLINE_FLOAT_TEXT = ("0.5", "-0.5", "1.0", "-1.0", "2.0", "-2.0", "4.0", "-4.0")
INV2PI_TEXT32 = "0.15915494"
INV2PI_TEXT64 = "0.15915494309189532"
F32_BITS = (0x3F000000, 0xBF000000, 0x3F800000, 0xBF800000, 0x40000000, 0xC0000000,
            0x40800000, 0xC0800000, 0x3E22F983)
F16_BITS = (0x3800, 0xB800, 0x3C00, 0xBC00, 0x4000, 0xC000, 0x4400, 0xC400, 0x3118)
F64_BITS = (0x3FE0000000000000, 0xBFE0000000000000, 0x3FF0000000000000, 0xBFF0000000000000,
            0x4000000000000000, 0xC000000000000000, 0x4010000000000000, 0xC010000000000000,
            0x3FC45F306DC9C882)
_F32_TEXT = {bits: (INLINE_FLOAT_TEXT + (INV2PI_TEXT32,))[i] for i, bits in enumerate(F32_BITS)}
_F16_TEXT = {bits: (INLINE_FLOAT_TEXT + (INV2PI_TEXT32,))[i] for i, bits in enumerate(F16_BITS)}


def reg_range(prefix: str, index: int, count: int) -> str:
    """``v7`` or ``v[6:7]`` style register text."""
    if count == 1:
        return f"{prefix}{index}"
    return f"{prefix}[{index}:{index + count - 1}]"


def _align(index: int, count: int) -> int:
    """SGPR tuples are printed aligned (LLVM prints s[20:21] for an odd 21)."""
    if count == 1:
        return index
    a = 2 if count == 2 else 4
    return index - index % a


def sgpr_text(value: int, count: int) -> str | None:
    """Text of a 7/8-bit scalar register value covering ``count`` dwords, or None.

    Only registers: constants are handled by :func:`src_text`.
    """
    if value <= 105:
        value = _align(value, count)
        if count > 1 and value + count > 106:
            return None
        return reg_range("s", value, count)
    if 108 <= value <= 123:
        t = _align(value - 108, count)
        if count > 1 and t + count > 16:
            return None
        return reg_range("ttmp", t, count)
    if count == 1:
        return SPECIAL32.get(value)
    if count == 2:
        return SPECIAL64.get(value)
    return None


def vgpr_text(index: int, count: int) -> str | None:
    """Text of a VGPR index covering ``count`` registers (None past v255)."""
    if index + count > 256:
        return None
    return reg_range("v", index, count)


def inline_int(value: int) -> int | None:
    """The integer of an inline integer constant encoding (128..208)."""
    if 128 <= value <= 192:
        return value - 128
    if 193 <= value <= 208:
        return 192 - value
    return None


def inline_u32(value: int) -> int | None:
    """The 32 bits an inline constant encoding (128..208, 240..248) gives a
    32-bit operand: the integer in two's complement, or the float's f32
    bits; None for any other encoding."""
    i = inline_int(value)
    if i is not None:
        return i & 0xFFFFFFFF
    if 240 <= value <= 248:
        return F32_BITS[value - 240]
    return None


def inline_code(n: int) -> int | None:
    """The encoding of the integer ``n`` as an inline constant (-16..64:
    128..208; the inverse of :func:`inline_int`), or None when it needs a
    literal."""
    if 0 <= n <= 64:
        return 128 + n
    if -16 <= n < 0:
        return 192 - n
    return None


def inline_text(value: int, optype: str) -> str | None:
    """Text of an inline constant encoding 128..208 / 240..248 for ``optype``."""
    i = inline_int(value)
    if i is not None:
        return str(i)
    if 240 <= value <= 248:
        k = value - 240
        if optype in ("i16", "v2i16"):
            return "0x%x" % F16_BITS[k]
        if k == 8:
            return INV2PI_TEXT64 if optype in ("b64", "f64") else INV2PI_TEXT32
        return INLINE_FLOAT_TEXT[k]
    return None


def signed12(v: int) -> int:
    """The signed value of a 12-bit field (GFX10 FLAT/GLOBAL/SCRATCH ``offset``)."""
    return v - 0x1000 if v & 0x800 else v


def clause_length(simm16: int | None) -> int:
    """How many instructions after ``s_clause simm16`` form its clause (simm16 + 1)."""
    return (simm16 or 0) + 1


def _signed32(v: int) -> int:
    return v - (1 << 32) if v & 0x80000000 else v


def literal_text(lit: int, optype: str) -> str:
    """Text of a 32-bit literal used by an operand of ``optype``."""
    if optype in ("b64", "f64"):
        if lit <= 64:
            return str(lit)
        return "0x%x" % lit
    if optype in ("i16", "f16"):
        v = lit & 0xFFFF
        s = v - 0x10000 if v & 0x8000 else v
        if -16 <= s <= 64:
            return str(s)
        if optype == "f16" and v in _F16_TEXT:
            return _F16_TEXT[v]
        return "0x%x" % v
    if optype == "v2f16" and lit <= 0xFFFF:
        v = lit
        s = v - 0x10000 if v & 0x8000 else v
        if -16 <= s <= 64:
            return str(s)
        if v in _F16_TEXT:
            return _F16_TEXT[v]
    s = _signed32(lit)
    if -16 <= s <= 64:
        return str(s)
    t = _F32_TEXT.get(lit)
    if t is not None:
        return t
    return "0x%x" % lit


INVALID_IMMEDIATE = "/*invalid immediate*/"
LDS_DIRECT_SREG = "src_lds_direct/*Invalid register, operand has 'SReg_32' register class*/"


def src_text(value: int, count: int, optype: str, literal: int | None,
             lds_comment: bool = True) -> str | None:
    """Text of a 9-bit (or 8-bit scalar) source value; None when invalid.

    Operands of type ``reg`` take registers only: LLVM prints constants in
    them as ``/*invalid immediate*/``.  ``lds_comment``: spell value 254 the
    way LLVM does in a scalar-only operand (operands of the opcode tables
    carry their own spelling of it instead)."""
    if optype == "vreg":
        return vgpr_text(value & 0xFF, count)
    if value >= VGPR_BASE:
        return vgpr_text(value - VGPR_BASE, count)
    if optype == "reg" and (128 <= value <= 208 or 240 <= value <= 248 or value == LITERAL):
        return INVALID_IMMEDIATE
    if value == LITERAL:
        if literal is None:
            return None
        return literal_text(literal, optype)
    t = inline_text(value, optype)
    if t is not None:
        return t
    if value == 254 and count == 1:
        return LDS_DIRECT_SREG if lds_comment else "src_lds_direct"
    return sgpr_text(value, count)


def f32_bits(x: float) -> int:
    """IEEE single bits of ``x`` (helper for builders and tests)."""
    return struct.unpack("<I", struct.pack("<f", x))[0]


#: SGPR number = field value * scale for these fields (SMEM ``sbase`` names
#: an aligned pair, MUBUF/MIMG ``srsrc`` and ``ssamp`` an aligned quad)
FIELD_SCALE = {"sbase": 2, "srsrc": 4, "ssamp": 4}


def sgpr_number(field: str, value: int) -> int:
    """The first SGPR the scalar register field ``field`` of value ``value`` names."""
    return value * FIELD_SCALE.get(field, 1)


def flat_addr_width(f: dict) -> int:
    """VGPRs of a FLAT/GLOBAL/SCRATCH address (0: no VGPR address, 'off')."""
    seg = f["seg"]
    if seg == 0:
        return 2
    if seg == 2:
        return 2 if f["saddr"] == 0x7D else 1
    return 1 if f["saddr"] == 0x7D else 0


def _template_width(info: OpInfo, name: str) -> int:
    return next((o.width for o in info.form.operands if o.tag == "f" and o.field == name), 1)


def mimg_operands(f: dict, info: OpInfo, raw: bytes):
    """(data width, address) of an image instruction as llvm-objdump prints
    them - address either ``(first VGPR, count)`` or a list of VGPRs (NSA) -
    or None when LLVM rejects the encoding.

    LLVM decodes with the opcode's default widths (the template's), then
    switches to the variant for the real data size (dmask bits, or 4 for
    gather4; halved by d16; +1 with tfe) and address count (per dim and
    a16), keeping the defaults when no such variant exists or a widened
    register would pass v255."""
    img = info.img
    ddef = _template_width(info, "vdata")
    adef = img.addr_default or _template_width(info, "vaddr")
    vdata, vaddr = f["vdata"], f["vaddr"]
    nsa, a16 = f["nsa"], f["a16"]
    lst = None
    if nsa:
        n = img.nsa.get((nsa, a16))
        if not n:
            return None
        lst = [vaddr] + list(raw[8:8 + 4 * nsa])[:n - 1]
    elif img.bvh:
        adef = img.addr[8 * a16]
        if adef is None:
            return None
    if vdata + ddef > 256 or (lst is None and vaddr + adef > 256):
        return None
    dw, aw = ddef, adef
    a = None if img.bvh else img.addr[f["dim"] + 8 * a16]
    if a is not None:
        d = 4 if img.gather else max(bin(f["dmask"]).count("1"), 1)
        if f["d16"]:
            d = (d + 1) // 2
        d += f["tfe"]
        fits = d == ddef or vdata + d <= 256
        if lst is not None:
            n = len(lst)
            if (a <= n and (d != ddef or a != n) and d in img.data_widths
                    and (a == n or a in img.nsa_counts) and fits):
                dw, lst = d, lst[:a]
        else:
            a = 16 if a > 12 else a
            if ((d != ddef or a != adef) and d in img.data_widths and a in img.addr_widths
                    and fits and (a == adef or vaddr + a <= 256)):
                dw, aw = d, a
    return dw, (lst if lst is not None else (vaddr, aw))
