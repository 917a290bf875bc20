"""The new ``.text``: where every instruction goes, and its bytes.

Each original instruction becomes a *group*: the code inserted before it,
its own bytes (or its replacement), ``s_nop 0`` words the Offset3fBug fix
put after a branch, then the code inserted after it.  A branch or call to
an instruction lands on the start of that instruction's group (on the
mitigation placed in front of it); ``address_map`` gives where the
instruction itself went.

Units keep their order.  A unit moves by a multiple of its alignment (so a
kernel entry stays 256-byte aligned) and only as far as the unit before it
needs; the ``s_code_end`` run after a module's last function moves with it
unchanged and the alignment fill between functions shrinks or grows.

:func:`layout_text` runs the Offset3fBug fixpoint: on gfx1010 a SOPP branch
whose offset is 0x3f misbehaves, so when relocation gives a branch that
offset, an ``s_nop 0`` goes right after it (the offset becomes 0x40), which
moves code again, until no relocated branch has 0x3f.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from kpatch.isa import build
from kpatch.isa.columnlist import addresses_of, sizes_of
from kpatch.isa.formats import SOPP
from kpatch.analysis.codescan import TextScan
from kpatch.analysis.facts import FACTS
from kpatch.rewrite.edits import Slot

OFFSET3F = 0x3F
NOP = build.s_nop(0)


def _put_edits(out: bytearray, base: int, pos: int, edits, put) -> int:
    """Write the code of ``edits`` one after the other at ``pos`` (an address;
    ``out`` starts at ``base``), ``put`` each piece as (address, code, rule);
    the address after them."""
    for e in edits:
        code = e.code
        out[pos - base:pos - base + len(code)] = code
        put((pos, code, e.rule))
        pos += len(code)
    return pos


@dataclass
class TextLayout:
    """New addresses of every instruction, unit and gap of ``.text``."""

    scan: TextScan
    slots: dict[int, Slot]  # instruction index -> its edits
    nops3f: dict[int, int]  # instruction index -> s_nop 0 words after it
    unit_start: list[int] = field(default_factory=list)
    unit_end: list[int] = field(default_factory=list)
    gap_start: list[int] = field(default_factory=list)
    gap_len: list[int] = field(default_factory=list)
    end: int = 0  # new end address of .text
    new_simm: dict[int, int] = field(default_factory=dict)  # branch index -> new signed offset
    out_of_range: list[int] = field(default_factory=list)  # branch indices
    # per instruction: its group's start and where the instruction (or its
    # replacement) goes; :attr:`landing` and :attr:`new_addr` as lists
    landing_array: np.ndarray | None = field(default=None, repr=False, compare=False)
    new_addr_array: np.ndarray | None = field(default=None, repr=False, compare=False)
    _lists: dict = field(default_factory=dict, repr=False, compare=False)
    _built: tuple | None = field(default=None, repr=False, compare=False)  # what build() made
    #: the offsets of the instructions in a piece of inserted code (bytes ->
    #: tuple of ints; None: not known), for :meth:`starts`; set by the rewriter
    starts_of: Callable[[bytes], tuple[int, ...] | None] | None = field(default=None, repr=False, compare=False)
    _amap: dict | None = field(default=None, repr=False, compare=False)
    _edit_count: int | None = field(default=None, repr=False, compare=False)

    @property
    def size(self) -> int:
        return self.end - self.scan.start

    @property
    def landing(self) -> list[int]:
        """Group start of every instruction (made on first use: the
        Offset3fBug fixpoint places the code several times and only the last
        layout is read)."""
        return self._list("landing_array")

    @property
    def new_addr(self) -> list[int]:
        """New address of every instruction (made on first use, as :attr:`landing`)."""
        return self._list("new_addr_array")

    def _list(self, name: str) -> list[int]:
        got = self._lists.get(name)
        if got is None:
            got = self._lists[name] = getattr(self, name).tolist()
        return got

    # -- mapping -----------------------------------------------------------------
    def map(self, addr: int, kind: str = "entry") -> int | None:
        """New address of old ``.text`` address ``addr`` (None: not a place kpatch can map).

        kind ``entry``: where control (or a pointer) to ``addr`` now lands;
        ``inst``: the instruction itself; ``end``: one past an object ending at ``addr``.
        """
        sc = self.scan
        if kind == "end":
            ui = self._unit_ending.get(addr)
            if ui is not None:
                return self.unit_end[ui]
        i = sc.index_at.get(addr)
        if i is not None:
            return int((self.new_addr_array if kind == "inst" else self.landing_array)[i])
        ui = self._unit_ending.get(addr)
        if ui is not None:  # a label right after a function's last instruction
            return self.unit_end[ui]
        if addr == sc.end:
            return self.end
        for gi, g in enumerate(sc.gaps):
            if g.start <= addr < g.end:
                off = addr - g.start
                if off < g.rigid or (off < self.gap_len[gi] and self.gap_len[gi] == g.end - g.start):
                    return self.gap_start[gi] + off
                return None
        return None

    @property
    def _unit_ending(self) -> dict[int, int]:
        d = getattr(self, "_ue", None)
        if d is None:
            d = self._ue = {u.end: ui for ui, u in enumerate(self.scan.units)}
        return d

    @property
    def address_map(self) -> dict[int, int]:
        """Old address -> new address of every original instruction (made
        once; not to be changed)."""
        if self._amap is None:
            self._amap = dict(zip(_address_array(self.scan).tolist(), self.new_addr_array.tolist()))
        return self._amap

    def edit_count(self) -> int:
        """How many edits the layout applies (worked out once)."""
        n = self._edit_count
        if n is None:
            n = self._edit_count = sum(s.count() for s in self.slots.values())
        return n

    def new_address(self, i: int) -> int:
        """New address of instruction ``i`` (:attr:`new_addr` without making the list)."""
        return int(self.new_addr_array[i])

    def moved(self) -> bool:
        """Did any instruction change address?"""
        return self.end != self.scan.end or not np.array_equal(self.new_addr_array, _address_array(self.scan))

    # -- bytes ---------------------------------------------------------------------
    def build(self) -> tuple[bytearray, list[tuple[int, int, str]]]:
        """New ``.text`` bytes (branches retargeted; getpc literals not yet) and the
        inserted code as (new address, size, rule): made once, a fresh copy
        for each caller (the object may be written more than once with the
        same code layout)."""
        if self._built is None:
            text, inserted, inside = self._build()
            self._built = bytes(text), inserted, inside
        return bytearray(self._built[0]), list(self._built[1])

    def starts(self) -> np.ndarray | None:
        """The new address of every instruction of the units (candidates in no
        particular order, some repeated): each original instruction's (or its
        replacement's first), and those in inserted code, replacements and
        Offset3fBug nops; None when :attr:`starts_of` is not set or could not
        tell the instructions of some inserted code."""
        if self._built is None:
            self.build()
        inside = self._built[2]
        if inside is None:
            return None
        return np.concatenate((self.new_addr_array, np.array(inside, dtype=np.int64)))

    def origins(self) -> np.ndarray | None:
        """Aligned with :meth:`starts`: the old address of the original
        instruction placed at each start (its own, or its replacement's
        first: a candidate, see :func:`kpatch.isa.decodememo.expect_starts`),
        -1 for the instructions of inserted code; None when :meth:`starts` is."""
        if self._built is None:
            self.build()
        inside = self._built[2]
        if inside is None:
            return None
        return np.concatenate((_address_array(self.scan), np.full(len(inside), -1, dtype=np.int64)))

    def _build(self) -> tuple[bytearray, list[tuple[int, int, str]], list[int] | None]:
        sc = self.scan
        base = sc.start
        out = bytearray(self.size)
        for gi, g in enumerate(sc.gaps):
            n = self.gap_len[gi]
            raw = g.data[:min(n, len(g.data))]
            if n > len(raw):
                raw += g.fill_word * ((n - len(raw)) // 4)
            at = self.gap_start[gi] - base
            out[at:at + n] = raw
        data = sc.data
        order = _marked(self.slots, self.nops3f)
        marked = _marked_units(sc, order)
        for ui, u in enumerate(sc.units):
            if ui not in marked:  # no edits: the unit moves whole
                at = self.unit_start[ui] - base
                out[at:at + (u.end - u.start)] = data[u.start - base:u.end - base]
        placed = []
        if marked:
            self._copy_runs(out, marked)
            placed = self._place_inserted(out, order)
        self._retarget_branches(out)
        inserted = [(pos, len(code), rule) for pos, code, rule in placed]
        inserted.sort()
        return out, inserted, self._starts_in(placed)

    def _copy_runs(self, out: bytearray, marked: set[int]) -> None:
        """Copy the original bytes of the instructions of the ``marked`` units
        (those with edits or nops) that are not replaced, a run at a time: a
        run is consecutive instructions of one unit that lie one after the
        other both in the old code and in the new (no code inserted
        between), found with numpy over the units' columns."""
        sc = self.scan
        _, _, every, unit, _ = _unit_columns(sc)
        sel = _in_units(sc, marked)
        idx, unit = every[sel], unit[sel]
        if not len(idx):
            return
        addr, end, new = _address_array(sc)[idx], _end_array(sc)[idx], self.new_addr_array[idx]
        replaced = [i for i, s in self.slots.items() if s.replace is not None]
        kept = ~np.isin(idx, replaced) if replaced else np.ones(len(idx), dtype=bool)
        # instruction k and k + 1 are one run: same unit, both kept, adjacent in the old and in the new code
        joined = (kept[:-1] & kept[1:] & (unit[:-1] == unit[1:]) & (end[:-1] == addr[1:])
                  & (new[:-1] + (end[:-1] - addr[:-1]) == new[1:]))
        starts = np.flatnonzero(np.concatenate(([True], ~joined)) & kept)
        stops = np.flatnonzero(np.concatenate((~joined, [True])) & kept)
        base = sc.start
        data = sc.data
        for a, b, at in zip((addr[starts] - base).tolist(), (end[stops] - base).tolist(),
                            (new[starts] - base).tolist()):
            out[at:at + (b - a)] = data[a:b]

    def _place_inserted(self, out: bytearray, marked: list[int]) -> list[tuple[int, bytes, str]]:
        """Write the code of every instruction's group that is not its own
        bytes (code inserted before and after it, its replacement,
        Offset3fBug nops) at the ``marked`` instructions (sorted); return
        each piece as (new address, code, rule)."""
        base = self.scan.start
        at = np.asarray(marked, dtype=np.int64)
        landing = self.landing_array[at].tolist()
        sizes = (_end_array(self.scan)[at] - _address_array(self.scan)[at]).tolist()
        slots, nops3f = self.slots, self.nops3f
        placed: list[tuple[int, bytes, str]] = []
        put = placed.append
        nops_at = nops3f.get if nops3f else None
        for i, pos, size in zip(marked, landing, sizes):
            slot = slots.get(i)
            if slot is not None:
                if slot.before:
                    pos = _put_edits(out, base, pos, slot.before, put)
                r = slot.replace
                if r is not None:
                    body = bytes(r.code)
                    if body:
                        out[pos - base:pos - base + len(body)] = body
                        put((pos, body, r.rule))
                    pos += len(body)
                else:
                    pos += size
            else:
                pos += size
            if nops_at is not None:
                for _ in range(nops_at(i, 0)):
                    out[pos - base:pos - base + 4] = NOP
                    put((pos, NOP, "offset3f"))
                    pos += 4
            if slot is not None and slot.after:
                pos = _put_edits(out, base, pos, slot.after, put)
        return placed

    def _starts_in(self, placed: list[tuple[int, bytes, str]]) -> list[int] | None:
        """The instructions in the ``placed`` pieces of code (:meth:`_place_inserted`),
        by :attr:`starts_of` (asked once per distinct piece); None when it is not
        set or does not know a piece's."""
        starts_of = self.starts_of
        if starts_of is None:
            return None
        known: dict = {NOP: (0,)}  # (an Offset3fBug nop is one instruction)
        inside: list[int] = []
        for pos, code, _ in placed:
            if type(code) is not bytes:  # (an edit's code may be a bytearray)
                code = bytes(code)
            offsets = known.get(code)
            if offsets is None:
                offsets = known[code] = starts_of(code)
                if offsets is None:
                    return None
            if len(offsets) == 1:
                inside.append(pos + offsets[0])
            else:
                inside += [pos + o for o in offsets]
        return inside

    def _retarget_branches(self, out: bytearray) -> None:
        """Give every branch and call of :attr:`new_simm` its new offset in
        ``out`` (the new ``.text``, where each one's own bytes already lie: a
        replaced one has no new offset).  SOPP branches keep simm16 in the
        low half of their first dword: those two bytes are written for all
        of them at once with numpy; the others (calls) go through
        :func:`_with_simm16`."""
        if not self.new_simm:
            return
        sc = self.scan
        at, _, _, sopp = _branch_table(sc)
        idx = np.fromiter(self.new_simm, dtype=np.int64, count=len(self.new_simm))
        simm = np.fromiter(self.new_simm.values(), dtype=np.int64, count=len(idx))
        plain = sopp[np.searchsorted(at, idx)] if _increasing(at) else np.zeros(len(idx), bool)
        pos = self.new_addr_array[idx] - sc.start
        view = np.frombuffer(out, dtype=np.uint8)
        view[pos[plain]] = simm[plain] & 0xFF
        view[pos[plain] + 1] = (simm[plain] >> 8) & 0xFF
        del view
        for k in np.flatnonzero(~plain).tolist():
            ins = sc.insts[int(idx[k])]
            a = int(pos[k])
            out[a:a + ins.size] = _with_simm16(ins, int(simm[k]))


