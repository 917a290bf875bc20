"""What the analyses need to know about one encoding, computed once.

Real code repeats encodings heavily, so everything here is worked out once
per distinct encoding: a :class:`Facts` with a number, its ``eid``.  No
fact depends on which VGPRs a VALU, LDS or FLAT encoding names, so the
encodings that differ only in them (:func:`vgpr_blind_key`) share one
Facts and one eid; real code holds several such encodings for each.
:func:`encoding_ids` gives the eid of every instruction of a function
(with numpy, from the instructions' dwords), and per-eid numpy columns
(:meth:`FactsCache.column`) turn any attribute into an array over the
instructions with one indexing operation, so the analyses do array work per
instruction and Python work only per distinct encoding or per event
(branch, hazard, finding).

A new encoding's facts cost a few microseconds: what depends on its opcode
entry and form alone (class, control flow, mnemonic-derived flags, which
fields name which scalar registers in which role: :class:`_OpFacts` and its
:class:`~kpatch.isa.regs.ScalarPlan`) is worked out once per opcode, and
per encoding only field values are read and looked up in tables.
:func:`facts_by_registers` (from ``inst.reads`` / ``inst.writes``) is the
definition they are tested against, and the way for any encoding no plan
describes.

Scalar registers are bit masks indexed by their 9-bit operand encoding
(s0..s105 = bits 0..105, vcc_lo/hi 106/107, ttmp0..15 108..123, m0 124,
exec_lo/hi 126/127), so "does this instruction read a register that one
defines" is ``reads & defs``.

Instruction classes follow LLVM's ``SIInstrInfo`` predicates, which define
the hazards (see gfx1010-hazards.md): ``VALU`` (VOP1/2/3/3P/C, VINTRP),
``SALU`` (SOP1/2/K/C/P), ``SMEM``, ``VMEM`` (MUBUF/MTBUF/MIMG), ``DS``,
``FLAT`` (with its segment), ``EXP``.
"""

from __future__ import annotations

import heapq
import re
from itertools import repeat
from operator import attrgetter

import numpy as np

from kpatch.analysis.flow import kind_of  # the control-flow kinds (Facts.flow): one table there
from kpatch.isa.instruction import Instruction
from kpatch.isa.regs import MASK_BASE, Reg, reg_bits, scalar_plan

# --- instruction classes (bit flags) ------------------------------------------
VALU = 1 << 0
SALU = 1 << 1  # SOP1/SOP2/SOPK/SOPC/SOPP
SOPP = 1 << 2
SMEM = 1 << 3
VMEM = 1 << 4  # MUBUF, MTBUF, MIMG
DS = 1 << 5
FLAT = 1 << 6  # any segment
FLAT_SEG = 1 << 7  # FLAT with segment scratch or global ("segment-specific")
EXP = 1 << 8
UNKNOWN = 1 << 9

FORMAT_CLASS = {
    "VOP1": VALU, "VOP2": VALU, "VOP3": VALU, "VOP3P": VALU, "VOPC": VALU, "VINTRP": VALU,
    "SOP1": SALU, "SOP2": SALU, "SOPK": SALU, "SOPC": SALU, "SOPP": SALU | SOPP,
    "SMEM": SMEM, "MUBUF": VMEM, "MTBUF": VMEM, "MIMG": VMEM, "DS": DS, "FLAT": FLAT,
    "EXP": EXP,
}  # fmt: skip

# --- marks: encodings some detector must look at ---------------------------------
M_NSA = 1 << 0  # NSA-encoded MIMG
M_CLAUSE = 1 << 1  # s_clause
M_BUFFER = 1 << 2  # MUBUF / MTBUF
M_SMEM = 1 << 3
M_MULTI_DWORD = 1 << 4  # multi-dword LDS access, or multi-dword flat-segment access
M_LOCAL = 1 << 5  # a finding by its own bytes (``Facts.local``, from ENCODING_CHECKS)
M_DS = 1 << 6  # DS (LDS/GDS)
M_VMEM_SEG = 1 << 7  # MUBUF/MTBUF/MIMG or global/scratch FLAT ("VMEM" of LdsBranchVmemWARHazard)
_MULTI_DWORD_LDS = re.compile(r"^ds_(read|write|load|store)(2|2st64)?_b(64|96|128)$")
_MULTI_DWORD_FLAT = re.compile(r"^flat_(load|store)_dwordx[234]$")

#: Checks of an encoding by itself: ``check(facts) -> (class name, detail) or
#: None``, registered by the detectors (:func:`register_encoding_check`) and
#: run once per distinct encoding; the results are ``Facts.local``.
ENCODING_CHECKS: list = []
#: check -> ``may_find(o, d)``: whether the check can find anything in an
#: encoding of the opcode and form of ``d`` (a Decoded; ``o``: its
#: :class:`_OpFacts`), decided once per opcode (checks without one run for
#: every encoding)
MAY_FIND: dict = {}


def register_encoding_check(check, may_find=None) -> None:
    """Add a per-encoding check (facts computed before are dropped).  A
    check must not depend on which VGPRs a VALU, LDS or FLAT encoding
    names: encodings that differ only in them share their facts
    (:func:`vgpr_blind_key`).  ``may_find(o, d)``, when given, says per
    opcode whether the check can find anything in its encodings (False:
    it is not run for them); it may read only what one opcode entry and
    form decide: ``o``'s class (before FLAT's segment), mnemonic, format
    and control flow, ``d``'s info, kind and target."""
    if check not in ENCODING_CHECKS:
        ENCODING_CHECKS.append(check)
        FACTS.clear()
    if may_find is None:
        MAY_FIND.pop(check, None)
    else:
        MAY_FIND[check] = may_find
    _OP_FACTS.clear()


# --- scalar register masks -----------------------------------------------------
_FILE_BASE = MASK_BASE
EXEC_MASK = (1 << 126) | (1 << 127)
SGPR_FILES = frozenset(_FILE_BASE)

#: Bit mask of a scalar register (0 for VGPRs, SCC and the like).
reg_mask = reg_bits


def mask_of(regs) -> int:
    m = 0
    for r in regs:
        m |= reg_mask(r)
    return m


_SPECIAL_NAMES = {106: "vcc_lo", 107: "vcc_hi", 124: "m0", 126: "exec_lo", 127: "exec_hi"}


def mask_names(mask: int) -> str:
    """Readable list of the registers in a mask (``s[4:7], exec``)."""
    names: list[str] = []
    sg = mask & ((1 << 106) - 1)
    while sg:
        lo = (sg & -sg).bit_length() - 1
        run = ((sg >> lo) ^ ((sg >> lo) + 1)).bit_length() - 1  # length of the run of ones
        names.append(f"s{lo}" if run == 1 else f"s[{lo}:{lo + run - 1}]")
        sg &= ~(((1 << run) - 1) << lo)
    rest = mask >> 106
    bit = 106
    while rest:
        if rest & 1:
            names.append(_SPECIAL_NAMES.get(bit, f"ttmp{bit - 108}" if 108 <= bit < 124 else f"reg{bit}"))
        rest >>= 1
        bit += 1
    out = ", ".join(names)
    return out.replace("vcc_lo, vcc_hi", "vcc").replace("exec_lo, exec_hi", "exec")


# --- special SOPP/SOPK instructions -------------------------------------------------
SGPR_NULL = 125


def waitcnt_lgkm(simm16: int) -> int:
    """lgkmcnt of a GFX10 s_waitcnt immediate (bits 13:8)."""
    return (simm16 >> 8) & 0x3F


def depctr_vm_vsrc(simm16: int) -> int:
    """vm_vsrc field (bits 4:2) of an s_waitcnt_depctr immediate."""
    return (simm16 >> 2) & 7


