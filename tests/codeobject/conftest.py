"""Helpers for the code-object tests: LLVM's tools as oracles, real inputs.

Real inputs: the fixtures in tests/fixtures/bin (built by Debian's clang 15),
the seven AMDGPU code objects of librocrand's offload bundle (extracted here
with clang-offload-bundler 15), and objects compiled at test time with
clang-15 (V2) and clang-19 (V6, generic targets).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import FIXTURES, LIBROCRAND

READELF16 = "llvm-readelf-16"
READOBJ16 = "llvm-readobj-16"
READELF19 = "llvm-readelf-19"
OBJDUMP16 = "llvm-objdump-16"
OBJDUMP19 = "/usr/lib/llvm-19/bin/llvm-objdump"
CLANG15 = "clang-15"
CLANG19 = "/usr/lib/llvm-19/bin/clang"
BUNDLER15 = "/usr/lib/llvm-15/bin/clang-offload-bundler"
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
ROCRAND_TARGETS = ("gfx803", "gfx900:xnack-", "gfx906:xnack-", "gfx908:xnack-",
                   "gfx90a:xnack+", "gfx90a:xnack-", "gfx1030")


def tool(path: str) -> str:
    """The tool's path, or skip the test when it is not installed."""
    found = shutil.which(path) or (path if os.path.exists(path) else None)
    if not found:
        pytest.skip(f"{path} is not installed")
    return found


def run(*cmd: str, check: bool = True) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=check).stdout


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def manifest() -> dict:
    path = os.path.join(FIXTURES, "MANIFEST.json")
    if not os.path.exists(path):
        return {"files": {}}
    with open(path) as f:
        return json.load(f)


def fixture_code_objects() -> list[str]:
    """Names of the raw code-object fixtures (``*.hsaco``)."""
    return sorted(n for n, v in manifest()["files"].items() if v.get("kind") == "code_object")


# -- llvm-readelf-16 output ------------------------------------------------------

def readelf_header(path: str) -> dict[str, int]:
    text = run(tool(READELF16), "-h", path)
    return {
        "abi_version": int(re.search(r"ABI Version:\s+(\d+)", text).group(1)),
        "e_flags": int(re.search(r"Flags:\s+(0x[0-9A-Fa-f]+)", text).group(1), 16),
    }


@functools.lru_cache(maxsize=64)
def readelf_sections(path: str) -> list[dict]:
    """[{index, name, type, addr, offset, size}] from ``llvm-readelf-16 -S``."""
    out = []
    for m in re.finditer(r"^\s*\[\s*(\d+)\]\s+(\S*)\s+(\S+)\s+([0-9a-f]{16})\s+([0-9a-f]+)\s+"
                         r"([0-9a-f]+)\s", run(tool(READELF16), "-S", "-W", path), re.M):
        out.append({"index": int(m.group(1)), "name": m.group(2), "type": m.group(3),
                    "addr": int(m.group(4), 16), "offset": int(m.group(5), 16),
                    "size": int(m.group(6), 16)})
    return out


@functools.lru_cache(maxsize=64)
def readelf_symbols(path: str) -> list[dict]:
    """[{table, value, size, type, bind, ndx, name}] from ``llvm-readelf-16 -s``."""
    out = []
    table = None
    for line in run(tool(READELF16), "-s", "-W", path).splitlines():
        m = re.match(r"Symbol table '(\S+)'", line)
        if m:
            table = m.group(1)
            continue
        m = re.match(r"\s*\d+:\s+([0-9a-f]+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*(.*)$", line)
        if m and table:
            out.append({"table": table, "value": int(m.group(1), 16), "size": int(m.group(2)),
                        "type": m.group(3), "bind": m.group(4), "ndx": m.group(6),
                        "name": m.group(7)})
    return out


def kd_symbols(path: str) -> set[str]:
    """Names of defined ``NAME.kd`` symbols llvm-readelf-16 lists."""
    return {s["name"] for s in readelf_symbols(path)
            if s["name"].endswith(".kd") and s["ndx"] != "UND"}


def kd_file_offset(path: str, symbol: str) -> int:
    """File offset of a descriptor symbol, from readelf's symbol and section tables."""
    sym = next(s for s in readelf_symbols(path) if s["name"] == symbol and s["ndx"] != "UND")
    sec = next(s for s in readelf_sections(path) if s["index"] == int(sym["ndx"]))
    return sec["offset"] + sym["value"] - sec["addr"]


