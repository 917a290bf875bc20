"""Registers each instruction reads and writes.

Explicit operands come from the opcode template (which field is which
operand and how wide); their role (read or written) from the format and
field (``vdst``/``sdst``/``sdata``... are written, sources read, memory data
depends on load/store/atomic).  Implicit effects LLVM does not print (EXEC
read by vector instructions, SCC written by scalar ALU, EXEC written by
``v_cmpx``, M0 read by ``s_movrel``/``s_sendmsg``...) come from the
declarative rules in :data:`IMPLICIT`.

Registers are :class:`Reg` ``(file, index, count)`` with files ``s`` (SGPRs
0-105), ``v``, ``ttmp``, ``vcc``, ``exec`` (index 0 = lo, 1 = hi), ``m0`` and
``scc``.  Wave32 is assumed for implicit EXEC/VCC (what LLVM prints for GFX10).
Indexed moves (``s_movrel*``/``v_movrel*``) report their base register only.

For many encodings at a time, the scalar registers alone as bit masks
(:data:`MASK_BASE`): a :class:`ScalarPlan` per opcode says which fields name
which of them in which role (the same rules), and :func:`scalar_effects`
reads an encoding through it without making :class:`Reg` objects.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from kpatch.isa.formats import EXTRA_FORMATS, extra_format
from kpatch.isa.operands import FIELD_SCALE, flat_addr_width, mimg_operands, sgpr_number


class Reg(NamedTuple):
    file: str
    index: int
    count: int = 1

    def __str__(self) -> str:
        if self.file in ("s", "v", "ttmp"):
            if self.count == 1:
                return f"{self.file}{self.index}"
            return f"{self.file}[{self.index}:{self.index + self.count - 1}]"
        if self.file in ("vcc", "exec"):
            if self.count == 2:
                return self.file
            return f"{self.file}_{'hi' if self.index else 'lo'}"
        return self.file

    def units(self) -> list["Reg"]:
        """The single-dword registers this one covers."""
        return [Reg(self.file, self.index + i, 1) for i in range(self.count)]


SCC = Reg("scc", 0, 1)
EXEC_LO = Reg("exec", 0, 1)
VCC_LO = Reg("vcc", 0, 1)
M0 = Reg("m0", 0, 1)


def scalar_reg(value: int, count: int) -> Reg | None:
    """Register named by a scalar/source operand value (None: constant/null)."""
    if value <= 105:
        return Reg("s", value - value % (1 if count == 1 else 2 if count == 2 else 4), count)
    if value in (106, 107):
        return Reg("vcc", value - 106, count)
    if 108 <= value <= 123:
        return Reg("ttmp", value - 108, count)
    if value == 124:
        return M0
    if value in (126, 127):
        return Reg("exec", value - 126, count)
    if value == 253:
        return SCC
    if value >= 256:
        return Reg("v", value - 256, count)
    return None


def _rx(*pats: str) -> re.Pattern:
    return re.compile("|".join(f"(?:{p})" for p in pats))


#: (pattern on the mnemonic, implicit reads, implicit writes)
IMPLICIT: list[tuple[re.Pattern, tuple[Reg, ...], tuple[Reg, ...]]] = [
    (_rx(r"^s_(add|sub)_[iu]32$", r"^s_(min|max)_[iu]32$", r"^s_(and|or|xor|andn2|orn2|nand|nor|xnor)_b(32|64)$",
         r"^s_(lshl|lshr|ashr)_[bi](32|64)$", r"^s_bfe_", r"^s_(not|wqm)_b", r"^s_bcnt[01]_",
         r"^s_quadmask_", r"^s_abs_", r"^s_absdiff_", r"^s_lshl[1-4]_add_", r"^s_cmpk?_", r"^s_bitcmp",
         r"^s_addk_i32$", r"_saveexec_b(32|64)$", r"_wrexec_b(32|64)$", r"^s_ff[01]_", r"^s_flbit_",
         r"^s_bitset"), (), (SCC,)),
    (_rx(r"^s_(addc|subb)_u32$"), (SCC,), (SCC,)),
    (_rx(r"^s_cselect_", r"^s_cmov_", r"^s_cmovk_", r"^s_cbranch_scc[01]$"), (SCC,), ()),
    (_rx(r"^s_cbranch_vccn?z$", r"^v_div_fmas_"), (VCC_LO,), ()),
    (_rx(r"^s_cbranch_execn?z$"), (EXEC_LO,), ()),
    (_rx(r"_saveexec_b32$"), (EXEC_LO,), (EXEC_LO,)),
    (_rx(r"_saveexec_b64$"), (Reg("exec", 0, 2),), (Reg("exec", 0, 2),)),
    (_rx(r"_wrexec_b32$"), (), (EXEC_LO,)),
    (_rx(r"_wrexec_b64$"), (), (Reg("exec", 0, 2),)),
    (_rx(r"^v_cmpx_"), (), (EXEC_LO,)),
    (_rx(r"^s_movrel", r"^v_movrel", r"^s_sendmsg", r"^v_interp_", r"^ds_gws_", r"^ds_ordered_count",
         r"^ds_append", r"^ds_consume"), (M0,), ()),
]
_VALU = ("VOP1", "VOP2", "VOPC", "VOP3", "VOP3P", "VINTRP")
_VMEM = ("DS", "FLAT", "MUBUF", "MTBUF", "MIMG", "EXP")
_TIED = re.compile(r"^v_(pk_)?fmac_|^v_mac_|_dot[24]c_|^v_writelane_")
_STORE = re.compile(r"(^|_)store|^s_dcache|^s_atc|^s_scratch_store")
_LOAD = re.compile(r"load|^s_memtime|^s_memrealtime|^s_get_waveid|^image_(sample|gather|get|msaa)")
_SOPK_WRITES = re.compile(r"^s_(movk|cmovk|addk|mulk|getreg|call)")
_SOPK_READS_DST = re.compile(r"^s_(addk|mulk)")


class _Traits(NamedTuple):
    """What :func:`registers` tells from the mnemonic alone."""

    atomic: bool
    sopk_writes: bool  # a SOPK whose sdst is written (else it is read)
    sopk_reads_dst: bool  # ... and read as well
    tied: bool  # vdst is also read
    store: bool  # memory data is read
    implicit_reads: tuple[Reg, ...]
    implicit_writes: tuple[Reg, ...]


_TRAITS: dict[str, _Traits] = {}


def _traits(mn: str) -> _Traits:
    """The mnemonic's :class:`_Traits`, matched once per mnemonic (the
    patterns are many, and registers() runs for every new encoding)."""
    t = _TRAITS.get(mn)
    if t is None:
        ir: list[Reg] = []
        iw: list[Reg] = []
        for pat, r_, w_ in IMPLICIT:
            if pat.search(mn):
                ir.extend(r_)
                iw.extend(w_)
        t = _TRAITS[mn] = _Traits("_atomic" in mn, _SOPK_WRITES.match(mn) is not None,
                                  _SOPK_READS_DST.match(mn) is not None, _TIED.search(mn) is not None,
                                  _STORE.search(mn) is not None, tuple(ir), tuple(iw))
    return t


def registers(d) -> tuple[tuple[Reg, ...], tuple[Reg, ...]]:
    """(reads, writes) of a Decoded instruction: the explicit operands of
    its template (:func:`_explicit`), those the templates do not carry
    (:func:`_untemplated`), then the implicit ones (EXEC for vector
    instructions, :data:`IMPLICIT`)."""
    if d.fmt is None:
        return (), ()
    fmtname = d.fmt.name
    traits = _traits(d.mnemonic)
    widths, nsa_addrs = _image_widths(d)
    reads, writes = _explicit(d, traits, widths)
    reads = _untemplated(d, traits, reads, writes, nsa_addrs)
    if fmtname in _VALU or fmtname in _VMEM:
        reads.append(EXEC_LO)
    reads.extend(traits.implicit_reads)
    writes.extend(traits.implicit_writes)
    return tuple(dict.fromkeys(reads)), tuple(dict.fromkeys(writes))


#: the fixed registers a template names by text (``vcc_lo``, ``exec``, ``m0``...)
_TEMPLATE_REGS = {"vcc_lo": VCC_LO, "vcc": Reg("vcc", 0, 2), "exec_lo": EXEC_LO,
                  "exec": Reg("exec", 0, 2), "m0": M0}


def _image_widths(d) -> tuple[dict[str, int], list[int]]:
    """An image instruction's operand widths that its fields decide (``vdata``
    by dmask/d16, ``vaddr`` by dim), and the further NSA address VGPRs."""
    widths: dict[str, int] = {}
    nsa_addrs: list[int] = []
    if d.fmt.name == "MIMG" and d.info.img is not None:
        m = mimg_operands(d.fields, d.info, d.raw)
        if m is not None:
            widths["vdata"] = m[0]
            if isinstance(m[1], list):
                widths["vaddr"] = 1
                nsa_addrs = m[1][1:]
            else:
                widths["vaddr"] = m[1][1]
    return widths, nsa_addrs


def _field_register(d, op, widths: dict[str, int]) -> Reg | None:
    """The register a template operand's field names (None: a constant, an
    interpolation parameter or attribute, or FLAT's saddr, handled apart)."""
    name, v, fmtname = op.field, d.fields[op.field], d.fmt.name
    if fmtname == "FLAT" and name == "addr":
        n = flat_addr_width(d.fields)
        return Reg("v", v, n) if n else None
    if (fmtname == "FLAT" and name == "saddr") or op.kind in ("param", "attr"):
        return None
    if op.kind == "v":
        return Reg("v", v, widths.get(name, op.width))
    if op.kind == "s":
        return scalar_reg(sgpr_number(name, v), op.width)
    return scalar_reg(v, op.width)


