"""The named transformations rules ask for with ``fix = "..."``.

Each fix turns one finding into edits of the kernel's code, or raises
:class:`CannotFix` naming what stops it; none of them guesses.  Fixes that
need registers of their own take them from :class:`~kpatch.rewrite.spareregs.VgprBudget`
(VGPRs no instruction of the kernel names), never from registers liveness
analysis merely believes dead.

Exact fixes (rule sets gfx1010-isa, gfx1010-hazards):

* ``flat-offset-fold`` - ``flat_* ... v[a:a+1] offset:N`` becomes
  ``v_mad_u64_u32 v[t:t+1], null, N, 1, v[a:a+1]`` then the access with
  ``v[t:t+1]`` and offset 0: the same 64-bit address, computed by a VALU
  that writes no SGPR, VCC or SCC.  Offsets with bit 11 set are refused
  (LLVM never assembles them for FLAT; their meaning on gfx1010 is unknown).
* ``scratch-offset-fold`` - ``scratch_* ... vA, off offset:-N`` becomes
  ``v_add_nc_u32 vT, -N, vA`` then the access with ``vT`` and offset 0.
* ``nsa-to-contiguous`` - an NSA image instruction with more addresses than
  gfx1010's 5 becomes ``v_mov_b32`` copies of its addresses into spare
  ``v[t:t+n-1]`` and the same instruction in non-NSA form reading them
  (refused unless LLVM's address list has exactly the opcode's address count
  for its dim and a16, and the new encoding decodes to that tuple).
* ``drop-clause`` - the ``s_clause`` in front of an NSA image instruction
  becomes ``s_nop 0``: a clause only asks the hardware to keep memory
  instructions together, it changes no result.
* ``vsharp-llc-noalloc`` - the ``s_mov_b32`` of a literal that defines word 3
  of a buffer descriptor (the finding's first address) gets the literal with
  bits 26-27 (LLC_NOALLOC) clear; any other definition is refused.
* ``int-dot-expand`` - the integer dot products gfx1010 lacks
  (``v_dot4c_i32_i8``, ``v_dot4_i32_i8``, ``v_dot4_u32_u8``,
  ``v_dot2_i32_i16``, ``v_dot2_u32_u16``) become one
  ``v_mul_{i32_i24,u32_u24}_sdwa`` per lane pair (SDWA selects and sign- or
  zero-extends byte/word k of both sources; the product of two 8- or 16-bit
  values is exact in 32 bits) and one ``v_add_nc_u32`` into the
  accumulator: the same sum modulo 2^32, as the dot without clamp computes
  it.  One spare VGPR holds the product (two when the destination is also a
  source); clamp, modifiers, DPP/SDWA forms and non-VGPR multiplicands are
  refused, and so are the 4-bit dots (SDWA cannot select a nibble).
* ``opcode-reuse`` - re-encodes an instruction with the gfx1010 opcode of the
  same mnemonic; the only reused opcodes of gfx1030 (the fused legacy
  multiply-adds) have none, so it refuses them and names the approximation.

Every ``fix = "..."`` of a rule file names an entry of :data:`FIXES`, the
functions of the names listed, as data, in :mod:`kpatch.rewrite.fixnames`
(which the rule loader checks against); those in its ``NEEDS_FINDING`` work
from what the analysis found beyond the instruction (``finding.addresses``),
so only ``match.finding`` rules take them.  A ``match.mnemonic`` rule's fix gets an
:class:`InstructionMatch` in place of a finding.

Approximations (rule sets marked ``approximation = true``, used only with
``--allow-approx NAME``):

* ``keep-legacy-mad`` - leaves ``v_fmac_legacy_f32``/``v_fma_legacy_f32`` as
  they are: gfx1010 runs the same bytes as ``v_mac_legacy_f32``/
  ``v_mad_legacy_f32``, unfused (the product is rounded before the add) and
  without f32 denormals;
* ``dot2-fma-mix`` - ``v_dot2c_f32_f16``/``v_dot2_f32_f16`` become two
  ``v_fma_mix_f32`` (high halves, then low halves): two roundings instead of
  gfx1030's one.
"""

from __future__ import annotations

from dataclasses import dataclass

from kpatch.codeobject import CodeObject
from kpatch.isa import build, decode, encode
from kpatch.isa import formats as F
from kpatch.isa.dots import INT_DOTS, int_dot
from kpatch.isa.operands import inline_code, mimg_operands, signed12
from kpatch.rewrite.edits import CannotFix, Edit
from kpatch.rewrite.spareregs import KernelCode, VgprBudget

