"""The one control-flow rule (kpatch.analysis.flow) as the CFG of the hazard
analysis and the rewriter's scan of ``.text`` both apply it.

The rule is LLVM's (``SOPInstructions.td``): ``s_endpgm*`` and ``s_code_end``
are terminators and barriers (a block ends, nothing follows); calls
(``s_swappc_b64``, ``s_call_b64``) are not terminators (execution resumes
after them); ``s_trap`` is neither (``isTrap`` only: llc-16 puts the code
after ``llvm.debugtrap``'s ``s_trap 3`` right behind it, so the trap handler
returns there), yet ``llvm.trap`` + ``unreachable`` ends a function with it.
Block starts are the labels llvm-mc-16 placed; the code objects are
assembled by clang-15.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from kpatch.analysis import analyse
from kpatch.analysis.cfg import build_cfg
from kpatch.analysis.codescan import scan_text
from kpatch.analysis.facts import facts_of
from kpatch.analysis.flow import CALL, COND, END, FALL, INDIRECT, JUMP, TRAP, UNMODELLED, kind
from kpatch.codeobject import CodeObject
from kpatch.isa import decode
from tests.analysis.asm import assemble

pytestmark = pytest.mark.llvm

BASE = 0x1000


def _cfg(source: str, jumps_labels=()):
    code, labels = assemble(source)
    insts = decode(code, "gfx1030", BASE)
    jumps = [(BASE + labels[a], BASE + labels[b]) for a, b in jumps_labels]
    return build_cfg(insts, facts_of(insts, "gfx1030"), [0], jumps=jumps), labels, insts


def _block(cfg, labels, name) -> int:
    k = next(k for k, i in enumerate(cfg.insts) if i.address == BASE + labels[name])
    return cfg.block_at(k)


def _starts(cfg, insts) -> list[int]:
    return sorted(insts[k].address - BASE for k in cfg.block_start.tolist())


def test_the_kinds_are_llvms():
    code, _ = assemble("""
  s_nop 0
  s_branch 0
  s_cbranch_execz 0
  s_endpgm
  s_code_end
  s_setpc_b64 s[30:31]
  s_swappc_b64 s[30:31], s[4:5]
  s_call_b64 s[30:31], 0
  s_trap 2
  s_subvector_loop_begin s0, 0
  s_rfe_b64 s[0:1]
""")
    got = [kind(i) for i in decode(code, "gfx1030", BASE)]
    assert got == [FALL, JUMP, COND, END, END, INDIRECT, CALL, CALL, TRAP, UNMODELLED, UNMODELLED]


def test_s_code_end_ends_a_block_with_no_successor():
    cfg, labels, insts = _cfg("""
a:
  v_mov_b32 v0, 0
  s_code_end
b:
  v_mov_b32 v1, 0
  s_endpgm
""")
    assert _starts(cfg, insts) == [labels["a"], labels["b"]]
    assert cfg.succs(_block(cfg, labels, "a")) == []


def test_s_trap_falls_through_and_does_not_end_a_block():
    cfg, labels, insts = _cfg("""
a:
  v_mov_b32 v0, 0
  s_trap 3
  v_mov_b32 v1, 0
  s_cbranch_scc0 c
b:
  s_trap 2
c:
  s_endpgm
""")
    assert _starts(cfg, insts) == [labels["a"], labels["b"], labels["c"]]
    # s_trap 2 at the end of block b: the trap handler may come back, to c
    assert cfg.succs(_block(cfg, labels, "b")) == [_block(cfg, labels, "c")]


def test_calls_do_not_end_a_block_unless_they_have_an_edge():
    src = """
a:
  s_swappc_b64 s[30:31], s[4:5]
  s_call_b64 s[30:31], f
b:
  s_nop 0
  s_endpgm
f:
  s_setpc_b64 s[30:31]
"""
    cfg, labels, insts = _cfg(src)
    assert _starts(cfg, insts) == [labels["a"], labels["f"]]  # f: after s_endpgm
    assert [insts[k].mnemonic for k in cfg.calls] == ["s_swappc_b64", "s_call_b64"]
    # the s_call_b64 with a known callee (an edge from codescan) ends its block;
    # execution resumes after it as well
    cfg, labels, insts = _cfg(src.replace("  s_call_b64 s[30:31], f\n", "call:\n  s_call_b64 s[30:31], f\n"),
                              [("call", "f")])
    assert _starts(cfg, insts) == [labels["a"], labels["b"], labels["f"]]
    assert sorted(cfg.succs(_block(cfg, labels, "call"))) == sorted([_block(cfg, labels, "b"),
                                                                     _block(cfg, labels, "f")])


def test_an_unmodelled_pc_change_ends_its_block_and_is_listed():
    cfg, labels, insts = _cfg("""
a:
  s_subvector_loop_begin s0, 1
b:
  v_mov_b32 v0, 0
  s_endpgm
