"""Instruction text in llvm-objdump-16 syntax.

One printer per format.  The opcode tables supply mnemonic, operand order,
widths and constant types (:mod:`kpatch.isa.tables`); the printers here add
what every instruction of a format shares: source modifiers, clamp/omod,
op_sel, SDWA/DPP controls, memory offsets and cache-policy bits.

A printer returns ``None`` when the encoding is one LLVM rejects; the
decoder then turns the word into an unknown ``.long``.
"""

from __future__ import annotations

import re
import struct
from operator import mod
from typing import Callable

from kpatch.isa import formats as F
from kpatch.isa import operands as O
from kpatch.isa import special as SP
from kpatch.isa.tables import Form, OpInfo, Tables, load

SDWA_SEL = ("BYTE_0", "BYTE_1", "BYTE_2", "BYTE_3", "WORD_0", "WORD_1", "DWORD")
SDWA_UNUSED = ("UNUSED_PAD", "UNUSED_SEXT", "UNUSED_PRESERVE")


class Ctx:
    """What a printer sees: field values, literal, extra dword fields, tables."""

    __slots__ = ("f", "literal", "x", "tables", "info", "raw")

    def __init__(self, f: dict, literal: int | None, x: dict | None, tables: Tables, info: OpInfo,
                 raw: bytes = b""):
        self.f = f
        self.literal = literal
        self.x = x
        self.tables = tables
        self.info = info
        self.raw = raw


def operand_text(op, ctx: Ctx, value: int | None = None) -> str | None:
    """Text of one template operand (None: invalid)."""
    tag = op.tag
    if tag == "t":
        return op.text
    if tag == "lit":
        if ctx.literal is None:
            return None
        if op.type == "hex":
            return "0x%x" % ctx.literal
        return O.literal_text(ctx.literal, op.type)
    if tag == "imm":
        return SP.imm_text(ctx.info.imm or "hex", ctx.f["simm16"], ctx.tables.names)
    v = ctx.f[op.field] if value is None else value
    memo = _by_value(op)
    if memo is not None and (v != O.LITERAL or op.kind == "v" or op.kind == "s" or op.type == "vreg"):
        t = memo.get(v, _UNSEEN)
        if t is _UNSEEN:
            t = memo[v] = _field_text(op, ctx, v)
        return t
    return _field_text(op, ctx, v)


#: operand kinds whose text is a function of the template operand and the
#: field value alone (a literal source aside): memoised per (operand, value),
#: the operands being the table's shared ones (:func:`kpatch.isa.tables._template`),
#: so the memo holds at most (distinct operands) x (field values) texts
_BY_VALUE = frozenset({"v", "s", "src", "ss"})
#: id(operand) -> {field value: text}, and the operand kept (its id is never reused)
_BY_VALUE_TEXT: dict[int, tuple[object, dict[int, str | None]]] = {}
_UNSEEN = object()


def _by_value(op) -> dict[int, str | None] | None:
    """The memo of a field operand's texts by value, or None (not memoised)."""
    e = _BY_VALUE_TEXT.get(id(op))
    if e is None:
        if op.tag != "f" or op.kind not in _BY_VALUE:
            return None
        e = _BY_VALUE_TEXT[id(op)] = (op, {})
    return e[1]


def _field_text(op, ctx: Ctx, v: int) -> str | None:
    """Text of a field operand ``op`` of value ``v`` (None: invalid)."""
    if op.overrides is not None and v in op.overrides:
        return op.overrides[v]
    k = op.kind
    if k == "v":
        return O.vgpr_text(v, op.width)
    if k == "param":
        return param_text(v)
    if k == "attr":  # attribute [5:0], channel [7:6]; bit 8 only as the "high" flag
        if v >> 8 and not ctx.info.high:
            return None
        return f"attr{v & 0x3F}.{'xyzw'[v >> 6 & 3]}"
    if k == "s":
        t = O.sgpr_text(O.sgpr_number(op.field, v), op.width)
        return t + op.suffix if op.suffix and t is not None else t
    # src / ss
    t = O.src_text(v, op.width, op.type, ctx.literal, lds_comment=False)
    if t is not None:
        if op.suffix and v < 128:
            t += op.suffix
        elif op.vsuffix and v >= 256:
            t += op.vsuffix
    return t


def plain_operand_text(op, ctx: Ctx, value: int) -> str | None:
    """:func:`operand_text` without the table's spelling exceptions (what
    tools/gen_isa_tables.py compares LLVM's spelling against)."""
    from dataclasses import replace
    return operand_text(replace(op, suffix="", vsuffix="", overrides=None), ctx, value)


def param_text(v: int) -> str:
    """Interpolation parameter (VINTRP vsrc, VOP3 v_interp_mov src1)."""
    return ("p10", "p20", "p0")[v] if v < 3 else f"invalid_param_{v}"