def _increasing(a: np.ndarray) -> bool:
    return bool(len(a) < 2 or (a[1:] > a[:-1]).all())


def _with_simm16(ins, simm: int) -> bytes:
    """The bytes of a branch or call with a new offset: what ``encode(ins,
    simm16=...)`` gives, without re-packing every field (there can be tens
    of thousands)."""
    fmt = ins.d.fmt
    raw = ins.raw
    v = fmt.field("simm16").put(int.from_bytes(raw[:fmt.size], "little"), simm & 0xFFFF)
    return v.to_bytes(fmt.size, "little") + raw[fmt.size:]


def _address_array(scan: TextScan) -> np.ndarray:
    """Old address of every instruction (the scan's own column, else worked out once per scan)."""
    at = getattr(scan.index_at, "addresses", None)  # (the scan's own column: codescan.AddressIndex)
    if at is not None and len(at) == len(scan.insts):
        return at
    return _cached(scan, "_kp_address_array", lambda: addresses_of(scan.insts))


def _end_array(scan: TextScan) -> np.ndarray:
    """Old end address of every instruction (worked out once per scan; see
    :func:`instruction_ends`)."""
    return _cached(scan, "_kp_end_array", lambda: _address_array(scan) + _sizes(scan))


def instruction_ends(scan: TextScan) -> None:
    """Work out the end address of every instruction of ``scan`` now, while
    its analysis' encoding ids (:attr:`TextScan.known`) are there: then
    each one's size is its encoding's (a column per encoding), not read
    from each instruction."""
    _end_array(scan)


