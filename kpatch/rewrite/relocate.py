"""Apply edits to a code object, moving code and fixing everything that points at it.

:func:`apply_edits` is the rewriter: same-size edits are written in place;
edits that change sizes move the code after them, and then every
PC-relative branch and call, every ``s_getpc_b64`` literal, every kernel
descriptor's entry offset, symbol values and sizes, and (when ``.text``
outgrows its room) the ELF layout after it are fixed, with the Offset3fBug
fixpoint on top.  What cannot be moved with certainty is refused, per
kernel (its edits are dropped, its code stays as it was) or, when the
object cannot be kept consistent at all, for the whole object (a
:class:`~kpatch.rewrite.edits.Refusal` is raised).

Refusal rules (see :mod:`kpatch.analysis.codescan` for the problem classes):

* an unrecognised PC-relative use anywhere (class A) pins every address:
  every kernel whose code (or a function it calls) has a size-changing edit
  is refused; same-size edits still apply;
* a computed jump kpatch cannot bound (class B) refuses the kernels that
  reach it, when code moves;
* an edit that replaces a PC-relative instruction, splits a getpc pattern,
  or inserts PC-relative code refuses the kernels reaching it;
* a function shared by a refused kernel and another kernel with edits in
  that function refuses the other kernel too (the shared code stays as it
  was);
* a branch whose new offset does not fit 16 bits refuses the kernels that
  reach it.

Functions that no kernel reaches directly (for example ones only called
through pointers) are refused or patched on their own, under their own name.

Decisions worth knowing:

* a branch (or call, or getpc reference) to an instruction that got an
  ``insert_before`` lands on the inserted code: a mitigation in front of X
  guards every path into X.  ``insert_after`` code is not a landing place;
* the ``s_nop 0`` of the Offset3fBug fix goes right after the branch, before
  any ``insert_after`` code; branches whose 0x3f offset did not change
  (already in the input) are left to the rules (Offset3fBug findings);
* a kernel entry stays 256-byte aligned (each function keeps the alignment
  of its original address, up to 256); the ``s_code_end`` run LLVM leaves
  after a module's last function stays right after it, whole (the
  instruction prefetcher may read that far); alignment fill between
  functions shrinks or grows, so growth often fits where the fill was;
* ``.text`` grows in place; when it outgrows its memory page, the sections
  after it move (see :mod:`kpatch.rewrite.elfpatch`), otherwise only their
  file offsets do;
* DWARF sections (``.debug_*``) are not rewritten: their code addresses are
  stale after a move (counted in ``relocations["debug_sections_stale"]``);
  the loader does not read them;
* ``address_map`` maps every instruction to where the instruction itself
  went (after its ``insert_before`` code).

The header-level edits (:func:`set_e_flags`, :func:`set_metadata`,
:func:`set_descriptor_field`) live in :mod:`kpatch.rewrite.headers` and are
re-exported here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import numpy as np

from kpatch.codeobject import CodeObject
from kpatch.elf.reader import ET_REL, SHF_EXECINSTR, SHT_NULL
from kpatch.errors import UsageError
from kpatch.isa import TARGETS, decode, encode
from kpatch.isa.operands import inline_code
from kpatch.isa.tables import table_for
from kpatch.analysis.codescan import RelocationProblem, TextScan, is_pc_relative, scan_text
from kpatch.rewrite.edits import Edit, Refusal, Slot, group_edits
from kpatch.rewrite.elfpatch import AddressMap, ElfLayout, write
from kpatch.rewrite.textlayout import TextLayout, instruction_indices, layout_text

__all__ = ["RewriteResult", "apply_edits", "rewrite", "set_e_flags", "set_metadata",
           "set_descriptor_field"]



@dataclass
class RewriteResult:
    """A rewritten code object and what was done to it."""

    data: bytes | None  # (None only in what a Finalize is given: the object is not written yet)
    relocations: dict[str, int] = field(default_factory=dict)
    refused: list[Refusal] = field(default_factory=list)
    #: what makes :attr:`inserted` and :attr:`applied` (made on first use:
    #: one entry per edit, and apply reads neither)
    _inserted: Callable[[], list[tuple[int, int, str]]] | list | None = field(default=None, repr=False)
    _applied: Callable[[], list[Edit]] | list | None = field(default=None, repr=False)
    #: what makes :attr:`address_map` (made on first use: a dict of every
    #: instruction costs ~100 bytes each, and apply never reads it)
    _address_map: Callable[[], dict[int, int]] | dict[int, int] | None = field(default=None, repr=False)
    #: what writes the object when :attr:`data` is None (see :meth:`written`)
    _write: Callable[[], bytes] | None = field(default=None, repr=False)
    #: what makes :meth:`instruction_starts` (None: the code was not laid out anew)
    _starts: Callable[[], "np.ndarray | None"] | None = field(default=None, repr=False)
    #: what makes :meth:`instruction_origins` (None: the code was not laid out anew)
    _origins: Callable[[], "np.ndarray | None"] | None = field(default=None, repr=False)

    @property
    def address_map(self) -> dict[int, int]:
        """Old -> new vaddr of every instruction in .text (empty when there were
        no edits and the code did not move: nothing was decoded)."""
        m = self._address_map = _made(self._address_map, dict)
        return m

    @property
    def inserted(self) -> list[tuple[int, int, str]]:
        """The code put in: (new vaddr, size, rule) of each piece, in address order."""
        m = self._inserted = _made(self._inserted, list)
        return m

    @property
    def applied(self) -> list[Edit]:
        """The edits that were applied."""
        m = self._applied = _made(self._applied, list)
        return m

    def written(self) -> bytes:
        """:attr:`data`, the object written first if it was not yet (a
        :data:`Finalize` is given the result before the object is written)."""
        if self.data is None:
            self.data = self._write()
            self._write = None
        return self.data

    def instruction_starts(self):
        """The new address of every instruction in the functions of the new
        ``.text`` (an int64 array of candidates, unordered, some repeated:
        for :func:`kpatch.isa.decodememo.expect_starts`), as the code layout
        placed them; None when the code was not laid out anew or the
        instructions of some inserted code are not known."""
        return self._starts() if self._starts is not None else None

    def instruction_origins(self):
        """Aligned with :meth:`instruction_starts`: the address in the
        original object of the instruction placed at each start (-1: one of
        inserted code), for :func:`kpatch.isa.decodememo.expect_starts`;
        None when :meth:`instruction_starts` is."""
        return self._origins() if self._origins is not None else None


def _made(value, empty):
    """A lazily made attribute of :class:`RewriteResult`: ``value`` made if it
    is still the function that makes it, ``empty()`` if there is none."""
    return empty() if value is None else value() if callable(value) else value


#: Called with a rewrite's result (all but its ``data``, which is None: the
#: object is written once, after); returns None to keep it, or what to lay the
#: object out with once more, keeping the code layout the rewrite decided:
#: the object's bytes with header-only changes (same sections, same ``.text``;
#: e.g. descriptor bits, e_flags) and new section contents (e.g. a note that
#: records the result).
Finalize = Callable[[RewriteResult], "tuple[bytes, dict[int | str, bytes]] | None"]


def apply_edits(data: bytes, target: str, edits: list[Edit], *, offset3f: bool = True,
                finalize: Finalize | None = None, scan: TextScan | None = None,
                parsed: CodeObject | None = None) -> RewriteResult:
    """Apply ``edits`` to the code object ``data`` whose code is ``target`` code.

    ``target`` names the ISA the code is decoded as (``gfx1030`` for the
    objects kpatch patches).  ``offset3f``: fix every branch that relocation
    gives the offset 0x3f (needed when the result runs on gfx1010).
    ``finalize`` (see :data:`Finalize`) adds what depends on the result
    without scanning and laying out the code a second time.  ``scan``: the
    scan of ``data``'s ``.text`` as ``target`` code
    (:func:`~kpatch.analysis.codescan.scan_text`) when the caller has made it
    already (the patcher, for its analysis); the rewrite may add to its problems.
    ``parsed``: ``data`` parsed (:class:`CodeObject`, read only), when the
    caller has it (used only when it holds these very bytes).
    Raises :class:`Refusal` when the object cannot be rewritten at all and
    :class:`~kpatch.errors.UsageError` for edits that do not name an
    instruction or hold code that does not decode.
    """
    return rewrite(data, target, edits, offset3f=offset3f, finalize=finalize, scan=scan, parsed=parsed)


# ---------------------------------------------------------------------------


def _other_target(target: str) -> str:
    return "gfx1010" if target != "gfx1010" else "gfx1030"


def _decode_code(code: bytes, target: str, address: int):
    """Decode inserted code for ``target`` (or the other GFX10 target if it only
    decodes there); UsageError if it is not whole instructions.  The
    instructions are decoded at address 0 (only what they are matters here)
    and shared between calls: they are not to be changed."""
    insts = _decode_snippet(bytes(code), target)
    if insts is None:
        raise UsageError(f"edit code {bytes(code).hex()} at {address:#x} is not a sequence of "
                         f"{target} instructions")
    return insts


@lru_cache(maxsize=4096)
def _decode_snippet(code: bytes, target: str):
    """The instructions of ``code`` as in :func:`_decode_code`, or None (the
    same few snippets are inserted at many places)."""
    for t in (target, _other_target(target)):
        insts = decode(code, t, 0)
        if not any(i.is_unknown for i in insts) and sum(i.size for i in insts) == len(code):
            return tuple(insts)
    return None


@lru_cache(maxsize=64)
def _snippet_offsets_for(target: str) -> Callable[[bytes], tuple[int, ...] | None]:
    """:func:`_snippet_offsets` for ``target`` code (one function per target,
    for :attr:`TextLayout.starts_of`)."""
    return lambda code: _snippet_offsets(bytes(code), target)


@lru_cache(maxsize=4096)
def _snippet_offsets(code: bytes, target: str) -> tuple[int, ...] | None:
    """The offsets of the instructions of inserted ``code`` (as
    :func:`_decode_code` decodes it), None if it is not whole instructions."""
    insts = _decode_snippet(code, target)
    if insts is None:
        return None
    return tuple(i.address for i in insts)


_UNDECODABLE = object()


@lru_cache(maxsize=4096)
def _pc_relative_in(code: bytes, target: str):
    """The first PC-relative instruction of inserted ``code`` (as
    :func:`_decode_code` decodes it), None if it has none, ``_UNDECODABLE``
    if it is not whole instructions (asked once per snippet, not once per
    place it goes: an object can take hundreds of thousands of insertions)."""
    insts = _decode_snippet(code, target)
    if insts is None:
        return _UNDECODABLE
    return next((c for c in insts if is_pc_relative(c)), None)


def _edit_problem(scan: TextScan, idx: int, slot: Slot) -> Refusal | None:
    """Why the edits at instruction ``idx`` cannot be applied, or None."""
    ins = scan.insts[idx]
    a = ins.address
    for e in slot.edits:
        c = _pc_relative_in(bytes(e.code), scan.target)
        if c is _UNDECODABLE:
            _decode_code(bytes(e.code), scan.target, a)  # (UsageError naming the address)
        if c is not None:
            return Refusal(f"cannot relocate: rule {e.rule} inserts {c.mnemonic} at {a:#x}; "
                           f"kpatch does not place PC-relative code", kind="edit-pc-relative",
                           address=a)
    if slot.replace is not None and is_pc_relative(ins):
        return Refusal(f"cannot relocate: rule {slot.replace.rule} replaces {ins.mnemonic} at "
                       f"{a:#x}, a PC-relative instruction", kind="edit-pc-relative", address=a)
    gp = scan.getpc_at.get(idx)
    if gp is not None:
        g = scan.insts[gp.index].address
        if slot.replace is not None:
            return Refusal(f"cannot relocate: rule {slot.replace.rule} replaces {ins.mnemonic} at "
                           f"{a:#x}, part of the s_getpc_b64 sequence at {g:#x}",
                           kind="edit-pc-relative", address=a)
        inside = (slot.before if idx > gp.index else []) + (slot.after if idx < gp.last else [])
        for e in inside:
            clobbered = _clobbers(_decode_code(bytes(e.code), scan.target, a), gp.reg, gp.tmp)
            if clobbered:
                return Refusal(f"cannot relocate: rule {e.rule} puts code that writes {clobbered} "
                               f"inside the s_getpc_b64/s_add_u32/s_addc_u32 sequence at {g:#x}",
                               kind="edit-pc-relative", address=a)
    return None


def _clobbers(insts, reg: int, tmp: int | None = None) -> str:
    """Which of s[reg], s[reg+1], SCC and the temporary s[tmp] (what the
    getpc sequence carries) the code writes."""
    hit = []
    for c in insts:
        for r in c.writes:
            if r.file == "scc":
                hit.append("scc")
            elif r.file == "s" and r.index <= reg + 1 and reg < r.index + r.count:
                hit.append(str(r))
            elif r.file == "s" and tmp is not None and r.index <= tmp < r.index + r.count:
                hit.append(str(r))
    return ", ".join(dict.fromkeys(hit))


class _Plan:
    """Which edits survive: roots (kernels, and functions no kernel reaches), the
    units each root reaches, and the refusals so far."""

    def __init__(self, scan: TextScan, slots: dict[int, Slot]):
        self.scan = scan
        self.slots = slots
        units = scan.units
        reached: set[int] = set()
        for ui, u in enumerate(units):
            if u.kind == "kernel":
                reached |= self._reach(ui) - {ui}
        self.roots = [ui for ui, u in enumerate(units) if u.kind == "kernel" or ui not in reached]
        self.closure = {r: self._reach(r) for r in self.roots}
        self.roots_of: dict[int, list[int]] = {ui: [] for ui in range(len(units))}
        for r, c in self.closure.items():
            for ui in c:
                self.roots_of[ui].append(r)
        self.slot_units: dict[int, list[int]] = {}
        for i in slots:
            self.slot_units.setdefault(scan.unit_of[i], []).append(i)
        self.refused: dict[int, Refusal] = {}

    def _reach(self, start: int) -> set[int]:
        seen = {start}
        todo = [start]
        while todo:
            for v in self.scan.edges.get(todo.pop(), ()):
                if v not in seen:
                    seen.add(v)
                    todo.append(v)
        return seen

    def blocked(self) -> set[int]:
        """Units whose edits are dropped (reached by a refused root)."""
        out: set[int] = set()
        for r in self.refused:
            out |= self.closure[r]
        return out

    def active(self) -> dict[int, Slot]:
        """The slots whose edits are not dropped (a copy, in the same order)."""
        b = self.blocked()
        if not b:
            return dict(self.slots)
        unit_of = self.scan.unit_of
        return {i: s for i, s in self.slots.items() if unit_of[i] not in b}

    def has_edits(self, r: int, *, sized: bool = False) -> bool:
        """Does root ``r`` reach an edit (one that changes sizes, with ``sized``)?"""
        insts = self.scan.insts
        return any(not sized or self.slots[i].size_change(insts[i].size)
                   for ui in self.closure[r] for i in self.slot_units.get(ui, ()))

    def refuse(self, r: int, refusal: Refusal) -> bool:
        if r in self.refused:
            return False
        self.refused[r] = refusal.for_kernel(self.scan.units[r].name)
        return True

    def refuse_unit(self, ui: int, refusal: Refusal, *, sized: bool = False) -> bool:
        """Refuse every root that reaches unit ``ui`` and has edits; True if any was new."""
        new = False
        for r in self.roots_of[ui]:
            if self.has_edits(r, sized=sized):
                new |= self.refuse(r, refusal)
        return new

    def propagate(self) -> bool:
        """Refuse roots that reach an edited unit whose edits a refusal dropped."""
        new = False
        while True:
            b = self.blocked()
            changed = False
            for r in self.roots:
                if r in self.refused:
                    continue
                shared = [ui for ui in self.closure[r] if ui in b and ui in self.slot_units]
                if shared:
                    ui = shared[0]
                    owner = next(x for x in self.refused if ui in self.closure[x])
                    changed |= self.refuse(r, Refusal(
                        f"cannot patch: {self.scan.units[ui].name} is shared with refused "
                        f"{self.scan.units[owner].name}, so its edits are not applied",
                        kind="shared-code", address=self.scan.units[ui].start))
            if not changed:
                return new
            new = True


def _plan_layout(scan: TextScan, slots: dict[int, Slot], conflicts: dict[int, Refusal],
                 offset3f: bool) -> tuple[_Plan, TextLayout]:
    """Refuse what must be refused and lay out ``.text`` with the remaining
    edits: refusals spread (:meth:`_Plan.propagate`) until they settle, and
    each layout whose branches no longer reach refuses those branches' units."""
    plan = _Plan(scan, slots)
    problems = _edit_problems(scan, slots, conflicts)
    for _ in range(4 * len(scan.units) + 4):
        new = False
        for i, p in problems.items():
            new |= plan.refuse_unit(scan.unit_of[i], p)
        active = plan.active()
        new |= _refuse_what_cannot_move(scan, plan, active)
        new |= plan.propagate()
        if new:
            continue
        lay = layout_text(scan, active, offset3f=offset3f)
        if not lay.out_of_range:
            return plan, lay
        if not _refuse_out_of_range(scan, plan, lay):
            ins = scan.insts[lay.out_of_range[0]]
            raise Refusal(f"cannot relocate: {ins.mnemonic} at {ins.address:#x} no longer "
                          f"reaches its target", kind="branch-range", address=ins.address)
    raise Refusal("cannot relocate: refusals did not settle", kind="layout")  # pragma: no cover


