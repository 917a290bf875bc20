"""The finding classes: exactly the issue's list, stable codes, complete
explanations; findings and verdicts."""

from __future__ import annotations

import pytest

from kpatch.analysis.findings import CLASSES, RULE_SETS, Finding, lookup
from kpatch.analysis.verdict import combine, verdict_of
from tests.analysis.test_cli import ISSUE_CLASSES


def test_classes_are_the_issues():
    assert [c.name for c in CLASSES] == ISSUE_CLASSES
    assert len({c.code for c in CLASSES}) == len(CLASSES)
    for c in CLASSES:
        assert c.rule_set is None or c.rule_set in RULE_SETS
        assert all(len(t) > 20 for t in (c.what, c.why, c.fix, c.limits)), c.name
        assert lookup(c.name) is c and lookup(c.code.lower()) is c and lookup(c.name.upper()) is c
    assert lookup("nothing") is None


def test_finding_defaults_and_lazy_parts():
    f = Finding("VMEMtoScalarWriteHazard", 0x100, lambda: "made late", addresses=lambda: [0xF8])
    assert f.fix == "gfx1010-hazards" and f.blocker is None and f.mitigation
    assert f.detail == "made late" and f.addresses == (0xF8,)
    assert f.to_dict() == {"class": "VMEMtoScalarWriteHazard", "code": "H002", "address": 0x100,
                           "detail": "made late", "mitigation": f.mitigation, "addresses": [0xF8]}
    u = Finding("UnsupportedInstruction", 4, "x")
    assert u.fix is None and u.blocker
    with pytest.raises(ValueError):
        Finding("NotAClass", 0, "x")


def test_verdicts():
    ok = verdict_of([])
    assert ok.status == "ok" and not ok.rules
    p = verdict_of([Finding("LdsMisalignedBug", 0, "x"), Finding("Offset3fBug", 4, "y")])
    assert p.status == "patchable" and p.rules == ("gfx1010-hazards", "cu-mode")
    u = verdict_of([Finding("Offset3fBug", 4, "y"), Finding("UnsupportedInstruction", 8, "z")])
    assert u.status == "unpatchable" and u.reasons and u.rules == ("gfx1010-hazards",)
    # reasons: the unfixable findings' blockers (each once, in order), then those found elsewhere
    b = Finding("Offset3fBug", 12, "w", fix=None, blocker="no rule here")
    e = verdict_of([Finding("Offset3fBug", 4, "y"), b, b], ("branch leaves",))
    assert e.status == "unpatchable" and e.reasons == ("no rule here", "branch leaves")
    assert e.rules == ("gfx1010-hazards",)
    e = verdict_of([Finding("Offset3fBug", 4, "y")], ("branch leaves",))
    assert e.status == "unpatchable" and e.reasons == ("branch leaves",) and e.rules == ("gfx1010-hazards",)
    # verdicts without reasons are shared per set of rules: each set still gets its own
    one = [verdict_of([Finding(c, 0, "x")]).rules for c in ("LdsMisalignedBug", "Offset3fBug", "LdsMisalignedBug")]
    assert one == [("cu-mode",), ("gfx1010-hazards",), ("cu-mode",)]
    assert combine([ok, p]).status == "patchable"
    assert combine([ok, p, u]).status == "unpatchable"
    assert combine([ok, ok]) == ok


def test_lds_misaligned_detail_is_made_when_read():
    """The kernel detector's LdsMisalignedBug finding renders its detail (and
    lists its addresses) only when read, and they are what llvm-objdump-16
    -d --mcpu=gfx1030 shows of kernel ldsmis_wgp_b64 (descriptors fixture):
    ds_read_b64 v[2:3], v0 at 0x2600 and ds_write_b64 at 0x260c."""
    import os
    from conftest import ROOT
    from kpatch.analysis import analyse
    from kpatch.codeobject import CodeObject
    path = os.path.join(ROOT, "tests", "fixtures", "hazards", "bin", "descriptors.gfx1030.hsaco")
    with open(path, "rb") as fh:
        rep = analyse(CodeObject.from_bytes(fh.read()))
    k = next(k for k in rep.kernels if k.name == "ldsmis_wgp_b64")
    (f,) = [f for f in k.findings if f.cls == "LdsMisalignedBug"]
    assert callable(f._detail) and callable(f._addresses)  # (not made yet)
    assert f.detail == ("WGP mode, 2 multi-dword LDS/FLAT access(es) with unproven alignment, "
                        "first ds_read_b64 v[2:3], v0")
    assert f.addresses == (0x2600, 0x260C)
