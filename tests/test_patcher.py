"""The patcher on real compiler output: every patched kernel is clean, keeps its control flow,
and LLVM agrees with what is left (issue 5, validation a, b, c, e)."""

from __future__ import annotations

import glob
import os
import re
import subprocess

import pytest

from conftest import FIXTURES, need_tool, objdump_functions as objdump_kernels
from kpatch.analysis import analyse
from kpatch.codeobject import CodeObject
from kpatch.diff.branchcheck import check_branches
from kpatch.rewrite.patcher import patch_code_object
from kpatch.rewrite.provenance import read_provenance

GFX1030 = sorted(glob.glob(os.path.join(FIXTURES, "*.gfx1030.*.hsaco")))
FORBIDDEN = re.compile(r"<unknown>|s_inst_prefetch|v_dot|_legacy_f32")
@pytest.mark.llvm
@pytest.mark.parametrize("path", GFX1030, ids=os.path.basename)
@pytest.mark.parametrize("mode", ["override", "native"])
def test_patched_fixtures_are_clean_and_keep_control_flow(path, mode, tmp_path):
    need_tool("llvm-objdump-16")
    data = open(path, "rb").read()
    res = patch_code_object(data, mode=mode)
    statuses = {k.name: k.status for k in res.kernels}
    print(os.path.basename(path), mode, {k.name: (k.status, k.rules, k.reason[:80]) for k in res.kernels})
    if res.data is None:
        assert all(s != "patched" for s in statuses.values())
        return
    new = CodeObject.from_bytes(res.data)
    patched = [n for n, s in statuses.items() if s == "patched"]
    refused = [n for n, s in statuses.items() if s == "refused"]
    assert patched
    # native mode writes an object only when none of it was refused
    if mode == "native":
        assert refused == [] and all(f.status != "refused" for f in res.functions)
    # (a) LLVM decodes every kernel that can run for gfx1010 with nothing unknown or gfx1030-only left
    text = objdump_kernels(res.data, tmp_path, "gfx1010")
    for name in statuses:
        if name in refused:
            continue
        bad = [t for t in text[name] if FORBIDDEN.search(t)]
        assert not bad, (name, bad[:5])
    # refused kernels (override mode only) keep their original instructions
    old_text = objdump_kernels(data, tmp_path, "gfx1030")
    new_text = objdump_kernels(res.data, tmp_path, "gfx1030")
    for name in refused:
        assert [t.split()[0] for t in new_text[name]] == [t.split()[0] for t in old_text[name]], name
    # (b) the analysis finds nothing left in any kernel or device function that was not refused
    report = analyse(new, "gfx1010")
    fn_status = {f.name: f.status for f in res.functions}
    for kr in (*report.kernels, *report.functions):
        if kr.name in refused or fn_status.get(kr.name) == "refused":
            continue
        left = [f.cls for f in kr.findings if not (mode == "override" and f.cls == "Xnack")]
        assert left == [], (kr.name, left)
    # (c) an independent aligner: every branch reaches its old target or the mitigation in front of it
    problems = check_branches(CodeObject.from_bytes(data), new, old_target="gfx1030", new_target="gfx1030")
    assert problems == [], [p.message for p in problems]
    # the label follows the mode
    assert new.target_id == ("gfx1030" if mode == "override" else "gfx1010:xnack-")
    prov = read_provenance(res.data)
    assert prov["made_safe_for"] == "gfx1010" and prov["mode"] == mode
    # (e) a second apply changes nothing
    again = patch_code_object(res.data, mode=mode)
    assert again.data is None and not again.changed


@pytest.mark.llvm
def test_readelf_has_no_warnings_on_patched_object(tmp_path):
    need_tool("llvm-readelf-16")
    data = open(os.path.join(FIXTURES, "miopen_like.cl.gfx1030.v5.hsaco"), "rb").read()
    res = patch_code_object(data, mode="native")
    assert res.data is not None
    p = tmp_path / "p.hsaco"
    p.write_bytes(res.data)
    r = subprocess.run(["llvm-readelf-16", "-a", "--wide", str(p)], capture_output=True, text=True)
    assert r.returncode == 0 and "warning" not in r.stderr.lower(), r.stderr
    assert "amdgcn-amd-amdhsa--gfx1010:xnack-" in subprocess.run(
        ["llvm-readelf-16", "--notes", str(p)], capture_output=True, text=True).stdout


def test_non_gfx1030_objects_are_refused_not_guessed():
    data = open(os.path.join(FIXTURES, "vecops.hip.gfx1010.v4.hsaco"), "rb").read()
    res = patch_code_object(data, mode="override")
    assert res.data is None
    assert all(k.status == "refused" and "gfx1030" in k.reason for k in res.kernels)


def test_unpatchable_instructions_refuse_their_kernel_only():
    data = open(os.path.join(FIXTURES, "mathops.hip.gfx1030.v5.hsaco"), "rb").read()
    res = patch_code_object(data, mode="override")
    by = {k.name: k for k in res.kernels}
    assert by["half2_dot"].status == "refused" and "UnsupportedInstruction" in by["half2_dot"].reason


def test_verify_holds_no_decode_of_the_original(monkeypatch):
    """Memory: when the patched object is verified, the original's decoded
    instructions (the decode memo of the patch) are gone, so the two decodes
    are never alive at once (a whole Tensile library's are ~0.5 GiB each)."""
    from kpatch.isa import decodememo
    import kpatch.rewrite.patcher as patcher
    seen = []
    real = patcher.verify

    def spy(new, *args, **kwargs):
        seen.append(len(decodememo._LOCAL.memo))
        return real(new, *args, **kwargs)

    monkeypatch.setattr(patcher, "verify", spy)
    path = next(p for p in GFX1030 if "asm_kernels" in p)
    res = patch_code_object(open(path, "rb").read(), mode="override")
    assert res.data is not None and seen == [0]
