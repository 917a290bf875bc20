"""What a detector sees: every function of one code object, laid out in
one control-flow graph (no edge crosses a function boundary)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kpatch.analysis.cfg import CFG
from kpatch.analysis.facts import FACTS
from kpatch.isa.decodememo import columns_of
from kpatch.isa.instruction import Instruction


class ColumnInstructions(Sequence):
    """A unit's instructions, each made when read, from the decode columns
    of the lists :func:`~kpatch.isa.decodememo.decode_ranges` gave for it
    (``parts``, one after the other): instruction ``k`` of a part is
    ``Instruction(addrs[k], table[ids[k]])``, what the decoder made it from
    (:func:`~kpatch.isa.decodememo.columns_of`); a part without columns is
    kept as its list.

    Why: a finding's detail is worked out when first read, from the
    context's instructions (:meth:`Context.release_instructions`).  Held as
    a list, they would live as long as the report, one object each, and
    the collection that follows :func:`~kpatch.analysis.analyse` (the
    collector is paused while it runs) would traverse all of them: 0.5 s
    of the 9-10 s CPU the analysis of the bench corpus costs.  As columns
    they are three arrays per part, and the instructions are freed by their
    reference counts when the decode memo ends."""

    __slots__ = ("_starts", "_parts", "_n")

    def __init__(self, parts: list[list]):
        starts: list[int] = []
        held: list = []
        n = 0
        for p in parts:
            c = columns_of(p)
            starts.append(n)
            held.append(p if c is None else (c.addrs, c.ids, c.table))
            n += len(p)
        self._starts, self._parts, self._n = starts, held, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(self._n))]
        if k < 0:
            k += self._n
        if not 0 <= k < self._n:
            raise IndexError(k)
        i = bisect.bisect_right(self._starts, k) - 1  # (the last part starting at or before k: not empty)
        part, j = self._parts[i], k - self._starts[i]
        if isinstance(part, list):
            return part[j]
        addrs, ids, table = part
        return Instruction(int(addrs[j]), table[int(ids[j])])


@dataclass
class FunctionSpan:
    """One function of the unit: instructions ``start:end``; ``kernel`` is
    the code object's Kernel, None for a device function."""

    name: str
    kind: str  # "kernel" or "function"
    kernel: object | None
    start: int
    end: int
    address: int
    size: int


@dataclass
class Context:
    """The code under analysis.

    ``source`` is the ISA the code was decoded as (``gfx1010`` for gfx101x
    code objects, ``gfx1030`` for gfx103x); ``compiled_for_gfx101x`` says
    whether the compiler knew gfx101x's bugs (it then guarantees what the
    bytes cannot show, e.g. LDS alignment)."""

    co: object  # kpatch.codeobject.CodeObject
    cfg: CFG
    source: str
    processor: str
    functions: list[FunctionSpan]
    _marks: object = field(default=None, repr=False)
    addresses: object = field(default=None, repr=False)  # numpy array of instruction addresses
    attached: list = field(default_factory=list, repr=False)  # (FunctionSpan, Finding)
    #: the same instructions as ``cfg.insts``, as columns (:meth:`release_instructions`)
    columns: ColumnInstructions | None = field(default=None, repr=False)

    def attach(self, fn: FunctionSpan, finding) -> None:
        """Report a kernel-level finding (at the kernel descriptor, or with no
        address) for function ``fn``; detectors return instruction findings
        and attach these."""
        self.attached.append((fn, finding))

    def release_instructions(self) -> None:
        """Once the detectors ran and the reports are made: the graph reads
        its instructions from ``columns`` (the same instructions, made when
        read), so that the findings' lazy details do not keep the
        instruction objects alive (see :class:`ColumnInstructions`)."""
        if self.columns is not None:
            self.cfg.insts = self.columns

    @property
    def compiled_for_gfx101x(self) -> bool:
        return self.processor.startswith("gfx101")

    @property
    def insts(self) -> list:
        return self.cfg.insts

    @property
    def facts(self) -> list:
        return self.cfg.facts

    def function_of(self, k: int) -> FunctionSpan:
        """The function holding instruction ``k``."""
        i = bisect.bisect_right(self.cfg.func_starts, k) - 1
        return self.functions[max(i, 0)]

    @property
    def marks(self) -> np.ndarray:
        """The marks of every instruction."""
        if self._marks is None:
            self._marks = FACTS.column("marks").take(self.cfg.eids)  # (take: faster than [])
        return self._marks

    def any_marked(self, bits: int, start: int, end: int) -> bool:
        """Does any instruction in ``start:end`` carry one of the ``bits`` marks?"""
        return bool(np.any(self.marks[start:end] & bits))

    def marked(self, bits: int, start: int = 0, end: int | None = None) -> list[int]:
        """Indices (in ``start:end``) of the instructions whose facts carry any
        of the ``bits`` marks (:data:`kpatch.analysis.facts.M_NSA` ...)."""
        marks = self.marks
        m = marks if end is None and not start else marks[start:end]
        return (np.flatnonzero(m & bits) + start).tolist()

