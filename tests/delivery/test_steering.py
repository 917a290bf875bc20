"""The MIOpen steering table (kpatch/data/miopen_solvers.toml) and
kpatch.delivery.steering: refused kernels -> MIOpen's solver switches.

Expected switch names come from MIOpen's sources (the bare git mirror, when
present) and MIOpen's docs/how-to/debug-log.rst, never from kpatch."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.parse

import pytest

from kpatch.delivery import steering
from tests.conftest import ROOT, need_tool, run_kpatch

MIRROR = os.environ.get("KPATCH_MIOPEN_MIRROR", "/work/.mirror/ROCm+MIOpen/repo")
FIXTURE_DB = os.path.join(ROOT, "tests", "fixtures", "miopen", "gfx1030.kdb")
MANIFEST = os.path.join(ROOT, "tests", "fixtures", "miopen", "MANIFEST.json")


def _git(*args: str) -> str:
    return subprocess.run(["git", f"--git-dir={MIRROR}", *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def mirror():
    if not os.path.isdir(MIRROR) or not shutil_which("git"):
        pytest.skip("MIOpen's source mirror is not here")
    table = steering.load_table()
    try:
        _git("cat-file", "-e", table.commit)
    except subprocess.CalledProcessError:
        pytest.skip(f"the mirror lacks MIOpen commit {table.commit}")
    return table.commit


def shutil_which(name):
    import shutil
    return shutil.which(name)


def table_problems(table: steering.SteeringTable, commit: str) -> list[str]:
    """What in *table* MIOpen's sources at *commit* do not bear out: a switch
    not declared as a boolean (MIOPEN_DECLARE_ENV_VAR_BOOL) in the solver's
    own source files (``source`` and ``uses``) or not tested there with
    env::disabled, a source file that does not exist, a literal kernel file
    neither in MIOpen's tree nor spelled in the source, or a literal kernel
    symbol the source never spells."""
    problems = []
    files = set(_git("ls-tree", "-r", "--name-only", commit).split())
    kernel_files = {os.path.basename(f) for f in files}
    for s in table.solvers:
        missing = [f for f in (s.source, *s.uses) if f not in files]
        if missing:
            problems.append(f"{s.name}: no file {', '.join(missing)}")
            continue
        text = "\n".join(_git("show", f"{commit}:{f}") for f in (s.source, *s.uses))
        for env in s.disable:
            if f"MIOPEN_DECLARE_ENV_VAR_BOOL({env})" not in text:
                problems.append(f"{s.name}: {env} not declared in {s.source}")
            if f"env::disabled({env})" not in text:
                problems.append(f"{s.name}: {s.source} never tests env::disabled({env})")
        for f in s.kernel_files:
            if not any(c in f for c in "*?[") and f not in kernel_files and f'"{f}"' not in text:
                problems.append(f"{s.name}: no kernel file {f} in MIOpen")
        for k in s.kernel_names:
            if not any(c in k for c in "*?[") and f'"{k}"' not in text:
                problems.append(f"{s.name}: {s.source} never names the kernel {k}")
    return problems


def test_table_names_the_mirrors_commit_and_version(mirror):
    table = steering.load_table()
    cmake = _git("show", f"{mirror}:CMakeLists.txt")
    assert f"rocm_setup_version(VERSION {table.version})" in cmake


def test_every_switch_and_file_in_the_table_is_in_miopens_source(mirror):
    table = steering.load_table()
    assert table_problems(table, mirror) == []
    # and each switch appears in MIOpen's docs or its sources verbatim
    assert len(table.switch_names) >= 40


def test_the_checker_catches_a_misspelled_switch_and_a_wrong_file(mirror):
    table = steering.load_table()
    bad = steering.Solver("ConvBinWinogradRxSf2x3g1", "src/solver/conv/conv_winoRxS.cpp",
                          ("Conv_Winograd_v30_3_1_fp16_dot2_f2x3_stride1.s", "Conv_Winograd_v99.s"),
                          ("miopenSp3AsmConvNope",), ("MIOPEN_DEBUG_AMD_WINOGRAD_RXS_F2X3G1",))
    broken = steering.SteeringTable(table.repository, table.commit, table.version, "0", (bad,))
    problems = table_problems(broken, mirror)
    assert any("MIOPEN_DEBUG_AMD_WINOGRAD_RXS_F2X3G1 not declared" in p for p in problems)
    assert any("Conv_Winograd_v99.s" in p for p in problems)
    assert any("miopenSp3AsmConvNope" in p for p in problems)


def test_every_fixture_convolution_kernel_file_has_a_solver():
    """Each convolution source file of the committed corpus (its manifest
    says where each object came from) is in the table with a switch."""
    manifest = json.load(open(MANIFEST))
    table = steering.load_table()
    sources = {e["source"] for db in manifest["dbs"].values() for e in db["entries"]}
    conv = {s for s in sources if "onv" in s or s.startswith("naive_conv")}
    assert len(conv) >= 15
    for src in sources:
        solvers = [s for s in table.solvers if s.builds_file(src + ".o")]
        assert solvers, src
        if src in conv:
            assert all(s.disable for s in solvers), src


def _dot2_symbols(tmp_path) -> dict[str, str]:
    """{kernel DB file name: kernel symbol} of the fixture's fp16 dot2
    Winograd objects, the symbol read by llvm-readelf."""
    need_tool("llvm-readelf-16")
    manifest = json.load(open(MANIFEST))
    out = {}
    for e in manifest["dbs"]["gfx1030.kdb"]["entries"]:
        if "fp16_dot2" not in e["kernel_name"]:
            continue
        uri = ("kdb://" + urllib.parse.quote(FIXTURE_DB) + "?name=" + urllib.parse.quote(e["kernel_name"], safe="")
               + "&args=" + urllib.parse.quote(e["kernel_args"], safe=""))
        co = tmp_path / e["kernel_name"]
        p = run_kpatch("extract", uri, "-o", str(co))
        assert p.returncode == 0, p.stderr
        syms = subprocess.run(["llvm-readelf-16", "--syms", str(co)], capture_output=True, text=True,
                              check=True).stdout
        funcs = {line.split()[-1] for line in syms.splitlines() if " FUNC " in line}
        assert len(funcs) == 1, funcs
        out[e["kernel_name"]] = funcs.pop()
    return out


def test_refused_fp16_dot2_winograd_objects_steer_to_their_solvers_switches(tmp_path):
    """Each fp16 dot2 Winograd object of the corpus, patched as the cache
    patches it (`kpatch apply FILE --mode override`), has its kernel refused;
    the plan turns off exactly the solvers MIOpen builds it with: f2x3 files
    -> ConvBinWinogradRxSf2x3 and ConvBinWinogradRxSf2x3g1 (conv_winoRxS.cpp:
    IS2X3 checks MIOPEN_DEBUG_AMD_WINOGRAD_RXS_F2X3, the g1 solver
    MIOPEN_DEBUG_AMD_WINOGRAD_RXS_F2X3_G1 and builds the same kernel),
    f3x2 -> ConvBinWinogradRxSf3x2 (MIOPEN_DEBUG_AMD_WINOGRAD_RXS_F3X2)."""
    objects = _dot2_symbols(tmp_path)
    assert len(objects) == 6
    for file_name, symbol in objects.items():
        out = tmp_path / (file_name + ".patched")
        p = run_kpatch("apply", str(tmp_path / file_name), "-o", str(out), "--mode", "override", "--json")
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        refused = [steering.Refused(k["name"], (k.get("reason") or "",), file_name)
                   for part in doc.get("parts", doc.get("entries", [])) for k in part.get("kernels", [])
                   if k["status"] == "refused"]
        assert [r.kernel for r in refused] == [symbol]
        plan = steering.plan(refused)
        want = ({"MIOPEN_DEBUG_AMD_WINOGRAD_RXS_F2X3", "MIOPEN_DEBUG_AMD_WINOGRAD_RXS_F2X3_G1"}
                if "_f2x3_" in file_name else {"MIOPEN_DEBUG_AMD_WINOGRAD_RXS_F3X2"})
        assert plan.env() == {k: "0" for k in want}, file_name
        assert plan.unsteered == ()
        for s in plan.switches:
            assert symbol in s.reason and "refused" in s.reason


def test_symbol_alone_and_file_alone_steer_alike():
    sym = "miopenSp3AsmConv_v30_3_1_gfx10_fp16_dot2_f3x2_stride2"
    by_sym = steering.plan([steering.Refused(sym)]).env()
    by_file = steering.plan([steering.Refused("", (), "Conv_Winograd_v30_3_1_fp16_dot2_f3x2_stride2.s.o")]).env()
    assert by_sym == by_file == {"MIOPEN_DEBUG_AMD_WINOGRAD_RXS_F3X2": "0"}


def test_a_name_two_solvers_build_turns_both_off_and_no_switch_is_reported():
    plan = steering.plan([steering.Refused("MIOpenCvBwdWrW", ("r",)),
                          steering.Refused("MIOpenBatchNormFwdTrainSpatial", ("r",)),
                          steering.Refused("Cijk_Ailk_Bljk_HHS_BH_MT64x64", ("r",))])
    assert plan.env() == {"MIOPEN_DEBUG_CONV_DIRECT_OCL_WRW2": "0", "MIOPEN_DEBUG_CONV_DIRECT_OCL_WRW53": "0"}
    why = dict(plan.unsteered)
    assert "no switch" in why["MIOpenBatchNormFwdTrainSpatial"]
    assert "no MIOpen solver" in why["Cijk_Ailk_Bljk_HHS_BH_MT64x64"]


def test_refused_in_record_takes_only_refused_kernels_of_partial_or_refused_entries():
    rec = {"status": "partial", "kernels": [{"name": "a", "outcome": "patched", "reasons": []},
                                           {"name": "b", "outcome": "refused", "reasons": ["why"]}]}
    assert steering.refused_in_record(rec) == [steering.Refused("b", ("why",), None)]
    assert steering.refused_in_record(dict(rec, status="patched")) == []


def test_a_switch_the_user_set_is_kept():
    plan = steering.plan([steering.Refused("miopenSp3AsmConv_v30_3_1_gfx10_fp16_dot2_f3x2_stride1")])
    env = {"MIOPEN_DEBUG_AMD_WINOGRAD_RXS_F3X2": "1"}
    done, kept = steering.apply_to_env(plan, env)
    assert env["MIOPEN_DEBUG_AMD_WINOGRAD_RXS_F3X2"] == "1" and [s.name for s in kept] == [
        "MIOPEN_DEBUG_AMD_WINOGRAD_RXS_F3X2"] and done == []


def test_switch_names_have_miopens_shape():
    for name in steering.load_table().switch_names:
        assert re.fullmatch(r"MIOPEN_DEBUG_[A-Z0-9_]+", name), name
