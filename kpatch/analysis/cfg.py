"""Control flow of a unit of code: one or more functions laid out back to back.

:func:`build_cfg` splits the instructions into basic blocks by the one
control-flow table, :mod:`kpatch.analysis.flow` (what ends a block, what falls
through, what is a call):

* a block starts at each function entry, at every branch target and after
  every instruction whose kind ends a block (branches, ``s_endpgm*``,
  ``s_code_end``, ``s_setpc_b64``, PC changes kpatch does not model);
* SOPP branches (``s_branch``, ``s_cbranch_*``) go to
  ``address + 4 + simm16 * 4``; conditional ones also fall through;
* ``s_setpc_b64`` (a return or computed jump) ends the block with no known
  successor (listed in ``indirect``); ``s_swappc_b64`` / ``s_call_b64`` are
  calls: execution resumes after them, as LLVM's hazard recognizer assumes
  (listed in ``calls``); ``s_trap`` falls through (the trap handler may
  return); an instruction that changes the PC in a way kpatch does not model
  ends its block with no successor and is listed in ``unmodelled``;
* no edge crosses a function boundary: a branch whose target is outside its
  function, or not an instruction boundary, is listed in ``bad_targets``;
* ``jumps`` (address pairs, from :mod:`kpatch.analysis.codescan`) add the
  edges of bounded control flow: an ``s_setpc_b64`` to every address its
  register pair may hold (getpc targets, return addresses), an
  ``s_call_b64`` to its callee inside the same function.  Such a source
  ends its block; these edges are kept apart from ``succ1``/``succ2``
  (``extra_src``/``extra_dst`` block arrays, ``extra_succ`` per block).

Loop back edges are the retreating edges of a depth-first search from each
function's entry (:meth:`CFG.back_edges`).  Blocks are numpy arrays
(``block_start``/``block_end``, ``block_of`` per instruction) and each has at
most two successors (``succ1``/``succ2``, -1 for none), so building the
graph costs a few array operations, not Python work per instruction.
"""

from __future__ import annotations

import bisect
from functools import cached_property
from operator import attrgetter

import numpy as np

from kpatch.analysis.facts import FACTS, Facts, FactsView
from kpatch.analysis.flow import CALL, COND, ENDS_BLOCK, FALLS_THROUGH, INDIRECT, JUMP, UNMODELLED

_ADDRESS = attrgetter("address")
#: by flow kind (:mod:`kpatch.analysis.flow`): does it end a block, may it fall through
_ENDS_BLOCK = np.isin(np.arange(max(ENDS_BLOCK | FALLS_THROUGH) + 1), sorted(ENDS_BLOCK))
_FALLS_THROUGH = np.isin(np.arange(max(ENDS_BLOCK | FALLS_THROUGH) + 1), sorted(FALLS_THROUGH))


def _SIMM16(f: Facts) -> int:
    return f.simm16 or 0


def sopp_target(address: int, simm16: int) -> int:
    """``address + 4 + simm16 * 4`` with simm16 signed."""
    if simm16 & 0x8000:
        simm16 -= 0x10000
    return address + 4 + 4 * simm16


