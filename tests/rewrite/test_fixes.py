"""The fixes that need registers of their own, clause drops and approximations
(kpatch/rewrite/fixes.py, spareregs.py), judged by LLVM's view of the bytes.

Expected text is built from llvm-objdump-16's disassembly of the *original*
object (the operands and offsets the fix must preserve) and the ISA's rules
(v_mad_u64_u32 D, null, N, 1, A computes A + N; a non-NSA image instruction
reads its addresses from one contiguous tuple), then compared with
llvm-objdump-16 --mcpu=gfx1010 of the patched object; spare registers are
checked against every VGPR LLVM's text of the original kernel names and
against the .vgpr_count llvm-readelf-16 prints.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest


from conftest import kpatch_in_process
from kpatch.analysis import analyse
from kpatch.codeobject import CodeObject
from kpatch.rewrite.patcher import patch_code_object
from kpatch.rewrite.provenance import read_provenance
from rw_common import HAZARDS, ROCPRIM, need

CASES = os.path.join(os.path.dirname(HAZARDS), "cases.json")
KERNEL_INC = os.path.join(os.path.dirname(HAZARDS), "src", "kernel.inc")
_LABEL = re.compile(r"^[0-9a-f]+ <(?P<name>[^>]+)>:$")
_INST = re.compile(r"^\s+(?P<text>\S.*?)\s*// (?P<addr>[0-9A-F]+):")
_VREG = re.compile(r"\bv(\d+)\b|\bv\[(\d+):(\d+)\]")


def kernels_text(path: str, mcpu: str) -> dict[str, list[str]]:
    """Kernel/function name -> instruction texts, as llvm-objdump-16 prints them."""
    out = subprocess.run([need("llvm-objdump-16"), "-d", f"--mcpu={mcpu}", path], capture_output=True,
                         text=True, check=True).stdout
    funcs: dict[str, list[str]] = {}
    cur = None
    for line in out.splitlines():
        if m := _LABEL.match(line):
            cur = funcs.setdefault(m["name"], [])
        elif (m := _INST.match(line)) and cur is not None:
            cur.append(" ".join(m["text"].split()))
    return funcs


def vgpr_top(lines: list[str]) -> int:
    """One past the highest VGPR LLVM's text names."""
    top = 0
    for line in lines:
        for a, lo, hi in _VREG.findall(line):
            top = max(top, int(a or hi) + 1)
    return top


def vgpr_counts(path: str) -> dict[str, int]:
    """Kernel name -> .vgpr_count from llvm-readelf-16 --notes."""
    out = subprocess.run([need("llvm-readelf-16"), "--notes", path], capture_output=True, text=True,
                         check=True).stdout
    counts, name, pending = {}, None, None
    for line in out.splitlines():
        s = line.strip().lstrip("- ")
        if s.startswith(".name:"):
            name = s.split(":", 1)[1].strip()
            if pending is not None:
                counts[name], pending = pending, None
        elif s.startswith(".vgpr_count:"):
            v = int(s.split(":", 1)[1])
            if name is not None and name not in counts:
                counts[name] = v
            else:
                pending = v
    return counts


def next_free_vgpr(path: str, kernel: str, wave: int = 32) -> int:
    """The VGPR allocation of ``kernel``'s descriptor, as llvm-objdump-16 -D prints it
    (which reads the count with the granule of the wave size given by --mattr, not
    by the descriptor: wave64 needs -wavefrontsize32,+wavefrontsize64)."""
    mattr = [] if wave == 32 else ["--mattr=-wavefrontsize32,+wavefrontsize64"]
    out = subprocess.run([need("llvm-objdump-16"), "-D", "--mcpu=gfx1030", *mattr,
                          f"--disassemble-symbols={kernel}.kd", path], capture_output=True, text=True,
                         check=True).stdout
    return int(re.search(r"\.amdhsa_next_free_vgpr (\d+)", out)[1])


def patched(tmp_path, src: str, **kw) -> tuple[str, object]:
    res = patch_code_object(open(src, "rb").read(), mode="override", **kw)
    assert res.data is not None, res.note
    out = tmp_path / ("patched-" + os.path.basename(src))
    out.write_bytes(res.data)
    return str(out), res


