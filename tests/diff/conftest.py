"""Helpers for the `kpatch diff` tests: LLVM's tools as oracles, and patched
variants built without kpatch's rewriter.

Variants are made two ways: assembled from tests/diff/data/branchy.s with
clang-15 (VARIANT=0 the original, 1 with an s_waitcnt_depctr inserted in a
loop, 2 with an s_nop placed in front of a branch target), or edited in
place (cache bits, branch offsets, e_flags, descriptor bits) at addresses
taken from llvm-objdump-16's listing.  Expected values come from
llvm-objdump-16 / llvm-readelf-16 and from the construction.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from conftest import FIXTURES

CLANG15 = "clang-15"
OBJDUMP16 = "llvm-objdump-16"
READELF16 = "llvm-readelf-16"
CHROMIUM = "/usr/bin/chromium"
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
BRANCHY_SRC = os.path.join(DATA, "branchy.s")
ASM_V4 = os.path.join(FIXTURES, "asm_kernels.s.gfx1030.v4.hsaco")
ASM_V5 = os.path.join(FIXTURES, "asm_kernels.s.gfx1030.v5.hsaco")

_LINE = re.compile(r"^\t(?P<text>.*?)\s*// (?P<addr>[0-9A-F]+): (?P<enc>[0-9A-F ]+?)(\s+<.*>)?$")


def tool(path: str) -> str:
    """The tool's path, or skip the test when it is not installed."""
    found = shutil.which(path) or (path if os.path.exists(path) else None)
    if not found:
        pytest.skip(f"{path} is not installed")
    return found


def run(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def write(path: str, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return path


def objdump(path: str, mcpu: str = "gfx1030") -> list[tuple[int, str]]:
    """(address, text) of every instruction llvm-objdump-16 lists in ``.text``."""
    out = run(tool(OBJDUMP16), "-d", f"--mcpu={mcpu}", path)
    rows = []
    for line in out.splitlines():
        m = _LINE.match(line)
        if m:
            rows.append((int(m["addr"], 16), m["text"]))
    return rows


def objdump_kd(path: str, kd_symbol: str, mcpu: str = "gfx1030") -> dict[str, int]:
    """The ``.amdhsa_*`` directives llvm-objdump-16 prints for a kernel descriptor."""
    out = run(tool(OBJDUMP16), "-D", f"--mcpu={mcpu}", f"--disassemble-symbols={kd_symbol}", path)
    vals = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].startswith(".amdhsa_") and parts[0] != ".amdhsa_kernel":
            vals[parts[0]] = int(parts[1], 0)
    return vals


def readelf_flags(path: str) -> int:
    """e_flags as llvm-readelf-16 -h prints it."""
    m = re.search(r"Flags:\s+(0x[0-9a-fA-F]+)", run(tool(READELF16), "-h", path))
    assert m, "llvm-readelf-16 printed no Flags line"
    return int(m.group(1), 16)


def readelf_symbols(path: str) -> dict[tuple[str, str], tuple[int, int]]:
    """(table, name) -> (value, size) from llvm-readelf-16 -s."""
    out = run(tool(READELF16), "-s", path)
    table = ""
    syms: dict[tuple[str, str], tuple[int, int]] = {}
    for line in out.splitlines():
        m = re.match(r"Symbol table '([^']+)'", line)
        if m:
            table = m.group(1)
            continue
        parts = line.split()
        if len(parts) == 8 and parts[0].endswith(":") and parts[0][:-1].isdigit():
            syms.setdefault((table, parts[7]), (int(parts[1], 16), int(parts[2], 0)))
    return syms


def text_file_offset(path: str) -> int:
    """.text's file offset minus its address (from llvm-readelf-16 -S)."""
    for line in run(tool(READELF16), "-S", "-W", path).splitlines():
        parts = line.replace("[ ", "[").split()
        if len(parts) > 5 and parts[1] == ".text":
            return int(parts[4], 16) - int(parts[3], 16)
    raise AssertionError("no .text in llvm-readelf-16 -S")


@pytest.fixture(scope="session")
def branchy(tmp_path_factory) -> dict[int, str]:
    """branchy.s assembled by clang-15 for gfx1030, VARIANT 0, 1 and 2."""
    clang = tool(CLANG15)
    d = tmp_path_factory.mktemp("branchy")
    out = {}
    for v in (0, 1, 2):
        path = str(d / f"branchy{v}.co")
        subprocess.run([clang, "-x", "assembler", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1030",
                        f"-Wa,-defsym,VARIANT={v}", BRANCHY_SRC, "-o", path], check=True,
                       capture_output=True)
        out[v] = path
    return out


@pytest.fixture
def chromium() -> str:
    return tool(CHROMIUM)