def _sizes(scan: TextScan) -> np.ndarray:
    """The size in bytes of every instruction: by its encoding id when the
    scan holds the analysis' ids of exactly these instructions (an eid is
    a function of the bytes, and encodings given one eid have one size),
    else read from each instruction."""
    eids = scan.eids()
    if eids is not None:
        return FACTS.column("size")[eids]
    return sizes_of(scan.insts)


def instruction_indices(scan: TextScan, addresses: np.ndarray) -> np.ndarray:
    """The instruction index of each of ``addresses`` (each starts an instruction)."""
    ix = scan.index_at
    if hasattr(ix, "indices"):
        return ix.indices(addresses)
    return np.fromiter(map(ix.__getitem__, addresses.tolist()), dtype=np.int64, count=len(addresses))


def _cached(scan: TextScan, key: str, make):
    """A per-instruction table of ``scan``, made once (and again if the
    instructions changed in number)."""
    v = scan.__dict__.get(key)
    if v is None or len(v) != len(scan.insts):
        v = scan.__dict__[key] = make()
    return v


def _marked(slots: dict[int, Slot], nops3f: dict[int, int]) -> list[int]:
    """The instructions (sorted) that have edits or Offset3f nops."""
    return sorted(set(slots) | set(nops3f)) if nops3f else sorted(slots)


