"""The forward dataflow engine against a literal transcription of LLVM's
backward search (GCNHazardRecognizer's getWaitStatesSince: from the
instruction, walk back through the block and every predecessor, each block
once, until a hazard source or an expiring instruction), on random programs
with branches and loops assembled by llvm-mc-16.

The reference works on the decoded instructions (mnemonics, formats,
register operands), not on the engine's facts, so the two share only the
CFG (tested in test_cfg.py) and the decoder."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
import pytest

from kpatch.analysis.cfg import build_cfg
from kpatch.analysis.detectors.waitstates import ENGINE
from kpatch.analysis.facts import facts_of
from kpatch.isa import decode
from tests.analysis.asm import assemble

pytestmark = pytest.mark.llvm

POOL = [
    "v_add_f32 v0, v0, v1",
    "v_mov_b32 v3, v0",
    "v_readfirstlane_b32 s4, v0",
    "v_cmp_eq_u32 vcc_lo, s4, v0",
    "v_cmpx_eq_u32 v0, v1",
    "v_add_co_u32 v0, s7, v0, v1",
    "global_load_dword v2, v[4:5], off",
    "global_load_dword v2, v4, s[4:5]",
    "buffer_load_dword v2, v4, s[8:11], s6 offen",
    "flat_load_dword v2, v[4:5]",
    "ds_read_b32 v3, v4",
    "ds_write_b32 v4, v3",
    "s_load_dword s7, s[4:5], 0x0",
    "s_load_dword s9, s[6:7], 0x10",
    "s_mov_b32 s4, 0",
    "s_mov_b32 s9, 1",
    "s_add_u32 s6, s6, 4",
    "s_mov_b32 exec_lo, s2",
    "s_and_saveexec_b32 s0, vcc_lo",
    "s_mov_b32 s3, exec_lo",
    "s_cmp_eq_u32 s4, 0",
    "s_waitcnt vmcnt(0) expcnt(0) lgkmcnt(0)",
    "s_waitcnt lgkmcnt(0)",
    "s_waitcnt_depctr 0xffe3",
    "s_waitcnt_depctr 0xfffe",
    "s_waitcnt_vscnt null, 0x0",
    "s_waitcnt_lgkmcnt null, 0x0",
    "s_nop 0",
]
BRANCHES = ["s_branch", "s_cbranch_scc1", "s_cbranch_execz"]

VALU = {"VOP1", "VOP2", "VOP3", "VOP3P", "VOPC"}
SALU = {"SOP1", "SOP2", "SOPK", "SOPC", "SOPP"}


def _sregs(regs) -> set[tuple[str, int]]:
    out = set()
    for r in regs:
        if r.file in ("s", "vcc", "exec", "m0", "ttmp"):
            for u in r.units():
                out.add((u.file, u.index))
    if ("exec", 0) in out or ("exec", 1) in out:
        out |= {("exec", 0), ("exec", 1)}
    return out


def _explicit_sdefs(i) -> set:
    """LLVM's MI->defs() for SALU/SMEM: the sdst/sdata register."""
    if i.format not in ("SOP1", "SOP2", "SOPK", "SMEM") or not i.writes or i.writes[0].file == "scc":
        return set()
    return _sregs([i.writes[0]])


def _is_vmem_like(i) -> bool:
    return i.format in ("MUBUF", "MTBUF", "MIMG", "DS", "FLAT")


def _lds_kind(i) -> int:
    if i.format == "DS":
        return 1
    if i.format in ("MUBUF", "MTBUF", "MIMG") or (i.format == "FLAT" and i.fields["seg"] in (1, 2)):
        return 2
    return 0


def _vscnt0(i) -> bool:
    return i.mnemonic == "s_waitcnt_vscnt" and i.fields["sdst"] == 125 and i.fields["simm16"] == 0


def _search_(cfg, k, is_hazard, is_expired, mitigated=frozenset()) -> bool:
    """LLVM's ::getWaitStatesSince(IsHazard, MI, IsExpired) != max; the
    instructions ``mitigated`` have a mitigation inserted before them (it
    expires the hazard once the walk passes them)."""
    insts = cfg.insts
    b = cfg.block_at(k)
    visited = set()

    def walk(b, j):
        start = int(cfg.block_start[b])
        while j >= start:
            if is_hazard(insts[j]):
                return True
            if is_expired(insts[j]) or j in mitigated:
                return False
            j -= 1
        for p in cfg.preds[b]:
            if p in visited:
                continue
            visited.add(p)
            if walk(p, int(cfg.block_end[p]) - 1):
                return True
        return False

    return walk(b, k - 1)


