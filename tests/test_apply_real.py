"""`kpatch apply` with the real patcher, end to end: the sample DB, librocrand's and rocPRIM's
gfx1030 code objects (issue 5, validation d and e, and the counts the issue asks for)."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess

import pytest

from apply.conftest import miopen_select
from conftest import FIXTURES, kpatch_in_process
from kpatch.analysis import analyse
from kpatch.codeobject import CodeObject
from kpatch.data import sample_db_path
from kpatch.diff.branchcheck import check_branches
from kpatch.rewrite.patcher import patch_code_object
from kpatch.rewrite.provenance import read_provenance


def rows(path):
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute("SELECT kernel_name, kernel_args FROM kern_db ORDER BY id").fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("mode,cu,name", [("override", 18, "gfx1030_18.ukdb"), ("native", 20, "gfx1010_20.ukdb")])
def test_apply_sample_db_end_to_end(tmp_path, mode, cu, name):
    out = tmp_path / "cache"
    p = kpatch_in_process("apply", "--db", "@sample", "--mode", mode, "--cu", str(cu), "--out-dir", str(out), "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    print(mode, {k: v for k, v in doc.items() if not isinstance(v, (list, dict))})
    db = out / name
    assert db.exists()
    src = dict(((n, a), None) for n, a in rows(sample_db_path()))
    written = rows(str(db))
    assert written
    for n, a in written:
        # native keys end -mcpu=gfx1010, override keys are the system DB's own
        if mode == "native":
            assert a.endswith(" -mcpu=gfx1010") and (n, a[: -len("gfx1010")] + "gfx1030") in src
        else:
            assert (n, a) in src
        code = miopen_select(str(db), n, a)  # MIOpen's exact SELECT, MD5 and size checked
        assert code is not None
        prov = None
        if code.startswith(b"\x7fELF"):
            prov = read_provenance(code)
            co = CodeObject.from_bytes(code)
            assert co.target_id == ("gfx1030" if mode == "override" else "gfx1010:xnack-")
            assert prov["made_safe_for"] == "gfx1010"
    before = db.read_bytes()
    p = kpatch_in_process("apply", "--db", "@sample", "--mode", mode, "--cu", str(cu), "--out-dir", str(out))
    assert p.returncode == 0, p.stderr
    assert db.read_bytes() == before, "a second apply must change nothing"


def _count(res):
    c = {"patched": 0, "refused": 0, "untouched": 0}
    for k in res.kernels:
        c[k.status] += 1
    return c


def _readelf_kernels(data: bytes, tmp_path) -> set[str]:
    """Kernel names from llvm-readelf-16's symbol table (the ``NAME.kd`` descriptors)."""
    p = tmp_path / "k.co"
    p.write_bytes(data)
    out = subprocess.run(["llvm-readelf-16", "-s", "--wide", str(p)], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[-1][:-3] for line in out.splitlines() if line.split() and line.split()[-1].endswith(".kd")}


def _check_real(data: bytes, label: str, tmp_path):
    res = patch_code_object(data, mode="override")
    counts = _count(res)
    reasons = sorted({k.reason.split(":")[0] for k in res.kernels if k.status == "refused"})
    print(f"{label}: {counts} refused for: {reasons}")
    assert res.data is not None and counts["patched"] > 0
    # every kernel LLVM sees has an outcome
    assert {k.name for k in res.kernels} == _readelf_kernels(data, tmp_path)
    # what scan calls patchable, apply patches; what it calls unpatchable, apply refuses
    verdicts = {kr.name: kr.verdict.status for kr in analyse(CodeObject.from_bytes(data), "gfx1010").kernels}
    for k in res.kernels:
        if verdicts[k.name] == "patchable":
            assert k.status in ("patched", "refused"), (k.name, k.status)
            assert k.status == "patched" or k.reason.startswith(("cannot relocate", "cannot patch")) \
                or "spare VGPR" in k.reason or "calls " in k.reason, (k.name, k.reason)
        elif verdicts[k.name] == "unpatchable":
            assert k.status == "refused", k.name
    new = CodeObject.from_bytes(res.data)
    refused = {k.name for k in res.kernels if k.status == "refused"}
    fn_refused = {f.name for f in res.functions if f.status == "refused"}
    report = analyse(new, "gfx1010")
    left = [(kr.name, f.cls) for kr in (*report.kernels, *report.functions)
            if kr.name not in refused | fn_refused for f in kr.findings if f.cls != "Xnack"]
    assert left == []
    problems = check_branches(CodeObject.from_bytes(data), new, old_target="gfx1030", new_target="gfx1030")
    assert problems == [], [p.message for p in problems[:5]]
    assert patch_code_object(res.data, mode="override").data is None
    return counts

