"""As lean as the compiler: kpatch inserts one mitigation per hazard, as
LLVM's GCNHazardRecognizer does (it inserts the mitigation and goes on with
the hazard gone), not one per flagged instruction.

Each case is written twice: as gfx1030 assembly (assembled with clang-15,
patched with kpatch.rewrite.patcher.patch_code_object) and as MIR, on which
``llc-16 -march=amdgcn -mcpu=gfx1010 -run-pass post-RA-hazard-rec`` inserts
LLVM's mitigations.  The number of instructions kpatch inserted
(llvm-objdump-16 of the object before and after, aligned) must equal the
number LLVM inserted.  Then the same comparison over the MIR hazard cases of
tests/fixtures/hazards (tools/build_hazard_cases.py).
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from kpatch.rewrite.patcher import patch_code_object
from rw_common import HAZARDS, ROOT, need
from test_fixes import _build, kernels_text

pytestmark = pytest.mark.llvm


def _tool():
    """tools/build_hazard_cases.py as a module (its MIR parsing and alignment)."""
    spec = importlib.util.spec_from_file_location("build_hazard_cases",
                                                  os.path.join(ROOT, "tools", "build_hazard_cases.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, mod)  # its dataclasses look their module up
    spec.loader.exec_module(sys.modules[spec.name])
    return mod


BHC = _tool()


def llvm_inserted(tmp_path, mir: str) -> dict[str, list[str]]:
    """MIR function name -> the instructions llc-16's post-RA hazard
    recognizer inserted for gfx1010."""
    src = tmp_path / "case.mir"
    src.write_text(mir)
    out = tmp_path / "case.gfx1010.mir"
    subprocess.run([need("llc-16"), "-march=amdgcn", "-mcpu=gfx1010", "-run-pass", "post-RA-hazard-rec",
                    "-o", str(out), str(src)], check=True, capture_output=True)
    before = BHC.mir_functions(src.read_text())
    after = BHC.mir_functions(out.read_text())
    return {name: [t for _, t in BHC.mir_insertions(before[name], [s for s, _ in after[name]])]
            for name in before}


def _unpadded(texts: list[str]) -> list[str]:
    n = len(texts)
    while n and texts[n - 1] in ("s_nop 0", "s_code_end"):
        n -= 1
    return texts[:n]


def inserted(before: list[str], after: list[str]) -> list[str]:
    """The instructions of ``after`` that are not in ``before`` (in order;
    the rest of ``after`` is ``before``, with branch offsets possibly changed
    and an s_clause possibly replaced by s_nop 0: instructions are matched by
    mnemonic).  The padding after a kernel's last instruction (which objdump
    lists as part of it, and which inserted code uses up) is left out of both."""
    before, after = _unpadded(before), _unpadded(after)
    a, b = [t.split()[0] for t in before], [t.split()[0] for t in after]
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        assert op != "delete", ("patched kernel lost instructions", before[i1:i2])
        if op == "insert":
            out.extend(after[j1:j2])
        elif op == "replace":
            assert j2 - i2 >= i1 - j1, ("patched kernel lost instructions", before[i1:i2])
            out.extend(after[j1 + (i2 - i1):j2])  # same-size replacements first, then insertions
    return out


def patched_text(tmp_path, obj: str) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Kernel name -> instructions, before and after kpatch (override mode)."""
    res = patch_code_object(open(obj, "rb").read(), mode="override")
    assert res.data is not None, [(k.name, k.status, k.reason) for k in res.kernels]
    out = tmp_path / "patched.hsaco"
    out.write_bytes(res.data)
    return kernels_text(obj, "gfx1030"), kernels_text(str(out), "gfx1010")


def kpatch_inserted(tmp_path, obj: str) -> dict[str, list[str]]:
    """Kernel name -> the instructions kpatch inserted (override mode)."""
    old, new = patched_text(tmp_path, obj)
    return {name: inserted(old[name], new[name]) for name in old if name in new}


