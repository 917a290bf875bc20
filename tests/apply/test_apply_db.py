"""`kpatch apply --db` orchestration, with the rules engine replaced by test
doubles (conftest.FakePatcher) on the real sample DB.

Expected DB contents come from MIOpen's exact lookup (the SQL text with the
values pasted in, bzip2, MD5 and size checked: conftest.miopen_select), from
sqlite3 reading rows directly, and from LLVM's bundler; never from kpatch's
own DB reader.
"""

from __future__ import annotations

import bz2
import json
import os
import shutil
import sqlite3
import struct
import threading
import time

import pytest

import kpatch.apply.db as apply_db_module
import kpatch.apply.userdb as userdb
from kpatch.containers.kdb import KernelDB, write_kdb
from kpatch.data import sample_db_path
from kpatch.errors import UsageError
from kpatch.apply.db import apply_to_db, output_args
from kpatch.apply.userdb import list_backups, restore_latest

from .conftest import (
    BUNDLER15, FakePatcher, fake_is_patched, invoke, listing, marked, miopen_select, no_provenance, python_cli, read,
    run, sha)

GFX1030 = "hipv4-amdgcn-amd-amdhsa--gfx1030"


def raw_rows(path: str) -> list[tuple]:
    """Every row as stored, read with sqlite3 alone."""
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return conn.execute("SELECT id, kernel_name, kernel_args, kernel_blob, kernel_hash, uncompressed_size "
                            "FROM kern_db ORDER BY id").fetchall()
    finally:
        conn.close()


def sample_items() -> list[tuple[str, str, bytes]]:
    """(name, args, code) of the sample DB, decoded with sqlite3 + bz2 (not kpatch)."""
    out = []
    for _, name, args, blob, md5, size in raw_rows(sample_db_path()):
        out.append((name, args, bz2.decompress(blob) if size else bytes(blob)))
    return out


@pytest.fixture
def cache(tmp_path):
    d = tmp_path / "cache" / "3.2.0.abc"
    d.mkdir(parents=True)
    return d


def apply(sources, output, **kw):
    args = dict(mode="override", rule_sets=["gfx1010-hazards"], patch_fn=FakePatcher(), is_patched=fake_is_patched)
    args.update(kw)
    return apply_to_db([str(s) for s in sources], str(output), **args)


def expected_patched(code: bytes, tmp_path) -> bytes:
    """What override mode with FakePatcher must store for one sample blob:
    the code object marked; a bundle rebuilt by LLVM's bundler with its
    gfx1030 entry marked (the same tool and options that made the sample)."""
    if code.startswith(b"\x7fELF"):
        return marked(code)
    src = tmp_path / "orig.bundle"
    src.write_bytes(code)
    run(BUNDLER15, "--unbundle", "--type=o", f"--input={src}", f"--targets={GFX1030}", f"--output={tmp_path / 'e.co'}")
    (tmp_path / "m.co").write_bytes(marked(read(str(tmp_path / "e.co"))))
    run(BUNDLER15, "--type=o", f"--targets=host-x86_64-unknown-linux,{GFX1030}", "--input=/dev/null",
        f"--input={tmp_path / 'm.co'}", f"--output={tmp_path / 'new.bundle'}")
    return read(str(tmp_path / "new.bundle"))


@pytest.mark.parametrize("args, mode, want", [
    (" -DX=1 -mcpu=gfx1030", "override", " -DX=1 -mcpu=gfx1030"),
    (" -DX=1 -mcpu=gfx1030", "native", " -DX=1 -mcpu=gfx1010"),
    ("-mcpu=gfx1030", "native", "-mcpu=gfx1010"),
    ("-Wa,-defsym,X=1 -mcumode\t-mcpu=gfx1030", "native", "-Wa,-defsym,X=1 -mcumode\t-mcpu=gfx1010"),
    (" -mcpu=gfx1010", "relabel", " -mcpu=gfx1030"),
    (" -mcpu=gfx10300", "override", None),
    (" -xmcpu=gfx1030", "override", None),
    (" -mcpu=gfx1030 -O3", "native", None),
    (" -mcpu=gfx1030", "relabel", None),
    (" -mcpu=gfx1010", "native", None),
    (" -mcpu=gfx1030:xnack-", "override", None),
    # a key that differs only by a trailing newline is another key: not one the mode handles
    (" -mcpu=gfx1030\n", "override", None),
    (" -mcpu=gfx1030\n", "native", None),
])
def test_output_args(args, mode, want):
    assert output_args(args, mode) == want