def depctr_sa_sdst(simm16: int) -> int:
    """sa_sdst field (bit 0) of an s_waitcnt_depctr immediate."""
    return simm16 & 1


#: SALU instructions that do not retire an outstanding SMEM read (LLVM's list
#: for SMEMtoVectorWriteHazard); every other non-SOPP SALU does.
SALU_NOT_SMEM_BARRIER = frozenset({"s_setvskip", "s_version", "s_waitcnt_vscnt", "s_waitcnt_vmcnt",
                                   "s_waitcnt_expcnt"})

#: The 64-byte VALU compares that do not name an sdst (GFX10 v_cmpx_*_e64 writes EXEC only).
_V_CMP = re.compile(r"^v_cmpx?_")
_READLANE = frozenset({"v_readlane_b32", "v_readfirstlane_b32"})
_VOP3B = re.compile(r"^v_(add|sub|subrev)_co_(ci_)?u32|^v_div_scale_|^v_mad_[iu]64_[iu]32")
_PERMLANE = frozenset({"v_permlane16_b32", "v_permlanex16_b32"})
_V_NOP = re.compile(r"^v_nop")


class Facts:
    """Everything the analyses use about one encoding (see module docstring)."""

    __slots__ = ("cls", "flow", "mnemonic", "size", "sreads", "swrites", "sdefs", "valu_sdst", "valu_sgpr_def",
                 "writes_exec", "vcmp_exec", "reads_exec", "simm16", "is_permlane", "is_v_nop",
                 "kill_vm", "kill_smem", "kill_vcmpx_war", "vscnt0", "nsa", "offset", "seg",
                 "marks", "hz", "local", "eid", "inst")

    def __init__(self, inst):
        # a representative occurrence: its address is not meaningful, nor are
        # its VGPR numbers when its eid is shared (FactsCache.new)
        d = inst.d
        o = _OP_FACTS.get((id(d.info), d.kind))
        if o is None or o.info is not d.info:
            o = _op_facts(d)
        effects = o.effects
        if effects is None:
            facts_by_registers(self, inst)
            return
        raw = d.raw
        n = o.size
        w = int.from_bytes(raw[:n], "little")
        sreads, writes = effects(w, int.from_bytes(raw[n:n + 4], "little") if o.extra else 0)
        (cls, mn, flow, exec_all, sdefs, valu, readlane, vop3_def, vcmp, is_permlane, is_v_nop, kill_smem,
         special) = o.consts
        self.inst = inst
        fseg, fs16, fnsa, foff = o.fields
        seg = None if fseg is None else (w >> fseg[0]) & fseg[1]
        self.seg = seg
        self.simm16 = s16 = None if fs16 is None else (w >> fs16[0]) & fs16[1]
        self.nsa = nsa = 0 if fnsa is None else (w >> fnsa[0]) & fnsa[1]
        self.offset = None if foff is None else (w >> foff[0]) & foff[1]
        if seg is not None and seg in (1, 2):  # (FLAT's global and scratch segments)
            cls |= FLAT_SEG
        self.cls = cls
        self.mnemonic = mn
        self.size = d.size
        self.flow = flow
        if sreads & (1 << 126) and exec_all:
            sreads |= EXEC_MASK
        self.sreads = sreads
        self.reads_exec = bool(sreads & EXEC_MASK)
        self.sdefs = writes[0][0] if sdefs and writes and writes[0][1] != "scc" else 0
        swrites = 0
        for m, _ in writes:
            swrites |= m
        self.swrites = swrites
        valu_sdst = 0
        writes_exec = False
        if valu:
            for m, file in writes:
                if file in SGPR_FILES and m:
                    valu_sdst = m
                    break
            for _, file in writes:
                if file == "exec":
                    writes_exec = True
                    break
        self.valu_sdst = valu_sdst
        self.valu_sgpr_def = sgpr_def = valu and ((valu_sdst != 0 and not readlane) or vop3_def)
        self.writes_exec = writes_exec
        self.vcmp_exec = writes_exec and vcmp
        self.is_permlane = is_permlane
        self.is_v_nop = is_v_nop
        # expiry of the scalar-write hazards
        if special is None:
            self.kill_vm = valu
            self.kill_smem = kill_smem
            self.kill_vcmpx_war = sgpr_def
            self.vscnt0 = False
        else:
            sdst = None if o.sdst is None else (w >> o.sdst[0]) & o.sdst[1]
            self.kill_vm = valu or (mn == "s_waitcnt" and s16 == 0) or (
                mn == "s_waitcnt_depctr" and depctr_vm_vsrc(s16) == 0)
            if cls & SOPP:
                self.kill_smem = mn == "s_waitcnt" and waitcnt_lgkm(s16) == 0
            elif mn == "s_waitcnt_lgkmcnt" and cls & SALU:
                self.kill_smem = sdst == SGPR_NULL and s16 == 0
            else:
                self.kill_smem = kill_smem
            self.kill_vcmpx_war = sgpr_def or (mn == "s_waitcnt_depctr" and depctr_sa_sdst(s16) == 0)
            self.vscnt0 = mn == "s_waitcnt_vscnt" and sdst == SGPR_NULL and s16 == 0
        self.eid = -1  # set by FactsCache.new
        local = ()
        checks = o.checks
        if o.checks_of is not ENCODING_CHECKS:  # (the list was replaced: tests)
            checks = _checks_of(o, d)
        for check in checks:
            r = check(self)
            if r:
                local += (r,)
        self.local = local
        key = (cls, seg, nsa != 0, not local)
        marks = o.marks.get(key)
        if marks is None:
            marks = o.marks[key] = _marks(self, o.fmt, None)
        self.marks = marks
        self.hz = None  # compiled roles, per hazard engine (filled in by them)


