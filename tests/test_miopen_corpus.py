"""MIOpen's real kernels as a corpus (tests/fixtures/miopen, built by tools/build_miopen_kdb.py).

The DBs hold MIOpen's own kernel sources compiled with the options its solvers
pass, under MIOpen's keys.  Expected values come from the formats' rules
(LLVM's EF_AMDGPU_MACH numbers and target-id bits, MIOpen's key and hash
rules), from llvm-readelf-16 and from the manifest written at build time with
hashlib, never from kpatch's own output.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import subprocess

import pytest

from kpatch.codeobject.model import CodeObject
from kpatch.containers.kdb import KernelDB
from tests.conftest import ROOT, need_tool, run_kpatch

MIOPEN = os.path.join(ROOT, "tests", "fixtures", "miopen")
MANIFEST = os.path.join(MIOPEN, "MANIFEST.json")
DBS = {"gfx1030": os.path.join(MIOPEN, "gfx1030.kdb"), "gfx1010": os.path.join(MIOPEN, "gfx1010.kdb")}

# LLVM's ELF.h: EF_AMDGPU_MACH_AMDGCN_GFX1010 = 0x033, ..._GFX1030 = 0x036; code object V4+
# EF_AMDGPU_FEATURE_XNACK_V4: 0x300 mask, 0x000 unsupported, 0x100 any, 0x200 off, 0x300 on;
# EF_AMDGPU_FEATURE_SRAMECC_V4: 0xc00 mask (gfx10 does not have it: unsupported, 0).
MACH = {"gfx1010": 0x033, "gfx1030": 0x036}
# What the builder compiles for (MIOpen's target id on each GPU: gfx1010 reports xnack-).
XNACK_BITS = {"gfx1010": 0x200, "gfx1030": 0x000}


def manifest() -> dict:
    with open(MANIFEST) as f:
        return json.load(f)


def entries(target: str) -> list[tuple[str, str, bytes]]:
    """(kernel_name, kernel_args, code) of every row of the committed DB for ``target``."""
    db = KernelDB.open(DBS[target])
    try:
        return [(e.kernel_name, e.kernel_args, e.code()) for e in db.entries()]
    finally:
        db.close()


def key_target(kernel_args: str) -> str:
    """The device MIOpen put at the end of the key: `... -mcpu=<name>`."""
    m = re.search(r" -mcpu=(\S+)$", kernel_args)
    assert m, f"key without a trailing -mcpu=: {kernel_args!r}"
    return m.group(1)


def target_problems(kernel_name: str, kernel_args: str, code: bytes) -> list[str]:
    """What is wrong between a code object and the MIOpen key it is stored under, by the
    e_flags rule (processor and xnack bits) alone: [] when it matches."""
    want = key_target(kernel_args)
    e_flags = int.from_bytes(code[0x30:0x34], "little")
    problems = []
    if e_flags & 0xFF != MACH[want]:
        problems.append(f"{kernel_name}: e_flags mach 0x{e_flags & 0xff:02x}, key says {want} (0x{MACH[want]:02x})")
    if e_flags & 0x300 != XNACK_BITS[want]:
        problems.append(f"{kernel_name}: xnack bits 0x{e_flags & 0x300:03x}, expected 0x{XNACK_BITS[want]:03x}")
    if e_flags & 0xC00:
        problems.append(f"{kernel_name}: sramecc bits set on gfx10")
    return problems


def test_manifest_records_source_licence_and_tools():
    m = manifest()
    assert re.fullmatch(r"[0-9a-f]{40}", m["miopen"]["commit"])
    assert m["tools"]["clang-15"].startswith(("Debian clang version 15", "clang version 15"))
    with open(os.path.join(MIOPEN, "LICENSE.txt")) as f:
        assert "MIT License" in f.read()
    with open(os.path.join(MIOPEN, "README.md")) as f:
        assert "python3 tools/build_miopen_kdb.py" in f.read()
    # The only failures allowed are MIOpen's own (a kernel its solver offers on a target whose
    # source does not compile there), each with the compiler's reason.
    for f in m["failures"]:
        assert f.get("as_in_miopen") and f["reason"], f


@pytest.mark.parametrize("target", sorted(DBS))
def test_db_rows_are_the_manifest_with_miopen_keys_and_hashes(target):
    """Every row: MIOpen's key shape, MD5 (MIOpen's kernel_hash) and size as the build
    recorded them with hashlib; the set of keys is exactly the manifest's."""
    rows = entries(target)
    want = {(e["kernel_name"], e["kernel_args"]): e for e in manifest()["dbs"][f"{target}.kdb"]["entries"]}
    assert {(n, a) for n, a, _ in rows} == set(want)
    for name, args, code in rows:
        e = want[(name, args)]
        assert name == e["source"] + ".o"
        assert name.endswith((".cl.o", ".s.o", ".cpp.o"))
        assert key_target(args) == target
        assert hashlib.md5(code).hexdigest() == e["md5"] and len(code) == e["size"]
    # The DB stores the MD5 MIOpen checks on load.
    db = KernelDB.open(DBS[target])
    try:
        for e in db.entries():
            assert e.kernel_hash == hashlib.md5(e.code()).hexdigest()
    finally:
        db.close()