def _marked_units(scan: TextScan, marked: list[int]) -> set[int]:
    """The units of the ``marked`` instructions."""
    unit_of = scan.unit_of
    return {unit_of[i] for i in marked}


def _place(scan: TextScan, slots: dict[int, Slot], nops3f: dict[int, int],
           sizes: tuple[np.ndarray, np.ndarray]) -> TextLayout:
    """Where every group, instruction and unit goes (``sizes``: what
    :func:`_slot_sizes` gives for ``slots``).  A unit without edits or nops
    moves whole; in the others each group follows the one before (positions
    are running sums over the group sizes).  The units are placed one after
    the other (a unit's start depends on where the one before ends), then
    every instruction's addresses are worked out at once with numpy: this
    runs for every round of the Offset3fBug fixpoint."""
    lay = TextLayout(scan, slots, nops3f)
    group, before = sizes
    if nops3f:
        group = group.copy()
        for i, k in nops3f.items():
            group[i] += 4 * k
    # offset of each group from the start of the code: running sum, exclusive
    total = np.cumsum(group)
    offset = total - group
    first, count, idx, _, whole = _unit_columns(scan)
    # the size of each unit's groups together (what a marked unit becomes)
    grown = (np.concatenate(([0], total))[first + count] - offset[np.minimum(first, len(group) - 1)]
             if len(group) else np.zeros(len(first), dtype=np.int64)).tolist()
    marked = _marked_units(scan, _marked(slots, nops3f))
    shift = []  # per unit: new start - old start (unmarked), new start - offset of its first group (marked)
    pos = scan.start
    for ui, u in enumerate(scan.units):
        g = scan.gaps[ui]
        lay.gap_start.append(pos)
        need = pos + g.rigid
        start = u.start + _align_up(max(0, need - u.start), u.align)
        lay.gap_len.append(start - pos)
        lay.unit_start.append(start)
        if ui not in marked:
            shift.append(start - u.start)
            pos = u.end + (start - u.start)
        elif u.count:
            shift.append(start - int(offset[u.first]))
            pos = start + grown[ui]
        else:
            shift.append(0)
            pos = start
        lay.unit_end.append(pos)
    tail = scan.gaps[-1]
    lay.gap_start.append(pos)
    lay.gap_len.append(len(tail.data))
    lay.end = pos + len(tail.data)
    landing = np.empty(len(group), dtype=np.int64)
    if len(idx):
        at = slice(None) if whole else idx
        landing[at] = np.where(_in_units(scan, marked), offset[at], _address_array(scan)[at])
        landing[at] += np.repeat(np.asarray(shift, dtype=np.int64), count)
    # (code is inserted before an instruction only in the marked units)
    lay.landing_array, lay.new_addr_array = landing, landing + before
    return lay


