"""Hazards as a forward "may" dataflow over every path.

A hazard of LLVM's GCNHazardRecognizer has the shape: instruction B is
hazardous if, walking back from B along *any* path (across branches and
loop back edges), an instruction A of some kind is met before an
instruction that expires the hazard.  Forward, that is a gen/kill problem:

* each :class:`MaskRule` has a state of ``width`` bits;
* an instruction first **checks** (B is hazardous when the state before it
  has a bit of its check mask), then **kills** (an expiring instruction
  clears the state), then **gens** (a hazard source sets bits);
* the states of a block's predecessors are joined with OR (every path
  counts), so loops need no special case: propagation runs to a fixpoint;
* a rule may also transform its state at the end of a block that ends with
  a branch (``on_branch``; LdsBranchVmemWARHazard needs "a branch lies
  between A and B").

The engine works on positions, not instruction by instruction: for each
rule it takes the indices of the instructions that check, gen and kill
(numpy arrays), so "is there a gen after the last kill before this check,
in this block" is a binary search; only candidate pairs, blocks whose state
leaves them, and the blocks that state reaches are handled in Python.

Hits report the unmitigated program: every instruction that needs a
mitigation on some path.  One inserted mitigation may cover several of them
(LLVM inserts as it goes), so counts can exceed what LLVM would insert.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Callable

import numpy as np

from kpatch.analysis.cfg import CFG
from kpatch.analysis.facts import Facts

_HZ = attrgetter("hz")


@dataclass(frozen=True)
class MaskRule:
    """One hazard as gen/kill/check on a ``width``-bit state.

    ``check``/``gen`` return masks of state bits; ``kill`` says whether the
    instruction expires the hazard.  ``on_branch`` maps the state at the end
    of a block ending in a branch; ``before_branch`` maps state bits after
    such a branch to the bits that could have produced them (used to walk
    back to a hit's sources)."""

    name: str
    width: int
    check: Callable[[Facts], int]
    kill: Callable[[Facts], bool]
    gen: Callable[[Facts], int]
    on_branch: Callable[[int], int] | None = None
    before_branch: Callable[[int], int] | None = None


@dataclass
class Hit:
    """Instruction index ``k`` is hazardous for ``rule``: ``mask`` holds the
    state bits it meets; ``sources`` the gens found in its own block (empty
    when the hazard comes from another block)."""

    rule: MaskRule
    k: int
    mask: int
    sources: tuple[int, ...] = ()


def _window_or(masks: list[int], width: int, lo: np.ndarray, hi: np.ndarray) -> list[int]:
    """OR of ``masks[lo[j]:hi[j]]`` for each j (windows non-empty, disjoint and
    in order), computed with numpy on 63-bit chunks."""
    chunks = []
    bounds = np.empty(2 * len(lo), dtype=np.int64)
    bounds[0::2] = lo
    bounds[1::2] = hi
    for shift in range(0, width, 63):
        arr = np.fromiter(((m >> shift) & _CHUNK for m in masks), dtype=np.int64, count=len(masks))
        arr = np.append(arr, 0)
        chunks.append((shift, np.bitwise_or.reduceat(arr, bounds)[0::2].tolist()))
    out = [0] * len(lo)
    for shift, vals in chunks:
        if shift:
            out = [o | (v << shift) for o, v in zip(out, vals)]
        else:
            out = [o | v for o, v in zip(out, vals)]
    return out


_CHUNK = (1 << 63) - 1


class HazardEngine:
    """Runs a list of :class:`MaskRule` (at most 10) on control-flow graphs.

    Each encoding's role is compiled once into ``facts.hz``: an int with
    three bits per rule (check, gen, kill) and a tuple of per-rule
    ``(check mask, gen mask)``."""

    def __init__(self, rules: list[MaskRule]):
        if len(rules) > 10:
            raise ValueError("at most 10 rules per engine")
        self.rules = rules

    def compile(self, f: Facts) -> None:
        roles = 0
        masks = []
        for i, r in enumerate(self.rules):
            fm = (1 << r.width) - 1
            c = r.check(f) & fm
            g = r.gen(f) & fm
            masks.append((c, g))
            roles |= (bool(c) | bool(g) << 1 | bool(r.kill(f)) << 2) << (3 * i)
        f.hzm = tuple(masks)
        f.hz = roles

    def roles(self, facts: list[Facts]) -> np.ndarray:
        """The role bits of every instruction."""
        try:
            return np.fromiter(map(_HZ, facts), dtype=np.int64, count=len(facts))
        except TypeError:  # some encoding not compiled yet
            for f in set(facts):
                if f.hz is None:
                    self.compile(f)
            return np.fromiter(map(_HZ, facts), dtype=np.int64, count=len(facts))

    def run(self, cfg: CFG) -> list[Hit]:
        """Every hazardous instruction of ``cfg``, ordered by rule then index."""
        if not cfg.n:
            return []
        roles = self.roles(cfg.facts)
        hits: list[Hit] = []
        for i, rule in enumerate(self.rules):
            hits.extend(self._run_rule(cfg, roles, i, rule))
        return hits

    def _run_rule(self, cfg: CFG, roles: np.ndarray, i: int, rule: MaskRule) -> list[Hit]:
        C = np.flatnonzero(roles & (1 << (3 * i)))
        if not C.size:
            return []
        G = np.flatnonzero(roles & (2 << (3 * i)))
        if not G.size:
            return []
        K = np.flatnonzero(roles & (4 << (3 * i)))
        facts = cfg.facts
        bstart, bend, block_of = cfg.block_start, cfg.block_end, cfg.block_of
        found: dict[int, list] = {}

        # -- hits from gens in the check's own block ---------------------------------
        kp = np.searchsorted(K, C) - 1  # last kill strictly before each check
        pk = np.where(kp >= 0, K[np.maximum(kp, 0)] if K.size else -1, -1)
        bc = block_of[C]
        bs = bstart[bc]
        # a kill comes before the same instruction's gen, so the window starts
        # at the last kill itself
        ws = np.maximum(pk, bs)
        glo = np.searchsorted(G, ws)
        ghi = np.searchsorted(G, C)
        for j in np.flatnonzero(ghi > glo).tolist():
            c = int(C[j])
            chk = facts[c].hzm[i][0]
            srcs = []
            h = 0
            for g in G[glo[j]:ghi[j]].tolist():
                m = chk & facts[g].hzm[i][1]
                if m:
                    h |= m
                    srcs.append(g)
            if h:
                found[c] = [h, srcs]

        # -- the state each block passes on ------------------------------------------
        kb = np.searchsorted(K, bend) - 1
        lk = np.where(kb >= 0, K[np.maximum(kb, 0)] if K.size else -1, -1)
        has_kill = lk >= bstart
        wst = np.where(has_kill, lk, bstart)
        glo_b = np.searchsorted(G, wst)
        ghi_b = np.searchsorted(G, bend)
        through = (~has_kill).tolist()
        local: dict[int, int] = {}
        src = np.flatnonzero(ghi_b > glo_b)
        if src.size:
            for b, v in zip(src.tolist(), _window_or([facts[g].hzm[i][1] for g in G.tolist()], rule.width,
                                                     glo_b[src], ghi_b[src])):
                if v:
                    local[b] = v
        if local:
            inn = self._propagate(cfg, rule, local, through)
            if inn:
                # checks with no kill before them in their block see the in-state
                dep = np.flatnonzero(pk < bs)
                if dep.size:
                    keys = np.fromiter(inn.keys(), dtype=np.int64, count=len(inn))
                    dep = dep[np.isin(bc[dep], keys)]
                    for j in dep.tolist():
                        c = int(C[j])
                        h = facts[c].hzm[i][0] & inn[int(bc[j])]
                        if h:
                            e = found.get(c)
                            if e is None:
                                found[c] = [h, []]
                            else:
                                e[0] |= h
        return [Hit(rule, k, v[0], tuple(v[1])) for k, v in sorted(found.items())]

    @staticmethod
    def _propagate(cfg: CFG, rule: MaskRule, local: dict[int, int], through: list[bool]) -> dict[int, int]:
        """In-states (nonzero only) at the fixpoint, by a worklist over the
        blocks the generated state reaches."""
        branchy = cfg.branchy
        succ1, succ2 = cfg.succ1, cfg.succ2
        on_branch = rule.on_branch
        n = cfg.nblocks
        inn = [0] * n
        out = [0] * n
        loc = [0] * n
        work = []
        for b, v in local.items():
            loc[b] = v
            if on_branch is not None and branchy[b]:
                v = on_branch(v)
            if v:
                out[b] = v
                work.append(b)
        reached = set()
        while work:
            b = work.pop()
            ob = out[b]
            for s in (succ1[b], succ2[b]):
                if s < 0:
                    continue
                old = inn[s]
                new = old | ob
                if new == old:
                    continue
                inn[s] = new
                reached.add(s)
                if through[s]:
                    v = loc[s] | new
                    if on_branch is not None and branchy[s]:
                        v = on_branch(v)
                    if v != out[s]:
                        out[s] = v
                        work.append(s)
        return {b: inn[b] for b in reached}

    # -- explanation -------------------------------------------------------------------
    def sources(self, cfg: CFG, hit: Hit, limit: int = 256) -> list[int]:
        """Instruction indices of the hazard sources that reach ``hit``, walking
        back along every path until the rule's expiry (at most ``limit``
        instructions), in address order."""
        if hit.sources:
            return list(hit.sources)
        i = self.rules.index(hit.rule)
        rule = hit.rule
        facts = cfg.facts
        found: set[int] = set()
        seen: set[tuple[int, int]] = set()
        b0 = cfg.block_at(hit.k)
        work = [(b0, hit.k - 1, hit.mask)]
        steps = 0
        preds = cfg.preds
        while work and steps < limit:
            b, k, mask = work.pop()
            start = int(cfg.block_start[b])
            while k >= start and mask:
                steps += 1
                f = facts[k]
                g = f.hzm[i][1] & mask
                if g:
                    found.add(k)
                    mask &= ~g
                if (f.hz >> (3 * i)) & 4:
                    mask = 0
                k -= 1
            if not mask:
                continue
            for p in preds[b]:
                pm = rule.before_branch(mask) if rule.before_branch is not None and cfg.branchy[p] else mask
                if (p, pm) not in seen:
                    seen.add((p, pm))
                    work.append((p, int(cfg.block_end[p]) - 1, pm))
        return sorted(found)
