"""A kernel descriptor whose entry offset does not lead to the kernel's code
(outside .text, huge, negative, misaligned, or elsewhere in .text): the
kernel is not analysable, with the reason, and is never patched.

The damaged objects are a real fixture with the descriptor's
KERNEL_CODE_ENTRY_BYTE_OFFSET (bytes 16..23, signed, AMDGPUUsage) rewritten;
.text's bounds and the function symbols come from llvm-readelf-16."""

from __future__ import annotations

import json
import os
import re
import struct

import pytest

from conftest import FIXTURES, kpatch_in_process
from kpatch.analysis import analyse
from kpatch.codeobject import CodeObject

from .conftest import READELF16, read, run, tool

SRC = os.path.join(FIXTURES, "vecops.hip.gfx1030.v4.hsaco")


def llvm_layout(path: str) -> tuple[int, int, dict[str, int]]:
    """(.text address, .text size, {function: address}) from llvm-readelf-16."""
    sections = run(tool(READELF16), "-S", "-W", path)
    m = re.search(r"\]\s+\.text\s+PROGBITS\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)", sections)
    funcs = {}
    for line in run(tool(READELF16), "-s", "-W", path).splitlines():
        p = line.split()
        if len(p) >= 8 and p[3] == "FUNC":
            funcs[p[7]] = int(p[1], 16)
    return int(m.group(1), 16), int(m.group(2), 16), funcs


def damaged(tmp_path, entry_offset_of) -> tuple[str, str]:
    """The fixture with the first kernel's entry offset set to
    ``entry_offset_of(kd_address, text_address, text_size, function_address)``."""
    if not os.path.exists(SRC):
        pytest.skip("fixture not built")
    text_addr, text_size, funcs = llvm_layout(SRC)
    data = bytearray(read(SRC))
    k = CodeObject.from_bytes(bytes(data)).kernels[0]
    value = entry_offset_of(k.descriptor_vaddr, text_addr, text_size, funcs[k.name])
    struct.pack_into("<q", data, k.descriptor_offset + 16, value)
    path = str(tmp_path / "bad.hsaco")
    with open(path, "wb") as f:
        f.write(data)
    return path, k.name


CASES = {
    "huge": (lambda kd, t, n, f: 0x7FFF_FFFF_FFFF_0000, "outside .text"),
    "negative": (lambda kd, t, n, f: -0x100000, "outside .text"),
    "past the end of .text": (lambda kd, t, n, f: t + n - kd, "outside .text"),
    "misaligned": (lambda kd, t, n, f: f - kd + 4, "not 256-byte aligned"),
    "another place in .text": (lambda kd, t, n, f: f - kd + 256, "not at the kernel's code"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_entry_offset_makes_the_kernel_not_analysable(tmp_path, case):
    fn, reason = CASES[case]
    path, name = damaged(tmp_path, fn)
    co = CodeObject.from_bytes(read(path))
    k = co.kernel(name)
    assert reason in k.entry_problem and k.code_offset is None
    report = analyse(co, "gfx1010")
    verdict = {r.name: r.verdict for r in report.kernels}[name]
    assert verdict.status == "unpatchable" and any(reason in r for r in verdict.reasons)
    p = kpatch_in_process("scan", "--json", "--target", "gfx1010", path)
    kernels = {k["name"]: k for c in json.loads(p.stdout)["code_objects"] for k in c["kernels"]}
    assert kernels[name]["verdict"] == "unpatchable" and any(reason in r for r in kernels[name]["reasons"])


@pytest.mark.parametrize("case", CASES)
def test_bad_entry_offset_is_never_patched(tmp_path, case):
    path, name = damaged(tmp_path, CASES[case][0])
    out = str(tmp_path / "out.hsaco")
    p = kpatch_in_process("apply", path, "-o", out, "--mode", "override")
    assert re.search(rf"refused\s+file://{re.escape(path)} {name}:", p.stdout), p.stdout
    assert not re.search(rf"patched\s+\S+ {name} ", p.stdout)


def test_real_objects_have_trusted_entries():
    names = [n for n in os.listdir(FIXTURES) if n.endswith(".hsaco")] if os.path.isdir(FIXTURES) else []
    if not names:
        pytest.skip("fixtures not built")
    for n in names:
        co = CodeObject.from_bytes(read(os.path.join(FIXTURES, n)))
        if co.is_legacy:
            continue
        for k in co.kernels:
            assert k.entry_problem == "", (n, k.name, k.entry_problem)