#: what a printer's ``own(op)`` returns for an operand the table spells
#: (:func:`operand_text`) and for one that is not printed
TABLE = object()
SKIP = object()


def _plain(ctx: Ctx, form: Form, mods: Callable | None = None, own: Callable | None = None,
           first: tuple[str, ...] = ()) -> str | None:
    """``mnemonic op, op, ...``: the one place operands are listed (None: an
    operand is invalid).  Each operand's text is ``own(op)`` when the
    printer decides it (a text, None for invalid, :data:`SKIP`), else the
    table's (:func:`operand_text`, also when ``own`` gives :data:`TABLE`),
    then ``mods(i, op, text)`` (source modifiers; None: invalid); ``first``
    texts come before them."""
    parts = list(first)
    for i, op in enumerate(form.operands):
        t = TABLE if own is None else own(op)
        if t is SKIP:
            continue
        if t is TABLE:
            t = operand_text(op, ctx)
        if t is None:
            return None
        if mods is not None:
            t = mods(i, op, t)
            if t is None:
                return None
        parts.append(t)
    if not parts:
        return form.mnemonic
    return form.mnemonic + " " + ", ".join(parts)


# ---------------------------------------------------------------- scalar
def print_sop(ctx: Ctx) -> str | None:
    return _plain(ctx, ctx.info.form)


def print_sopp(ctx: Ctx) -> str | None:
    info = ctx.info
    v = ctx.f["simm16"]
    if info.imm_zero and v:
        return None
    t = SP.imm_text(info.imm or "hex", v, ctx.tables.names)
    return info.mnemonic if t is None else f"{info.mnemonic} {t}"


def _smem_offset(off: int) -> str:
    if off & 0x100000:
        return "-0x%x" % (0x200000 - off)
    return "0x%x" % off


def print_smem(ctx: Ctx) -> str | None:
    info = ctx.info
    f = ctx.f

    def own(op):
        if op.tag == "f" and op.field == "soffset":
            so, off = f["soffset"], f["offset"]
            t = operand_text(op, ctx)
            if t is None or not off:
                return t
            return _smem_offset(off) if so == 0x7D else f"{t} offset:{_smem_offset(off)}"
        if op.tag == "t" and op.text.isdigit():
            return SP.imm_text("imm", f["sdata"])
        return TABLE

    s = _plain(ctx, info.form, own=own)
    if s is None:
        return None
    if any(op.tag == "f" and op.field == "sbase" for op in info.form.operands):
        if f["glc"] and "glc" not in info.ignored:
            s += " glc"
        if f["dlc"] and "dlc" not in info.ignored:
            s += " dlc"
    return s


# ---------------------------------------------------------------- vector
def _omod(v: int) -> str:
    return ("", " mul:2", " mul:4", " div:2")[v]


def print_vop_e32(ctx: Ctx) -> str | None:
    return _plain(ctx, ctx.info.form)


def _vop3_status(info: OpInfo, name: str, i: int) -> str:
    s = info.mods.get(name, "")
    return s[i] if i < len(s) else "z"


def _neg(t: str, has_abs: bool, value: int) -> str:
    """Negation modifier: '-x', or 'neg(x)' for a bare constant (which
    '-' would make read as a negative number)."""
    if not has_abs and (128 <= value <= 208 or 240 <= value <= 248 or value == 255):
        return f"neg({t})"
    return "-" + t


def print_vop3(ctx: Ctx) -> str | None:
    info = ctx.info
    f = ctx.f
    neg = f["neg"]
    if not info.vop3b:
        absm = f["abs"]
        opsel = f["op_sel"]
    else:
        absm = 0
        opsel = 0
    # validity of modifier bits
    for name, val, n in (("neg", neg, 3), ("abs", absm, 3), ("op_sel", opsel, 4)):
        for i in range(n):
            if val >> i & 1 and _vop3_status(info, name, i) == "z":
                return None
    if f["clamp"] and _vop3_status(info, "clamp", 0) == "z":
        return None
    if f["omod"]:
        for i in range(2):
            if f["omod"] >> i & 1 and _vop3_status(info, "omod", i) == "z":
                return None

    def mods(i, op, t):
        if op.tag != "f" or op.kind != "src":
            return t
        k = int(op.field[3])
        a = absm >> k & 1 and _vop3_status(info, "abs", k) == "p"
        if a:
            t = f"|{t}|"
        if neg >> k & 1:
            st = _vop3_status(info, "neg", k)
            if st == "s":
                t = f"sext({t})"
            elif st == "p":
                t = _neg(t, a, f[op.field])
        return t

    s = _plain(ctx, info.form, mods)
    if s is None:
        return None
    if opsel and info.opsel_n and any(opsel >> i & 1 and _vop3_status(info, "op_sel", i) == "p"
                                      for i in range(4)):
        n = info.opsel_n
        if info.opsel_pos:
            bits = [0] * n
            for i, pos in enumerate(info.opsel_pos):
                if pos >= 0 and opsel >> i & 1:
                    bits[pos] = 1
        else:
            bits = [opsel >> i & 1 for i in range(n - 1)] + [opsel >> 3 & 1]
        s += " op_sel:[" + ",".join(map(str, bits)) + "]"
    if info.high and f["src0"] >> 8:
        s += " high"
    if f["clamp"] and _vop3_status(info, "clamp", 0) == "p":
        s += " clamp"
    if f["omod"] and _vop3_status(info, "omod", 0) == "p":
        s += _omod(f["omod"])
    return s


