"""Helpers for the container tests: LLVM's bundlers and readelf as oracles,
and builders of real test inputs from the fixtures."""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import FIXTURES

BUNDLER15 = "/usr/lib/llvm-15/bin/clang-offload-bundler"
BUNDLER19 = "/usr/lib/llvm-19/bin/clang-offload-bundler"
READELF = "llvm-readelf-16"
HOST = "host-x86_64-unknown-linux"
GFX1030 = "hipv4-amdgcn-amd-amdhsa--gfx1030"
GFX1010 = "hipv4-amdgcn-amd-amdhsa--gfx1010"


def fixture(name: str) -> str:
    path = os.path.join(FIXTURES, name)
    if not os.path.exists(path):
        pytest.skip(f"fixture {name} not built (tools/build_fixtures.sh)")
    return path


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def run(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def bundler_list(path: str, bundler: str = BUNDLER15) -> list[str]:
    """Entry ids as clang-offload-bundler --list prints them (sorted)."""
    return sorted(run(bundler, "--list", "--type=o", f"--input={path}").split())


def bundler_unbundle(path: str, target: str, out: str, bundler: str = BUNDLER15) -> bytes:
    run(bundler, "--unbundle", "--type=o", f"--input={path}", f"--targets={target}", f"--output={out}")
    return read(out)


def bundler_bundle(tmp: str, name: str, entries: list[tuple[str, str]], *, bundler: str = BUNDLER15,
                   align: int | None = 4096, compress: bool = False) -> str:
    """Run the real bundler on (id, input path) pairs; return the output path."""
    out = os.path.join(tmp, name)
    cmd = [bundler, "--type=o", "--targets=" + ",".join(i for i, _ in entries),
           *(f"--input={p}" for _, p in entries), f"--output={out}"]
    if align is not None:
        cmd.append(f"-bundle-align={align}")
    if compress:
        cmd.append("--compress")
    run(*cmd)
    return out


def section_headers(path: str) -> dict[str, tuple[int, int, int]]:
    """{name: (address, file offset, size)} from llvm-readelf-16 -S."""
    out = {}
    for line in run(READELF, "-S", "-W", path).splitlines():
        line = line.strip()
        if not line.startswith("["):
            continue
        parts = line.split("]", 1)[1].split()
        if len(parts) >= 5 and parts[0].startswith("."):
            out[parts[0]] = (int(parts[2], 16), int(parts[3], 16), int(parts[4], 16))
    return out


def relative_relocs(path: str) -> dict[int, int]:
    """{r_offset: addend} of R_X86_64_RELATIVE relocations from llvm-readelf-16 -r."""
    out = {}
    for line in run(READELF, "-r", "-W", path).splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] == "R_X86_64_RELATIVE":
            out[int(parts[0], 16)] = int(parts[3], 16)
    return out


@pytest.fixture
def rocrand_bundle(librocrand: str) -> bytes:
    """librocrand's .hip_fatbin section bytes (located by llvm-readelf)."""
    _, off, size = section_headers(librocrand)[".hip_fatbin"]
    with open(librocrand, "rb") as f:
        f.seek(off)
        return f.read(size)