def _unit_columns(scan: TextScan) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
    """Of every unit: the index of its first instruction and its number of
    instructions; of every instruction of the units, unit after unit: its
    index and its unit's; and whether that list is every instruction in
    order (then a whole column stands for it).  Worked out once per scan."""
    def make():
        n = len(scan.units)
        first = np.fromiter((u.first for u in scan.units), dtype=np.int64, count=n)
        count = np.fromiter((u.count for u in scan.units), dtype=np.int64, count=n)
        begins = np.cumsum(count) - count
        every = np.arange(int(count.sum()), dtype=np.int64) + np.repeat(first - begins, count)
        whole = bool(np.array_equal(every, np.arange(len(scan.insts), dtype=np.int64)))
        return first, count, every, np.repeat(np.arange(n, dtype=np.int64), count), whole
    t = scan.__dict__.get("_kp_unit_columns")
    if t is None or len(t[0]) != len(scan.units):
        t = scan.__dict__["_kp_unit_columns"] = make()
    return t


def _in_units(scan: TextScan, units: set[int]) -> np.ndarray:
    """For every instruction of :func:`_unit_columns`' list: is it in one of ``units``?"""
    first, _, _, unit, _ = _unit_columns(scan)
    mask = np.zeros(len(first), dtype=bool)
    mask[list(units)] = True
    return mask[unit]


