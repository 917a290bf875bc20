"""``--mode relabel``: gfx1010 code labelled gfx1030, checked with LLVM's tools.

Oracles: llvm-readelf-16 (e_flags, amdhsa.target, section table, no
warnings), llvm-objdump-16 (the disassembly for gfx1010 is unchanged),
clang-offload-bundler (bundle entry ids and contents), and the ELF layout:
only the e_flags field and the metadata note may differ.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kpatch.errors import FormatError
from kpatch.apply.blob import patch_blob
from kpatch.apply.relabel import relabel_code_object, relabel_patch_fn

from .conftest import (
    BUNDLER15, BUNDLER19, OBJDUMP, READELF, fixture, no_provenance, read, readelf_flags, readelf_target, run)

pytestmark = pytest.mark.llvm

GFX1010_OBJECTS = [
    "miopen_like.cl.gfx1010.v4.hsaco", "miopen_like.cl.gfx1010.v5.hsaco",
    "asm_kernels.s.gfx1010.v4.hsaco", "asm_kernels.s.gfx1010.v5.hsaco",
    "mathops.hip.gfx1010.v4.hsaco", "vecops.hip.gfx1010.v5.hsaco",
]
DEVICE_LIBS = "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode"


def note_span(path: str) -> tuple[int, int]:
    """File offset and size of the .note section, from llvm-readelf's section table."""
    for line in run(READELF, "-S", "-W", path).stdout.splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+\.note\s+NOTE\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if m:
            return int(m.group(1), 16), int(m.group(2), 16)
    raise AssertionError("no .note section")


def disassembly(path: str) -> str:
    out = run(OBJDUMP, "-d", "--mcpu=gfx1010", path).stdout
    return "\n".join(line for line in out.splitlines() if "file format" not in line)


def sections(path: str) -> str:
    return run(READELF, "-S", "-W", path).stdout


@pytest.mark.parametrize("name", GFX1010_OBJECTS)
def test_relabel_fixture(tmp_path, name):
    src = fixture(name)
    assert readelf_flags(src) == 0x133  # gfx1010, xnack any (LLVM's default)
    r = relabel_code_object(read(src))
    assert r.data is not None and r.kernels
    assert all(k.status == "patched" and k.rules == ("relabel-gfx1030",) for k in r.kernels)
    out = tmp_path / "out.hsaco"
    out.write_bytes(r.data)
    assert readelf_flags(str(out)) == 0x036  # EF_AMDGPU_MACH_AMDGCN_GFX1030, no feature bits
    assert readelf_target(str(out)) == "amdgcn-amd-amdhsa--gfx1030"
    assert sections(str(out)) == sections(src).replace(src, str(out))
    assert disassembly(str(out)) == disassembly(src)  # not one instruction changed
    lo, size = note_span(src)
    changed = [i for i, (a, b) in enumerate(zip(read(src), r.data)) if a != b]
    assert len(r.data) == len(read(src))
    assert changed and all(48 <= i < 52 or lo <= i < lo + size for i in changed)


def test_kernel_names_match_readelf(tmp_path):
    src = fixture("miopen_like.cl.gfx1010.v5.hsaco")
    syms = run(READELF, "-s", "-W", src).stdout
    kds = sorted({line.split()[7][:-3] for line in syms.splitlines()
                  if len(line.split()) >= 8 and line.split()[7].endswith(".kd")})
    assert sorted(k.name for k in relabel_code_object(read(src)).kernels) == kds


def test_gfx1030_code_is_left_alone():
    r = relabel_code_object(read(fixture("miopen_like.cl.gfx1030.v4.hsaco")))
    assert r.data is None
    assert r.kernels and all(k.status == "untouched" and "gfx1030" in k.reason for k in r.kernels)


def compile_cl(tmp_path, mcpu: str, *extra: str) -> str:
    src = os.path.join(os.path.dirname(fixture("miopen_like.cl.gfx1010.v4.hsaco")), "..", "src", "miopen_like.cl")
    out = str(tmp_path / f"k.{mcpu.replace(':', '_')}.co")
    subprocess.run(["clang-15", "-x", "cl", "-Xclang", "-finclude-default-header", "-target", "amdgcn-amd-amdhsa",
                    f"-mcpu={mcpu}", "-O3", f"--rocm-device-lib-path={DEVICE_LIBS}", *extra, src, "-o", out],
                   check=True, capture_output=True)
    return out


def test_code_object_v3(tmp_path):
    src = compile_cl(tmp_path, "gfx1010", "-mcode-object-version=3")
    assert readelf_flags(src) == 0x133  # V3: XNACK is an on/off bit, set for "any"
    r = relabel_code_object(read(src))
    out = tmp_path / "v3.co"
    out.write_bytes(r.data)
    assert readelf_flags(str(out)) == 0x036
    assert readelf_target(str(out)) is None  # V3 has no amdhsa.target
    assert disassembly(str(out)) == disassembly(src)