def reference(cfg, mitigated=None) -> dict[str, set[int]]:
    """The hazardous instructions per class, found as LLVM's recognizer does:
    in layout order, each found one gets its mitigation, which the searches
    of later instructions see (``mitigated``: given mitigations instead,
    fixed)."""
    insts = cfg.insts
    out = {n: set() for n in ("VMEMtoScalarWriteHazard", "SMEMtoVectorWriteHazard", "VcmpxExecWARHazard",
                              "LdsBranchVmemWARHazard")}
    fixed = mitigated is not None
    mitigated = {n: frozenset(mitigated.get(n, ())) for n in out} if fixed else out

    def _search(cfg, k, is_hazard, is_expired, name=None):
        return _search_(cfg, k, is_hazard, is_expired, mitigated[name] if name else frozenset())
    has_lds = any(_lds_kind(i) == 1 for i in insts)
    has_vmem = any(_lds_kind(i) == 2 for i in insts)
    for k, mi in enumerate(insts):
        defs = _explicit_sdefs(mi)
        if defs and mi.format in ("SOP1", "SOP2", "SOPK", "SMEM"):
            if _search(cfg, k, lambda i: _is_vmem_like(i) and _sregs(i.reads) & defs,
                       lambda i: i.format in VALU or (i.mnemonic == "s_waitcnt" and i.fields["simm16"] == 0)
                       or (i.mnemonic == "s_waitcnt_depctr" and (i.fields["simm16"] >> 2) & 7 == 0),
                       "VMEMtoScalarWriteHazard"):
                out["VMEMtoScalarWriteHazard"].add(k)
        if mi.format in VALU:
            sdst = [w for w in mi.writes if w.file in ("s", "vcc", "exec")]
            if sdst:
                d = _sregs(sdst[:1])
                if _search(cfg, k, lambda i: i.format == "SMEM" and _sregs(i.reads) & d,
                           lambda i: (i.format == "SOPP" and i.mnemonic == "s_waitcnt"
                                      and (i.fields["simm16"] >> 8) & 0x3F == 0)
                           or (i.mnemonic == "s_waitcnt_lgkmcnt" and i.fields["sdst"] == 125
                               and i.fields["simm16"] == 0)
                           or (i.format in SALU - {"SOPP"} and i.mnemonic not in (
                               "s_waitcnt_vscnt", "s_waitcnt_vmcnt", "s_waitcnt_expcnt", "s_version",
                               "s_setvskip", "s_waitcnt_lgkmcnt")), "SMEMtoVectorWriteHazard"):
                    out["SMEMtoVectorWriteHazard"].add(k)
            if any(w.file == "exec" for w in mi.writes):
                if _search(cfg, k, lambda i: i.format not in VALU and ("exec", 0) in _sregs(i.reads),
                           lambda i: (i.format in VALU and i.mnemonic not in ("v_readfirstlane_b32",)
                                      and any(w.file in ("s", "vcc", "exec") for w in i.writes))
                           or (i.mnemonic == "s_waitcnt_depctr" and i.fields["simm16"] & 1 == 0),
                           "VcmpxExecWARHazard"):
                    out["VcmpxExecWARHazard"].add(k)
        t = _lds_kind(mi)
        if t and has_lds and has_vmem:
            def branch_hazard(i, t=t):
                if not (i.mnemonic == "s_branch" or i.mnemonic.startswith("s_cbranch")):
                    return False
                j = next(j for j, x in enumerate(insts) if x is i)
                return _search_(cfg, j, lambda x: _lds_kind(x) not in (0, t),
                               lambda x: _lds_kind(x) == t or _vscnt0(x))
            if _search(cfg, k, branch_hazard, lambda i: _lds_kind(i) != 0 or _vscnt0(i), "LdsBranchVmemWARHazard"):
                out["LdsBranchVmemWARHazard"].add(k)
    return out


@st.composite
def programs(draw, forward: bool = False):
    """Random programs from POOL with branches (``forward``: only to later
    labels, so no loops)."""
    n = draw(st.integers(3, 24))
    body = [draw(st.sampled_from(POOL)) for _ in range(n)]
    labels = sorted(set(draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=4))))
    lines = []
    for k, text in enumerate(body):
        if k in labels:
            lines.append(f"L{k}:")
        lines.append("  " + text)
        later = [x for x in labels if x > k] if forward else labels
        if later and draw(st.integers(0, 4)) == 0:
            lines.append(f"  {draw(st.sampled_from(BRANCHES))} L{draw(st.sampled_from(later))}")
    lines.append("  s_endpgm")
    return "\n".join(lines) + "\n"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_engine_matches_llvm_backward_search(src):
    code, _ = assemble(src)
    insts = decode(code, "gfx1030", 0x2000)
    cfg = build_cfg(insts, facts_of(insts, "gfx1030"))
    got = {n: set() for n in reference(cfg)}
    for rh in ENGINE.run(cfg):
        if rh.rule.name in got:
            got[rh.rule.name] = set(rh.ks)
    want = reference(cfg)
    if not (any(_lds_kind(i) == 1 for i in insts) and any(_lds_kind(i) == 2 for i in insts)):
        got["LdsBranchVmemWARHazard"] = set()  # the detector drops these hits (rule does not apply)
    if not _has_back_edge(cfg):
        assert got == want, src  # without loops LLVM's insert-as-you-go has one answer
    # always: mitigating the hits leaves no hazard (sound), and each hit is a
    # hazard of the unmitigated program
    assert not any(reference(cfg, got)[n] - got[n] for n in got), src
    unmitigated = reference(cfg, {})
    assert all(got[n] <= unmitigated[n] for n in got), src


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(forward=True))
def test_engine_is_as_lean_as_llvm_without_loops(src):
    """Without loops, the hits are exactly where LLVM, inserting as it goes,
    puts its mitigations."""
    test_engine_matches_llvm_backward_search.hypothesis.inner_test(src)


