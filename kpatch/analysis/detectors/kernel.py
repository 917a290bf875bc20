"""LdsMisalignedBug and Xnack: properties of a whole kernel or code object.

LdsMisalignedBug: gfx101x in WGP mode mishandles multi-dword LDS (and FLAT,
which may address LDS) accesses that are not naturally aligned.  LLVM
avoids them when compiling for gfx101x in WGP mode; code compiled for other
targets has no such guarantee, so a WGP-mode kernel with any multi-dword
DS/FLAT access is reported (alignment is not visible in the bytes).

Both are kernel-level findings: LdsMisalignedBug's address is the kernel
descriptor (``NAME.kd``, where the fix goes); Xnack is a property of the
code object (``xnack+`` needs XNACK, which gfx1010 runs without by default)
and has no address; it is reported for each kernel.
"""

from __future__ import annotations

import bisect

import numpy as np

from kpatch.analysis.detectors.context import Context, FunctionSpan
from kpatch.analysis.facts import M_MULTI_DWORD
from kpatch.analysis.findings import Finding



def _lds_misaligned(ctx: Context, fn: FunctionSpan, multi: list[int] | None = None) -> list[Finding]:
    """The LdsMisalignedBug finding of kernel ``fn`` (none or one); ``multi``:
    the indices of the unit's multi-dword accesses (:data:`M_MULTI_DWORD`),
    if the caller has them."""
    k = fn.kernel
    if k is None or ctx.compiled_for_gfx101x:
        return []
    if multi is None:
        multi = ctx.marked(M_MULTI_DWORD)
    lo, hi = bisect.bisect_left(multi, fn.start), bisect.bisect_left(multi, fn.end)
    if lo == hi:
        return []  # (its descriptor need not be read)
    try:
        wgp = k.descriptor.wgp_mode
    except Exception:  # descriptor layout without WGP_MODE (not GFX10)
        return []
    if not wgp:
        return []
    cfg, addresses, at = ctx.cfg, ctx.addresses, multi[lo:hi]
    # (detail and addresses made when first read: rendering an instruction costs more than the rest;
    # they hold the graph and addresses, not the context, which holds the finding: no cycle for the
    # collector to find, everything freed by reference counts when the report goes; the graph's
    # instructions are columns, each made when read: kpatch.isa.columnlist)
    return [Finding("LdsMisalignedBug", k.descriptor_vaddr,
                    lambda: f"WGP mode, {len(at)} multi-dword LDS/FLAT access(es) with unproven alignment, "
                            f"first {cfg.insts[at[0]].text()}",
                    addresses=lambda: addresses[at].tolist())]


def _requires_xnack(ctx: Context) -> bool:
    """Whether the object's target requires XNACK (``xnack+``)."""
    return getattr(ctx.co.target, "xnack", None) == "+"


def _xnack(ctx: Context, fn: FunctionSpan) -> list[Finding]:
    if fn.kernel is None or not _requires_xnack(ctx):
        return []
    return [Finding("Xnack", None, f"{ctx.co.target_id} requires XNACK; gfx1010 runs without it "
                                   "by default (amdgpu.noretry), so the loader refuses the object")]


def detect(ctx: Context) -> list[Finding]:
    multi = ctx.marked(M_MULTI_DWORD)  # (once, not once per function)
    fns = ctx.functions
    if not _requires_xnack(ctx):  # only kernels with multi-dword accesses can have findings
        at = np.array(multi, dtype=np.int64)
        has = (np.searchsorted(at, [fn.end for fn in fns]) > np.searchsorted(at, [fn.start for fn in fns])).tolist()
        fns = [fn for fn, h in zip(fns, has) if h]
    for fn in fns:
        for f in _lds_misaligned(ctx, fn, multi) + _xnack(ctx, fn):
            ctx.attach(fn, f)
    return []
