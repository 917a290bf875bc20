"""gfx1010 compatibility and hazard analysis.

``analyse(code_object, target="gfx1010") -> Report``: for every kernel, the
control flow (:mod:`~kpatch.analysis.cfg`), the findings of every detector
(:mod:`~kpatch.analysis.detectors`, classes in
:mod:`~kpatch.analysis.findings`) and a verdict
(:mod:`~kpatch.analysis.verdict`): ok, patchable (by which rule sets) or
unpatchable (why).
"""

from kpatch.analysis.engine import SUPPORTED_TARGETS, analyse, decode_family
from kpatch.analysis.findings import CLASSES, Finding, FindingClass, lookup
from kpatch.analysis.report import FunctionReport, Report
from kpatch.analysis.verdict import Verdict

__all__ = ["analyse", "decode_family", "SUPPORTED_TARGETS", "CLASSES", "Finding", "FindingClass", "lookup",
           "Report", "FunctionReport", "Verdict"]