@pytest.mark.llvm
def test_apply_rocprim_gfx1030_build(tmp_path):
    data = open(os.path.join(FIXTURES, "rocprim", "rocprim_algos.gfx1030.hsaco"), "rb").read()
    _check_real(data, "rocPRIM gfx1030", tmp_path)


@pytest.mark.corpus
@pytest.mark.llvm
def test_apply_librocrand_gfx1030(librocrand, tmp_path):
    from kpatch.containers.bundle import open_bundle_bytes
    from kpatch.containers.hostelf import find_fatbin_bundles

    b = find_fatbin_bundles(librocrand)[0]
    with open(librocrand, "rb") as f:
        _, bundle, entries = open_bundle_bytes(os.pread(f.fileno(), b.size, b.offset))
    data = next(bytes(e.data(bundle)) for e in entries if e.target_id == "gfx1030")
    counts = _check_real(data, "librocrand gfx1030", tmp_path)
    # librocrand's kernels need only rules kpatch has: every one is patched
    assert counts["patched"] == len(_readelf_kernels(data, tmp_path))


def test_cli_default_rule_sets_are_the_engines(tmp_path):
    """`kpatch apply` with no --rules uses the mode's full default rule sets:
    rocPRIM's WGP-mode kernels get CU mode (KM001) and its FLAT offsets are
    folded (KI003) - nothing is refused for a rule set left out."""
    src = os.path.join(FIXTURES, "rocprim", "rocprim_algos.gfx1030.hsaco")
    p = kpatch_in_process("apply", src, "-o", str(tmp_path / "out.hsaco"), "--mode", "override", "--json")
    assert p.returncode == 0, p.stderr
    kernels = [k for part in json.loads(p.stdout)["parts"] for k in part["kernels"]]
    assert not [k for k in kernels if k["status"] == "refused"]
    used = {r for k in kernels for r in k["rules"]}
    assert {"KM001", "KI003"} <= used


@pytest.mark.corpus
def test_host_library_drop_other_targets(tmp_path, librocrand):
    """librocrand's one bundle grows when its gfx1030 entry is patched: without
    --drop-other-targets it is refused (the next bytes are not padding), with it
    the bundle keeps its host and gfx1030 entries only. Checked with LLVM's
    tools: clang-offload-bundler lists exactly those two entries, the gfx1030
    entry it unbundles is what `kpatch apply` makes of the code object alone,
    and every byte outside the bundle's place is the original's."""
    import subprocess

    from conftest import need_tool

    bundler = "/usr/lib/llvm-15/bin/clang-offload-bundler"
    need_tool("llvm-objcopy-16")
    out = tmp_path / "librocrand.so"
    p = kpatch_in_process("apply", librocrand, "-o", str(out), "--mode", "override", "--json")
    doc = json.loads(p.stdout)
    [part] = doc["parts"]
    assert part["status"] == "refused" and "--drop-other-targets" in part["reason"] and not out.exists()
    p = kpatch_in_process("apply", librocrand, "-o", str(out), "--mode", "override", "--drop-other-targets", "--json")
    assert p.returncode == 0, p.stderr
    [part] = json.loads(p.stdout)["parts"]
    assert part["status"] == "changed" and "dropped entries for other GPUs" in part["note"]
    fatbin = tmp_path / "fatbin"
    subprocess.run(["llvm-objcopy-16", "--dump-section", f".hip_fatbin={fatbin}", str(out), str(tmp_path / "x")],
                   check=True)
    listed = subprocess.run([bundler, "--list", "--type=o", f"--input={fatbin}"], capture_output=True,
                            text=True, check=True).stdout.split()
    assert sorted(listed) == ["hipv4-amdgcn-amd-amdhsa--gfx1030", "host-x86_64-unknown-linux"]
    entry = tmp_path / "gfx1030.co"
    subprocess.run([bundler, "--unbundle", "--type=o", f"--input={fatbin}",
                    "--targets=hipv4-amdgcn-amd-amdhsa--gfx1030", f"--output={entry}"], check=True)
    alone = tmp_path / "alone.co"
    p = kpatch_in_process("extract", part["uri"] + "&entry=hipv4-amdgcn-amd-amdhsa--gfx1030", "-o", str(alone))
    assert p.returncode == 0, p.stderr
    p = kpatch_in_process("apply", str(alone), "-o", str(alone) + ".patched", "--mode", "override")
    assert p.returncode == 0, p.stderr
    assert entry.read_bytes() == open(str(alone) + ".patched", "rb").read()
    old, new = open(librocrand, "rb").read(), out.read_bytes()
    off = int(re.search(r"offset=(\d+)", part["uri"])[1])
    size = int(re.search(r"size=(\d+)", part["uri"])[1])
    assert len(old) == len(new) and old[:off] == new[:off] and old[off + size + 1:] == new[off + size + 1:]