@pytest.mark.parametrize("mcpu", ["gfx1010:xnack-", "gfx1010:xnack+"])
def test_target_with_xnack_suffix(tmp_path, mcpu):
    """'amdgcn-amd-amdhsa--gfx1010:xnack-' is longer than '...--gfx1030': the
    note changes size, which the rewriter's note re-layout handles."""
    src = compile_cl(tmp_path, mcpu)
    r = relabel_code_object(read(src))
    out = tmp_path / "x.co"
    out.write_bytes(r.data)
    assert readelf_flags(str(out)) == 0x036
    assert readelf_target(str(out)) == "amdgcn-amd-amdhsa--gfx1030"
    assert disassembly(str(out)) == disassembly(src)


def bundle_ids(path: str, bundler: str = BUNDLER15) -> list[str]:
    return sorted(run(bundler, "--list", "--type=o", f"--input={path}").stdout.split())


def unbundle(path: str, entry: str, out: str, bundler: str = BUNDLER15) -> bytes:
    run(bundler, "--unbundle", "--type=o", f"--input={path}", f"--targets={entry}", f"--output={out}")
    return read(out)


def relabel_blob(data: bytes):
    return patch_blob(data, mode="relabel", rule_sets=[], patch_fn=relabel_patch_fn, is_patched=no_provenance)


def test_bundle_with_only_gfx1010_gets_a_gfx1030_entry(tmp_path):
    hsaco = fixture("vecops.hip.gfx1010.v4.hsaco")
    src = str(tmp_path / "in.bundle")
    run(BUNDLER15, "--type=o", "--targets=host-x86_64-unknown-linux,hipv4-amdgcn-amd-amdhsa--gfx1010",
        "--input=/dev/null", f"--input={hsaco}", f"--output={src}")
    r = relabel_blob(read(src))
    out = tmp_path / "out.bundle"
    out.write_bytes(r.data)
    assert bundle_ids(str(out)) == ["hipv4-amdgcn-amd-amdhsa--gfx1030", "host-x86_64-unknown-linux"]
    code = unbundle(str(out), "hipv4-amdgcn-amd-amdhsa--gfx1030", str(tmp_path / "e.co"))
    assert code == relabel_code_object(read(hsaco)).data
    assert readelf_flags(str(tmp_path / "e.co")) == 0x036


def test_bundle_with_both_puts_gfx1010_code_in_the_gfx1030_slot(tmp_path):
    src = fixture("mathops.hip.bundle")
    ids = bundle_ids(src)
    r = relabel_blob(read(src))
    out = tmp_path / "out.bundle"
    out.write_bytes(r.data)
    assert bundle_ids(str(out)) == ids
    g1010 = unbundle(src, "hipv4-amdgcn-amd-amdhsa--gfx1010", str(tmp_path / "a.co"))
    assert unbundle(str(out), "hipv4-amdgcn-amd-amdhsa--gfx1010", str(tmp_path / "b.co")) == g1010
    assert unbundle(str(out), "hipv4-amdgcn-amd-amdhsa--gfx1030", str(tmp_path / "c.co")) == \
        relabel_code_object(g1010).data


def test_ccob_is_recompressed_as_it_came(tmp_path):
    src = fixture("vecops.hip.ccob")
    r = relabel_blob(read(src))
    assert r.data[:8] == read(src)[:8]  # CCOB, same version and method
    out = tmp_path / "out.ccob"
    out.write_bytes(r.data)
    assert bundle_ids(str(out), BUNDLER19) == bundle_ids(src, BUNDLER19)
    unbundle(str(out), "hipv4-amdgcn-amd-amdhsa--gfx1030", str(tmp_path / "c.co"), BUNDLER19)
    assert readelf_flags(str(tmp_path / "c.co")) == 0x036


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_fuzz_relabel_any_bytes(data):
    """Any bytes (here: a real gfx1010 object with random bytes overwritten,
    or random bytes) give a result or a clean FormatError."""
    name = data.draw(st.sampled_from(["asm_kernels.s.gfx1010.v5.hsaco", "vecops.hip.bundle", "vecops.hip.ccob"]))
    base = bytearray(read(fixture(name)))
    if data.draw(st.booleans()):
        for _ in range(data.draw(st.integers(1, 8))):
            i = data.draw(st.integers(0, min(len(base), 4096) - 1))
            base[i] = data.draw(st.integers(0, 255))
        blob = bytes(base[: data.draw(st.integers(0, len(base)))])
    else:
        blob = data.draw(st.binary(max_size=200))
    try:
        relabel_blob(blob)
    except FormatError:
        pass
