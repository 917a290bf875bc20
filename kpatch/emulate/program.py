"""Decoded instructions turned into Python closures over a :class:`Wave`.

:func:`compile_instruction` looks at one :class:`~kpatch.isa.Instruction`
(format, fields, operand template from kpatch's opcode tables) once and
returns a function ``step(wave) -> next pc or None`` (None: fall through).
The semantics come from the tables of :mod:`kpatch.emulate.semantics`; this
module is the generic walker: operand fetch (registers, inline constants,
literals), modifiers, lane masks and writes.  Anything it does not model
raises :class:`~kpatch.emulate.errors.CannotEmulate` when the instruction is
compiled, i.e. the first time a wave reaches it.
"""

from __future__ import annotations

import re

import numpy as np

from kpatch.emulate import semantics as S
from kpatch.emulate import values as V
from kpatch.emulate.errors import CannotEmulate, EmulationError
from kpatch.emulate.memory import (
    PRIVATE_APERTURE_HI, SCRATCH_RSRC_BASE, SHARED_APERTURE_HI, from_bytes, to_bytes)
from kpatch.emulate.wave import EXEC_LO, M0, NULL, VCC_LO, lanes
from kpatch.isa import operands as O

BARRIER = -1  # returned by s_barrier
END = -2  # returned by s_endpgm

_SUFFIX = re.compile(r"_(e32|e64|sdwa|dpp)$")

#: Instructions with no effect on values (waits, hints, hazard mitigations, cache controls).
NOPS = frozenset({
    "s_nop", "s_waitcnt", "s_waitcnt_vscnt", "s_waitcnt_vmcnt", "s_waitcnt_expcnt", "s_waitcnt_lgkmcnt",
    "s_waitcnt_depctr", "s_sleep", "s_setprio", "s_inst_prefetch", "s_clause", "s_icache_inv",
    "s_dcache_inv", "s_gl1_inv", "buffer_gl0_inv", "buffer_gl1_inv", "s_ttracedata", "s_code_end",
    "v_nop", "s_version", "s_dcache_wb",
})

_M32 = 0xFFFFFFFF


def base_name(mnemonic: str) -> str:
    return _SUFFIX.sub("", mnemonic)


def _sext(v: int, bits: int) -> int:
    return v - (1 << bits) if v >> (bits - 1) & 1 else v


class Ctx:
    """What compiling needs besides the instruction: lanes per wave."""

    def __init__(self, n: int):
        self.n = n


# ---- scalar operands -----------------------------------------------------------

def scalar_src(inst, value: int, count: int, optype: str = "b32"):
    """A function wave -> int reading a scalar source of ``count`` dwords."""
    if value <= 123 or value in (M0, 126, 127):
        if count == 1:
            return lambda w: w.s[value]
        if count == 2:
            return lambda w: w.s[value] | (w.s[value + 1] << 32)
        return lambda w: w.sreg(value, count)
    if value == NULL:
        return lambda w: 0
    i = O.inline_int(value)
    if i is not None:
        c = i & ((1 << (32 * count)) - 1)
        return lambda w: c
    if 240 <= value <= 248:
        k = value - 240
        c = O.F64_BITS[k] if count == 2 else (O.F16_BITS[k] if optype in ("f16", "i16", "v2f16", "v2i16")
                                              else O.F32_BITS[k])
        return lambda w: c
    if value == O.LITERAL:
        lit = inst.literal
        if lit is None:
            raise CannotEmulate(inst.mnemonic, inst.address, "literal missing")
        if count == 2:
            if optype in ("f64",):
                c = lit << 32
            else:  # a 32-bit literal used as a 64-bit integer: sign-extended (SALU)
                c = _sext(lit, 32) & ((1 << 64) - 1)
            return lambda w: c
        return lambda w: lit
    if value == 235:  # src_shared_base
        c = SHARED_APERTURE_HI if count == 1 else SHARED_APERTURE_HI << 32
        return lambda w: c
    if value == 237:  # src_private_base
        c = PRIVATE_APERTURE_HI if count == 1 else PRIVATE_APERTURE_HI << 32
        return lambda w: c
    if value == 251:
        return lambda w: int(w.mask_value(VCC_LO) == 0)
    if value == 252:
        return lambda w: int(w.exec_value == 0)
    if value == 253:
        return lambda w: w.scc
    raise CannotEmulate(inst.mnemonic, inst.address, f"scalar operand {value}")


def scalar_dst(value: int, count: int):
    if value == NULL:
        return lambda w, x: None
    if value > 127:
        raise EmulationError(f"scalar destination {value}")
    if count == 1:
        def put(w, x):
            w.s[value] = x & _M32
        return put

    def put_n(w, x):
        for k in range(count):
            w.s[value + k] = (x >> (32 * k)) & _M32
    return put_n


# ---- vector operands -----------------------------------------------------------

def vector_src(inst, value: int, width: int, optype: str, n: int):
    """A function wave -> lane array (uint32, or uint64 when ``width`` is 2)."""
    if value >= 256:
        r = value - 256
        if width == 1:
            return lambda w: w.v[r]
        return lambda w: V.join64(w.v[r], w.v[r + 1])
    if width == 2 and value == O.LITERAL:
        lit = inst.literal
        if optype in ("f64", "b64") and _is_float_op(inst):
            c = np.uint64(lit << 32)
        else:
            raise CannotEmulate(inst.mnemonic, inst.address, "32-bit literal in a 64-bit integer operand")
        return lambda w: np.full(n, c, np.uint64)
    if width == 2 and 240 <= value <= 248:
        c = np.uint64(O.F64_BITS[value - 240])
        return lambda w: np.full(n, c, np.uint64)
    sc = scalar_src(inst, value, width, optype)
    if width == 1:
        return lambda w: np.full(n, sc(w), np.uint32)
    if O.inline_int(value) is not None:
        c = np.uint64(O.inline_int(value) & ((1 << 64) - 1))
        return lambda w: np.full(n, c, np.uint64)
    return lambda w: np.full(n, sc(w), np.uint64)


def _is_float_op(inst) -> bool:
    return bool(re.search(r"_f(16|32|64)", inst.mnemonic))


def _fields_of(inst):
    """(operand template, field values) of the form this encoding prints with."""
    return inst.d.form.operands, inst.d.fields


# ---- the compiler ----------------------------------------------------------------

def compile_instruction(inst, ctx: Ctx):
    """``step(wave) -> next pc | None | BARRIER | END`` for one instruction."""
    if inst.is_unknown:
        raise CannotEmulate(inst.text(), inst.address, "not a valid instruction")
    m = inst.mnemonic
    if m in NOPS:
        return _nop
    fmt = inst.format
    handler = _HANDLERS.get(fmt)
    if handler is None:
        raise CannotEmulate(m, inst.address)
    return handler(inst, ctx)


def _nop(w):
    return None


# -- SOPP ------------------------------------------------------------------------

def _sopp(inst, ctx):
    m = inst.mnemonic
    if m == "s_endpgm":
        return lambda w: END
    if m == "s_barrier":
        return lambda w: BARRIER
    if inst.is_branch:
        t = inst.branch_target
        cond = {
            "s_branch": lambda w: True,
            "s_cbranch_scc0": lambda w: w.scc == 0,
            "s_cbranch_scc1": lambda w: w.scc != 0,
            "s_cbranch_vccz": lambda w: w.mask_value(VCC_LO) == 0,
            "s_cbranch_vccnz": lambda w: w.mask_value(VCC_LO) != 0,
            "s_cbranch_execz": lambda w: w.exec_value == 0,
            "s_cbranch_execnz": lambda w: w.exec_value != 0,
        }.get(m)
        if cond is None:
            raise CannotEmulate(m, inst.address)
        return lambda w: t if cond(w) else None
    if m == "s_denorm_mode":
        v = inst.field("simm16")

        def denorm(w):
            w.mode_denorm32 = v & 3
            w.mode_denorm16 = (v >> 2) & 3
        return denorm
    if m == "s_round_mode":
        if inst.field("simm16") != 0:
            raise CannotEmulate(m, inst.address, "rounding other than to nearest even")
        return _nop
    raise CannotEmulate(m, inst.address)


# -- SOP1 / SOP2 / SOPK / SOPC ----------------------------------------------------

_SAVEEXEC = {
    "and": lambda s, e, m: s & e, "or": lambda s, e, m: s | e, "xor": lambda s, e, m: s ^ e,
    "andn2": lambda s, e, m: s & ~e & m, "orn2": lambda s, e, m: (s | ~e) & m,
    "nand": lambda s, e, m: ~(s & e) & m, "nor": lambda s, e, m: ~(s | e) & m,
    "xnor": lambda s, e, m: ~(s ^ e) & m, "andn1": lambda s, e, m: ~s & e & m,
    "orn1": lambda s, e, m: (~s | e) & m,
}


