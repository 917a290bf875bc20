"""Every hand-written hazard case (tests/fixtures/hazards/cases.json): a
positive and negative case per class, every way a hazard expires, hazards
across taken and fall-through branches and loop back edges.

The expected findings come from the cases' annotations, checked by the
fixture builder against LLVM (llc-16's post-RA hazard recognizer inserting
the mitigation exactly there, llvm-mc-16 relaxing / rejecting exactly those
instructions) where LLVM has an oracle.  Each kernel must have exactly the
findings listed (class and address; any other class: none)."""

from __future__ import annotations

import json
import os

import re

import pytest

from tests.analysis.conftest import CASES, HAZARDS, findings_by_class, report_of

if os.path.exists(CASES):
    with open(CASES) as _fh:
        _DOC = json.load(_fh)
    CASE_LIST = _DOC["cases"]
else:  # the validation data is not there (yet)
    _DOC = None
    CASE_LIST = []


def _kernel(case):
    co, rep = report_of(os.path.join(HAZARDS, "bin", case["object"]))
    k = rep.kernel(case["kernel"])
    assert k is not None, f"kernel {case['kernel']} not analysed"
    return co, k


@pytest.mark.skipif(_DOC is None, reason="tests/fixtures/hazards/cases.json not built")
@pytest.mark.parametrize("case", CASE_LIST, ids=[c["name"] for c in CASE_LIST])
def test_case(case):
    co, k = _kernel(case)
    got = findings_by_class(k)
    expected = {cls: sorted(a) for cls, a in case["all_findings"].items()}
    if case["level"] == "code_object":  # a property of the code object: no address
        expected = {cls: [None] * max(1, len(a)) for cls, a in expected.items()}
    assert got == expected, f"{case['why']}\n" + "\n".join(f"  {f}" for f in k.findings)
    # the case's own class: exactly the expected count
    assert len(got.get(case["class"], [])) == case["expect"]


@pytest.mark.skipif(_DOC is None, reason="tests/fixtures/hazards/cases.json not built")
def test_every_class_has_positive_and_negative_cases():
    from kpatch.analysis import CLASSES

    pos = {c["class"] for c in CASE_LIST if c["expect"] > 0}
    neg = {c["class"] for c in CASE_LIST if c["expect"] == 0}
    names = {c.name for c in CLASSES}
    assert names <= pos and names <= neg


@pytest.mark.skipif(_DOC is None, reason="tests/fixtures/hazards/cases.json not built")
def test_case_kernels_are_where_cases_json_says():
    """The analysis sees each case's kernel at the address and size the
    fixture builder read with LLVM's tools."""
    for case in CASE_LIST:
        co, k = _kernel(case)
        assert (k.address, k.size) == (case["kernel_address"], case["kernel_size"]), case["name"]


_PLAIN_INT_DOT = re.compile(r"v_dot(4c_i32_i8_e32|4_i32_i8|4_u32_u8|2_i32_i16|2_u32_u16) v\d+, v\d+, v\d+(, [sv]\d+)?")


@pytest.mark.skipif(_DOC is None, reason="tests/fixtures/hazards/cases.json not built")
def test_verdicts_of_cases():
    """Verdicts follow the findings: none -> ok; all fixable -> patchable naming
    the rule sets; UnsupportedInstruction or a reused opcode without an exact
    gfx1010 form -> unpatchable with the reason."""
    for case in CASE_LIST:
        _, k = _kernel(case)
        classes = set(case["all_findings"])
        if not classes:
            assert k.verdict.status == "ok", case["name"]
        elif classes == {"UnsupportedInstruction"} and all(_PLAIN_INT_DOT.fullmatch(t) for t in case["at_text"]):
            # the one exact expansion (rule KI006): plain integer dots with VGPR multiplicands
            assert k.verdict.status == "patchable" and k.verdict.rules == ("gfx1010-isa",), case["name"]
        elif classes & {"UnsupportedInstruction", "OpcodeReuse"}:
            assert k.verdict.status == "unpatchable" and k.verdict.reasons, case["name"]
        else:
            assert k.verdict.status == "patchable", case["name"]
            assert set(k.verdict.rules) == {f.fix for f in k.findings}, case["name"]