@pytest.fixture(scope="module")
def hazard_case(tmp_path_factory):
    """``get(object, cls)``: (source path, patched path, patch result, LLVM's
    original and patched text per kernel, kernels with a ``cls`` case); each
    hazard object is patched once for the module."""
    done: dict = {}

    def get(name: str, cls: str):
        if name not in done:
            src = os.path.join(HAZARDS, name)
            out, res = patched(tmp_path_factory.mktemp("patched"), src)
            done[name] = (src, out, res, kernels_text(src, "gfx1030"), kernels_text(out, "gfx1010"))
        return (*done[name], {c["kernel"] for c in cases(cls)})

    return get


def cases(cls: str) -> list[dict]:
    return [c for c in json.load(open(CASES))["cases"] if c["class"] == cls and c["expect"]]


def _imm(text: str) -> int:
    return int(text, 0) & 0xFFFFFFFF


def _no_findings_left(path: str, kernels: set[str]) -> None:
    rep = analyse(CodeObject.from_bytes(open(path, "rb").read()), "gfx1010")
    assert [(k.name, f.cls) for k in rep.kernels if k.name in kernels for f in k.findings] == []


def _check_flat_folds(old: list[str], new: list[str], floor: int) -> int:
    """Every FLAT-segment access with an offset in ``old`` appears in ``new`` as
    v_mad_u64_u32 v[t:t+1], null, N, 1, v[a:a+1] + the access on v[t:t+1]
    without offset, with t >= ``floor``; returns how many."""
    want = [line for line in old if line.startswith("flat_") and " offset:" in line]
    mads = [k for k, line in enumerate(new) if line.startswith("v_mad_u64_u32")]
    assert len(mads) == len(want)
    for line, k in zip(want, mads):
        m = re.fullmatch(r"v_mad_u64_u32 v\[(\d+):(\d+)\], null, (\S+), 1, v\[(\d+):(\d+)\]", new[k])
        assert m, new[k]
        t, a = int(m[1]), int(m[4])
        assert int(m[2]) == t + 1 and int(m[5]) == a + 1 and t >= floor
        off = int(re.search(r" offset:(\d+)", line)[1])
        assert _imm(m[3]) == off
        expect = re.sub(r" offset:\d+", "", line).replace(f"v[{a}:{a + 1}]", f"v[{t}:{t + 1}]", 1)
        assert new[k + 1] == expect
    assert not [line for line in new if line.startswith("flat_") and " offset:" in line]
    return len(want)


def test_flat_offset_fold_on_the_hazard_cases(hazard_case):
    src, out, res, old, new, names = hazard_case("mem_offsets.gfx1030.hsaco", "FlatSegmentOffsetBug")
    counts = vgpr_counts(out)
    assert names and {k.name for k in res.kernels if k.status == "patched" and "KI003" in k.rules} == names
    for n in names:
        t_floor = max(vgpr_top(old[n]), vgpr_counts(src).get(n, 0))
        assert _check_flat_folds(old[n], new[n], t_floor) == 1
        assert counts[n] >= t_floor + 2  # the metadata counts the registers the fix took
    _no_findings_left(out, names)


def test_flat_offset_fold_on_rocprim(tmp_path):
    """rocPRIM's lookback-scan kernels (compiler output): both FLAT offsets of
    each kernel folded, into VGPRs above everything the kernel names."""
    out, res = patched(tmp_path, ROCPRIM)
    old, new = kernels_text(ROCPRIM, "gfx1030"), kernels_text(out, "gfx1010")
    folded = [k.name for k in res.kernels if "KI003" in k.rules]
    assert len(folded) == 8 and all(k.status != "refused" for k in res.kernels)
    kd_old = {k.name: k.descriptor.vgpr_blocks_count for k in CodeObject.from_bytes(open(ROCPRIM, "rb").read()).kernels}
    co_new = CodeObject.from_bytes(open(out, "rb").read())
    for n in folded:
        floor = max(vgpr_top(old[n]), vgpr_counts(ROCPRIM)[n])
        assert _check_flat_folds(old[n], new[n], floor) == 2
        # the spare pair fits the slack of the existing allocation: no growth
        assert co_new.kernel(n).descriptor.vgpr_blocks_count == kd_old[n] >= floor + 2
    _no_findings_left(out, set(folded))