""")
    assert _starts(cfg, insts) == [labels["a"], labels["b"]]
    assert cfg.succs(_block(cfg, labels, "a")) == []
    assert [insts[k].address for k in cfg.unmodelled] == [BASE]


# -- code objects: the scan of .text and the analysis -------------------------------

KERNEL = """
.amdgcn_target "amdgcn-amd-amdhsa--gfx1030"
.text
.globl k
.p2align 8
.type k,@function
k:
BODY
.Lk_end:
    .size k, .Lk_end - k

.rodata
.p2align 6
.amdhsa_kernel k
    .amdhsa_user_sgpr_private_segment_buffer 1
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_next_free_vgpr 8
    .amdhsa_next_free_sgpr 40
    .amdhsa_wavefront_size32 1
.end_amdhsa_kernel

.amdgpu_metadata
---
amdhsa.version: [ 1, 1 ]
amdhsa.kernels:
  - .name: k
    .symbol: k.kd
    .kernarg_segment_size: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .sgpr_count: 40
    .vgpr_count: 8
    .max_flat_workgroup_size: 256
    .args:
      - { .size: 8, .offset: 0, .value_kind: global_buffer, .address_space: global }
...
.end_amdgpu_metadata
"""


def _object(tmp_path, body: str) -> tuple[CodeObject, dict[str, int]]:
    """The kernel ``k`` with ``body`` (clang-15), and its labels' addresses (llvm-objdump-16)."""
    if shutil.which("clang-15") is None or shutil.which("llvm-objdump-16") is None:
        pytest.skip("clang-15 / llvm-objdump-16 not installed")
    src, out = tmp_path / "k.s", tmp_path / "k.hsaco"
    src.write_text(KERNEL.replace("BODY", body))
    subprocess.run(["clang-15", "-x", "assembler", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1030",
                    "-mcode-object-version=4", str(src), "-o", str(out)], check=True)
    syms = subprocess.run(["llvm-objdump-16", "-t", str(out)], capture_output=True, text=True, check=True).stdout
    labels = {ln.split()[-1]: int(ln.split()[0], 16) for ln in syms.splitlines()
              if ln[:1].isdigit() and len(ln.split()) >= 2}
    return CodeObject(out.read_bytes()), labels


#: a jump through a getpc sequence to label_T (what LLVM emits for a direct tail jump)
JUMP_TO_T = """
    s_getpc_b64 s[34:35]
label_G:
    s_add_u32 s34, s34, label_T - label_G
    s_addc_u32 s35, s35, 0
    s_setpc_b64 s[34:35]
"""


def test_the_scan_follows_the_trap_handlers_return(tmp_path):
    """A jump after an s_trap is reached from the entry (the trap handler
    returns after s_trap 3), so its bounded target is known: before, the scan
    took s_trap as the end of the path and refused the jump as unbounded."""
    co, labels = _object(tmp_path, "    s_trap 3\n" + JUMP_TO_T + "label_T:\n    s_endpgm\n")
    scan = scan_text(co, "gfx1030")
    assert scan.problems == []
    (i, js), = scan.jumps.items()
    assert scan.insts[i].mnemonic == "s_setpc_b64"
    assert [scan.insts[j].address for j in js] == [labels["label_T"]]


def test_a_function_may_end_with_s_trap(tmp_path):
    """llvm.trap + unreachable: s_trap 2 is the last instruction; nothing falls off the end."""
    co, _ = _object(tmp_path, "    s_cmp_eq_u32 s0, 0\n    s_cbranch_scc1 label_T\n    s_endpgm\nlabel_T:\n"
                              "    s_trap 2\n")
    scan = scan_text(co, "gfx1030")
    assert [p.kind for p in scan.problems] == []


def test_a_long_branch_temporary_read_after_a_debug_trap_is_refused(tmp_path):
    """Tensile's long branch: its temporary s36 is read after an s_trap 3 at
    the target; the trap handler returns there, so the read is on a path
    (before, s_trap ended the path and the read was missed)."""
    co, _ = _object(tmp_path, """
    s_getpc_b64 s[34:35]
label_G:
    s_add_i32 s36, label_T - label_G - 4, 4
    s_add_u32 s34, s34, s36
    s_addc_u32 s35, s35, 0
    s_setpc_b64 s[34:35]
label_T:
    s_trap 3
    s_mov_b32 s37, s36
    s_endpgm
""")
    scan = scan_text(co, "gfx1030")
    assert [p.kind for p in scan.problems] == ["pc-relative"]
    assert "s36, which holds the long branch's offset, is read at" in scan.problems[0].reason


def test_a_kernel_with_an_unmodelled_pc_change_is_never_ok(tmp_path):
    """s_subvector_loop_begin branches (to address + 4 + simm16 * 4 or on):
    kpatch follows neither, so the code after it is not seen on its paths."""
    co, _ = _object(tmp_path, "    s_subvector_loop_begin s0, 1\n    v_mov_b32 v0, 0\n    s_endpgm\n")
    (k,) = analyse(co).kernels
    assert k.verdict.status != "ok"
    assert any("s_subvector_loop_begin" in r and "does not follow" in r for r in k.verdict.reasons)
