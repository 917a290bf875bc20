"""LdsMisalignedBug and Xnack: properties of a whole kernel or code object.

LdsMisalignedBug: gfx101x in WGP mode mishandles multi-dword LDS (and FLAT,
which may address LDS) accesses that are not naturally aligned.  LLVM
avoids them when compiling for gfx101x in WGP mode; code compiled for other
targets has no such guarantee, so a WGP-mode kernel with any multi-dword
DS/FLAT access is reported (alignment is not visible in the bytes).

Xnack: an ``xnack+`` code object needs XNACK, which gfx1010 runs without by
default.  Any other object may end up running with XNACK on unless it is
labelled ``xnack-``; that is only safe if its SMEM soft clauses (runs of
consecutive SMEM instructions) are replay safe: LLVM's rule
(checkSoftClauseHazards) is that once a clause has a definition, a store
may not join it and no instruction may join if the clause's definitions
then overlap its uses.
"""

from __future__ import annotations

import re

from kpatch.analysis.detectors.context import Context, FunctionSpan
from kpatch.analysis.facts import M_MULTI_DWORD, M_SMEM
from kpatch.analysis.findings import Finding

_SMEM_STORE = re.compile(r"^s_(buffer_|scratch_)?store|^s_atomic|^s_buffer_atomic|^s_dcache_wb")


def _lds_misaligned(ctx: Context, fn: FunctionSpan) -> list[Finding]:
    k = fn.kernel
    if k is None or ctx.compiled_for_gfx101x:
        return []
    try:
        wgp = k.descriptor.wgp_mode
    except Exception:  # descriptor layout without WGP_MODE (not GFX10)
        return []
    if not wgp:
        return []
    multi = ctx.marked(M_MULTI_DWORD, fn.start, fn.end)
    if not multi:
        return []
    insts = ctx.insts
    return [Finding("LdsMisalignedBug", insts[multi[0]].address,
                    f"WGP mode, {len(multi)} multi-dword LDS/FLAT access(es) with unproven alignment, "
                    f"first {insts[multi[0]].text()}",
                    addresses=tuple(insts[j].address for j in multi))]


def soft_clause_violations(ctx: Context, fn: FunctionSpan) -> list[int]:
    """Indices of SMEM instructions of ``fn`` that break LLVM's XNACK
    soft-clause rule (each would need a non-SMEM instruction before it)."""
    facts = ctx.facts
    bstart, block_of = ctx.cfg.block_start, ctx.cfg.block_of
    out: list[int] = []
    defs = uses = 0  # of the clause so far (a run of consecutive SMEM in one block)
    prev = -2
    for j in ctx.marked(M_SMEM, fn.start, fn.end):
        f = facts[j]
        if j != prev + 1 or bstart[block_of[j]] == j:
            defs = uses = 0  # a new clause
        elif defs and (_SMEM_STORE.match(f.mnemonic) or (defs | f.sdefs) & (uses | f.sreads)):
            out.append(j)
            defs = uses = 0  # the break starts a new clause here
        defs |= f.sdefs
        uses |= f.sreads
        prev = j
    return out


def _xnack(ctx: Context, fn: FunctionSpan) -> list[Finding]:
    if fn.kernel is None:
        return []
    setting = getattr(ctx.co.target, "xnack", None)
    insts = ctx.insts
    if setting == "+":
        return [Finding("Xnack", fn.address, f"{ctx.co.target_id} requires XNACK; gfx1010 runs without it "
                                             "by default (amdgpu.noretry)")]
    if setting == "-":
        return []
    bad = soft_clause_violations(ctx, fn)
    if not bad:
        return []
    label = ctx.co.target_id or "this target"
    return [Finding("Xnack", insts[bad[0]].address,
                    f"{label} code is not XNACK-replay safe ({len(bad)} SMEM soft clause(s) overwrite "
                    f"registers they read, first {insts[bad[0]].text()}): must be labelled xnack-",
                    addresses=tuple(insts[j].address for j in bad))]


def detect(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    for fn in ctx.functions:
        out.extend(_lds_misaligned(ctx, fn))
        out.extend(_xnack(ctx, fn))
    return out
