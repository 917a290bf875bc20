"""Vendor output: code the compiler built for gfx1010 carries every
mitigation, so the analysis must find nothing in it (its mitigations must be
recognised as expiring the hazards); the same sources built for gfx1030 must
be flagged.

The rocPRIM pair (tests/fixtures/bin/rocprim, built by
tools/build_rocprim_pair.sh from Debian's librocprim-dev) is real library
code: 182 kernels.  Its ORACLE.json holds llvm-objdump-16's counts of the
mitigations the compiler inserted in the gfx1010 build."""

from __future__ import annotations

import bisect
import glob
import json
import os
import re
import subprocess

import pytest

from conftest import FIXTURES, gfx1030_code_objects, need_tool
from kpatch.analysis import analyse
from kpatch.codeobject import CodeObject
from kpatch.containers.bundle import open_bundle_bytes
from tests.analysis.conftest import ROCPRIM, report_of

COMPILED = ("vecops.hip", "mathops.hip", "miopen_like.cl")
GFX1010_BUILDS = sorted(p for p in glob.glob(os.path.join(FIXTURES, "*.gfx1010.*.hsaco"))
                        if os.path.basename(p).startswith(COMPILED))
GFX1030_BUILDS = sorted(glob.glob(os.path.join(FIXTURES, "*.gfx1030.*.hsaco")))


def test_fixture_lists_are_not_empty():
    assert len(GFX1010_BUILDS) == 6 and len(GFX1030_BUILDS) == 8


@pytest.mark.parametrize("path", GFX1010_BUILDS, ids=os.path.basename)
def test_compiled_for_gfx1010_is_clean(path):
    co, rep = report_of(path)
    assert rep.source == "gfx1010"
    assert rep.kernels and len(rep.kernels) == len(co.kernels)
    assert [f for f in rep.findings()] == []
    assert all(k.verdict.status == "ok" for k in rep.kernels)


@pytest.mark.parametrize("path", GFX1030_BUILDS, ids=os.path.basename)
def test_compiled_for_gfx1030_is_flagged(path):
    _, rep = report_of(path)
    assert rep.source == "gfx1030"
    assert rep.findings(), "gfx1030 code without any gfx1010 finding"
    assert rep.verdict.status in ("patchable", "unpatchable")


@pytest.mark.parametrize("name", ["vecops.hip.bundle", "mathops.hip.bundle"])
def test_bundle_entries(name):
    """Inside one bundle: the gfx1010 entry is clean, the gfx1030 one is not."""
    with open(os.path.join(FIXTURES, name), "rb") as fh:
        _, bundle, entries = open_bundle_bytes(fh.read())
    seen = set()
    for e in entries:
        if "gfx10" not in e.id:
            continue
        rep = analyse(CodeObject.from_bytes(bytes(e.data(bundle))))
        seen.add(e.id[-7:])
        if e.id.endswith("gfx1010"):
            assert rep.findings() == []
        else:
            assert rep.findings()
    assert seen == {"gfx1010", "gfx1030"}


def test_hand_written_gfx1010_asm():
    """asm_kernels.s is assembled, not compiled: the assembler inserts no
    hazard mitigation (only relaxes the 0x3f branch: s_nop 0 after
    s_cbranch_scc1 0x40), so its ds_read_b32 -> s_cbranch_scc1 ->
    global_store_dword path is a real LdsBranchVmemWARHazard with no
    s_waitcnt_vscnt between; nothing else is flagged."""
    _, rep = report_of(os.path.join(FIXTURES, "asm_kernels.s.gfx1010.v4.hsaco"))
    found = [(k.name, f.cls) for k in rep.kernels for f in k.findings]
    assert found == [("asm_lds_swap", "LdsBranchVmemWARHazard")]
    f = rep.kernel("asm_lds_swap").findings[0]
    assert "global_store_dword" in f.detail and "ds_read_b32" in f.detail


# -- rocPRIM ---------------------------------------------------------------------------------

def _oracle():
    path = os.path.join(ROCPRIM, "ORACLE.json")
    if not os.path.exists(path):
        pytest.skip("rocPRIM pair not built (tools/build_rocprim_pair.sh)")
    with open(path) as fh:
        return json.load(fh)