def print_vop3p(ctx: Ctx) -> str | None:
    info = ctx.info
    f = ctx.f
    if f["unused"]:
        return None
    nsrc = sum(1 for op in info.form.operands if op.tag == "f" and op.kind == "src")
    neg_lo, neg_hi, opsel = f["neg"], f["neg_hi"], f["op_sel"]
    opsel_hi = f["op_sel_hi"] | (f["op_sel_hi2"] << 2)
    st = info.mods
    for name, val, n in (("neg", neg_lo, 3), ("neg_hi", neg_hi, 3), ("op_sel", opsel, 3),
                         ("op_sel_hi", f["op_sel_hi"], 2)):
        s_ = st.get(name, "")
        for i in range(n):
            if val >> i & 1 and (s_[i] if i < len(s_) else "z") == "z":
                return None

    if info.mix:
        def mods(i, op, t):
            if op.tag != "f" or op.kind != "src":
                return t
            k = int(op.field[3])
            a = neg_hi >> k & 1
            if a:
                t = f"|{t}|"
            if neg_lo >> k & 1:
                t = _neg(t, a, f[op.field])
            return t
        s = _plain(ctx, info.form, mods)
        if s is None:
            return None
        if opsel & ((1 << nsrc) - 1):
            s += " op_sel:[" + ",".join(str(opsel >> i & 1) for i in range(nsrc)) + "]"
        if opsel_hi & ((1 << nsrc) - 1):
            s += " op_sel_hi:[" + ",".join(str(opsel_hi >> i & 1) for i in range(nsrc)) + "]"
    else:
        s = _plain(ctx, info.form)
        if s is None:
            return None
        m = (1 << nsrc) - 1
        if opsel & m:
            s += " op_sel:[" + ",".join(str(opsel >> i & 1) for i in range(nsrc)) + "]"
        if (opsel_hi & m) != m:
            s += " op_sel_hi:[" + ",".join(str(opsel_hi >> i & 1) for i in range(nsrc)) + "]"
        if neg_lo & m:
            s += " neg_lo:[" + ",".join(str(neg_lo >> i & 1) for i in range(nsrc)) + "]"
        if neg_hi & m:
            s += " neg_hi:[" + ",".join(str(neg_hi >> i & 1) for i in range(nsrc)) + "]"
    if f["clamp"]:
        s += " clamp"
    return s


def _sdwa_src(ctx: Ctx, value: int, sgpr: int, width: int) -> str | None:
    if sgpr:
        return O.src_text(value, width, "b32", None, lds_comment=False) if value != 255 else None
    return O.vgpr_text(value, width)


def _xmod_status(form: Form, x: dict, name: str) -> str:
    """Status of an SDWA/DPP modifier field's current value ('p' if untested)."""
    return form.mods.get(f"{name}={x[name]}", "p")


_SDWA_CHECK = ("src0_sext", "src0_neg", "src0_abs", "src1_sext", "src1_neg", "src1_abs", "clamp",
               "omod", "s0", "s1", "dst_unused", "dst_sel", "src0_sel", "src1_sel", "sd")


