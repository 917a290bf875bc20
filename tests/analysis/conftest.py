"""Shared by the analysis tests: reports of fixture code objects (cached per
test session, analysis is deterministic) and paths of the validation data."""

from __future__ import annotations

import functools
import os

from conftest import FIXTURES, ROOT
from kpatch.analysis import analyse
from kpatch.codeobject import CodeObject

HAZARDS = os.path.join(ROOT, "tests", "fixtures", "hazards")
CASES = os.path.join(HAZARDS, "cases.json")
ROCPRIM = os.path.join(FIXTURES, "rocprim")


@functools.lru_cache(maxsize=None)
def report_of(path: str):
    """(CodeObject, Report) of a code object file."""
    with open(path, "rb") as fh:
        co = CodeObject.from_bytes(fh.read(), name=path)
    return co, analyse(co)


def findings_by_class(kernel_report) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in kernel_report.findings:
        out.setdefault(f.cls, []).append(f.address)
    return {k: sorted(v, key=lambda a: -1 if a is None else a) for k, v in out.items()}
