"""The wait-state hazards, as rules of the path-sensitive engine
(:mod:`kpatch.analysis.dataflow`).  Triggers and expiry follow LLVM's
GCNHazardRecognizer (fixVMEMtoScalarWriteHazards,
fixSMEMtoVectorWriteHazards, fixVcmpxPermlaneHazards, fixVcmpxExecWARHazard,
fixLdsBranchVmemWARHazard); see gfx1010-hazards.md.

* VMEMtoScalarWriteHazard - field: SGPRs read by VMEM/DS/FLAT; gen: their
  scalar reads (EXEC included); check: SALU/SMEM explicit destinations;
  kill: any VALU, ``s_waitcnt 0``, ``s_waitcnt_depctr`` with vm_vsrc = 0.
* SMEMtoVectorWriteHazard - field: SGPRs read by SMEM; check: a VALU's
  scalar destination; kill: a non-SOPP SALU (except s_setvskip, s_version,
  s_waitcnt_vscnt/vmcnt/expcnt), ``s_waitcnt`` with lgkmcnt(0),
  ``s_waitcnt_lgkmcnt null, 0``.
* VcmpxPermlaneHazard - one bit: a VALU compare wrote EXEC; check:
  v_permlane(x)16; kill: a VALU other than v_nop.
* VcmpxExecWARHazard - one bit: a non-VALU read EXEC; check: a VALU that
  writes EXEC; kill: a VALU that writes an SGPR, ``s_waitcnt_depctr`` with
  sa_sdst = 0.
* LdsBranchVmemWARHazard - bits (DS, no branch yet), (DS, branch since),
  (VMEM, ...), (VMEM, ...); DS / VMEM set their "no branch" bit, a block
  ending in a branch turns "no branch" into "branch since"; a DS checks
  (VMEM, branch since) and a VMEM (DS, branch since); DS, VMEM and
  ``s_waitcnt_vscnt null, 0`` kill.  VMEM here is MUBUF/MTBUF/MIMG and
  global/scratch FLAT (not flat-segment FLAT), and the rule applies only to
  functions that have both kinds.

Every rule is ``lean`` (:class:`kpatch.analysis.dataflow.MaskRule`): each
mitigation (rules/gfx1010-hazards.toml, KH001-KH005) is inserted right
before the flagged instruction and is one of the rule's kills, so a finding
expires the hazard for what follows, as in LLVM, and findings are the
mitigation sites (one per hazard).  It changes the counts of
VMEMtoScalarWriteHazard and SMEMtoVectorWriteHazard; for the other three
the flagged instruction already expires its own hazard (a permlane is a
VALU, a v_cmpx writes an SGPR, LDS and VMEM kill LdsBranchVmemWARHazard).
NSAtoVMEMBug (mimg.py) needs no such care: it looks one instruction back.

A finding's detail and source addresses are worked out when first read.
"""

from __future__ import annotations

from itertools import repeat

import numpy as np

from kpatch.analysis.dataflow import HazardEngine, MaskRule, RuleHits
from kpatch.analysis.detectors.context import Context
from kpatch.analysis.facts import DS, FLAT, FLAT_SEG, M_DS, M_VMEM_SEG, SALU, SMEM, VALU, VMEM, Facts, mask_names
from kpatch.analysis.findings import CLASS_BY_NAME, Finding

SGPR_FIELD = 128  # bits: the 9-bit operand encodings 0..127

_VMEM_LIKE = VMEM | DS | FLAT
_LDS_VMEM = VMEM | FLAT_SEG

VMEM_TO_SCALAR = MaskRule(
    "VMEMtoScalarWriteHazard", SGPR_FIELD,
    check=lambda f: f.sdefs if f.cls & (SALU | SMEM) else 0,
    kill=lambda f: f.kill_vm,
    gen=lambda f: f.sreads if f.cls & _VMEM_LIKE else 0,
    lean=True,
    columns=lambda c: (_where(c.int("cls") & (SALU | SMEM), c.mask("sdefs", 2)), _where(
        c.int("cls") & _VMEM_LIKE, c.mask("sreads", 2)), c.int("kill_vm")))

SMEM_TO_VECTOR = MaskRule(
    "SMEMtoVectorWriteHazard", SGPR_FIELD,
    check=lambda f: f.valu_sdst,
    kill=lambda f: f.kill_smem,
    gen=lambda f: f.sreads if f.cls & SMEM else 0,
    lean=True,
    columns=lambda c: (c.mask("valu_sdst", 2), _where(c.int("cls") & SMEM, c.mask("sreads", 2)),
                       c.int("kill_smem")))

VCMPX_PERMLANE = MaskRule(
    "VcmpxPermlaneHazard", 1,
    check=lambda f: 1 if f.is_permlane else 0,
    kill=lambda f: bool(f.cls & VALU) and not f.is_v_nop,
    gen=lambda f: 1 if f.vcmp_exec else 0,
    lean=True,
    columns=lambda c: ([c.int("is_permlane")], [c.int("vcmp_exec")],
                       ((c.int("cls") & VALU) != 0) & (c.int("is_v_nop") == 0)))

VCMPX_EXEC_WAR = MaskRule(
    "VcmpxExecWARHazard", 1,
    check=lambda f: 1 if f.writes_exec else 0,
    kill=lambda f: f.kill_vcmpx_war,
    gen=lambda f: 1 if f.reads_exec and not f.cls & VALU else 0,
    lean=True,
    columns=lambda c: ([c.int("writes_exec")], [(c.int("reads_exec") != 0) & ((c.int("cls") & VALU) == 0)],
                       c.int("kill_vcmpx_war")))