def print_sdwa(ctx: Ctx) -> str | None:
    info = ctx.info
    form = info.sdwa
    x = ctx.x
    f = ctx.f
    fmtname = info.fmt.name
    has_src1 = any(o.tag == "f" and o.field == "vsrc1" for o in form.operands)
    for name in _SDWA_CHECK:
        if name in x and x[name]:
            st = form.mods.get(f"{name}={x[name]}")
            if st == "z" or (st is None and name.startswith(("src1", "s1")) and not has_src1):
                return None
    ign = {n for n in ("src0_sext", "src0_neg", "src0_abs", "src1_sext", "src1_neg", "src1_abs",
                       "clamp", "omod") if n in x and x[n] and _xmod_status(form, x, n) == "i"}
    nsrc = sum(1 for op in form.operands if op.tag == "f" and op.field in ("src0", "vsrc1"))

    def own(op):
        if op.tag == "t":
            return op.text
        if op.tag != "f":
            return None
        if op.field == "src0" or op.field == "vsrc1":
            k = 0 if op.field == "src0" else 1
            if k == 0:
                t = _sdwa_src(ctx, x["src0"], x["s0"], op.width)
            else:
                t = _sdwa_src(ctx, f["vsrc1"], x["s1"], op.width)
            if t is None:
                return None
            if x[f"src{k}_sext"] and f"src{k}_sext" not in ign:
                t = f"sext({t})"
            if x[f"src{k}_abs"] and f"src{k}_abs" not in ign:
                t = f"|{t}|"
            if x[f"src{k}_neg"] and f"src{k}_neg" not in ign:
                scalar = x[f"s{k}"]
                v = (x["src0"] if k == 0 else f["vsrc1"]) if scalar else 256
                plain = t.startswith(("|", "sext("))
                t = _neg(t, plain, v)
            return t
        if op.field == "sdst":
            return O.sgpr_text(x["sdst"], 1) if x["sd"] else "vcc_lo"
        return TABLE

    s = _plain(ctx, form, own=own)
    if s is None:
        return None
    if fmtname != "VOPC":
        if x["clamp"] and "clamp" not in ign:
            s += " clamp"
        if x["omod"] and "omod" not in ign:
            s += _omod(x["omod"])
        if x["dst_sel"] > 6:
            return None
        du = x["dst_unused"] if x["dst_unused"] <= 2 else 0  # 3 reads as UNUSED_PAD
        s += f" dst_sel:{SDWA_SEL[x['dst_sel']]} dst_unused:{SDWA_UNUSED[du]}"
    for k in range(nsrc):
        sel = x[f"src{k}_sel"]
        if sel > 6:
            return None
        s += f" src{k}_sel:{SDWA_SEL[sel]}"
    return s


def dpp_ctrl_text(c: int) -> str:
    if c <= 0xFF:
        return "quad_perm:[%d,%d,%d,%d]" % (c & 3, c >> 2 & 3, c >> 4 & 3, c >> 6 & 3)
    if 0x101 <= c <= 0x10F:
        return f"row_shl:{c - 0x100}"
    if 0x111 <= c <= 0x11F:
        return f"row_shr:{c - 0x110}"
    if 0x121 <= c <= 0x12F:
        return f"row_ror:{c - 0x120}"
    if c == 0x140:
        return "row_mirror"
    if c == 0x141:
        return "row_half_mirror"
    if 0x150 <= c <= 0x15F:
        return f"row_share:{c - 0x150}"
    if 0x160 <= c <= 0x16F:
        return f"row_xmask:{c - 0x160}"
    return "/* Invalid dpp_ctrl value */"


def print_dpp(ctx: Ctx, dpp8: bool) -> str | None:
    info = ctx.info
    form = info.dpp8 if dpp8 else info.dpp16
    x = ctx.x
    f = ctx.f
    ign = set()
    if not dpp8:
        for name in ("src0_neg", "src0_abs", "src1_neg", "src1_abs", "bound_ctrl", "fi"):
            if x[name]:
                st = _xmod_status(form, x, name)
                if st == "z":
                    return None
                if st == "i":
                    ign.add(name)
    def own(op):
        if op.tag == "t":
            return op.text
        if op.tag != "f":
            return None
        if op.field not in ("src0", "vsrc1"):
            return TABLE
        k = 0 if op.field == "src0" else 1
        t = O.vgpr_text(x["src0"] if k == 0 else f["vsrc1"], op.width)
        if t is None or dpp8:
            return t
        if x[f"src{k}_abs"] and f"src{k}_abs" not in ign:
            t = f"|{t}|"
        if x[f"src{k}_neg"] and f"src{k}_neg" not in ign:
            t = f"sext({t})" if _xmod_status(form, x, f"src{k}_neg") == "s" else "-" + t
        return t

    s = _plain(ctx, form, own=own)
    if s is None:
        return None
    if dpp8:
        sel = x["sel"]
        s += " dpp8:[" + ",".join(str(sel >> (3 * i) & 7) for i in range(8)) + "]"
        if f["src0"] == 0xEA:
            s += " fi:1"
        return s
    ctrl = ctx.tables.names.get("dpp_ctrl", {}).get(x["dpp_ctrl"]) or dpp_ctrl_text(x["dpp_ctrl"])
    s += f" {ctrl} row_mask:0x{x['row_mask']:x} bank_mask:0x{x['bank_mask']:x}"
    if x["bound_ctrl"] and "bound_ctrl" not in ign:
        s += " bound_ctrl:1"
    if x["fi"] and "fi" not in ign:
        s += " fi:1"
    return s


def print_vintrp(ctx: Ctx) -> str | None:
    info = ctx.info
    f = ctx.f
    chan = "xyzw"[f["attrchan"]]
    attr = f"attr{f['attr']}.{chan}"

    def own(op):
        if op.tag == "t" and op.text.startswith("attr"):
            return attr
        if op.tag == "t" and op.text in ("p10", "p20", "p0"):
            return param_text(f["vsrc"])
        return TABLE

    return _plain(ctx, info.form, own=own)


