"""Align two instruction streams: which instructions are equal, changed,
inserted or removed between an original and a patched kernel.

The alignment works on *keys*: an instruction's llvm-objdump text, except
that a branch's offset is replaced by a label (the ordinal of its target
among the stream's branch targets), so a branch whose offset changed only
because code was inserted inside its span still lines up with itself.

* :func:`align_keys` -- a shortest edit script between two key sequences
  (Myers' O((N+M)D) algorithm after trimming the common ends; when the
  script would be too long to find quickly, the streams are cut at keys that
  occur once on each side -- patience anchors -- and the pieces aligned
  separately; a piece with no anchor becomes one replaced block).
* :func:`align` -- instructions in, :class:`Op` list out: replaced blocks
  are refined into changed pairs (same mnemonic first, then by position)
  and inserted / removed instructions.
* :func:`field_changes` -- what differs between two instructions, field by
  field (``glc 1->0``, ``simm16 0x3f->0x40``).

Nothing here knows how the patched stream was made: it is the independent
check the rewriter is tested against.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Hashable, Sequence

EQUAL, CHANGED, INSERTED, REMOVED = "equal", "changed", "inserted", "removed"
OP_KINDS = (EQUAL, CHANGED, INSERTED, REMOVED)

#: Myers work (diagonal steps) allowed per piece, as a multiple of its length.
_BUDGET_PER_ITEM = 64
_BUDGET_MIN = 200_000
#: Largest replaced block refined by an exact LCS over mnemonics (cells).
_REFINE_CELLS = 250_000


@dataclass(frozen=True)
class FieldChange:
    """One difference between two instructions: ``name old->new``."""

    name: str
    old: object
    new: object

    def text(self) -> str:
        a, b = fmt_value(self.old), fmt_value(self.new)
        sep = " -> " if " " in a or " " in b else "->"
        return f"{self.name} {a}{sep}{b}"


@dataclass(slots=True)
class Op:
    """One step of an alignment.

    ``old``/``new`` are indices into the two input lists (None for the side
    an inserted / removed instruction does not have).  ``changes`` lists the
    field differences of a changed pair (an empty tuple otherwise: one per
    instruction of a whole library is held at once).
    """

    kind: str
    old: int | None
    new: int | None
    changes: Sequence[FieldChange] = ()

    def __repr__(self) -> str:
        return f"Op({self.kind}, {self.old}, {self.new})"


def fmt_value(v: object) -> str:
    """Values as a diff shows them: small integers in decimal, others in hex."""
    if v is None:
        return "(none)"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return str(v) if -10 < v < 10 else (f"-{-v:#x}" if v < 0 else f"{v:#x}")
    return str(v)


# -- the generic sequence alignment --------------------------------------------------------

def _myers(a: Sequence[int], b: Sequence[int], budget: int) -> list[tuple[int, int]] | None:
    """Matched (i, j) pairs of a longest common subsequence found by Myers'
    greedy shortest-edit-script search, or None when it needs more than
    ``budget`` diagonal steps."""
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return []
    trace: list[dict[int, int]] = []
    v: dict[int, int] = {1: 0}
    work = 0
    for d in range(n + m + 1):
        nv: dict[int, int] = {}
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[k - 1] < v[k + 1]):
                x = v[k + 1]
            else:
                x = v[k - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            nv[k] = x
            if x >= n and y >= m:
                trace.append(nv)
                return _backtrack(trace, a, b, n, m)
        trace.append(nv)
        v = nv
        work += d + 1
        if work > budget:
            return None
    return None  # pragma: no cover - the loop always finds the end


def _backtrack(trace: list[dict[int, int]], a, b, n: int, m: int) -> list[tuple[int, int]]:
    pairs: list[tuple[int, int]] = []
    x, y = n, m
    for d in range(len(trace) - 1, 0, -1):
        prev = trace[d - 1]
        k = x - y
        if k == -d or (k != d and prev.get(k - 1, -1) < prev.get(k + 1, -1)):
            pk = k + 1
        else:
            pk = k - 1
        px = prev[pk]
        py = px - pk
        # the snake after the edit from (px, py)
        sx = px if pk == k + 1 else px + 1
        while x > sx:
            x -= 1
            y -= 1
            pairs.append((x, y))
        x, y = px, py
    while x > 0 and y > 0:  # d = 0: the initial snake
        x -= 1
        y -= 1
        pairs.append((x, y))
    pairs.reverse()
    return pairs


def _patience_anchors(a: Sequence[int], b: Sequence[int]) -> list[tuple[int, int]]:
    """Pairs of keys that occur exactly once in ``a`` and once in ``b``,
    the longest run of them in the same order on both sides."""
    count_a: dict[int, int] = {}
    for k in a:
        count_a[k] = count_a.get(k, 0) + 1
    pos_b: dict[int, int] = {}
    count_b: dict[int, int] = {}
    for j, k in enumerate(b):
        count_b[k] = count_b.get(k, 0) + 1
        pos_b[k] = j
    cand = [(i, pos_b[k]) for i, k in enumerate(a) if count_a[k] == 1 and count_b.get(k) == 1]
    # longest increasing subsequence of the b positions (patience sorting)
    tails: list[int] = []
    tail_idx: list[int] = []
    back: list[int] = [-1] * len(cand)
    for ci, (_, j) in enumerate(cand):
        p = bisect_left(tails, j)
        if p == len(tails):
            tails.append(j)
            tail_idx.append(ci)
        else:
            tails[p] = j
            tail_idx[p] = ci
        back[ci] = tail_idx[p - 1] if p > 0 else -1
    out: list[tuple[int, int]] = []
    ci = tail_idx[-1] if tail_idx else -1
    while ci >= 0:
        out.append(cand[ci])
        ci = back[ci]
    out.reverse()
    return out


def _match(a: Sequence[int], b: Sequence[int], ao: int, bo: int, out: list[tuple[int, int]]) -> None:
    """Append matched pairs (offset by ao/bo) of a[...] and b[...] to ``out``."""
    n, m = len(a), len(b)
    s = 0
    while s < n and s < m and a[s] == b[s]:
        out.append((ao + s, bo + s))
        s += 1
    e = 0
    while e < n - s and e < m - s and a[n - 1 - e] == b[m - 1 - e]:
        e += 1
    tail = [(ao + n - e + t, bo + m - e + t) for t in range(e)]
    ma, mb = a[s:n - e], b[s:m - e]
    if ma and mb:
        pairs = _myers(ma, mb, max(_BUDGET_MIN, _BUDGET_PER_ITEM * (len(ma) + len(mb))))
        if pairs is not None:
            out.extend((ao + s + i, bo + s + j) for i, j in pairs)
        else:
            anchors = _patience_anchors(ma, mb)
            pi = pj = 0
            for i, j in anchors:
                _match(ma[pi:i], mb[pj:j], ao + s + pi, bo + s + pj, out)
                out.append((ao + s + i, bo + s + j))
                pi, pj = i + 1, j + 1
            if anchors:
                _match(ma[pi:], mb[pj:], ao + s + pi, bo + s + pj, out)
            # no anchor: nothing matched; the piece is one replaced block
    out.extend(tail)


def _intern(a: Sequence[Hashable], b: Sequence[Hashable]) -> tuple[list[int], list[int]]:
    ids: dict[Hashable, int] = {}
    ia = [ids.setdefault(k, len(ids)) for k in a]
    ib = [ids.setdefault(k, len(ids)) for k in b]
    return ia, ib


def matching_pairs(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[tuple[int, int]]:
    """Index pairs (i, j), increasing in both, with ``a[i] == b[j]``: a longest
    common subsequence when it can be found within the work budget, else
    a common subsequence built around unique anchors."""
    ia, ib = _intern(a, b)
    out: list[tuple[int, int]] = []
    _match(ia, ib, 0, 0, out)
    return out


def align_keys(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[Op]:
    """Equal / inserted / removed steps turning key list ``a`` into ``b``.

    Between two equal steps, removed steps come before inserted ones.
    """
    ops: list[Op] = []
    pi = pj = 0
    for i, j in matching_pairs(a, b) + [(len(a), len(b))]:
        ops.extend(Op(REMOVED, x, None) for x in range(pi, i))
        ops.extend(Op(INSERTED, None, y) for y in range(pj, j))
        if i < len(a):
            ops.append(Op(EQUAL, i, j))
        pi, pj = i + 1, j + 1
    return ops


# -- instructions ---------------------------------------------------------------------------

def _branch_target(inst) -> int | None:
    try:
        return inst.branch_target
    except (KeyError, AttributeError):  # pragma: no cover - a decoded branch always has simm16
        return None


def instruction_keys(insts: Sequence) -> list[tuple]:
    """One alignment key per instruction.

    A branch (SOPP branch or ``s_call_b64``) is keyed by its mnemonic, its
    other fields and ``L<n>``, the rank of its target among the distinct
    branch targets inside the stream (``out`` when the target lies outside
    it); every other instruction by its text.
    """
    lo = insts[0].address if insts else 0
    hi = insts[-1].address + insts[-1].size if insts else 0
    targets = sorted({t for t in (_branch_target(i) for i in insts) if t is not None and lo <= t < hi})
    rank = {t: n for n, t in enumerate(targets)}
    keys: list[tuple] = []
    for i in insts:
        t = _branch_target(i)
        if t is None:
            keys.append(("i", i.text()))
        else:
            fields = tuple(sorted((k, v) for k, v in i.fields.items() if k != "simm16"))
            keys.append(("b", i.mnemonic, fields, f"L{rank[t]}" if t in rank else "out"))
    return keys


def field_changes(old, new) -> list[FieldChange]:
    """Differences between two decoded instructions, most telling first:
    mnemonic, format, base-encoding fields, SDWA/DPP fields, literal, and
    ``bytes`` for anything else (MIMG NSA dwords); ``same bytes, decoded
    as`` when the bytes are the same but decode differently (another
    target's table: opcode reuse between gfx1030 and gfx1010)."""
    out: list[FieldChange] = []
    if old.mnemonic != new.mnemonic:
        out.append(FieldChange("mnemonic", old.mnemonic, new.mnemonic))
    if old.format != new.format:
        out.append(FieldChange("format", old.format, new.format))
    else:
        of, nf = old.fields, new.fields
        for name in list(of) + [n for n in nf if n not in of]:
            if of.get(name) != nf.get(name):
                out.append(FieldChange(name, of.get(name), nf.get(name)))
        oe, ne = old.extra or {}, new.extra or {}
        for name in list(oe) + [n for n in ne if n not in oe]:
            if oe.get(name) != ne.get(name):
                out.append(FieldChange(f"{old.encoding or new.encoding}.{name}", oe.get(name), ne.get(name)))
        if old.literal != new.literal:
            out.append(FieldChange("literal", old.literal, new.literal))
    if old.raw == new.raw:
        if old.text() != new.text():
            out.append(FieldChange("same bytes, decoded as", old.target, new.target))
    elif not out or all(c.name in ("mnemonic",) for c in out):
        out.append(FieldChange("bytes", old.raw.hex(), new.raw.hex()))
    return out


def _refine(old: Sequence, new: Sequence, i0: int, i1: int, j0: int, j1: int) -> list[Op]:
    """Ops for a replaced block old[i0:i1] / new[j0:j1]: instructions with
    the same mnemonic pair up first (in order), then leftovers of the same
    format by position; the rest are removed / inserted."""
    n, m = i1 - i0, j1 - j0
    if n == 0 or m == 0:
        return ([Op(REMOVED, i, None) for i in range(i0, i1)]
                + [Op(INSERTED, None, j) for j in range(j0, j1)])
    a = [old[i].mnemonic for i in range(i0, i1)]
    b = [new[j].mnemonic for j in range(j0, j1)]
    if n * m <= _REFINE_CELLS:
        pairs = lcs_pairs(a, b)
    else:
        pairs = matching_pairs(a, b)
    ops: list[Op] = []
    pi = pj = 0
    for i, j in pairs + [(n, m)]:
        # leftovers between two same-mnemonic pairs: pair by position when
        # they have the same format (else one was removed, one inserted)
        k = min(i - pi, j - pj)
        for t in range(k):
            x, y = i0 + pi + t, j0 + pj + t
            if old[x].format == new[y].format:
                ops.append(Op(CHANGED, x, y))
            else:
                ops.append(Op(REMOVED, x, None))
                ops.append(Op(INSERTED, None, y))
        ops.extend(Op(REMOVED, i0 + x, None) for x in range(pi + k, i))
        ops.extend(Op(INSERTED, None, j0 + y) for y in range(pj + k, j))
        if i < n:
            ops.append(Op(CHANGED, i0 + i, j0 + j))
        pi, pj = i + 1, j + 1
    return ops


def lcs_pairs(a: Sequence, b: Sequence) -> list[tuple[int, int]]:
    """A longest common subsequence by dynamic programming (small inputs)."""
    n, m = len(a), len(b)
    t = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        ti, tn = t[i], t[i + 1]
        ai = a[i]
        for j in range(m - 1, -1, -1):
            ti[j] = tn[j + 1] + 1 if ai == b[j] else max(tn[j], ti[j + 1])
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < n and j < m:
        if a[i] == b[j]:
            out.append((i, j))
            i += 1
            j += 1
        elif t[i + 1][j] >= t[i][j + 1]:
            i += 1
        else:
            j += 1
    return out


def align(old_insts: Sequence, new_insts: Sequence) -> list[Op]:
    """Align two instruction lists (:class:`kpatch.isa.Instruction`).

    Returns :class:`Op` steps in stream order covering every instruction of
    both lists exactly once: ``equal`` (same key and same bytes),
    ``changed`` (paired instructions whose bytes or text differ, with
    :attr:`Op.changes`), ``inserted`` (only in the new list) and ``removed``
    (only in the old list).
    """
    base = align_keys(instruction_keys(old_insts), instruction_keys(new_insts))
    ops: list[Op] = []
    k = 0
    while k < len(base):
        op = base[k]
        if op.kind == EQUAL:
            o, n = old_insts[op.old], new_insts[op.new]
            if o.raw == n.raw and o.text() == n.text():
                ops.append(op)
            else:
                ops.append(Op(CHANGED, op.old, op.new, field_changes(o, n)))
            k += 1
            continue
        # a run of removed/inserted steps: one replaced block
        rem: list[int] = []
        ins: list[int] = []
        while k < len(base) and base[k].kind != EQUAL:
            if base[k].kind == REMOVED:
                rem.append(base[k].old)
            else:
                ins.append(base[k].new)
            k += 1
        i0 = rem[0] if rem else None
        j0 = ins[0] if ins else None
        if rem and ins:
            for r in _refine(old_insts, new_insts, i0, rem[-1] + 1, j0, ins[-1] + 1):
                if r.kind == CHANGED:
                    r.changes = field_changes(old_insts[r.old], new_insts[r.new])
                ops.append(r)
        else:
            ops.extend(Op(REMOVED, i, None) for i in rem)
            ops.extend(Op(INSERTED, None, j) for j in ins)
    return ops
