"""`kpatch revert` steps back one apply at a time, through every backup.

Each apply here writes a different entry (three one-entry source DBs), so
each one changes the user DB and leaves a backup; the expected bytes after
each revert are copies of the DB taken before each apply (SHA-256)."""

from __future__ import annotations

import os
import shutil

import pytest

from kpatch.containers.kdb import write_kdb

from .conftest import FakePatcher, fake_is_patched, fixture, invoke, listing, python_cli, read, sha

SOURCES = [
    ("miopen_like.cl.o", " -DMLO_FILTER_SIZE0=3 -mcpu=gfx1030", "miopen_like.cl.gfx1030.v4.hsaco"),
    ("asm_kernels.s.o", " -mcumode -mcpu=gfx1030", "asm_kernels.s.gfx1030.v4.hsaco"),
    ("mathops.cpp.o", " -O3 -mcpu=gfx1030", "mathops.hip.gfx1030.v4.hsaco"),
]


@pytest.fixture
def cache(tmp_path):
    d = tmp_path / "cache" / "3.2.0.abc"
    d.mkdir(parents=True)
    return d


def sources(tmp_path) -> list[str]:
    out = []
    for n, (name, args, f) in enumerate(SOURCES):
        path = str(tmp_path / f"src{n}.kdb")
        write_kdb(path, [(name, args, read(fixture(f)))], user=False)
        out.append(path)
    return out


def apply_once(monkeypatch, src: str, cache) -> None:
    code, stdout, stderr, exc = invoke(monkeypatch, ["apply", "--db", src, "--mode", "override", "--cu", "18",
                                                     "--out-dir", str(cache)],
                                       patcher=FakePatcher(), is_patched=fake_is_patched)
    assert exc is None and code == 0, stderr
    assert "1 entries written" in stdout


def test_three_applies_then_three_reverts_step_back(tmp_path, cache, monkeypatch):
    out = cache / "gfx1030_18.ukdb"
    write_kdb(str(out), [("keep.cl.o", " -mcpu=gfx1030", b"keep me")], user=True)
    before = []  # a copy of the DB before each apply
    for n, src in enumerate(sources(tmp_path)):
        copy = tmp_path / f"before{n}.ukdb"
        shutil.copyfile(out, copy)
        before.append(sha(str(copy)))
        apply_once(monkeypatch, src, cache)
        assert sha(str(out)) != before[-1]
    assert len(set(before)) == 3
    code, stdout, _, _ = invoke(monkeypatch, ["revert", "--list", str(out)])
    assert code == 0 and f"{out}: 3 backup(s)" in stdout
    for n in (2, 1, 0):
        code, stdout, stderr, exc = invoke(monkeypatch, ["revert", str(out)])
        assert exc is None and code == 0, stderr
        assert sha(str(out)) == before[n], f"revert {3 - n} did not give the DB before apply {n + 1}"
        assert stdout.startswith(f"restored {out} from {out}.kpatch-backup-")
        assert (f"{n} older backup(s) left" in stdout) if n else ("no backup left" in stdout)
        # the restored backup is consumed; nothing else is left beside the DB
        backups = [f for f in listing(str(cache)) if ".kpatch-backup-" in f]
        assert len(backups) == n and listing(str(cache)) == sorted(["gfx1030_18.ukdb", *backups])
    p = python_cli("revert", str(out))  # the real exit status: main() maps the UsageError
    assert p.returncode == 2 and p.stderr == f"error: {out}: has no kpatch backup left to restore\n"
    assert sha(str(out)) == before[0]


def test_reverts_back_to_no_db(tmp_path, cache, monkeypatch):
    out = cache / "gfx1030_18.ukdb"
    src = sources(tmp_path)
    apply_once(monkeypatch, src[0], cache)
    first = sha(str(out))
    apply_once(monkeypatch, src[1], cache)
    code, stdout, _, _ = invoke(monkeypatch, ["revert", "--out-dir", str(cache)])
    assert code == 0 and sha(str(out)) == first
    code, stdout, _, _ = invoke(monkeypatch, ["revert", "--out-dir", str(cache)])
    assert code == 0 and stdout.startswith(f"removed {out}") and not out.exists()
    assert os.listdir(cache) == []


def test_help_says_it_steps_back():
    from click.testing import CliRunner

    from kpatch.cli.main import cli

    text = " ".join(CliRunner().invoke(cli, ["revert", "--help"]).output.split())
    assert "Step the user kernel DB DB back by one `kpatch apply`" in text
    assert "a second revert restores the backup before that" in text