def _slot_sizes(scan: TextScan, slots: dict[int, Slot]) -> tuple[np.ndarray, np.ndarray]:
    """The size of every instruction's group without Offset3fBug nops (its
    inserted code and its own or replaced bytes) and of the code inserted
    before it."""
    size = _end_array(scan) - _address_array(scan)
    group = size.copy()
    before = np.zeros(len(group), dtype=np.int64)
    if not slots:
        return group, before
    sizes_before, added = [], []  # (one numpy assignment for all slots, not two per slot)
    replaced: list[tuple[int, int]] = []  # (index, size of its replacement)
    for i, slot in slots.items():
        b = slot.before_size()
        sizes_before.append(b)
        added.append(b + slot.after_size())
        if slot.replace is not None:
            replaced.append((i, len(slot.replace.code)))
    at = np.fromiter(slots, dtype=np.int64, count=len(slots))
    before[at] = sizes_before
    group[at] += np.asarray(added, dtype=np.int64)
    for i, n in replaced:
        group[i] += n - size[i]
    return group, before


def _align_up(v: int, a: int) -> int:
    return (v + a - 1) // a * a


def _retarget(lay: TextLayout) -> list[int]:
    """Compute new branch offsets; return SOPP branches that now need the Offset3f fix."""
    at, to, old, sopp = _branch_table(lay.scan)
    keep = np.ones(len(at), dtype=bool)
    replaced = [i for i, s in lay.slots.items() if s.replace is not None]
    if replaced:  # (edits on PC-relative instructions are refused earlier)
        keep &= ~np.isin(at, replaced)
    simm = (lay.landing_array[to] - (lay.new_addr_array[at] + 4)) // 4
    out = keep & ((simm < -0x8000) | (simm > 0x7FFF))
    ok = keep & ~out
    lay.out_of_range = at[out].tolist()
    changed = ok & ((simm & 0xFFFF) != old)
    lay.new_simm = dict(zip(at[changed].tolist(), simm[changed].tolist()))
    return at[ok & sopp & (simm == OFFSET3F) & (old != OFFSET3F)].tolist()


def _branch_table(scan: TextScan) -> tuple[np.ndarray, ...]:
    """Of every branch and call (in ``scan.branches`` order): its index, its
    target's index, its simm16 and whether it is a SOPP branch (worked out
    once per scan)."""
    t = scan.__dict__.get("_kp_branch_table")
    if t is None or len(t[0]) != len(scan.branches):
        at = np.fromiter(scan.branches, dtype=np.int64, count=len(scan.branches))
        # from each one's first dword: simm16 is its low half (SOPP and
        # SOPK alike); the branches are the SOPP ones, s_call_b64 is SOPK
        words = np.frombuffer(scan.data, dtype="<u4", count=len(scan.data) // 4)
        first = words[(_address_array(scan)[at] - scan.start) >> 2].astype(np.int64)
        t = scan.__dict__["_kp_branch_table"] = (
            at,
            instruction_indices(scan, np.fromiter(scan.branches.values(), dtype=np.int64, count=len(scan.branches))),
            first & 0xFFFF,
            (first & SOPP.match_mask) == SOPP.match_value)
    return t


def layout_text(scan: TextScan, slots: dict[int, Slot], *, offset3f: bool = True,
                max_rounds: int = 1000) -> TextLayout:
    """Place every instruction; with ``offset3f``, run the Offset3fBug fixpoint."""
    nops3f: dict[int, int] = {}
    sizes = _slot_sizes(scan, slots)
    for _ in range(max_rounds):
        lay = _place(scan, slots, nops3f, sizes)
        need = _retarget(lay)
        if not offset3f or not need:
            return lay
        for i in need:
            nops3f[i] = nops3f.get(i, 0) + 1
    raise RuntimeError("Offset3f fixpoint did not converge")  # pragma: no cover - monotone