def _edit_problems(scan: TextScan, slots: dict[int, Slot], conflicts: dict[int, Refusal]) -> dict[int, Refusal]:
    """Instruction index -> why its edits cannot be made (conflicting edits,
    or :func:`_edit_problem`).

    Most slots only put code the object has taken elsewhere already (one
    rule inserts the same few sequences at hundreds of thousands of
    places): a slot that replaces nothing, is not part of a getpc sequence
    and whose every piece of code a slot before it was found clean with
    (:func:`_edit_problem` said None: the code is whole instructions, none
    PC-relative) has no problem, which is all :func:`_edit_problem` would
    find for it; the others are asked."""
    problems = dict(conflicts)
    getpc_at = scan.getpc_at
    clean: set[bytes] = set()  # code of edits found clean
    for i, slot in slots.items():
        if i in problems:
            continue
        if slot.replace is None and i not in getpc_at:
            for e in slot.before:
                if type(e.code) is not bytes or e.code not in clean:
                    break
            else:
                for e in slot.after:
                    if type(e.code) is not bytes or e.code not in clean:
                        break
                else:
                    continue
        p = _edit_problem(scan, i, slot)
        if p is not None:
            problems[i] = p
        else:
            clean.update(e.code for e in slot.edits if type(e.code) is bytes)
    return problems