# ---------------------------------------------------------------- memory
_DS2 = re.compile(r"^ds_(read2|write2|wrxchg2)")


def swizzle_text(imm: int) -> str:
    """ds_swizzle_b32 offset in LLVM's swizzle(...) syntax."""
    if imm & 0xFF00 == 0x8000:
        lanes = ",".join(str(imm >> (2 * i) & 3) for i in range(4))
        return f"swizzle(QUAD_PERM,{lanes})"
    if imm & 0x8000:
        return str(imm)
    and_m, or_m, xor_m = imm & 0x1F, imm >> 5 & 0x1F, imm >> 10 & 0x1F
    if and_m == 0x1F and or_m == 0 and bin(xor_m).count("1") == 1:
        return f"swizzle(SWAP,{xor_m})"
    if and_m == 0x1F and or_m == 0 and xor_m > 0 and (xor_m + 1) & xor_m == 0:
        return f"swizzle(REVERSE,{xor_m + 1})"
    group = 0x1F - and_m + 1
    if group > 1 and group & (group - 1) == 0 and or_m < group and xor_m == 0:
        return f"swizzle(BROADCAST,{group},{or_m})"
    p0 = (0 & and_m | or_m) ^ xor_m
    p1 = (0x1F & and_m | or_m) ^ xor_m
    bits = ""
    for m in (16, 8, 4, 2, 1):
        a, b = p0 & m, p1 & m
        bits += "1" if a and b else "0" if not a and not b else "p" if b else "i"
    return f'swizzle(BITMASK_PERM,"{bits}")'


def print_ds(ctx: Ctx) -> str | None:
    info = ctx.info
    f = ctx.f
    s = _plain(ctx, info.form)
    if s is None:
        return None
    return s + ds_suffix(info.mnemonic, f["offset0"], f["offset1"], f["gds"])


def ds_suffix(mnemonic: str, offset0: int, offset1: int, gds: int) -> str:
    """What follows a DS instruction's operands: its offset(s), ``gds``."""
    s = ""
    if mnemonic == "ds_swizzle_b32":
        off = offset0 | (offset1 << 8)
        if off:
            s += " offset:" + swizzle_text(off)
    elif _DS2.match(mnemonic):
        if offset0:
            s += f" offset0:{offset0}"
        if offset1:
            s += f" offset1:{offset1}"
    else:
        off = offset0 | (offset1 << 8)
        if off:
            s += f" offset:{off}"
    return s + " gds" if gds else s


def _flags(f: dict, names: tuple[str, ...]) -> str:
    """`` name`` for each of the one-bit fields ``names`` that is set, in that order."""
    return "".join(" " + n for n in names if f[n])


def _cpol(f: dict) -> str:
    return _flags(f, ("glc", "slc", "dlc"))


def print_flat(ctx: Ctx) -> str | None:
    info = ctx.info
    f = ctx.f
    seg = f["seg"]
    saddr = f["saddr"]
    if seg == 2 and saddr == 0x7F:
        return None  # global: 0x7f (exec_hi) is neither an SGPR pair nor "off"
    first: tuple[str, ...] = ()
    mn = info.mnemonic
    if ("_atomic_" in mn and f["glc"] and not f["lds"]
            and not any(o.field == "vdst" for o in info.form.operands)):
        data = next((o for o in info.form.operands if o.field == "data"), None)
        if data is not None:
            w = data.width // 2 if "cmpswap" in mn else data.width
            t = O.vgpr_text(f["vdst"], w)
            if t is None:
                return None
            first = (t,)

    def own(op):
        if op.tag == "f" and op.field == "vdst" and f["lds"]:
            return SKIP
        if op.tag == "f" and op.field == "addr":
            n = O.flat_addr_width(f)
            return O.vgpr_text(f["addr"], n) if n else "off"
        if (op.tag == "t" and op.text == "off" or op.field == "saddr") and seg != 0:
            if saddr == 0x7F and seg == 1 and ctx.tables.target == "gfx1010":
                # no scratch "ST" mode on gfx1010: LLVM reads 0x7F as exec_hi
                return "exec_hi/*Invalid register, operand has 'SReg_32_XEXEC_HI' register class*/"
            if saddr in (0x7D, 0x7F):
                return "off"
            return O.sgpr_text(saddr, 2 if seg == 2 else 1)
        return TABLE

    s = _plain(ctx, info.form, own=own, first=first)
    if s is None:
        return None
    off = f["offset"]
    if off:
        if seg == 0:
            s += f" offset:{off}"
        else:
            s += f" offset:{O.signed12(off)}"
    s += _cpol(f)
    if f["lds"]:
        s += " lds"
    return s


