"""Verdicts: can a kernel run on gfx1010, and can kpatch make it so.

* ``ok`` - no findings: it runs as it is;
* ``patchable`` - every finding has a rule set that fixes it; ``rules``
  names them (see :data:`kpatch.analysis.findings.RULE_SETS`);
* ``unpatchable`` - some finding has none (or the code could not be
  analysed); ``reasons`` says why.

Verdicts combine (per code object, overall) by taking the worst status and
the union of rules and reasons.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter

from kpatch.analysis.findings import RULE_SETS, Finding

OK, PATCHABLE, UNPATCHABLE = "ok", "patchable", "unpatchable"
STATUSES = (OK, PATCHABLE, UNPATCHABLE)
_RANK = {s: i for i, s in enumerate(STATUSES)}


@dataclass(frozen=True)
class Verdict:
    status: str
    rules: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"verdict": self.status, "rules": list(self.rules), "reasons": list(self.reasons)}

    def __str__(self) -> str:
        if self.status == PATCHABLE:
            return f"patchable ({', '.join(self.rules)})"
        if self.status == UNPATCHABLE:
            return f"unpatchable ({'; '.join(self.reasons)})"
        return self.status


_FIX = attrgetter("fix")


def _ordered_rules(rules) -> tuple[str, ...]:
    return tuple(r for r in RULE_SETS if r in rules) + tuple(sorted(set(rules) - set(RULE_SETS)))


def verdict_of(findings: list[Finding], extra_reasons: tuple[str, ...] = ()) -> Verdict:
    """The verdict for one kernel's findings (plus reasons found elsewhere).
    (Findings can be thousands: their fixes are gathered in one pass in C,
    and their blockers looked for only when some finding has no fix.)"""
    rules = set(map(_FIX, findings))
    blockers = [f.blocker for f in findings if f.fix is None and f.blocker] if None in rules else []
    rules.discard(None)
    rules.discard("")
    if blockers or extra_reasons:
        return Verdict(UNPATCHABLE, _ordered_rules(rules), tuple(dict.fromkeys(blockers + list(extra_reasons))))
    key = frozenset(rules)
    v = _BY_RULES.get(key)
    if v is None:
        v = _BY_RULES[key] = Verdict(PATCHABLE, _ordered_rules(rules)) if rules else Verdict(OK)
    return v


#: the verdicts without reasons, by their rules (immutable, so shared: there
#: is one per set of rule sets, and a report has one per function)
_BY_RULES: dict[frozenset, Verdict] = {}


def combine(verdicts) -> Verdict:
    """The worst of several verdicts, with all their rules and reasons."""
    status = OK
    rules: list[str] = []
    reasons: list[str] = []
    for v in verdicts:
        if _RANK[v.status] > _RANK[status]:
            status = v.status
        rules.extend(v.rules)
        reasons.extend(v.reasons)
    return Verdict(status, _ordered_rules(rules) if status != OK else (),
                   tuple(dict.fromkeys(reasons)) if status == UNPATCHABLE else ())


@dataclass
class Tally:
    """Counts of verdicts and of findings per class."""

    verdicts: dict[str, int] = field(default_factory=lambda: {s: 0 for s in STATUSES})
    findings: dict[str, int] = field(default_factory=dict)

    def add(self, verdict: Verdict, findings: list[Finding]) -> None:
        self.verdicts[verdict.status] += 1
        for f in findings:
            self.findings[f.cls] = self.findings.get(f.cls, 0) + 1

    def merge(self, other: "Tally") -> None:
        for k, v in other.verdicts.items():
            self.verdicts[k] = self.verdicts.get(k, 0) + v
        for k, v in other.findings.items():
            self.findings[k] = self.findings.get(k, 0) + v

    def to_dict(self) -> dict:
        return {"verdicts": dict(self.verdicts), "findings": dict(sorted(self.findings.items()))}
