"""VsharpLlcNoalloc: buffer descriptors whose word 3 is built from a constant
with LLC_NOALLOC set.

A MUBUF/MTBUF names its descriptor as ``srsrc`` (four SGPRs from
4 * srsrc); word 3 is the last of them.  From each such instruction the
register is traced back along every path to the instructions that write it
(its reaching definitions).  A finding is reported at each defining
instruction whose constant has LLC_NOALLOC set (where the constant is
rewritten); its ``addresses`` are that instruction and then the buffer
instructions it reaches.  A writer contributes the constants it can be
seen to put there: ``s_mov_b32``/``s_movk_i32`` of a constant, a copy from
another SGPR (traced in turn), ``s_cselect_b32`` (both arms), ``s_or_b32``
(the constant bits it sets).  Anything else - typically a descriptor loaded
from kernel arguments - is not visible and not reported.

Word 3 layout (GFX10.3): dst_sel 0-11, format 12-18, index_stride 21-22,
add_tid_enable 23, resource_level 24, LLC_NOALLOC 26-27, oob_select 28-29,
type 30-31.
"""

from __future__ import annotations

import numpy as np

from kpatch.analysis.detectors.context import Context
from kpatch.analysis.facts import M_BUFFER, mask_of
from kpatch.analysis.findings import Finding
from kpatch.isa.operands import inline_u32, sgpr_number

LLC_NOALLOC_SHIFT = 26
LLC_NOALLOC_MASK = 3 << LLC_NOALLOC_SHIFT
MAX_DEPTH = 4  # copies followed
MAX_STEPS = 5000  # instructions walked per trace

LITERAL = 255


def scalar_constant(value: int, literal: int | None) -> int | None:
    """The 32-bit value of a scalar source operand that is a constant, else None."""
    if value == LITERAL:
        return literal
    return inline_u32(value)


def _writes(f, memo: dict) -> int:
    m = memo.get(f)
    if m is None:
        m = memo[f] = mask_of(f.inst.writes)
    return m


def _writers_of(ctx: Context, bit: int, memo: dict) -> np.ndarray:
    """Indices (ascending, an int64 column) of the instructions that write
    scalar register ``bit``: each distinct encoding's write mask is worked
    out once, and the instructions holding a writing encoding are picked out
    with numpy."""
    key = ("writers", bit)
    got = memo.get(key)
    if got is None:
        facts = ctx.facts
        eids = getattr(facts, "eids", None)
        if eids is None:  # facts as a plain list
            got = np.array([j for j in range(len(facts)) if _writes(facts[j], memo) >> bit & 1], dtype=np.int64)
        else:
            inv = memo.get("inverse")
            if inv is None:
                uniq, inv = np.unique(eids, return_inverse=True)
                memo["inverse"] = inv = inv.reshape(-1).astype(np.int32)
                memo["masks"] = [_writes(facts._all[e], memo) for e in uniq.tolist()]
            hit = np.array([m >> bit & 1 for m in memo["masks"]], dtype=bool)
            got = np.flatnonzero(hit[inv]) if len(hit) else np.zeros(0, dtype=np.int64)
        memo[key] = got
    return got


def reaching_writers(ctx: Context, k: int, bit: int, memo: dict) -> tuple[list[int], bool]:
    """Indices of the instructions whose write of scalar register ``bit``
    reaches instruction ``k``; and whether some path reaches the function entry.
    The walk goes back one block at a time and gives up after
    :data:`MAX_STEPS` instructions (counted as if each were looked at in
    turn: the nearest writer in a block is found by bisection)."""
    cfg = ctx.cfg
    writers = _writers_of(ctx, bit, memo)
    found: set[int] = set()
    entry = False
    seen: set[int] = set()
    preds = cfg.preds
    work = [(cfg.block_at(k), k - 1)]
    steps = 0
    while work and steps < MAX_STEPS:
        b, j = work.pop()
        start = int(cfg.block_start[b])
        w = int(writers.searchsorted(j, "right")) - 1  # the last writer at or before j
        if j >= start and w >= 0 and (wj := int(writers[w])) >= start:
            steps += j - wj + 1
            found.add(wj)
            continue
        steps += max(j - start + 1, 0)
        if not preds[b]:
            entry = True
        for p in preds[b]:
            if p not in seen:
                seen.add(p)
                work.append((p, int(cfg.block_end[p]) - 1))
    return sorted(found), entry


def constants(ctx: Context, j: int, bit: int, memo: dict, depth: int = 0) -> set[int]:
    """Constants writer ``j`` may put in scalar register ``bit`` (empty: unknown)."""
    inst = ctx.insts[j]
    mn = inst.mnemonic
    f = inst.fields
    if mn == "s_movk_i32":
        v = f["simm16"]
        return {(v - 0x10000 if v & 0x8000 else v) & 0xFFFFFFFF}
    srcs = []
    if mn in ("s_mov_b32", "s_cselect_b32", "s_or_b32"):
        srcs = [f[n] for n in ("ssrc0", "ssrc1") if n in f]
    else:
        return set()
    vals: list[set[int]] = []
    for s in srcs:
        c = scalar_constant(s, inst.literal)
        if c is not None:
            vals.append({c})
        elif s <= 105 and depth < MAX_DEPTH:
            got: set[int] = set()
            writers, _ = reaching_writers(ctx, j, s, memo)
            for w in writers:
                got |= constants(ctx, w, s, memo, depth + 1)
            vals.append(got)
        else:
            vals.append(set())
    if mn == "s_mov_b32":
        return vals[0]
    if mn == "s_cselect_b32":
        return vals[0] | vals[1]
    if not vals[0] and not vals[1]:  # s_or_b32 of two unknowns
        return set()
    # s_or_b32: the bits the known operand(s) certainly set
    return {x | y for x in (vals[0] or {0}) for y in (vals[1] or {0})}


def detect(ctx: Context) -> list[Finding]:
    insts = ctx.insts
    facts = ctx.facts
    memo: dict = {}
    users: dict[int, list[int]] = {}  # defining instruction -> buffer instructions it reaches
    values: dict[int, tuple[int, int]] = {}  # defining instruction -> (register, constant)
    for k in ctx.marked(M_BUFFER):
        f = facts[k]
        inst = insts[k]
        word3 = sgpr_number("srsrc", inst.fields["srsrc"]) + 3
        if not f.sreads >> word3 & 1:
            continue  # no descriptor operand (buffer_gl0_inv and the like)
        writers, _ = reaching_writers(ctx, k, word3, memo)
        for j in writers:
            if j not in values:
                bad = sorted(v for v in constants(ctx, j, word3, memo) if v & LLC_NOALLOC_MASK)
                values[j] = (word3, bad[0]) if bad else None
            if values[j] is not None:
                users.setdefault(j, []).append(k)
    out: list[Finding] = []
    for j in sorted(users):
        reg, v = values[j]
        ks = users[j]
        first = insts[ks[0]]
        more = f" (+{len(ks) - 1} more)" if len(ks) > 1 else ""
        out.append(Finding(
            "VsharpLlcNoalloc", insts[j].address,
            f"{insts[j].text()} puts {v:#010x} (LLC_NOALLOC={(v & LLC_NOALLOC_MASK) >> LLC_NOALLOC_SHIFT}) in "
            f"s{reg}, word 3 of the descriptor of {first.text()} at {first.address:#x}{more}",
            addresses=(insts[j].address,) + tuple(insts[k].address for k in ks)))
    return out
