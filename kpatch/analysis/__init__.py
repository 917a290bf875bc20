"""gfx1010 compatibility and hazard analysis.

``analyse(code_object, target="gfx1010") -> Report``: for every kernel, the
control flow (:mod:`~kpatch.analysis.cfg`), the findings of every detector
(:mod:`~kpatch.analysis.detectors`, classes in
:mod:`~kpatch.analysis.findings`) and a verdict
(:mod:`~kpatch.analysis.verdict`): ok, patchable (by which rule sets) or
unpatchable (why).
"""

from __future__ import annotations

import importlib

#: What this package exports -> the module that defines it.  They load on
#: first use (PEP 562), so that importing one light module such as
#: :mod:`~kpatch.analysis.findings` (for `kpatch explain`) does not import
#: the engine and numpy.
_EXPORTS = {
    "analyse": "engine", "decode_family": "engine", "SUPPORTED_TARGETS": "targets",
    "CLASSES": "findings", "Finding": "findings", "FindingClass": "findings", "lookup": "findings",
    "Report": "report", "FunctionReport": "report", "Verdict": "verdict",
}

__all__ = ["analyse", "decode_family", "SUPPORTED_TARGETS", "CLASSES", "Finding", "FindingClass", "lookup",
           "Report", "FunctionReport", "Verdict"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