def test_corpus_is_big_enough():
    """The issue's floor: at least 100 gfx1030 code objects from at least 15 source files, with
    the fp32 convolution kernels (OpenCL direct, gfx10 Winograd assembly, naive and
    implicit-GEMM HIP), batch-norm, pooling, activation, softmax and tensor ops."""
    rows = manifest()["dbs"]["gfx1030.kdb"]["entries"]
    sources = {e["source"] for e in rows}
    assert len(rows) >= 100 and len(sources) >= 15
    for needed in ("MIOpenConvDirUni.cl", "Conv_Winograd_v30_3_1_fp32_f2x3_stride1.s",
                   "Conv_Winograd_v30_3_1_fp32_f3x2_stride1.s", "naive_conv.cpp",
                   "static_kernel_gridwise_convolution_implicit_gemm_v4r4_nchw_kcyx_nkhw.cpp",
                   "MIOpenBatchNormFwdInferSpatial.cl", "MIOpenPooling.cl", "MIOpenNeuron.cl",
                   "MIOpenSoftmax.cl", "MIOpenTensorKernels.cl"):
        assert needed in sources, needed


@pytest.mark.parametrize("target", sorted(DBS))
def test_every_code_object_parses_and_matches_its_key(target):
    for name, args, code in entries(target):
        co = CodeObject.from_bytes(code, name=name)
        assert co.kernels, name
        assert co.target is not None and co.target.processor == target, (name, co.target_id)
        assert target_problems(name, args, code) == []


def test_target_check_catches_a_blob_under_the_wrong_key():
    """The check above is not vacuous: a gfx1010 object stored under a gfx1030 key, and a
    gfx1030 object whose xnack bits were flipped, are both reported."""
    name, args, code = next(r for r in entries("gfx1010") if r[0].endswith(".cl.o"))
    wrong_key = args[: args.rindex("-mcpu=")] + "-mcpu=gfx1030"
    assert target_problems(name, wrong_key, code)
    name30, args30, code30 = entries("gfx1030")[0]
    flipped = bytearray(code30)
    flipped[0x31] |= 0x01  # e_flags |= 0x100: xnack "any"
    assert any("xnack" in p for p in target_problems(name30, args30, bytes(flipped)))


@pytest.mark.parametrize("target", sorted(DBS))
def test_targets_agree_with_llvm_readelf(target, tmp_path):
    """On one object per source file, LLVM's tools say the same target as the key: the
    processor (and xnack setting) in the header flags by llvm-readobj-16, amdhsa.target in
    the metadata note (v4: amdgcn-amd-amdhsa--<target id>) by llvm-readelf-16."""
    need_tool("llvm-readelf-16")
    need_tool("llvm-readobj-16")
    seen, with_target = set(), 0
    want_id = {"gfx1030": "gfx1030", "gfx1010": "gfx1010:xnack-"}[target]
    for name, args, code in entries(target):
        if name in seen:
            continue
        seen.add(name)
        p = tmp_path / "co.o"
        p.write_bytes(code)
        flags = subprocess.run(["llvm-readobj-16", "-h", str(p)], capture_output=True, text=True,
                               check=True).stdout
        assert f"EF_AMDGPU_MACH_AMDGCN_{target.upper()} " in flags, name
        assert ("EF_AMDGPU_FEATURE_XNACK_OFF_V4" in flags) == (target == "gfx1010"), name
        out = subprocess.run(["llvm-readelf-16", "--notes", str(p)], capture_output=True, text=True,
                             check=True).stdout
        m = re.search(r"amdhsa\.target:\s+'?([^'\s]+)'?", out)
        if m:  # hand-written assembly metadata (Winograd) carries no amdhsa.target
            assert m.group(1) == f"amdgcn-amd-amdhsa--{want_id}", (name, m.group(1))
            with_target += 1
        else:
            assert name.endswith(".s.o"), name
    assert len(seen) >= (15 if target == "gfx1030" else 10)
    assert with_target == len([n for n in seen if not n.endswith(".s.o")])


