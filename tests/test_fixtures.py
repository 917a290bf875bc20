"""The committed fixture binaries are intact and still agree with LLVM's tools.

tests/fixtures/bin/MANIFEST.json is oracle data written by tools/build_fixtures.sh
from llvm-readelf-16 / clang-offload-bundler output. These tests check the files
against the manifest's sizes and md5s, and re-ask LLVM's tools for a sample of
the recorded facts, so a stale manifest or a corrupted binary is caught here
rather than in a parser test.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess

import pytest

from conftest import FIXTURES, need_tool

MANIFEST_PATH = os.path.join(FIXTURES, "MANIFEST.json")
SRC = os.path.join(os.path.dirname(FIXTURES), "src")
BUNDLER15 = "/usr/lib/llvm-15/bin/clang-offload-bundler"
BUNDLER19 = "/usr/lib/llvm-19/bin/clang-offload-bundler"

with open(MANIFEST_PATH) as _fh:
    MANIFEST = json.load(_fh)
FILES: dict = MANIFEST["files"]

# One code object per language/target/version corner, plus every container.
SAMPLE_CODE_OBJECTS = [
    "vecops.hip.gfx1010.v4.hsaco",
    "mathops.hip.gfx1030.v5.hsaco",
    "miopen_like.cl.gfx1030.v4.hsaco",
    "asm_kernels.s.gfx1010.v5.hsaco",
]


@pytest.mark.parametrize("name", sorted(FILES))
def test_binary_matches_manifest(name: str) -> None:
    path = os.path.join(FIXTURES, name)
    data = open(path, "rb").read()
    assert len(data) == FILES[name]["size"]
    assert hashlib.md5(data).hexdigest() == FILES[name]["md5"]


def test_every_binary_is_listed_and_has_a_source() -> None:
    # subdirectories (rocprim/) are fixtures of other scripts with oracles of their own
    on_disk = {n for n in os.listdir(FIXTURES) if n != "MANIFEST.json" and os.path.isfile(os.path.join(FIXTURES, n))}
    assert on_disk == set(FILES)
    for name in FILES:
        stem, lang = name.split(".")[:2]
        assert os.path.exists(os.path.join(SRC, f"{stem}.{lang}")), name


def test_raw_code_object_matrix_is_complete() -> None:
    """Every source is built for both targets and both code object versions."""
    for src in os.listdir(SRC):
        if not os.path.isfile(os.path.join(SRC, src)):
            continue  # rocprim/: built by tools/build_rocprim_pair.sh
        for target in ("gfx1010", "gfx1030"):
            for v in (4, 5):
                name = f"{src}.{target}.v{v}.hsaco"
                assert FILES[name]["llvm"]["code_object_version"] == v, name
                # ELF header rule: EF_AMDGPU_MACH = e_flags & 0xff.
                mach = {"gfx1010": 0x33, "gfx1030": 0x36}[target]
                assert FILES[name]["llvm"]["e_flags"] & 0xFF == mach, name


def _readelf(*args: str) -> str:
    tool = need_tool("llvm-readelf-16")
    return subprocess.run([tool, *args], check=True, capture_output=True, text=True).stdout


@pytest.mark.llvm
@pytest.mark.parametrize("name", SAMPLE_CODE_OBJECTS)
def test_llvm_readelf_agrees_with_manifest(name: str) -> None:
    facts = FILES[name]["llvm"]
    path = os.path.join(FIXTURES, name)
    header = _readelf("-h", path)
    assert re.search(r"^\s*Flags:\s+(0x[0-9a-f]+)", header, re.M).group(1) == facts["e_flags_hex"]
    assert int(re.search(r"^\s*ABI Version:\s+(\d+)", header, re.M).group(1)) == facts["ei_abiversion"]
    notes = _readelf("--notes", path)
    assert re.search(r"^amdhsa\.target:\s+(\S+)", notes, re.M).group(1) == facts["target_id"]
    syms = _readelf("--syms", path).split("Symbol table '.symtab'", 1)[1]
    kds = sorted(line.split()[7] for line in syms.splitlines()
                 if len(line.split()) >= 8 and line.split()[7].endswith(".kd"))
    assert kds == sorted(k["name"] for k in facts["kernel_descriptors"])
    assert kds  # every fixture has kernels


@pytest.mark.llvm
@pytest.mark.parametrize("name", sorted(n for n in FILES if FILES[n]["kind"] != "code_object"))
def test_bundler_lists_the_manifest_entries(name: str, tmp_path) -> None:
    entry = FILES[name]
    bundler = need_tool(BUNDLER19 if entry["kind"] == "compressed_offload_bundle" else BUNDLER15)
    path = os.path.join(FIXTURES, name)
    facts = entry["llvm"]
    if entry["kind"] == "host_object":
        # The bundle sits in .hip_fatbin at the offset llvm-readelf reported.
        fat = facts["hip_fatbin"]
        data = open(path, "rb").read()[fat["offset"]:fat["offset"] + fat["size"]]
        assert data.startswith(b"__CLANG_OFFLOAD_BUNDLE__")
        path = str(tmp_path / "hip_fatbin")
        with open(path, "wb") as fh:
            fh.write(data)
        facts = fat
    ids = subprocess.run([bundler, "--list", "--type=o", f"--input={path}"],
                         check=True, capture_output=True, text=True).stdout.split()
    assert sorted(ids) == facts["bundle_ids"]