@pytest.mark.llvm
def test_override_writes_what_miopen_loads(tmp_path, cache):
    out = cache / "gfx1030_18.ukdb"
    patcher = FakePatcher()
    r = apply([sample_db_path()], out, patch_fn=patcher)
    items = sample_items()
    assert r.written == len(items) and r.created and r.backup
    assert {m for m, _ in patcher.calls} == {"override"} and patcher.calls[0][1] == ["gfx1010-hazards"]
    for name, args, code in items:
        assert miopen_select(str(out), name, args) == expected_patched(code, tmp_path)
    assert len(raw_rows(str(out))) == len(items)
    # MIOpen keeps user DBs in WAL mode; nothing is left beside the DB but the backup
    conn = sqlite3.connect(str(out))
    assert conn.execute("PRAGMA journal_mode;").fetchone()[0] == "wal"
    conn.close()
    assert listing(str(cache)) == sorted(["gfx1030_18.ukdb", os.path.basename(r.backup)])


def test_only_changed_entries_are_written(cache):
    out = cache / "gfx1030_18.ukdb"
    patcher = FakePatcher(skip=("asm_scale_loop", "asm_lds_swap"))
    r = apply([sample_db_path()], out, patch_fn=patcher)
    keys = {(n, a) for _, n, a, *_ in raw_rows(str(out))}
    want = {(n, a) for n, a, _ in sample_items() if n != "asm_kernels.s.o"}
    assert keys == want and r.written == len(want)
    statuses = {(e.kernel_name, e.kernel_args): e.status for e in r.entries}
    assert [s for (n, _), s in statuses.items() if n == "asm_kernels.s.o"] == ["unchanged", "unchanged"]


def test_override_writes_an_object_with_refused_kernels_and_says_so(cache):
    # override mode: the refused kernel's code is the original's (what MIOpen runs anyway)
    out = cache / "gfx1030_18.ukdb"
    r = apply([sample_db_path()], out, patch_fn=FakePatcher(refuse=("MIOpenSumSq",)))
    hit = [e for e in r.entries if any(k.name == "MIOpenSumSq" for k in e.kernels)]
    assert hit and all(e.status == "changed" for e in hit)
    for e in hit:
        n = len(e.kernels)
        assert f"written with 1 of {n} kernels unchanged" in e.note and "MIOpenSumSq (fake refusal)" in e.note
    keys = {(n, a) for _, n, a, *_ in raw_rows(str(out))}
    assert {(e.kernel_name, e.output_args) for e in hit} <= keys


def test_native_never_writes_an_object_with_a_refused_kernel(cache):
    out = cache / "gfx1010_18.ukdb"
    r = apply([sample_db_path()], out, mode="native", patch_fn=FakePatcher(refuse=("MIOpenSumSq",)))
    hit = [e for e in r.entries if any(k.name == "MIOpenSumSq" for k in e.kernels)]
    assert hit and all(e.status == "unchanged" for e in hit)
    assert all(k.status == "refused" for e in hit for k in e.kernels)
    others = [k for e in hit for k in e.kernels if k.name != "MIOpenSumSq"]
    assert others and all("MIOpenSumSq" in k.reason for k in others)
    keys = {(n, a) for _, n, a, *_ in raw_rows(str(out))}
    assert not {(e.kernel_name, e.output_args) for e in hit} & keys
    assert keys  # the other entries were written