def _salu(inst, ctx):
    m = inst.mnemonic
    f = inst.d.fields
    addr = inst.address
    nxt = inst.address + inst.size
    # exec-mask manipulation
    mo = re.fullmatch(r"s_(\w+?)_(saveexec|wrexec)_b(32|64)", m)
    if mo:
        op = _SAVEEXEC.get(mo.group(1))
        if op is None:
            raise CannotEmulate(m, addr)
        bits = int(mo.group(3))
        if (bits == 64) != (ctx.n == 64):
            raise CannotEmulate(m, addr, f"a {bits}-bit exec operation in a wave{ctx.n}")
        src = scalar_src(inst, f["ssrc0"], bits // 32)
        dst = scalar_dst(f["sdst"], bits // 32)
        mask = (1 << bits) - 1
        wr = mo.group(2) == "wrexec"

        def saveexec(w):
            s = src(w)
            old = w.exec_value
            new = op(s, old, mask) if not wr else op(s, old, mask)
            w.exec_value = new
            dst(w, new if wr else old)
            w.scc = int(new != 0)
        return saveexec
    if m == "s_getpc_b64":
        dst = scalar_dst(f["sdst"], 2)
        return lambda w: dst(w, nxt)
    if m == "s_setpc_b64":
        src = scalar_src(inst, f["ssrc0"], 2)
        return lambda w: src(w)
    if m == "s_swappc_b64":
        src = scalar_src(inst, f["ssrc0"], 2)
        dst = scalar_dst(f["sdst"], 2)

        def swappc(w):
            t = src(w)
            dst(w, nxt)
            return t
        return swappc
    if m == "s_call_b64":
        dst = scalar_dst(f["sdst"], 2)
        t = inst.branch_target

        def call(w):
            dst(w, nxt)
            return t
        return call
    if inst.format == "SOPK":
        return _sopk(inst, ctx)
    if inst.format == "SOPC":
        return _sopc(inst, ctx)
    if m in ("s_bitset0_b32", "s_bitset1_b32", "s_bitset0_b64", "s_bitset1_b64"):
        c = 1 if m.endswith("32") else 2
        bits = 32 * c
        src = scalar_src(inst, f["ssrc0"], 1)
        d = f["sdst"]
        one = m.startswith("s_bitset1")

        def bitset(w):
            bit = 1 << (src(w) & (bits - 1))
            v = w.sreg(d, c)
            w.set_sreg(d, c, (v | bit) if one else (v & ~bit))
        return bitset
    if m in ("s_cmov_b32", "s_cmov_b64"):
        c = 1 if m.endswith("32") else 2
        src = scalar_src(inst, f["ssrc0"], c)
        dst = scalar_dst(f["sdst"], c)

        def cmov(w):
            if w.scc:
                dst(w, src(w))
        return cmov
    if m in ("s_movrels_b32", "s_movreld_b32", "s_movrels_b64", "s_movreld_b64"):
        c = 1 if m.endswith("32") else 2
        if m.startswith("s_movrels"):
            base = f["ssrc0"]

            def movrels(w):
                w.set_sreg(f["sdst"], c, w.sreg(base + w.s[M0], c))
            return movrels
        raise CannotEmulate(m, addr)
    e = S.SALU.get(m)
    if e is None or e[2] is None:
        raise CannotEmulate(m, addr)
    dbits, sbits, fn = e
    srcs = []
    names = ("ssrc0", "ssrc1")
    for k, b in enumerate(sbits):
        srcs.append(scalar_src(inst, f[names[k]], b // 32, "b64" if b == 64 else "b32"))
    dst = scalar_dst(f["sdst"], dbits // 32)
    if len(srcs) == 1:
        s0 = srcs[0]

        def sop1(w):
            r, c = fn(s0(w), w.scc)
            dst(w, r)
            if c is not None:
                w.scc = int(c)
        return sop1
    s0, s1 = srcs

    def sop2(w):
        r, c = fn(s0(w), s1(w), w.scc)
        dst(w, r)
        if c is not None:
            w.scc = int(c)
    return sop2


def _sopc(inst, ctx):
    m = inst.mnemonic
    f = inst.d.fields
    e = S.SCMP.get(m)
    if e is None or e[2] is None:
        raise CannotEmulate(m, inst.address)
    bits, signed, fn = e
    a = scalar_src(inst, f["ssrc0"], bits // 32)
    b = scalar_src(inst, f["ssrc1"], bits // 32 if not m.startswith("s_bitcmp") else 1)
    sg = (lambda x: _sext(x, bits)) if signed else (lambda x: x)

    def cmp(w):
        w.scc = int(bool(fn(sg(a(w)), sg(b(w)))))
    return cmp


def _sopk(inst, ctx):
    m = inst.mnemonic
    f = inst.d.fields
    imm = f["simm16"]
    simm = _sext(imm, 16)
    d = f["sdst"]
    if m == "s_movk_i32":
        v = simm & _M32
        return lambda w: w.s.__setitem__(d, v)
    if m == "s_cmovk_i32":
        v = simm & _M32

        def cmovk(w):
            if w.scc:
                w.s[d] = v
        return cmovk
    if m == "s_addk_i32":
        def addk(w):
            a = w.s[d]
            r = _sext(a, 32) + simm
            w.s[d] = r & _M32
            w.scc = int(not -2 ** 31 <= r < 2 ** 31)
        return addk
    if m == "s_mulk_i32":
        def mulk(w):
            w.s[d] = (w.s[d] * simm) & _M32
        return mulk
    mo = re.fullmatch(r"s_cmpk_(eq|lg|gt|ge|lt|le)_(i32|u32)", m)
    if mo:
        fn = S.SCMP[f"s_cmp_{mo.group(1)}_{mo.group(2)}"][2]
        signed = mo.group(2) == "i32"
        k = simm if signed else imm

        def cmpk(w):
            a = w.s[d]
            w.scc = int(bool(fn(_sext(a, 32) if signed else a, k)))
        return cmpk
    if m in ("s_waitcnt_vscnt", "s_waitcnt_vmcnt", "s_waitcnt_expcnt", "s_waitcnt_lgkmcnt", "s_version"):
        return _nop
    if m == "s_setreg_b32" or m == "s_setreg_imm32_b32":
        hw = imm & 0x3F
        if hw in (20, 21):  # FLAT_SCR_LO / HI: private memory is modelled per lane
            return _nop
        if hw == 1:  # MODE
            off = (imm >> 6) & 31
            size = ((imm >> 11) & 31) + 1
            src = scalar_src(inst, d, 1) if m == "s_setreg_b32" else (lambda w, c=inst.literal: c)

            def setmode(w):
                v = (src(w) & ((1 << size) - 1)) << off
                fieldmask = ((1 << size) - 1) << off
                mode = (w.mode_denorm32 << 4) | (w.mode_denorm16 << 6)
                mode = (mode & ~fieldmask) | v
                if mode & 0xF:
                    raise CannotEmulate(m, inst.address, "rounding other than to nearest even")
                if mode & ~0xFF:
                    raise CannotEmulate(m, inst.address, f"MODE bits {mode:#x}")
                w.mode_denorm32 = (mode >> 4) & 3
                w.mode_denorm16 = (mode >> 6) & 3
            return setmode
        raise CannotEmulate(m, inst.address, f"hardware register {hw}")
    if m == "s_getreg_b32":
        hw = imm & 0x3F
        off = (imm >> 6) & 31
        size = ((imm >> 11) & 31) + 1
        if hw == 15:  # SH_MEM_BASES: [15:0] private, [31:16] shared aperture, bits 63:48 of the address
            v = ((SHARED_APERTURE_HI >> 16) << 16) | (PRIVATE_APERTURE_HI >> 16)
            val = (v >> off) & ((1 << size) - 1)
            return lambda w: w.s.__setitem__(d, val)
        if hw == 1:
            def getmode(w):
                mode = (w.mode_denorm32 << 4) | (w.mode_denorm16 << 6)
                w.s[d] = (mode >> off) & ((1 << size) - 1)
            return getmode
        raise CannotEmulate(m, inst.address, f"hardware register {hw}")
    if m == "s_call_b64":
        return _salu(inst, ctx)
    raise CannotEmulate(m, inst.address)


# -- SMEM ------------------------------------------------------------------------

def _smem(inst, ctx):
    m = inst.mnemonic
    f = inst.d.fields
    mo = re.fullmatch(r"s_(load|buffer_load)_dword(x(\d+))?", m)
    if not mo:
        if m in ("s_dcache_inv", "s_gl1_inv", "s_dcache_wb"):
            return _nop
        raise CannotEmulate(m, inst.address)
    count = int(mo.group(3) or 1)
    buffer = mo.group(1) == "buffer_load"
    off = _sext(f["offset"], 21)
    so = f["soffset"]
    soff = (lambda w: 0) if so == NULL else scalar_src(inst, so, 1)
    sbase = O.sgpr_number("sbase", f["sbase"])
    dst = f["sdata"]
    if buffer:
        def sbuf(w):
            r = w.sreg(sbase, 4)
            base = r & 0xFFFFFFFFFFFF
            nrec = (r >> 64) & _M32
            o = (off + soff(w)) & ~3
            out = bytearray(4 * count)
            for k in range(count):
                if o + 4 * k + 4 <= nrec:
                    out[4 * k:4 * k + 4] = w.memory.read_scalar(base + o + 4 * k, 4)
            w.set_sreg(dst, count, int.from_bytes(out, "little"))
        return sbuf

    def sload(w):
        a = ((w.s[sbase] | (w.s[sbase + 1] << 32)) + off + soff(w)) & ~3 & ((1 << 64) - 1)
        data = w.memory.read_scalar(a, 4 * count)
        w.set_sreg(dst, count, int.from_bytes(data, "little"))
    return sload


# -- VALU ------------------------------------------------------------------------

_SEL_SHIFT = {0: (0, 8), 1: (8, 8), 2: (16, 8), 3: (24, 8), 4: (0, 16), 5: (16, 16), 6: (0, 32)}


def _sdwa_sel(x, sel: int, sext: int):
    sh, bits = _SEL_SHIFT[sel]
    if bits == 32:
        return x
    v = (x >> np.uint32(sh)) & np.uint32((1 << bits) - 1)
    if sext:
        v = v.astype(np.int64)
        v = np.where(v >> (bits - 1) & 1, v - (1 << bits), v)
        return (v & _M32).astype(np.uint32)
    return v.astype(np.uint32)


def _dpp16_perm(ctrl: int, n: int, addr: int, m: str):
    """Source lane per lane for a DPP16 control (-1: out of range), or raise."""
    lane = np.arange(n)
    row_base = lane - lane % 16
    r = lane % 16
    if ctrl <= 0xFF:
        sel = [(ctrl >> (2 * k)) & 3 for k in range(4)]
        return lane - lane % 4 + np.array(sel)[lane % 4]
    if 0x101 <= ctrl <= 0x10F:
        s = r + (ctrl & 0xF)
        return np.where(s < 16, row_base + s, -1)
    if 0x111 <= ctrl <= 0x11F:
        s = r - (ctrl & 0xF)
        return np.where(s >= 0, row_base + s, -1)
    if 0x121 <= ctrl <= 0x12F:
        return row_base + (r - (ctrl & 0xF)) % 16
    if ctrl == 0x140:
        return row_base + 15 - r
    if ctrl == 0x141:
        return lane - lane % 8 + 7 - lane % 8
    if 0x150 <= ctrl <= 0x15F:
        return row_base + (ctrl & 0xF)
    if 0x160 <= ctrl <= 0x16F:
        return row_base + (r ^ (ctrl & 0xF))
    raise CannotEmulate(m, addr, f"dpp_ctrl {ctrl:#x}")


def _valu(inst, ctx):
    m = inst.mnemonic
    base = base_name(m)
    n = ctx.n
    addr = inst.address
    kind = inst.encoding
    fmt = inst.format
    f = inst.d.fields
    x = inst.d.extra
    special = _VSPECIAL.get(base)
    if special is not None:
        if kind is not None:
            raise CannotEmulate(m, addr, f"{kind} form")
        return special(inst, ctx)
    cmp = S.compare(base)
    if cmp is not None:
        stypes, fn = cmp
        ekind, dtype = ("cmpx" if base.startswith("v_cmpx") else "cmp"), "b32"
    else:
        e = S.VALU.get(base)
        if e is None or e[3] is None:
            raise CannotEmulate(m, addr)
        ekind, dtype, stypes, fn = e
    ops = [(o.field, o.kind, o.width, o.type) for o in inst.d.form.operands if o.tag == "f"]
    optypes = {fld: t for fld, _k, _wd, t in ops}
    # which fields are sources, in order
    if fmt == "VOP3" or fmt == "VOP3P":
        src_fields = ["src0", "src1", "src2"][:len(stypes)]
    elif fmt == "VOP1":
        src_fields = ["src0"]
    else:  # VOP2, VOPC
        src_fields = ["src0", "vsrc1"]
    nsrc = len(stypes)
    readers = []
    for k, fld in enumerate(src_fields[:nsrc]):
        t = stypes[k]
        wd = V.WIDTH.get(t, 1)
        if fld == "vsrc1":
            val = 256 + f["vsrc1"]
        else:
            val = f[fld]
        readers.append((val, wd, t))
    # VOP2 forms with a third source: fmac/mac (dst), fmamk/fmaak (literal)
    if fmt == "VOP2" and nsrc == 3:
        if base in ("v_fmamk_f32", "v_madmk_f32"):
            readers = [(f["src0"], 1, "f32"), ("lit", 1, "f32"), (256 + f["vsrc1"], 1, "f32")]
        elif base in ("v_fmaak_f32", "v_madak_f32"):
            readers = [(f["src0"], 1, "f32"), (256 + f["vsrc1"], 1, "f32"), ("lit", 1, "f32")]
        else:
            readers.append((256 + f["vdst"], 1, stypes[2]))
    elif fmt == "VOP3" and nsrc == 3 and base in ("v_fmac_f32", "v_fmac_f16", "v_fmac_legacy_f32",
                                                  "v_mac_legacy_f32"):
        readers = readers[:2] + [(256 + f["vdst"], 1, stypes[2])]
    if len(readers) != nsrc:
        raise CannotEmulate(m, addr, "operands")
    # SDWA / DPP source replacement
    sdwa_src = {}
    dpp = None
    if kind == "sdwa":
        if fmt not in ("VOP1", "VOP2", "VOPC"):
            raise CannotEmulate(m, addr)
        v0 = x["src0"] + (0 if x["s0"] else 256)
        readers[0] = (v0, 1, readers[0][2])
        sdwa_src[0] = (x["src0_sel"], x["src0_sext"], x["src0_neg"], x["src0_abs"])
        if nsrc > 1 and fmt != "VOP1":
            if x["s1"]:  # src1 is an SGPR (VOP2 and VOPC alike)
                readers[1] = (f["vsrc1"], 1, readers[1][2])
            sdwa_src[1] = (x["src1_sel"], x["src1_sext"], x["src1_neg"], x["src1_abs"])
    elif kind in ("dpp16", "dpp8"):
        readers[0] = (256 + x["src0"], 1, readers[0][2])
        if kind == "dpp16":
            perm = _dpp16_perm(x["dpp_ctrl"], n, addr, m)
            fi = x["fi"]
            bound = x["bound_ctrl"]
            rowm = x["row_mask"]
            bankm = x["bank_mask"]
            lane = np.arange(n)
            wmask = np.array([(rowm >> ((l // 16) % 4)) & 1 and (bankm >> ((l % 16) // 4)) & 1
                              for l in lane], bool)
            dpp = (perm, fi, bound, wmask)
        else:
            sel = x["sel"]
            lane = np.arange(n)
            perm = lane - lane % 8 + np.array([(sel >> (3 * (l % 8))) & 7 for l in lane])
            dpp = (perm, int(f["src0"] == 0xEA), 0, np.ones(n, bool))
    # compile readers
    fetch = []
    for k, (val, wd, t) in enumerate(readers):
        if val == "lit":
            c = np.uint32(inst.literal)
            fetch.append(lambda w, c=c: np.full(n, c, np.uint32))
        else:
            otype = optypes.get(src_fields[k] if k < len(src_fields) else "", "b32")
            if t in ("f64",):
                otype = "f64"
            elif t in ("f16", "i16", "u16") and otype == "b32":
                otype = t
            fetch.append(vector_src(inst, val, wd, otype, n))
    # modifiers
    absb = negb = opsel = clamp = omod = 0
    neg_hi = 0
    opsel_hi = 0b111
    if fmt == "VOP3":
        if inst.d.info.vop3b:
            negb, clamp, omod = f["neg"], f["clamp"], f["omod"]
        else:
            absb, negb, opsel, clamp, omod = f["abs"], f["neg"], f["op_sel"], f["clamp"], f["omod"]
    elif fmt == "VOP3P":
        negb, neg_hi, opsel, clamp = f["neg"], f["neg_hi"], f["op_sel"], f["clamp"]
        opsel_hi = f["op_sel_hi"] | (f["op_sel_hi2"] << 2)
    elif kind == "sdwa" and fmt != "VOPC":
        clamp, omod = x["clamp"], x["omod"]
    elif kind == "dpp16":
        absb = x["src0_abs"] | (x["src1_abs"] << 1)
        negb = x["src0_neg"] | (x["src1_neg"] << 1)
    for k, (sel, sext, sneg, sabs) in sdwa_src.items():
        absb |= sabs << k
        negb |= sneg << k
    types = [r[2] for r in readers]
    is_float = [t in V.FLOAT for t in types]
    signbits = {t: V.SIGN.get(t, 0) for t in types}
    if base == "v_cndmask_b32":  # a select: neg/abs act on the f32 sign bit, nothing is flushed
        is_float = [True] * nsrc
        signbits = {t: V.SIGN["f32"] for t in types}
    if ekind == "pk":
        is_float = [t == "f16" for t in types]
    for k in range(nsrc):
        if ((absb | negb | neg_hi) >> k) & 1 and not is_float[k]:
            raise CannotEmulate(m, addr, "neg/abs on an integer operand")
    int_clamp = None
    if clamp and base in _SATURATING:
        int_clamp = _RANGE[dtype]
    elif clamp and not (dtype in V.FLOAT and ekind in ("alu", "pk")) and ekind not in ("cmp", "cmpx"):
        raise CannotEmulate(m, addr, "integer clamp")
    if omod and dtype not in ("f32", "f64", "f16"):
        raise CannotEmulate(m, addr, "omod")
    if ekind == "pk":
        for k in range(nsrc):
            v = readers[k][0]
            if isinstance(v, int) and 128 <= v <= 255 and (opsel_hi >> k) & 1:
                raise CannotEmulate(m, addr, "a constant in the high half of a packed operation")
    dst_hi = bool(opsel & 8) and fmt == "VOP3" and dtype in ("f16", "u16", "i16")
    if fmt == "VOP3" and opsel & 7:
        for k in range(nsrc):
            if (opsel >> k) & 1 and types[k] not in ("f16", "u16", "i16"):
                opsel &= ~(1 << k)  # ignored by 32-bit operands
    vdst = f.get("vdst", 0)
    dwidth = V.WIDTH.get(dtype, 1)

    def read(w):
        out = []
        for k in range(nsrc):
            b = fetch[k](w)
            t = types[k]
            if dpp is not None and k == 0:
                perm, fi, bound, _ = dpp
                ok = perm >= 0
                src = np.where(ok, perm, 0)
                if not fi:
                    ok = ok & w.exec[src]
                b = np.where(ok, b[src], np.uint32(0))
                w._dpp_ok = ok
            if k in sdwa_src:
                b = _sdwa_sel(b, sdwa_src[k][0], sdwa_src[k][1])
            if ekind != "pk":
                if (opsel >> k) & 1:
                    b = b >> np.uint32(16)
                if is_float[k]:
                    sb = signbits[t]
                    if (absb >> k) & 1:
                        b = b & b.dtype.type(~sb & ((1 << (64 if t == "f64" else 32)) - 1))
                    if (negb >> k) & 1:
                        b = b ^ b.dtype.type(sb)
                out.append(b)
            else:
                lo = b >> np.uint32(16) if (opsel >> k) & 1 else b & np.uint32(0xFFFF)
                hi = b >> np.uint32(16) if (opsel_hi >> k) & 1 else b & np.uint32(0xFFFF)
                if is_float[k]:
                    if (negb >> k) & 1:
                        lo = lo ^ np.uint32(0x8000)
                    if (neg_hi >> k) & 1:
                        hi = hi ^ np.uint32(0x8000)
                out.append((lo & np.uint32(0xFFFF)) | (hi << np.uint32(16)))
        return out

    def typed_srcs(w, bits):
        vals = []
        for k in range(nsrc):
            t = types[k]
            v = V.typed(bits[k], t)
            if t == "f32" and w.mode_denorm32 in (0, 2):
                v = V.flush_denormals(v)
            elif t in ("f16", "f64") and w.mode_denorm16 in (0, 2):
                v = V.flush_denormals(v)
            vals.append(v)
        return vals

    def finish(w, r):
        """Output modifiers and denormal flushing of a float result."""
        if dtype in V.FLOAT:
            r = np.asarray(r).astype({"f32": np.float32, "f16": np.float16, "f64": np.float64}[dtype])
            if omod:
                r = (r * r.dtype.type({1: 2.0, 2: 4.0, 3: 0.5}[omod])).astype(r.dtype)
            if clamp:
                r = np.where(np.isnan(r), r.dtype.type(0), np.clip(r, 0, 1)).astype(r.dtype)
            flush = w.mode_denorm32 in (0, 1) if dtype == "f32" else w.mode_denorm16 in (0, 1)
            if flush:
                r = V.flush_denormals(r)
        elif int_clamp is not None:  # saturating integer add/sub: the exact result clipped
            r = np.clip(np.asarray(r).astype(np.int64) if np.asarray(r).dtype != np.uint64
                        else np.minimum(r, np.uint64(int_clamp[1])).astype(np.int64), *int_clamp)
        return V.raw(r, dtype)

    def write(w, res, active):
        if dpp is not None:
            active = active & dpp[3]
            ok = w._dpp_ok
            if not dpp[2]:  # bound_ctrl off: lanes whose source is invalid are not written
                active = active & ok
        if dwidth == 2:
            lo, hi = V.split64(res)
            np.copyto(w.v[vdst], lo, where=active)
            np.copyto(w.v[vdst + 1], hi, where=active)
            return
        res = res.astype(np.uint32, copy=False)
        if kind == "sdwa":
            sel, unused = x["dst_sel"], x["dst_unused"]
            sh, bits = _SEL_SHIFT[sel]
            if bits < 32:
                fm = np.uint32(((1 << bits) - 1) << sh)
                val = (res << np.uint32(sh)) & fm
                old = w.v[vdst]
                if unused == 2:
                    val = val | (old & ~fm)
                elif unused == 1:
                    top = (val >> np.uint32(sh + bits - 1)) & np.uint32(1)
                    above = np.uint32((_M32 << (sh + bits)) & _M32)
                    val = np.where(top == 1, val | above, val)
                res = val
        elif dtype in ("f16", "u16", "i16") and ekind != "pk":
            if dst_hi:
                res = (w.v[vdst] & np.uint32(0xFFFF)) | ((res & np.uint32(0xFFFF)) << np.uint32(16))
            else:
                res = res & np.uint32(0xFFFF)
        np.copyto(w.v[vdst], res, where=active)

    if ekind in ("cmp", "cmpx"):
        if fmt == "VOPC" and kind != "sdwa":
            out_reg = EXEC_LO if ekind == "cmpx" else VCC_LO
        elif fmt == "VOPC":  # SDWA: sdst if sd, else vcc
            out_reg = (x["sdst"] if x["sd"] else VCC_LO) if ekind == "cmp" else EXEC_LO
        else:
            out_reg = EXEC_LO if ekind == "cmpx" else vdst
        cmpfn = fn

        def vcmp(w):
            bits = read(w)
            vals = typed_srcs(w, bits)
            r = np.asarray(cmpfn(*vals), bool) & w.exec
            w.set_mask(out_reg, r)
            if ekind == "cmpx" and out_reg != EXEC_LO:
                w.set_mask(EXEC_LO, r)
        return vcmp

    if ekind == "pk":
        def vpk(w):
            bits = read(w)
            lo = fn(*[V.typed(b, types[k]) for k, b in enumerate(bits)])
            hi = fn(*[V.typed(b >> np.uint32(16), types[k]) for k, b in enumerate(bits)])
            rl, rh = finish(w, lo), finish(w, hi)
            write(w, (rl & np.uint32(0xFFFF)) | (rh << np.uint32(16)), w.exec)
        return vpk

    if ekind == "alu":
        def valu(w):
            bits = read(w)
            write(w, finish(w, fn(*typed_srcs(w, bits))), w.exec)

        plain = not (absb or negb or opsel or clamp or omod or dst_hi or kind is not None)
        if not plain:
            return valu
        # the common case: no modifiers, no SDWA/DPP (denormals flushed as the wave's modes say)
        tf = [(fetch[k], types[k]) for k in range(nsrc)]
        floats = dtype in V.FLOAT or any(t in V.FLOAT for t in types)

        rtype = {"f32": np.float32, "f16": np.float16, "f64": np.float64}.get(dtype)

        def flushed(w):
            """The result under the wave's denormal modes (as typed_srcs and finish flush)."""
            d32, d16 = w.mode_denorm32, w.mode_denorm16
            vals = []
            for g, t in tf:
                v = V.typed(g(w), t)
                if t in V.FLOAT and (d32 if t == "f32" else d16) in (0, 2):
                    v = V.flush_denormals(v)
                vals.append(v)
            r = fn(*vals)
            if rtype is not None:
                r = np.asarray(r).astype(rtype, copy=False)
                if (d32 if dtype == "f32" else d16) in (0, 1):
                    r = V.flush_denormals(r)
            return V.raw(r, dtype)

        def fast(w):
            if floats and (w.mode_denorm32 != 3 or w.mode_denorm16 != 3):
                res = flushed(w)
            else:
                res = V.raw(fn(*[V.typed(g(w), t) for g, t in tf]), dtype)
            ex = w.exec
            if dwidth == 2:
                lo, hi = V.split64(res)
                np.copyto(w.v[vdst], lo, where=ex)
                np.copyto(w.v[vdst + 1], hi, where=ex)
            else:
                np.copyto(w.v[vdst], res.astype(np.uint32, copy=False), where=ex)
        return fast

    if ekind == "mask":
        if fmt == "VOP3":
            mreg = f["src2"]
            if mreg > 127:
                raise CannotEmulate(m, addr, "mask operand")
        elif kind == "sdwa" or kind is None or kind.startswith("dpp"):
            mreg = VCC_LO

        def cndmask(w):
            bits = read(w)
            mk = lanes(w.mask_value(mreg), n)
            vals = typed_srcs(w, bits)
            write(w, V.raw(fn(vals[0], vals[1], mk), "b32"), w.exec)
        return cndmask

    if ekind in ("co", "ci", "dscale"):
        if base == "v_mad_i64_i32" and f.get("sdst") != NULL:
            raise CannotEmulate(m, addr, "the carry-out of the signed multiply-add")
        if fmt == "VOP3":
            creg_out = f["sdst"]
            creg_in = f["src2"] if ekind == "ci" else None
        else:
            creg_out = VCC_LO
            creg_in = VCC_LO if ekind == "ci" else None
        if ekind == "ci" and fmt == "VOP3":
            fetch = fetch[:2]

        def carry(w):
            bits = read(w) if ekind != "ci" else read(w)
            vals = typed_srcs(w, bits)
            if ekind == "ci":
                cin = lanes(w.mask_value(creg_in), n).astype(np.uint64)
                r, c = fn(vals[0], vals[1], cin)
            else:
                r, c = fn(*vals)
            ex = w.exec
            write(w, finish(w, r), ex)
            w.set_mask(creg_out, np.asarray(c, bool) & ex)
        if ekind == "ci" and fmt == "VOP3":
            nsrc = 2
        return carry

    if ekind == "dfmas":
        def fmas(w):
            bits = read(w)
            vals = typed_srcs(w, bits)
            vcc = lanes(w.mask_value(VCC_LO), n)
            write(w, finish(w, fn(*vals, vcc)), w.exec)
        return fmas
    raise CannotEmulate(m, addr)


def _readfirstlane(inst, ctx):
    f = inst.d.fields
    src = vector_src(inst, f["src0"], 1, "b32", ctx.n)
    d = f["vdst"]

    def rfl(w):
        ex = w.exec
        v = src(w)
        i = int(np.argmax(ex)) if ex.any() else 0
        w.s[d] = int(v[i])
    return rfl


def _readlane(inst, ctx):
    f = inst.d.fields
    src = vector_src(inst, f["src0"], 1, "b32", ctx.n)
    sel = scalar_src(inst, f["src1"], 1)
    d = f["vdst"]
    n = ctx.n

    def rl(w):
        w.s[d] = int(src(w)[sel(w) % n])
    return rl


def _writelane(inst, ctx):
    f = inst.d.fields
    src = scalar_src(inst, f["src0"], 1)
    sel = scalar_src(inst, f["src1"], 1)
    d = f["vdst"]
    n = ctx.n

    def wl(w):
        w.v[d][sel(w) % n] = src(w)
    return wl


def _mbcnt(inst, ctx):
    f = inst.d.fields
    hi = "hi" in inst.mnemonic
    n = ctx.n
    a = vector_src(inst, f["src0"], 1, "b32", n)
    b = vector_src(inst, f["src1"], 1, "b32", n)
    d = f["vdst"]
    lane = np.arange(n)
    if f["abs"] or f["neg"] or f["op_sel"] or f["clamp"] or f["omod"]:
        raise CannotEmulate(inst.mnemonic, inst.address, "modifiers")

    # lanes below each lane, as the 32 bits of the mask half this instruction counts
    lo_bits = np.where(lane >= 32, np.uint64(_M32),
                       (np.uint64(1) << np.minimum(lane, 32).astype(np.uint64)) - np.uint64(1)) & np.uint64(_M32)
    hi_bits = np.where(lane >= 32, (np.uint64(1) << np.maximum(lane - 32, 0).astype(np.uint64)) - np.uint64(1),
                       np.uint64(0)) & np.uint64(_M32)
    below = (hi_bits if hi else lo_bits).astype(np.uint32)

    def mb(w):
        cnt = V.popcount(a(w) & below).astype(np.uint64)
        np.copyto(w.v[d], (cnt + b(w)).astype(np.uint32), where=w.exec)
    return mb


def _movrel(inst, ctx):
    """v_movrels_b32 (source VGPR index + M0), v_movreld_b32 (destination + M0),
    v_movrelsd_b32 (both)."""
    f = inst.d.fields
    m = base_name(inst.mnemonic)
    if inst.format != "VOP1" or f["src0"] < 256:
        raise CannotEmulate(inst.mnemonic, inst.address, "operands")
    s0, d = f["src0"] - 256, f["vdst"]
    rs = m in ("v_movrels_b32", "v_movrelsd_b32", "v_movrelsd_2_b32")
    rd = m in ("v_movreld_b32", "v_movrelsd_b32", "v_movrelsd_2_b32")

    def movrel(w):
        off = w.s[M0]
        si, di = s0 + (off if rs else 0), d + (off if rd else 0)
        if si > 255 or di > 255:
            raise EmulationError(f"{inst.mnemonic}: register index past v255 (m0={off})")
        np.copyto(w.v[di], w.v[si].copy(), where=w.exec)
    return movrel


def _permlane(inst, ctx):
    """v_permlane16_b32 / v_permlanex16_b32: each lane reads lane sel (4 bits of
    src1:src2 per lane) of its own row of 16 (x16: of the other row of the
    pair).  op_sel[0] is FI, op_sel[1] bound_ctrl: a source lane that is
    inactive (without FI) gives 0 with bound_ctrl, else leaves vdst as it was."""
    f = inst.d.fields
    n = ctx.n
    # abs/neg: the opcode tables say LLVM ignores them here (the compiler sets them on the lane selects)
    if f["clamp"] or f["omod"] or f["src0"] < 256:
        raise CannotEmulate(inst.mnemonic, inst.address, "operands or modifiers")
    src = f["src0"] - 256
    s1 = scalar_src(inst, f["src1"], 1)
    s2 = scalar_src(inst, f["src2"], 1)
    fi, bound = f["op_sel"] & 1, (f["op_sel"] >> 1) & 1
    d = f["vdst"]
    lane = np.arange(n)
    other = "x16" in inst.mnemonic

    def perm(w):
        sel = (s1(w) | (s2(w) << 32))
        nib = np.array([(sel >> (4 * (l % 16))) & 0xF for l in range(16)])
        row = lane // 16
        if other:
            row = row ^ 1
        srcl = row * 16 + nib[lane % 16]
        ex = w.exec
        ok = np.ones(n, bool) if fi else ex[srcl]
        v = w.v[src][srcl]
        val = np.where(ok, v, np.uint32(0) if bound else w.v[d])
        np.copyto(w.v[d], val, where=ex)
    return perm


def _swap(inst, ctx):
    f = inst.d.fields
    a, b = f["vdst"], f["src0"] - 256

    def sw(w):
        ex = w.exec
        x, y = w.v[a].copy(), w.v[b].copy()
        np.copyto(w.v[a], y, where=ex)
        np.copyto(w.v[b], x, where=ex)
    return sw


def _fma_mix(inst, ctx):
    """v_fma_mix_f32 / v_fma_mixlo_f16 / v_fma_mixhi_f16: each source is f32, or
    (op_sel_hi bit set) the f16 half op_sel picks, converted exactly; neg_hi
    is abs.  Model: a*b+c rounded once to the destination type."""
    f = inst.d.fields
    m = inst.mnemonic
    n = ctx.n
    fetch = [vector_src(inst, f[k], 1, "b32", n) for k in ("src0", "src1", "src2")]
    opsel, hi = f["op_sel"], f["op_sel_hi"] | (f["op_sel_hi2"] << 2)
    neg, absb, clamp = f["neg"], f["neg_hi"], f["clamp"]
    for k in range(3):
        v = f[("src0", "src1", "src2")[k]]
        if 128 <= v <= 255 and (hi >> k) & 1:
            raise CannotEmulate(m, inst.address, "a constant as an f16 mix operand")
    out16 = m != "v_fma_mix_f32"
    d = f["vdst"]

    def mix(w):
        vals = []
        for k in range(3):
            b = fetch[k](w)
            if (hi >> k) & 1:
                h = (b >> np.uint32(16)) if (opsel >> k) & 1 else b
                x = V.typed(h, "f16").astype(np.float32)
                if w.mode_denorm16 in (0, 2):
                    x = V.flush_denormals(V.typed(h, "f16")).astype(np.float32)
            else:
                x = V.typed(b, "f32")
                if w.mode_denorm32 in (0, 2):
                    x = V.flush_denormals(x)
            if (absb >> k) & 1:
                x = np.abs(x)
            if (neg >> k) & 1:
                x = -x
            vals.append(x)
        r = V.fma_via64(*vals, np.float16 if out16 else np.float32)
        if clamp:
            r = np.where(np.isnan(r), r.dtype.type(0), np.clip(r, 0, 1)).astype(r.dtype)
        if out16:
            if w.mode_denorm16 in (0, 1):
                r = V.flush_denormals(r)
            bits = V.raw(r, "f16")
            old = w.v[d]
            res = ((old & np.uint32(0xFFFF)) | (bits << np.uint32(16))) if m.endswith("hi_f16") \
                else ((old & np.uint32(0xFFFF0000)) | bits)
        else:
            if w.mode_denorm32 in (0, 1):
                r = V.flush_denormals(r)
            res = V.raw(r, "f32")
        np.copyto(w.v[d], res, where=w.exec)
    return mix


#: Integer operations whose clamp bit saturates (the table functions return the exact result).
_SATURATING = frozenset({"v_add_nc_u32", "v_sub_nc_u32", "v_subrev_nc_u32", "v_add_nc_i32", "v_sub_nc_i32",
                         "v_add_nc_u16", "v_sub_nc_u16", "v_add_nc_i16", "v_sub_nc_i16"})
_RANGE = {"u32": (0, 2 ** 32 - 1), "i32": (-2 ** 31, 2 ** 31 - 1), "u16": (0, 2 ** 16 - 1),
          "i16": (-2 ** 15, 2 ** 15 - 1)}

_VSPECIAL = {
    "v_readfirstlane_b32": _readfirstlane, "v_readlane_b32": _readlane, "v_writelane_b32": _writelane,
    "v_fma_mix_f32": _fma_mix, "v_fma_mixlo_f16": _fma_mix, "v_fma_mixhi_f16": _fma_mix,
    "v_permlane16_b32": _permlane, "v_permlanex16_b32": _permlane,
    "v_movrels_b32": _movrel, "v_movreld_b32": _movrel, "v_movrelsd_b32": _movrel,
    "v_mbcnt_lo_u32_b32": _mbcnt, "v_mbcnt_hi_u32_b32": _mbcnt, "v_swap_b32": _swap,
}


# -- memory: DS ---------------------------------------------------------------------

def _ds(inst, ctx):
    m = inst.mnemonic
    f = inst.d.fields
    n = ctx.n
    if f["gds"]:
        raise CannotEmulate(m, inst.address, "GDS")
    a = f["addr"]
    off = f["offset0"] | (f["offset1"] << 8)
    o0, o1 = f["offset0"], f["offset1"]
    d0, d1, vd = f["data0"], f["data1"], f["vdst"]
    mo = re.fullmatch(r"ds_(read|write|load|store)(2|2st64)?_(b32|b64|b96|b128|u8|i8|u16|i16|b8|b16)(_d16(_hi)?)?", m)
    if mo and not mo.group(4):
        rd = mo.group(1) in ("read", "load")
        two = mo.group(2)
        t = mo.group(3)
        size = {"b32": 4, "b64": 8, "b96": 12, "b128": 16, "u8": 1, "i8": 1, "b8": 1, "u16": 2, "i16": 2,
                "b16": 2}[t]
        nd = max(1, size // 4)
        if two:
            scale = size * (64 if two == "2st64" else 1)

            def ds2(w):
                ex = w.exec
                base = w.v[a][ex].astype(np.int64)
                a0 = (base + o0 * scale) & _M32  # the address wraps in 32 bits
                a1 = (base + o1 * scale) & _M32
                if rd:
                    v0 = from_bytes(w.lds.read(a0, size), nd)
                    v1 = from_bytes(w.lds.read(a1, size), nd)
                    for k in range(nd):
                        w.v[vd + k][ex] = v0[:, k]
                        w.v[vd + nd + k][ex] = v1[:, k]
                else:
                    v0 = np.stack([w.v[d0 + k][ex] for k in range(nd)], 1)
                    v1 = np.stack([w.v[d1 + k][ex] for k in range(nd)], 1)
                    _lds_write_ordered(w.lds, a0, to_bytes(v0, size), a1, to_bytes(v1, size))
            return ds2

        def ds1(w):
            ex = w.exec
            ad = (w.v[a][ex].astype(np.int64) + off) & _M32  # the address wraps in 32 bits
            if rd:
                b = w.lds.read(ad, size)
                if t in ("i8", "i16"):
                    v = from_bytes(b, 1).astype(np.int64)
                    bits = 8 * size
                    v = np.where(v >> (bits - 1) & 1, v - (1 << bits), v) & _M32
                    w.v[vd][ex] = v.astype(np.uint32)[:, 0]
                    return
                v = from_bytes(b, nd)
                for k in range(nd):
                    w.v[vd + k][ex] = v[:, k]
            else:
                v = np.stack([w.v[d0 + k][ex] for k in range(nd)], 1)
                w.lds.write(ad, to_bytes(v, size))
        return ds1
    if mo and not mo.group(2) and mo.group(3) in ("u8", "i8", "u16", "i16", "b8", "b16"):
        # d16: a byte or short into (or from) one half of the VGPR, the other half kept
        rd = mo.group(1) in ("read", "load")
        size, signed, hi = (1 if "8" in mo.group(3) else 2), mo.group(3)[0] == "i", bool(mo.group(5))

        def ds1d16(w):
            ex = w.exec
            ad = (w.v[a][ex].astype(np.int64) + off) & _M32
            if rd:
                _vmem_loaded(w, ex, vd, w.lds.read(ad, size), size, signed, True, hi)
            else:
                w.lds.write(ad, _vmem_store_data(w, ex, d0, size, hi))
        return ds1d16
    if m in ("ds_swizzle_b32",):
        return _ds_swizzle(inst, ctx)
    if m in ("ds_bpermute_b32", "ds_permute_b32"):
        perm = m == "ds_permute_b32"

        def bperm(w):
            ex = w.exec
            sel = ((w.v[a].astype(np.int64) + off) >> 2) % n
            data = w.v[d0]
            if perm:
                out_new = np.zeros(n, np.uint32)
                for lane in np.nonzero(ex)[0]:
                    out_new[sel[lane]] = data[lane]
                np.copyto(w.v[vd], out_new, where=ex)
                return
            src = sel
            val = np.where(ex[src], data[src], np.uint32(0))
            np.copyto(w.v[vd], val, where=ex)
        return bperm
    mo = re.fullmatch(r"ds_(add|sub|rsub|inc|dec|min|max|and|or|xor|mskor|cmpst|wrxchg)(_rtn)?_(u32|i32|b32|f32)", m)
    if mo:
        return _ds_atomic(inst, ctx, mo.group(1), bool(mo.group(2)), mo.group(3), off)
    mo = re.fullmatch(r"ds_(add|sub|rsub|inc|dec|min|max|and|or|xor|mskor|cmpst|wrxchg)(_rtn)?_(u64|i64|b64)", m)
    if mo:
        return _ds_atomic64(inst, ctx, mo.group(1), bool(mo.group(2)), mo.group(3) == "i64", off)
    if m == "ds_nop":
        return _nop
    raise CannotEmulate(m, inst.address)


def _lds_write_ordered(lds, a0, b0, a1, b1):
    """write2: per lane data0 then data1, lanes in order (interleaved into one
    write, whose later elements win where addresses repeat)."""
    addr = np.empty(2 * len(a0), np.int64)
    addr[0::2], addr[1::2] = a0, a1
    vals = np.empty((2 * len(a0), b0.shape[1]), np.uint8)
    vals[0::2], vals[1::2] = b0, b1
    lds.write(addr, vals)


def _ds_swizzle(inst, ctx):
    f = inst.d.fields
    n = ctx.n
    off = f["offset0"] | (f["offset1"] << 8)
    a, vd = f["addr"], f["vdst"]
    lane = np.arange(n)
    if off & 0x8000:  # quad permute mode
        sel = [(off >> (2 * k)) & 3 for k in range(4)]
        src = lane - lane % 4 + np.array(sel)[lane % 4]
    else:  # bitmask mode over groups of 32
        and_m, or_m, xor_m = off & 0x1F, (off >> 5) & 0x1F, (off >> 10) & 0x1F
        src = lane - lane % 32 + ((((lane % 32) & and_m) | or_m) ^ xor_m)

    def swz(w):
        ex = w.exec
        v = w.v[a]
        val = np.where(ex[src], v[src], np.uint32(0))
        np.copyto(w.v[vd], val, where=ex)
    return swz


def _ds_atomic(inst, ctx, op, rtn, t, off):
    f = inst.d.fields
    a, d0, d1, vd = f["addr"], f["data0"], f["data1"], f["vdst"]
    fn = _ATOMIC32[op]
    signed = t == "i32"
    fl = t == "f32"

    def atom(w):
        ex = np.nonzero(w.exec)[0]
        for lane in ex:
            ad = np.array([(int(w.v[a][lane]) + off) & _M32], np.int64)
            old = int(from_bytes(w.lds.read(ad, 4), 1)[0, 0])
            new = fn(old, int(w.v[d0][lane]), int(w.v[d1][lane]), signed, fl) & _M32
            w.lds.write(ad, to_bytes(np.array([[new]], np.uint32), 4))
            if rtn:
                w.v[vd][lane] = old
    return atom


def _ds_atomic64(inst, ctx, op, rtn, signed, off):
    """The 64-bit integer DS atomics (``ds_OP[_rtn]_{u64,i64,b64}``): each
    data operand and the returned old value are VGPR pairs; lanes in order."""
    f = inst.d.fields
    a, d0, d1, vd = f["addr"], f["data0"], f["data1"], f["vdst"]
    fn = _ATOMIC64[op]

    def atom(w):
        for lane in np.nonzero(w.exec)[0]:
            ad = np.array([(int(w.v[a][lane]) + off) & _M32], np.int64)
            o = from_bytes(w.lds.read(ad, 8), 2)[0]
            old = int(o[0]) | (int(o[1]) << 32)
            x = int(w.v[d0][lane]) | (int(w.v[d0 + 1][lane]) << 32)
            y = int(w.v[d1][lane]) | (int(w.v[d1 + 1][lane]) << 32)
            new = fn(old, x, y, signed) & _M64
            w.lds.write(ad, to_bytes(np.array([[new & _M32, new >> 32]], np.uint32), 8))
            if rtn:
                w.v[vd][lane], w.v[vd + 1][lane] = old & _M32, old >> 32
    return atom


def _f32(x):
    return float(np.array([x], np.uint32).view(np.float32)[0])


def _f32bits(x):
    return int(np.array([x], np.float32).view(np.uint32)[0])


def _amin(o, d, d1, s, fl):
    if fl:
        return _f32bits(min(_f32(o), _f32(d)))
    return (min(_sext(o, 32), _sext(d, 32)) if s else min(o, d))


def _amax(o, d, d1, s, fl):
    if fl:
        return _f32bits(max(_f32(o), _f32(d)))
    return (max(_sext(o, 32), _sext(d, 32)) if s else max(o, d))


_ATOMIC32 = {
    "add": lambda o, d, d1, s, fl: _f32bits(_f32(o) + _f32(d)) if fl else o + d,
    "sub": lambda o, d, d1, s, fl: o - d,
    "rsub": lambda o, d, d1, s, fl: d - o,
    "inc": lambda o, d, d1, s, fl: 0 if o >= d else o + 1,
    "dec": lambda o, d, d1, s, fl: d if (o == 0 or o > d) else o - 1,
    "min": _amin, "max": _amax, "smin": lambda o, d, d1, s, fl: _amin(o, d, d1, True, fl),
    "smax": lambda o, d, d1, s, fl: _amax(o, d, d1, True, fl),
    "umin": lambda o, d, d1, s, fl: min(o, d), "umax": lambda o, d, d1, s, fl: max(o, d),
    "and": lambda o, d, d1, s, fl: o & d, "or": lambda o, d, d1, s, fl: o | d,
    "xor": lambda o, d, d1, s, fl: o ^ d,
    "mskor": lambda o, d, d1, s, fl: (o & ~d) | d1,
    "cmpst": lambda o, d, d1, s, fl: d1 if o == d else o,  # DS: data0 is compare, data1 the new value
    "wrxchg": lambda o, d, d1, s, fl: d, "swap": lambda o, d, d1, s, fl: d,
}

_M64 = (1 << 64) - 1


def _min64(o, d, s):
    return min(_sext(o, 64), _sext(d, 64)) if s else min(o, d)


def _max64(o, d, s):
    return max(_sext(o, 64), _sext(d, 64)) if s else max(o, d)


#: The 64-bit integer atomics, (old, data, data1, signed) -> new, as the GFX10
#: ISA defines them (DS and FLAT/GLOBAL name some differently: ds ``cmpst``
#: compares with data0 and stores data1; flat ``cmpswap`` stores data[0:1] when
#: the old value equals data[2:3], which the caller passes as data1).
_ATOMIC64 = {
    "add": lambda o, d, d1, s: o + d, "sub": lambda o, d, d1, s: o - d, "rsub": lambda o, d, d1, s: d - o,
    "inc": lambda o, d, d1, s: 0 if o >= d else o + 1,
    "dec": lambda o, d, d1, s: d if (o == 0 or o > d) else o - 1,
    "min": lambda o, d, d1, s: _min64(o, d, s), "max": lambda o, d, d1, s: _max64(o, d, s),
    "smin": lambda o, d, d1, s: _min64(o, d, True), "smax": lambda o, d, d1, s: _max64(o, d, True),
    "umin": lambda o, d, d1, s: _min64(o, d, False), "umax": lambda o, d, d1, s: _max64(o, d, False),
    "and": lambda o, d, d1, s: o & d, "or": lambda o, d, d1, s: o | d, "xor": lambda o, d, d1, s: o ^ d,
    "mskor": lambda o, d, d1, s: (o & ~d) | d1,
    "cmpst": lambda o, d, d1, s: d1 if o == d else o,
    "cmpswap": lambda o, d, d1, s: d if o == d1 else o,
    "wrxchg": lambda o, d, d1, s: d, "swap": lambda o, d, d1, s: d,
}


# -- memory: FLAT / GLOBAL / SCRATCH ------------------------------------------------

_MEM_TYPES = {"ubyte": (1, False), "sbyte": (1, True), "ushort": (2, False), "sshort": (2, True),
              "byte": (1, False), "short": (2, False), "dword": (4, False), "dwordx2": (8, False),
              "dwordx3": (12, False), "dwordx4": (16, False)}


def _flat(inst, ctx):
    m = inst.mnemonic
    f = inst.d.fields
    seg = f["seg"]
    if f["lds"]:
        raise CannotEmulate(m, inst.address, "lds bit")
    off = f["offset"]
    off = _sext(off, 12)
    if seg == 0 and off < 0:
        raise CannotEmulate(m, inst.address, "negative flat offset")
    saddr = f["saddr"]
    va, vdata, vd = f["addr"], f["data"], f["vdst"]
    mo = re.fullmatch(r"(flat|global|scratch)_(load|store)_(\w+?)(_d16(_hi)?)?", m)
    if mo and mo.group(3) in _MEM_TYPES:
        load = mo.group(2) == "load"
        size, signed = _MEM_TYPES[mo.group(3)]
        d16 = mo.group(4)
        d16_hi = bool(mo.group(5))
        space = mo.group(1)

        def addresses(w, ex):
            if space == "scratch":
                if saddr != NULL and saddr <= 127:
                    a = np.full(int(ex.sum()), w.s[saddr], np.int64)
                    if f.get("addr") is not None and (inst.d.fields.get("rsvd55", 0) or False):
                        pass
                    return a + off
                if saddr == NULL:
                    return w.v[va][ex].astype(np.int64) + off
                raise CannotEmulate(m, inst.address, "scratch saddr")
            if space == "global" and saddr != NULL and saddr != 0x7F:
                base = w.s[saddr] | (w.s[saddr + 1] << 32)
                return (np.uint64(base) + w.v[va][ex].astype(np.uint64) + np.uint64(off & ((1 << 64) - 1))) \
                    & np.uint64((1 << 64) - 1)
            a = V.join64(w.v[va][ex], w.v[va + 1][ex])
            return (a + np.uint64(off & ((1 << 64) - 1))) & np.uint64((1 << 64) - 1)

        def mem_read(w, ex, a, nbytes):
            if space == "scratch":
                return w.private.read(np.nonzero(ex)[0], a, nbytes)
            if space == "flat":
                return _flat_access(w, ex, a, nbytes, None)
            return w.memory.read(a, nbytes)

        def mem_write(w, ex, a, data):
            if space == "scratch":
                return w.private.write(np.nonzero(ex)[0], a, data)
            if space == "flat":
                return _flat_access(w, ex, a, data.shape[1], data)
            return w.memory.write(a, data)

        if load:
            def ld(w):
                ex = w.exec
                if not ex.any():
                    return
                b = mem_read(w, ex, addresses(w, ex), size)
                _vmem_loaded(w, ex, vd, b, size, signed, d16, d16_hi)
            return ld

        def st(w):
            ex = w.exec
            if not ex.any():
                return
            mem_write(w, ex, addresses(w, ex), _vmem_store_data(w, ex, vdata, size, d16_hi))
        return st
    mo = re.fullmatch(r"(flat|global)_atomic_(\w+?)(_x2)?", m)
    if mo and mo.group(2) in _ATOMIC32 or (mo and mo.group(2) in ("cmpswap", "swap", "add_f32")):
        op = mo.group(2)
        if mo.group(3):
            return _flat_atomic64(inst, m, op, mo.group(1), saddr, va, vdata, vd, off)
        rtn = bool(f["glc"])
        fl = op == "add_f32"
        fn = _ATOMIC32["add"] if fl else (
            (lambda o, d, d1, s, fl: d if o == d1 else o) if op == "cmpswap" else _ATOMIC32[op])
        signed = op in ("smin", "smax")
        space = mo.group(1)

        def atom(w):
            ex = w.exec
            for lane in np.nonzero(ex)[0]:
                one = np.zeros(w.n, bool)
                one[lane] = True
                if space == "global" and saddr != NULL and saddr != 0x7F:
                    a = np.array([(w.s[saddr] | (w.s[saddr + 1] << 32)) + int(w.v[va][lane]) + off], np.uint64)
                else:
                    a = np.array([(int(w.v[va][lane]) | (int(w.v[va + 1][lane]) << 32)) + off], np.uint64)
                if space == "flat" and (int(a[0]) >> 32) in (SHARED_APERTURE_HI, PRIVATE_APERTURE_HI):
                    raise CannotEmulate(m, inst.address, "flat atomic to LDS or private memory")
                old = int(from_bytes(w.memory.read(a, 4), 1)[0, 0])
                d = int(w.v[vdata][lane])
                d1 = int(w.v[vdata + 1][lane]) if op == "cmpswap" else 0
                new = fn(old, d, d1, signed, fl) & _M32
                w.memory.write(a, to_bytes(np.array([[new]], np.uint32), 4))
                if rtn:
                    w.v[vd][lane] = old
        return atom
    raise CannotEmulate(m, inst.address)


def _flat_atomic64(inst, m, op, space, saddr, va, vdata, vd, off):
    """``(flat|global)_atomic_OP_x2``: 64-bit data in VGPR pairs (cmpswap: the
    new value in data[0:1], the compare value in data[2:3]); with GLC the old
    value returns to vdst[0:1]; lanes in order."""
    if op not in _ATOMIC64 or op in ("min", "max", "cmpst", "wrxchg", "mskor", "rsub"):
        raise CannotEmulate(m, inst.address)
    fn = _ATOMIC64[op]
    rtn = bool(inst.d.fields["glc"])

    def atom(w):
        for lane in np.nonzero(w.exec)[0]:
            if space == "global" and saddr != NULL and saddr != 0x7F:
                a = np.array([(w.s[saddr] | (w.s[saddr + 1] << 32)) + int(w.v[va][lane]) + off], np.uint64)
            else:
                a = np.array([(int(w.v[va][lane]) | (int(w.v[va + 1][lane]) << 32)) + off], np.uint64)
            if space == "flat" and (int(a[0]) >> 32) in (SHARED_APERTURE_HI, PRIVATE_APERTURE_HI):
                raise CannotEmulate(m, inst.address, "flat atomic to LDS or private memory")
            o = from_bytes(w.memory.read(a, 8), 2)[0]
            old = int(o[0]) | (int(o[1]) << 32)
            d = int(w.v[vdata][lane]) | (int(w.v[vdata + 1][lane]) << 32)
            d1 = (int(w.v[vdata + 2][lane]) | (int(w.v[vdata + 3][lane]) << 32)) if op == "cmpswap" else 0
            new = fn(old, d, d1, False) & _M64
            w.memory.write(a, to_bytes(np.array([[new & _M32, new >> 32]], np.uint32), 8))
            if rtn:
                w.v[vd][lane], w.v[vd + 1][lane] = old & _M32, old >> 32
    return atom


def _vmem_loaded(w, ex, vd, b, size, signed, d16, d16_hi):
    """Put the bytes ``b`` (lanes, size) a FLAT/GLOBAL/SCRATCH or MUBUF load
    read into the VGPRs from ``vd`` of the active lanes: sub-dword values
    sign- or zero-extended, or (d16) into the low or high half keeping the
    other; dword values one register each."""
    if size < 4:
        v = from_bytes(b, 1)[:, 0].astype(np.int64)
        if signed:
            bits = 8 * size
            v = np.where(v >> (bits - 1) & 1, v - (1 << bits), v)
        v = (v & _M32).astype(np.uint32)
        if d16:
            old = w.v[vd][ex]
            v = ((old & np.uint32(0xFFFF)) | ((v & np.uint32(0xFFFF)) << np.uint32(16)) if d16_hi
                 else (old & np.uint32(0xFFFF0000)) | (v & np.uint32(0xFFFF)))
        w.v[vd][ex] = v
        return
    v = from_bytes(b, max(1, size // 4))
    for k in range(v.shape[1]):
        w.v[vd + k][ex] = v[:, k]


def _vmem_store_data(w, ex, vdata, size, d16_hi):
    """The bytes (lanes, size) a VMEM store of ``size`` bytes writes from the
    VGPRs at ``vdata`` of the active lanes (d16_hi: the high halves)."""
    if size < 4:
        v = w.v[vdata][ex]
        if d16_hi:
            v = v >> np.uint32(16)
        return to_bytes(v[:, None], size)
    return to_bytes(np.stack([w.v[vdata + k][ex] for k in range(max(1, size // 4))], 1), size)


def _flat_access(w, ex, a, nbytes, data):
    """A FLAT access: each lane goes to LDS, private or global memory by its aperture."""
    hi = (a >> np.uint64(32)).astype(np.int64)
    lds = hi == SHARED_APERTURE_HI
    prv = hi == PRIVATE_APERTURE_HI
    glb = ~(lds | prv)
    low = (a & np.uint64(_M32)).astype(np.int64)
    lane_ids = np.nonzero(ex)[0]
    if data is None:
        out = np.zeros((len(a), nbytes), np.uint8)
        if lds.any():
            out[lds] = w.lds.read(low[lds], nbytes)
        if prv.any():
            out[prv] = w.private.read(lane_ids[prv], low[prv], nbytes)
        if glb.any():
            out[glb] = w.memory.read(a[glb], nbytes)
        return out
    if lds.any():
        w.lds.write(low[lds], data[lds])
    if prv.any():
        w.private.write(lane_ids[prv], low[prv], data[prv])
    if glb.any():
        w.memory.write(a[glb], data[glb])


# -- memory: MUBUF -------------------------------------------------------------------

def _mubuf(inst, ctx):
    m = inst.mnemonic
    f = inst.d.fields
    if f["lds"] or f["tfe"]:
        raise CannotEmulate(m, inst.address, "lds/tfe")
    atomic = re.fullmatch(r"buffer_atomic_(\w+?)(_x2)?", m)
    if atomic:
        if atomic.group(1) not in _MUBUF_ATOMICS:
            raise CannotEmulate(m, inst.address)
        load, size, signed, d16, d16_hi = False, 8 if atomic.group(2) else 4, False, None, False
    else:
        mo = re.fullmatch(r"buffer_(load|store)_(\w+?)(_d16(_hi)?)?", m)
        if not mo or mo.group(2) not in _MEM_TYPES:
            raise CannotEmulate(m, inst.address)
        load = mo.group(1) == "load"
        size, signed = _MEM_TYPES[mo.group(2)]
        d16 = mo.group(3)
        d16_hi = bool(mo.group(4))
    offen, idxen = f["offen"], f["idxen"]
    ioff = f["offset"]
    va, vdata = f["vaddr"], f["vdata"]
    srsrc = O.sgpr_number("srsrc", f["srsrc"])
    so = f["soffset"]
    soff = scalar_src(inst, so, 1)

    def access(w, ex):
        r = w.sreg(srsrc, 4)
        base = r & 0xFFFFFFFFFFFF
        stride = (r >> 48) & 0x3FFF
        nrec = (r >> 64) & _M32
        w3 = r >> 96
        vidx = w.v[va][ex].astype(np.int64) if idxen else np.zeros(int(ex.sum()), np.int64)
        voff = w.v[va + idxen][ex].astype(np.int64) if offen else np.zeros(int(ex.sum()), np.int64)
        if base == SCRATCH_RSRC_BASE:
            return ("private", voff + ioff + soff(w), None)
        if w3 == 0:
            # A resource whose word 3 is all zero (FORMAT 0 = BUF_FMT_INVALID, RESOURCE_LEVEL 0,
            # OOB_SELECT 0) is switched off: nothing is read (0) or written.  Inferred, not from
            # AMD's ISA text: MIOpen's Winograd v30 kernels switch their bias buffer off this way,
            # word 3 zeroed and the base never loaded, and read through it on every dispatch.
            # Only the all-zero word is taken so; any other resource is checked as the fields say.
            n = int(ex.sum())
            return ("global", np.zeros(n, np.uint64), np.zeros((n, 1), bool))
        if (w3 >> 23) & 1 or (w3 >> 19) & 3:
            raise CannotEmulate(m, inst.address, "swizzled / add-tid buffer resource")
        oob = (w3 >> 28) & 3
        offset = voff + ioff
        # OOB_SELECT 3 (raw) checks each dword of a dwordx2/x3/x4 on its own, all of its bytes
        # inside NUM_RECORDS: the RDNA ISA's range checking ("Load/store-Dword-x{2,3,4}
        # range-check per component"; format instructions and atomics all or nothing), so a
        # partly out-of-range access keeps the components inside.  Mesa's wording "out of
        # bounds if offset >= num_records" names the start of a component; a component that
        # starts inside and ends past NUM_RECORDS (an unaligned dword) is out of range here,
        # as LLVM's AMDGPUUsage describes buffer bounds checking (amdgpu.buffer.oob.mode).
        # atomics are checked all or nothing (the whole 4 or 8 bytes inside)
        comps = (np.arange(size // 4) * 4)[None, :] if size > 4 and not atomic else np.zeros((1, 1), np.int64)
        part = size if atomic else min(size, 4)
        if stride == 0 and not idxen:
            if oob != 3 and oob != 2 and oob != 1 and oob != 0:
                raise CannotEmulate(m, inst.address, f"OOB_SELECT {oob}")
            a = np.uint64(base) + (offset + soff(w)).astype(np.uint64)
            if oob == 3:
                inr = offset[:, None] + comps + part <= nrec
            elif oob == 2:
                inr = np.full((len(offset), 1), nrec != 0)
            else:
                inr = (offset + soff(w) + size <= nrec)[:, None]
            return ("global", a, inr)
        if oob == 2:
            raise CannotEmulate(m, inst.address, f"structured buffer with OOB_SELECT {oob}")
        a = np.uint64(base) + (vidx * stride + offset + soff(w)).astype(np.uint64)
        if oob == 3:
            # raw range check on the linear buffer offset (not swizzled: index * stride +
            # offset), the same rule as the raw (stride 0) case above
            inr = (vidx * stride + offset)[:, None] + comps + part <= nrec
        else:
            inr = ((vidx < nrec) & ((offset < stride) if oob == 0 else True))[:, None]
        return ("global", a, np.broadcast_to(inr, (len(vidx), inr.shape[1])).copy())

    if load:
        def bld(w):
            ex = w.exec
            if not ex.any():
                return
            space, a, inr = access(w, ex)
            if space == "private":
                b = w.private.read(np.nonzero(ex)[0], a, size)
            else:
                b = np.zeros((len(a), size), np.uint8)
                _buffer_parts(inr, size, lambda sel, lo, n: b.__setitem__(
                    (sel, slice(lo, lo + n)), w.memory.read(a[sel] + np.uint64(lo), n)))
            _vmem_loaded(w, ex, vdata, b, size, signed, d16, d16_hi)
        return bld

    if atomic:
        return _mubuf_atomic(inst, m, atomic.group(1), size, vdata, access)

    def bst(w):
        ex = w.exec
        if not ex.any():
            return
        space, a, inr = access(w, ex)
        data = _vmem_store_data(w, ex, vdata, size, d16_hi)
        if space == "private":
            w.private.write(np.nonzero(ex)[0], a, data)
        else:
            _buffer_parts(inr, size, lambda sel, lo, n: w.memory.write(a[sel] + np.uint64(lo), data[sel, lo:lo + n]))
    return bst


#: The MUBUF atomics modelled, 32-bit and (``_x2``) 64-bit: integer ones only
#: (``fcmpswap``/``fmin``/``fmax``/``csub`` stop the run).
_MUBUF_ATOMICS = ("swap", "cmpswap", "add", "sub", "smin", "umin", "smax", "umax",
                  "and", "or", "xor", "inc", "dec")


def _mubuf_atomic(inst, m, op, size, vdata, access):
    """``buffer_atomic_OP[_x2]``: the data in vdata (a VGPR pair for _x2;
    cmpswap: the new value in vdata[0] / [0:1], the compare value in the next
    one / pair), lanes in order, with the resource's range check all or
    nothing: a lane out of range reads 0 and writes nothing, as the ISA's
    range checking has out-of-range reads return zero and writes dropped.
    With GLC the old value returns to vdata[0] (vdata[0:1] for _x2)."""
    rtn = bool(inst.d.fields["glc"])
    wide = size == 8
    dw = size // 4
    signed = op in ("smin", "smax")
    if wide:
        fn64 = _ATOMIC64[op]
        fn = lambda o, d, d1: fn64(o, d, d1, signed) & _M64  # noqa: E731
    else:
        fn32 = (lambda o, d, d1, s, fl: d if o == d1 else o) if op == "cmpswap" else _ATOMIC32[op]
        fn = lambda o, d, d1: fn32(o, d, d1, signed, False) & _M32  # noqa: E731

    def reg(w, r, lane):
        return int(w.v[r][lane]) | ((int(w.v[r + 1][lane]) << 32) if wide else 0)

    def atom(w):
        ex = w.exec
        if not ex.any():
            return
        space, a, inr = access(w, ex)
        if space == "private":
            raise CannotEmulate(m, inst.address, "atomic to private memory")
        for k, lane in enumerate(np.nonzero(ex)[0]):
            old = 0
            if inr[k, 0]:
                ad = a[k:k + 1]
                o = from_bytes(w.memory.read(ad, size), dw)[0]
                old = int(o[0]) | ((int(o[1]) << 32) if wide else 0)
                d = reg(w, vdata, lane)
                d1 = reg(w, vdata + dw, lane) if op == "cmpswap" else 0
                new = fn(old, d, d1)
                w.memory.write(ad, to_bytes(np.array([[new & _M32, new >> 32][:dw]], np.uint32), size))
            if rtn:
                w.v[vdata][lane] = old & _M32
                if wide:
                    w.v[vdata + 1][lane] = old >> 32
    return atom


def _buffer_parts(inr, size: int, fn) -> None:
    """Call ``fn(lanes, first byte, bytes)`` for the part of a buffer access
    the range check ``inr`` (lanes x components) lets through: the whole
    access when there is one component, else each dword."""
    if inr.shape[1] == 1:
        if inr[:, 0].any():
            fn(inr[:, 0], 0, size)
        return
    for k in range(inr.shape[1]):
        if inr[:, k].any():
            fn(inr[:, k], 4 * k, 4)


_HANDLERS = {
    "SOPP": _sopp, "SOP1": _salu, "SOP2": _salu, "SOPK": _sopk, "SOPC": _sopc, "SMEM": _smem,
    "VOP1": _valu, "VOP2": _valu, "VOP3": _valu, "VOPC": _valu, "VOP3P": _valu,
    "DS": _ds, "FLAT": _flat, "MUBUF": _mubuf,
}