def _refuse_what_cannot_move(scan: TextScan, plan: _Plan, active: dict[int, Slot]) -> bool:
    """When the active edits move code: refuse every root with sized edits if
    something pins every address (class A), and the units that reach an
    unbounded computed jump (class B).  True if anything new was refused."""
    if not any(s.size_change(scan.insts[i].size) for i, s in active.items()):
        return False
    new = False
    class_a = scan.problems_of("A")
    if class_a:
        a = class_a[0]
        why = Refusal(f"cannot relocate: {a.reason.removeprefix('cannot relocate: ')} "
                      f"(in {a.unit}); no code in this object can move", kind="immovable",
                      address=a.address)
        for r in plan.roots:
            if plan.has_edits(r, sized=True):
                new |= plan.refuse(r, why)
    for p in scan.problems_of("B"):
        new |= plan.refuse_unit(p.ui, Refusal(p.reason, kind=p.kind, address=p.address))
    return new


def _refuse_out_of_range(scan: TextScan, plan: _Plan, lay: TextLayout) -> bool:
    """Refuse the units of the branches ``lay`` cannot encode any more; True
    if anything new was refused."""
    new = False
    for i in lay.out_of_range:
        ins = scan.insts[i]
        why = Refusal(f"cannot relocate: {ins.mnemonic} at {ins.address:#x} would need an "
                      f"offset beyond 16 bits after the insertions", kind="branch-range",
                      address=ins.address)
        new |= plan.refuse_unit(scan.unit_of[i], why, sized=True)
    return new


