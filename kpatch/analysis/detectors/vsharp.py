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
from kpatch.analysis.facts import FACTS, M_BUFFER
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


def _write_chunk(ch: int):
    """The 64-bit chunk ``ch`` of the scalar registers an encoding writes
    (of facts in a plain list; over eids the cache's mask columns of
    ``swrites`` hold the same)."""
    def get(f) -> int:
        return (f.swrites >> (64 * ch)) & _M64
    return get


_M64 = (1 << 64) - 1
_WRITES = [(("vsharp", "writes", ch), _write_chunk(ch)) for ch in range(2)]


def _writers_of(ctx: Context, bit: int, memo: dict) -> np.ndarray:
    """Indices (ascending, an int64 column) of the instructions that write
    scalar register ``bit``: from a column of each encoding's write mask
    (kept for every encoding, worked out once), with numpy."""
    key = ("writers", bit)
    got = memo.get(key)
    if got is None:
        ch = bit // 64
        w = memo.get(("writes", ch))
        if w is None:
            facts = ctx.facts
            eids = getattr(facts, "eids", None)
            if eids is None:  # facts as a plain list
                w = np.array([_WRITES[ch][1](f) for f in facts], dtype=np.uint64)
            else:
                w = FACTS.mask_columns("swrites", ch + 1)[ch].take(eids)  # (take: faster than [])
            memo[("writes", ch)] = w
        got = memo[key] = np.flatnonzero((w & np.uint64(1 << (bit % 64))) != 0)
    return got


def _last_writers(ctx: Context, bit: int, memo: dict) -> list[int]:
    """Per block: the index of its last instruction that writes scalar
    register ``bit``, -1 if none does (all blocks at once)."""
    key = ("last", bit)
    got = memo.get(key)
    if got is None:
        cfg = ctx.cfg
        writers = _writers_of(ctx, bit, memo)
        if writers.size:
            j = np.searchsorted(writers, cfg.block_end) - 1  # the last writer before each block's end
            last = np.where(j >= 0, writers[np.maximum(j, 0)], -1)
            got = np.where(last >= cfg.block_start, last, -1).tolist()
        else:
            got = [-1] * cfg.nblocks
        memo[key] = got
    return got


def _block_bounds(ctx: Context, memo: dict) -> tuple[list[int], list[int]]:
    got = memo.get("bounds")
    if got is None:
        got = memo["bounds"] = (ctx.cfg.block_start.tolist(), ctx.cfg.block_end.tolist())
    return got


def reaching_writers(ctx: Context, k: int, bit: int, memo: dict) -> tuple[list[int], bool]:
    """Indices of the instructions whose write of scalar register ``bit``
    reaches instruction ``k``; and whether some path reaches the function entry.
    The walk goes back one block at a time and gives up after
    :data:`MAX_STEPS` instructions (counted as if each were looked at in
    turn: the last writer of each block is worked out for all blocks at
    once, :func:`_last_writers`; in ``k``'s own block, by bisection)."""
    cfg = ctx.cfg
    writers = _writers_of(ctx, bit, memo)
    last = _last_writers(ctx, bit, memo)
    bstart, bend = _block_bounds(ctx, memo)
    found: set[int] = set()
    entry = False
    preds = cfg.preds
    b = cfg.block_at(k)
    start = bstart[b]
    j = k - 1
    w = int(writers.searchsorted(j, "right")) - 1  # the last writer at or before j
    if j >= start and w >= 0 and (wj := int(writers[w])) >= start:
        return [wj], False
    steps = max(j - start + 1, 0)
    seen: set[int] = set()
    work = []
    while True:
        if not preds[b]:
            entry = True
        for p in preds[b]:
            if p not in seen:
                seen.add(p)
                work.append(p)
        while work and steps < MAX_STEPS:
            b = work.pop()
            wj = last[b]
            if wj >= 0:
                steps += bend[b] - wj
                found.add(wj)
                continue
            steps += bend[b] - bstart[b]
            break
        else:
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


_WORD3 = ("vsharp", "word3")


def _word3(f) -> int:
    """The SGPR holding word 3 of the descriptor a MUBUF/MTBUF encoding reads
    (the last of its ``srsrc``), -1 if it reads none."""
    if not f.marks & M_BUFFER:
        return -1
    word3 = sgpr_number("srsrc", f.inst.fields["srsrc"]) + 3
    return word3 if f.sreads >> word3 & 1 else -1


def descriptor_reads(ctx: Context) -> list[tuple[int, int]]:
    """(instruction index, SGPR of word 3) of every MUBUF/MTBUF that reads a
    descriptor (not buffer_gl0_inv and the like): picked out by a column of
    :func:`_word3` per encoding, not instruction by instruction."""
    buf = np.flatnonzero(ctx.marks & M_BUFFER)
    word3s = FACTS.column(_WORD3, _word3)[ctx.cfg.eids[buf]]
    has = word3s >= 0
    return list(zip(buf[has].tolist(), word3s[has].tolist()))


def detect(ctx: Context) -> list[Finding]:
    insts = ctx.insts
    memo: dict = {}
    users: dict[int, list[int]] = {}  # defining instruction -> buffer instructions it reaches
    values: dict[int, tuple[int, int]] = {}  # defining instruction -> (register, constant)
    for k, word3 in descriptor_reads(ctx):
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