def facts_by_registers(x: Facts, inst) -> None:
    """Fill in ``x`` (a new :class:`Facts`) for ``inst`` from its register
    lists (``inst.reads`` / ``inst.writes``, :class:`Reg` objects) and
    fields: the definition of every fact, which :class:`Facts` works out
    faster from per-opcode :class:`_OpFacts` (and must agree with, encoding
    for encoding: tests/analysis/test_facts_plans.py); used for the
    encodings no plan describes."""
    x.inst = inst
    fmt = inst.format
    mn = inst.mnemonic
    f = inst.fields
    cls = FORMAT_CLASS.get(fmt, UNKNOWN)
    x.seg = f.get("seg", 0) if fmt == "FLAT" else None
    if fmt == "FLAT" and x.seg in (1, 2):
        cls |= FLAT_SEG
    x.cls = cls
    x.mnemonic = mn
    x.size = inst.size
    x.simm16 = f.get("simm16")
    x.nsa = f.get("nsa", 0) if fmt == "MIMG" else 0
    x.offset = f.get("offset") if fmt in ("MUBUF", "MTBUF", "FLAT") else None
    x.flow = kind_of(fmt, mn)  # control flow
    reads, writes = inst.reads, inst.writes
    sreads = mask_of(reads)
    # Vector-memory, VALU and EXEC-branch instructions read all of EXEC
    # (LLVM models the implicit use as the 64-bit register).
    if sreads & (1 << 126) and (cls & (VALU | VMEM | DS | FLAT | EXP) or mn.startswith("s_cbranch_exec")
                                or "saveexec" in mn):
        sreads |= EXEC_MASK
    x.sreads = sreads
    x.reads_exec = bool(sreads & EXEC_MASK)
    wmask = [reg_mask(w) for w in writes]
    x.swrites = mask_of(writes)
    # explicit scalar definitions of SALU/SMEM (LLVM's MI->defs(): the sdst /
    # sdata operand, never the implicit SCC or the EXEC of *_saveexec)
    sdefs = 0
    if cls & (SALU | SMEM) and not cls & SOPP and writes and writes[0].file != "scc":
        if not (fmt == "SOPK" and mn.startswith("s_setreg")):
            sdefs = wmask[0]
    x.sdefs = sdefs
    # VALU scalar destination for SMEMtoVectorWriteHazard: v_readlane's vdst,
    # else the named sdst, else the first implicit SGPR def (VCC, EXEC)
    valu_sdst = 0
    if cls & VALU:
        for w, m in zip(writes, wmask):
            if w.file in SGPR_FILES and m:
                valu_sdst = m
                break
    x.valu_sdst = valu_sdst
    x.valu_sgpr_def = bool(cls & VALU) and (
        (valu_sdst != 0 and mn not in _READLANE)
        or (fmt == "VOP3" and (mn.startswith("v_cmp_") or _VOP3B.match(mn) is not None)))
    x.writes_exec = bool(cls & VALU) and any(w.file == "exec" for w in writes)
    x.vcmp_exec = x.writes_exec and _V_CMP.match(mn) is not None
    x.is_permlane = mn in _PERMLANE
    x.is_v_nop = bool(cls & VALU) and _V_NOP.match(mn) is not None
    # expiry of the scalar-write hazards
    s16 = x.simm16
    x.kill_vm = bool(cls & VALU) or (mn == "s_waitcnt" and s16 == 0) or (
        mn == "s_waitcnt_depctr" and depctr_vm_vsrc(s16) == 0)
    if cls & SOPP:
        x.kill_smem = mn == "s_waitcnt" and waitcnt_lgkm(s16) == 0
    elif cls & SALU:
        if mn == "s_waitcnt_lgkmcnt":
            x.kill_smem = f.get("sdst") == SGPR_NULL and s16 == 0
        else:
            x.kill_smem = mn not in SALU_NOT_SMEM_BARRIER
    else:
        x.kill_smem = False
    x.kill_vcmpx_war = x.valu_sgpr_def or (mn == "s_waitcnt_depctr" and depctr_sa_sdst(s16) == 0)
    x.vscnt0 = mn == "s_waitcnt_vscnt" and f.get("sdst") == SGPR_NULL and s16 == 0
    x.eid = -1  # set by FactsCache.new
    x.local = tuple(r for r in (check(x) for check in ENCODING_CHECKS) if r)
    x.marks = _marks(x, fmt, f)
    x.hz = None  # compiled roles, per hazard engine (filled in by them)


class _OpFacts:
    """What :class:`Facts` takes from an encoding's opcode entry and form
    alone (``info``, ``kind``), worked out once per opcode: the class
    (before FLAT's segment), mnemonic, control flow, flags, the
    :class:`~kpatch.isa.regs.ScalarPlan` of its scalar registers (None:
    :func:`facts_by_registers` is the way), the bits (lo, mask) of the
    fields some fact reads, and the :data:`MARKS` already worked out, by
    (class, segment, NSA, no local finding)."""

    __slots__ = ("info", "fmt", "cls", "mnemonic", "flow", "plan", "effects", "size", "extra", "seg", "simm16",
                 "nsa", "offset", "fields", "sdst", "exec_all", "sdefs", "valu", "readlane", "vop3_def", "vcmp",
                 "is_permlane", "is_v_nop", "special", "kill_smem", "consts", "marks", "checks", "checks_of")


def _consts(o: _OpFacts) -> tuple:
    """``o.consts``: the attributes :class:`Facts` reads of ``o``, as one tuple (one unpacking)."""
    return (o.cls, o.mnemonic, o.flow, o.exec_all, o.sdefs, o.valu, o.readlane, o.vop3_def, o.vcmp,
            o.is_permlane, o.is_v_nop, o.kill_smem, o.special)


_OP_FACTS: dict[tuple, _OpFacts] = {}  # (id(OpInfo), kind) -> its _OpFacts


def _checks_of(o: _OpFacts, d) -> tuple:
    """``o.checks``: the :data:`ENCODING_CHECKS` that may find something in
    the encodings of ``o``'s opcode (:data:`MAY_FIND`), in their order;
    ``o.checks_of`` the list they were taken from."""
    o.checks_of = checks = ENCODING_CHECKS
    o.checks = tuple(c for c in checks if (m := MAY_FIND.get(c)) is None or m(o, d))
    return o.checks
_SPECIAL = frozenset({"s_waitcnt", "s_waitcnt_depctr", "s_waitcnt_lgkmcnt", "s_waitcnt_vscnt"})


def _op_facts(d) -> _OpFacts:
    """The :class:`_OpFacts` of a Decoded encoding's opcode (made once)."""
    o = _OpFacts()
    o.info = d.info
    fmt = o.fmt = "UNKNOWN" if d.fmt is None else d.fmt.name
    mn = o.mnemonic = d.mnemonic
    cls = o.cls = FORMAT_CLASS.get(fmt, UNKNOWN)
    o.flow = kind_of(fmt, mn)
    o.plan = scalar_plan(d, writes=bool(cls & (VALU | SALU | SMEM)))
    fields = {} if d.fmt is None else {f.name: (f.lo, f.mask) for f in d.fmt.fields}
    o.seg = fields.get("seg") if fmt == "FLAT" else None
    o.simm16 = fields.get("simm16")
    o.nsa = fields.get("nsa") if fmt == "MIMG" else None
    o.offset = fields.get("offset") if fmt in ("MUBUF", "MTBUF", "FLAT") else None
    o.sdst = fields.get("sdst")
    o.special = mn if mn in _SPECIAL else None
    o.fields = (o.seg, o.simm16, o.nsa, o.offset)
    o.exec_all = bool(cls & (VALU | VMEM | DS | FLAT | EXP)) or mn.startswith("s_cbranch_exec") or "saveexec" in mn
    o.sdefs = bool(cls & (SALU | SMEM)) and not cls & SOPP and not (fmt == "SOPK" and mn.startswith("s_setreg"))
    o.valu = valu = bool(cls & VALU)
    o.readlane = mn in _READLANE
    o.vop3_def = fmt == "VOP3" and (mn.startswith("v_cmp_") or _VOP3B.match(mn) is not None)
    o.vcmp = _V_CMP.match(mn) is not None
    o.is_permlane = mn in _PERMLANE
    o.is_v_nop = valu and _V_NOP.match(mn) is not None
    if cls & SOPP:
        o.kill_smem = False  # (s_waitcnt: by its immediate)
    elif cls & SALU:
        o.kill_smem = mn not in SALU_NOT_SMEM_BARRIER
    else:
        o.kill_smem = False
    o.effects = None if o.plan is None else o.plan.effects
    o.size, o.extra = (0, False) if o.plan is None else (o.plan.size, o.plan.extra)
    o.consts = _consts(o)
    o.marks = {}
    _checks_of(o, d)
    _OP_FACTS[(id(d.info), d.kind)] = o
    return o


#: Formats whose facts depend on the scalar operands only: VGPR numbers
#: (operands with an 8-bit VGPR field, or a 9-bit source field >= 256)
#: decide no class, mask, expiry or encoding check.
_VGPR_BLIND_FORMATS = frozenset({"VOP1", "VOP2", "VOPC", "VOP3", "VOP3P", "DS", "FLAT"})
_VGPR_FIELDS: dict[int, tuple] = {}  # id(OpInfo) -> (OpInfo, VGPR field bits, 9-bit source field offsets)