def _explicit(d, traits: _Traits, widths: dict[str, int]) -> tuple[list[Reg], list[Reg]]:
    """(reads, writes) of the operands the template lists, each given its
    role: destinations written (a SOPK's as its mnemonic says, a tied vdst
    read too), memory data by load/store/atomic, everything else read."""
    fmtname = d.fmt.name
    form = d.info.form if d.kind is None else getattr(d.info, d.kind)
    reads: list[Reg] = []
    writes: list[Reg] = []
    seen_src = False
    for op in form.operands:
        if op.tag == "t":
            r = _TEMPLATE_REGS.get(op.text)
            if r is not None:
                (reads if seen_src else writes).append(r)
            continue
        if op.tag != "f":
            continue
        name = op.field
        if d.kind is not None and name == "src0":  # DPP/SDWA: src0 lives in the extra dword
            v = d.extra["src0"]
            r = scalar_reg(v, op.width) if d.kind == "sdwa" and d.extra.get("s0") else Reg("v", v, op.width)
            seen_src = True
            if r:
                reads.append(r)
            continue
        if d.kind == "sdwa" and name == "sdst":  # (sdst "null": none written)
            r = scalar_reg(d.extra["sdst"], 1) if d.extra.get("sd") else VCC_LO
            if r is not None:
                writes.append(r)
            continue
        r = _field_register(d, op, widths)
        if r is None:
            if name not in ("vdst", "sdst", "sdata", "vdata"):
                seen_src = True
            continue
        if name in ("vdst", "sdst"):
            if fmtname == "SOPK" and not traits.sopk_writes:
                reads.append(r)
                seen_src = True
                continue
            writes.append(r)
            if fmtname == "SOPK" and traits.sopk_reads_dst:
                reads.append(r)
            if name == "vdst" and traits.tied:
                reads.append(r)
        elif name in ("sdata", "vdata", "data") and fmtname in ("SMEM", "MUBUF", "MTBUF", "MIMG", "FLAT"):
            if traits.atomic:
                reads.append(r)
                if d.fields.get("glc", 0) and fmtname != "FLAT":
                    writes.append(r)
            elif traits.store:
                reads.append(r)
            else:
                writes.append(r)
        else:
            reads.append(r)
            seen_src = True
    return reads, writes


