"""`kpatch disasm` end to end against llvm-objdump-16 (the reference text)."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from conftest import FIXTURES, need_tool, kpatch_in_process

LINE = re.compile(r"^\t(.*?)\s*// ([0-9A-F]+): [0-9A-F ]+(?: <.*>)?$")


def objdump_lines(path: str, mcpu: str) -> list[str]:
    """llvm-objdump-16's instructions as 'address<TAB>text' (the oracle for --format lines)."""
    out = subprocess.run(["llvm-objdump-16", "-d", f"--mcpu={mcpu}", path], capture_output=True, text=True,
                         check=True).stdout
    lines = []
    for l in out.splitlines():
        m = LINE.match(l)
        if m:
            lines.append(f"{int(m.group(2), 16):x}\t{m.group(1)}")
    return lines


@pytest.mark.llvm
@pytest.mark.parametrize("name", ["asm_kernels.s.gfx1030.v4.hsaco", "miopen_like.cl.gfx1010.v5.hsaco",
                                  "vecops.hip.gfx1030.v5.hsaco"])
def test_lines_equal_objdump(name):
    need_tool("llvm-objdump-16")
    path = os.path.join(FIXTURES, name)
    mcpu = name.split(".")[2]
    p = kpatch_in_process("disasm", "--format", "lines", path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == objdump_lines(path, mcpu)


@pytest.mark.llvm
def test_mcpu_overrides_target_and_opcode_reuse_shows():
    """The same bytes read as v_fmac_legacy_f32 on gfx1030 and v_mac_legacy_f32 on gfx1010."""
    path = os.path.join(FIXTURES, "asm_kernels.s.gfx1030.v4.hsaco")
    for mcpu, mnem in (("gfx1030", "v_fmac_legacy_f32_e32"), ("gfx1010", "v_mac_legacy_f32_e32")):
        p = kpatch_in_process("disasm", "--format", "lines", "--mcpu", mcpu, path)
        assert p.returncode == 0
        assert p.stdout.splitlines() == objdump_lines(path, mcpu)
        assert mnem in p.stdout


def test_kernel_filter_and_json():
    path = os.path.join(FIXTURES, "asm_kernels.s.gfx1030.v4.hsaco")
    p = kpatch_in_process("disasm", "--format", "json", "--kernel", "asm_lds_swap", path)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    insts = doc["code_objects"][0]["instructions"]
    assert insts[0]["mnemonic"] == "s_load_dwordx2" and insts[-1]["mnemonic"] == "s_endpgm"
    # sizes tile the kernel exactly
    for a, b in zip(insts, insts[1:]):
        assert a["address"] + a["size"] == b["address"]
    p = kpatch_in_process("disasm", "--kernel", "no_such_kernel", path)
    assert p.returncode == 1 and "no kernel" in p.stderr and "Traceback" not in p.stderr


def test_text_mode_shows_labels_and_encodings():
    path = os.path.join(FIXTURES, "asm_kernels.s.gfx1030.v4.hsaco")
    p = kpatch_in_process("disasm", path)
    assert p.returncode == 0
    assert re.search(r"^0000000000001800 <asm_scale_loop>:$", p.stdout, re.M)
    assert "\ts_inst_prefetch 0x3" in p.stdout and "// 000000001818: BFA00003" in p.stdout


def test_disasm_sample_db_uri():
    from kpatch.data import sample_db_path

    p = kpatch_in_process("scan", "--json", "--sample")
    uri = json.loads(p.stdout)["code_objects"][0]["uri"]
    p = kpatch_in_process("disasm", "--format", "lines", uri)
    assert p.returncode == 0 and p.stdout.count("\n") > 20
    assert sample_db_path()
