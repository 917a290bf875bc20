"""The detectors: one module per family of finding classes.

Each detector is a function ``detect(ctx) -> list[Finding]`` over a
:class:`Context` (one function's instructions, facts and control-flow
graph, plus the code object and kernel it belongs to).  :data:`DETECTORS`
lists them in the order they run.
"""

from __future__ import annotations

from kpatch.analysis.detectors.context import Context
from kpatch.analysis.detectors import isa, encoding, mimg, waitstates, vsharp, kernel

#: (name, function) of every detector, in run order
DETECTORS = (
    ("isa", isa.detect),
    ("encoding", encoding.detect),
    ("mimg", mimg.detect),
    ("waitstates", waitstates.detect),
    ("vsharp", vsharp.detect),
    ("kernel", kernel.detect),
)

__all__ = ["Context", "DETECTORS"]
