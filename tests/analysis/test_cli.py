"""`kpatch scan --target gfx1010` and `kpatch explain`, end to end."""

from __future__ import annotations

import json
import os

from conftest import FIXTURES, kpatch_in_process
from kpatch.analysis.findings import CLASSES
from tests.analysis.conftest import HAZARDS

ISSUE_CLASSES = [
    "UnsupportedInstruction", "OpcodeReuse", "InstFwdPrefetchBug", "VMEMtoScalarWriteHazard",
    "SMEMtoVectorWriteHazard", "VcmpxPermlaneHazard", "VcmpxExecWARHazard", "LdsBranchVmemWARHazard",
    "NSAtoVMEMBug", "NSAClauseBug", "NSAMaxSize", "Offset3fBug", "FlatSegmentOffsetBug",
    "NegativeUnalignedScratchOffsetBug", "LdsMisalignedBug", "VsharpLlcNoalloc", "Xnack",
]


def _scan(*args):
    p = kpatch_in_process("scan", "--json", *args)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_scan_json_with_target():
    doc = _scan("--target", "gfx1010", os.path.join(FIXTURES, "vecops.hip.bundle"))
    objs = {c["target"]: c for c in doc["code_objects"]}
    assert set(objs) == {"gfx1010", "gfx1030"}
    for target, c in objs.items():
        a = c["analysis"]
        assert a["target"] == "gfx1010" and a["kernels"] == len(c["kernels"])
        assert sum(a["verdicts"].values()) == len(c["kernels"])
        for k in c["kernels"]:
            assert k["verdict"] in ("ok", "patchable", "unpatchable")
            assert isinstance(k["findings"], list)
            for f in k["findings"]:
                assert {"class", "address", "detail"} <= set(f)
                assert f["class"] in ISSUE_CLASSES and isinstance(f["detail"], str) and f["detail"]
            if k["verdict"] == "patchable":
                assert k["rules"] and k["findings"]
        counted = {}
        for k in c["kernels"]:
            for f in k["findings"]:
                counted[f["class"]] = counted.get(f["class"], 0) + 1
        assert counted == a["findings"]
    assert objs["gfx1010"]["analysis"]["verdict"] == "ok"
    assert all(k["findings"] == [] for k in objs["gfx1010"]["kernels"])
    assert objs["gfx1030"]["analysis"]["verdict"] == "patchable"
    s = doc["summary"]
    assert s["target"] == "gfx1010" and s["code_objects"] == {"ok": 1, "patchable": 1, "unpatchable": 0}
    assert s["kernels"]["ok"] == 2 and s["kernels"]["patchable"] == 2


def test_scan_without_target_does_not_analyse():
    doc = _scan(os.path.join(FIXTURES, "vecops.hip.bundle"))
    assert "summary" not in doc
    for c in doc["code_objects"]:
        assert "analysis" not in c
        assert all("verdict" not in k and "findings" not in k for k in c["kernels"])


def test_scan_table_with_target():
    p = kpatch_in_process("scan", "--target", "gfx1010", os.path.join(HAZARDS, "bin", "isa_differences.gfx1030.hsaco"),
                   os.path.join(FIXTURES, "miopen_like.cl.gfx1030.v4.hsaco"))
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "UnsupportedInstruction" in out and "LdsBranchVmemWARHazard" in out
    assert "unpatchable" in out and "patchable" in out
    assert "kernels" in out and "gfx1010:" in out


def test_scan_other_processors_are_unpatchable():
    p = kpatch_in_process("scan", "--json", "--target", "gfx1010", "--sample")
    doc = json.loads(p.stdout)
    others = [c for c in doc["code_objects"] if not c["target"].startswith("gfx10")]
    for c in others:
        assert all(k["verdict"] == "unpatchable" and k["reasons"] for k in c["kernels"])


def test_explain_every_class():
    for name in ISSUE_CLASSES:
        p = kpatch_in_process("explain", name)
        assert p.returncode == 0, p.stderr
        for part in ("What it is:", "Why it breaks gfx1010:", "How it is fixed", "cannot verify"):
            assert part in p.stdout, (name, part)
        assert name in p.stdout


def test_explain_lists_and_rejects():
    p = kpatch_in_process("explain")
    assert p.returncode == 0
    lines = p.stdout.strip().splitlines()
    assert [ln.split()[1] for ln in lines] == [c.name for c in CLASSES]
    assert kpatch_in_process("explain", "h002").stdout.startswith("H002 VMEMtoScalarWriteHazard")
    bad = kpatch_in_process("explain", "NoSuchHazard")
    assert bad.returncode == 2 and "NoSuchHazard" in bad.stderr
