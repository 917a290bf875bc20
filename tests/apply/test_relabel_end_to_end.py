"""`kpatch apply --mode relabel` end to end, as a user runs it: a gfx1010 kernel
DB in, MIOpen's gfx1030 user DB out, read back with MIOpen's exact SELECT
and checked with llvm-readelf-16 / llvm-objdump-16 / clang-offload-bundler."""

from __future__ import annotations


import pytest

from .conftest import (
    BUNDLER15, OBJDUMP, build_gfx1010_kdb, listing, miopen_select, python_cli, readelf_flags, readelf_target, run, sha)

pytestmark = pytest.mark.llvm


def test_relabel_db_end_to_end(tmp_path):
    src = str(tmp_path / "gfx1010.kdb")
    items = build_gfx1010_kdb(src)
    cache = tmp_path / "home" / ".cache" / "miopen" / "3.2.0.abcdef"
    cache.mkdir(parents=True)
    env = {"HOME": str(tmp_path / "home"), "KPATCH_ROCM_ROOTS": ""}  # the cache dir is found, not given
    p = python_cli("apply", "--db", src, "--mode", "relabel", "--cu", "18", env=env)
    assert p.returncode == 0, p.stderr
    out = cache / "gfx1030_18.ukdb"
    assert f"output {out}" in p.stdout
    assert "5 changed, 0 unchanged, 1 skipped, 0 errors" in p.stdout
    for name, args, code in items:
        if not args.endswith("-mcpu=gfx1010"):
            assert miopen_select(str(out), name, args) is None
            continue
        got = miopen_select(str(out), name, args[: -len("gfx1010")] + "gfx1030")
        assert got is not None
        path = tmp_path / "got.bin"
        path.write_bytes(got)
        if got.startswith(b"\x7fELF"):
            assert len(got) == len(code)  # a header edit only
            assert readelf_flags(str(path)) == 0x036
            assert readelf_target(str(path)) == "amdgcn-amd-amdhsa--gfx1030"
            orig = tmp_path / "orig.bin"
            orig.write_bytes(code)
            dis = [run(OBJDUMP, "-d", "--mcpu=gfx1010", str(f)).stdout.split("\n", 3)[3] for f in (orig, path)]
            assert dis[0] == dis[1]
        else:  # vecops: bundle with gfx1010 and gfx1030 entries; the gfx1030 slot now holds gfx1010 code
            run(BUNDLER15, "--unbundle", "--type=o", f"--input={path}",
                "--targets=hipv4-amdgcn-amd-amdhsa--gfx1030", f"--output={tmp_path / 'slot.co'}")
            assert readelf_flags(str(tmp_path / "slot.co")) == 0x036
    digest, files = sha(str(out)), listing(str(cache))
    p = python_cli("apply", "--db", src, "--mode", "relabel", "--cu", "18", env=env)
    assert p.returncode == 0 and "nothing to write" in p.stdout
    assert sha(str(out)) == digest and listing(str(cache)) == files
    p = python_cli("revert", env=env)
    assert p.returncode == 0 and p.stdout.startswith(f"reverted {out}")
    assert "0 rows put back" in p.stdout and f"{out} holds 0 rows" in p.stdout
