"""`kpatch revert` steps back one apply at a time, through every backup,
checks each backup before using it, and never drops a row another process
added.

Each apply here writes one entry (one-entry source DBs); the fourth source
has the first one's key with other code, so its apply replaces a row an
earlier apply wrote.  The expected DB contents after each revert are the
rows (keys, blobs, hashes, sizes, as sqlite3 reads them) copied before each
apply."""

from __future__ import annotations

import os
import sqlite3

import pytest

from kpatch.containers.kdb import write_kdb

from .conftest import (
    FakePatcher, db_rows as rows, fake_is_patched, fixture, integrity, invoke, listing, python_cli, read)

SOURCES = [
    ("miopen_like.cl.o", " -DMLO_FILTER_SIZE0=3 -mcpu=gfx1030", "miopen_like.cl.gfx1030.v4.hsaco"),
    ("asm_kernels.s.o", " -mcumode -mcpu=gfx1030", "asm_kernels.s.gfx1030.v4.hsaco"),
    ("mathops.cpp.o", " -O3 -mcpu=gfx1030", "mathops.hip.gfx1030.v4.hsaco"),
    ("miopen_like.cl.o", " -DMLO_FILTER_SIZE0=3 -mcpu=gfx1030", "asm_kernels.s.gfx1030.v4.hsaco"),
]
ONE_BYTE = ("late.cl.o", " -mcpu=gfx1030", b"\x00", "93b885adfe0da089cdf634904fd59f71", 0)  # MD5 of b"\0"


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


def miopen_adds(path, name: str, args: str = " -mcpu=gfx1030") -> None:
    """A row stored as MIOpen stores it (a one-byte code object, raw)."""
    conn = sqlite3.connect(str(path))
    conn.execute("INSERT OR REPLACE INTO kern_db (kernel_name, kernel_args, kernel_blob, kernel_hash, "
                 "uncompressed_size) VALUES (?, ?, ?, ?, ?);", (name, args, *ONE_BYTE[2:]))
    conn.commit()
    conn.close()


def test_four_applies_then_four_reverts_step_back(tmp_path, cache, monkeypatch):
    out = cache / "gfx1030_18.ukdb"
    write_kdb(str(out), [("keep.cl.o", " -mcpu=gfx1030", b"keep me")], user=True)
    before = []  # the rows before each apply
    for src in sources(tmp_path):
        before.append(rows(out))
        apply_once(monkeypatch, src, cache)
        assert rows(out) != before[-1]
    assert len(before[3]) == len(before[2]) + 1 == 4  # the fourth apply replaced a row, added none
    code, stdout, _, _ = invoke(monkeypatch, ["revert", "--list", str(out)])
    assert code == 0 and f"{out}: 4 backup(s)" in stdout
    for n in (3, 2, 1, 0):
        code, stdout, stderr, exc = invoke(monkeypatch, ["revert", str(out)])
        assert exc is None and code == 0, stderr
        assert rows(out) == before[n], f"revert {4 - n} did not give the DB before apply {n + 1}"
        assert integrity(out) == [("ok",)]
        put_back, removed = (1, 0) if n == 3 else (0, 1)
        assert stdout.startswith(f"reverted {out} to before the apply of ")
        assert f": {put_back} rows put back, {removed} rows that apply added removed, 0 already" in stdout
        assert (f"{n} older backup(s) left" in stdout) if n else ("no backup left" in stdout)
        # the restored backup is consumed; nothing else is left beside the DB
        backups = [f for f in listing(str(cache)) if ".kpatch-backup-" in f]
        assert len(backups) == n and listing(str(cache)) == sorted(["gfx1030_18.ukdb", *backups])
    p = python_cli("revert", str(out))  # the real exit status: main() maps the UsageError
    assert p.returncode == 2 and p.stderr == f"error: {out}: has no kpatch backup left to restore\n"
    assert rows(out) == before[0]


def test_rows_added_after_an_apply_survive_its_revert(tmp_path, cache, monkeypatch):
    out = cache / "gfx1030_18.ukdb"
    src = sources(tmp_path)
    apply_once(monkeypatch, src[0], cache)
    first = rows(out)
    apply_once(monkeypatch, src[3], cache)  # replaces the row apply 1 wrote
    miopen_adds(out, "compiled-after.cl.o")
    code, stdout, _, _ = invoke(monkeypatch, ["revert", "--out-dir", str(cache)])
    assert code == 0
    want = dict(first)
    want[(b"compiled-after.cl.o", b" -mcpu=gfx1030")] = (ONE_BYTE[2], ONE_BYTE[3].encode(), ONE_BYTE[4])
    assert rows(out) == want and f"{out} holds 2 rows" in stdout