def _scan(co: CodeObject, target: str | None) -> TextScan | None:
    """Scan .text as ``target`` code; with no target, as the object's own target,
    or as the other GFX10 target if only that one decodes all of it (header
    rules may relabel an object before its code is moved: the PC-relative
    instructions are encoded alike on both)."""
    if target:
        if target not in TARGETS:
            raise UsageError(f"kpatch decodes gfx10 code for {', '.join(TARGETS)}, not {target!r}")
        return scan_text(co, target)
    mach = co.target.mach.name if co.target is not None else ""
    name = table_for(mach)
    if name is None:
        raise Refusal(f"cannot relocate: kpatch cannot decode {mach or 'this target'}'s "
                      f"code to move it", kind="layout")
    scan = scan_text(co, name)
    if scan is not None and any(p.kind == "undecodable" for p in scan.problems):
        other = scan_text(co, _other_target(name))
        if not any(p.kind == "undecodable" for p in other.problems):
            return other
    return scan


def rewrite(data: bytes, target: str | None, edits: list[Edit] = (), *, offset3f: bool = True,
            section_contents: dict[int | str, bytes] | None = None,
            finalize: Finalize | None = None, scan: TextScan | None = None,
            parsed: CodeObject | None = None) -> RewriteResult:
    """Apply ``edits`` and give sections (by index or name) new contents
    (``section_contents``, e.g. a re-encoded ``.note``), moving whatever has to move.  ``target`` may be
    None to decode the code for the object's own target; ``scan`` (used only
    when it is of ``target`` code) spares scanning ``.text`` again, as
    ``parsed`` parsing ``data`` again.  See :func:`apply_edits`."""
    co = parsed if parsed is not None and parsed.data is data else CodeObject.from_bytes(data)
    if co.is_legacy:
        raise Refusal("cannot patch: code object V2 uses another kernel format", kind="layout")
    if co.e_type == ET_REL:
        raise Refusal("cannot patch: relocatable object files (not linked) are not supported",
                      kind="layout")
    contents = dict(section_contents or {})
    slots_by_addr, conflict_list = group_edits(list(edits))
    given = scan if scan is not None and target is not None and scan.target == target else None
    scan = (given or _scan(co, target)) if slots_by_addr else None
    slots: dict[int, Slot] = {}
    conflicts: dict[int, Refusal] = {}
    if slots_by_addr:
        if scan is None:
            raise UsageError("edits given for an object without .text")
        slots = _slots_by_index(scan, slots_by_addr)
        for addr, reason in conflict_list:
            conflicts[scan.index_at[addr]] = Refusal(f"cannot patch: {reason}", kind="edit-conflict",
                                                     address=addr)
    for _ in range(3):
        plan = lay = None
        if scan is not None:
            plan, lay = _plan_layout(scan, slots, conflicts, offset3f)
        try:
            try:
                if finalize is None:
                    return _write_object(co, scan, lay, plan, contents, target, offset3f)
                # what finalize reads (refusals, counts) needs no file: the
                # object is written once, with what finalize adds
                result = _write_object(co, scan, lay, plan, contents, target, offset3f, assemble=False)
                result._write = lambda: _write_object(co, scan, lay, plan, contents, target, offset3f).data
                again = finalize(result)
                if again is None:
                    result.written()
                    return result
                return _rewrite_finalized(co, scan, lay, plan, contents, target, offset3f, edits, *again)
            except (struct.error, OverflowError):
                # only odd inputs get here (addresses near 2**64 and the like)
                raise Refusal("cannot relocate: a moved address or offset no longer fits its "
                              "field", kind="layout") from None
        except Refusal as e:
            # a getpc target that cannot be placed pins the code like any class A problem
            if e.kind != "data-target" or scan is None or not slots or e.address is None:
                raise
            ui = scan.unit_at(e.address)
            scan.problems.append(RelocationProblem(scan.units[ui].name, e.address, "A", e.kind, e.reason, ui))
    raise Refusal("cannot relocate: PC-relative targets could not be placed", kind="data-target")