def vgpr_blind_key(inst) -> tuple | None:
    """The encoding of a base-form VALU, LDS or FLAT instruction with its
    VGPR numbers set to 0 (its target, base encoding bits and any literal),
    or None for other encodings.  Real code holds many such encodings for
    each key."""
    return _blind_key(inst.d)


def _blind_key(d) -> tuple | None:
    """:func:`vgpr_blind_key` of a :class:`~kpatch.isa.instruction.Decoded`."""
    fmt = d.fmt
    if fmt is None or d.kind is not None or fmt.name not in _VGPR_BLIND_FORMATS:
        return None
    got = _VGPR_FIELDS.get(id(d.info))
    if got is None or got[0] is not d.info:
        got = _VGPR_FIELDS[id(d.info)] = (d.info, *_vgpr_fields(fmt, d.info))
    _, always, sources = got
    n = fmt.size
    w = int.from_bytes(d.raw[:n], "little") & ~always
    for lo in sources:
        if (w >> lo) & 0x100:
            w &= ~(0xFF << lo)
    return d.target, w, d.raw[n:]


_UNSET = object()
_RAW = attrgetter("raw")
_INFO = attrgetter("info")
_KIND = attrgetter("kind")
_BLIND_SLOTS: dict[tuple, int] = {}  # (id(OpInfo), kind) -> row of _BLIND (-1: no key)
_BLIND_INFO: list = []  # the OpInfo of each row (keeps their ids)
_BLIND = np.zeros((0, 5), dtype=np.uint64)  # per row: fmt size, ~always-VGPR bits, 3 source offsets (64: none)


def _blind_slot(d) -> int:
    """The :data:`_BLIND` row of a decoded encoding's opcode (-1: it has no
    :func:`vgpr_blind_key`; -2: not one the rows describe)."""
    global _BLIND
    fmt = d.fmt
    if fmt is None or d.kind is not None or fmt.name not in _VGPR_BLIND_FORMATS:
        slot = -1
    else:
        always, sources = _vgpr_fields(fmt, d.info)
        if len(sources) > 3 or fmt.size > 8:
            slot = -2  # (none such in GFX10: one by one)
        else:
            slot = len(_BLIND_INFO)
            _BLIND_INFO.append(d.info)
            row = [fmt.size, ~always & 0xFFFFFFFFFFFFFFFF, *sources, *[64] * (3 - len(sources))]
            _BLIND = np.vstack([_BLIND, np.array([row], dtype=np.uint64)])
    _BLIND_SLOTS[(id(d.info), d.kind)] = slot
    return slot