def test_merge_keeps_unrelated_entries_byte_for_byte(cache):
    out = cache / "gfx1030_18.ukdb"
    (name, args, _), *_ = sample_items()
    write_kdb(str(out), [("MIOpenUnrelated.cl.o", " -DA=1 -mcpu=gfx1030", b"\x01" * 5000),
                         (name, args, b"stale kernel"),
                         ("other.s.o", "-mcumode -mcpu=gfx1030", b"\x7fELF unrelated")], user=True)
    before = {(r[1], r[2]): r for r in raw_rows(str(out))}
    apply([sample_db_path()], out)
    after = {(r[1], r[2]): r for r in raw_rows(str(out))}
    for key in (("MIOpenUnrelated.cl.o", " -DA=1 -mcpu=gfx1030"), ("other.s.o", "-mcumode -mcpu=gfx1030")):
        assert after[key] == before[key]  # same id, blob, hash and size
    assert after[(name, args)][3] != before[(name, args)][3]
    assert len(after) == 2 + len(sample_items())


def test_second_run_changes_nothing(cache):
    out = cache / "gfx1030_18.ukdb"
    apply([sample_db_path()], out)
    digest, files = sha(str(out)), listing(str(cache))
    for is_patched in (fake_is_patched, no_provenance):  # provenance, then byte comparison alone
        r = apply([sample_db_path()], out, is_patched=is_patched)
        assert r.written == 0 and r.backup is None
        assert {e.status for e in r.entries} == {"unchanged"}
        assert all(k.status == "untouched" for e in r.entries for k in e.kernels)
        assert sha(str(out)) == digest and listing(str(cache)) == files


def test_user_db_patched_in_place(cache):
    out = cache / "gfx1030_18.ukdb"
    write_kdb(str(out), sample_items(), user=True)  # MIOpen's own run-time cache
    patcher = FakePatcher()
    r = apply([out], out, patch_fn=patcher)
    assert r.written == len(sample_items()) and r.backup
    for name, args, code in sample_items():
        got = miopen_select(str(out), name, args)
        assert got != code and (not got.startswith(b"\x7fELF") or got == marked(code))
    digest = sha(str(out))
    again = FakePatcher()
    r2 = apply([out], out, patch_fn=again)
    assert r2.written == 0 and again.calls == []  # recognised by provenance: not even patched again
    assert all(k.reason.startswith("already patched") for e in r2.entries for k in e.kernels)
    assert sha(str(out)) == digest