def _slots_by_index(scan: TextScan, slots_by_addr: dict[int, Slot]) -> dict[int, Slot]:
    """The slots by the index of their instruction, in the same order (looked
    up all at once); UsageError for an address where no instruction starts."""
    try:
        at = instruction_indices(scan, np.fromiter(slots_by_addr, dtype=np.int64, count=len(slots_by_addr)))
    except (KeyError, OverflowError):  # (named below)
        at = None
    if at is not None:
        return dict(zip(at.tolist(), slots_by_addr.values()))
    slots = {}
    for addr, slot in slots_by_addr.items():
        i = scan.index_at.get(addr)
        if i is None:
            raise UsageError(f"edit address {addr:#x} is not the start of an instruction "
                             f"in a function of .text")
        slots[i] = slot
    return slots


def _write_object(co: CodeObject, scan: TextScan | None, lay: TextLayout | None, plan: _Plan | None,
                  contents: dict[int | str, bytes], target: str | None, offset3f: bool, *,
                  assemble: bool = True) -> RewriteResult:
    """The object with its sections' new contents and ``.text`` laid out as
    ``lay`` says, every address that points into moved code fixed, and the
    counts of what was done; with ``assemble`` false everything but the
    object's bytes (``data`` is None): what a :data:`Finalize` reads."""
    layout = ElfLayout(co.data)
    text_sec = layout.section(".text")
    new_sizes, by_index = _new_contents(layout, contents)
    if lay is not None:
        new_sizes[text_sec.index] = lay.size
    layout.plan(new_sizes)
    inside = lay is not None and lay.moved()
    relative = text_sec is not None and text_sec.size > 0 and any(
        s.alloc and s.type != SHT_NULL and s.delta != text_sec.delta for s in layout.secs)
    moves = inside or relative
    execs = [s for s in layout.secs if s.flags & SHF_EXECINSTR and s.name != ".text"]
    if moves and execs:
        raise Refusal(f"cannot relocate: code outside .text ({execs[0].name})", kind="layout")
    if relative and scan is None:
        scan = _scan(co, target)
        plan, lay = _Plan(scan, {}), layout_text(scan, {}, offset3f=offset3f)
    if moves and scan.problems_of("A"):
        a = scan.problems_of("A")[0]
        raise Refusal(f"{a.reason} (in {a.unit}); the object's code cannot move relative to "
                      f"its data", kind="immovable", address=a.address)
    code_maps = {}
    if moves:
        d = text_sec.delta
        code_maps[text_sec.index] = lambda addr, kind, _m=lay.map, _d=d: (
            None if (v := _m(addr, kind)) is None else v + _d)
    amap = AddressMap(layout, code_maps)
    stats: dict[str, int] = {}
    inserted: list = []
    if lay is not None and (moves or lay.slots):
        if lay.starts_of is None:
            lay.starts_of = _snippet_offsets_for(scan.target)
        text, inserted = lay.build()
        if moves:
            stats["getpc_literals_fixed"] = _fix_getpc(scan, lay, text, amap, text_sec.delta)
        by_index[text_sec.index] = text  # (write() reads it, never changes it)
    stats["descriptors_fixed"] = _fix_descriptors(co, layout, amap, by_index) if moves else 0
    out, ws = write(layout, by_index, amap, assemble=assemble)
    result = RewriteResult(out)
    if lay is not None:
        _record_code_changes(result, stats, scan, lay, inserted, text_sec.delta)
    if plan is not None:
        result.refused = sorted(plan.refused.values(), key=lambda r: (r.kernel or "", r.reason))
    stats.update(symbols_fixed=ws.symbols_fixed, dynamic_fixed=ws.dynamic_fixed,
                 relocations_fixed=ws.relocations_fixed, sections_moved=ws.sections_moved,
                 segments_fixed=ws.segments_fixed)
    stats["debug_sections_stale"] = sum(1 for s in layout.secs if s.name.startswith(".debug") and moves)
    result.relocations = stats
    if out is not None:
        CodeObject.from_bytes(out)  # the result must still parse
    return result


