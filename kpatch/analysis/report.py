"""What :func:`kpatch.analysis.analyse` returns: per function findings and
verdicts, and the code object's summary, as objects and as JSON-ready dicts."""

from __future__ import annotations

from dataclasses import dataclass, field

from kpatch.analysis.findings import Finding
from kpatch.analysis.verdict import Tally, Verdict, combine


@dataclass
class FunctionReport:
    """One kernel (``kind == "kernel"``) or device function."""

    name: str
    kind: str
    address: int | None
    size: int
    findings: list[Finding] = field(default_factory=list)
    verdict: Verdict = field(default_factory=lambda: Verdict("ok"))
    instructions: int = 0
    blocks: int = 0
    loops: int = 0  # loop back edges
    calls: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # why some of its code could not be analysed (then it is never "ok", and never patched)
    unseen: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        d = {"verdict": self.verdict.status, "rules": list(self.verdict.rules),
             "reasons": list(self.verdict.reasons),
             "findings": [f.to_dict() for f in self.findings],
             "instructions": self.instructions, "blocks": self.blocks, "loop_back_edges": self.loops}
        if self.calls:
            d["calls"] = list(self.calls)
        if self.notes:
            d["notes"] = list(self.notes)
        return d


@dataclass
class Report:
    """Analysis of one code object for ``target``."""

    target: str
    code_object_target: str
    source: str | None  # ISA the code was decoded as, None if not analysable
    kernels: list[FunctionReport] = field(default_factory=list)
    functions: list[FunctionReport] = field(default_factory=list)  # device functions
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        return combine(k.verdict for k in self.kernels)

    def tally(self) -> Tally:
        t = Tally()
        for k in self.kernels:
            t.add(k.verdict, k.findings)
        for fn in self.functions:
            for f in fn.findings:
                t.findings[f.cls] = t.findings.get(f.cls, 0) + 1
        return t

    def kernel(self, name: str) -> FunctionReport | None:
        return next((k for k in self.kernels if name == k.name), None)

    def findings(self) -> list[Finding]:
        """Every finding of every kernel and function."""
        return [f for fn in self.kernels + self.functions for f in fn.findings]

    def summary(self) -> dict:
        v = self.verdict
        d = {"target": self.target, "verdict": v.status, "rules": list(v.rules), "reasons": list(v.reasons),
             "kernels": len(self.kernels), **self.tally().to_dict()}
        if self.functions:
            d["functions"] = [{"name": f.name, "address": f.address, **f.to_dict()} for f in self.functions]
        if self.notes:
            d["notes"] = list(self.notes)
        return d