def _untemplated(d, traits: _Traits, reads: list[Reg], writes: list[Reg], nsa_addrs: list[int]) -> list[Reg]:
    """Add the explicit operands the templates do not carry (a returning FLAT
    atomic's vdst, FLAT's saddr, NSA addresses, MUBUF/MTBUF's vaddr) to
    ``writes`` and to the reads, and return the reads (an export reads only
    its enabled sources)."""
    f, fmtname, form = d.fields, d.fmt.name, (d.info.form if d.kind is None else getattr(d.info, d.kind))
    if fmtname == "FLAT" and traits.atomic and f.get("glc", 0) and not f.get("lds") and not any(
            o.field == "vdst" for o in form.operands):
        dt = next((o for o in form.operands if o.field == "data"), None)
        if dt is not None:
            writes.append(Reg("v", f["vdst"], dt.width // 2 if "cmpswap" in d.mnemonic else dt.width))
    if fmtname == "FLAT" and f["seg"] != 0 and f["saddr"] not in (0x7D, 0x7F):
        r = scalar_reg(f["saddr"], 2 if f["seg"] == 2 else 1)
        if r and r not in reads:
            reads.append(r)
    reads.extend(Reg("v", a, 1) for a in nsa_addrs)
    if fmtname == "EXP":  # only the enabled sources are read
        en = f["en"]
        srcs = [f["vsrc0"], f["vsrc0"], f["vsrc1"], f["vsrc1"]] if f["compr"] else \
            [f[f"vsrc{i}"] for i in range(4)]
        reads = [r for r in reads if r.file != "v"] + [Reg("v", v, 1) for i, v in enumerate(srcs)
                                                         if en >> i & 1]
    if fmtname in ("MUBUF", "MTBUF"):
        n = f["offen"] + f["idxen"]
        if n:
            reads.append(Reg("v", f["vaddr"], n))
    return reads


# --- scalar registers as bit masks, per opcode ------------------------------------
#: First bit of each scalar register file in a register mask (the 9-bit
#: operand encoding: s0..s105 = bits 0..105, vcc_lo/hi 106/107, ttmp0..15
#: 108..123, m0 124, exec_lo/hi 126/127); VGPRs, SCC and the like have none.
MASK_BASE = {"s": 0, "vcc": 106, "ttmp": 108, "m0": 124, "exec": 126}


def reg_bits(r: Reg) -> int:
    """Bit mask of a scalar register (0 for VGPRs, SCC and the like)."""
    base = MASK_BASE.get(r.file)
    if base is None:
        return 0
    return ((1 << r.count) - 1) << (base + r.index)


_ENTRIES: dict[int, list] = {}  # count -> per operand value: (mask, file) of scalar_reg(value, count), or None


def _entries(count: int) -> list:
    """(:func:`reg_bits`, file) of :func:`scalar_reg` of each operand value
    0..1023 for a ``count``-register operand (None where it names none)."""
    got = _ENTRIES.get(count)
    if got is None:
        got = _ENTRIES[count] = [None if r is None else (reg_bits(r), r.file)
                                 for r in (scalar_reg(v, count) for v in range(1024))]
    return got


_VGPR_ENTRY = (0, "v")

# steps of a ScalarPlan: (op, lo, mask, scale, entries, aux)
_R, _W, _RW, _ATOMIC, _SDWA_SRC0, _SDWA_SDST, _SADDR, _CONST_W = range(8)


class ScalarPlan:
    """Which fields of an opcode's encodings name which scalar registers, in
    which role (what :func:`registers` decides by the opcode alone), so
    that the scalar registers of an encoding are a few shifts and table
    lookups (:func:`scalar_effects`) instead of :class:`Reg` objects.

    ``steps`` (in the order :func:`registers` lists the operands) say where
    a field's value is (``x``: the SDWA dword, else the base encoding),
    its bits, its scale (:func:`~kpatch.isa.operands.sgpr_number`) and the
    table of what each value names; ``reads`` is the mask of the registers
    read whatever the fields (fixed template registers, EXEC of vector
    instructions, :data:`IMPLICIT`), ``tail`` the registers always written
    after the explicit ones (:data:`IMPLICIT`); ``size`` the bytes of the
    base encoding, ``extra`` whether an SDWA/DPP dword follows it.
    ``effects(w, x)`` is the steps as one function (generated from them,
    :func:`_compile`) of the base encoding ``w`` and the SDWA dword ``x``
    (as little-endian ints): what :func:`scalar_effects` returns."""

    __slots__ = ("steps", "reads", "tail", "size", "extra", "effects")

    def __init__(self, steps: tuple, reads: int, tail: tuple, size: int, extra: bool):
        self.steps, self.reads, self.tail, self.size, self.extra = steps, reads, tail, size, extra
        self.effects = _compile(self)


_CODE: dict[str, object] = {}  # generated source -> its code object
_MASKS: dict[int, tuple] = {}  # id(entries) -> (entries, the mask of each entry, 0 for None)
_NO_WRITES = ()


def _masks(entries: list) -> list:
    got = _MASKS.get(id(entries))
    if got is None or got[0] is not entries:
        got = _MASKS[id(entries)] = (entries, [0 if e is None else e[0] for e in entries])
    return got[1]


def _compile(plan: ScalarPlan):
    """``plan.effects``: a function of (w, x) doing the plan's steps, made
    from source generated from them (compiled once per distinct source;
    the tables and constants are the function's globals)."""
    names: dict[str, object] = {}

    def name(obj, prefix: str) -> str:
        key = f"{prefix}{len(names)}"
        names[key] = obj
        return key

    lines = [f"reads = {plan.reads}"]
    writes = any(st[0] in (_W, _RW, _CONST_W, _SDWA_SDST) or (st[0] == _ATOMIC) for st in plan.steps) or plan.tail
    if writes:
        lines.append("writes = []")
    for op, lo, mask, scale, entries, aux in plan.steps:
        val = f"((w >> {lo}) & {mask:#x})" + (f" * {scale}" if scale != 1 else "")
        if op == _R:
            lines.append(f"reads |= {name(_masks(entries), 'M')}[{val}]")
        elif op in (_W, _RW, _ATOMIC):
            lines += [f"e = {name(entries, 'T')}[{val}]", "if e is not None:"]
            if op == _W:
                lines.append("    writes.append(e)")
            elif op == _RW:
                lines += ["    writes.append(e)", "    reads |= e[0]"]
            else:
                lines += ["    reads |= e[0]", f"    if (w >> {aux[0]}) & {aux[1]:#x}:", "        writes.append(e)"]
        elif op == _CONST_W:
            lines.append(f"writes.append({name(aux, 'K')})")
        elif op == _SADDR:
            lines += [f"seg = (w >> {aux[0]}) & {aux[1]:#x}", f"v = (w >> {lo}) & {mask:#x}",
                      "if seg != 0 and v not in (0x7D, 0x7F):",
                      f"    reads |= {name(_masks(_entries(2)), 'M')}[v] if seg == 2 else "
                      f"{name(_masks(_entries(1)), 'M')}[v]"]
        elif op == _SDWA_SRC0:
            lines += [f"if (x >> {aux[0]}) & {aux[1]:#x}:",
                      f"    reads |= {name(_masks(entries), 'M')}[(x >> {lo}) & {mask:#x}]"]
        else:  # _SDWA_SDST
            lines += [f"if (x >> {aux[0]}) & {aux[1]:#x}:",
                      f"    e = {name(entries, 'T')}[(x >> {lo}) & {mask:#x}]",
                      "    if e is not None:", "        writes.append(e)",
                      "else:", f"    writes.append({name(aux[2], 'K')})"]
    if plan.tail:
        lines.append(f"writes.extend({name(plan.tail, 'K')})")
    lines.append("return reads, writes" if writes else "return reads, NO_WRITES")
    src = "def effects(w, x):\n" + "".join(f"    {ln}\n" for ln in lines)
    code = _CODE.get(src)
    if code is None:
        code = _CODE[src] = compile(src, "<ScalarPlan>", "exec")  # generated from the plan's steps
    names["NO_WRITES"] = _NO_WRITES
    exec(code, names)
    return names["effects"]


_DESTS = ("vdst", "sdst", "sdata", "vdata")


def scalar_plan(d, writes: bool = True) -> ScalarPlan | None:
    """The :class:`ScalarPlan` of a Decoded encoding's opcode and form
    (``writes``: with the registers written), or None where the roles
    :func:`registers` gives depend on field values in a way the plan does
    not describe (a fixed template register after a destination that may
    or may not name a register) or a field the template names is missing
    (then :func:`registers` is the way)."""
    if d.fmt is None:
        return ScalarPlan((), 0, (), 0, False)
    fmt, kind, fmtname = d.fmt, d.kind, d.fmt.name
    traits = _traits(d.mnemonic)
    form = d.info.form if kind is None else getattr(d.info, kind)
    base = {f.name: f for f in fmt.fields}
    xfields = {}
    if kind is not None:
        xfields = {f.name: f for f in EXTRA_FORMATS[extra_format(fmt, kind)]}
    steps: list = []
    reads = 0
    seen_src: bool | None = False  # None: depends on the fields

    def field_step(op_, f, entries, scale=1, aux=None):
        steps.append((op_, f.lo, f.mask, scale, entries, aux))
        if f.mask * scale >= len(entries):
            steps.append(None)  # (a value past the table: not described)

    for op in form.operands:
        if op.tag == "t":
            r = _TEMPLATE_REGS.get(op.text)
            if r is not None:
                if seen_src is None:
                    return None
                if seen_src:
                    reads |= reg_bits(r)
                elif writes:
                    steps.append((_CONST_W, 0, 0, 0, None, (reg_bits(r), r.file)))
            continue
        if op.tag != "f":
            continue
        name = op.field
        if kind is not None and name == "src0":
            seen_src = True
            if kind == "sdwa":
                if "src0" not in xfields or "s0" not in xfields:
                    return None
                s0 = xfields["s0"]
                steps.append((_SDWA_SRC0, xfields["src0"].lo, xfields["src0"].mask, 1, _entries(op.width),
                              (s0.lo, s0.mask)))
            elif "src0" not in xfields:
                return None
            continue  # (DPP: a VGPR)
        if kind == "sdwa" and name == "sdst":
            if "sdst" not in xfields or "sd" not in xfields:
                return None
            if writes:
                sd = xfields["sd"]
                steps.append((_SDWA_SDST, xfields["sdst"].lo, xfields["sdst"].mask, 1, _entries(1),
                              (sd.lo, sd.mask, (reg_bits(VCC_LO), VCC_LO.file))))
            continue
        f = base.get(name)
        if f is None:
            return None
        dest = name in ("vdst", "sdst")
        if (fmtname == "FLAT" and name in ("addr", "saddr")) or op.kind in ("param", "attr"):
            if name not in _DESTS:  # (no scalar register: a VGPR address or none; saddr apart)
                seen_src = True
            continue
        if op.kind == "v":
            entries, scale, maybe_none = None, 1, False  # a VGPR
        elif op.kind == "s":
            entries, scale, maybe_none = _entries(op.width), FIELD_SCALE.get(name, 1), True
        else:
            entries, scale, maybe_none = _entries(op.width), 1, True
        if dest:
            if fmtname == "SOPK" and not traits.sopk_writes:
                if entries is not None:
                    field_step(_R, f, entries, scale)
                seen_src = None if maybe_none and seen_src is not True else True
                continue
            rw = fmtname == "SOPK" and traits.sopk_reads_dst or (name == "vdst" and traits.tied)
            if entries is None:
                if writes:
                    steps.append((_CONST_W, 0, 0, 0, None, _VGPR_ENTRY))
            elif rw:
                field_step(_RW if writes else _R, f, entries, scale)
            elif writes:
                field_step(_W, f, entries, scale)
        elif name in ("sdata", "vdata", "data") and fmtname in ("SMEM", "MUBUF", "MTBUF", "MIMG", "FLAT"):
            if traits.atomic:
                if entries is not None:
                    glc = base.get("glc")
                    if fmtname != "FLAT" and glc is not None and writes:
                        field_step(_ATOMIC, f, entries, scale, (glc.lo, glc.mask))
                    else:
                        field_step(_R, f, entries, scale)
                elif fmtname != "FLAT" and "glc" in base and writes:
                    return None  # (a VGPR written by glc: not described)
            elif traits.store:
                if entries is not None:
                    field_step(_R, f, entries, scale)
            elif entries is None:
                if writes:
                    steps.append((_CONST_W, 0, 0, 0, None, _VGPR_ENTRY))
            elif writes:
                field_step(_W, f, entries, scale)
            if name not in _DESTS and maybe_none and seen_src is not True:
                seen_src = None  # (a source once it names no register)
        else:
            if entries is not None:
                field_step(_R, f, entries, scale)
            if name not in _DESTS or not maybe_none:
                seen_src = True
            elif seen_src is not True:
                seen_src = None
    if None in steps:
        return None
    if fmtname == "FLAT":
        if "seg" not in base or "saddr" not in base:
            return None
        seg, saddr = base["seg"], base["saddr"]
        steps.append((_SADDR, saddr.lo, saddr.mask, 1, None, (seg.lo, seg.mask)))
    if fmtname in _VALU or fmtname in _VMEM:
        reads |= reg_bits(EXEC_LO)
    for r in traits.implicit_reads:
        reads |= reg_bits(r)
    tail = tuple((reg_bits(r), r.file) for r in traits.implicit_writes) if writes else ()
    return ScalarPlan(tuple(steps), reads, tail, fmt.size, kind is not None)


def scalar_effects(plan: ScalarPlan, raw: bytes) -> tuple[int, list]:
    """(mask of the scalar registers read, [(mask, file) of each register
    written, in :func:`registers`' order]) of the encoding ``raw`` of the
    plan's opcode."""
    n = plan.size
    return plan.effects(int.from_bytes(raw[:n], "little"),
                        int.from_bytes(raw[n:n + 4], "little") if plan.extra else 0)