def test_a_key_rewritten_after_the_apply_is_kept(tmp_path, cache, monkeypatch):
    """MIOpen stored new code under a key the apply wrote: revert keeps it and says so."""
    out = cache / "gfx1030_18.ukdb"
    src = sources(tmp_path)
    apply_once(monkeypatch, src[0], cache)
    miopen_adds(out, SOURCES[0][0], SOURCES[0][1])
    after = rows(out)
    code, stdout, _, _ = invoke(monkeypatch, ["revert", str(out)])
    assert code == 0 and rows(out) == after
    assert "0 rows put back, 0 rows that apply added removed, 0 already as before, 1 kept" in stdout
    assert f"kept {SOURCES[0][0]} [{SOURCES[0][1].strip()}]: another process wrote it after that apply" in stdout


def _damage_truncate(path):
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])


def _damage_garbage(path):
    open(path, "wb").write(os.urandom(8192))


def _damage_empty(path):
    open(path, "wb").close()


def _damage_page(path):
    """A b-tree page overwritten in the middle: SQLite opens it, integrity_check fails."""
    data = bytearray(open(path, "rb").read())
    page = int.from_bytes(data[16:18], "big") or 65536
    for p in range(1, len(data) // page):
        data[p * page + 8: p * page + 200] = b"\xa5" * 192
    open(path, "wb").write(bytes(data))


def _damage_blob(path):
    """A saved row whose blob no longer matches its MD5."""
    conn = sqlite3.connect(path)
    conn.execute("UPDATE kern_db SET kernel_blob = x'00', uncompressed_size = 0;")
    conn.commit()
    conn.close()


def _damage_schema(path):
    """kpatch's record dropped: a plain kernel DB is not a kpatch backup."""
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE kpatch_written;")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("damage, reason", [
    (_damage_truncate, "is (damaged|not a usable backup)"),
    (_damage_garbage, "is not a usable backup: not an SQLite database"),
    (_damage_empty, "is not a usable backup: .*empty file"),
    (_damage_page, "is (damaged \\(SQLite integrity_check|not a usable backup)"),
    (_damage_blob, "row .* is damaged: MD5 mismatch"),
    (_damage_schema, "is not a kpatch backup of this version \\(table kpatch_written missing\\)"),
])
def test_a_damaged_backup_is_refused_and_nothing_changes(tmp_path, cache, monkeypatch, damage, reason):
    import re

    out = cache / "gfx1030_18.ukdb"
    write_kdb(str(out), [(SOURCES[0][0], SOURCES[0][1], b"the row before")], user=True)
    apply_once(monkeypatch, sources(tmp_path)[0], cache)
    backup = next(str(cache / f) for f in listing(str(cache)) if ".kpatch-backup-" in f)
    damage(backup)
    after, files = rows(out), listing(str(cache))
    p = python_cli("revert", str(out))
    assert p.returncode == 1, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {backup}: ") and "Traceback" not in p.stderr
    assert re.search(reason, lines[0]), lines[0]
    assert rows(out) == after and listing(str(cache)) == files  # nothing restored, nothing consumed


def test_an_old_absent_marker_is_refused(cache):
    out = cache / "gfx1030_18.ukdb"
    write_kdb(str(out), [("keep.cl.o", " -mcpu=gfx1030", b"keep me")], user=True)
    marker = cache / "gfx1030_18.ukdb.kpatch-backup-20250101T000000000000Z.absent"
    marker.write_bytes(b"")
    p = python_cli("revert", str(out))
    assert p.returncode == 1 and p.stderr.startswith(f"error: {marker}: is a marker written by an older kpatch")
    assert marker.exists() and len(rows(out)) == 1


def test_revert_refuses_a_symlinked_db(tmp_path, cache, monkeypatch):
    out = cache / "gfx1030_18.ukdb"
    apply_once(monkeypatch, sources(tmp_path)[0], cache)
    real = tmp_path / "elsewhere.ukdb"
    os.rename(out, real)
    os.symlink(real, out)
    before = open(real, "rb").read()
    p = python_cli("revert", str(out))
    assert p.returncode == 2 and "is a symbolic link" in p.stderr and len(p.stderr.splitlines()) == 1
    assert open(real, "rb").read() == before


def test_help_says_it_steps_back():
    from click.testing import CliRunner

    from kpatch.cli.main import cli

    text = " ".join(CliRunner().invoke(cli, ["revert", "--help"]).output.split())
    assert "Step the user kernel DB DB back by one `kpatch apply`" in text
    assert "a second revert steps back the apply before that" in text
    assert "Rows MIOpen added after the apply are never touched" in text
    assert "a damaged one is refused and nothing changes" in text