TARGET = "gfx1010"
NULL = 0x7D
SRC_LITERAL = 0xFF
FLAT_MAX_OFFSET = 0x7FF  # LLVM: "expected a 11-bit unsigned offset" for FLAT
LLC_NOALLOC_MASK = 0x3 << 26
SOURCE_ISA = "gfx1030"


@dataclass(frozen=True)
class InstructionMatch:
    """What a ``match.mnemonic`` rule's fix works on, in place of a finding:
    the matched instruction (``cls`` names the rule in messages)."""

    cls: str
    address: int
    addresses: tuple = ()


@dataclass
class FixContext:
    """What fixes of one kernel share: its code and its spare VGPRs (made on first use)."""

    co: CodeObject
    kernel: object
    _code: KernelCode | None = None
    _budget: VgprBudget | None = None

    @property
    def code(self) -> KernelCode:
        if self._code is None:
            self._code = KernelCode.of(self.co, self.kernel)
        return self._code

    @property
    def budget(self) -> VgprBudget | None:
        return self._budget

    def spare(self, n: int, why: str) -> int:
        if getattr(self.kernel, "descriptor", None) is None:
            raise CannotFix(f"{why} needs {n} spare VGPR(s), and {self.kernel.name} is a device function: "
                            f"its registers are its callers' (calling convention), so kpatch takes none")
        if self._budget is None:
            self._budget = VgprBudget.of(self.co, self.kernel, self.code)
        return self._budget.take(n, why)

    def inst(self, finding, address: int | None = None):
        at = finding.address if address is None else address
        i = self.code.at(at)
        if i is None:
            raise CannotFix(f"{finding.cls} at {at:#x}: no instruction of kernel {self.kernel.name} starts there")
        return i


def _src(value: int) -> tuple[int, int | None]:
    """9-bit source and literal for the integer ``value``."""
    inline = inline_code(value)
    return (inline, None) if inline is not None else (SRC_LITERAL, value & 0xFFFFFFFF)


def _unclause(ctx: FixContext, finding, rule: str) -> list[Edit]:
    """Inserted code must not land inside a clause: drop the clause around ``finding``."""
    c = ctx.code.clause_covering(finding.address)
    if c is None:
        return []
    return [Edit(c.address, "replace", build.s_nop(0, TARGET), rule, note="drop s_clause")]


def _replace(ctx: FixContext, finding, inst, code: bytes, rule: str, note: str) -> list[Edit]:
    """``inst`` becomes ``code`` (instructions that now run before it, then its
    new form); a clause around it is dropped."""
    return _unclause(ctx, finding, rule) + [Edit(inst.address, "replace", code, rule, note=note)]


def flat_offset_fold(ctx: FixContext, finding, rule: str) -> list[Edit]:
    i = ctx.inst(finding)
    f = i.fields
    if i.format != "FLAT" or f.get("seg") != 0 or f.get("saddr") != NULL:
        raise CannotFix(f"{i.text()} at {i.address:#x} is not a FLAT-segment access with a VGPR address")
    off = f["offset"]
    if off > FLAT_MAX_OFFSET:
        raise CannotFix(f"{i.text()} at {i.address:#x}: offset {off} has bit 11 set, which LLVM never "
                        f"assembles for FLAT; kpatch does not know what it means on gfx1010")
    t = ctx.spare(2, f"folding the offset of {i.text()} at {i.address:#x}")
    src0, lit = _src(off)
    mad = build.instruction("v_mad_u64_u32", TARGET, vdst=t, sdst=NULL, src0=src0, src1=129,
                            src2=256 + f["addr"], literal=lit)
    return _replace(ctx, finding, i, mad + encode(i, addr=t, offset=0), rule,
                    f"offset {off} folded into v[{t}:{t + 1}]")


def scratch_offset_fold(ctx: FixContext, finding, rule: str) -> list[Edit]:
    i = ctx.inst(finding)
    f = i.fields
    if i.format != "FLAT" or f.get("seg") != 1 or f.get("saddr") != NULL:
        raise CannotFix(f"{i.text()} at {i.address:#x} is not a scratch access with a VGPR address")
    off = signed12(f["offset"])
    t = ctx.spare(1, f"folding the offset of {i.text()} at {i.address:#x}")
    src0, lit = _src(off)
    add = build.instruction("v_add_nc_u32_e32", TARGET, vdst=t, src0=src0, vsrc1=f["addr"], literal=lit)
    return _replace(ctx, finding, i, add + encode(i, addr=t, offset=0), rule, f"offset {off} folded into v{t}")