def print_mubuf(ctx: Ctx) -> str | None:
    info = ctx.info
    f = ctx.f
    if not info.form.operands:
        return info.mnemonic
    atomic = "_atomic_" in info.mnemonic
    mtbuf = info.fmt.name == "MTBUF"
    tfe = f["tfe"] and not atomic and not mtbuf
    lds = not mtbuf and f["lds"]
    if lds and f["tfe"]:
        return None  # LLVM has no LDS-return variant with tfe

    def own(op):
        if op.tag == "t" and op.text == "off":
            n = f["offen"] + f["idxen"]
            return "off" if n == 0 else O.vgpr_text(f["vaddr"], n)
        if op.tag == "f" and op.field == "vdata":
            return SKIP if lds else O.vgpr_text(f["vdata"], op.width + tfe)
        return TABLE

    s = _plain(ctx, info.form, own=own)
    if s is None:
        return None
    if info.fmt.name == "MTBUF":
        fmt = f["format"]
        if fmt != 1:
            names = ctx.tables.names.get("mtbuf_format", {})
            s += " format:" + names.get(fmt, str(fmt))
    if f["idxen"]:
        s += " idxen"
    if f["offen"]:
        s += " offen"
    if f["offset"]:
        s += f" offset:{f['offset']}"
    s += _cpol(f)
    if lds:
        s += " lds"
    if tfe:
        s += " tfe"
    return s


MIMG_DIM = ("1D", "2D", "3D", "CUBE", "1D_ARRAY", "2D_ARRAY", "2D_MSAA", "2D_MSAA_ARRAY")


def print_mimg(ctx: Ctx) -> str | None:
    """Image instructions: register widths from :func:`mimg_operands`."""
    info = ctx.info
    f = ctx.f
    if info.img is None:
        return None
    m = O.mimg_operands(f, info, ctx.raw)
    if m is None:
        return None
    dw, addr = m

    def own(op):
        if op.tag == "f" and op.field == "vdata":
            return O.vgpr_text(f["vdata"], dw)
        if op.tag == "f" and op.field == "vaddr":
            return "[" + ", ".join(f"v{r}" for r in addr) + "]" if isinstance(addr, list) else O.vgpr_text(*addr)
        return TABLE

    s = _plain(ctx, info.form, own=own)
    if s is None:
        return None
    if info.img.bvh:
        return s + " a16" if f["a16"] else s
    if f["dmask"]:
        s += f" dmask:0x{f['dmask']:x}"
    s += f" dim:SQ_RSRC_IMG_{MIMG_DIM[f['dim']]}"
    if f["unorm"]:
        s += " unorm"
    return s + _cpol(f) + _flags(f, ("r128", "a16", "tfe", "lwe", "d16"))


def print_exp(ctx: Ctx) -> str | None:
    """``exp <target> <4 sources or off>``; with ``compr`` the sources are
    vsrc0, vsrc0, vsrc1, vsrc1 (two packed halves each)."""
    f = ctx.f
    t = f["target"]
    tgt = ctx.tables.names.get("exp_target", {}).get(t, f"invalid_target_{t}")
    regs = ([f["vsrc0"], f["vsrc0"], f["vsrc1"], f["vsrc1"]] if f["compr"]
            else [f[f"vsrc{i}"] for i in range(4)])
    srcs = ", ".join(f"v{r}" if f["en"] >> i & 1 else "off" for i, r in enumerate(regs))
    return f"exp {tgt} {srcs}" + _flags(f, ("done", "compr", "vm"))


def render(d) -> str | None:
    """Text of a :class:`~kpatch.isa.instruction.Decoded` encoding (None: LLVM
    rejects it)."""
    ctx = Ctx(d.fields, d.literal, d.extra, load(d.target), d.info, d.raw)
    kind = d.kind
    if kind is None:
        return PRINTERS[d.fmt.name](ctx)
    if kind == "sdwa":
        return print_sdwa(ctx)
    return print_dpp(ctx, kind == "dpp8")


PRINTERS: dict[str, Callable[[Ctx], str | None]] = {
    "SOP1": print_sop, "SOP2": print_sop, "SOPC": print_sop, "SOPK": print_sop,
    "SOPP": print_sopp, "SMEM": print_smem,
    "VOP1": print_vop_e32, "VOP2": print_vop_e32, "VOPC": print_vop_e32,
    "VOP3": print_vop3, "VOP3P": print_vop3p, "VINTRP": print_vintrp,
    "DS": print_ds, "FLAT": print_flat, "MUBUF": print_mubuf, "MTBUF": print_mubuf,
    "MIMG": print_mimg, "EXP": print_exp,
}


# --- whole listings, formatted per distinct encoding ------------------------------------

_DWORD_FORMATS = {n: "<%dI" % n for n in range(1, 6)}
_DWORD_TEXTS = {n: " ".join(["%08X"] * n) for n in range(1, 6)}


