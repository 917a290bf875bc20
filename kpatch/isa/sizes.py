"""Instruction sizes, for one position or for every dword of a buffer.

An encoding's size follows from its first dword or two: the format (top
bits), the opcode's table entry, a 9-bit source of value 255 (a trailing
literal), a VOP1/VOP2/VOPC ``src0`` announcing an SDWA/DPP dword, and the
MIMG NSA dword count.  :func:`measure` works that out for one position;
:class:`kpatch.isa.bulk.Sizer` does the same for *every* dword of a buffer
at once with numpy (per-format opcode property arrays built from the
tables), which is how the decoder finds instruction boundaries without a
Python step per dword.  Both read the same table facts (:func:`op_facts`);
tests/isa/test_validity.py checks that they agree.  (No numpy here: building
and checking one instruction, as the rule loader does, starts fast.)

Sizes here assume the encoding is valid; the decoder still checks each
distinct encoding and turns rejected ones into 4-byte unknown words.
"""

from __future__ import annotations

from kpatch.isa import formats as F
from kpatch.isa.tables import OpInfo, Tables

#: format by the top 9 bits of the first dword
TOP9: list[F.Format | None] = [F.classify(t << 23) for t in range(512)]

VOPE32 = ("VOP1", "VOP2", "VOPC")
EXTRA_SRC = {F.SRC_SDWA: "sdwa", F.SRC_DPP16: "dpp16", F.SRC_DPP8: "dpp8", F.SRC_DPP8_FI: "dpp8"}
_KIND_BIT = {"sdwa": 1, "dpp16": 2, "dpp8": 4}


class OpFacts:
    """What sizing needs to know about one opcode entry."""

    __slots__ = ("lit_fields", "lit_other", "mandatory_lit", "src0_is_src", "kinds")

    def __init__(self, info: OpInfo):
        fields = {f.name: f for f in info.fmt.fields}
        self.lit_fields = tuple(fields[n] for n in info.literal_fields if n in fields)
        #: VOP1/VOP2/VOPC: literal fields besides src0 (a scalar destination
        #: LLVM decodes like a source, e.g. v_readfirstlane_b32's)
        self.lit_other = tuple(f for f in self.lit_fields if f.name != "src0")
        self.mandatory_lit = info.has_mandatory_literal
        # VOP1/VOP2/VOPC: does src0 take SDWA/DPP/literal markers at all?
        self.src0_is_src = "src0" in info.literal_fields
        self.kinds = sum(b for k, b in _KIND_BIT.items() if getattr(info, k) is not None)


_FACTS: dict[int, OpFacts] = {}


def op_facts(info: OpInfo) -> OpFacts:
    f = _FACTS.get(id(info))
    if f is None:
        f = _FACTS[id(info)] = OpFacts(info)
    return f


def _opcode_key_fn(fmt: F.Format):
    """Compile ``lambda w: <opcode key>`` from the format's opcode bit ranges."""
    parts, shift = [], 0
    for lo, width in fmt.opcode_bits:
        parts.append(f"(((w >> {lo}) & {(1 << width) - 1:#x}) << {shift})")
        shift += width
    if fmt is F.FLAT:
        parts.append("(((w >> 14) & 3) << 7)")
    return eval("lambda w: " + (" | ".join(parts) or "0"))  # generated from the format table


#: format name -> function of the encoding (int) giving the tables' opcode key
OPCODE_KEY = {name: _opcode_key_fn(fmt) for name, fmt in F.FORMATS.items()}


def vop_kind(facts: OpFacts, s0: int, x0: int):
    """The extra-dword form a VOP1/VOP2/VOPC ``src0`` value announces: None
    (none), "sdwa"/"dpp16"/"dpp8", or False when the opcode has no such form
    although src0 is a source (LLVM rejects the word).  For an opcode whose
    src0 is no source (v_nop) a marker only counts if the form exists and
    the extra dword's own src0 byte ``x0`` is 0 - else LLVM reads the plain
    4-byte form."""
    kind = EXTRA_SRC.get(s0)
    if kind is None:
        return None
    if facts.src0_is_src:
        return kind if facts.kinds & _KIND_BIT[kind] else False
    return kind if facts.kinds & _KIND_BIT[kind] and not x0 else None


def opcode_key(fmt: F.Format, w: int) -> int:
    """The tables' opcode key of an encoding held as an int (FLAT: op | seg << 7)."""
    return OPCODE_KEY[fmt.name](w)


def measure(data: bytes, pos: int, end: int, tables: Tables):
    """(size, fmt, info, kind) of the instruction at ``pos`` or None when no
    opcode matches or it would run past ``end``.  ``kind`` is None for the
    base form or "sdwa"/"dpp16"/"dpp8"."""
    if pos + 4 > end:
        return None
    w0 = int.from_bytes(data[pos:pos + 4], "little")
    fmt = TOP9[w0 >> 23]
    if fmt is None:
        return None
    size = fmt.size
    if size == 8:
        if pos + 8 > end:
            return None
        w = w0 | (int.from_bytes(data[pos + 4:pos + 8], "little") << 32)
    else:
        w = w0
    info = tables.ops.get(fmt.name, {}).get(opcode_key(fmt, w))
    if info is None:
        return None
    kind = None
    facts = op_facts(info)
    lit = facts.mandatory_lit
    if fmt.name in VOPE32 and (facts.src0_is_src or facts.kinds):
        s0 = w0 & 0x1FF
        x0 = data[pos + 4] if pos + 8 <= end else 1  # no extra dword: not that form
        kind = vop_kind(facts, s0, x0)
        if kind is False:
            return None
        if kind is not None:
            size += 4
        else:
            lit = lit or (facts.src0_is_src and s0 == F.SRC_LITERAL) or any(
                (w >> fld.lo) & fld.mask == F.SRC_LITERAL for fld in facts.lit_other)
    else:
        for fld in facts.lit_fields:
            if (w >> fld.lo) & fld.mask == F.SRC_LITERAL:
                lit = True
                break
        if fmt is F.MIMG:
            size += 4 * ((w0 >> 1) & 3)
    if lit:
        size += 4
    if pos + size > end:
        return None
    return size, fmt, info, kind
