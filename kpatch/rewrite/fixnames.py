"""The names of the named fixes (``fix = "NAME"`` in a rule file), as data.

The rule loader (:mod:`kpatch.rewrite.rules`) validates rule files against
these names without importing the fixes themselves (they need the ISA and
numpy): ``kpatch rules`` starts fast.  :data:`kpatch.rewrite.fixes.FIXES`
maps each of these names, and only these, to its function
(tests/rewrite/test_rules_as_data.py checks that the two agree).
"""

from __future__ import annotations

#: every named fix, in the order ``kpatch rules`` lists them as known
FIX_NAMES: tuple[str, ...] = (
    "flat-offset-fold",
    "scratch-offset-fold",
    "nsa-to-contiguous",
    "drop-clause",
    "vsharp-llc-noalloc",
    "opcode-reuse",
    "keep-legacy-mad",
    "dot2-fma-mix",
    "int-dot-expand",
)

#: fixes that need the analysis' finding (its ``addresses``), not just the
#: instruction: only ``match.finding`` rules take them
NEEDS_FINDING = frozenset({"drop-clause", "vsharp-llc-noalloc"})
