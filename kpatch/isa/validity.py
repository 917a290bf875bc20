"""Which encodings LLVM accepts, decided without printing them.

The printers of :mod:`kpatch.isa.text` return None for an encoding LLVM
rejects; running them is what decides validity for the rarer forms.  For
the common ones (scalar ALU, SMEM, VOP1/VOP2/VOPC, VOP3, VOP3P, DS,
VINTRP, EXP) validity is a conjunction of simple tests on the encoding,
compiled once per opcode into a small function of the instruction's bits:

* bits that must have a given value (fields LLVM requires, modifier bits
  the opcode does not take: the ``z`` entries of the tables);
* for each operand field, the set of values that spell a valid operand -
  found by asking the printer's own :func:`~kpatch.isa.text.operand_text`
  about every value the field can hold, so the two can not disagree.

:func:`checker` returns that function, or None when the printer must decide.
tests/isa/test_validity.py checks the checkers against the printers.
"""

from __future__ import annotations

from typing import Callable

from kpatch.isa import formats as F
from kpatch.isa.tables import OpInfo, Tables
from kpatch.isa.text import Ctx, operand_text

#: formats whose base-form validity is compiled (everything else renders)
COMPILED = ("SOP1", "SOP2", "SOPC", "SOPK", "SOPP", "SMEM", "VOP1", "VOP2", "VOPC", "VOP3",
            "VOP3P", "DS", "VINTRP", "EXP")

_VALUES: dict[tuple, int] = {}


def _valid_values(op, fld: F.Field, tables: Tables, info: OpInfo) -> int:
    """Bit mask over the field's values: bit v set if value v prints."""
    key = (op.tag, op.field, op.kind, op.width, op.type, op.spelling_key, fld.width,
           info.fmt.name, info.high)
    m = _VALUES.get(key)
    if m is None:
        ctx = Ctx({}, 0, None, tables, info)
        m = 0
        for v in range(1 << fld.width):
            if operand_text(op, ctx, v) is not None:
                m |= 1 << v
        _VALUES[key] = m
    return m


def _statuses(info: OpInfo, name: str, n: int) -> str:
    s = info.mods.get(name, "")
    return "".join(s[i] if i < len(s) else "z" for i in range(n))


def _zero_bits(fmt: F.Format, info: OpInfo) -> list[tuple[int, int]]:
    """(bit position, required value) of single bits the opcode fixes."""
    out = []
    if fmt is F.VOP3:
        names = [("neg", 3)] if info.vop3b else [("neg", 3), ("abs", 3), ("op_sel", 4)]
        names += [("clamp", 1), ("omod", 2)]
        for name, n in names:
            lo = fmt.field(name).lo
            for i, st in enumerate(_statuses(info, name, n)):
                if st == "z":
                    out.append((lo + i, 0))
    elif fmt is F.VOP3P:
        for i in range(3):
            out.append((fmt.field("unused").lo + i, 0))
        for name, n in (("neg", 3), ("neg_hi", 3), ("op_sel", 3), ("op_sel_hi", 2)):
            lo = fmt.field(name).lo
            for i, st in enumerate(_statuses(info, name, n)):
                if st == "z":
                    out.append((lo + i, 0))
    elif fmt is F.SOPP and info.imm_zero:
        out += [(i, 0) for i in range(16)]
    return out


def _compile(info: OpInfo, tables: Tables) -> Callable[[int], bool] | None:
    fmt = info.fmt
    form = info.form
    zm = zv = 0
    names = {f.name for f in fmt.fields}
    for name, val in form.zero:
        if name not in names:
            continue
        fld = fmt.field(name)
        zm |= fld.mask << fld.lo
        zv |= val << fld.lo
    for bit, val in _zero_bits(fmt, info):
        zm |= 1 << bit
        zv |= val << bit
    terms = [f"(w & {zm:#x}) == {zv:#x}"] if zm else []

    def field_term(fld: F.Field, mask: int) -> None:
        full = (1 << (1 << fld.width)) - 1
        if mask != full:
            terms.append(f"({mask:#x} >> ((w >> {fld.lo}) & {fld.mask:#x})) & 1")

    for op in form.operands:
        if op.tag == "t" or op.tag == "lit":
            continue  # fixed text; the literal is there whenever the size says so
        if op.tag == "imm":
            if (info.imm or "hex") in ("none", "opt_udec"):
                return None
            continue
        fld = fmt.field(op.field)
        field_term(fld, _valid_values(op, fld, tables, info))
    body = " and ".join(terms) if terms else "True"
    return eval(f"lambda w: bool({body})")  # generated from the opcode's table entry


_CHECKERS: dict[int, Callable[[int], bool] | None] = {}
_UNSET = object()


def checker(info: OpInfo, kind: str | None, tables: Tables) -> Callable[[int], bool] | None:
    """A function of the base encoding's bits (as an int) telling whether
    LLVM accepts this opcode's encoding (``tables`` is ``info``'s target);
    None when only printing can tell (SDWA/DPP forms, FLAT, buffer and image
    instructions)."""
    if kind is not None:
        return None
    c = _CHECKERS.get(id(info), _UNSET)
    if c is _UNSET:
        c = _CHECKERS[id(info)] = _compile(info, tables) if info.fmt.name in COMPILED else None
    return c
