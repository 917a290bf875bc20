"""`kpatch apply DIR -o OUTDIR`: a rocBLAS/Tensile library directory as one unit.

Which files hold gfx1030 code is decided here by llvm-readelf-16 (e_flags)
and clang-offload-bundler --list, not by kpatch; what a gfx1030 file must
become is what `kpatch apply FILE -o OUT` makes of it, run separately; what
must be left is checked with `kpatch scan --target gfx1010`; everything else
must be byte for byte the source (SHA-256)."""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

from conftest import ROCBLAS_LIBRARY
from kpatch.apply.directory import MANIFEST, apply_to_dir

from .conftest import BUNDLER15, FakePatcher, fake_is_patched, fixture, invoke, read, readelf_flags

#: e_flags mach field (AMDGPUUsage, EF_AMDGPU_MACH): the processor a code object is for
EF_AMDGPU_MACH = 0xFF
MACH_GFX1030 = 0x36
ROCBLAS = ROCBLAS_LIBRARY
#: small real rocBLAS 4.4.1 files (a gfx1030 fallback, its gfx1010 twin, the gfx1030 catalogue)
ROCBLAS_FILES = ("TensileLibrary_Type_DD_Contraction_l_Alik_Bljk_Cijk_Dijk_fallback_gfx1030.hsaco",
                 "TensileLibrary_Type_DD_Contraction_l_Alik_Bljk_Cijk_Dijk_fallback_gfx1010.hsaco",
                 "TensileLibrary_Type_DD_Contraction_l_Alik_Bjlk_Cijk_Dijk_fallback_gfx1030.hsaco",
                 "TensileLibrary_lazy_gfx1030.dat")


def sha(path) -> str:
    return hashlib.sha256(read(str(path))).hexdigest()


def files_under(root) -> dict[str, str]:
    """Relative path -> 'link:TARGET' or the SHA-256 of every file under ``root``."""
    out = {}
    for here, _dirs, files in os.walk(root):
        for name in files + [d for d in _dirs if os.path.islink(os.path.join(here, d))]:
            p = os.path.join(here, name)
            rel = os.path.relpath(p, root)
            out[rel] = f"link:{os.readlink(p)}" if os.path.islink(p) else sha(p)
    return out


def is_gfx1030_elf(path) -> bool:
    with open(path, "rb") as f:
        if f.read(4) != b"\x7fELF":
            return False
    try:
        return readelf_flags(str(path)) & EF_AMDGPU_MACH == MACH_GFX1030
    except subprocess.CalledProcessError:
        return False


def bundle_has_gfx1030(path) -> bool:
    with open(path, "rb") as f:
        if not f.read(24).startswith(b"__CLANG_OFFLOAD_BUNDLE__"):
            return False
    out = subprocess.run([BUNDLER15, "--list", "--type=o", f"--input={path}"], capture_output=True, text=True,
                         check=True).stdout
    return any(line.endswith("--gfx1030") for line in out.split())


def library(root, *, bad: bool = False):
    """A small library directory: gfx1030 code (one under a gfx1010 name), gfx1010 code (one under a
    gfx1030 name), a bundle, a catalogue of random bytes, an executable file, a subdirectory and a
    relative symbolic link; with ``bad``, also a truncated gfx1030 code object."""
    root.mkdir()
    (root / "sub").mkdir()
    shutil.copy(fixture("miopen_like.cl.gfx1030.v4.hsaco"), root / "Kernels.so-000-gfx1030.hsaco")
    shutil.copy(fixture("vecops.hip.gfx1030.v5.hsaco"), root / "looks_like_gfx1010.hsaco")
    shutil.copy(fixture("mathops.hip.gfx1030.v4.hsaco"), root / "sub" / "TensileLibrary_x_gfx1030.co")
    shutil.copy(fixture("vecops.hip.gfx1010.v4.hsaco"), root / "looks_like_gfx1030.hsaco")
    shutil.copy(fixture("miopen_like.cl.gfx1010.v4.hsaco"), root / "sub" / "Kernels.so-000-gfx1010.hsaco")
    shutil.copy(fixture("vecops.hip.bundle"), root / "vecops.hip.bundle")
    (root / "TensileLibrary_lazy_gfx1030.dat").write_bytes(os.urandom(3000))
    (root / "tool.sh").write_bytes(b"#!/bin/sh\n")
    os.chmod(root / "tool.sh", 0o755)
    os.chmod(root / "sub" / "TensileLibrary_x_gfx1030.co", 0o640)
    os.symlink("../TensileLibrary_lazy_gfx1030.dat", root / "sub" / "catalogue.dat")
    if bad:
        (root / "broken_gfx1030.hsaco").write_bytes(read(fixture("vecops.hip.gfx1030.v4.hsaco"))[:200])
    return root


