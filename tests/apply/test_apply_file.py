"""`kpatch apply FILE -o OUT`: one code object, bundle, CCOB or host library.

Host libraries keep their layout: llvm-readelf-16's section table of OUT
equals FILE's, and only bytes inside the patched bundles differ."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys

import pytest

from kpatch.errors import UsageError
from kpatch.apply.file import apply_to_file
from kpatch.apply.relabel import relabel_code_object, relabel_patch_fn

from tests.conftest import run_kpatch

from .conftest import (
    BUNDLER15, READELF, FakePatcher, fake_is_patched, fixture, invoke, listing, marked, no_provenance, read,
    readelf_flags, run)


class GrowingPatcher(FakePatcher):
    """Test double: like FakePatcher, but the patched object is 64 KiB larger
    (zeros after the end of the ELF file), as inserted code would make it."""

    def __call__(self, data, *, mode, rule_sets):
        r = super().__call__(data, mode=mode, rule_sets=rule_sets)
        return dataclasses.replace(r, data=r.data + bytes(65536))


def apply(path, out, **kw):
    args = dict(mode="override", rule_sets=[], patch_fn=FakePatcher(), is_patched=fake_is_patched)
    args.update(kw)
    return apply_to_file(str(path), str(out), **args)


def section_table(path: str) -> str:
    return run(READELF, "-S", "-W", path).stdout.replace(path, "FILE")


def fatbin_span(path: str) -> tuple[int, int]:
    for line in run(READELF, "-S", "-W", path).stdout.splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+\.hip_fatbin\s+PROGBITS\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if m:
            return int(m.group(1), 16), int(m.group(2), 16)
    raise AssertionError("no .hip_fatbin")


def test_code_object(tmp_path):
    src = fixture("miopen_like.cl.gfx1030.v4.hsaco")
    out = tmp_path / "out.hsaco"
    r = apply(src, out)
    assert r.written and read(str(out)) == marked(read(src))
    assert [p.status for p in r.parts] == ["changed"]
    assert r.counts()["kernels_patched"] == 3


def test_nothing_to_do_writes_nothing(tmp_path):
    out = tmp_path / "out.hsaco"
    r = apply(fixture("miopen_like.cl.gfx1010.v4.hsaco"), out)  # gfx1010 code: not for override mode
    assert not r.written and not out.exists()
    assert all(k.status == "untouched" for k in r.parts[0].kernels)


@pytest.mark.llvm
def test_host_object_relabel_in_place(tmp_path):
    src = fixture("vecops.hip.host.o")
    out = tmp_path / "vecops.host.o"
    r = apply(src, out, mode="relabel", patch_fn=relabel_patch_fn, is_patched=no_provenance)
    assert r.written and [p.status for p in r.parts] == ["changed"]
    assert section_table(str(out)) == section_table(src)
    lo, size = fatbin_span(src)
    a, b = read(src), read(str(out))
    assert len(a) == len(b) and a[:lo] == b[:lo] and a[lo + size:] == b[lo + size:]
    bundle = tmp_path / "b.bundle"
    bundle.write_bytes(b[lo:lo + size])
    run(BUNDLER15, "--unbundle", "--type=o", f"--input={bundle}", "--targets=hipv4-amdgcn-amd-amdhsa--gfx1030",
        f"--output={tmp_path / 'slot.co'}")
    run(BUNDLER15, "--unbundle", "--type=o", f"--input={bundle}", "--targets=hipv4-amdgcn-amd-amdhsa--gfx1010",
        f"--output={tmp_path / 'g1010.co'}")
    assert read(str(tmp_path / "slot.co")) == relabel_code_object(read(str(tmp_path / "g1010.co"))).data
    assert readelf_flags(str(tmp_path / "slot.co")) == 0x036


def test_host_object_bundle_that_no_longer_fits_is_refused(tmp_path):
    src = fixture("mathops.hip.host.o")
    out = tmp_path / "out.o"
    r = apply(src, out, patch_fn=GrowingPatcher())
    assert not r.written and not out.exists()
    [part] = r.parts
    assert part.status == "refused" and "fit before the next bundle" in part.reason
    assert part.kernels and all(k.status == "refused" for k in part.kernels)


def test_dry_run_and_wrong_inputs(tmp_path, monkeypatch):
    out = tmp_path / "out.o"
    r = apply(fixture("vecops.hip.host.o"), out, dry_run=True)
    assert r.parts[0].status == "changed" and not r.written and listing(str(tmp_path)) == []
    from kpatch.data import sample_db_path

    with pytest.raises(UsageError, match="--db"):
        apply(sample_db_path(), out)
    with pytest.raises(UsageError, match="system directory"):
        apply(fixture("vecops.hip.bundle"), "/usr/lib/kpatch-never.bundle")
    code, _, stderr, exc = invoke(monkeypatch, ["apply", fixture("vecops.hip.bundle"), "--mode", "override"])
    assert code == 2  # FILE needs -o


@pytest.mark.llvm
def test_cli_bundle(tmp_path, monkeypatch):
    out = tmp_path / "out.bundle"
    code, stdout, stderr, exc = invoke(monkeypatch, ["apply", fixture("vecops.hip.bundle"), "-o", str(out),
                                                     "--mode", "override"], patcher=FakePatcher(),
                                       is_patched=fake_is_patched)
    assert exc is None and code == 0, stderr
    assert "1 files: 1 changed" in stdout and f"wrote {out}" in stdout
    ids = sorted(run(BUNDLER15, "--list", "--type=o", f"--input={out}").stdout.split())
    assert ids == sorted(run(BUNDLER15, "--list", "--type=o", f"--input={fixture('vecops.hip.bundle')}").stdout.split())


@pytest.mark.corpus
def test_librocrand_override_with_a_same_size_patch(tmp_path, librocrand):
    out = tmp_path / "librocrand.so.1.1"
    r = apply(librocrand, out)
    assert r.written and [p.status for p in r.parts] == ["changed"]
    assert section_table(str(out)) == section_table(librocrand)
    lo, size = fatbin_span(librocrand)
    with open(librocrand, "rb") as fa, open(out, "rb") as fb:
        assert fa.read(lo) == fb.read(lo)
        fa.seek(lo + size)
        fb.seek(lo + size)
        assert fa.read() == fb.read()
    assert os.path.getsize(out) == os.path.getsize(librocrand)


def _apply_cli(*args: str) -> subprocess.CompletedProcess:
    """`kpatch apply ARGS --mode override` as a user runs it (a hang fails within 2 minutes)."""
    return run_kpatch("apply", *args, "--mode", "override", timeout=120)


def test_host_elf_without_gpu_code_is_one_line(tmp_path):
    """A host ELF file with no .hip_fatbin section (a plain program) is a
    usage error naming the file and the section, exit 2, nothing written."""
    exe = os.path.realpath(sys.executable)
    with open(exe, "rb") as f:
        if f.read(4) != b"\x7fELF":
            pytest.skip("the interpreter is not an ELF file")
    src = tmp_path / "plain.so"
    src.write_bytes(open(exe, "rb").read())
    out = tmp_path / "out.so"
    p = _apply_cli(str(src), "-o", str(out))
    assert p.returncode == 2, p.stderr
    assert p.stderr == f"error: {src}: host ELF file without a .hip_fatbin section: nothing to patch\n"
    assert not out.exists()


def test_fifo_is_refused_not_read(tmp_path):
    """FILE a FIFO: refused at once ("not a regular file", exit 2), never
    opened (reading it would wait for a writer forever)."""
    fifo = tmp_path / "in.co"
    os.mkfifo(fifo)
    p = _apply_cli(str(fifo), "-o", str(tmp_path / "out.co"))
    assert p.returncode == 2 and p.stderr == f"error: {fifo}: not a regular file\n"
    assert sorted(os.listdir(tmp_path)) == ["in.co"]


def test_existing_output_is_kept_unless_force(tmp_path):
    """An existing OUT (a file, or a symbolic link) is refused, exit 2 and
    left as it was; --force replaces it (a link by a file, never written
    through); OUT = FILE is refused even with --force; --dry-run writes
    nothing, so an existing OUT is no obstacle."""
    src = tmp_path / "in.hsaco"
    src.write_bytes(read(fixture("vecops.hip.gfx1030.v5.hsaco")))
    out = tmp_path / "out.hsaco"
    out.write_bytes(b"precious")
    p = _apply_cli(str(src), "-o", str(out))
    assert p.returncode == 2 and p.stderr == f"error: {out}: already exists (--force replaces it)\n"
    assert out.read_bytes() == b"precious"
    assert _apply_cli(str(src), "-o", str(out), "--dry-run").returncode == 0
    assert out.read_bytes() == b"precious"
    p = _apply_cli(str(src), "-o", str(out), "--force")
    assert p.returncode == 0, p.stderr
    assert out.read_bytes()[:4] == b"\x7fELF" and out.read_bytes() != src.read_bytes()
    kept = tmp_path / "kept.bin"
    kept.write_bytes(b"behind the link")
    link = tmp_path / "link.hsaco"
    link.symlink_to(kept)
    assert _apply_cli(str(src), "-o", str(link)).returncode == 2
    assert _apply_cli(str(src), "-o", str(link), "--force").returncode == 0
    assert not link.is_symlink() and kept.read_bytes() == b"behind the link"
    before = src.read_bytes()
    p = _apply_cli(str(src), "-o", str(src), "--force")
    assert p.returncode == 2 and "is FILE itself" in p.stderr
    assert src.read_bytes() == before