def _scan(db: str) -> tuple[subprocess.CompletedProcess, dict]:
    r = run_kpatch("scan", "--target", "gfx1010", "--json", db)
    assert "error:" not in r.stdout and "error:" not in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    return r, json.loads(r.stdout)


@pytest.fixture(scope="module")
def scan_gfx1030():
    return _scan(DBS["gfx1030"])


@pytest.fixture(scope="module")
def scan_gfx1010():
    return _scan(DBS["gfx1010"])


def test_scan_reads_the_whole_gfx1030_db_without_errors(scan_gfx1030):
    """`kpatch scan --target gfx1010` over the gfx1030 DB: every entry seen, no error (refusals
    and unpatchable verdicts are results, not errors)."""
    r, d = scan_gfx1030
    assert d["errors"] == []
    n = len(manifest()["dbs"]["gfx1030.kdb"]["entries"])
    assert len(d["code_objects"]) == n
    for co in d["code_objects"]:
        assert co["target"] == "gfx1030" and co["kernels"]
        for k in co["kernels"]:
            assert k["verdict"] in ("ok", "patchable", "unpatchable")


def _findings(d: dict) -> list[str]:
    return [f"{co['kernel_name']} {k['name']} {f['class']} @{f['address']:#x}: {f.get('detail', '')}"
            for co in d["code_objects"] for k in co["kernels"] for f in k.get("findings", [])]


def test_gfx1010_builds_have_no_findings(scan_gfx1010):
    """What a compiler built for gfx1010 from the same source (OpenCL, HIP) runs on gfx1010 with
    the compiler's own hazard mitigations: a finding there is a false positive of kpatch's
    analysis.  MIOpen's hand-written assembly (.s) is assembled unchanged for gfx1010, no
    mitigation inserted (issue 10, item 5), so its hazards are real; they may only be hazard
    classes, never instructions gfx1010 lacks (the assembler would have refused them)."""
    r, d = scan_gfx1010
    assert d["errors"] == []
    assert len(d["code_objects"]) == len(manifest()["dbs"]["gfx1010.kdb"]["entries"])
    compiled = [co for co in d["code_objects"] if not co["kernel_name"].endswith(".s.o")]
    assert len(compiled) >= 90
    for co in d["code_objects"]:
        assert co["target"] == "gfx1010:xnack-"
    assert _findings({"code_objects": compiled}) == []
    for co in d["code_objects"]:
        for k in co["kernels"]:
            for f in k.get("findings", []):
                assert f["class"].endswith(("Hazard", "Bug")), (co["kernel_name"], f)


def test_keys_have_the_shape_of_real_miopen_keys():
    """Keys seen in real MIOpen DBs (reference/miopen-kdb.md): the Winograd assembly's args are
    exactly `-Wa,-defsym,ROCM_METADATA_VERSION=5 -Wa,-defsym,FORCE_CACHE_BYPASS_ON_STORE=0
    -mcumode -mwavefrontsize64 -mcpu=<device>` (seen with gfx1031), the OpenCL direct
    convolution's start with ` -DMLO_HW_WAVE_SZ=64` (seen with gfx908)."""
    for target in DBS:
        rows = manifest()["dbs"][f"{target}.kdb"]["entries"]
        wino = [e for e in rows if e["source"].startswith("Conv_Winograd_v30_3_1_")]
        assert wino and all(e["kernel_args"] == "-Wa,-defsym,ROCM_METADATA_VERSION=5 -Wa,-defsym,"
                            f"FORCE_CACHE_BYPASS_ON_STORE=0 -mcumode -mwavefrontsize64 -mcpu={target}"
                            for e in wino)
        uni = [e for e in rows if e["source"] == "MIOpenConvDirUni.cl"]
        # Forward and backward data (ConvOclDirectFwd serves both; MLO_DIR_FORWARD says which).
        assert uni and all(re.match(r" -DMLO_HW_WAVE_SZ=64 -DMLO_DIR_FORWARD=[01] ", e["kernel_args"]) for e in uni)
        # ConvOclDirectFwd::GetSolution appends the bias flag after the type defines.
        assert all(e["kernel_args"].endswith(f"-DMIOPEN_FP8_CLIPPING=1 -DMLO_CONV_BIAS=0 -mcpu={target}") for e in uni)