def kpatch_main(monkeypatch, capsys, args: list[str]) -> tuple[int, str, str]:
    """Run kpatch's real entry point (its exit statuses, its error lines) in this process."""
    from kpatch.cli.main import main

    for k in ("HSA_OVERRIDE_GFX_VERSION", "KPATCH_DEBUG"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("KPATCH_NO_PROGRESS", "1")
    monkeypatch.setattr(sys, "argv", ["kpatch", *args])
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main()
    out, err = capsys.readouterr()
    return e.value.code, out, err


def apply_file_cli(monkeypatch, src, out, mode="override") -> bytes | None:
    """What `kpatch apply FILE -o OUT` makes of ``src`` (None: it writes nothing)."""
    code, stdout, stderr, exc = invoke(monkeypatch, ["apply", "--mode", mode, str(src), "-o", str(out)])
    assert (code, exc) == (0, None), stderr
    return read(str(out)) if os.path.exists(out) else None


def scan_verdicts(monkeypatch, path) -> list[str]:
    code, stdout, stderr, exc = invoke(monkeypatch, ["scan", "--target", "gfx1010", "--json", str(path)])
    assert exc is None, stderr
    doc = json.loads(stdout)
    return [k["verdict"] for co in doc["code_objects"] if co["target"].startswith("gfx1030")
            for k in co["kernels"]]


def check_output(monkeypatch, src, out, tmp_path, mode="override") -> tuple[set, set]:
    """The checks every written OUTDIR passes; returns (gfx1030 files, files copied as is)."""
    before, after = files_under(src), files_under(out)
    assert set(after) == set(before) | {MANIFEST}
    code_files = {rel for rel in before if not before[rel].startswith("link:")
                  and (is_gfx1030_elf(src / rel) or bundle_has_gfx1030(src / rel))}
    others = set(before) - code_files
    for rel in others:
        assert after[rel] == before[rel], rel
    for rel in code_files:
        alone = apply_file_cli(monkeypatch, src / rel, tmp_path / "alone" / rel.replace(os.sep, "_"), mode)
        assert read(str(out / rel)) == (alone if alone is not None else read(str(src / rel))), rel
        assert stat.S_IMODE(os.stat(out / rel).st_mode) == stat.S_IMODE(os.stat(src / rel).st_mode), rel
        if mode == "override":
            assert "patchable" not in scan_verdicts(monkeypatch, out / rel), rel
    return code_files, others


def test_library_directory(monkeypatch, tmp_path):
    src = library(tmp_path / "library")
    out = tmp_path / "patched"
    code, stdout, stderr, exc = invoke(monkeypatch, ["apply", "--mode", "override", str(src), "-o", str(out)])
    assert (code, exc, stderr) == (0, None, "")
    code_files, others = check_output(monkeypatch, src, out, tmp_path)
    # decided by the bytes, not the names
    assert "looks_like_gfx1010.hsaco" in code_files and "looks_like_gfx1030.hsaco" in others
    assert code_files == {"Kernels.so-000-gfx1030.hsaco", "looks_like_gfx1010.hsaco",
                          os.path.join("sub", "TensileLibrary_x_gfx1030.co"), "vecops.hip.bundle"}
    for rel in code_files:  # each was changed (override: the refused half2_dot keeps its code, the rest is patched)
        assert sha(out / rel) != sha(src / rel)
    assert os.readlink(out / "sub" / "catalogue.dat") == "../TensileLibrary_lazy_gfx1030.dat"
    assert stat.S_IMODE(os.stat(out / "tool.sh").st_mode) == 0o755
    assert os.stat(out / "TensileLibrary_lazy_gfx1030.dat").st_mtime_ns == \
        os.stat(src / "TensileLibrary_lazy_gfx1030.dat").st_mtime_ns
    assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []  # no temporary directory left
    summary = stdout.strip().splitlines()[-2]
    assert summary.startswith(f"{len(files_under(src))} files: 4 patched, 0 gfx1030 code with nothing to change, "
                              f"0 copied unchanged with refusals, {len(others)} copied as is, 0 errors"), summary
    assert f"ROCBLAS_TENSILE_LIBPATH={out}" in stdout
    record = json.loads((out / MANIFEST).read_text())
    assert record["mode"] == "override" and record["files"]["sub/TensileLibrary_x_gfx1030.co"]["refused"]


def test_native_all_or_nothing_copies_unchanged(monkeypatch, tmp_path):
    """Native mode: an object with a refused kernel (mathops' half2_dot) is copied unchanged, its
    refusal recorded; the others are patched as FILE patches them."""
    src = library(tmp_path / "library")
    out = tmp_path / "patched"
    code, stdout, stderr, exc = invoke(monkeypatch, ["apply", "--mode", "native", "--json", str(src), "-o", str(out)])
    assert (code, exc) == (0, None), stderr
    check_output(monkeypatch, src, out, tmp_path, mode="native")
    doc = json.loads(stdout)
    by_path = {f["path"]: f for f in doc["files"]}
    mathops = by_path[os.path.join("sub", "TensileLibrary_x_gfx1030.co")]
    assert mathops["status"] == "refused" and mathops["written"] == "copied"
    assert sha(out / "sub" / "TensileLibrary_x_gfx1030.co") == sha(src / "sub" / "TensileLibrary_x_gfx1030.co")
    assert doc["summary"]["refused"] == 1 and doc["summary"]["kernels_refused"] >= 1
    record = json.loads((out / MANIFEST).read_text())
    assert record["files"]["sub/TensileLibrary_x_gfx1030.co"]["status"] == "refused"


def test_dry_run_writes_nothing(monkeypatch, tmp_path):
    src = library(tmp_path / "library")
    before = sorted(os.listdir(tmp_path))
    out = tmp_path / "patched"
    code, stdout, stderr, exc = invoke(monkeypatch, ["apply", "--mode", "override", "--dry-run", str(src),
                                                     "-o", str(out)])
    assert (code, exc, stderr) == (0, None, "")
    assert sorted(os.listdir(tmp_path)) == before and not out.exists()
    assert "dry run: nothing written" in stdout and " 4 patched," in stdout


def test_existing_output_refused_unless_kpatch_force(monkeypatch, capsys, tmp_path):
    src = library(tmp_path / "library")
    out = tmp_path / "patched"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    args = ["apply", "--mode", "override", str(src), "-o", str(out)]
    code, stdout, stderr = kpatch_main(monkeypatch, capsys, args)
    assert code == 2 and stderr.startswith(f"error: {out}: exists and is not empty") and stderr.count("\n") == 1
    code, stdout, stderr = kpatch_main(monkeypatch, capsys, args + ["--force"])  # not kpatch's output: kept
    assert code == 2 and "was not written by kpatch" in stderr
    assert os.listdir(out) == ["mine.txt"]
    assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []
    shutil.rmtree(out)
    out.mkdir()  # an empty directory is taken
    assert kpatch_main(monkeypatch, capsys, args)[0] == 0
    (out / "stale.hsaco").write_bytes(b"old")
    assert kpatch_main(monkeypatch, capsys, args)[0] == 2
    code, stdout, stderr = kpatch_main(monkeypatch, capsys, args + ["--force"])  # kpatch's own output: replaced
    assert (code, stderr) == (0, "")
    assert not (out / "stale.hsaco").exists() and set(files_under(out)) == set(files_under(src)) | {MANIFEST}
    assert f"replaced {out}" in stdout
    assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []  # the old directory removed


def test_output_where_kpatch_must_not_write(monkeypatch, capsys, tmp_path):
    src = library(tmp_path / "library")
    target = tmp_path / "elsewhere"
    target.mkdir()
    os.symlink(target, tmp_path / "link")
    for out, why in [(tmp_path / "link", "is a symbolic link"), (src / "inside", "overlap"),
                     ("/usr/lib/kpatch-test-out", "system directory"), (tmp_path, "overlap")]:
        code, stdout, stderr = kpatch_main(monkeypatch, capsys, ["apply", "--mode", "override", str(src),
                                                                 "-o", str(out)])
        assert code == 2 and why in stderr and stderr.count("\n") == 1, (out, stderr)
    assert os.listdir(target) == [] and not (src / "inside").exists()


def test_bad_file_is_one_error_and_the_rest_is_written(monkeypatch, tmp_path):
    src = library(tmp_path / "library", bad=True)
    out = tmp_path / "patched"
    code, stdout, stderr, exc = invoke(monkeypatch, ["apply", "--mode", "override", str(src), "-o", str(out)])
    assert (code, exc) == (1, None)
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {src / 'broken_gfx1030.hsaco'}: "), stderr
    assert lines[0].endswith("; copied unchanged")
    assert sha(out / "broken_gfx1030.hsaco") == sha(src / "broken_gfx1030.hsaco")
    os.unlink(src / "broken_gfx1030.hsaco")
    os.unlink(out / "broken_gfx1030.hsaco")
    check_output(monkeypatch, src, out, tmp_path)


def test_unreadable_file_is_an_error(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    src = library(tmp_path / "library")
    os.chmod(src / "TensileLibrary_lazy_gfx1030.dat", 0)
    r = apply_to_dir(str(src), str(tmp_path / "out"), mode="override", rule_sets=[], patch_fn=FakePatcher(),
                     is_patched=fake_is_patched, jobs=1)
    assert [(f.path, f.status) for f in r.files if f.status == "error"] == [("TensileLibrary_lazy_gfx1030.dat",
                                                                             "error")]


def test_links_leaving_the_directory(tmp_path):
    """A link out of DIR is followed (OUTDIR needs nothing outside it); one that dangles is an error."""
    src = library(tmp_path / "library")
    outside = tmp_path / "outside.hsaco"
    shutil.copy(fixture("vecops.hip.gfx1030.v4.hsaco"), outside)
    os.symlink(outside, src / "out_link.hsaco")
    os.symlink(str(src / "TensileLibrary_lazy_gfx1030.dat"), src / "abs_inside.dat")
    os.symlink("nowhere", src / "dangling")
    out = tmp_path / "out"
    r = apply_to_dir(str(src), str(out), mode="override", rule_sets=[], patch_fn=FakePatcher(),
                     is_patched=fake_is_patched, jobs=1)
    by = {f.path: f for f in r.files}
    assert by["out_link.hsaco"].status == "patched" and not os.path.islink(out / "out_link.hsaco")
    assert os.readlink(out / "abs_inside.dat") == "TensileLibrary_lazy_gfx1030.dat"
    assert by["dangling"].status == "error" and not os.path.lexists(out / "dangling")


def test_workers_give_what_one_process_gives(tmp_path):
    src = library(tmp_path / "library")
    for i in range(6):
        shutil.copy(fixture("vecops.hip.gfx1030.v4.hsaco"), src / f"copy{i}_gfx1030.hsaco")
    results = []
    for jobs in (1, 3):
        out = tmp_path / f"out{jobs}"
        r = apply_to_dir(str(src), str(out), mode="override", rule_sets=[], patch_fn=FakePatcher(),
                         is_patched=fake_is_patched, jobs=jobs)
        results.append(([f.to_json() for f in r.files], files_under(out)))
    assert results[0] == results[1]


def test_interrupt_leaves_nothing(tmp_path):
    """KeyboardInterrupt after some files: no OUTDIR, no temporary directory."""
    src = library(tmp_path / "library")
    out = tmp_path / "out"
    seen = []

    def on_file(rep):
        seen.append(rep)
        if len(seen) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        apply_to_dir(str(src), str(out), mode="override", rule_sets=[], patch_fn=FakePatcher(),
                     is_patched=fake_is_patched, jobs=1, on_file=on_file)
    assert sorted(os.listdir(tmp_path)) == ["library"]


def test_ctrl_c(tmp_path):
    """SIGINT to the process group (as a terminal sends it) in the middle of a run with worker
    processes: exit 130, one line, no OUTDIR and no temporary directory beside it."""
    src = tmp_path / "library"
    src.mkdir()
    for i in range(300):
        shutil.copy(fixture("vecops.hip.gfx1030.v4.hsaco"), src / f"k{i:03}_gfx1030.hsaco")
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("KPATCH_DEBUG", "HSA_OVERRIDE_GFX_VERSION")}
    env |= {"KPATCH_NO_PROGRESS": "1", "PYTHONUNBUFFERED": "1"}  # (each report line as it is printed)

    def setup() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    p = subprocess.Popen([sys.executable, "-m", "kpatch", "apply", "--mode", "override", str(src), "-o", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True,
                         preexec_fn=setup)
    head = b""
    try:
        # interrupted once the first file was reported patched: half-way through, whatever the
        # machine's load (a fixed delay was too short on a loaded one, with workers still starting)
        deadline = time.monotonic() + 60
        while b"patched " not in head:
            assert time.monotonic() < deadline and p.poll() is None, "the run never reported a file"
            if select.select([p.stdout], [], [], 0.05)[0]:
                head += os.read(p.stdout.fileno(), 65536)
        assert p.poll() is None, "apply finished before the interrupt: make the directory bigger"
        os.killpg(p.pid, signal.SIGINT)
        rest, stderr = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    stdout = (head + rest).decode()
    assert (p.returncode, stderr.decode()) == (130, "error: interrupted\n"), stdout[-2000:]
    assert "patched " in stdout  # it was interrupted half-way
    assert sorted(os.listdir(tmp_path)) == ["library"]


def test_real_rocblas_files(monkeypatch, tmp_path):
    """2-3 small files of Debian's rocBLAS 4.4.1 library (skipped when kdb_cache lacks them)."""
    missing = [n for n in ROCBLAS_FILES if not os.path.exists(os.path.join(ROCBLAS, n))]
    if missing:
        pytest.skip(f"rocBLAS 4.4.1 library not in kdb_cache ({missing[0]})")
    src = tmp_path / "library"
    src.mkdir()
    for n in ROCBLAS_FILES:
        shutil.copy2(os.path.join(ROCBLAS, n), src / n)
    out = tmp_path / "patched"
    code, stdout, stderr, exc = invoke(monkeypatch, ["apply", "--mode", "override", str(src), "-o", str(out)])
    assert (code, exc, stderr) == (0, None, "")
    code_files, others = check_output(monkeypatch, src, out, tmp_path)
    assert code_files == {n for n in ROCBLAS_FILES if n.endswith("gfx1030.hsaco")}


def test_json_report_and_missing_parent(monkeypatch, tmp_path):
    """--json lists every file; --report diffs each changed code object against OUTDIR's copy; a
    missing parent of OUTDIR is made (after the checks)."""
    src = library(tmp_path / "library")
    out = tmp_path / "new" / "parent" / "patched"
    html = tmp_path / "report.html"
    code, stdout, stderr, exc = invoke(monkeypatch, ["apply", "--mode", "override", "--json", "--report", str(html),
                                                     str(src), "-o", str(out) + "/"])
    assert (code, exc) == (0, None), stderr
    doc = json.loads(stdout)
    assert {f["path"] for f in doc["files"]} == set(files_under(src))
    assert doc["written"] and doc["output"] == str(out) and doc["report"]["written"]
    assert doc["summary"]["patched"] == 4 and doc["summary"]["error"] == 0
    text = html.read_text()
    assert f"file://{out}/sub/TensileLibrary_x_gfx1030.co" in text and "half2_dot" in text


def test_output_as_input(tmp_path):
    """An OUTDIR given back as DIR: its record is written anew, not copied; nothing is patched twice."""
    src = library(tmp_path / "library")
    first, second = tmp_path / "first", tmp_path / "second"
    kw = dict(mode="override", rule_sets=[], patch_fn=FakePatcher(), is_patched=fake_is_patched, jobs=1)
    apply_to_dir(str(src), str(first), **kw)
    r = apply_to_dir(str(first), str(second), **kw)
    assert MANIFEST not in {f.path for f in r.files}
    assert r.counts()["patched"] == 0 and r.counts()["unchanged"] == 4
    assert files_under(second) | {MANIFEST: ""} == files_under(first) | {MANIFEST: ""}
    assert json.loads((second / MANIFEST).read_text())["source"] == str(first)