def nsa_to_contiguous(ctx: FixContext, finding, rule: str) -> list[Edit]:
    from kpatch.isa.decoder import decode_one
    from kpatch.isa.encoder import encode_fields

    i = ctx.inst(finding)
    d = i.d
    img = d.info.img if d.info is not None else None
    if i.format != "MIMG" or img is None or img.bvh or not d.fields.get("nsa"):
        raise CannotFix(f"{i.text()} at {i.address:#x} is not an NSA image sample/load kpatch can rewrite")
    f = d.fields
    ops = mimg_operands(f, d.info, d.raw)
    n = img.addr[f["dim"] + 8 * f["a16"]]
    if ops is None or not isinstance(ops[1], list) or n is None or len(ops[1]) != n:
        raise CannotFix(f"{i.text()} at {i.address:#x}: its address list does not have the opcode's "
                        f"address count for its dim, so kpatch cannot tell what the hardware reads")
    t = ctx.spare(n, f"the {n} addresses of {i.text()} at {i.address:#x}")
    movs = b"".join(build.v_mov_b32(t + k, 256 + r, TARGET) for k, r in enumerate(ops[1]))
    new = encode_fields(d.fmt, {**f, "nsa": 0, "vaddr": t}, nsa=b"")
    check = decode_one(new, TARGET)
    got = mimg_operands(check.fields, check.d.info, check.raw) if not check.is_unknown else None
    if got is None or got[1] != (t, n) or check.size != len(new):
        raise CannotFix(f"{i.text()} at {i.address:#x}: the non-NSA form with v[{t}:{t + n - 1}] does not "
                        f"decode as that address tuple for gfx1010")
    return _replace(ctx, finding, i, movs + new, rule, f"{n} addresses copied to v[{t}:{t + n - 1}]")


def drop_clause(ctx: FixContext, finding, rule: str) -> list[Edit]:
    if not finding.addresses:
        raise CannotFix(f"{finding.cls} at {finding.address:#x}: the finding names no s_clause")
    c = ctx.inst(finding, finding.addresses[0])
    if c.mnemonic != "s_clause":
        raise CannotFix(f"{finding.cls} at {finding.address:#x}: {c.text()} at {c.address:#x} is not an s_clause")
    return [Edit(c.address, "replace", build.s_nop(0, TARGET), rule, note="drop s_clause")]


def vsharp_llc_noalloc(ctx: FixContext, finding, rule: str) -> list[Edit]:
    """Clear LLC_NOALLOC in the literal of the s_mov_b32 that defines V# word 3."""
    if not finding.addresses:
        raise CannotFix(f"VsharpLlcNoalloc at {finding.address:#x}: no defining instruction")
    co = ctx.co
    at = finding.addresses[0]
    text = co.section(".text")
    off = at - text.addr
    inst = decode(co.text[off : off + 12], SOURCE_ISA, at)[0]
    if inst.mnemonic != "s_mov_b32" or inst.literal is None:
        raise CannotFix(f"VsharpLlcNoalloc: word 3 is defined by {inst.text()} at {at:#x}, "
                        f"not by an s_mov_b32 of a literal; kpatch only rewrites that form")
    return [Edit(at, "replace", encode(inst, literal=inst.literal & ~LLC_NOALLOC_MASK), rule,
                 note="clear LLC_NOALLOC")]


def opcode_reuse(ctx: FixContext, finding, rule: str) -> list[Edit]:
    from kpatch.isa.tables import load

    i = ctx.inst(finding)
    info = load(TARGET).by_mnemonic.get(i.mnemonic)
    if info is None or info.fmt.name != i.format:
        hint = f" (approximation: --allow-approx {APPROX_FOR.get(i.mnemonic)})" if i.mnemonic in APPROX_FOR else ""
        raise CannotFix(f"OpcodeReuse at {i.address:#x}: {i.text()} has no gfx1010 form with the same "
                        f"meaning{hint}")
    return [Edit(i.address, "replace", encode(i, opcode=info.opcode), rule)]


def keep_legacy_mad(ctx: FixContext, finding, rule: str) -> list[Edit]:
    i = ctx.inst(finding)
    if not i.mnemonic.startswith(("v_fmac_legacy_f32", "v_fma_legacy_f32")):
        raise CannotFix(f"{i.text()} at {i.address:#x} is not a legacy fused multiply-add")
    return []