def test_builder_reports_a_failed_compile_with_the_compilers_reason(tmp_path):
    """tools/build_miopen_kdb.py lists a failed compile with its reason instead of hiding it:
    a kernel source that does not compile gives CompileError carrying clang's error line."""
    need_tool("clang-15")
    import importlib.util
    spec = importlib.util.spec_from_file_location("build_miopen_kdb", os.path.join(ROOT, "tools", "build_miopen_kdb.py"))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    (tmp_path / "broken.cl").write_text("__kernel void k(__global float* p) { p[0] = undeclared_name; }\n")
    job = tool.Job("test", "broken.cl", "-DMIOPEN_USE_FP32=1", "gfx1030")
    with pytest.raises(tool.CompileError, match="undeclared_name") as err:
        tool.compile_job(job, str(tmp_path), 0)
    # The reason names the source file, not the build's temporary folder (MANIFEST.json is
    # committed and must not change from one rebuild to the next).
    assert str(err.value).startswith("broken.cl:") and str(tmp_path) not in str(err.value)
    (tmp_path / "empty.cl").write_text("#if 0\n__kernel void k(__global float* p) { p[0] = 1; }\n#endif\n")
    with pytest.raises(tool.CompileError, match="no kernels"):
        tool.compile_job(tool.Job("test", "empty.cl", "", "gfx1030"), str(tmp_path), 0)


def test_the_gfx1030_corpus_patches_with_nothing_left(tmp_path):
    """Every MIOpen kernel of the corpus is patched (fp32 ones all: none
    refused) or refused for an instruction gfx1010 lacks; the patched DB has
    no finding left for gfx1010, and `kpatch diff` finds no control-flow
    problem between source and output."""
    import sys

    _json = json
    src = DBS["gfx1030"]
    out_dir = tmp_path / "out"

    def run(*args):
        return subprocess.run([sys.executable, "-m", "kpatch", *args], capture_output=True, text=True,
                              timeout=900, env=dict(os.environ, KPATCH_NO_PROGRESS="1"))

    p = run("apply", "--db", src, "--mode", "override", "--cu", "18", "--out-dir", str(out_dir), "--json")
    assert p.returncode == 0, p.stderr
    doc = _json.loads(p.stdout)
    refused = [(e["kernel_name"], k["reason"]) for e in doc["entries"] for k in e["kernels"]
               if k["status"] == "refused"]
    assert all("fp16" in name and "UnsupportedInstruction" in reason for name, reason in refused), refused
    assert sum(k["status"] == "patched" for e in doc["entries"] for k in e["kernels"]) > 150
    scan = _json.loads(run("scan", "--json", "--target", "gfx1010", doc["output"]).stdout)
    left = [(o["uri"], k["name"]) for o in scan["code_objects"] for k in o["kernels"] if k.get("findings")]
    assert left == []
    diff = _json.loads(run("diff", "--json", src, doc["output"]).stdout)
    assert diff["summary"]["changed"] > 100 and diff["summary"]["control_flow_problems"] == 0


def _defines(kernel_args: str) -> dict:
    """-DNAME=VALUE of a key as {NAME: VALUE} (VALUE as int where it is one)."""
    out = {}
    for m in re.finditer(r"-D(\w+)(?:=(\S+))?", kernel_args):
        v = m.group(2)
        out[m.group(1)] = int(v) if v is not None and re.fullmatch(r"-?\d+", v) else v
    return out


def _conv_out(size: int, pad: int, fil: int, stride: int) -> int:
    """A convolution's output size (dilation 1): (size + 2 * pad - filter) / stride + 1."""
    return (size + 2 * pad - fil) // stride + 1