# (name, gfx1030 kernel body, MIR body, the mitigation's mnemonic)
CASES = [
    ("vmem_four_sgpr_writes",
     """
    buffer_load_dword v1, v0, s[4:7], 0 offen
    s_mov_b32 s4, 0
    s_mov_b32 s5, 0
    s_mov_b32 s6, 0
    s_mov_b32 s7, 0""",
     """
  bb.0:
    $vgpr1 = BUFFER_LOAD_DWORD_OFFEN $vgpr0, $sgpr4_sgpr5_sgpr6_sgpr7, 0, 0, 0, 0, implicit $exec
    $sgpr4 = S_MOV_B32 0
    $sgpr5 = S_MOV_B32 0
    $sgpr6 = S_MOV_B32 0
    $sgpr7 = S_MOV_B32 0
    S_ENDPGM 0
""", "s_waitcnt_depctr"),
    ("global_saddr_two_writes",
     """
    global_load_dword v1, v0, s[2:3]
    s_add_u32 s2, s2, 4
    s_addc_u32 s3, s3, 0""",
     """
  bb.0:
    $vgpr1 = GLOBAL_LOAD_DWORD_SADDR $sgpr2_sgpr3, $vgpr0, 0, 0, implicit $exec
    $sgpr2 = S_ADD_U32 $sgpr2, 4, implicit-def $scc
    $sgpr3 = S_ADDC_U32 $sgpr3, 0, implicit-def $scc, implicit $scc
    S_ENDPGM 0
""", "s_waitcnt_depctr"),
    # only the fall-through path is mitigated before the join: the join keeps the hazard
    ("vmem_join_one_side_mitigated",
     """
    buffer_load_dword v1, v0, s[4:7], 0 offen
    s_cbranch_scc1 .Ljoin
    s_mov_b32 s4, 0
    s_mov_b32 s5, 0
.Ljoin:
    s_mov_b32 s6, 0
    s_mov_b32 s7, 0""",
     """
  bb.0:
    successors: %bb.1, %bb.2
    $vgpr1 = BUFFER_LOAD_DWORD_OFFEN $vgpr0, $sgpr4_sgpr5_sgpr6_sgpr7, 0, 0, 0, 0, implicit $exec
    S_CBRANCH_SCC1 %bb.2, implicit $scc
  bb.1:
    successors: %bb.2
    $sgpr4 = S_MOV_B32 0
    $sgpr5 = S_MOV_B32 0
  bb.2:
    $sgpr6 = S_MOV_B32 0
    $sgpr7 = S_MOV_B32 0
    S_ENDPGM 0
""", "s_waitcnt_depctr"),
    # the load reaches the writes at the loop's top through the back edge only
    ("vmem_loop_carried",
     """
    s_mov_b32 s8, 0
.Lloop:
    s_mov_b32 s4, 0
    s_mov_b32 s5, 0
    buffer_load_dword v1, v0, s[4:7], 0 offen
    s_cbranch_scc1 .Lloop""",
     """
  bb.0:
    successors: %bb.1
    $sgpr8 = S_MOV_B32 0
  bb.1:
    successors: %bb.1, %bb.2
    $sgpr4 = S_MOV_B32 0
    $sgpr5 = S_MOV_B32 0
    $vgpr1 = BUFFER_LOAD_DWORD_OFFEN $vgpr0, $sgpr4_sgpr5_sgpr6_sgpr7, 0, 0, 0, 0, implicit $exec
    S_CBRANCH_SCC1 %bb.1, implicit $scc
  bb.2:
    S_ENDPGM 0
""", "s_waitcnt_depctr"),
    ("smem_two_readfirstlanes",
     """
    s_load_dword s8, s[4:5], 0x0
    v_readfirstlane_b32 s4, v0
    v_readfirstlane_b32 s5, v1""",
     """
  bb.0:
    $sgpr8 = S_LOAD_DWORD_IMM $sgpr4_sgpr5, 0, 0
    $sgpr4 = V_READFIRSTLANE_B32 $vgpr0, implicit $exec
    $sgpr5 = V_READFIRSTLANE_B32 $vgpr1, implicit $exec
    S_ENDPGM 0
""", "s_mov_b32"),
]


