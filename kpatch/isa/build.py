"""One-liners that build new instructions for the rewriter.

Every builder returns the instruction's bytes, checked by decoding them for
the target (a builder never returns bytes LLVM would print as ``.long``).
The generic :func:`instruction` builds any opcode from its llvm-objdump
mnemonic and field values; the named helpers cover what the gfx1010
mitigations insert.
"""

from __future__ import annotations

from functools import lru_cache

from kpatch.errors import UsageError
from kpatch.isa import formats as F
from kpatch.isa import operands as O
from kpatch.isa import special as SP
from kpatch.isa.decoder import decode_one
from kpatch.isa.encoder import encode_fields
from kpatch.isa.tables import load

DEFAULT_TARGET = "gfx1010"
NULL = 0x7D


def instruction(mnemonic: str, target: str = DEFAULT_TARGET, *, literal: int | None = None,
                extra: dict[str, int] | None = None, **fields: int) -> bytes:
    """Bytes of ``mnemonic`` (as llvm-objdump prints it, e.g. ``v_mov_b32_e32``,
    ``s_nop``, ``global_load_dword``) with the given field values; fields
    not given keep the table's base values (0 for most).

    The same request gives the same bytes (the tables are fixed), so they
    are kept (:func:`_instruction`): a fix that expands each of 45k integer
    dot products of a Tensile object into 8 instructions asks for the same
    few thousand again and again (the encode and the checking decode were 70%
    of patching it).  A request that fails is not kept: it fails again."""
    return _instruction(mnemonic, target, literal, None if extra is None else tuple(extra.items()),
                        tuple(fields.items()))


@lru_cache(maxsize=1 << 16)
def _instruction(mnemonic: str, target: str, literal: int | None, extra_items: tuple | None,
                 field_items: tuple) -> bytes:
    """:func:`instruction`, with its keyword arguments as (name, value) tuples."""
    extra = None if extra_items is None else dict(extra_items)
    fields = dict(field_items)
    t = load(target)
    info = t.find(mnemonic)
    vals = dict(info.base)
    vals.update(fields)
    kind = None
    fmt = info.fmt
    if extra is not None:
        src0 = vals.get("src0")
        kind = {F.SRC_SDWA: "sdwa", F.SRC_DPP16: "dpp16", F.SRC_DPP8: "dpp8",
                F.SRC_DPP8_FI: "dpp8"}.get(src0)
        if kind is None:
            raise UsageError("extra dword needs src0 = SDWA/DPP marker")
        if kind == "sdwa" and fmt is F.VOPC:
            kind = "sdwa_vopc"
    opcode = info.opcode
    data = encode_fields(fmt, vals, opcode=opcode, extra=extra, extra_kind=kind, literal=literal)
    inst = decode_one(data, target)
    if inst.is_unknown or inst.size != len(data):
        raise UsageError(f"{mnemonic} with {fields} is not a valid {target} instruction")
    return data


def sopp(mnemonic: str, simm16: int = 0, target: str = DEFAULT_TARGET) -> bytes:
    """Any SOPP instruction with its 16-bit immediate."""
    return instruction(mnemonic, target, simm16=simm16 & 0xFFFF)


def s_nop(n: int = 0, target: str = DEFAULT_TARGET) -> bytes:
    """``s_nop n`` (n+1 wait states, n <= 15 is meaningful)."""
    return sopp("s_nop", n, target)


def s_waitcnt_depctr(imm: int, target: str = DEFAULT_TARGET) -> bytes:
    """``s_waitcnt_depctr imm`` (e.g. 0xffe3: vm_vsrc(0); 0xfffe: sa_sdst(0))."""
    return sopp("s_waitcnt_depctr", imm, target)


def s_waitcnt(vmcnt: int = 63, expcnt: int = 7, lgkmcnt: int = 63, target: str = DEFAULT_TARGET) -> bytes:
    return sopp("s_waitcnt", SP.encode_waitcnt(vmcnt, expcnt, lgkmcnt), target)


def sopp_branch(mnemonic: str, simm16: int, target: str = DEFAULT_TARGET) -> bytes:
    """A SOPP branch (``s_branch``, ``s_cbranch_*``) with a signed word offset:
    target = address + 4 + 4 * simm16."""
    if not (mnemonic == "s_branch" or mnemonic.startswith("s_cbranch_")):
        raise UsageError(f"{mnemonic} is not a SOPP branch")
    if not -0x8000 <= simm16 <= 0xFFFF:
        raise UsageError(f"branch offset {simm16} does not fit in 16 bits")
    return sopp(mnemonic, simm16, target)


def branch_to(mnemonic: str, address: int, target_address: int, target: str = DEFAULT_TARGET) -> bytes:
    """A SOPP branch at ``address`` jumping to ``target_address``."""
    delta = target_address - address - 4
    if delta % 4:
        raise UsageError("branch target not 4-byte aligned")
    off = delta // 4
    if not -0x8000 <= off <= 0x7FFF:
        raise UsageError(f"branch offset {off} out of range")
    return sopp_branch(mnemonic, off, target)


def s_mov_b32_null_0(target: str = DEFAULT_TARGET) -> bytes:
    """``s_mov_b32 null, 0`` (0xBEFD0380), the SMEMtoVectorWriteHazard fix."""
    return instruction("s_mov_b32", target, sdst=NULL, ssrc0=0x80)


def s_waitcnt_vscnt_null(imm: int = 0, target: str = DEFAULT_TARGET) -> bytes:
    """``s_waitcnt_vscnt null, imm`` (0xBBFD0000 for 0)."""
    return instruction("s_waitcnt_vscnt", target, sdst=NULL, simm16=imm & 0xFFFF)


def src_value(operand: str | int) -> int:
    """9-bit source encoding of ``'v3'``, ``'s5'``, ``'vcc_lo'``, an inline
    integer (-16..64) or an already-encoded int (returned as is)."""
    if isinstance(operand, int):
        return operand
    s = operand.strip()
    if s.startswith("v") and s[1:].isdigit():
        return 256 + int(s[1:])
    if s.startswith("s") and s[1:].isdigit():
        return int(s[1:])
    from kpatch.isa.operands import SPECIAL32
    for k, v in SPECIAL32.items():
        if v == s:
            return k
    try:
        n = int(s, 0)
    except ValueError:
        raise UsageError(f"cannot encode operand {operand!r}") from None
    v = O.inline_code(n)
    if v is None:
        raise UsageError(f"{operand!r} is not an inline constant (use a literal)")
    return v


def v_mov_b32(dst: int | str, src: int | str, target: str = DEFAULT_TARGET) -> bytes:
    """``v_mov_b32_e32 vDST, SRC`` (dst: VGPR index or 'vN'; src: see src_value)."""
    if isinstance(dst, str):
        dst = src_value(dst) - 256
    return instruction("v_mov_b32_e32", target, vdst=dst, src0=src_value(src))