def _new_contents(layout: ElfLayout, contents: dict[int | str, bytes]) -> tuple[dict[int, int], dict[int, bytes]]:
    """(new size, new bytes) by section index of the sections ``contents``
    names (by index or name); UsageError for one the object does not have."""
    new_sizes: dict[int, int] = {}
    by_index: dict[int, bytes] = {}
    for key, b in contents.items():
        s = layout.secs[key] if isinstance(key, int) and 0 <= key < len(layout.secs) \
            else layout.section(key) if isinstance(key, str) else None
        if s is None:
            raise UsageError(f"no section {key}")
        new_sizes[s.index] = len(b)
        by_index[s.index] = bytes(b)
    return new_sizes, by_index


def _record_code_changes(result: RewriteResult, stats: dict[str, int], scan: TextScan, lay: TextLayout,
                         inserted: list, d: int) -> None:
    """Put what the code layout did in ``result`` (old -> new addresses,
    inserted and applied edits; ``d``: how far .text itself moved) and its
    counts in ``stats``."""
    result._address_map = (lambda: lay.address_map) if not d else (
        lambda: {a: v + d for a, v in lay.address_map.items()})
    result._starts = lambda: None if (s := lay.starts()) is None else s + d
    result._inserted = lambda: [(a + d, n, r) for a, n, r in inserted]
    result._applied = lambda: [e for i in sorted(lay.slots) for e in lay.slots[i].edits]
    stats["edits_applied"] = lay.edit_count()
    result._origins = lay.origins
    stats["branches_retargeted"] = len(lay.new_simm)
    stats["offset3f_fixed"] = sum(lay.nops3f.values())
    stats["text_growth"] = lay.size - (scan.end - scan.start)