@pytest.mark.parametrize("name,asm,mir,mnemonic", CASES, ids=[c[0] for c in CASES])
def test_one_mitigation_per_hazard_like_llvm(tmp_path, name, asm, mir, mnemonic):
    need("clang-15")
    want = llvm_inserted(tmp_path, f"---\nname: {name}\nbody: |\n{mir}...\n")[name]
    assert want and all(BHC.opcode(t).lower().startswith(mnemonic) for t in want), want
    obj = _build(tmp_path, asm)
    got = kpatch_inserted(tmp_path, obj)["k"]
    assert [t.split()[0] for t in got] == [mnemonic] * len(got), got
    assert len(got) == len(want), (got, want)


def test_four_writes_llvm_inserts_one():
    """The issue's example, pinned: LLVM inserts one s_waitcnt_depctr for four writes."""
    name, _, mir, _ = CASES[0]
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        assert len(llvm_inserted(Path(d), f"---\nname: {name}\nbody: |\n{mir}...\n")[name]) == 1


#: the mitigation LLVM inserts for each class (gfx1010-hazards.md), as
#: llvm-objdump-16 prints it
MITIGATION = {
    "VMEMtoScalarWriteHazard": "s_waitcnt_depctr 0xffe3",
    "SMEMtoVectorWriteHazard": "s_mov_b32 null, 0",
    "VcmpxPermlaneHazard": "v_mov_b32_e32 v0, v0",
    "VcmpxExecWARHazard": "s_waitcnt_depctr 0xfffe",
    "LdsBranchVmemWARHazard": "s_waitcnt_vscnt null, 0x0",
    "NSAtoVMEMBug": "s_nop 0",
}
#: the same, as llc-16 prints it in MIR (opcode, immediate)
MIR_MITIGATION = {
    "VMEMtoScalarWriteHazard": "S_WAITCNT_DEPCTR 65507",
    "SMEMtoVectorWriteHazard": "$sgpr_null = S_MOV_B32 0",
    "VcmpxPermlaneHazard": "V_MOV_B32_e32",
    "VcmpxExecWARHazard": "S_WAITCNT_DEPCTR 65534",
    "LdsBranchVmemWARHazard": "S_WAITCNT_VSCNT",
    "NSAtoVMEMBug": "S_NOP 0",
}


def _mir_cases() -> list[dict]:
    with open(os.path.join(os.path.dirname(HAZARDS), "cases.json")) as f:
        cases = json.load(f)["cases"]
    return [c for c in cases if c.get("mir")]


def test_fixture_mir_cases_insert_no_more_than_llvm(tmp_path):
    """Every MIR hazard case of tests/fixtures/hazards: kpatch inserts in the
    case's kernel as many of the class's mitigations as LLVM inserts in the
    MIR mirror; fewer only where the case records that LLVM 16 disagrees
    (it accepts only the exact mitigation immediate as expiry)."""
    mirdir = os.path.join(os.path.dirname(HAZARDS), "mir")
    llvm: dict[str, list[str]] = {}
    for fn in sorted(os.listdir(mirdir)):
        d = tmp_path / fn
        d.mkdir()
        llvm.update(llvm_inserted(d, open(os.path.join(mirdir, fn)).read()))
    texts: dict[str, tuple] = {}
    diffs = []
    for c in _mir_cases():
        if c["object"] not in texts:
            d = tmp_path / c["object"]
            d.mkdir()
            texts[c["object"]] = patched_text(d, os.path.join(HAZARDS, c["object"]))
        old, new = texts[c["object"]]
        m = MITIGATION[c["class"]]
        got = _unpadded(new[c["kernel"]]).count(m) - _unpadded(old[c["kernel"]]).count(m)
        want = sum(MIR_MITIGATION[c["class"]] in t for t in llvm[c["mir"]])
        assert want or c["expect"] == 0, c["name"]
        if got != want:
            diffs.append((c["name"], got, want, c["llvm_confirms"]))
    assert all(got < want and not confirmed for _, got, want, confirmed in diffs), diffs
    assert [d[0] for d in diffs] == ["vmem_no_depctr_other_fields"]  # the one LLVM 16 case (see cases.json)