def rows_by_key(path: str) -> dict[tuple[bytes, bytes], tuple]:
    """{(kernel_name, kernel_args): (blob, hash, size, key storage classes)} as
    stored, read with sqlite3 alone (through the WAL, as MIOpen reads)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.text_factory = bytes
    try:
        return {(n, a): (b, h, z, tn, ta) for n, a, b, h, z, tn, ta in conn.execute(
            "SELECT kernel_name, kernel_args, kernel_blob, kernel_hash, uncompressed_size, typeof(kernel_name), "
            "typeof(kernel_args) FROM kern_db")}
    finally:
        conn.close()


def test_backup_then_revert(cache):
    out = cache / "gfx1030_18.ukdb"
    write_kdb(str(out), [("keep.cl.o", " -mcpu=gfx1030", b"keep me")] + sample_items()[:2], user=True)
    original = rows_by_key(str(out))
    r = apply([sample_db_path()], out)
    assert rows_by_key(str(out)) != original
    assert [b.path for b in list_backups(str(out))] == [r.backup]
    done = restore_latest(str(out))
    assert done.backup.path == r.backup and not os.path.exists(r.backup)
    assert rows_by_key(str(out)) == original  # every row byte for byte, the untouched one included
    assert len(done.restored) == 2 and len(done.removed) == len(sample_items()) - 2 and not done.kept


def test_revert_of_a_created_db_removes_the_rows_apply_added(cache):
    out = cache / "gfx1030_18.ukdb"
    apply([sample_db_path()], out)
    done = restore_latest(str(out))
    # the file stays (MIOpen may have it open), empty as MIOpen would create it
    assert rows_by_key(str(out)) == {} and not done.db_existed and len(done.removed) == len(sample_items())
    assert list_backups(str(out)) == []


def test_dry_run_writes_nothing(tmp_path, cache):
    out = cache / "gfx1030_18.ukdb"
    write_kdb(str(out), [("keep.cl.o", " -mcpu=gfx1030", b"keep me")], user=True)
    digest, files = sha(str(out)), listing(str(cache))
    r = apply([sample_db_path()], out, dry_run=True)
    assert r.dry_run and r.written == 0 and r.backup is None
    assert {e.status for e in r.entries} == {"changed"}
    assert sha(str(out)) == digest and listing(str(cache)) == files
    missing = tmp_path / "not-yet" / "gfx1030_18.ukdb"
    apply([sample_db_path()], missing, dry_run=True)
    assert not missing.parent.exists()


class Crash(Exception):
    pass


@pytest.mark.parametrize("error", [Crash, KeyboardInterrupt])
def test_crash_while_writing_leaves_the_db_intact(cache, monkeypatch, error):
    out = cache / "gfx1030_18.ukdb"
    write_kdb(str(out), [("keep.cl.o", " -mcpu=gfx1030", b"keep me")], user=True)
    digest, files = sha(str(out)), listing(str(cache))
    real_rows = userdb.StagedRows.rows

    def rows_then_crash(self):
        for i, row in enumerate(real_rows(self)):
            if i == 2:
                raise error()
            yield row

    monkeypatch.setattr(userdb.StagedRows, "rows", rows_then_crash)
    with pytest.raises(error):
        apply([sample_db_path()], out)
    assert sha(str(out)) == digest and listing(str(cache)) == files  # no temp, staging or backup file left
    assert raw_rows(str(out))[0][1] == "keep.cl.o"


def test_crash_after_the_backup_leaves_the_db_intact(cache, monkeypatch):
    """A failure while the rows go into the DB (the backup is already
    written) rolls the transaction back and removes the backup."""
    out = cache / "gfx1030_18.ukdb"
    write_kdb(str(out), [("keep.cl.o", " -mcpu=gfx1030", b"keep me")], user=True)
    original, files = rows_by_key(str(out)), listing(str(cache))
    real_put = KernelDB.put_row
    calls = []

    def put_then_crash(self, *a):
        calls.append(list_backups(str(out)))
        if len(calls) == 3:
            raise Crash()
        return real_put(self, *a)

    monkeypatch.setattr(KernelDB, "put_row", put_then_crash)
    with pytest.raises(Crash):
        apply([sample_db_path()], out)
    assert len(calls[0]) == 1  # the backup was in place before the first row went in
    assert rows_by_key(str(out)) == original and listing(str(cache)) == files


def test_a_reader_holding_the_db_does_not_stop_apply(cache):
    """MIOpen keeps its DB open: apply writes beside it, and the open
    connection sees the new rows at its next read."""
    out = cache / "gfx1030_18.ukdb"
    write_kdb(str(out), [("keep.cl.o", " -mcpu=gfx1030", b"keep me")], user=True)
    miopen = sqlite3.connect(str(out))  # stands in for a running MIOpen holding the DB
    miopen.execute("PRAGMA journal_mode=WAL;")
    try:
        assert miopen.execute("SELECT COUNT(*) FROM kern_db").fetchone()[0] == 1
        r = apply([sample_db_path()], out)
        assert r.written == len(sample_items())
        assert miopen.execute("SELECT COUNT(*) FROM kern_db").fetchone()[0] == 1 + len(sample_items())
        miopen.execute("INSERT INTO kern_db (kernel_name, kernel_args, kernel_blob, kernel_hash, uncompressed_size)"
                       " VALUES ('late.cl.o', ' -mcpu=gfx1030', x'00', '93b885adfe0da089cdf634904fd59f71', 0);")
        miopen.commit()
    finally:
        miopen.close()
    assert (b"late.cl.o", b" -mcpu=gfx1030") in rows_by_key(str(out))
    assert PRAGMA_ok(str(out))


def PRAGMA_ok(path: str) -> bool:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA integrity_check;").fetchall() == [("ok",)]
    finally:
        conn.close()


def test_apply_waits_for_a_writer_then_writes(cache):
    """A MIOpen write in progress (an open write transaction) makes apply
    wait, not fail; it writes once the writer commits."""
    out = cache / "gfx1030_18.ukdb"
    write_kdb(str(out), [("keep.cl.o", " -mcpu=gfx1030", b"keep me")], user=True)
    miopen = sqlite3.connect(str(out), isolation_level=None, check_same_thread=False)
    miopen.execute("PRAGMA journal_mode=WAL;")
    miopen.execute("BEGIN IMMEDIATE;")
    miopen.execute("INSERT INTO kern_db (kernel_name, kernel_args, kernel_blob, kernel_hash, uncompressed_size)"
                   " VALUES ('during.cl.o', ' -mcpu=gfx1030', x'00', '93b885adfe0da089cdf634904fd59f71', 0);")
    timer = threading.Timer(0.5, lambda: miopen.execute("COMMIT;"))
    timer.start()
    try:
        start = time.monotonic()
        r = apply([sample_db_path()], out)
        waited = time.monotonic() - start
    finally:
        timer.join()
        miopen.close()
    assert r.written == len(sample_items()) and waited >= 0.4
    rows = rows_by_key(str(out))
    assert (b"during.cl.o", b" -mcpu=gfx1030") in rows and (b"keep.cl.o", b" -mcpu=gfx1030") in rows


def test_a_writer_that_never_lets_go_is_reported_and_nothing_changes(cache, monkeypatch):
    monkeypatch.setattr(userdb, "BUSY_TIMEOUT", 0.3)
    out = cache / "gfx1030_18.ukdb"
    write_kdb(str(out), [("keep.cl.o", " -mcpu=gfx1030", b"keep me")], user=True)
    original = rows_by_key(str(out))
    miopen = sqlite3.connect(str(out), isolation_level=None)
    miopen.execute("PRAGMA journal_mode=WAL;")
    miopen.execute("BEGIN IMMEDIATE;")
    files = listing(str(cache))
    try:
        with pytest.raises(UsageError, match="kept the DB locked for more than 0.3 s; nothing was changed"):
            apply([sample_db_path()], out)
        assert listing(str(cache)) == files  # no staging file, no backup
    finally:
        miopen.execute("ROLLBACK;")
        miopen.close()
    assert rows_by_key(str(out)) == original


def test_a_row_another_process_wrote_meanwhile_is_kept(cache, monkeypatch):
    """Between kpatch reading the user DB and writing it, MIOpen stores a
    row under a key kpatch is patching: MIOpen's row stays, the entry is
    reported unchanged with the reason, the other rows are written."""
    out = cache / "gfx1030_18.ukdb"
    items = sample_items()
    write_kdb(str(out), [("keep.cl.o", " -mcpu=gfx1030", b"keep me")], user=True)
    name, args, _ = items[0]
    real_commit = userdb.commit_rows

    def miopen_writes_first(db_path, staged, **kw):
        conn = sqlite3.connect(db_path)
        conn.execute("INSERT OR REPLACE INTO kern_db (kernel_name, kernel_args, kernel_blob, kernel_hash, "
                     "uncompressed_size) VALUES (?, ?, x'00', '93b885adfe0da089cdf634904fd59f71', 0);", (name, args))
        conn.commit()
        conn.close()
        return real_commit(db_path, staged, **kw)

    monkeypatch.setattr(apply_db_module, "commit_rows", miopen_writes_first)
    r = apply([sample_db_path()], out)
    assert r.written == len(items) - 1
    assert rows_by_key(str(out))[(name.encode(), args.encode())][:3] == (b"\x00", b"93b885adfe0da089cdf634904fd59f71", 0)
    assert [(e.kernel_name, e.status) for e in r.conflicts] == [(name, "unchanged")]
    assert "another process added this row" in r.conflicts[0].reason
    # revert leaves MIOpen's row too: the backup does not list that key
    restore_latest(str(out))
    assert set(rows_by_key(str(out))) == {(b"keep.cl.o", b" -mcpu=gfx1030"), (name.encode(), args.encode())}


def test_never_writes_into_system_directories(tmp_path):
    target = "/usr/lib/kpatch-test-never/gfx1030_18.ukdb"
    with pytest.raises(UsageError, match="system directory"):
        apply([sample_db_path()], target)
    assert not os.path.exists(os.path.dirname(target))
    sysdir = tmp_path / "share" / "miopen" / "db"
    sysdir.mkdir(parents=True)
    shutil.copy(sample_db_path(), sysdir / "gfx1030.kdb")
    with pytest.raises(UsageError, match="system kernel DB"):
        apply([sysdir / "gfx1030.kdb"], sysdir / "gfx1030_18.ukdb")
    assert listing(str(sysdir)) == ["gfx1030.kdb"]


@pytest.mark.llvm
def test_native_rewrites_keys_and_bundle_ids(cache):
    out = cache / "gfx1010_18.ukdb"
    apply([sample_db_path()], out, mode="native")
    rows = raw_rows(str(out))
    assert all(a.endswith(" -mcpu=gfx1010") for _, _, a, *_ in rows)
    for name, args, code in sample_items():
        assert miopen_select(str(out), name, args) is None  # the gfx1030 key is not there
        got = miopen_select(str(out), name, args[: -len("gfx1030")] + "gfx1010")
        if got.startswith(b"\x7fELF"):
            assert struct.unpack_from("<I", got, 48)[0] == 0x233
        else:
            path = cache / "b.bundle"
            path.write_bytes(got)
            ids = sorted(run(BUNDLER15, "--list", "--type=o", f"--input={path}").stdout.split())
            assert ids == ["hipv4-amdgcn-amd-amdhsa--gfx1010:xnack-", "host-x86_64-unknown-linux"]
            path.unlink()


def test_wrong_label_from_the_patcher_is_refused(cache):
    """A patch function that labels gfx1010 code in override mode would make
    the HSA loader reject it under the override: nothing is written."""

    def relabels_wrongly(data, *, mode, rule_sets):
        return FakePatcher()(data, mode="native", rule_sets=rule_sets)

    out = cache / "gfx1030_18.ukdb"
    r = apply([sample_db_path()], out, patch_fn=relabels_wrongly)
    assert r.written == 0 and not out.exists()
    kernels = [k for e in r.entries for k in e.kernels]
    assert kernels and all(k.status == "refused" and "labelled gfx1010" in k.reason for k in kernels)


def test_bz2_system_db(tmp_path, cache):
    src = tmp_path / "gfx1030.kdb.bz2"
    src.write_bytes(bz2.compress(read(sample_db_path())))
    out = cache / "gfx1030_18.ukdb"
    r = apply([src], out)
    assert r.written == len(sample_items()) and not r.source_errors
    assert all(e.uri.startswith(f"kdb://{src}?") for e in r.entries)


def corrupt_copy(tmp_path) -> str:
    path = str(tmp_path / "corrupt.kdb")
    shutil.copy(sample_db_path(), path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE kern_db SET kernel_hash = '00000000000000000000000000000000' WHERE id = 2")
    conn.commit()
    conn.close()
    return path


def test_a_bad_entry_is_an_error_and_the_rest_goes_on(tmp_path, cache):
    out = cache / "gfx1030_18.ukdb"
    r = apply([corrupt_copy(tmp_path), tmp_path / "missing.kdb"], out)
    errors = [e for e in r.entries if e.status == "error"]
    assert len(errors) == 1 and "MD5 mismatch" in errors[0].reason
    assert r.written == len(sample_items()) - 1
    assert [s for s, _ in r.source_errors] == [str(tmp_path / "missing.kdb")]


def test_cli_lines_json_and_exit_status(tmp_path, cache, monkeypatch):
    args = ["apply", "--db", corrupt_copy(tmp_path), "--mode", "override", "--cu", "18", "--out-dir", str(cache)]
    code, stdout, stderr, exc = invoke(monkeypatch, args, patcher=FakePatcher(refuse=("vec_add",)),
                                       is_patched=fake_is_patched)
    assert exc is None and code == 1
    assert len(stderr.strip().splitlines()) == 1 and "MD5 mismatch" in stderr and "kdb://" in stderr
    lines = stdout.splitlines()
    assert lines[0].startswith("mode override (--mode); CU 18 (--cu)")
    assert lines[1].startswith(f"output {cache / 'gfx1030_18.ukdb'}")
    assert any(line.startswith("refused   kdb://") and line.endswith("vec_add: fake refusal") for line in lines)
    n_patched = sum(line.startswith("patched   kdb://") for line in lines)
    assert "6 entries: 5 changed, 0 unchanged, 0 skipped, 1 errors" in stdout
    assert f"kernels: {n_patched} patched, 1 refused, 0 untouched" in stdout
    code, stdout, stderr, exc = invoke(monkeypatch, args + ["--json"], patcher=FakePatcher(),
                                       is_patched=fake_is_patched)
    doc = json.loads(stdout)
    assert code == 1 and doc["written"] == 0 and doc["summary"]["unchanged"] == 5
    assert doc["summary"]["error"] == 1 and len(doc["errors"]) == 1
    assert doc["output"] == str(cache / "gfx1030_18.ukdb")


def test_cli_revert_and_list(cache, monkeypatch):
    out = cache / "gfx1030_18.ukdb"
    write_kdb(str(out), [("keep.cl.o", " -mcpu=gfx1030", b"keep me")], user=True)
    original = rows_by_key(str(out))
    code, *_ = invoke(monkeypatch, ["apply", "--db", sample_db_path(), "--mode", "override", "--cu", "18",
                                    "--out-dir", str(cache)], patcher=FakePatcher(), is_patched=fake_is_patched)
    assert code == 0 and rows_by_key(str(out)) != original
    code, stdout, _, _ = invoke(monkeypatch, ["revert", "--list", "--out-dir", str(cache)])
    assert code == 0 and f"{out}: 1 backup(s)" in stdout
    code, stdout, _, _ = invoke(monkeypatch, ["revert", str(out)])
    n = len(sample_items())
    assert code == 0 and stdout.startswith(f"reverted {out} to before the apply of ")
    assert f": 0 rows put back, {n} rows that apply added removed, 0 already as before, 0 kept" in stdout
    assert f"{out} holds 1 rows" in stdout
    assert rows_by_key(str(out)) == original


def test_cli_usage_errors(cache, monkeypatch):
    code, _, stderr, exc = invoke(monkeypatch, ["apply", "--mode", "override"])
    assert code == 2
    _, _, _, exc = invoke(monkeypatch, ["apply", "--db", sample_db_path(), "--mode", "relabel", "--rules", "x",
                                        "--cu", "18", "--out-dir", str(cache)])
    assert isinstance(exc, UsageError) and "--rules" in exc.reason


def test_cli_report_lists_every_changed_code_object(tmp_path, cache, monkeypatch):
    from html import escape
    from urllib.parse import quote

    report = tmp_path / "report.html"
    code, stdout, stderr, exc = invoke(monkeypatch, ["apply", "--db", sample_db_path(), "--mode", "override",
                                                     "--cu", "18", "--out-dir", str(cache), "--report", str(report),
                                                     "--dry-run"], patcher=FakePatcher(), is_patched=fake_is_patched)
    assert exc is None and code == 0, stderr
    html = report.read_text()
    src = f"kdb://{sample_db_path()}"
    for name, args, _ in sample_items():
        assert escape(f"{src}?name={quote(name, safe='')}&args={quote(args, safe='')}") in html
    assert f"report {report} ({len(sample_items())} changed code objects, 0 kernels refused)" in stdout
    assert "#entry=hipv4-amdgcn-amd-amdhsa--gfx1030" in html  # the bundle's code object, named by its entry
    assert not (cache / "gfx1030_18.ukdb").exists()


@pytest.mark.parametrize("link", ["", "-wal", "-shm"])
def test_never_writes_through_a_symlink(tmp_path, cache, link):
    """The user DB (or one of SQLite's side files) is a symbolic link to
    another file: apply refuses, and the file it names is not changed."""
    out = cache / "gfx1030_18.ukdb"
    other = tmp_path / "other.sqlite"
    write_kdb(str(other), [("theirs.cl.o", " -mcpu=gfx1030", b"not yours")], user=True)
    if link:
        write_kdb(str(out), [("keep.cl.o", " -mcpu=gfx1030", b"keep me")], user=True)
    os.symlink(other, str(out) + link)
    digest, files = sha(str(other)), listing(str(cache))
    with pytest.raises(UsageError, match="is a symbolic link .*never writes through a link"):
        apply([sample_db_path()], out)
    assert sha(str(other)) == digest and listing(str(cache)) == files
    p = python_cli("apply", "--db", sample_db_path(), "--mode", "override", "--cu", "18", "--out-dir", str(cache))
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and "symbolic link" in p.stderr
    assert sha(str(other)) == digest and listing(str(cache)) == files
