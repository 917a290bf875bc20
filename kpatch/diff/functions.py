"""The code of a code object cut into units a diff compares one by one.

A *unit* is a function's byte range in ``.text`` (a kernel or a device
function, as :meth:`~kpatch.codeobject.CodeObject.function_extents` bounds
it), decoded the way
``llvm-objdump -d`` decodes it; an object without function symbols is one
unit, the whole ``.text``.  Units are matched between two objects by name.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

from kpatch.codeobject import CodeObject
from kpatch.isa import disassemble
from kpatch.isa.instruction import Instruction
from kpatch.isa.lines import disassemble_columns
from kpatch.isa.tables import table_for

WHOLE_TEXT = ".text"


@dataclass
class DiffUnit:
    """One function (or the whole ``.text``): its name, whether it is a
    kernel, its address range and its instructions."""

    name: str
    kind: str  # "kernel", "function" or "section"
    start: int
    end: int
    insts: list = field(default_factory=list)
    #: (addresses, Decoded) of its instructions when decoded as columns
    #: (:func:`units` with ``columns=True``): :meth:`load` makes ``insts``
    columns: tuple | None = None

    @property
    def size(self) -> int:
        return self.end - self.start

    def load(self) -> list:
        """``insts``, made from ``columns`` when they are not there yet."""
        if not self.insts and self.columns is not None:
            addrs, ds = self.columns
            if not isinstance(addrs, list):
                addrs = addrs.tolist()
            self.insts = list(map(Instruction, addrs, ds))
        return self.insts

    def unload(self) -> None:
        """Drop the instruction objects (``columns`` stay): one function at a
        time holds them."""
        if self.columns is not None:
            self.insts = []


def decode_target(co: CodeObject, override: str | None = None) -> str | None:
    """The ISA table to decode ``co`` with: ``override``, else the object's
    own processor when kpatch has its table, else None (not decodable)."""
    if override:
        return override
    return table_for(co.target.processor if co.target is not None else None)


def text_symbols(co: CodeObject) -> list[tuple[int, str]]:
    """(address, name) of symbols inside ``.text`` where llvm-objdump restarts decoding."""
    text = co.section(".text")
    if text is None:
        return []
    out: dict[int, str] = {}
    for s in co.symbols():
        if (s.name and text.addr <= s.value < text.addr + text.size and s.type in (0, 1, 2)
                and not s.name.startswith("$")):
            out.setdefault(s.value, s.name)
    return sorted(out.items())


def units(co: CodeObject, target: str | None, *, columns: bool = False) -> list[DiffUnit]:
    """The units of ``co``; instructions are decoded when ``target`` is given
    (``columns``: kept as columns, one address and one shared
    :class:`~kpatch.isa.instruction.Decoded` per instruction, until
    :meth:`DiffUnit.load`; a whole Tensile library's instruction objects do
    not fit in memory beside its diff).  The same instructions either way:
    ``.text`` is decoded once, as llvm-objdump does, and cut by address."""
    text = co.section(".text")
    if text is None:
        return []
    extents = sorted(co.function_extents(), key=lambda e: (e.start, e.name))
    if extents:
        out = [DiffUnit(e.name, e.kind, e.start, e.end) for e in extents]
    else:
        out = [DiffUnit(WHOLE_TEXT, "section", text.addr, text.addr + text.size)]
    if target is not None and columns:
        addrs, ds = disassemble_columns(co.text, target, text.addr, [a for a, _ in text_symbols(co)])
        for u in out:  # (an int64 array's slices are views)
            a = bisect_left(addrs, u.start)
            b = bisect_left(addrs, u.end)
            u.columns = (addrs[a:b], ds[a:b])
    elif target is not None:
        insts = disassemble(co.text, target, text.addr, [a for a, _ in text_symbols(co)])
        addrs = [i.address for i in insts]
        for u in out:
            a = bisect_left(addrs, u.start)
            b = bisect_left(addrs, u.end)
            u.insts = insts[a:b]
    return out


