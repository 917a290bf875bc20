"""Any bytes in: a diff (possibly with ``error`` set) or a FormatError out,
and every renderer copes with whatever diff comes out."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kpatch.codeobject import CodeObject
from kpatch.errors import FormatError
from kpatch.diff.branchcheck import check_branches
from kpatch.diff.compare import DiffReport, diff_objects, report_json
from kpatch.diff.html import render_html
from kpatch.diff.text import render_text

from .conftest import ASM_V4, read

BASE = read(ASM_V4)


def mutated(data: bytes, edits: list[tuple[int, int]]) -> bytes:
    b = bytearray(data)
    for pos, val in edits:
        b[pos % len(b)] = val
    return bytes(b)


def render_all(d) -> None:
    rep = DiffReport("old", "new", [d])
    for ctx in (0, None):
        for line in render_text(rep, context=ctx):
            line.plain
        render_html(rep, context=ctx)
    json.dumps(report_json(rep))


edits = st.lists(st.tuples(st.integers(0, len(BASE) - 1), st.integers(0, 255)), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits)
def test_mutated_objects_diff_or_report_an_error(e):
    new = mutated(BASE, e)
    d = diff_objects(BASE, new)
    assert d.error is None or isinstance(d.error, str)
    render_all(d)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits)
def test_mutated_objects_branch_check_or_format_error(e):
    new = mutated(BASE, e)
    try:
        problems = check_branches(CodeObject.from_bytes(BASE), CodeObject.from_bytes(new))
    except FormatError:
        return
    assert isinstance(problems, list)


@settings(max_examples=30, deadline=None)
@given(st.binary(max_size=512))
def test_arbitrary_bytes(data):
    d = diff_objects(data, BASE)
    assert d.error is not None or data == BASE
    render_all(d)