def test_rocprim_gfx1010_is_clean():
    oracle = _oracle()["code_objects"]["rocprim_algos.gfx1010.hsaco"]
    co, rep = report_of(os.path.join(ROCPRIM, "rocprim_algos.gfx1010.hsaco"))
    assert len(rep.kernels) == oracle["kernels"] == 182
    assert rep.findings() == []
    assert rep.verdict.status == "ok"


@pytest.mark.llvm
@pytest.mark.parametrize("target", ["gfx1010", "gfx1030"])
def test_rocprim_kernel_streams_match_llvm(target):
    """Each kernel's instruction stream is the instructions llvm-objdump-16
    prints inside [symbol, symbol + size) (ORACLE.json's counts take every
    line under the label, including alignment words after s_endpgm, so they
    are recounted here from llvm-objdump-16's addresses)."""
    need_tool("llvm-objdump-16")
    name = f"rocprim_algos.{target}.hsaco"
    path = os.path.join(ROCPRIM, name)
    oracle = _oracle()["code_objects"][name]["per_kernel"]
    out = subprocess.run(["llvm-objdump-16", "-d", f"--mcpu={target}", path], capture_output=True,
                         text=True, check=True).stdout
    addresses = sorted(int(m, 16) for m in re.findall(r"// ([0-9A-F]{12}):", out))
    _, rep = report_of(path)
    assert {k.name for k in rep.kernels} == set(oracle)
    for k in rep.kernels:
        assert (k.address, k.size) == (oracle[k.name]["address"], oracle[k.name]["size"]), k.name
        n = bisect.bisect_left(addresses, k.address + k.size) - bisect.bisect_left(addresses, k.address)
        assert k.instructions == n, k.name
        assert n <= oracle[k.name]["instructions"] <= n + 1, k.name
    assert rep.functions == []


def test_rocprim_gfx1030_is_flagged():
    oracle = _oracle()["code_objects"]
    depctr = oracle["rocprim_algos.gfx1010.hsaco"]["total"]["depctr_ffe3"]
    vscnt_1010 = oracle["rocprim_algos.gfx1010.hsaco"]["total"]["vscnt_null_0"]
    vscnt_1030 = oracle["rocprim_algos.gfx1030.hsaco"]["total"]["vscnt_null_0"]
    co, rep = report_of(os.path.join(ROCPRIM, "rocprim_algos.gfx1030.hsaco"))
    counts = rep.tally().findings
    vmem = counts.get("VMEMtoScalarWriteHazard", 0)
    lds = counts.get("LdsBranchVmemWARHazard", 0)
    print(f"\nrocPRIM: gfx1010 build has {depctr} s_waitcnt_depctr 0xffe3 (llvm-objdump-16); "
          f"gfx1030 build: {vmem} VMEMtoScalarWriteHazard findings (ratio {vmem / depctr:.2f})")
    print(f"rocPRIM: s_waitcnt_vscnt null, 0x0: {vscnt_1010} in the gfx1010 build, {vscnt_1030} in the "
          f"gfx1030 build (difference {vscnt_1010 - vscnt_1030}); {lds} LdsBranchVmemWARHazard findings")
    print(f"rocPRIM gfx1030 findings per class: {dict(sorted(counts.items()))}")
    assert depctr > 0 and depctr / 2 <= vmem <= depctr * 2
    assert lds > 0
    assert rep.verdict.status != "ok"


@pytest.mark.corpus
def test_librocrand_gfx1030(librocrand):
    """Debian's librocrand (ROCm 5.3, clang 15): its gfx1030 code object is
    flagged (prefetches, VMEM/LDS hazards), and every kernel gets a verdict."""
    reps = [(co, analyse(co)) for co in gfx1030_code_objects(librocrand)]
    assert len(reps) == 1
    co, rep = reps[0]
    assert len(rep.kernels) == len(co.kernels) == 80
    counts = rep.tally().findings
    print(f"\nlibrocrand gfx1030: {dict(sorted(counts.items()))}, verdicts {rep.tally().verdicts}")
    for cls in ("InstFwdPrefetchBug", "VMEMtoScalarWriteHazard", "LdsBranchVmemWARHazard"):
        assert counts.get(cls, 0) > 0
    assert all(k.verdict.status in ("patchable", "unpatchable") for k in rep.kernels)