def blind_key_rows(ds: list, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`vgpr_blind_key` of each of the encodings ``ds`` (their
    :class:`~kpatch.isa.instruction.Decoded`; ``rows``: their dwords, as
    :func:`_raw_rows` gives them) as numbers, worked out with numpy over
    per-opcode rows of field bits (Python work once per opcode):
    ``(has, base, rest, size)``, per encoding ``has`` 1 when it has a key,
    0 when it has none, -1 when the rows do not describe it (then
    :func:`vgpr_blind_key` says); ``base`` the first ``size`` bytes with
    the VGPR fields cleared (the key's number) and ``rest`` its dword count
    << 32 | the dword after them, its literal (0 where none).  Two keyed
    encodings of one target have the same key exactly when they have the
    same (base, rest): the base holds the format's encoding bits, so it
    fixes ``size``, and a key's literal is at most one dword."""
    n = len(ds)
    has = np.zeros(n, dtype=np.int8)
    base = np.zeros(n, dtype=np.uint64)
    rest = np.zeros(n, dtype=np.uint64)
    size = np.zeros(n, dtype=np.int64)
    if not n:
        return has, base, rest, size
    # the row of each encoding's (opcode, form): looked up once per distinct pair
    info = np.fromiter(map(id, map(_INFO, ds)), dtype=np.int64, count=n)
    kind = np.fromiter(map(id, map(_KIND, ds)), dtype=np.int64, count=n)
    kinds, kind = np.unique(kind, return_inverse=True)
    pair, first, inv = np.unique(info * len(kinds) + kind.reshape(-1), return_index=True, return_inverse=True)
    per_pair = []
    for k in first.tolist():
        d = ds[k]
        slot = _BLIND_SLOTS.get((id(d.info), d.kind))
        per_pair.append(_blind_slot(d) if slot is None else slot)
    slot = np.array(per_pair, dtype=np.int64)[inv.reshape(-1)]
    ok = np.flatnonzero(slot >= 0)
    has[slot == -2] = -1
    if not ok.size:
        return has, base, rest, size
    tab = _BLIND[slot[ok]]
    sz = tab[:, 0].astype(np.int64)
    r = rows[ok]
    nb = 4 * r[:, 0].astype(np.int64)
    fits = (nb >= sz) & (nb <= sz + 4)  # (else: one by one; none such decodes)
    w = r[:, 1].astype(np.uint64) | np.where(sz == 8, r[:, 2].astype(np.uint64) << np.uint64(32), np.uint64(0))
    w &= tab[:, 1]
    one, byte = np.uint64(1), np.uint64(0xFF)
    for j in range(3):
        lo = tab[:, 2 + j]
        on = lo < 64
        lo = np.where(on, lo, 0)
        clear = on & (((w >> lo) >> np.uint64(8)) & one).astype(bool)
        w[clear] &= ~(byte << lo[clear])
    lit = np.where(sz == 8, r[:, 3], r[:, 2]).astype(np.uint64)
    has[ok] = np.where(fits, 1, -1)
    base[ok] = w
    rest[ok] = (r[:, 0].astype(np.uint64) << np.uint64(32)) | lit
    size[ok] = sz
    return has, base, rest, size


def _number_rows(ds: list, nd: np.ndarray, num: np.ndarray) -> np.ndarray | None:
    """:func:`_raw_rows` of the encodings ``ds`` (their Decoded), those of
    one or two dwords made from their numbers (``nd``: their dword counts,
    1 or 2, else 0; ``num``: their dwords, first | second << 32, as
    ``Columns.words`` gives them), the others from their bytes."""
    rows = np.zeros((len(ds), 1 + MAX_DWORDS), dtype=np.uint32)
    rows[:, 0] = nd
    rows[:, 1] = num & np.uint64(0xFFFFFFFF)
    rows[:, 2] = num >> np.uint64(32)
    other = np.flatnonzero(nd == 0)
    if other.size:
        got = _raw_rows([ds[j].raw for j in other.tolist()])
        if got is None:
            return None
        rows[other] = got
    return rows


def _raw_rows(raws: list[bytes]) -> np.ndarray | None:
    """Per encoding (``raws``: their bytes): its dword count, then its dwords
    j < MAX_DWORDS (0 past its end), as :func:`_rows` lays them out; None if
    one is not whole dwords or is longer than MAX_DWORDS."""
    n = len(raws)
    if not n:
        return np.zeros((0, 1 + MAX_DWORDS), dtype=np.uint32)
    lens = np.fromiter(map(len, raws), dtype=np.int64, count=n)
    if (lens & 3).any() or lens.min() < 4 or lens.max() > 4 * MAX_DWORDS:
        return None
    ndw = lens >> 2
    return _rows(np.frombuffer(b"".join(raws), dtype="<u4"), np.cumsum(ndw) - ndw, ndw)


def _vgpr_fields(fmt, info) -> tuple[int, tuple[int, ...]]:
    """(bits of the fields that always name VGPRs, offsets of the 9-bit
    source fields) of an opcode's base form."""
    fields = {f.name: f for f in fmt.fields}
    always = 0
    sources = []
    for op in info.form.operands:
        fld = fields.get(op.field) if op.tag == "f" else None
        if fld is None:
            continue
        if op.kind == "v":
            always |= fld.mask << fld.lo
        elif op.kind == "src" and fld.width == 9:
            sources.append(fld.lo)
    return always, tuple(sources)


def _marks(x: "Facts", fmt: str, f: dict) -> int:
    """The :data:`MARKS` bits of an encoding."""
    m = 0
    mn = x.mnemonic
    if x.nsa:
        m |= M_NSA
    if mn == "s_clause":
        m |= M_CLAUSE
    if fmt in ("MUBUF", "MTBUF"):
        m |= M_BUFFER
    if x.cls & SMEM:
        m |= M_SMEM
    if x.cls & DS:
        m |= M_DS
    if x.cls & (VMEM | FLAT_SEG):
        m |= M_VMEM_SEG
    if _MULTI_DWORD_LDS.match(mn) or (x.cls & FLAT and x.seg == 0 and _MULTI_DWORD_FLAT.match(mn)):
        m |= M_MULTI_DWORD
    if x.local:
        m |= M_LOCAL
    return m


MAX_DWORDS = 5  # longest GFX10 encoding: MIMG with three NSA dwords (20 bytes)


class _SortedIds:
    """uint64 numbers -> int64 ids, looked up with numpy: a large sorted
    part and a small sorted part that new numbers join, merged into the
    large one once it holds an eighth as many (so adding numbers costs
    about as much as their count, not the size of the whole, each time)."""

    __slots__ = ("keys", "ids", "new_keys", "new_ids")

    def __init__(self):
        self.keys = self.new_keys = np.zeros(0, dtype=np.uint64)
        self.ids = self.new_ids = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.keys) + len(self.new_keys)

    def get(self, q: np.ndarray) -> np.ndarray:
        """The id of each number of ``q`` (-1: none)."""
        out = np.full(len(q), -1, dtype=np.int64)
        for keys, ids in ((self.keys, self.ids), (self.new_keys, self.new_ids)):
            if len(keys) and len(q):
                j = np.minimum(np.searchsorted(keys, q), len(keys) - 1)
                hit = np.flatnonzero(keys[j] == q)
                out[hit] = ids[j[hit]]
        return out

    def add(self, q: np.ndarray, ids: np.ndarray) -> None:
        """Add numbers ``q`` (distinct, none held yet) with their ``ids``."""
        if len(q) > 1 and not (q[1:] > q[:-1]).all():
            o = np.argsort(q)
            q, ids = q[o], ids[o]
        pos = np.searchsorted(self.new_keys, q)
        self.new_keys, self.new_ids = np.insert(self.new_keys, pos, q), np.insert(self.new_ids, pos, ids)
        if 8 * len(self.new_keys) > len(self.keys):
            pos = np.searchsorted(self.keys, self.new_keys)
            self.keys, self.ids = np.insert(self.keys, pos, self.new_keys), np.insert(self.ids, pos, self.new_ids)
            self.new_keys = np.zeros(0, dtype=np.uint64)
            self.new_ids = np.zeros(0, dtype=np.int64)


class _Grown:
    """A numpy array that grows by doubling its buffer (``arr``: the part in use)."""

    __slots__ = ("buf", "n")

    def __init__(self, dtype, width: int = 0):
        self.buf = np.empty((1024, width) if width else 1024, dtype=dtype)
        self.n = 0

    @property
    def arr(self) -> np.ndarray:
        return self.buf[:self.n]

    def extend(self, more: np.ndarray) -> None:
        n = self.n + len(more)
        if n > len(self.buf):
            new = np.empty((max(n, 2 * len(self.buf)), *self.buf.shape[1:]), dtype=self.buf.dtype)
            new[:self.n] = self.buf[:self.n]
            self.buf = new
        self.buf[self.n:n] = more
        self.n = n


class FactsCache:
    """Facts per encoding, numbered (``eid``: the index in ``all``), with
    per-eid numpy columns (:meth:`column`), so that an attribute of every
    instruction of a function is one array lookup.

    Two tables find an encoding's eid: ``maps`` (target -> instruction bytes
    -> eid) and, for the numpy path of :func:`encoding_ids`, per target a
    sorted array of dword hashes (``hashes``: hashes, their exact-encoding
    numbers ``xid``); an xid has its eid (``xeid``) and its dwords
    (``xdwords``: dword count, then the first MAX_DWORDS dwords, 0 past the
    end), which every hit is checked against.  Encodings that differ only in
    VGPR numbers get the eid of the first of them (:meth:`new`): their facts
    are the same.  Everything is dropped (between two :func:`facts_of`
    calls) once more than ``limit`` encodings are held."""

    def __init__(self, limit: int = 1_000_000):
        self.limit = limit
        self.clear()

    def clear(self) -> None:
        #: how many times the cache was emptied: eids handed out in one
        #: generation mean nothing in the next (see :func:`known_ids`)
        self.generation = getattr(self, "generation", -1) + 1
        self.maps: dict[str, dict[bytes, int]] = {}  # target -> bytes -> eid
        self.hashes: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # target -> (sorted hashes, their xids)
        self.all: list[Facts] = []  # by eid
        self.xeid = _Grown(np.int64)  # xid -> eid
        self.xdwords = _Grown(np.uint32, 1 + MAX_DWORDS)  # xid -> dword count, dwords
        self.columns: dict[object, np.ndarray] = {}
        self.buffers: dict[object, np.ndarray] = {}  # what the columns are views of
        self.templates: dict[tuple, int] = {}  # vgpr_blind_key -> eid
        #: Decoded -> eid (:func:`encoding_ids_of_columns`: a Decoded's bytes never change)
        self.by_decoded: dict = {}
        #: (target, dword count 1 or 2) -> the encodings' dwords as numbers -> eid
        #: (:func:`encoding_ids_of_columns`, from the decode's ``Columns.words``)
        self.by_words: dict[tuple, _SortedIds] = {}

    def table(self, target: str) -> dict[bytes, int]:
        if len(self.all) + self.xeid.n + len(self.by_decoded) + sum(map(len, self.by_words.values())) >= self.limit:
            self.clear()
        m = self.maps.get(target)
        if m is None:
            m = self.maps[target] = {}
        return m

    def eid_of(self, inst, table: dict[bytes, int]) -> int:
        """The eid of ``inst`` (``table``: :meth:`table` of its target)."""
        raw = inst.raw
        e = table.get(raw)
        if e is None:
            e = table[raw] = self.new(inst)
        return e

    def new(self, inst, key=_UNSET) -> int:
        """The eid of an encoding not seen yet: that of an encoding that
        differs from it only in VGPR numbers (and hit no encoding check),
        else the number of new facts worked out from it (``key``: its
        :func:`vgpr_blind_key`, when known)."""
        if key is _UNSET:
            key = vgpr_blind_key(inst)
        if key is not None:
            e = self.templates.get(key)
            if e is not None:
                return e
        return self._make(inst, key)

    def _make(self, inst, key) -> int:
        """The eid of new facts worked out from ``inst``, whose
        :func:`vgpr_blind_key` ``key`` has no template (None: it has no
        key); they become the key's template unless an encoding check
        found something in them (a finding's text names the VGPRs)."""
        f = Facts(inst)
        f.eid = e = len(self.all)
        self.all.append(f)
        if key is not None and not f.local:
            f.hz = {}
            self.templates[key] = e
        return e

    def _eids_of_new(self, ds: list, raws: list[bytes] | None, table: dict[bytes, int], insts: list | None = None,
                     rows: np.ndarray | None = None, at: np.ndarray | None = None) -> np.ndarray:
        """:meth:`eid_of` of each of the encodings ``ds`` (an int64 array; ``ds``: their Decoded;
        ``raws``: their bytes, when at hand; ``rows``: their dwords as
        :func:`_raw_rows` gives them, when known), in order, with Python work once per
        distinct :func:`vgpr_blind_key` and once per encoding without one:
        the keys are numbers (:func:`blind_key_rows`) grouped with numpy;
        a group's first encoding takes its template's eid, else its eid by
        its bytes or new facts -- and when that leaves no template (a
        finding's text names the VGPRs: such facts are not shared) the
        group's next encoding goes the same way, at its place in the order,
        so new facts are numbered as one by one.  New facts are worked out
        from ``insts`` (occurrences of them), else from an occurrence at
        address 0 (no fact depends on the address).  Only the encodings
        numbered by their bytes join ``table``: one whose key has a template
        is found by it (:meth:`new`) whenever its bytes are looked up.
        With ``at``, the encodings are numbered in the order ``ds[at[0]]``,
        ``ds[at[1]]``, ... and their eids returned in that order (``ds``
        then kept in the order they were made in, which their objects lie
        in memory in: the passes over all of them run three times faster
        than in a scattered order)."""
        n = len(ds)
        if not n:
            return np.zeros(0, dtype=np.int64)
        if rows is None:
            rows = _raw_rows(list(map(_RAW, ds)) if raws is None else raws)
        if rows is None:  # (not whole dwords: one by one)
            has = np.full(n, -1, dtype=np.int8)
            base = rest = np.zeros(n, dtype=np.uint64)
            size = np.zeros(n, dtype=np.int64)
        else:
            has, base, rest, size = blind_key_rows(ds, rows)
        if at is not None:
            has, base, rest, size = has[at], base[at], rest[at], size[at]
        pick = range(n) if at is None else at.tolist()  # (the p-th to number: ds[pick[p]])
        keyed = np.flatnonzero(has == 1)
        order = keyed[np.lexsort((rest[keyed], base[keyed]))]  # (stable: each group in the given order)
        bo, ro = base[order], rest[order]
        starts = np.flatnonzero(np.concatenate(([True], (bo[1:] != bo[:-1]) | (ro[1:] != ro[:-1]))))[:len(order)]
        group = np.full(n, -1, dtype=np.int64)
        group[order] = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(order))))
        ends = np.append(starts[1:], len(order)).tolist()
        heads = order[starts]
        events = np.sort(np.concatenate((np.flatnonzero(has != 1), heads))).tolist()
        group_l, has_l, order_l, ptr = group.tolist(), has.tolist(), order.tolist(), starts.tolist()
        base_l, size_l = base.tolist(), size.tolist()  # (Python ints: no numpy scalar per encoding)
        out = [-1] * n
        geid = [-1] * len(ptr)  # a group's template, once there is one: its later encodings take it
        later: list[int] = []  # (heap) the next encoding of each group that has no template yet
        get = table.get
        template = self.templates.get
        make = self._make
        facts = self.all

        def one(p: int) -> None:
            d = ds[pick[p]]
            raw = d.raw
            g = group_l[p]
            if g >= 0:
                key = (d.target, base_l[p], raw[size_l[p]:])
            else:
                key = _blind_key(d) if has_l[p] < 0 else None
            e = template(key) if key is not None else None
            if e is None:
                e = get(raw)
                if e is None:  # (the key has no template, just looked up: new facts, maybe its template)
                    e = table[raw] = make(insts[p] if insts is not None else Instruction(0, d), key)
                    made = key is not None and not facts[e].local
                else:
                    made = False
                out[p] = e
                if g < 0:
                    return
                if not made:  # (still no template: the group's next encoding goes the same way)
                    ptr[g] += 1
                    if ptr[g] < ends[g]:
                        heapq.heappush(later, order_l[ptr[g]])
                    return
            if g >= 0:
                geid[g] = e
            else:
                out[p] = e

        for p in events:
            while later and later[0] < p:
                one(heapq.heappop(later))
            one(p)
        while later:
            one(heapq.heappop(later))
        got = np.array(out, dtype=np.int64)
        rest_of = np.flatnonzero(got < 0)  # (keyed encodings after their group's template)
        got[rest_of] = np.array(geid, dtype=np.int64)[group[rest_of]]
        return got

    def lookup_hashes(self, target: str, h: np.ndarray, rows: np.ndarray, insts,
                      table: dict[bytes, int]) -> np.ndarray:
        """The eids of the instructions ``insts`` with dword hashes ``h`` and
        ``rows`` (one row per instruction: dword count, then MAX_DWORDS
        dwords).  A sorted array holds the known hashes; every hit is checked
        against its encoding's dwords (one that differs, on a hash
        collision, is looked up by its bytes).  The other hashes go through
        the instruction bytes (:meth:`eid_of`), each distinct one once, in the
        order of its first occurrence (the order new encodings get their
        eids in); then they join the sorted array, so that the next code
        object (which shares most of them) finds them there."""
        hs, xs = self.hashes.get(target) or (np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64))
        xid = np.full(len(h), -1, dtype=np.int64)
        if len(hs):
            # searching in hash order walks the large array once (in
            # instruction order every lookup is a cache miss)
            o = np.argsort(h)
            ho = h[o]
            j = np.minimum(np.searchsorted(hs, ho), len(hs) - 1)
            hit = hs[j] == ho
            xid[o[hit]] = xs[j[hit]]
        miss = np.flatnonzero(xid < 0)
        bad = ()
        if miss.size:
            uh, first, inv = np.unique(h[miss], return_index=True, return_inverse=True)
            order = np.argsort(first)
            at = miss[first[order]]  # first occurrence of each new hash, in instruction order
            first_insts = [insts[k] for k in at.tolist()]
            raws = [ins.raw for ins in first_insts]
            eids = self._eids_of_new([ins.d for ins in first_insts], raws, table, first_insts)
            # are the rows exactly the encoding (not so for an instruction cut
            # short, or one the addresses given do not bound)?
            real = np.frombuffer(b"".join(r[:4 * MAX_DWORDS].ljust(4 * MAX_DWORDS, b"\0") for r in raws),
                                 dtype="<u4").reshape(len(raws), MAX_DWORDS)
            whole = ((np.fromiter(map(len, raws), dtype=np.int64, count=len(raws)) == 4 * rows[at, 0])
                     & (real == rows[at, 1:]).all(axis=1))
            new = np.empty(len(uh), dtype=np.int64)
            new[order] = np.arange(self.xeid.n, self.xeid.n + len(uh))
            self.xeid.extend(np.array(eids, dtype=np.int64))
            self.xdwords.extend(rows[at])
            xid[miss] = new[inv.reshape(-1)]
            keep = np.ones(len(uh), dtype=bool)
            keep[order] = whole
            if not keep.all():  # such hashes stay unknown: by the bytes, each time
                bad = np.flatnonzero(~keep[inv.reshape(-1)])
                bad = miss[bad]
                uh, new = uh[keep], new[keep]
            pos = np.searchsorted(hs, uh)
            self.hashes[target] = (np.insert(hs, pos, uh), np.insert(xs, pos, new))
        out = self.xeid.arr[xid]
        odd = np.flatnonzero((self.xdwords.arr[xid] != rows).any(axis=1))
        for k in [*odd.tolist(), *(bad.tolist() if len(bad) else ())]:  # a hash collision: by the bytes
            out[k] = self.eid_of(insts[k], table)
        return out

    def columns_of(self, keys: list, get, dtype=np.uint64, bulk=None) -> list[np.ndarray]:
        """Several columns at once: ``get(facts)`` gives one row, a tuple of
        non-negative ints below 2**64 (one per key), so a caller with many
        columns looks at each encoding once; or ``bulk(lo, hi)`` gives the
        rows of eids ``lo..hi-1`` at once (a uint64 array, one column per
        key), worked out from other columns.  Stored like :meth:`column`."""
        arrs = [self.columns.get(k) for k in keys]
        have = min(0 if a is None else len(a) for a in arrs)
        n = len(self.all)
        if have < n:
            if bulk is not None:
                more = np.asarray(bulk(have, n), dtype=np.uint64).reshape(n - have, len(keys))
            else:
                more = np.array(list(map(get, self.all[have:n])), dtype=np.uint64).reshape(n - have, len(keys))
            arrs = [self._extend(k, have, more[:, j].astype(dtype)) for j, k in enumerate(keys)]
        return arrs

    def mask_columns(self, name: str, chunks: int) -> list[np.ndarray]:
        """The register-mask attribute ``name`` (a non-negative int) of every
        encoding as ``chunks`` uint64 columns of 64 bits each, extended in
        one pass over the encodings added since.  Stored like :meth:`column`."""
        keys = [("attr", name, ch) for ch in range(chunks)]
        have = min(len(self.columns.get(k, ())) for k in keys)
        n = len(self.all)
        if have < n:
            # each value's low 64 * chunks bits as little-endian bytes, all
            # joined: its chunks are then the columns of one uint64 array
            # (one Python step per encoding, not a shift and a mask per chunk)
            width = 8 * chunks
            vals = map(((1 << (64 * chunks)) - 1).__and__, map(attrgetter(name), self.all[have:n]))
            rows = np.frombuffer(b"".join(map(int.to_bytes, vals, repeat(width), repeat("little"))),
                                 dtype="<u8").reshape(n - have, chunks)
            for ch, k in enumerate(keys):
                self._extend(k, have, rows[:, ch].astype(np.uint64))
        return [self.columns[k] for k in keys]

    def column(self, key, get=None, dtype=np.int64) -> np.ndarray:
        """``get(facts)`` (default: the attribute named ``key``) of every
        encoding, indexed by eid; extended as encodings are added."""
        arr = self.columns.get(key)
        have = 0 if arr is None else len(arr)
        n = len(self.all)
        if have < n:
            get = get or attrgetter(key)
            arr = self._extend(key, have, np.array(list(map(get, self.all[have:n])), dtype=dtype))
        return arr

    def _extend(self, key, have: int, more: np.ndarray) -> np.ndarray:
        """Column ``key`` (its first ``have`` values kept) followed by
        ``more``.  Columns grow by doubling a buffer (``self.buffers``),
        so that extending them once per function analysed stays cheap."""
        buf = self.buffers.get(key)
        n = have + len(more)
        if buf is None or len(buf) < n or buf.dtype != more.dtype:
            new = np.empty(max(n, 2 * (0 if buf is None else len(buf)), 1024), dtype=more.dtype)
            if have:
                new[:have] = self.columns[key][:have]
            buf = self.buffers[key] = new
        buf[have:n] = more
        self.columns[key] = buf[:n]
        return self.columns[key]


