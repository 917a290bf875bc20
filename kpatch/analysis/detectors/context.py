"""What a detector sees: every function of one code object, laid out in
one control-flow graph (no edge crosses a function boundary)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from kpatch.analysis.cfg import CFG
from kpatch.analysis.facts import FACTS


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

    def attach(self, fn: FunctionSpan, finding) -> None:
        """Report a kernel-level finding (at the kernel descriptor, or with no
        address) for function ``fn``; detectors return instruction findings
        and attach these."""
        self.attached.append((fn, finding))

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