def _rewrite_finalized(co: CodeObject, scan: TextScan | None, lay: TextLayout | None, plan: _Plan | None,
                       contents: dict[int | str, bytes], target: str | None, offset3f: bool, edits: list[Edit],
                       base: bytes, more: dict[int | str, bytes]) -> RewriteResult:
    """The rewrite of ``base`` (``co`` with header-only changes) with the
    ``more`` section contents, reusing the scan and code layout made for
    ``co`` (see :data:`Finalize`); a base whose sections or code differ is
    rewritten from the start."""
    new = CodeObject.from_bytes(base)
    contents = {**contents, **more}
    if not _same_layout(co, new):
        return rewrite(base, target, edits, offset3f=offset3f, section_contents=contents)
    return _write_object(new, scan, lay, plan, contents, target, offset3f)


def _same_layout(a: CodeObject, b: CodeObject) -> bool:
    """Same section and program headers, and the same code?"""
    return a.elf.sections == b.elf.sections and a.elf.segments == b.elf.segments and a.text == b.text


def _fix_getpc(scan: TextScan, lay: TextLayout, text: bytearray, amap: AddressMap, d: int) -> int:
    """Rewrite each getpc pattern's constant for the new distance to its target
    (``d``: how far .text itself moved)."""
    fixed = 0
    base = scan.start
    for gp in scan.getpcs:
        t = gp.target
        if scan.start <= t < scan.end:
            new_t = lay.map(t, "entry")
            if new_t is None:
                a = scan.insts[gp.index].address
                raise Refusal(f"cannot relocate: s_getpc_b64 at {a:#x} refers to {t:#x}, not an "
                              f"instruction", kind="data-target", address=a)
            new_t += d
        else:
            try:
                new_t = amap.map(t, "entry", what="s_getpc_b64 target")
            except Refusal as e:
                raise Refusal(f"{e.reason} (s_getpc_b64 at {scan.insts[gp.index].address:#x})",
                              kind="data-target", address=scan.insts[gp.index].address) from None
        pc = lay.new_address(gp.index) + 4 + d
        if gp.tmp is not None:
            fixed += _fix_long_branch(scan, lay, text, gp, new_t - pc)
            continue
        delta = (new_t - pc) & (2**64 - 1)
        lo, hi = delta & 0xFFFFFFFF, delta >> 32
        add, addc = scan.insts[gp.index + 1], scan.insts[gp.index + 2]
        a_at = lay.new_address(gp.index + 1) - base
        c_at = lay.new_address(gp.index + 2) - base
        changed = False
        if add.literal != lo:
            text[a_at + 4:a_at + 8] = lo.to_bytes(4, "little")
            changed = True
        if gp.hi_literal:
            if addc.literal != hi:
                text[c_at + 4:c_at + 8] = hi.to_bytes(4, "little")
                changed = True
        else:
            code = _inline_code(hi)
            if code is None:
                raise Refusal(f"cannot relocate: s_addc_u32 at {addc.address:#x} holds an inline "
                              f"constant and the new high half {hi:#x} is not one", kind="pc-relative",
                              address=addc.address)
            f = "ssrc1" if addc.field("ssrc0") == gp.reg + 1 else "ssrc0"
            if addc.field(f) != code:
                text[c_at:c_at + 4] = encode(addc, **{f: code})
                changed = True
        fixed += changed
    return fixed