def _where(cond: np.ndarray, chunks: list[np.ndarray]) -> list[np.ndarray]:
    """Each 64-bit chunk of a mask column where ``cond`` is non-zero, else 0."""
    return [np.where(cond != 0, a, np.uint64(0)) for a in chunks]


DS_F, DS_T, VM_F, VM_T = 1, 2, 4, 8
_NO_BRANCH, _BRANCH_SINCE = DS_F | VM_F, DS_T | VM_T


def _lds_check(f: Facts) -> int:
    if f.cls & DS:
        return VM_T
    if f.cls & _LDS_VMEM:
        return DS_T
    return 0


# on_branch / before_branch use bit operations only: they also run on numpy arrays
def _lds_columns(cls: np.ndarray, vscnt0: np.ndarray):
    """(check, gen, kill) of LdsBranchVmemWARHazard over columns (as :func:`_lds_check` and the lambdas)."""
    ds = (cls & DS) != 0
    vm = ~ds & ((cls & _LDS_VMEM) != 0)
    check = np.where(ds, VM_T, np.where(vm, DS_T, 0))
    gen = np.where(ds, DS_F, np.where(vm, VM_F, 0))
    return [check], [gen], ((cls & (DS | _LDS_VMEM)) != 0) | (vscnt0 != 0)


LDS_BRANCH_VMEM = MaskRule(
    "LdsBranchVmemWARHazard", 4,
    check=_lds_check,
    kill=lambda f: bool(f.cls & (DS | _LDS_VMEM)) or f.vscnt0,
    gen=lambda f: DS_F if f.cls & DS else VM_F if f.cls & _LDS_VMEM else 0,
    on_branch=lambda v: ((v & _NO_BRANCH) << 1) | (v & _BRANCH_SINCE),
    before_branch=lambda m: m | ((m & _BRANCH_SINCE) >> 1),
    lean=True,
    columns=lambda c: _lds_columns(c.int("cls"), c.int("vscnt0")))

RULES = [VMEM_TO_SCALAR, SMEM_TO_VECTOR, VCMPX_PERMLANE, VCMPX_EXEC_WAR, LDS_BRANCH_VMEM]
ENGINE = HazardEngine(RULES)


def _detail(ctx: Context, rh: RuleHits, k: int) -> str:
    insts = ctx.insts
    srcs = rh.sources(k, limit=1024)
    me = insts[k].text()
    if srcs:
        first = insts[srcs[0]]
        src = f"{first.text()} at {first.address:#x}" + (f" (+{len(srcs) - 1} more)" if len(srcs) > 1 else "")
    else:
        src = "an earlier instruction on some path"
    name = rh.rule.name
    if name == "VMEMtoScalarWriteHazard" or name == "SMEMtoVectorWriteHazard":
        return f"{me} writes {mask_names(rh.mask(k))} still read by {src}"
    if name == "VcmpxPermlaneHazard":
        return f"{me} follows {src} with no VALU between"
    if name == "VcmpxExecWARHazard":
        return f"{me} writes EXEC read by {src}"
    kind = "VMEM" if rh.mask(k) & VM_T else "LDS"
    return f"{me} after a branch after {kind} {src}"


class HazardFinding(Finding):
    """A finding of the engine: its detail and source addresses are made from
    the hit when first read (there can be one every few instructions).  Its
    class, mitigation and fix are those of its rule's finding class, held
    by the rule's own subclass (:func:`_finding_type`), not by each finding:
    a finding is made from its address and hit alone."""

    __slots__ = ("_src", "_k")

    def __init__(self, src: tuple[Context, RuleHits], k: int, address: int):
        self.address = address
        self._src, self._k = src, k  # (the context and the rule's hits; the hit)

    @property
    def detail(self) -> str:
        try:
            return self._detail
        except AttributeError:
            self._detail = d = _detail(*self._src, self._k)
            return d

    @property
    def addresses(self) -> tuple[int, ...]:
        try:
            return self._addresses
        except AttributeError:
            ctx, rh = self._src
            insts = ctx.insts
            self._addresses = a = tuple(insts[j].address for j in rh.sources(self._k, limit=1024))
            return a


_TYPES: dict[str, type] = {}


def _finding_type(name: str) -> type:
    """The subclass of :class:`HazardFinding` for the finding class ``name``
    (its class, mitigation and fix as class attributes, read-only on the
    findings; blocker None: every wait-state hazard has its rule set)."""
    t = _TYPES.get(name)
    if t is None:
        c = CLASS_BY_NAME[name]
        t = _TYPES[name] = type(f"{name}Finding", (HazardFinding,), {
            "__slots__": (), "cls": c.name, "mitigation": c.mitigation, "fix": c.rule_set, "blocker": None})
    return t


def detect(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    for rh in ENGINE.run(ctx.cfg):
        ks = rh.hits
        if rh.rule is LDS_BRANCH_VMEM:
            # only in functions that have both LDS and VMEM instructions
            starts = np.array(ctx.cfg.func_starts, dtype=np.int64)
            m = ctx.marks
            ok = (np.logical_or.reduceat((m & M_DS) != 0, starts) & np.logical_or.reduceat((m & M_VMEM_SEG) != 0,
                                                                                           starts))
            ks = ks[ok[np.searchsorted(starts, ks, "right") - 1]]
        make, src = _finding_type(rh.rule.name), (ctx, rh)
        # (addresses from the column, not from instruction objects spread over memory)
        out.extend(map(make, repeat(src), ks.tolist(), ctx.addresses.take(ks).tolist()))
    return out
