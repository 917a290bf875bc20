"""Spellings of 16-bit immediates: plain styles, waitcnt, depctr, hwreg, sendmsg.

SOPP and SOPK instructions carry a 16-bit immediate that llvm-objdump
prints in one of a few styles; the opcode tables name the style per opcode
(learned by tools/gen_isa_tables.py).  Symbolic names that differ between
targets (hardware registers, messages) come from the tables too and are
passed in as ``names``.
"""

from __future__ import annotations

from typing import Callable, Mapping

# ---- s_waitcnt (GFX10 layout) -------------------------------------------
VMCNT_LO = (0, 4)
EXPCNT = (4, 3)
LGKMCNT = (8, 6)
VMCNT_HI = (14, 2)


def _bits(v: int, lo: int, w: int) -> int:
    return (v >> lo) & ((1 << w) - 1)


def waitcnt_fields(v: int) -> tuple[int, int, int]:
    """(vmcnt, expcnt, lgkmcnt) of a GFX10 s_waitcnt immediate."""
    vm = _bits(v, *VMCNT_LO) | (_bits(v, *VMCNT_HI) << 4)
    return vm, _bits(v, *EXPCNT), _bits(v, *LGKMCNT)


def encode_waitcnt(vmcnt: int = 63, expcnt: int = 7, lgkmcnt: int = 63) -> int:
    """s_waitcnt immediate with the given counters (unused bits zero)."""
    return ((vmcnt & 15) | ((expcnt & 7) << 4) | ((lgkmcnt & 63) << 8)
            | (((vmcnt >> 4) & 3) << 14))


def waitcnt_text(v: int) -> str:
    vm, exp, lgkm = waitcnt_fields(v)
    parts = []
    all_default = vm == 63 and exp == 7 and lgkm == 63
    if vm != 63 or all_default:
        parts.append(f"vmcnt({vm})")
    if exp != 7 or all_default:
        parts.append(f"expcnt({exp})")
    if lgkm != 63 or all_default:
        parts.append(f"lgkmcnt({lgkm})")
    return " ".join(parts)


# ---- s_waitcnt_depctr -----------------------------------------------------
#: (name, lo, width) in llvm-objdump's printing order; defaults are all-ones.
DEPCTR_FIELDS = (
    ("depctr_hold_cnt", 7, 1), ("depctr_sa_sdst", 0, 1), ("depctr_va_vdst", 12, 4),
    ("depctr_va_sdst", 9, 3), ("depctr_va_ssrc", 8, 1), ("depctr_va_vcc", 1, 1),
    ("depctr_vm_vsrc", 2, 3),
)
DEPCTR_UNUSED = 0x0060


#: gfx1010 has no hold_cnt field: bit 7 is unused there
DEPCTR_FIELDS_GFX1010 = tuple(f for f in DEPCTR_FIELDS if f[0] != "depctr_hold_cnt")
DEPCTR_UNUSED_GFX1010 = 0x00E0


def depctr_text(v: int, fields=DEPCTR_FIELDS, unused: int = DEPCTR_UNUSED) -> str:
    """s_waitcnt_depctr operand: non-default counters by name, or hex when
    unused bits are set (all counters listed when all are at default)."""
    if v & unused:
        return "0x%x" % v
    vals = [(n, _bits(v, lo, w), (1 << w) - 1) for n, lo, w in fields]
    shown = [(n, x) for n, x, d in vals if x != d]
    if not shown:
        shown = [(n, x) for n, x, _ in vals]
    return " ".join(f"{n}({x})" for n, x in shown)


def encode_depctr(**fields: int) -> int:
    """s_waitcnt_depctr immediate: all counters at their 'no wait' default
    except those given (by short name, e.g. vm_vsrc=0, sa_sdst=0)."""
    v = 0xFFFF & ~DEPCTR_UNUSED
    for n, lo, w in DEPCTR_FIELDS:
        short = n[len("depctr_"):]
        if short in fields:
            v = (v & ~(((1 << w) - 1) << lo)) | ((fields[short] & ((1 << w) - 1)) << lo)
    return v


# ---- hwreg ----------------------------------------------------------------
def hwreg_text(v: int, names: Mapping[int, str]) -> str:
    hid = v & 0x3F
    off = (v >> 6) & 0x1F
    size = ((v >> 11) & 0x1F) + 1
    name = names.get(hid, str(hid))
    if off == 0 and size == 32:
        return f"hwreg({name})"
    return f"hwreg({name}, {off}, {size})"


# ---- sendmsg --------------------------------------------------------------
def sendmsg_text(v: int, names: Mapping[int, str]) -> str:
    """s_sendmsg operand.  ``names`` maps the 10-bit (msg, op, stream) code to
    LLVM's spelling.  A named message is printed from those bits alone (LLVM
    ignores the others); the numeric ``sendmsg(m, o, s)`` form only when no
    other bit is set; otherwise the decimal value."""
    code = v & 0x3FF
    t = names.get(code)
    if t is not None and (t.startswith("sendmsg(MSG_") or code == v):
        return t
    return str(v)


# ---- plain styles -----------------------------------------------------------
def _imm(v: int) -> str:
    return str(v) if v <= 64 else "0x%x" % v


#: style name -> printer of the 16-bit immediate (None: nothing printed)
STYLES: dict[str, Callable[[int], str | None]] = {
    "none": lambda v: None,
    "imm": _imm,
    "hex": lambda v: "0x%x" % v,
    "udec": str,
    "opt_udec": lambda v: str(v) if v else None,
    "waitcnt": waitcnt_text,
    "depctr": depctr_text,
    "depctr_gfx1010": lambda v: depctr_text(v, DEPCTR_FIELDS_GFX1010, DEPCTR_UNUSED_GFX1010),
}
#: styles that need the target's name tables
NAMED_STYLES = ("hwreg", "sendmsg")


def imm_text(style: str, v: int, names: Mapping[str, Mapping[int, str]] | None = None) -> str | None:
    """Spell immediate ``v`` in ``style`` (None: the operand is not printed)."""
    if style == "hwreg":
        return hwreg_text(v, (names or {}).get("hwreg", {}))
    if style == "sendmsg":
        return sendmsg_text(v, (names or {}).get("sendmsg", {}))
    return STYLES[style](v)