def _fix_long_branch(scan: TextScan, lay: TextLayout, text: bytearray, gp, offset: int) -> int:
    """Rewrite the literal of Tensile's long branch (``s_add_i32 sT, LIT, C``)
    for the new ``offset`` from the pc to the target; 1 if it changed.  The
    offset is added as a zero-extended 32-bit value, so it must stay in
    [0, 2**32)."""
    imm = scan.insts[gp.index + 1]
    if not 0 <= offset < 1 << 32:
        raise Refusal(f"cannot relocate: Tensile's long branch at {imm.address:#x} adds an unsigned 32-bit "
                      f"offset, and its target would now be {offset:+#x} away", kind="pc-relative",
                      address=imm.address)
    lit = (offset - gp.addend) & 0xFFFFFFFF
    if imm.literal == lit:
        return 0
    at = lay.new_address(gp.index + 1) - scan.start
    text[at + 4:at + 8] = lit.to_bytes(4, "little")
    return 1


def _inline_code(value: int) -> int | None:
    """The inline-constant encoding of the 32-bit ``value`` read as signed, or None."""
    return inline_code(value - (1 << 32) if value & 0x80000000 else value)


def _fix_descriptors(co: CodeObject, layout: ElfLayout, amap: AddressMap,
                     by_index: dict[int, bytes]) -> int:
    """Point every kernel descriptor's KERNEL_CODE_ENTRY_BYTE_OFFSET at its moved entry."""
    fixed = 0
    edited: dict[int, bytearray] = {}
    holding = [x for x in layout.secs if x.file_size]
    s = None
    for k in co.kernels:
        at = k.descriptor_offset
        if s is None or not s.offset <= at < s.offset + s.size:  # (sections do not overlap in the file)
            s = next((x for x in holding if x.offset <= at < x.offset + x.size), None)
        if s is None:
            raise Refusal(f"cannot relocate: descriptor {k.symbol} is in no section", kind="layout")
        new_kd = k.descriptor_vaddr + s.delta
        new_entry = amap.map(k.entry, "entry", what=f"entry of {k.name}")
        value = new_entry - new_kd
        if value == k.descriptor.kernel_code_entry_byte_offset:
            continue
        buf = edited.get(s.index)
        if buf is None:
            buf = edited[s.index] = bytearray(by_index.get(s.index, layout.contents(s.index)))
        at = k.descriptor_offset - s.offset + 16
        buf[at:at + 8] = value.to_bytes(8, "little", signed=True)
        fixed += 1
    for i, b in edited.items():
        by_index[i] = bytes(b)
    return fixed

