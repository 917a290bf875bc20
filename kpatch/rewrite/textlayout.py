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

from kpatch.isa import build, encode
from kpatch.rewrite.codescan import TextScan
from kpatch.rewrite.edits import Slot

OFFSET3F = 0x3F
NOP = build.s_nop(0)


@dataclass
class TextLayout:
    """New addresses of every instruction, unit and gap of ``.text``."""

    scan: TextScan
    slots: dict[int, Slot]  # instruction index -> its edits
    nops3f: dict[int, int]  # instruction index -> s_nop 0 words after it
    landing: list[int] = field(default_factory=list)  # group start
    new_addr: list[int] = field(default_factory=list)  # the instruction (or its replacement)
    group_end: list[int] = field(default_factory=list)
    unit_start: list[int] = field(default_factory=list)
    unit_end: list[int] = field(default_factory=list)
    gap_start: list[int] = field(default_factory=list)
    gap_len: list[int] = field(default_factory=list)
    end: int = 0  # new end address of .text
    new_simm: dict[int, int] = field(default_factory=dict)  # branch index -> new signed offset
    out_of_range: list[int] = field(default_factory=list)  # branch indices

    @property
    def size(self) -> int:
        return self.end - self.scan.start

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
            return self.new_addr[i] if kind == "inst" else self.landing[i]
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
        """Old address -> new address of every original instruction."""
        return dict(zip(_addresses(self.scan), self.new_addr))

    def moved(self) -> bool:
        """Did any instruction change address?"""
        return self.new_addr != _addresses(self.scan) or self.end != self.scan.end

    # -- bytes ---------------------------------------------------------------------
    def build(self) -> tuple[bytearray, list[tuple[int, int, str]]]:
        """New ``.text`` bytes (branches retargeted; getpc literals not yet) and the
        inserted code as (new address, size, rule)."""
        sc = self.scan
        base = sc.start
        out = bytearray(self.size)
        inserted: list[tuple[int, int, str]] = []
        for gi, g in enumerate(sc.gaps):
            n = self.gap_len[gi]
            raw = g.data[:min(n, len(g.data))]
            if n > len(raw):
                raw += g.fill_word * ((n - len(raw)) // 4)
            at = self.gap_start[gi] - base
            out[at:at + n] = raw
        insts = sc.insts
        data = sc.data
        addrs, ends = _addresses(sc), _ends(sc)
        marked = _marked_by_unit(sc, self.slots, self.nops3f)
        whole_runs = _contiguous(sc)
        for ui, u in enumerate(sc.units):
            at = self.unit_start[ui] - base
            here = marked.get(ui)
            if not here:
                out[at:at + (u.end - u.start)] = data[u.start - base:u.end - base]
                continue
            if not whole_runs:
                here = list(range(u.first, u.last + 1))
            run = u.first  # instructions from run up to the next marked one keep their bytes
            for i in here + [u.last + 1]:
                if i > run:  # unmarked and contiguous: placed one after the other, unchanged
                    a, b = addrs[run] - base, ends[i - 1] - base
                    pos = self.landing[run] - base
                    out[pos:pos + (b - a)] = data[a:b]
                if i > u.last:
                    break
                run = i + 1
                ins = insts[i]
                slot = self.slots.get(i)
                pos = self.landing[i] - base
                if slot is not None:
                    for e in slot.before:
                        out[pos:pos + len(e.code)] = e.code
                        inserted.append((base + pos, len(e.code), e.rule))
                        pos += len(e.code)
                    body = slot.body(ins.raw)
                    if slot.replace is not None and body:
                        inserted.append((base + pos, len(body), slot.replace.rule))
                else:
                    body = ins.raw
                out[pos:pos + len(body)] = body
                pos += len(body)
                for _ in range(self.nops3f.get(i, 0)):
                    out[pos:pos + 4] = NOP
                    inserted.append((base + pos, 4, "offset3f"))
                    pos += 4
                if slot is not None:
                    for e in slot.after:
                        out[pos:pos + len(e.code)] = e.code
                        inserted.append((base + pos, len(e.code), e.rule))
                        pos += len(e.code)
        for i, simm in self.new_simm.items():
            ins = insts[i]
            at = self.new_addr[i] - base
            out[at:at + ins.size] = encode(ins, simm16=simm & 0xFFFF)
        inserted.sort()
        return out, inserted


def _addresses(scan: TextScan) -> list[int]:
    """Old address of every instruction (worked out once per scan)."""
    a = scan.__dict__.get("_kp_addresses")
    if a is None or len(a) != len(scan.insts):
        a = scan.__dict__["_kp_addresses"] = [ins.address for ins in scan.insts]
    return a


def _ends(scan: TextScan) -> list[int]:
    """Old end address of every instruction (worked out once per scan)."""
    e = scan.__dict__.get("_kp_ends")
    if e is None or len(e) != len(scan.insts):
        e = scan.__dict__["_kp_ends"] = [ins.address + ins.size for ins in scan.insts]
    return e


def _contiguous(scan: TextScan) -> bool:
    """Does every instruction of a unit start where the one before it ends?"""
    c = scan.__dict__.get("_kp_contiguous")
    if c is None:
        a, e = _addresses(scan), _ends(scan)
        c = all(e[i] == a[i + 1] for u in scan.units for i in range(u.first, u.first + u.count - 1))
        scan.__dict__["_kp_contiguous"] = c
    return c


def _marked_by_unit(scan: TextScan, slots: dict[int, Slot], nops3f: dict[int, int]) -> dict[int, list[int]]:
    """Unit index -> its instructions (sorted) that have edits or Offset3f nops."""
    unit_of = scan.unit_of
    out: dict[int, list[int]] = {}
    for i in sorted(set(slots) | set(nops3f)):
        out.setdefault(unit_of[i], []).append(i)
    return out


def _place(scan: TextScan, slots: dict[int, Slot], nops3f: dict[int, int]) -> TextLayout:
    lay = TextLayout(scan, slots, nops3f)
    insts = scan.insts
    n = len(insts)
    addrs = _addresses(scan)
    ends = _ends(scan)
    marked = _marked_by_unit(scan, slots, nops3f)
    landing = [0] * n
    new_addr = [0] * n
    group_end = [0] * n
    pos = scan.start
    for ui, u in enumerate(scan.units):
        g = scan.gaps[ui]
        lay.gap_start.append(pos)
        need = pos + g.rigid
        start = u.start + _align_up(max(0, need - u.start), u.align)
        lay.gap_len.append(start - pos)
        lay.unit_start.append(start)
        first, last = u.first, u.last
        if ui not in marked:
            shift = start - u.start
            if u.count:
                moved = [a + shift for a in addrs[first:last + 1]]
                landing[first:last + 1] = moved
                new_addr[first:last + 1] = moved
                group_end[first:last + 1] = [e + shift for e in ends[first:last + 1]]
            pos = u.end + shift
        else:
            p = start
            for i in range(first, last + 1):
                ins = insts[i]
                landing[i] = p
                slot = slots.get(i)
                if slot is None:
                    new_addr[i] = p
                    p += ins.size
                else:
                    p += len(slot.before_code())
                    new_addr[i] = p
                    p += len(slot.body(ins.raw)) + len(slot.after_code())
                p += 4 * nops3f.get(i, 0)
                group_end[i] = p
            pos = p
        lay.unit_end.append(pos)
    tail = scan.gaps[-1]
    lay.gap_start.append(pos)
    lay.gap_len.append(len(tail.data))
    lay.end = pos + len(tail.data)
    lay.landing, lay.new_addr, lay.group_end = landing, new_addr, group_end
    return lay


def _align_up(v: int, a: int) -> int:
    return (v + a - 1) // a * a


def _retarget(lay: TextLayout) -> list[int]:
    """Compute new branch offsets; return SOPP branches that now need the Offset3f fix."""
    sc = lay.scan
    insts = sc.insts
    lay.new_simm = {}
    lay.out_of_range = []
    need3f = []
    for i, t in sc.branches.items():
        slot = lay.slots.get(i)
        if slot is not None and slot.replace is not None:
            continue  # replaced (edits on PC-relative instructions are refused earlier)
        ins = insts[i]
        old = ins.field("simm16")
        delta = lay.landing[sc.index_at[t]] - (lay.new_addr[i] + 4)
        simm = delta // 4
        if not -0x8000 <= simm <= 0x7FFF:
            lay.out_of_range.append(i)
            continue
        if (simm & 0xFFFF) != old:
            lay.new_simm[i] = simm
        if ins.is_branch and simm == OFFSET3F and old != OFFSET3F:
            need3f.append(i)
    return need3f


def layout_text(scan: TextScan, slots: dict[int, Slot], *, offset3f: bool = True,
                max_rounds: int = 1000) -> TextLayout:
    """Place every instruction; with ``offset3f``, run the Offset3fBug fixpoint."""
    nops3f: dict[int, int] = {}
    for _ in range(max_rounds):
        lay = _place(scan, slots, nops3f)
        need = _retarget(lay)
        if not offset3f or not need:
            return lay
        for i in need:
            nops3f[i] = nops3f.get(i, 0) + 1
    raise RuntimeError("Offset3f fixpoint did not converge")  # pragma: no cover - monotone