def _has_back_edge(cfg) -> bool:
    return any(s >= 0 and s <= b for b in range(cfg.nblocks) for s in (cfg.succ1[b], cfg.succ2[b]))


def test_loop_carried_hazard():
    """A VMEM at the end of a loop body reaches the SALU at its top through
    the back edge (and only that way)."""
    src = """
  s_mov_b32 s6, 0
L0:
  s_add_u32 s6, s6, 4
  v_add_f32 v0, v0, v1
  buffer_load_dword v2, v4, s[8:11], s6 offen
  s_cbranch_scc1 L0
  s_endpgm
"""
    code, labels = assemble(src)
    insts = decode(code, "gfx1030", 0)
    cfg = build_cfg(insts, facts_of(insts, "gfx1030"))
    hits = {rh.rule.name: rh.ks for rh in ENGINE.run(cfg)}
    assert hits.get("VMEMtoScalarWriteHazard") == [1]  # s_add_u32 s6 at L0
    rh = next(r for r in ENGINE.run(cfg) if r.rule.name == "VMEMtoScalarWriteHazard")
    assert rh.sources(1) == [3] and rh.mask(1) == 1 << 6


def test_one_hit_per_hazard():
    """One mitigation before the first SGPR write covers the later ones (the
    VMEM read them all), across a branch and its join; the reference (LLVM's
    insert-as-you-go) agrees.  (A join where only one side was mitigated:
    tests/rewrite/test_lean_mitigations.py.)"""
    src = """
  buffer_load_dword v2, v4, s[8:11], s6 offen
  s_mov_b32 s9, 1
  s_mov_b32 s10, 1
  s_cbranch_scc1 L0
  s_add_u32 s6, s6, 4
  s_mov_b32 s8, 0
L0:
  s_mov_b32 s11, 0
  s_endpgm
"""
    code, _ = assemble(src)
    insts = decode(code, "gfx1030", 0)
    cfg = build_cfg(insts, facts_of(insts, "gfx1030"))
    hits = {rh.rule.name: rh.ks for rh in ENGINE.run(cfg)}
    # the mitigation before s_mov_b32 s9 lies on every path to the later writes
    # (both sides of the branch and the join): it covers all of them
    assert hits.get("VMEMtoScalarWriteHazard") == [1]
    assert set(hits["VMEMtoScalarWriteHazard"]) == reference(cfg)["VMEMtoScalarWriteHazard"]
    assert reference(cfg, {})["VMEMtoScalarWriteHazard"] == {1, 2, 4, 5, 6}


def test_unseen_control_flow_in_function_reports():
    """_function_reports: a branch from one function into another and an
    s_rfe_b64 (a PC change kpatch does not follow) make their functions'
    unseen reasons, which make them unpatchable; a function without either
    has none.  Addresses from llvm-mc-16's labels."""
    from types import SimpleNamespace
    from kpatch.analysis.detectors.context import Context, FunctionSpan
    from kpatch.analysis.engine import _function_reports, run_detectors
    from kpatch.analysis.report import Report
    import numpy as np
    src = """
f0:
  s_branch L1
  s_endpgm
f1:
  s_nop 0
L1:
  s_endpgm
f2:
  s_rfe_b64 s[0:1]
  s_endpgm
"""
    code, labels = assemble(src)
    insts = decode(code, "gfx1030", 0)
    addrs = [i.address for i in insts]
    starts = [addrs.index(labels[f]) for f in ("f0", "f1", "f2")]
    ends = starts[1:] + [len(insts)]
    cfg = build_cfg(insts, facts_of(insts, "gfx1030"), starts)
    spans = [FunctionSpan(f"f{j}", "function", None, s, e, addrs[s], (addrs[e] if e < len(addrs) else len(code)) - addrs[s])
             for j, (s, e) in enumerate(zip(starts, ends))]
    ctx = Context(SimpleNamespace(target=None), cfg, "gfx1030", "gfx1030", spans)
    ctx.addresses = np.array(addrs, dtype=np.int64)
    report = Report("gfx1010", "amdgcn-amd-amdhsa--gfx1030", "gfx1030")
    _function_reports(report, ctx, run_detectors(ctx))
    f0, f1, f2 = report.functions
    assert f0.unseen == (f"branch at {labels['f0']:#x} leaves f0 (target {labels['L1']:#x}): kpatch does not "
                         f"follow control flow across functions or into the middle of an instruction",)
    assert f1.unseen == () and f1.verdict.status == "ok"
    assert f2.unseen == (f"s_rfe_b64 at {labels['f2']:#x} changes the program counter in a way kpatch does not "
                         f"follow",)
    assert f0.verdict.status == f2.verdict.status == "unpatchable"
    assert f0.verdict.reasons == f0.unseen and f2.verdict.reasons == f2.unseen