def dot2_fma_mix(ctx: FixContext, finding, rule: str) -> list[Edit]:
    i = ctx.inst(finding)
    f = i.fields
    if i.mnemonic == "v_dot2c_f32_f16_e32":
        a, b, c, d = f["src0"], 256 + f["vsrc1"], 256 + f["vdst"], f["vdst"]
    elif i.mnemonic == "v_dot2_f32_f16":
        plain = dict(op_sel=0, op_sel_hi=3, op_sel_hi2=1, neg=0, neg_hi=0, clamp=0)
        if any(f.get(k) != v for k, v in plain.items()):
            raise CannotFix(f"{i.text()} at {i.address:#x}: modifiers dot2-fma-mix does not translate")
        a, b, c, d = f["src0"], f["src1"], f["src2"], f["vdst"]
    else:
        raise CannotFix(f"{i.text()} at {i.address:#x}: dot2-fma-mix only rewrites the plain "
                        f"v_dot2c_f32_f16_e32 and v_dot2_f32_f16")
    for s in (a, b):
        if not (s >= 256 or s <= 105):
            raise CannotFix(f"{i.text()} at {i.address:#x}: dot2-fma-mix needs register sources")
    if c == SRC_LITERAL or (128 <= c < 256 and c != NULL):
        raise CannotFix(f"{i.text()} at {i.address:#x}: dot2-fma-mix needs a register accumulator")
    first = d
    if 256 + d in (a, b):
        first = ctx.spare(1, f"the partial sum of {i.text()} at {i.address:#x}")
    hi = build.instruction("v_fma_mix_f32", TARGET, vdst=first, src0=a, src1=b, src2=c,
                           op_sel=3, op_sel_hi=3, op_sel_hi2=0)
    lo = build.instruction("v_fma_mix_f32", TARGET, vdst=d, src0=a, src1=b, src2=256 + first,
                           op_sel=0, op_sel_hi=3, op_sel_hi2=0)
    return [Edit(i.address, "replace", hi + lo, rule, note="approximation dot2-fma-mix")]


SDWA_BYTE0, SDWA_WORD0, SDWA_DWORD, SDWA_UNUSED_PAD = 0, 4, 6, 0


def int_dot_expand(ctx: FixContext, finding, rule: str) -> list[Edit]:
    """An integer dot product as exact 24-bit multiplies of SDWA-selected
    elements, added into the accumulator (see the module docstring)."""
    i = ctx.inst(finding)
    where = f"{i.text()} at {i.address:#x}"
    dot = int_dot(i.mnemonic, i.format, i.fields)
    if dot is None:
        raise CannotFix(f"{where}: int-dot-expand rewrites only {', '.join(INT_DOTS)}")
    if dot.problem:
        raise CannotFix(f"{where}: int-dot-expand does not translate {dot.problem}")
    signed, bits, n, a, b, c, d = dot.signed, dot.bits, dot.n, dot.a, dot.b, dot.c, dot.d
    # spares are transient: one take() for all this fix needs at once
    if 256 + d in (a, b):  # the partial sum cannot live in D while D is still read
        product = ctx.spare(2, f"the product and the partial sum of {where}")
        acc = product + 1
    else:
        product, acc = ctx.spare(1, f"the products of {where}"), d
    mul = "v_mul_i32_i24_e32" if signed else "v_mul_u32_u24_e32"
    first = SDWA_BYTE0 if bits == 8 else SDWA_WORD0
    code = b""
    for k in range(n):
        sel = first + k
        code += build.instruction(mul, TARGET, vdst=product, src0=F.SRC_SDWA, vsrc1=b - 256,
                                  extra=dict(src0=a - 256, dst_sel=SDWA_DWORD, dst_unused=SDWA_UNUSED_PAD,
                                             src0_sel=sel, src0_sext=int(signed), src1_sel=sel,
                                             src1_sext=int(signed)))
        code += build.instruction("v_add_nc_u32_e32", TARGET, vdst=acc, src0=c if k == 0 else 256 + acc,
                                  vsrc1=product)
    if acc != d:
        code += build.instruction("v_mov_b32_e32", TARGET, vdst=d, src0=256 + acc)
    return [Edit(i.address, "replace", code, rule, note="int-dot-expand")]


FIXES = {
    "flat-offset-fold": flat_offset_fold,
    "scratch-offset-fold": scratch_offset_fold,
    "nsa-to-contiguous": nsa_to_contiguous,
    "drop-clause": drop_clause,
    "vsharp-llc-noalloc": vsharp_llc_noalloc,
    "opcode-reuse": opcode_reuse,
    "keep-legacy-mad": keep_legacy_mad,
    "dot2-fma-mix": dot2_fma_mix,
    "int-dot-expand": int_dot_expand,
}
#: the approximation rule (by name) that handles a mnemonic kpatch cannot rewrite exactly
APPROX_FOR = {
    "v_fmac_legacy_f32_e32": "legacy-fma-as-mad",
    "v_fmac_legacy_f32_e64": "legacy-fma-as-mad",
    "v_fma_legacy_f32": "legacy-fma-as-mad",
    "v_dot2c_f32_f16_e32": "dot2-fma-mix",
    "v_dot2_f32_f16": "dot2-fma-mix",
}