def test_scratch_offset_fold(hazard_case):
    src, out, _, old, new, names = hazard_case("mem_offsets.gfx1030.hsaco", "NegativeUnalignedScratchOffsetBug")
    assert len(names) == 3
    for n in names:
        [line] = [x for x in old[n] if x.startswith("scratch_") and " offset:-" in x]
        off = int(re.search(r" offset:(-\d+)", line)[1])
        mn, rest = line.split(" ", 1)
        ops = rest.split(", ")
        at = 0 if "_store_" in mn else 1  # scratch_store_* vaddr, vdata, off / scratch_load_* vdst, vaddr, off
        addr = ops[at]
        k = next(i for i, x in enumerate(new[n]) if x.startswith("v_add_nc_u32"))
        m = re.fullmatch(r"v_add_nc_u32_e32 (v\d+), (\S+), (v\d+)", new[n][k])
        assert m and m[3] == addr and _imm(m[2]) == off & 0xFFFFFFFF
        assert int(m[1][1:]) >= max(vgpr_top(old[n]), vgpr_counts(src).get(n, 0))
        expect = mn + " " + ", ".join(m[1] if i == at else o for i, o in enumerate(ops))
        assert new[n][k + 1] == re.sub(r" offset:-\d+", "", expect)
    _no_findings_left(out, names)