def encoding_text(raw: bytes) -> str:
    """The dwords of an encoding as llvm-objdump's comment shows them
    (``BF810000 00000000``)."""
    n = len(raw) // 4
    if n in _DWORD_TEXTS and len(raw) == 4 * n:
        return _DWORD_TEXTS[n] % struct.unpack(_DWORD_FORMATS[n], raw)
    return " ".join(f"{int.from_bytes(raw[i:i + 4], 'little'):08X}" for i in range(0, len(raw), 4))


#: listing kind -> {Decoded: its line template}, shared by the listings of
#: one process (the same encodings recur across code objects); emptied
#: when it reaches :data:`LINE_MEMO_LIMIT` entries
_LINE_MEMO: dict[str, dict] = {"lines": {}, "objdump": {}}
LINE_MEMO_LIMIT = 400_000


def _per_encoding(ds: list, make: Callable, kind: str) -> list[str]:
    """``make(d)`` for each element of ``ds``, computed once per distinct
    :class:`~kpatch.isa.instruction.Decoded` (real code repeats encodings)
    and remembered for the next listing of ``kind``, their texts made in
    bulk first (:func:`make_texts`)."""
    memo = _LINE_MEMO[kind]
    if len(memo) >= LINE_MEMO_LIMIT:
        memo.clear()
    distinct = dict.fromkeys(ds)
    make_texts([d for d in distinct if d not in memo])
    get = memo.get
    done = {}
    for d in distinct:
        t = get(d)
        if t is None:
            t = memo[d] = make(d)
        done[d] = t
    return list(map(done.__getitem__, ds))


#: formats whose base form prints as its plain operand list (print_sop,
#: print_vop_e32); VOP3 does when no modifier bit is set (and for
#: VOP3b, whose sdst overlays abs and op_sel, none of clamp, omod, neg)
_LIST_FORMATS = frozenset({"SOP1", "SOP2", "SOPC", "VOP1", "VOP2", "VOPC"})
_VOP3_MODIFIERS = (0x7 << 8) | (0xF << 11) | (1 << 15) | (0x1F << 59)
_VOP3B_MODIFIERS = (1 << 15) | (0x1F << 59)
#: VOP3P: unused, neg_hi, op_sel, op_sel_hi2, clamp, op_sel_hi, neg (op_sel_hi
#: at its default, all sources' bits set, prints nothing)
_VOP3P_MODIFIERS = (0x7 << 23) | (0x7 << 8) | (0x7 << 11) | (1 << 14) | (1 << 15) | (0x1F << 59)
_VOP3P_OPSEL_HI = ((1 << 59), (1 << 60), (1 << 14))
#: id(opcode entry) -> how its plain text is made: (mnemonic, modifier bits
#: that must be ``want``, want, ((operand, field lo, field mask, memo) ...),
#: whether a DS suffix follows), or None
_PLANS: dict[int, tuple | None] = {}
_NO_LITERAL = Ctx({}, None, None, None, None)


def _plan(info: OpInfo) -> tuple | None:
    p = _PLANS.get(id(info), _UNSEEN)
    if p is _UNSEEN:
        p = _PLANS[id(info)] = _new_plan(info)
    return p


def _new_plan(info: OpInfo) -> tuple | None:
    fmt = info.fmt
    want = 0
    if fmt.name in _LIST_FORMATS:
        clear = 0
    elif fmt.name == "VOP3" and not info.high:
        clear = _VOP3B_MODIFIERS if info.vop3b else _VOP3_MODIFIERS
    elif fmt.name == "DS":
        clear = 0
    elif fmt.name == "VOP3P" and not info.mix:
        clear = _VOP3P_MODIFIERS
        nsrc = sum(1 for op in info.form.operands if op.tag == "f" and op.kind == "src")
        status = info.mods.get("op_sel_hi", "")
        if any((status[i] if i < len(status) else "z") == "z" for i in range(min(nsrc, 2))):
            return None  # (its default bits are invalid: the printer decides)
        want = sum(_VOP3P_OPSEL_HI[i] for i in range(nsrc))
    else:
        return None
    ops = []
    for op in info.form.operands:
        memo = _by_value(op)
        if op.tag == "t":
            ops.append((op, 0, 0, {0: op.text}))
        elif memo is not None:
            fld = fmt.field(op.field)
            ops.append((op, fld.lo, fld.mask, memo))
        elif op.tag == "lit":
            ops.append((op, 0, 0, {}))
        else:
            return None
    return info.form.mnemonic, clear, want, tuple(ops), fmt is F.DS


