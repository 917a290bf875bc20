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

from dataclasses import dataclass
from typing import Sequence

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


class _Mapped:
    """One aligned pair of units: where each original instruction went."""

    def __init__(self, old: DiffUnit, new: DiffUnit, ops: Sequence[Op]):
        self.old, self.new, self.ops = old, new, list(ops)
        self.pos = {op.old: p for p, op in enumerate(self.ops) if op.old is not None}

    def landing(self, t: int) -> set[int]:
        """New addresses a jump to original instruction ``t`` may reach: the
        instruction it became, or any instruction inserted directly before
        it; for a removed instruction, the next surviving one (or what was
        inserted in its place)."""
        ops, new = self.ops, self.new.insts
        p = self.pos[t]
        out: set[int] = set()
        q = p - 1
        while q >= 0 and ops[q].kind in (INSERTED, REMOVED):
            if ops[q].new is not None:
                out.add(new[ops[q].new].address)
            q -= 1
        q = p
        while q < len(ops) and ops[q].new is None:
            q += 1
            while q < len(ops) and ops[q].kind == INSERTED:
                out.add(new[ops[q].new].address)
                q += 1
        if q < len(ops):
            out.add(new[ops[q].new].address)
        else:
            out.add(self.new.end)
        return out


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


def _pc_relative_problems(name: str, m: "_Mapped", where: dict, mapped: dict) -> list[BranchProblem]:
    """Every getpc-built jump of the original unit that :func:`pc_relative_target`
    follows must, in the patched unit, reach where the original's target went."""
    out = []
    old_insts, new_insts = m.old.insts, m.new.insts
    for op in m.ops:
        if op.old is None or old_insts[op.old].mnemonic != "s_getpc_b64":
            continue
        t_old = pc_relative_target(old_insts, op.old)
        loc = where.get(t_old) if t_old is not None else None
        if loc is None or loc[0] not in mapped:
            continue  # not followed, or not an instruction of a kept function
        o = old_insts[op.old]
        t_new = pc_relative_target(new_insts, op.new) if op.new is not None else None
        allowed = mapped[loc[0]].landing(loc[1])
        if t_new not in allowed:
            want = ", ".join(f"{a:#x}" for a in sorted(allowed))
            got = "an address kpatch's check cannot follow" if t_new is None else f"{t_new:#x}"
            out.append(BranchProblem(
                name, WRONG_PC_TARGET, o.address, None if op.new is None else new_insts[op.new].address,
                f"the address built from {o.text()} at {o.address:#x} reached {t_old:#x} "
                f"({mapped[loc[0]].old.insts[loc[1]].text()}); patched it reaches {got}, not {want}"))
    return out


def check_aligned(pairs: Sequence[tuple[DiffUnit, DiffUnit | None, Sequence[Op] | None]],
                  entries: Sequence[tuple[str, int, int]] = (),
                  added: Sequence[DiffUnit] = ()) -> list[BranchProblem]:
    """Branch problems given already-aligned unit pairs ``(old, new, ops)``
    (``new``/``ops`` None for a function missing in the patched object),
    kernel entries ``(name, old_entry, new_entry)``, and units only in the
    patched object (``added``: their branches are all new)."""
    problems: list[BranchProblem] = []
    mapped: dict[str, _Mapped] = {}
    where: dict[int, tuple[str, int]] = {}
    for old, new, ops in pairs:
        for t, inst in enumerate(old.insts):
            where.setdefault(inst.address, (old.name, t))
        if new is None or ops is None:
            problems.append(BranchProblem(old.name, MISSING_UNIT, old.start, None,
                                          f"{old.name} is missing from the patched object"))
            continue
        mapped[old.name] = _Mapped(old, new, ops)

    for name, m in mapped.items():
        old_insts, new_insts = m.old.insts, m.new.insts
        for op in m.ops:
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
            loc = where.get(t_old)
            if loc is None or loc[0] not in mapped:
                # the original target is not a decoded instruction of a kept function
                continue
            allowed = mapped[loc[0]].landing(loc[1])
            if t_new not in allowed:
                tgt = mapped[loc[0]].old.insts[loc[1]]
                want = ", ".join(f"{a:#x}" for a in sorted(allowed))
                problems.append(BranchProblem(
                    name, WRONG_TARGET, o.address, n.address,
                    f"{n.mnemonic} at {n.address:#x} (was {o.address:#x}) reaches {t_new:#x}; "
                    f"the original reached {t_old:#x} ({tgt.text()}), now at {want}"))

    for name, m in mapped.items():
        problems.extend(_pc_relative_problems(name, m, where, mapped))

    for name, old_entry, new_entry in entries:
        loc = where.get(old_entry)
        if loc is None or loc[0] not in mapped:
            continue
        allowed = mapped[loc[0]].landing(loc[1])
        if new_entry not in allowed:
            want = ", ".join(f"{a:#x}" for a in sorted(allowed))
            problems.append(BranchProblem(
                name, ENTRY, old_entry, new_entry,
                f"kernel entry is {new_entry:#x}; the original entry {old_entry:#x} is now at {want}"))

    for u in added:
        for n in u.insts:
            if _target(n) is not None:
                problems.append(BranchProblem(u.name, ADDED_BRANCH, None, n.address,
                                              f"{n.text()} at {n.address:#x} is in a new function"))
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