def test_nsa_to_contiguous(hazard_case):
    src, out, res, old, new, names = hazard_case("nsa.gfx1030.hsaco", "NSAMaxSize")
    status = {k.name: k for k in res.kernels}
    assert names and all("KI005" in status[n].rules for n in names)
    for n in names:
        [line] = [x for x in old[n] if x.startswith("image_") and "[" in x.split(", s[")[0]]
        regs = re.search(r"\[(v\d+(?:, v\d+)*)\]", line)[1].split(", ")
        k = next(i for i, x in enumerate(new[n]) if x.startswith("image_"))
        movs = new[n][k - len(regs):k]
        t = int(re.fullmatch(r"v_mov_b32_e32 v(\d+), \S+", movs[0])[1])
        assert movs == [f"v_mov_b32_e32 v{t + i}, {r}" for i, r in enumerate(regs)]
        assert t >= vgpr_top(old[n])
        assert new[n][k] == line.replace(f"[{', '.join(regs)}]", f"v[{t}:{t + len(regs) - 1}]")
        # the allocation holds the tuple: grown by whole 8-VGPR granules (wave32) when needed
        before, after = next_free_vgpr(src, n), next_free_vgpr(out, n)
        assert after == max(before, -(-(t + len(regs)) // 8) * 8)
        assert vgpr_counts(out)[n] == t + len(regs)
    _no_findings_left(out, names)


def test_drop_clause(hazard_case):
    _, out, _, old, new, names = hazard_case("nsa.gfx1030.hsaco", "NSAClauseBug")
    assert len(names) == 2
    for n in names:
        assert any(x.startswith("s_clause") for x in old[n])
        assert new[n] == ["s_nop 0" if x.startswith("s_clause") else x for x in old[n]]
    _no_findings_left(out, names)


# --- kernels built here, for what the fixtures do not have --------------------------

def _build(tmp_path, body: str, vgprs: int = 32, metadata: bool = True, after: str = "",
           vgpr_count: int | None = None, workgroup: int = 256, wave: int = 32, wgp: int = 0,
           lds: int = 0, extra_md: str = "") -> str:
    """A gfx1030 object with kernel ``k`` (``body``), ``vgprs`` allocated and
    ``vgpr_count`` (default: ``vgprs``) in its metadata, ``workgroup`` as its
    .max_flat_workgroup_size, wave32 or wave64, WGP mode ``wgp`` and ``lds`` bytes of LDS."""
    clang = need("clang-15")
    work = tmp_path / "build"
    work.mkdir(exist_ok=True)
    inc = open(KERNEL_INC).read().replace(".amdhsa_next_free_vgpr 32", f".amdhsa_next_free_vgpr {vgprs}")
    inc = inc.replace(".amdhsa_wavefront_size32 1", f".amdhsa_wavefront_size32 {int(wave == 32)}")
    (work / "kernel.inc").write_text(inc)
    meta = ("\n.amdgpu_metadata\n---\namdhsa.version: [ 1, 1 ]\namdhsa.target: amdgcn-amd-amdhsa--gfx1030\n"
            "amdhsa.kernels:\n  - .name: k\n    .symbol: k.kd\n    .kind: normal\n"
            "    .kernarg_segment_size: 0\n    .kernarg_segment_align: 4\n"
            f"    .group_segment_fixed_size: {lds}\n"
            "    .private_segment_fixed_size: 0\n"
            f"    .wavefront_size: {wave}\n    .sgpr_count: 32\n    .vgpr_count: {vgpr_count or vgprs}\n"
            f"    .max_flat_workgroup_size: {workgroup}\n{extra_md}    .args: []\n...\n"
            ".end_amdgpu_metadata\n") if metadata else ""
    (work / "k.s").write_text('.include "kernel.inc"\nKERNEL k\n' + body
                              + f"\n    s_endpgm\nEND_KERNEL k, {wgp}, {lds}\n" + after + meta)
    subprocess.run([clang, "-x", "assembler", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1030",
                    "-mcode-object-version=4", "k.s", "-o", "k.hsaco"], cwd=work, check=True)
    return str(work / "k.hsaco")


def test_vgpr_indexing_refuses_the_fold(tmp_path):
    obj = _build(tmp_path, "    s_mov_b32 m0, 2\n    v_movrels_b32 v1, v0\n    flat_load_dword v2, v[4:5] offset:8")
    res = patch_code_object(open(obj, "rb").read(), mode="override")
    [k] = res.kernels
    assert k.status == "refused" and "v_movrel" in k.reason


def test_no_room_to_grow_refuses_the_fold(tmp_path):
    obj = _build(tmp_path, "    v_mov_b32 v255, 0\n    flat_load_dword v2, v[4:5] offset:8", vgprs=256)
    res = patch_code_object(open(obj, "rb").read(), mode="override")
    [k] = res.kernels
    assert k.status == "refused" and "256" in k.reason and "spare VGPR" in k.reason


def test_fold_inside_a_clause_drops_the_clause(tmp_path):
    obj = _build(tmp_path, "    s_clause 0x1\n    flat_load_dword v2, v[4:5] offset:8\n"
                           "    flat_load_dword v3, v[6:7]")
    out, res = patched(tmp_path, obj)
    new = kernels_text(out, "gfx1010")["k"]
    assert res.kernels[0].status == "patched"
    assert new[:4] == ["s_nop 0", "v_mad_u64_u32 v[32:33], null, 8, 1, v[4:5]",
                       "flat_load_dword v2, v[32:33]", "flat_load_dword v3, v[6:7]"]


def test_object_without_notes_is_refused_not_crashed(tmp_path):
    """No note section to hold the provenance record: refused with the reason."""
    obj = _build(tmp_path, "    s_inst_prefetch 0x1", metadata=False)
    res = patch_code_object(open(obj, "rb").read(), mode="override")
    assert res.data is None and res.kernels[0].status == "refused" and "provenance" in res.kernels[0].reason


# --- approximations ------------------------------------------------------------------

def test_approximations_only_when_named(tmp_path):
    p = kpatch_in_process("apply", "--db", "@sample", "--mode", "override", "--cu", "18", "--out-dir",
                   str(tmp_path / "a"), "--dry-run", "--json")
    doc = json.loads(p.stdout)
    refused = {k["name"]: k["reason"] for e in doc["entries"] for k in e["kernels"] if k["status"] == "refused"}
    assert "--allow-approx legacy-fma-as-mad" in refused["asm_scale_loop"]
    assert "--allow-approx dot2-fma-mix" in refused["half2_dot"]
    p = kpatch_in_process("apply", "--db", "@sample", "--mode", "override", "--cu", "18", "--out-dir",
                   str(tmp_path / "a"), "--rules", "legacy-fma-as-mad")
    assert p.returncode == 2 and "--allow-approx legacy-fma-as-mad" in p.stderr
    p = kpatch_in_process("apply", "--db", "@sample", "--mode", "override", "--cu", "18", "--out-dir",
                   str(tmp_path / "a"), "--allow-approx", "fast-math")
    assert p.returncode == 2 and "no such approximation" in p.stderr and "Traceback" not in p.stderr


def _sample_object(name: str) -> bytes:
    import sqlite3
    import bz2
    from kpatch.data import sample_db_path

    con = sqlite3.connect(sample_db_path())
    blob, size = con.execute("SELECT kernel_blob, uncompressed_size FROM kern_db WHERE kernel_name = ? "
                             "ORDER BY id LIMIT 1", (name,)).fetchone()
    return bz2.decompress(blob) if size else blob


def test_legacy_fma_as_mad_keeps_the_bytes(tmp_path):
    src = tmp_path / "asm.hsaco"
    src.write_bytes(_sample_object("asm_kernels.s.o"))
    out, res = patched(tmp_path, str(src), rule_sets=["gfx1010-hazards", "gfx1010-isa", "cu-mode",
                                                              "legacy-fma-as-mad"])
    k = next(k for k in res.kernels if k.name == "asm_scale_loop")
    assert k.status == "patched" and "KA001" in k.rules
    assert "KA001" in read_provenance(open(out, "rb").read())["rules"]
    old = kernels_text(str(src), "gfx1030")["asm_scale_loop"]
    new = kernels_text(out, "gfx1010")["asm_scale_loop"]
    [line] = [x for x in old if x.startswith("v_fmac_legacy_f32")]
    assert line.replace("v_fmac_legacy", "v_mac_legacy") in new  # same bytes, gfx1010's reading


def test_dot2_fma_mix(tmp_path):
    src = tmp_path / "math.hsaco"
    src.write_bytes(_sample_object("mathops.cpp.o"))
    out, res = patched(tmp_path, str(src), rule_sets=["gfx1010-hazards", "gfx1010-isa", "cu-mode",
                                                              "dot2-fma-mix"])
    k = next(k for k in res.kernels if k.name == "half2_dot")
    assert k.status == "patched" and "KA002" in k.rules
    old = kernels_text(str(src), "gfx1030")["half2_dot"]
    new = kernels_text(out, "gfx1010")["half2_dot"]
    [line] = [x for x in old if x.startswith("v_dot2c_f32_f16")]
    d, a, b = re.fullmatch(r"v_dot2c_f32_f16_e32 (v\d+), (v\d+), (v\d+)", line).groups()
    assert d not in (a, b)  # in place: the accumulator holds the partial sum
    k = new.index(f"v_fma_mix_f32 {d}, {a}, {b}, {d} op_sel:[1,1,0] op_sel_hi:[1,1,0]")
    assert new[k + 1] == f"v_fma_mix_f32 {d}, {a}, {b}, {d} op_sel_hi:[1,1,0]"
    assert not [x for x in new if "dot" in x]
    _no_findings_left(out, {"half2_dot"})



def llvm_text(code: bytes, mcpu: str, tmp_path) -> list[str]:
    """llvm-objdump-16's text of raw instruction bytes (assembled as .long words by llvm-mc-16)."""
    words = ", ".join(f"0x{int.from_bytes(code[k:k + 4], 'little'):08x}" for k in range(0, len(code), 4))
    (tmp_path / "w.s").write_text(f".text\n.long {words}\n")
    subprocess.run([need("llvm-mc-16"), "-triple=amdgcn-amd-amdhsa", f"-mcpu={mcpu}", "-filetype=obj",
                    str(tmp_path / "w.s"), "-o", str(tmp_path / "w.o")], check=True)
    out = subprocess.run([need("llvm-objdump-16"), "-d", f"--mcpu={mcpu}", str(tmp_path / "w.o")],
                         capture_output=True, text=True, check=True).stdout
    return [" ".join(m["text"].split()) for line in out.splitlines() if (m := _INST.match(line))]


def test_opcode_reuse_reencodes_by_mnemonic(tmp_path):
    """The generic path of the opcode-reuse fix: an instruction gfx1010 has under
    the same mnemonic is re-encoded with gfx1010's opcode, and llvm-objdump-16
    --mcpu=gfx1010 reads the new bytes as gfx1030 read the old ones."""
    from kpatch.analysis.findings import Finding
    from kpatch.rewrite.fixes import FixContext, opcode_reuse

    src = os.path.join(HAZARDS, "mem_offsets.gfx1030.hsaco")
    co = CodeObject.from_bytes(open(src, "rb").read())
    for k in co.kernels:
        ctx = FixContext(co, k)
        for inst in ctx.code.insts:
            [edit] = opcode_reuse(ctx, Finding("OpcodeReuse", inst.address, "test"), "KI002")
            assert edit.address == inst.address and len(edit.code) == inst.size
            assert llvm_text(edit.code, "gfx1010", tmp_path) == llvm_text(inst.raw, "gfx1030", tmp_path)


def test_a_calling_kernel_counts_every_function(tmp_path):
    """A kernel that calls may run any function of .text: its spare VGPRs start
    above the VGPRs of the callee too (v40 here, named only in the callee)."""
    callee = (".text\n.p2align 8\n.type callee,@function\ncallee:\n    v_mov_b32 v40, 0\n"
              "    s_setpc_b64 s[30:31]\n.Lcallee_end:\n.size callee, .Lcallee_end - callee\n")
    obj = _build(tmp_path, "    s_call_b64 s[30:31], callee\n    flat_load_dword v2, v[4:5] offset:8", vgprs=48,
                 after=callee, vgpr_count=8)
    out, res = patched(tmp_path, obj)
    assert res.kernels[0].status == "patched", res.kernels[0].reason
    new = kernels_text(out, "gfx1010")
    mad = next(x for lines in new.values() for x in lines if x.startswith("v_mad_u64_u32"))
    assert mad == "v_mad_u64_u32 v[41:42], null, 8, 1, v[4:5]"


# --- residency: CU mode and VGPR growth must leave the largest workgroup resident ---------
#
# gfx1010 hardware, as LLVM's AMDGPUBaseInfo has it for GFX10.1: a CU has 2 SIMD32s and a WGP 4
# (getEUsPerCU); a workgroup's waves are spread evenly over them (getWavesPerEUForWorkGroup); a
# SIMD's VGPR file holds 1024 wave32 registers or 512 wave64 ones (getTotalNumVGPRs).
SIMDS_CU, SIMDS_WGP = 2, 4
VGPR_FILE = {32: 1024, 64: 512}
LDS_B64 = "    ds_read_b64 v[2:3], v0\n    s_waitcnt lgkmcnt(0)"
FLAT_FOLD = "    flat_load_dword v2, v[4:5] offset:8"


def _resident(workgroup: int, wave: int, alloc: int, simds: int) -> bool:
    waves = -(-workgroup // wave)
    return -(-waves // simds) * alloc <= VGPR_FILE[wave]


def _descriptor_text(path: str) -> str:
    return subprocess.run([need("llvm-objdump-16"), "-D", "--mcpu=gfx1030", "--disassemble-symbols=k.kd", path],
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("wave,vgprs,workgroup", [(32, 128, 1024), (32, 64, 1024), (32, 128, 256),
                                                  (64, 128, 1024), (64, 64, 1024)])
def test_cu_mode_must_fit(tmp_path, wave, vgprs, workgroup):
    """A WGP-mode kernel with LdsMisalignedBug goes to CU mode only if its
    largest workgroup fits the 2 SIMDs of one CU; otherwise it is refused."""
    obj = _build(tmp_path, LDS_B64, vgprs=vgprs, workgroup=workgroup, wave=wave, wgp=1, lds=256)
    alloc = next_free_vgpr(obj, "k", wave)  # LLVM's reading of the descriptor
    assert ".amdhsa_workgroup_processor_mode 1" in _descriptor_text(obj)
    assert _resident(workgroup, wave, alloc, SIMDS_WGP)  # it fits as it is
    res = patch_code_object(open(obj, "rb").read(), mode="override")
    [k] = res.kernels
    if _resident(workgroup, wave, alloc, SIMDS_CU):
        assert k.status == "patched", k.reason
        out = tmp_path / "out.hsaco"
        out.write_bytes(res.data)
        assert ".amdhsa_workgroup_processor_mode 0" in _descriptor_text(str(out))
    else:
        assert k.status == "refused" and res.data is None
        assert "LdsMisalignedBug needs CU mode" in k.reason and f"SIMD's {VGPR_FILE[wave]}" in k.reason


@pytest.mark.parametrize("wgp", [1, 0])
def test_vgpr_growth_checks_the_kernels_mode(tmp_path, wgp):
    """Growing the allocation is checked in the mode the kernel runs in: a
    1024-wide wave32 workgroup with 72 VGPRs fits a WGP (8 waves per SIMD)
    but not a CU (16 waves per SIMD)."""
    obj = _build(tmp_path, FLAT_FOLD, vgprs=64, workgroup=1024, wgp=wgp)
    res = patch_code_object(open(obj, "rb").read(), mode="override")
    [k] = res.kernels
    grown = next_free_vgpr(obj, "k") + 8  # the spare pair at v64 needs one more wave32 granule
    if _resident(1024, 32, grown, SIMDS_WGP if wgp else SIMDS_CU):
        assert k.status == "patched", k.reason
        out = tmp_path / "out.hsaco"
        out.write_bytes(res.data)
        assert next_free_vgpr(str(out), "k") == grown
    else:
        assert k.status == "refused" and "spare VGPR" in k.reason and "CU mode" in k.reason


@pytest.mark.parametrize("workgroup", [1024, 512])
def test_cu_mode_is_checked_with_the_grown_allocation(tmp_path, workgroup):
    """A WGP-mode kernel that needs both CU mode and a grown allocation must fit a
    CU with the grown allocation."""
    obj = _build(tmp_path, LDS_B64 + "\n" + FLAT_FOLD, vgprs=64, workgroup=workgroup, wgp=1, lds=256)
    grown = next_free_vgpr(obj, "k") + 8
    assert _resident(workgroup, 32, grown, SIMDS_WGP)
    res = patch_code_object(open(obj, "rb").read(), mode="override")
    [k] = res.kernels
    if _resident(workgroup, 32, grown, SIMDS_CU):
        assert k.status == "patched", k.reason
        out = tmp_path / "out.hsaco"
        out.write_bytes(res.data)
        text = _descriptor_text(str(out))
        assert ".amdhsa_workgroup_processor_mode 0" in text and next_free_vgpr(str(out), "k") == grown
    else:
        assert k.status == "refused" and "LdsMisalignedBug needs CU mode" in k.reason and str(grown) in k.reason


def test_cu_mode_uses_the_required_workgroup_size(tmp_path):
    """.reqd_workgroup_size bounds the workgroup below .max_flat_workgroup_size:
    16 x 16 = 256 work-items of 128 VGPRs fit a CU (4 waves per SIMD)."""
    obj = _build(tmp_path, LDS_B64, vgprs=128, workgroup=1024, wgp=1, lds=256,
                 extra_md="    .reqd_workgroup_size: [ 16, 16, 1 ]\n")
    assert not _resident(1024, 32, 128, SIMDS_CU) and _resident(256, 32, 128, SIMDS_CU)
    res = patch_code_object(open(obj, "rb").read(), mode="override")
    assert res.kernels[0].status == "patched", res.kernels[0].reason


def test_residency_refuses_more_lds_than_a_workgroup_may_have(tmp_path):
    """A workgroup may have 64 KiB of LDS (LLVM: getLocalMemorySize for GFX10)."""
    from kpatch.rewrite import residency

    for lds, ok in ((65536, True), (65540, False)):
        obj = _build(tmp_path, LDS_B64, vgprs=32, workgroup=64, wgp=1, lds=lds)
        [k] = CodeObject.from_bytes(open(obj, "rb").read()).kernels
        why = residency.fits(k, cu_mode=True)
        assert (why is None) == ok and (ok or "65540 bytes of LDS" in why)


# --- spare VGPRs: M0-relative VGPR access and undecodable words refuse ---------------------

def test_swaprel_refuses_the_fold(tmp_path):
    """v_swaprel_b32 swaps VGPRs relative to M0 (LLVM: implicit use of M0), so
    no VGPR can be proved unused: the fold that needs a spare pair is refused,
    naming the instruction."""
    obj = _build(tmp_path, "    s_mov_b32 m0, 2\n    v_swaprel_b32 v1, v0\n" + FLAT_FOLD)
    assert "v_swaprel_b32 v1, v0" in kernels_text(obj, "gfx1030")["k"]  # what LLVM reads there
    res = patch_code_object(open(obj, "rb").read(), mode="override")
    [k] = res.kernels
    assert k.status == "refused" and "spare VGPR" in k.reason and "v_swaprel_b32" in k.reason


def test_swaprel_in_a_callee_refuses_the_fold(tmp_path):
    """The scan of a calling kernel covers its callees: v_swaprel_b32 there refuses too."""
    callee = (".text\n.p2align 8\n.type callee,@function\ncallee:\n    v_swaprel_b32 v1, v0\n"
              "    s_setpc_b64 s[30:31]\n.Lcallee_end:\n.size callee, .Lcallee_end - callee\n")
    obj = _build(tmp_path, "    s_call_b64 s[30:31], callee\n" + FLAT_FOLD, vgprs=48, after=callee, vgpr_count=8)
    [k] = patch_code_object(open(obj, "rb").read(), mode="override").kernels
    assert k.status == "refused" and "v_swaprel_b32" in k.reason


def _symbol_value(path: str, name: str) -> int:
    out = subprocess.run([need("llvm-readelf-16"), "-s", path], capture_output=True, text=True, check=True).stdout
    return next(int(f[1], 16) for line in out.splitlines() if (f := line.split()) and f[-1] == name)


@pytest.mark.parametrize("where", ["kernel", "callee"])
def test_undecodable_word_refuses_the_fold(tmp_path, where):
    """A word of the scanned code that does not decode (0xffffffff is no gfx1030
    instruction for llvm-objdump-16) names registers nobody knows: a fix that
    needs spare VGPRs is refused with the word's address, not skipped over -
    in the kernel (after the fold) or in a function of .text it may call."""
    word = "    s_branch .Lover\n    .long 0xffffffff\n.Lover:\n"
    if where == "kernel":
        obj = _build(tmp_path, FLAT_FOLD + "\n" + word)
        at = _symbol_value(obj, "k") + 8 + 4  # after the 8-byte flat_load and the s_branch
    else:
        callee = (".text\n.p2align 8\n.type callee,@function\ncallee:\n" + word +
                  "    s_setpc_b64 s[30:31]\n.Lcallee_end:\n.size callee, .Lcallee_end - callee\n")
        obj = _build(tmp_path, "    s_call_b64 s[30:31], callee\n" + FLAT_FOLD, vgprs=48, after=callee, vgpr_count=8)
        at = _symbol_value(obj, "callee") + 4
    out = subprocess.run([need("llvm-objdump-16"), "-d", "--mcpu=gfx1030", obj], capture_output=True, text=True,
                         check=True).stdout
    assert re.search(rf"\.long 0xffffffff\s+// {at:012X}:", out)  # LLVM cannot decode it either
    [k] = patch_code_object(open(obj, "rb").read(), mode="override").kernels
    assert k.status == "refused" and "spare VGPR" in k.reason and f"{at:#x}" in k.reason, k.reason


def test_implicit_table_matches_llvm(tmp_path):
    """kpatch/isa/tables/implicit.json is what tools/gen_isa_tables.py --implicit
    generates from libLLVM-16's instruction info now."""
    import shutil
    import sys

    if not (shutil.which("c++") and shutil.which("llvm-config-16")
            and os.path.exists("/usr/lib/llvm-16/include/llvm/MC/MCInstrDesc.h")):
        pytest.skip("needs a C++ compiler and llvm-16-dev")
    tools = os.path.join(os.path.dirname(HAZARDS), "..", "..", "..", "tools")
    sys.path.insert(0, os.path.abspath(tools))
    try:
        import gen_isa_tables
    finally:
        sys.path.pop(0)
    new = tmp_path / "implicit.json"
    gen_isa_tables.write_implicit(list(gen_isa_tables.TARGETS), str(new))
    assert json.load(open(new)) == json.load(open(gen_isa_tables.IMPLICIT_PATH))
    # the M0-relative VGPR moves LLVM knows for GFX10 are among the M0 readers
    m0 = {e["llvm"] for ops in json.load(open(new))["targets"]["gfx1030"].values() for e in ops.values()
          if "m0" in e["uses"]}
    assert {"V_SWAPREL_B32_gfx10", "V_MOVRELS_B32_e32_gfx10", "V_MOVRELD_B32_e64_gfx10",
            "V_MOVRELSD_2_B32_e32_gfx10"} <= m0