class CFG:
    """Basic blocks and edges; ``insts`` and ``facts`` (a
    :class:`~kpatch.analysis.facts.FactsView`) are indexed alike."""

    def __init__(self, insts: list, facts: FactsView, func_starts: list[int],
                 addresses: np.ndarray | None = None, jumps=()):
        self.insts = insts
        self.facts = facts
        self.n = n = len(insts)
        self.func_starts = list(func_starts)
        self.calls: list[int] = []  # instruction indices of s_swappc_b64 / s_call_b64
        self.indirect: list[int] = []  # instruction indices of s_setpc_b64
        self.unmodelled: list[int] = []  # instruction indices of PC changes kpatch does not follow
        self.bad_targets: list[tuple[int, int]] = []  # (branch index, target address)
        self.eids = facts.eids
        flows = FACTS.column("flow").take(self.eids) if n else np.zeros(0, dtype=np.int64)  # (take: faster than [])
        self.flows = flows
        leader = np.zeros(n + 1, dtype=bool)
        fs = np.array([s for s in self.func_starts if s < n], dtype=np.int64)
        leader[fs] = True
        func_end = np.zeros(n + 1, dtype=bool)  # instruction k is the last of its function
        func_end[fs[fs > 0] - 1] = True
        func_end[n - 1 if n else 0] = True
        special = np.flatnonzero(flows)
        tgt_of = None  # branch instruction index -> target instruction index (-1: none)
        if special.size:
            sf = flows[special]
            self.calls = special[sf == CALL].tolist()
            self.indirect = special[sf == INDIRECT].tolist()
            self.unmodelled = special[sf == UNMODELLED].tolist()
            leader[special[_ENDS_BLOCK[sf]] + 1] = True
            br = special[(sf == JUMP) | (sf == COND)]
            if br.size:
                if addresses is None:
                    addresses = np.fromiter(map(_ADDRESS, insts), dtype=np.int64, count=n)
                simm = FACTS.column("simm16", _SIMM16)[self.eids[br]]
                tgt = addresses[br] + 4 + 4 * np.where(simm & 0x8000, simm - 0x10000, simm)
                j = np.searchsorted(addresses, tgt)
                jc = np.minimum(j, n - 1)
                fsa = np.array(self.func_starts, dtype=np.int64)
                # the target must be an instruction of the branch's own function
                ok = ((j < n) & (addresses[jc] == tgt)
                      & (np.searchsorted(fsa, br, "right") == np.searchsorted(fsa, jc, "right")))
                self.bad_targets = list(zip(br[~ok].tolist(), tgt[~ok].tolist()))
                tgt_of = np.full(n, -1, dtype=np.int64)
                tgt_of[br[ok]] = jc[ok]
                leader[jc[ok]] = True
        extra: list[tuple[int, int]] = []  # (source, target) instruction indices
        if jumps and n:
            if addresses is None:
                addresses = np.fromiter(map(_ADDRESS, insts), dtype=np.int64, count=n)
            src_a = np.array([a for a, _ in jumps], dtype=np.int64)
            dst_a = np.array([b for _, b in jumps], dtype=np.int64)
            si = np.minimum(np.searchsorted(addresses, src_a), n - 1)
            di = np.minimum(np.searchsorted(addresses, dst_a), n - 1)
            fsa = np.array(self.func_starts, dtype=np.int64)
            ok = ((addresses[si] == src_a) & (addresses[di] == dst_a)  # inside one function only
                  & (np.searchsorted(fsa, si, "right") == np.searchsorted(fsa, di, "right")))
            extra = list(zip(si[ok].tolist(), di[ok].tolist()))
            partial = set(si[~ok].tolist())  # a source with a target elsewhere stays unresolved
            for a, b in extra:
                leader[a + 1] = True
                leader[b] = True
        leader = leader[:n]
        self.block_start = bs = np.flatnonzero(leader)
        nb = self.nblocks = len(bs)
        self.block_end = be = np.append(bs[1:], n).astype(np.int64)
        self.block_of = np.cumsum(leader) - 1
        last = be - 1
        lf = flows[last] if nb else flows[:0]
        falls = _FALLS_THROUGH[lf] & ~func_end[last]
        succ1 = np.where(falls, np.arange(nb) + 1, -1)
        succ2 = np.full(nb, -1, dtype=np.int64)
        #: does each block end in a branch (a bool array; ``branchy``: the same as a list)
        self.branchy_array = (lf == JUMP) | (lf == COND)
        self.branchy = self.branchy_array.tolist()
        if tgt_of is not None:
            t = tgt_of[last]
            has = t >= 0
            tb = np.where(has, self.block_of[np.maximum(t, 0)], -1)
            jump = lf == JUMP
            # s_branch: the target is the only successor
            succ1 = np.where(jump & has, tb, succ1)
            succ2 = np.where(~jump & has & (tb != succ1), tb, -1)
        self._succ = self.succ_arrays = (succ1.astype(np.int64), succ2.astype(np.int64))
        self.succ1 = succ1.tolist()
        self.succ2 = succ2.tolist()
        pairs = sorted({(int(self.block_of[a]), int(self.block_of[b])) for a, b in extra})
        self.extra_src = np.array([a for a, _ in pairs], dtype=np.int64)
        self.extra_dst = np.array([b for _, b in pairs], dtype=np.int64)
        self.resolved = {a for a, _ in extra} - (partial if jumps and n else set())  # instruction indices whose targets the extra edges give
        self.extra_succ: dict[int, list[int]] = {}
        for a, b in pairs:
            self.extra_succ.setdefault(a, []).append(b)

    # -- navigation ---------------------------------------------------------------
    def succs(self, b: int) -> list[int]:
        return [s for s in (self.succ1[b], self.succ2[b]) if s >= 0] + self.extra_succ.get(b, [])

    @cached_property
    def preds(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(self.nblocks)]
        for b, (s1, s2) in enumerate(zip(self.succ1, self.succ2)):
            if s1 >= 0:
                out[s1].append(b)
            if s2 >= 0:
                out[s2].append(b)
        for a, b in zip(self.extra_src.tolist(), self.extra_dst.tolist()):
            if a not in out[b]:
                out[b].append(a)
        return out

    def block_at(self, k: int) -> int:
        """The block holding instruction index ``k``."""
        return int(self.block_of[k])

    def span(self, b: int) -> tuple[int, int]:
        """Instruction indices ``start, end`` of block ``b``."""
        return int(self.block_start[b]), int(self.block_end[b])

    def function_of(self, k: int) -> int:
        """Index (into ``func_starts``) of the function holding instruction ``k``."""
        return bisect.bisect_right(self.func_starts, k) - 1

    def function_blocks(self, i: int) -> range:
        """Block indices of function ``i``."""
        a = self.func_starts[i]
        b = self.func_starts[i + 1] if i + 1 < len(self.func_starts) else self.n
        if a >= b:
            return range(0)
        return range(int(self.block_of[a]), int(self.block_of[b - 1]) + 1)

    def address(self, k: int) -> int:
        return self.insts[k].address

    def back_edges(self, i: int | None = None) -> set[tuple[int, int]]:
        """Loop back edges (block pairs): retreating edges of a depth-first
        search from each function entry (of function ``i`` only if given);
        blocks the entry does not reach are searched afterwards."""
        fns = range(len(self.func_starts)) if i is None else [i]
        colour = {}
        back: set[tuple[int, int]] = set()
        for f in fns:
            for root in self.function_blocks(f):
                if root in colour:
                    continue
                colour[root] = 1
                stack = [(root, self.succs(root), 0)]
                while stack:
                    b, succs, j = stack[-1]
                    if j < len(succs):
                        stack[-1] = (b, succs, j + 1)
                        s = succs[j]
                        c = colour.get(s, 0)
                        if c == 1:
                            back.add((b, s))
                        elif c == 0:
                            colour[s] = 1
                            stack.append((s, self.succs(s), 0))
                    else:
                        colour[b] = 2
                        stack.pop()
        return back

    def backward_edge_count(self, i: int) -> int:
        """Edges of function ``i`` that go to the same or an earlier block
        (equal to the loop back edges of the usual loop layouts; cheap)."""
        r = self.function_blocks(i)
        if not len(r):
            return 0
        idx = np.arange(r.start, r.stop)
        return int(sum(np.count_nonzero((s[r.start:r.stop] >= 0) & (s[r.start:r.stop] <= idx)) for s in self._succ)
                   + sum(1 for a, b in zip(self.extra_src.tolist(), self.extra_dst.tolist())
                         if r.start <= a < r.stop and b <= a))

    def ends_with_branch(self, b: int) -> bool:
        return self.branchy[b]


def build_cfg(insts: list, facts: FactsView, func_starts: list[int] | None = None,
              addresses: np.ndarray | None = None, jumps=()) -> CFG:
    """Blocks and edges of ``insts`` (functions starting at ``func_starts``
    instruction indices; default: one function; ``addresses``: theirs, if
    already known; ``jumps``: (source, target) address pairs of bounded
    computed jumps and calls inside a function)."""
    return CFG(insts, facts, func_starts if func_starts is not None else [0], addresses, jumps)