FACTS = FactsCache()



class FactsColumns:
    """Attributes of the encodings with eids ``lo..hi-1`` as numpy arrays
    (per-eid columns of :data:`FACTS`, each worked out once per encoding),
    for rules written over columns rather than one Facts at a time."""

    __slots__ = ("lo", "hi")

    def __init__(self, lo: int, hi: int):
        self.lo, self.hi = lo, hi

    def int(self, name: str) -> np.ndarray:
        """An int or bool attribute (never None), as int64."""
        return FACTS.column(("attr", name), attrgetter(name))[self.lo:self.hi]

    def mask(self, name: str, chunks: int) -> list[np.ndarray]:
        """A register mask attribute (a non-negative int), as ``chunks``
        uint64 arrays of 64 bits each (:meth:`FactsCache.mask_columns`)."""
        return [c[self.lo:self.hi] for c in FACTS.mask_columns(name, chunks)]


_PRIME = np.uint64(0x9E3779B97F4A7C15)


def _rows(words: np.ndarray, offs: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Per instruction: its dword count, then its dwords j < MAX_DWORDS (0 past its end)."""
    rows = np.zeros((len(offs), 1 + MAX_DWORDS), dtype=np.uint32)
    rows[:, 0] = sizes
    last = len(words) - 1
    for j in range(MAX_DWORDS):
        rows[:, 1 + j] = np.where(sizes > j, words[np.minimum(offs + j, last)], 0)
    return rows


def _hash(rows: np.ndarray) -> np.ndarray:
    h = np.zeros(len(rows), dtype=np.uint64)
    for j in range(rows.shape[1]):
        h = (h ^ rows[:, j]) * _PRIME
    return h


#: How many instructions :func:`encoding_ids` hashes and looks up at a time.
ID_CHUNK = 1 << 16


def encoding_ids(insts, target: str, addresses: np.ndarray | None = None,
                 code: bytes | None = None, base: int = 0, ends: np.ndarray | None = None) -> np.ndarray:
    """The eid of each instruction of a list decoded for ``target`` (creating
    facts for the encodings seen for the first time).

    With ``addresses`` (of the instructions), ``code`` (bytes holding them
    all, at address ``base``; dword aligned) and ``ends`` (for the last
    instruction of each run of code, the address where the run ends; -1
    elsewhere) the work is done with numpy: a hash of each instruction's
    dwords is looked up (:meth:`FactsCache.lookup_hashes`, which checks
    every instruction has exactly the dwords of the encoding it was
    given)."""
    table = FACTS.table(target)
    n = len(insts)
    out = np.zeros(n, dtype=np.int64)
    if code is None or addresses is None or ends is None or not n or base % 4 or len(code) % 4:
        return _ids_by_bytes(insts, table, range(n), out)
    words = np.frombuffer(code, dtype="<u4")
    sizes = dword_counts(addresses, ends)
    offs = (addresses - base) >> 2
    if sizes.min() < 1 or sizes.max() > MAX_DWORDS or offs.min() < 0 or offs.max() + 1 > len(words):
        return _ids_by_bytes(insts, table, range(n), out)
    # in chunks of instructions (in their order, so new encodings get the
    # eids they would get all at once): the per-instruction arrays (rows,
    # hashes, their sort) are a chunk's, not a whole 18 MB .text's, which
    # set apply's peak memory on the largest Tensile object
    for lo in range(0, n, ID_CHUNK):
        hi = min(n, lo + ID_CHUNK)
        rows = _rows(words, offs[lo:hi], sizes[lo:hi])
        part = insts[lo:hi] if lo or hi < n else insts
        out[lo:hi] = FACTS.lookup_hashes(target, _hash(rows), rows, part, table)
    return out


def encoding_ids_of_columns(parts: list[tuple], target: str) -> np.ndarray:
    """:func:`encoding_ids` of the instructions of ``parts`` one after the
    other, each part decoded as columns: ``(insts, ids, table)`` or
    ``(insts, ids, table, words)``, where ``table[ids[k]]`` is the
    :class:`~kpatch.isa.instruction.Decoded` of ``insts[k]`` and ``words``
    the numbers of the table's encodings (``Columns.words``:
    :func:`kpatch.isa.decodememo.columns_of`).  Work per distinct encoding,
    none per instruction but a few gathers: the encodings of one or two
    dwords are looked up by their numbers with numpy
    (:attr:`FactsCache.by_words`), the others by their Decoded
    (:attr:`FactsCache.by_decoded`; an eid is a function of the bytes, and
    a Decoded's never change); the new ones, in the order of their first
    occurrence, get eids by their bytes and VGPR-blind keys
    (:meth:`FactsCache._eids_of_new`: Python work once per new key), as
    :func:`encoding_ids` numbers them."""
    t = FACTS.table(target)
    if not parts:
        return np.zeros(0, dtype=np.int64)
    offset: dict[int, int] = {}  # id(table) -> where its entries start in ``entries``
    entries: list = []  # the Decoded of every table, one after the other
    ndw: list = []  # the dword count of each, when its number is known (else 0)
    num: list = []  # and its number
    for part in parts:
        table = part[2]
        if id(table) not in offset:
            offset[id(table)] = len(entries)
            entries += table
            words = part[3] if len(part) > 3 else None
            if words is None or len(words[0]) != len(table):
                words = (np.zeros(len(table), dtype=np.uint8), np.zeros(len(table), dtype=np.uint64))
            ndw.append(words[0])
            num.append(words[1])
    ndw_all = np.concatenate(ndw)
    num_all = np.concatenate(num)
    te = np.full(len(entries), -1, dtype=np.int64)
    for k in (1, 2):
        sel = np.flatnonzero(ndw_all == k)
        if sel.size and (target, k) in FACTS.by_words:
            te[sel] = FACTS.by_words[target, k].get(num_all[sel])
    other = np.flatnonzero(ndw_all == 0)
    if other.size:
        get = FACTS.by_decoded.get
        te[other] = np.fromiter((get(entries[i], -1) for i in other.tolist()), dtype=np.int64, count=other.size)
    keys = np.concatenate([part[1].astype(np.int64, copy=False) + offset[id(part[2])] for part in parts])
    if len(entries) and te.min() < 0:
        at = np.flatnonzero(te[keys] < 0)
        if at.size:
            # each new encoding, in the order of its first occurrence
            first = np.full(len(entries), len(keys), dtype=np.int64)
            np.minimum.at(first, keys[at], at)
            new = np.flatnonzero(first < len(keys))  # (in the tables' order: see _eids_of_new's at)
            ds = list(map(entries.__getitem__, new.tolist()))
            nd = ndw_all[new]
            occ = np.argsort(first[new])
            te[new[occ]] = FACTS._eids_of_new(ds, None, t, rows=_number_rows(ds, nd, num_all[new]), at=occ)
            for k in (1, 2):
                sel = new[nd == k]
                if sel.size:
                    uq = num_all[sel]
                    if len(uq) > 1 and not (uq[1:] > uq[:-1]).all():  # (one table's twin of another's)
                        uq, at = np.unique(uq, return_index=True)
                        sel = sel[at]
                    FACTS.by_words.setdefault((target, k), _SortedIds()).add(uq, te[sel])
            if (nd == 0).any():
                got = te[new].tolist()
                FACTS.by_decoded.update((ds[j], got[j]) for j in np.flatnonzero(nd == 0).tolist())
    return te[keys]


def dword_counts(addresses: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The dword count of each instruction of runs of code (``addresses``
    and ``ends`` as for :func:`encoding_ids`): up to the next one's
    address, or to its run's end."""
    nxt = np.empty(len(addresses), dtype=np.int64)
    nxt[:-1] = addresses[1:]
    run_end = ends >= 0
    nxt[run_end] = ends[run_end]
    return (nxt - addresses) >> 2


class KnownIds:
    """The eids :func:`encoding_ids` gave the instructions of a whole
    section (one generation of :data:`FACTS`), by address, for
    :func:`known_ids`: their ``addresses`` (strictly increasing), dword
    ``sizes`` and ``eids``."""

    __slots__ = ("target", "addresses", "sizes", "eids", "generation", "lists")

    def __init__(self, target: str, addresses: np.ndarray, sizes: np.ndarray, eids: np.ndarray):
        self.target, self.addresses, self.sizes, self.eids = target, addresses, sizes, eids
        self.generation = FACTS.generation
        #: id -> (list, index of its first instruction here) of the lists of
        #: instructions (as :func:`kpatch.isa.decodememo.decode_ranges` returned
        #: them) that these instructions hold whole, back to back
        self.lists: dict[int, tuple[list, int]] = {}


def known_unit(known: KnownIds | None, parts: list[list], target: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(addresses, eids) of the instructions of ``parts`` one after the
    other, when every part is one of the lists ``known`` holds whole (the
    decode memo hands the same list for the same code) and its eids are of
    the current generation of :data:`FACTS`; else None.  When the parts lie
    back to back in ``known`` (functions in address order with no other
    code between them, as a batch usually is), the two are read-only views
    of ``known``'s columns, not gathered copies."""
    if known is None or known.target != target or not parts:
        return None
    FACTS.table(target)  # (may empty the cache: then nothing known is valid)
    if known.generation != FACTS.generation:
        return None
    firsts = []
    for part in parts:
        got = known.lists.get(id(part))
        if got is None or got[0] is not part:
            return None
        firsts.append(got[1])
    lo = firsts[0]
    hi = lo
    for f, p in zip(firsts, parts):
        if f != hi:
            break
        hi += len(p)
    else:
        out = known.addresses[lo:hi], known.eids[lo:hi]
        for a in out:
            a.flags.writeable = False
        return out
    idx = np.concatenate([np.arange(f, f + len(p), dtype=np.int64) for f, p in zip(firsts, parts)])
    return known.addresses[idx], known.eids[idx]


def known_ids(known: KnownIds | None, insts, target: str, addresses: np.ndarray, code: bytes, base: int,
              ends: np.ndarray) -> np.ndarray:
    """:func:`encoding_ids` of ``insts`` (arguments as there), taking the
    eid of each instruction that ``known`` holds at the same address with
    the same dword count (so the same bytes of the same code: an eid is a
    function of the bytes) -- one search per instruction instead of a hash
    and a table lookup.  The others go through :func:`encoding_ids`."""
    FACTS.table(target)  # (may empty the cache: then nothing known is valid)
    n = len(insts)
    if (known is None or known.target != target or known.generation != FACTS.generation or not n
            or not len(known.addresses)):
        return encoding_ids(insts, target, addresses=addresses, code=code, base=base, ends=ends)
    sizes = dword_counts(addresses, ends)
    ka = known.addresses
    j = np.minimum(np.searchsorted(ka, addresses), len(ka) - 1)
    same = (ka[j] == addresses) & (known.sizes[j] == sizes)
    out = known.eids[j]
    other = np.flatnonzero(~same)
    if other.size:
        out[other] = _ids_by_bytes(insts, FACTS.table(target), other.tolist(), np.zeros(n, dtype=np.int64))[other]
    return out


def _ids_by_bytes(insts, table: dict, which, out: np.ndarray) -> np.ndarray:
    """Set ``out[k]`` to the eid of ``insts[k]`` for k in ``which``, by its bytes."""
    eid_of = FACTS.eid_of
    for k in which:
        out[k] = eid_of(insts[k], table)
    return out


class FactsView:
    """The facts of each instruction, by index, without a list of them."""

    __slots__ = ("eids", "_all")

    def __init__(self, eids: np.ndarray):
        self.eids = eids
        self._all = FACTS.all

    def __len__(self) -> int:
        return len(self.eids)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self._all[e] for e in self.eids[k].tolist()]
        return self._all[self.eids[k]]

    def __iter__(self):
        return iter(map(self._all.__getitem__, self.eids.tolist()))

    def distinct(self) -> list[Facts]:
        """The distinct encodings among them."""
        return [self._all[e] for e in np.unique(self.eids).tolist()]


def facts_of(insts, target: str, **where) -> FactsView:
    """Facts of each instruction of a list decoded for ``target`` (same order);
    ``where`` as for :func:`encoding_ids`."""
    return FactsView(encoding_ids(insts, target, **where))
