"""Does a patched code object keep the original's control flow?

:func:`check_branches` aligns the original and patched instruction streams
function by function (:func:`kpatch.diff.align.align`, which knows
nothing of how the patch was made) and checks that

* every original branch (SOPP branches, ``s_call_b64``) is still there, with
  the same mnemonic, and reaches the instruction its original target became
  -- or the first of the instructions inserted directly in front of it (a
  mitigation placed before the target);
* no branch was added;
* every kernel's entry (descriptor ``KERNEL_CODE_ENTRY_BYTE_OFFSET``) is the
  original entry instruction or a mitigation in front of it;
* no function disappeared;
* every address built from ``s_getpc_b64`` by constant adds within the next
  :data:`PC_WINDOW` instructions that points at an instruction of the
  original (Tensile's long branch, MIOpen's Winograd return addresses and
  subroutine pointers, a call through a getpc pair) points, in the patched
  object, at the instruction that one became (or a mitigation in front of
  it).  The arithmetic is evaluated as the hardware does it (32-bit adds
  with carry), in the original and in the patched stream alike, by
  :func:`pc_relative_target`, which shares nothing with the patcher's own
  scan.  An address built across a branch, from memory or by other
  arithmetic is not followed; one that points at data is not compared.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from kpatch.codeobject import CodeObject
from kpatch.isa.operands import LITERAL, inline_int
from kpatch.diff.align import INSERTED, REMOVED, Op, align
from kpatch.diff.functions import DiffUnit, decode_target, units

WRONG_TARGET = "wrong-target"
WRONG_PC_TARGET = "wrong-pc-relative-target"
REMOVED_BRANCH = "removed-branch"
CHANGED_BRANCH = "changed-branch"
ADDED_BRANCH = "added-branch"
ENTRY = "entry"
MISSING_UNIT = "missing-function"
NOT_DECODED = "not-decoded"


@dataclass(frozen=True)
class BranchProblem:
    """One place where the patched control flow differs from the original."""

    unit: str
    kind: str
    old_address: int | None
    new_address: int | None
    message: str

    def __str__(self) -> str:
        return f"{self.unit}: {self.message}"

    def to_json(self) -> dict:
        return {"function": self.unit, "kind": self.kind, "old_address": self.old_address,
                "new_address": self.new_address, "message": self.message}


def _target(inst) -> int | None:
    return inst.branch_target


class _UnitMap:
    """Where each instruction of one original unit went, kept as columns
    once its instructions are gone: the original addresses, and for each
    original instruction the range ``[lo, hi]`` of patched instruction
    indices a jump to it may reach (index ``len(new)`` is the patched
    unit's end).  ``mapped`` False: the unit is missing from the patched
    object (its addresses still resolve, to nothing to compare)."""

    def __init__(self, old: DiffUnit, new: DiffUnit | None, ops: Sequence[Op] | None):
        self.name = old.name
        self.mapped = new is not None and ops is not None
        self.old_addr = np.fromiter((i.address for i in old.insts), np.int64, len(old.insts))
        self.first = int(self.old_addr[0]) if len(old.insts) else 0
        self.last = int(self.old_addr[-1]) if len(old.insts) else -1
        self._texts = None
        if not self.mapped:
            return
        n_new = len(new.insts)
        self.new_addr = np.fromiter([i.address for i in new.insts] + [new.end], np.int64, n_new + 1)
        lo = np.zeros(len(old.insts), np.int64)
        hi = np.zeros(len(old.insts), np.int64)
        waiting: list[int] = []  # original instructions whose landing ends at the next kept one
        run_lo = None  # first patched index inserted since the last kept instruction
        for op in ops:
            if op.kind == INSERTED or op.kind == REMOVED:
                if op.new is not None and run_lo is None:
                    run_lo = op.new
                if op.old is not None:
                    waiting.append(op.old)
                continue
            waiting.append(op.old)
            for t in waiting:
                lo[t] = op.new if run_lo is None else run_lo
                hi[t] = op.new
            waiting, run_lo = [], None
        for t in waiting:
            lo[t] = n_new if run_lo is None else run_lo
            hi[t] = n_new
        self.lo, self.hi = lo, hi

    def index(self, address: int) -> int | None:
        """The index of the original instruction at ``address``, or None."""
        if not self.first <= address <= self.last:
            return None
        t = int(np.searchsorted(self.old_addr, address))
        return t if self.old_addr[t] == address else None

    def landing(self, t: int) -> set[int]:
        """Patched addresses a jump to original instruction ``t`` may reach:
        the instruction it became, or any instruction inserted directly
        before it; for a removed instruction, the next surviving one (or
        what was inserted in its place)."""
        return set(self.new_addr[self.lo[t]:self.hi[t] + 1].tolist())


#: how far after an s_getpc_b64 :func:`pc_relative_target` looks for its use
PC_WINDOW = 16
_M32 = 0xFFFFFFFF
_SGPR_MAX = 105


def _src(inst, field: str, known: dict[int, int]) -> int | None:
    """The 32-bit value of a SOP2/SOP1 source: a known SGPR, an inline
    integer or the literal (None: unknown)."""
    v = inst.fields.get(field)
    if v is None:
        return None
    if v <= _SGPR_MAX:
        return known.get(v)
    if v == LITERAL:
        return inst.literal
    i = inline_int(v)
    return None if i is None else i & _M32


def pc_relative_target(insts: Sequence, i: int) -> int | None:
    """The address built from ``insts[i]`` (an ``s_getpc_b64``), when the
    next :data:`PC_WINDOW` instructions (no branch between) build it by
    32-bit constant adds (s_add_u32/s_sub_u32 on the low half with
    carry/borrow into s_addc_u32/s_subb_u32 on the high one, constants from
    s_mov_b32/s_add_i32/s_sub_i32 of constants): its value once the carry
    reached the high half, or when ``s_setpc_b64``/``s_swappc_b64`` use the
    pair first; None otherwise."""
    g = insts[i]
    if g.mnemonic != "s_getpc_b64":
        return None
    lo = g.fields["sdst"]
    pc = g.address + 4
    known = {lo: pc & _M32, lo + 1: (pc >> 32) & _M32}
    carry = None  # SCC after the last add/sub, when known
    for n in insts[i + 1:i + 1 + PC_WINDOW]:
        m = n.mnemonic
        if m in ("s_setpc_b64", "s_swappc_b64"):
            src = n.fields.get("ssrc0")
            if src == lo and lo in known and lo + 1 in known:
                return known[lo] | (known[lo + 1] << 32)
            return None
        if n.is_branch or m == "s_call_b64" or n.format == "UNKNOWN":
            return None
        d = n.fields.get("sdst")
        if m in ("s_mov_b32", "s_add_i32", "s_sub_i32", "s_add_u32", "s_sub_u32", "s_addc_u32",
                 "s_subb_u32") and d is not None and d <= 105:
            a = _src(n, "ssrc0", known)
            b = _src(n, "ssrc1", known) if m != "s_mov_b32" else 0
            c = carry if m in ("s_addc_u32", "s_subb_u32") else 0
            if a is None or b is None or c is None:
                known.pop(d, None)
                if m != "s_mov_b32":
                    carry = None
                continue
            r = a - b - c if m.startswith("s_sub") else a + b + c
            if m in ("s_add_u32", "s_addc_u32", "s_sub_u32", "s_subb_u32"):
                carry = int(not 0 <= r <= _M32)  # SCC = carry out / borrow
            elif m != "s_mov_b32":  # s_add_i32/s_sub_i32: SCC = signed overflow
                sa, sb = (x - (1 << 32) if x >> 31 else x for x in (a, b))
                sr = sa - sb if m == "s_sub_i32" else sa + sb
                carry = int(not -(1 << 31) <= sr < 1 << 31)
            known[d] = r & _M32
            if d == lo + 1 and m in ("s_addc_u32", "s_subb_u32") and lo in known:
                return known[lo] | (known[lo + 1] << 32)  # the carry reached the high half: complete
            continue
        written = [u.index for w in n.writes if w.file == "s" for u in w.units()]
        for r in written:
            known.pop(r, None)
        if any(w.file == "scc" for w in n.writes):
            carry = None
    return None


class BranchChecker:
    """The control-flow check, one unit pair at a time (a whole library's
    instructions need not be held at once).  :meth:`add_pair` checks a pair
    as soon as it is aligned, against the units added so far; what a jump
    into a unit not added yet needs is kept and decided by :meth:`finish`,
    exactly as if every unit had been there from the start (an address is
    resolved to the first unit, in the order added, that holds an
    instruction there).  ``text_at(address)``: the original instruction's
    text at an address (for the message of a jump into another unit)."""

    def __init__(self, text_at=None):
        self.maps: list[_UnitMap] = []
        self._reach = []  # the highest last address of maps[:i + 1]
        self._by_name: dict[str, _UnitMap] = {}
        self._later: list[tuple] = []  # checks that need a unit not added yet
        self.text_at = text_at

    def _where(self, address: int, upto: int | None = None) -> tuple[_UnitMap, int] | None:
        """The first unit (of the first ``upto`` added) with an original
        instruction at ``address``, and its index there."""
        maps = self.maps if upto is None else self.maps[:upto]
        i = bisect_right([m.first for m in maps], address) - 1
        found = None
        while i >= 0 and self._reach[i] >= address:
            t = maps[i].index(address)
            if t is not None:
                found = (maps[i], t)
            i -= 1
        return found

    def add_pair(self, old: DiffUnit, new: DiffUnit | None, ops: Sequence[Op] | None) -> list[BranchProblem]:
        """Add an aligned pair (``new``/``ops`` None: a function missing in
        the patched object) and return the problems found in it now."""
        m = _UnitMap(old, new, ops)
        self.maps.append(m)
        self._reach.append(max(m.last, self._reach[-1] if self._reach else -1))
        self._by_name.setdefault(old.name, m)
        if not m.mapped:
            return [BranchProblem(old.name, MISSING_UNIT, old.start, None,
                                  f"{old.name} is missing from the patched object")]
        if self._by_name[old.name] is not m:
            m.mapped = False  # (a second unit of that name: the first one is the name's mapping)
        problems: list[BranchProblem] = []
        name = old.name
        old_insts, new_insts = old.insts, new.insts
        for op in ops:
            if op.old is None:
                n = new_insts[op.new]
                if _target(n) is not None:
                    problems.append(BranchProblem(
                        name, ADDED_BRANCH, None, n.address,
                        f"{n.text()} at {n.address:#x} is not in the original"))
                continue
            o = old_insts[op.old]
            t_old = _target(o)
            if t_old is None:
                if o.mnemonic == "s_getpc_b64":
                    self._pc_relative(name, old_insts, new_insts, op, problems)
                continue
            if op.new is None:
                problems.append(BranchProblem(name, REMOVED_BRANCH, o.address, None,
                                              f"{o.text()} at {o.address:#x} was removed"))
                continue
            n = new_insts[op.new]
            t_new = _target(n)
            if t_new is None or n.mnemonic != o.mnemonic:
                problems.append(BranchProblem(
                    name, CHANGED_BRANCH, o.address, n.address,
                    f"{o.text()} at {o.address:#x} became {n.text()} at {n.address:#x}"))
                if t_new is None:
                    continue
            self._jump(("branch", name, o.address, n.address, n.mnemonic, t_old, t_new), problems)
        return problems

    def _pc_relative(self, name: str, old_insts, new_insts, op: Op, problems: list) -> None:
        """Every getpc-built jump of the original unit that :func:`pc_relative_target`
        follows must, in the patched unit, reach where the original's target went."""
        t_old = pc_relative_target(old_insts, op.old)
        if t_old is None:
            return
        o = old_insts[op.old]
        t_new = pc_relative_target(new_insts, op.new) if op.new is not None else None
        self._jump(("pc", name, o.address, None if op.new is None else new_insts[op.new].address,
                    o.text(), t_old, t_new), problems)

    def _jump(self, item: tuple, problems: list) -> None:
        """Check one jump now, or keep it for :meth:`finish` when its target
        could be in a unit not added yet."""
        loc = self._where(item[5])
        if loc is None:
            self._later.append(item)
            return
        self._check_jump(item, loc, problems)

    def _check_jump(self, item: tuple, loc: tuple[_UnitMap, int] | None, problems: list) -> None:
        kind, name, old_addr, new_addr, what, t_old, t_new = item
        if loc is None or not loc[0].mapped:
            return  # not a decoded instruction of a kept function, or not followed
        m, t = loc
        allowed = m.landing(t)
        if t_new in allowed:
            return
        want = ", ".join(f"{a:#x}" for a in sorted(allowed))
        if kind == "branch":
            problems.append(BranchProblem(
                name, WRONG_TARGET, old_addr, new_addr,
                f"{what} at {new_addr:#x} (was {old_addr:#x}) reaches {t_new:#x}; "
                f"the original reached {t_old:#x} ({self._text(t_old)}), now at {want}"))
        else:
            got = "an address kpatch's check cannot follow" if t_new is None else f"{t_new:#x}"
            problems.append(BranchProblem(
                name, WRONG_PC_TARGET, old_addr, new_addr,
                f"the address built from {what} at {old_addr:#x} reached {t_old:#x} "
                f"({self._text(t_old)}); patched it reaches {got}, not {want}"))

    def _text(self, address: int) -> str:
        return self.text_at(address) if self.text_at is not None else f"{address:#x}"

    def entry(self, name: str, old_entry: int, new_entry: int) -> list[BranchProblem]:
        """Check a kernel's entry (descriptor): now when its original
        instruction is in a unit added already, else in :meth:`finish`."""
        loc = self._where(old_entry)
        if loc is None:
            self._later.append(("entry", name, old_entry, new_entry, None, old_entry, new_entry))
            return []
        return self._entry(name, old_entry, new_entry, loc)

    def _entry(self, name: str, old_entry: int, new_entry: int, loc) -> list[BranchProblem]:
        if loc is None or not loc[0].mapped:
            return []
        allowed = loc[0].landing(loc[1])
        if new_entry in allowed:
            return []
        want = ", ".join(f"{a:#x}" for a in sorted(allowed))
        return [BranchProblem(name, ENTRY, old_entry, new_entry,
                              f"kernel entry is {new_entry:#x}; the original entry {old_entry:#x} is now at {want}")]

    def waiting(self, unit: str) -> bool:
        """Whether :meth:`finish` still decides something of ``unit``."""
        return any(it[1] == unit for it in self._later)

    def finish(self, entries: Sequence[tuple[str, int, int]] = ()) -> list[BranchProblem]:
        """The problems of the checks kept for later, and of the kernel
        entries ``(name, old_entry, new_entry)``."""
        problems: list[BranchProblem] = []
        later, self._later = self._later, []
        for item in later:
            loc = self._where(item[5])
            if item[0] == "entry":
                problems.extend(self._entry(item[1], item[2], item[3], loc))
            else:
                self._check_jump(item, loc, problems)
        for name, old_entry, new_entry in entries:
            problems.extend(self._entry(name, old_entry, new_entry, self._where(old_entry)))
        return problems


def added_unit_problems(u: DiffUnit) -> list[BranchProblem]:
    """A unit only the patched object has: each of its branches is new."""
    return [BranchProblem(u.name, ADDED_BRANCH, None, n.address, f"{n.text()} at {n.address:#x} is in a new function")
            for n in u.insts if _target(n) is not None]


def check_aligned(pairs: Sequence[tuple[DiffUnit, DiffUnit | None, Sequence[Op] | None]],
                  entries: Sequence[tuple[str, int, int]] = (),
                  added: Sequence[DiffUnit] = ()) -> list[BranchProblem]:
    """Branch problems given already-aligned unit pairs ``(old, new, ops)``
    (``new``/``ops`` None for a function missing in the patched object),
    kernel entries ``(name, old_entry, new_entry)``, and units only in the
    patched object (``added``: their branches are all new)."""
    texts = {}
    for old, _, _ in pairs:
        for inst in old.insts:
            texts.setdefault(inst.address, inst)
    checker = BranchChecker(lambda a: texts[a].text())
    problems: list[BranchProblem] = []
    for old, new, ops in pairs:
        problems.extend(checker.add_pair(old, new, ops))
    problems.extend(checker.finish(entries))
    for u in added:
        problems.extend(added_unit_problems(u))
    return problems


def check_branches(old_co: CodeObject, new_co: CodeObject, *, old_target: str | None = None,
                   new_target: str | None = None) -> list[BranchProblem]:
    """Control-flow problems of ``new_co`` (patched) against ``old_co``
    (original); an empty list means every branch and entry still reaches
    the same instruction or the mitigation placed in front of it.

    Each object is decoded with its own processor unless ``old_target`` /
    ``new_target`` say otherwise; an object kpatch cannot decode gives one
    ``not-decoded`` problem.
    """
    ta, tb = decode_target(old_co, old_target), decode_target(new_co, new_target)
    if ta is None or tb is None:
        which = old_co if ta is None else new_co
        return [BranchProblem("", NOT_DECODED, None, None,
                              f"cannot decode {which.target_id or 'unknown target'} code")]
    ua, ub = units(old_co, ta), units(new_co, tb)
    by_name = {u.name: u for u in ub}
    pairs = []
    for u in ua:
        v = by_name.get(u.name)
        pairs.append((u, v, align(u.insts, v.insts) if v is not None else None))
    old_names = {u.name for u in ua}
    new_k = {k.name: k.entry for k in new_co.kernels}
    entries = [(k.name, k.entry, new_k[k.name]) for k in old_co.kernels if k.name in new_k]
    return check_aligned(pairs, entries, [u for u in ub if u.name not in old_names])