def make_texts(ds) -> None:
    """Make the text of each :class:`~kpatch.isa.instruction.Decoded` of
    ``ds`` (distinct, valid or not) that has none yet.  The encodings whose
    printer only lists the operands (scalar ALU, VOP1/VOP2/VOPC, VOP3
    without modifiers, VOP3P at its default op_sel_hi, DS and its offsets)
    are spelled here from the operand texts memoised per value (a literal's
    by the printer's own operand function), without a printer call; a value
    with no text (an invalid register) and every other encoding go through
    the printer (``Decoded.text``).  The same texts either way
    (tests/isa/test_text_bulk.py)."""
    plans = _PLANS
    from_bytes = int.from_bytes
    for d in ds:
        if d._text is not None:
            continue
        info = d.info
        if d.kind is None and info is not None:
            plan = plans.get(id(info), _UNSEEN)
            if plan is _UNSEEN:
                plan = _plan(info)
            if plan is not None:
                mnemonic, clear, want, ops, ds_offsets = plan
                w = from_bytes(d.raw[:8], "little")  # (every field read lies in the base encoding)
                if w & clear == want:
                    parts = []
                    for op, lo, mask, memo in ops:
                        v = (w >> lo) & mask
                        t = memo.get(v, _UNSEEN)
                        if t is _UNSEEN:
                            if op.tag == "lit" or (v == O.LITERAL and op.kind in ("src", "ss")
                                                   and op.type != "vreg"):
                                t = operand_text(op, Ctx({op.field: v}, d.literal, None, None, None))
                            else:
                                t = memo[v] = _field_text(op, _NO_LITERAL, v)
                        if t is None:
                            break
                        parts.append(t)
                    else:
                        t = mnemonic + " " + ", ".join(parts) if parts else mnemonic
                        if ds_offsets:
                            t += ds_suffix(mnemonic, w & 0xFF, w >> 8 & 0xFF, w >> 17 & 1)
                        d._text = t
                        continue
        d.text


def _per_table(table: list, make: Callable, kind: str) -> list[str]:
    """``make(d)`` for each element of ``table`` (the distinct encodings
    of :class:`kpatch.isa.bulk.Columns`), remembered for the next listing
    of ``kind`` as :func:`_per_encoding` does."""
    memo = _LINE_MEMO[kind]
    if len(memo) >= LINE_MEMO_LIMIT:
        memo.clear()
    make_texts([d for d in table if d not in memo])
    get = memo.get
    out = []
    for d in table:
        t = get(d)
        if t is None:
            t = memo[d] = make(d)
        out.append(t)
    return out


def _percent(t: str) -> str:
    return t.replace("%", "%%")


def address_lines(addrs, ds: list) -> list[str]:
    """``<hex address>\t<text>`` per instruction (``kpatch disasm --format
    lines``), from the columns of :func:`kpatch.isa.lines.disassemble_columns`."""
    tmpl = _per_encoding(ds, _line_template, "lines")
    return list(map(mod, tmpl, _ints(addrs)))


def address_lines_of(cols) -> list[str]:
    """:func:`address_lines` of :class:`kpatch.isa.bulk.Columns` (each
    line's template made once per distinct encoding)."""
    tmpl = _per_table(cols.table, _line_template, "lines")
    return list(map(mod, cols.per_instruction(tmpl), _ints(cols.addrs)))


def _line_template(d) -> str:
    return "%x\t" + _percent(d._text or d.text)


def _objdump_template(d) -> str:
    t = d._text or d.text
    return "\t" + _percent(t.ljust(59) if len(t) < 59 else t + " ") + "// %012X: " + encoding_text(d.raw)


def objdump_lines(addrs, ds: list, names: dict[int, str]) -> list[str]:
    """llvm-objdump -d's lines for the instructions (text padded to column
    59, then ``// ADDRESS: ENCODING``), with a blank line and ``<name>:``
    before each address of ``names``."""
    addrs = _ints(addrs)
    return _with_names(list(map(mod, _per_encoding(ds, _objdump_template, "objdump"), addrs)), addrs, names)


def objdump_lines_of(cols, names: dict[int, str]) -> list[str]:
    """:func:`objdump_lines` of :class:`kpatch.isa.bulk.Columns`."""
    addrs = _ints(cols.addrs)
    tmpl = _per_table(cols.table, _objdump_template, "objdump")
    return _with_names(list(map(mod, cols.per_instruction(tmpl), addrs)), addrs, names)


def _with_names(out: list[str], addrs: list[int], names: dict[int, str]) -> list[str]:
    """``out`` with a blank line and ``<name>:`` before each line at an address of ``names``."""
    if names:
        at = sorted(k for k in (_index(addrs, a) for a in names) if k is not None)
        for k in reversed(at):
            out[k:k] = ["", f"{addrs[k]:016x} <{names[addrs[k]]}>:"]
    return out


def _ints(addrs) -> list[int]:
    return addrs if isinstance(addrs, list) else addrs.tolist()


def _index(addrs: list[int], a: int) -> int | None:
    """Index of address ``a`` in the ascending list ``addrs`` (None: absent)."""
    import bisect
    k = bisect.bisect_left(addrs, a)
    return k if k < len(addrs) and addrs[k] == a else None