def objdump_descriptors(path: str, symbols: list[str], objdump: str = OBJDUMP16) -> dict[str, dict]:
    """``.amdhsa_*`` directives llvm-objdump prints for each ``NAME.kd`` symbol."""
    text = run(tool(objdump), "-D", *(f"--disassemble-symbols={s}" for s in symbols), path)
    out: dict[str, dict] = {}
    for block in re.split(r"^\.amdhsa_kernel ", text, flags=re.M)[1:]:
        name = block.split("\n", 1)[0].strip()
        body = block.split(".end_amdhsa_kernel", 1)[0]
        out[name + ".kd"] = {m.group(1): int(m.group(2), 0)
                             for m in re.finditer(r"^\s*\.amdhsa_(\w+)\s+(-?\w+)\s*$", body, re.M)}
    return out


# -- real inputs ---------------------------------------------------------------

@pytest.fixture(scope="session")
def rocrand_objects(tmp_path_factory) -> dict[str, str]:
    """Target id -> path of each AMDGPU code object in librocrand's bundle."""
    if not os.path.exists(LIBROCRAND):
        pytest.skip("corpus not fetched (tools/fetch_corpus.sh)")
    tmp = tmp_path_factory.mktemp("rocrand")
    sec = next(s for s in readelf_sections(LIBROCRAND) if s["name"] == ".hip_fatbin")
    with open(LIBROCRAND, "rb") as f:
        f.seek(sec["offset"])
        bundle = f.read(sec["size"])
    bundle_path = tmp / "fatbin.bundle"
    bundle_path.write_bytes(bundle)
    ids = run(tool(BUNDLER15), "--list", "--type=o", f"--input={bundle_path}").split()
    out = {}
    for entry in ids:
        if "amdgcn" not in entry:
            continue
        target = entry.rsplit("--", 1)[1]
        dest = tmp / (target.replace(":", "_") + ".hsaco")
        run(BUNDLER15, "--unbundle", "--type=o", f"--input={bundle_path}", f"--targets={entry}",
            f"--output={dest}")
        out[target] = str(dest)
    return out


@pytest.fixture(scope="session")
def fixture_paths() -> list[str]:
    names = fixture_code_objects()
    if not names:
        pytest.skip("fixtures not built (tools/build_fixtures.sh)")
    return [os.path.join(FIXTURES, n) for n in names]


ASM_KERNEL = """
.text
.globl {name}
.p2align 8
.type {name},@function
{name}:
  s_endpgm
.size {name}, .-{name}
.rodata
.p2align 6
.amdhsa_kernel {name}
  .amdhsa_next_free_vgpr 8
  .amdhsa_next_free_sgpr 16
{extra}
.end_amdhsa_kernel
"""


def compile_asm(tmp, clang: str, mcpu: str, version: int, *, name: str = "k", extra: str = "",
                link: bool = True) -> str:
    """Assemble a one-kernel object with clang (-c unless ``link``)."""
    src = tmp / f"{name}.s"
    src.write_text(ASM_KERNEL.format(name=name, extra=extra))
    out = tmp / f"{name}_{mcpu.replace(':', '_')}_v{version}.o"
    cmd = [tool(clang), "-x", "assembler", "-target", "amdgcn-amd-amdhsa", f"-mcpu={mcpu}",
           f"-mcode-object-version={version}", str(src), "-o", str(out)]
    if not link:
        cmd.insert(1, "-c")
    subprocess.run(cmd, capture_output=True, text=True, check=True)
    return str(out)


CL_KERNEL = "__kernel void {name}(__global int *p, int v) {{ p[v] = v * 3; }}\n"


def compile_cl(tmp, mcpu: str, version: int, *, name: str = "k", clang: str = CLANG15,
               link: bool = True) -> str:
    """Compile a one-kernel OpenCL object with clang (no device libraries needed);
    ``link=False`` stops at the relocatable object (there is no ld.lld-19)."""
    src = tmp / f"{name}.cl"
    src.write_text(CL_KERNEL.format(name=name))
    out = tmp / f"{name}_{mcpu.replace(':', '_')}_v{version}.co"
    cmd = [tool(clang), "-x", "cl", "-target", "amdgcn-amd-amdhsa", f"-mcpu={mcpu}",
           f"-mcode-object-version={version}", "-O2", "-nogpulib", str(src), "-o", str(out)]
    if not link:
        cmd.insert(1, "-c")
    subprocess.run(cmd, capture_output=True, text=True, check=True)
    return str(out)