@pytest.mark.parametrize("target", sorted(DBS))
def test_direct_convolution_covers_all_three_directions(target):
    """MIOpen's OpenCL direct convolution in every direction: MIOpenConvDirUni.cl forward and
    backward data (ConvOclDirectFwd serves both), MIOpenConvBwdWrWS2.cl for the weights
    (ConvOclBwdWrW2<1..16> tuned, and the non-tunable 3x3).  Each key's sizes obey the
    convolution's size rule in the direction MIOpen's kernels name them: forward, OUT = conv(IN);
    backward data, IN (dy) = conv(OUT (dx)) with the padding filter - 1 - MLO_FILTER_PAD;
    weights, OUT (dy) = conv(IN (x)).  The split batch's block count is ceil(batch / loops)."""
    rows = manifest()["dbs"][f"{target}.kdb"]["entries"]
    fwd = bwd = wrw = 0
    loops = set()
    for e in rows:
        d = _defines(e["kernel_args"])
        if e["source"] == "MIOpenConvDirUni.cl":
            s, r = d["MLO_FILTER_SIZE0"], d["MLO_FILTER_SIZE1"]
            if d["MLO_DIR_FORWARD"] == 1:
                fwd += 1
                assert d["MLO_OUT_WIDTH"] == _conv_out(d["MLO_IN_WIDTH"], d["MLO_FILTER_PAD0"], s, d["MLO_FILTER_STRIDE0"])
                assert d["MLO_OUT_HEIGHT"] == _conv_out(d["MLO_IN_HEIGHT"], d["MLO_FILTER_PAD1"], r, d["MLO_FILTER_STRIDE1"])
            else:
                bwd += 1
                pw, ph = s - 1 - d["MLO_FILTER_PAD0"], r - 1 - d["MLO_FILTER_PAD1"]
                assert pw >= 0 and ph >= 0
                assert d["MLO_IN_WIDTH"] == _conv_out(d["MLO_OUT_WIDTH"], pw, s, d["MLO_FILTER_STRIDE0"]), e
                assert d["MLO_IN_HEIGHT"] == _conv_out(d["MLO_OUT_HEIGHT"], ph, r, d["MLO_FILTER_STRIDE1"]), e
            assert d["MLO_OUT_CHANNEL_STRIDE"] == d["MLO_OUT_WIDTH"] * d["MLO_OUT_HEIGHT"]
            assert d["MLO_IN_BATCH_STRIDE"] == d["MLO_N_INPUTS"] * d["MLO_IN_WIDTH"] * d["MLO_IN_HEIGHT"]
        elif e["source"] in ("MIOpenConvBwdWrWS2.cl", "MIOpenConvBwdWrW_LxG_P53.cl"):
            wrw += 1
            assert d["MLO_DIR_FORWARD"] == 0
            s, r = d["MLO_FILTER_SIZE0"], d["MLO_FILTER_SIZE1"]
            assert d["MLO_OUT_WIDTH"] == _conv_out(d["MLO_IN_WIDTH"], d["MLO_FILTER_PAD0"], s, d["MLO_FILTER_STRIDE0"]), e
            assert d["MLO_OUT_HEIGHT"] == _conv_out(d["MLO_IN_HEIGHT"], d["MLO_FILTER_PAD1"], r, d["MLO_FILTER_STRIDE1"]), e
            assert d["MLO_OUT_BATCH_STRIDE"] == d["MLO_N_OUTPUTS"] * d["MLO_OUT_WIDTH"] * d["MLO_OUT_HEIGHT"]
            assert d["MLO_IN_BATCH_STRIDE"] == d["MLO_N_INPUTS"] * d["MLO_IN_WIDTH"] * d["MLO_IN_HEIGHT"]
            assert d["MLO_WEI_BATCH_STRIDE"] == d["MLO_N_INPUTS"] * r * s
            if e["source"] == "MIOpenConvBwdWrWS2.cl":
                assert d["MLO_N_BATCH_BLKS"] == -(-d["MLO_BATCH_SZ"] // d["MLO_N_BATCH_LOOPS"])
                loops.add(d["MLO_N_BATCH_LOOPS"])
            else:  # ConvOclBwdWrW53 is stride 1 only
                assert d["MLO_FILTER_STRIDE0"] == d["MLO_FILTER_STRIDE1"] == 1
    assert fwd >= 10 and bwd >= 5 and wrw >= 20, (fwd, bwd, wrw)
    assert loops == {1, 2, 4, 8, 16}
    assert {e["source"] for e in rows} >= {"MIOpenConvBwdWrWS2.cl", "MIOpenConvBwdWrW_LxG_P53.cl"}


@pytest.mark.parametrize("target", sorted(DBS))
def test_weights_gradient_objects_hold_the_reduction_kernel(target, tmp_path):
    """ConvOclBwdWrW2 / ConvOclBwdWrW53 run MIOpenCvBwdWrW and, when the batch is split into
    blocks (ceil(batch / MLO_N_BATCH_LOOPS) > 1), sum the blocks with MIOpenCvBwdWrW_rdc from
    the same object: llvm-readelf-16 lists both kernel descriptors in every such object."""
    need_tool("llvm-readelf-16")
    split = 0
    for name, args, code in entries(target):
        if name not in ("MIOpenConvBwdWrWS2.cl.o", "MIOpenConvBwdWrW_LxG_P53.cl.o"):
            continue
        p = tmp_path / "co.o"
        p.write_bytes(code)
        syms = subprocess.run(["llvm-readelf-16", "-s", str(p)], capture_output=True, text=True, check=True).stdout
        assert re.search(r"\sMIOpenCvBwdWrW\.kd$", syms, re.M), args
        d = _defines(args)
        if -(-d["MLO_BATCH_SZ"] // d["MLO_N_BATCH_LOOPS"]) > 1:
            split += 1
            assert re.search(r"\sMIOpenCvBwdWrW_rdc\.kd$", syms, re.M), args
    assert split >= 4


def test_batchnorm_training_kernels_with_miopens_options():
    """Batch-norm training (spatial forward and backward, per-activation forward and backward) is
    in the gfx1030 corpus; each key's sizes are consistent (NHW = N*HW, CHW = C*HW, NCHW =
    N*C*HW), MIO_BN_GFX103X says the device family (1 on gfx1030, 0 on gfx1010), the spatial
    backward's wave size is gfx10's 32.  On gfx1010 the per-activation kernels are built and the
    spatial ones are MIOpen's own compile failures."""
    m = manifest()
    train = ("MIOpenBatchNormFwdTrainSpatial.cl", "MIOpenBatchNormBwdSpatial.cl",
             "MIOpenBatchNormFwdTrainPerAct.cl", "MIOpenBatchNormBwdPerAct.cl")
    for target in DBS:
        rows = [e for e in m["dbs"][f"{target}.kdb"]["entries"] if e["source"] in train]
        for e in rows:
            d = _defines(e["kernel_args"])
            assert d["MIOPEN_USE_FP32"] == 1 and d["MIO_BN_GFX103X"] == int(target == "gfx1030")
            hw = d["MIO_BN_HW"]
            assert d["MIO_BN_NHW"] == d["MIO_BN_N"] * hw and d["MIO_BN_CHW"] == d["MIO_BN_C"] * hw
            assert d["MIO_BN_NCHW"] == d["MIO_BN_N"] * d["MIO_BN_C"] * hw
            if e["source"] == "MIOpenBatchNormBwdSpatial.cl":
                assert d["MIO_WAVESIZE"] == 32
        sources = collections.Counter(e["source"] for e in rows)
        if target == "gfx1030":
            assert all(sources[s] >= 3 for s in train), sources
            variants = {_defines(e["kernel_args"])["MIO_BN_VARIANT"] for e in rows
                        if e["source"] == "MIOpenBatchNormFwdTrainSpatial.cl"}
            assert variants == {0, 1, 2}  # single (0, 1) and multiple (2) solvers
        else:
            assert sources["MIOpenBatchNormFwdTrainPerAct.cl"] >= 3 and sources["MIOpenBatchNormBwdPerAct.cl"] >= 3
    failed = {(f["target"], f["source"]) for f in m["failures"]}
    assert failed == {("gfx1010", "MIOpenBatchNormFwdTrainSpatial.cl"), ("gfx1010", "MIOpenBatchNormBwdSpatial.cl")}


def test_gfx1010_batchnorm_failures_are_gfx10s_missing_row_bcast(tmp_path):
    """The gfx1010 spatial batch-norm failures are real, not the builder's: the compiler's reason
    is an invalid operand in reduction_functions.h (MIOpen's DPP reduction), and LLVM's
    assembler accepts that reduction's `row_bcast:15` DPP add for gfx900 but rejects it for
    gfx1010 (gfx10 has no row_bcast)."""
    need_tool("llvm-mc-16")
    for f in manifest()["failures"]:
        assert "reduction_functions.h" in f["reason"] and "not a valid operand" in f["reason"], f
    src = tmp_path / "dpp.s"
    src.write_text("v_add_f32 v0, v0, v0 row_bcast:15 row_mask:0xa\n")

    def mc(cpu):
        return subprocess.run(["llvm-mc-16", "-triple=amdgcn-amd-amdhsa", f"-mcpu={cpu}", "-show-encoding", str(src)],
                              capture_output=True, text=True)
    assert mc("gfx900").returncode == 0
    r = mc("gfx1010")
    assert r.returncode != 0 and "not a valid operand" in r.stderr
