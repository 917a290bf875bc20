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
rule it takes the indices of the instructions that check and gen (numpy
arrays) and the number of gens and kills before each position (prefix
counts), so "is there a gen after the last kill before this check, in this
block" is a few lookups, for every check at once; the states blocks pass on
are propagated level by level in numpy, the last few blocks one at a time,
and not at all when no check that sees its block's in-state can meet any of
their bits.
What does not change between the rounds of a lean rule is worked out once
(:class:`_RuleInput`) with the round without sites; a later round works
out again only what its sites change (the checks after a site in its block,
the site blocks' states), and a round whose block states are the last
round's reuses its propagation.

Hits are mitigation sites.  For a rule whose mitigation is inserted right
before the hit and expires the hazard (``lean``), a hit also kills, after
its check: the state after it is that of the mitigated program, as in
LLVM's GCNHazardRecognizer, which inserts the mitigation and goes on with
the hazard gone (one ``s_waitcnt_depctr`` before the first of four SGPR
writes covers all four).  Whether an instruction is a hit then depends on
the hits before it, across branches and loops: with ``F(S)`` = the hits
when the instructions ``S`` also kill, the engine iterates
``S0 = {}``, ``S(n+1) = F(S(n))``.  ``F`` is antitone, so the even terms grow
and the odd terms shrink until they settle; the result is the settled odd
term ``U``, with ``F(U)`` a subset of ``U``: mitigating ``U`` leaves no hit
unmitigated.  Usually ``F(U) = U`` (always in loop-free code, where it is
exactly what LLVM inserts); in loops a few sites may be redundant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from kpatch.analysis.cfg import CFG
from kpatch.analysis.facts import FACTS, Facts, FactsColumns


@dataclass(frozen=True)
class MaskRule:
    """One hazard as gen/kill/check on a ``width``-bit state.

    ``check``/``gen`` return masks of state bits; ``kill`` says whether the
    instruction expires the hazard (see ``lean`` for the hits themselves).  ``on_branch`` maps the state at the end
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
    #: the mitigation is inserted right before a hit and kills (expires the
    #: whole state): each hit is then a kill for what follows it
    lean: bool = False
    #: the same rule over per-encoding columns (optional): ``columns(c)``
    #: (``c``: a :class:`kpatch.analysis.facts.FactsColumns`) gives (check,
    #: gen, kill) of those encodings -- check and gen as one uint64 array
    #: per 64 bits of state, kill as a bool or 0/1 array; it must agree
    #: with ``check``/``gen``/``kill`` encoding by encoding
    columns: Callable | None = None


class RuleHits:
    """The hazardous instructions of one rule on one CFG.

    ``hits`` holds their indices (a sorted int64 array; ``ks``: the same as
    a list), ``sites`` the instructions whose (inserted) mitigation also
    kills (a sorted array; ``site_set``: the same as a set).  The state bits each one meets
    (:meth:`mask`) and the sources (:meth:`sources`) are worked out on
    demand: there can be thousands of hits, and their explanations are
    rarely all read."""

    def __init__(self, engine: "HazardEngine", cfg: CFG, i: int, hits: np.ndarray,
                 windows: tuple[np.ndarray, np.ndarray, np.ndarray], blocks: tuple[np.ndarray, np.ndarray],
                 G: np.ndarray, inn, sites: np.ndarray | None = None):
        self.engine = engine
        self.sites = _EMPTY if sites is None else sites
        self.cfg = cfg
        self.i = i
        self.rule = engine.rules[i]
        self.hits = hits
        self._ks = self._site_set = None  # (lists and sets made on first use)
        self._w = windows  # (hits, lo, hi): lo:hi into G are the gens in the hit's own block before it
        self._b = blocks  # (hits, block): the block whose in-state reaches the hit
        self._wd = self._bd = None  # the same as dicts (made on first use)
        self._G = G
        self._inn = inn

    @property
    def ks(self) -> list[int]:
        if self._ks is None:
            self._ks = self.hits.tolist()
        return self._ks

    @property
    def site_set(self) -> frozenset[int]:
        if self._site_set is None:
            self._site_set = frozenset(self.sites.tolist())
        return self._site_set

    @property
    def _windows(self) -> dict[int, tuple[int, int]]:
        if self._wd is None:
            k, lo, hi = self._w
            self._wd = dict(zip(k.tolist(), zip(lo.tolist(), hi.tolist())))
        return self._wd

    @property
    def _blocks(self) -> dict[int, int]:
        if self._bd is None:
            k, b = self._b
            self._bd = dict(zip(k.tolist(), b.tolist()))
        return self._bd

    def __len__(self) -> int:
        return self.hits.size

    def _check(self, k: int) -> int:
        return self.engine.compiled(self.cfg.facts[k])[1][self.i][0]

    def _local(self, k: int) -> list[tuple[int, int]]:
        w = self._windows.get(k)
        if w is None:
            return []
        chk = self._check(k)
        out = []
        for g in self._G[w[0]:w[1]].tolist():
            m = chk & self.engine.compiled(self.cfg.facts[g])[1][self.i][1]
            if m:
                out.append((g, m))
        return out

    def mask(self, k: int) -> int:
        """The state bits hit ``k`` meets (from its own block and its in-state)."""
        m = 0
        for _, x in self._local(k):
            m |= x
        b = self._blocks.get(k)
        if b is not None:
            state = sum(int(a[b]) << (64 * ch) for ch, a in enumerate(self._inn))
            m |= self._check(k) & state
        return m

    def sources(self, k: int, limit: int = 256) -> list[int]:
        """Indices of the gens that reach ``k``: those of its own block, else
        by walking back along every path (at most ``limit`` instructions)."""
        local = [g for g, _ in self._local(k)]
        if local:
            return local
        return self.engine.sources(self.cfg, self.i, k, self.mask(k), limit, self.site_set)


def _window_or(arr: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """OR of ``arr[lo[j]:hi[j]]`` for each j (windows non-empty, ``hi[j]``
    below ``len(arr)``: ``arr`` ends with an element no window holds, so that
    a window may end at the last real one; they may overlap: reduceat
    reduces each pair of consecutive bounds on its own).  In time, the
    smaller of the windows' total length and the span from the first one to
    the end of ``arr``."""
    if not len(lo):
        return arr[:0]
    lens = hi - lo
    total = int(lens.sum())
    if 2 * total < len(arr) - int(lo.min()):
        # few gens in all: the windows' elements gathered one after another and
        # reduced there (reduceat over ``arr`` would pass over every element
        # from the first window on, the gaps included)
        offs = np.cumsum(lens) - lens
        return np.bitwise_or.reduceat(arr[np.repeat(lo - offs, lens) + np.arange(total)], offs)
    bounds = np.empty(2 * len(lo), dtype=np.int64)
    bounds[0::2] = lo
    bounds[1::2] = hi
    return np.bitwise_or.reduceat(arr, bounds)[0::2]


_EMPTY = np.zeros(0, dtype=np.int64)


def _last_before(S: np.ndarray, P: np.ndarray) -> np.ndarray:
    """For each position of ``P``: the last element of ``S`` (sorted, not
    empty) strictly before it, else -1."""
    j = np.searchsorted(S, P) - 1
    return np.where(j >= 0, S[np.maximum(j, 0)], -1)


def _checks_after(C: np.ndarray, first: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Positions in ``C`` (sorted instruction indices) of the elements in
    ``first[j] < c < ends[j]`` for some j (disjoint, ascending ranges: the
    first site of each block with sites and the block's end), ascending."""
    lo = np.searchsorted(C, first, "right")
    n = np.maximum(np.searchsorted(C, ends) - lo, 0)
    total = int(n.sum())
    if not total:
        return _EMPTY
    # each range lo[j] .. lo[j] + n[j] - 1, written out at once
    return np.repeat(lo - (np.cumsum(n) - n), n) + np.arange(total)


def _prefix_count(a: np.ndarray) -> np.ndarray:
    """``out[p]`` = the number of true values of ``a`` before index ``p``
    (``p`` = 0..len(a))."""
    out = np.empty(len(a) + 1, dtype=np.int64)
    out[0] = 0
    np.cumsum(a, out=out[1:])
    return out


class _RuleInput:
    """What every round of one rule on one CFG reads (the rounds differ only
    in the sites that also kill): the checks ``C`` and gens ``G``
    (instruction indices, sorted), ``kills`` (a bool per instruction), the
    check masks of ``C`` (``chk_c``) and gen masks of ``G`` (``gen_g``, with
    one element more), one uint64 array per 64 bits of state; per check its
    block ``bc`` and that block's first instruction ``bs``; the last kill strictly before each
    check (``pk``) and before each block's end (``lk``), -1 for none; and
    ``cG``, the number of gens before each instruction index 0..n, so that
    the gens ``G[cG[a]:cG[b]]`` are those in ``a:b`` (``ghi = cG[C]``,
    ``ghi_b = cG[block_end]``).  Prefix counts over the instructions, not
    binary searches per check."""

    __slots__ = ("cfg", "i", "rule", "C", "G", "kills", "chk_c", "gen_g", "bc", "bs", "pk", "lk", "cG", "ghi",
                 "ghi_b", "last_state", "base", "engine_or_linear")

    def __init__(self, engine: "HazardEngine", cols: list[np.ndarray], cfg: CFG, roles: np.ndarray, i: int):
        self.cfg, self.i = cfg, i
        self.rule = rule = engine.rules[i]
        self.engine_or_linear = engine._or_linear[i]
        n = cfg.n
        sh = 3 * i
        isc = (roles & (1 << sh)) != 0  # (numpy finds the indices of a bool array much faster)
        isg = (roles & (2 << sh)) != 0
        self.kills = kills = (roles & (4 << sh)) != 0
        self.C = C = np.flatnonzero(isc)
        self.G = G = np.flatnonzero(isg)
        # (gathers by ndarray.take: several times faster than indexing by an array, for the same result)
        eids = cfg.eids
        ce, ge = eids.take(C), eids.take(G)
        key = engine._index
        self.chk_c = [cols[key[(engine.key, i, 0, ch)]].take(ce) for ch in _chunks(rule.width)]
        # (each with an element after the last gen, which no window holds: _window_or's
        # bounds may then end at len(G); one copy per rule input, not one per window OR)
        ge = np.append(ge, 0)
        self.gen_g = [cols[key[(engine.key, i, 1, ch)]].take(ge) for ch in _chunks(rule.width)]
        self.bc = bc = cfg.block_of.take(C)
        self.bs = cfg.block_start.take(bc)
        bend = cfg.block_end
        # the last kill before instruction p is K[(kills before p) - 1]
        K = np.empty(int(np.count_nonzero(kills)) + 1, dtype=np.int64)
        K[0] = -1
        K[1:] = np.flatnonzero(kills)
        ck = _prefix_count(kills)
        self.pk, self.lk = K.take(ck.take(C)), K.take(ck.take(bend))
        self.cG = cG = _prefix_count(isg)
        self.ghi, self.ghi_b = cG.take(C), cG.take(bend)
        #: the last round's block states: (first gen counted per block, whether it kills, the in-states)
        self.last_state = None
        #: the round without sites (:meth:`HazardEngine._base`), once worked out
        self.base = None


def _or_linear(f: Callable[[int], int], width: int) -> bool:
    """Does ``f`` map 0 to 0 and ``a | b`` to ``f(a) | f(b)`` for every pair
    of ``width``-bit states?  Tried on all of them: only for narrow states
    (at most 8 bits; wider ones: False)."""
    if width > 8:
        return False
    vals = range(1 << width)
    return f(0) == 0 and all(f(a | b) == f(a) | f(b) for a in vals for b in vals)


_M64 = (1 << 64) - 1
_SMALL_FRONTIER = 48  # blocks: below this, propagation goes on one block at a time


def _chunks(width: int) -> range:
    return range((width + 63) // 64)


class HazardEngine:
    """Runs a list of :class:`MaskRule` (at most 20) on control-flow graphs.

    Each encoding's role is compiled once: three bits per rule (check, gen,
    kill) and per-rule ``(check mask, gen mask)``, kept on the facts
    (``facts.hz``, keyed by engine) and in per-encoding numpy columns."""

    def __init__(self, rules: list[MaskRule]):
        if len(rules) > 20:
            raise ValueError("at most 20 rules per engine")
        self.rules = rules
        self.key = f"hazard-engine-{id(self)}"
        #: the per-encoding columns: roles, then (rule, part, 64-bit chunk) of each mask
        self._keys = [(self.key, "roles")] + [(self.key, i, part, ch) for i, r in enumerate(rules)
                                              for part in (0, 1) for ch in _chunks(r.width)]
        self._row_key = (self.key, "row")
        self._index = {k: j for j, k in enumerate(self._keys)}
        #: per rule: does its on_branch distribute over OR and keep 0 (:func:`_or_linear`)
        self._or_linear = [r.on_branch is not None and _or_linear(r.on_branch, r.width) for r in rules]
        #: the narrowest type that holds the roles (3 bits per rule): array work on it is faster
        self._roles_dtype = np.uint16 if len(rules) <= 5 else np.uint32 if len(rules) <= 10 else np.uint64
        self._narrow: tuple[np.ndarray, np.ndarray] | None = None  # (the column, narrowed)

    def compiled(self, f: Facts) -> tuple[int, tuple[tuple[int, int], ...]]:
        """(role bits, per-rule (check, gen) masks) of one encoding."""
        hz = f.hz
        if hz is None:
            hz = f.hz = {}
        c = hz.get(self.key)
        if c is None:
            roles = 0
            masks = []
            for i, r in enumerate(self.rules):
                fm = (1 << r.width) - 1
                ck = r.check(f) & fm
                g = r.gen(f) & fm
                masks.append((ck, g))
                roles |= (bool(ck) | bool(g) << 1 | bool(r.kill(f)) << 2) << (3 * i)
            c = hz[self.key] = (roles, tuple(masks))
        return c

    def _row(self, f: Facts) -> tuple[int, ...]:
        """One encoding's values of every column (see ``_keys``), kept with
        its compiled roles."""
        roles, masks = self.compiled(f)
        row = f.hz.get(self._row_key)
        if row is None:
            row = f.hz[self._row_key] = (roles, *[(masks[i][part] >> (64 * ch)) & _M64
                                                  for _, i, part, ch in self._keys[1:]])
        return row

    def _rows_bulk(self, lo: int, hi: int) -> np.ndarray:
        """:meth:`_row` of the encodings with eids ``lo..hi-1``, all at once
        from the rules' column forms (``MaskRule.columns``)."""
        c = FactsColumns(lo, hi)
        n = hi - lo
        roles = np.zeros(n, dtype=np.uint64)
        parts: dict[tuple[int, int, int], np.ndarray] = {}
        for i, r in enumerate(self.rules):
            ck, g, kill = r.columns(c)
            fm = (1 << r.width) - 1
            any_ck = np.zeros(n, dtype=bool)
            any_g = np.zeros(n, dtype=bool)
            for ch in _chunks(r.width):
                m = np.uint64((fm >> (64 * ch)) & _M64)
                parts[(i, 0, ch)] = a = np.asarray(ck[ch], dtype=np.uint64) & m
                parts[(i, 1, ch)] = b = np.asarray(g[ch], dtype=np.uint64) & m
                any_ck |= a != 0
                any_g |= b != 0
            bits = (any_ck.astype(np.uint64) | (any_g.astype(np.uint64) << np.uint64(1))
                    | (np.asarray(kill, dtype=bool).astype(np.uint64) << np.uint64(2)))
            roles |= bits << np.uint64(3 * i)
        out = np.empty((n, len(self._keys)), dtype=np.uint64)
        out[:, 0] = roles
        for j, (_, i, part, ch) in enumerate(self._keys[1:], 1):
            out[:, j] = parts[(i, part, ch)]
        return out

    def _columns(self) -> list[np.ndarray]:
        """Every column (see ``_keys``), extended to every encoding known."""
        bulk = self._rows_bulk if all(r.columns is not None for r in self.rules) else None
        return FACTS.columns_of(self._keys, self._row, bulk=bulk)

    def _narrow_roles(self, roles: np.ndarray) -> np.ndarray:
        """The roles column in ``_roles_dtype``, kept while the column is the
        same array (the cache makes a new one when encodings are added): a
        graph's roles are gathered from it directly, not gathered wide and
        narrowed."""
        got = self._narrow
        if got is None or got[0] is not roles:
            got = self._narrow = (roles, roles.astype(self._roles_dtype))
        return got[1]

    def run(self, cfg: CFG) -> list[RuleHits]:
        """The hazardous instructions of ``cfg``, per rule (rules without
        hits are left out).  A rule none of whose checks or none of whose
        gens occurs in ``cfg`` has none: it is skipped before any other
        array work (one OR over the roles tells which roles occur)."""
        if not cfg.n:
            return []
        cols = self._columns()
        roles = self._narrow_roles(cols[0]).take(cfg.eids)
        present = int(np.bitwise_or.reduce(roles))
        out = []
        for i, rule in enumerate(self.rules):
            if (present >> (3 * i)) & 3 != 3:
                continue
            r = self._run_rule(_RuleInput(self, cols, cfg, roles, i))
            if r is not None:
                out.append(r)
        return out

    #: iterations of a lean rule before settling for the last odd term (sound, maybe not lean)
    LEAN_ROUNDS = 64

    def _run_rule(self, ri: "_RuleInput") -> RuleHits | None:
        rule = ri.rule
        first = self._hits(ri, _EMPTY)
        if not rule.lean or first is None or ri.kills[first.hits].all():
            return first  # (hits that already kill change nothing when counted as kills: a fixpoint)
        # S(n+1) = F(S(n)) from S0 = {} (see the module docstring); runs[n] has
        # kills at seq[n] and hits seq[n + 1] (sets as sorted arrays: equal sets are equal arrays)
        seq: list[np.ndarray] = [_EMPTY, first.hits]
        runs = [first]
        same = np.array_equal
        while len(runs) < self.LEAN_ROUNDS:
            if same(seq[-1], seq[-2]):  # fixpoint
                return runs[-1]
            if len(seq) >= 3 and same(seq[-1], seq[-3]):  # settled on two sets: the larger is sound
                return runs[-1] if seq[-1].size >= seq[-2].size else runs[-2]
            r = self._hits(ri, seq[-1])
            runs.append(r)
            seq.append(r.hits if r is not None else _EMPTY)
        return runs[-1] if len(seq) % 2 == 0 else runs[-2]  # the last odd term

    def _hits(self, ri: "_RuleInput", sites: np.ndarray) -> RuleHits | None:
        """The hits of rule ``ri.i`` when its kills are ``ri.kills`` and the
        instructions ``sites`` (other hits' mitigations; a sorted int64 array).  With sites, only
        what they change is worked out again (:meth:`_with_sites`); the rest
        is the round without sites (:meth:`_base`)."""
        cfg = ri.cfg
        C = ri.C
        glo, whit, dep, glo_b, has_kill = self._base(ri) if not sites.size else self._with_sites(ri, sites)

        # -- hits from gens in the check's own block ---------------------------------
        w_sel = np.flatnonzero(whit)
        w_k, w_lo, w_hi = C[w_sel], glo[w_sel], ri.ghi[w_sel]

        # -- the state each block passes on ------------------------------------------
        b_k = b_b = _EMPTY
        inn = None
        src = np.flatnonzero(ri.ghi_b > glo_b)
        dep = np.flatnonzero(dep)  # (checks with no kill before them in their block see the in-state)
        if src.size and dep.size:
            last = ri.last_state
            if last is not None and np.array_equal(last[0], glo_b) and np.array_equal(last[1], has_kill):
                inn = last[2]  # the blocks pass on what they did in the last round (as they usually do)
            else:
                local = []
                for gm in ri.gen_g:
                    a = np.zeros(cfg.nblocks, dtype=np.uint64)
                    a[src] = _window_or(gm, glo_b[src], ri.ghi_b[src])
                    local.append(a)
                if self._may_meet(ri, local, src, dep):
                    inn = self._propagate(cfg, ri.rule, local, ~has_kill)
                    ri.last_state = (glo_b, has_kill, inn)
            if inn is not None:
                db = ri.bc.take(dep)
                hit = np.zeros(dep.size, dtype=bool)
                for ch in range(len(inn)):
                    hit |= (inn[ch].take(db) & ri.chk_c[ch].take(dep)) != 0
                sel = np.flatnonzero(hit)
                b_sel = dep[sel]
                b_k, b_b = C[b_sel], db[sel]
        if not w_k.size and not b_k.size:
            return None
        if w_k.size and b_k.size:  # (both are checks: marked among them, not merged by a sort)
            hit = whit.copy()
            hit[b_sel] = True
            ks = C[hit]
        else:
            ks = w_k if w_k.size else b_k
        return RuleHits(self, cfg, ri.i, ks, (w_k, w_lo, w_hi), (b_k, b_b), ri.G, inn, sites)

    @staticmethod
    def _may_meet(ri: "_RuleInput", local: list[np.ndarray], src: np.ndarray, dep: np.ndarray) -> bool:
        """Can a check ``C[dep]`` meet a bit of what blocks ``src`` pass on
        (``local``)?  Every in-state is an OR of those (blocks pass on their
        own state, OR their in-state), and of what ``on_branch`` makes of such
        ORs: when ``on_branch`` distributes over OR and keeps 0
        (:func:`_or_linear`), those bits are the closure of the ORed ones
        under it.  If none is a bit any of the checks checks, none is hit
        and the propagation is not needed (a quarter of them on real code)."""
        bits = 0
        for ch, a in enumerate(local):
            bits |= int(np.bitwise_or.reduce(a[src])) << (64 * ch)
        rule = ri.rule
        if rule.on_branch is not None:  # and whatever branches make of them
            if not ri.engine_or_linear:
                return True  # (it may make any bits)
            while (more := bits | rule.on_branch(bits)) != bits:
                bits = more
        return any((bits >> (64 * ch)) & int(np.bitwise_or.reduce(c[dep])) for ch, c in enumerate(ri.chk_c))

    @staticmethod
    def _window_hits(ri: "_RuleInput", pos: np.ndarray, lo: np.ndarray) -> np.ndarray:
        """For the checks ``C[pos]`` and the first gen counted for each
        (``lo``, into ``G``): does a gen of the window ``G[lo:ghi]`` set a bit
        the check checks?  (A bool per check; the windows must not be empty.)"""
        hi = ri.ghi.take(pos)
        hit = np.zeros(pos.size, dtype=bool)
        for ch, gm in enumerate(ri.gen_g):
            hit |= (_window_or(gm, lo, hi) & ri.chk_c[ch].take(pos)) != 0
        return hit

    def _base(self, ri: "_RuleInput") -> tuple:
        """The round without sites, per check (positions in ``C``): the first
        gen counted (``glo``: the gens after the last kill in the check's
        block before it are ``G[glo:ghi]``; a kill comes before the same
        instruction's gen, so the window starts at the kill itself), whether
        those gens hit it (``whit``), whether no kill precedes it in its block
        (``dep``: it sees its block's in-state); per block, the first gen
        counted towards the state it passes on and whether it kills.  Worked
        out once per rule input."""
        if ri.base is None:
            cG, bstart = ri.cG, ri.cfg.block_start
            glo = cG.take(np.maximum(ri.pk, ri.bs))
            whit = np.zeros(ri.C.size, dtype=bool)
            cand = np.flatnonzero(ri.ghi > glo)
            if cand.size:
                whit[cand[self._window_hits(ri, cand, glo[cand])]] = True
            has_kill = ri.lk >= bstart
            ri.base = (glo, whit, ri.pk < ri.bs, cG.take(np.where(has_kill, ri.lk, bstart)), has_kill)
        return ri.base

    def _with_sites(self, ri: "_RuleInput", S: np.ndarray) -> tuple:
        """:meth:`_base` when the instructions ``S`` (sorted, not empty) kill too.  A site
        changes only the checks after it in its own block (their last kill
        is the site if it is later; they no longer see the in-state) and
        the state its block passes on (it kills); elsewhere the last site
        before a check or a block's end lies in an earlier block, before
        the block's first instruction, where it changes nothing."""
        cfg = ri.cfg
        glo0, whit0, dep0, glo_b0, has_kill0 = self._base(ri)
        sb = cfg.block_of[S]
        first = np.empty(S.size, dtype=bool)
        first[0] = True
        np.not_equal(sb[1:], sb[:-1], out=first[1:])
        last = np.empty(S.size, dtype=bool)
        last[-1] = True
        last[:-1] = first[1:]
        ub = sb[first]  # the blocks with sites, each once
        # the state the site blocks pass on: their last kill is at least their last site
        glo_b, has_kill = glo_b0.copy(), has_kill0.copy()
        glo_b[ub] = ri.cG[np.maximum(ri.lk[ub], S[last])]
        has_kill[ub] = True
        glo, whit, dep = glo0, whit0, dep0
        A = _checks_after(ri.C, S[first], cfg.block_end[ub])
        if A.size:
            glo, whit, dep = glo0.copy(), whit0.copy(), dep0.copy()
            # (the last site before each lies in its block: the window starts there or later)
            lo = ri.cG[np.maximum(ri.pk[A], _last_before(S, ri.C[A]))]
            glo[A] = lo
            dep[A] = False
            open_ = ri.ghi[A] > lo
            hit = np.zeros(A.size, dtype=bool)
            if open_.any():
                hit[open_] = self._window_hits(ri, A[open_], lo[open_])
            whit[A] = hit
        return glo, whit, dep, glo_b, has_kill

    @staticmethod
    def _propagate(cfg: CFG, rule: MaskRule, local: list[np.ndarray], through: np.ndarray):
        """In-states of every block at the fixpoint (one uint64 array per 64
        bits of state), or None if no state leaves any block.  Runs level by
        level: each round pushes the blocks whose out-state changed to their
        successors, all at once."""
        S1, S2 = cfg.succ_arrays
        branchy = cfg.branchy_array
        on_branch = rule.on_branch
        nch = len(local)

        def transform(vals: list[np.ndarray], blocks: np.ndarray) -> list[np.ndarray]:
            if on_branch is None:
                return vals
            br = branchy[blocks]
            return [np.where(br, on_branch(v), v).astype(np.uint64) for v in vals]

        allb = np.arange(cfg.nblocks)
        out = transform([a.copy() for a in local], allb)
        live = np.zeros(cfg.nblocks, dtype=bool)
        for a in out:
            live |= a != 0
        frontier = np.flatnonzero(live)
        if not frontier.size:
            return None
        inn = [np.zeros(cfg.nblocks, dtype=np.uint64) for _ in range(nch)]
        stamp = np.empty(cfg.nblocks, dtype=np.int64)
        while frontier.size:
            if nch == 1 and frontier.size < _SMALL_FRONTIER:  # a few blocks left: one by one is cheaper
                HazardEngine._propagate_worklist(cfg, rule, local, through, out, inn, frontier.tolist())
                break
            touched = []
            for S in (S1, S2, None):
                if S is None:  # bounded computed jumps (few): edges kept apart
                    if not cfg.extra_src.size:
                        continue
                    ok = np.isin(cfg.extra_src, frontier)
                    succ, src = cfg.extra_dst[ok], cfg.extra_src[ok]
                else:
                    succ = S.take(frontier)
                    ok = succ >= 0
                    succ, src = succ[ok], frontier[ok]
                if succ.size:
                    # a plain OR for one of each block's places, ufunc.at (slow) for the others
                    at = np.arange(succ.size)
                    stamp[succ] = at
                    once = stamp[succ] == at
                    if once.all():
                        for ch in range(nch):
                            inn[ch][succ] |= out[ch].take(src)
                    else:
                        again = ~once
                        s1, r1, s2, r2 = succ[once], src[once], succ[again], src[again]
                        for ch in range(nch):
                            inn[ch][s1] |= out[ch][r1]
                            np.bitwise_or.at(inn[ch], s2, out[ch][r2])
                    touched.append(succ)
            if not touched:
                break
            if sum(map(len, touched)) * 8 < cfg.nblocks:  # (few: each kept once, in no order, without a sort)
                cand = np.concatenate(touched)
                cand = cand[through[cand]]
                at = np.arange(cand.size)
                stamp[cand] = at  # (of equal blocks, one position is kept)
                cand = cand[stamp[cand] == at]
            else:  # many: mark them (a sort would cost more)
                mark = np.zeros(cfg.nblocks, dtype=bool)
                for t in touched:
                    mark[t] = True
                cand = np.flatnonzero(mark & through)
            if not cand.size:
                break
            new = transform([local[ch].take(cand) | inn[ch].take(cand) for ch in range(nch)], cand)
            changed = np.zeros(cand.size, dtype=bool)
            for ch in range(nch):
                changed |= new[ch] != out[ch].take(cand)
            frontier = cand[changed]
            for ch in range(nch):
                out[ch][frontier] = new[ch][changed]
        return inn

    @staticmethod
    def _propagate_worklist(cfg: CFG, rule: MaskRule, local: list[np.ndarray], through: np.ndarray,
                            out: list[np.ndarray], inn: list[np.ndarray], work: list[int]) -> None:
        """Finish :meth:`_propagate` block by block (Python ints), in place."""
        nch = len(local)

        def whole(arrs: list[np.ndarray]) -> list[int]:
            vals = [a.tolist() for a in arrs]
            if nch == 1:
                return vals[0]
            return [sum(int(v[b]) << (64 * ch) for ch, v in enumerate(vals)) for b in range(len(vals[0]))]

        o, i_, loc = whole(out), whole(inn), whole(local)
        thr = through.tolist()
        branchy = cfg.branchy
        on_branch = rule.on_branch
        succ1, succ2 = cfg.succ1, cfg.succ2
        extra = cfg.extra_succ
        changed: set[int] = set()
        while work:
            b = work.pop()
            ob = o[b]
            for s in (succ1[b], succ2[b], *extra.get(b, ())):
                if s < 0:
                    continue
                new = i_[s] | ob
                if new == i_[s]:
                    continue
                i_[s] = new
                changed.add(s)
                if thr[s]:
                    v = loc[s] | new
                    if on_branch is not None and branchy[s]:
                        v = on_branch(v)
                    if v != o[s]:
                        o[s] = v
                        work.append(s)
        if changed:  # (write back only the in-states that changed)
            idx = sorted(changed)
            vals = [i_[b] for b in idx]
            for ch in range(nch):
                inn[ch][idx] = np.array([(v >> (64 * ch)) & _M64 for v in vals], dtype=np.uint64)

    # -- explanation -------------------------------------------------------------------
    def sources(self, cfg: CFG, i: int, k: int, mask: int, limit: int = 256,
                sites: frozenset[int] = frozenset()) -> list[int]:
        """Instruction indices of the sources of rule ``i``'s state bits ``mask``
        that reach instruction ``k``, walking back along every path until the
        rule's expiry or a mitigated hit in ``sites`` (at most ``limit``
        instructions), in address order."""
        rule = self.rules[i]
        facts = cfg.facts
        found: set[int] = set()
        seen: set[tuple[int, int]] = set()
        b0 = cfg.block_at(k)
        work = [(b0, k - 1, mask)]
        steps = 0
        preds = cfg.preds
        while work and steps < limit:
            b, k, mask = work.pop()
            start = int(cfg.block_start[b])
            while k >= start and mask:
                steps += 1
                roles, masks = self.compiled(facts[k])
                g = masks[i][1] & mask
                if g:
                    found.add(k)
                    mask &= ~g
                if (roles >> (3 * i)) & 4 or k in sites:
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
