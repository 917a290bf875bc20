"""Writing MIOpen's user kernel DB (``.ukdb``) safely: merge, backup, revert.

MIOpen opens user DBs in SQLite's WAL mode, so committed rows may still sit
in ``<db>-wal`` next to the file.  Replacing the main file under a WAL that
belongs to the old file would make SQLite replay old pages onto the new
file, so every change here goes:

1. stage: changed rows (already encoded as MIOpen stores them) are collected
   in a staging DB in the same directory (:class:`StagedRows`);
2. quiesce: the WAL of the existing DB is checkpointed into the main file
   (``PRAGMA wal_checkpoint(TRUNCATE)``); if another process (MIOpen) holds
   the DB, nothing is changed and the user is told;
3. backup: the existing file is copied to ``<db>.kpatch-backup-<UTC stamp>``
   (when there was no DB, an empty ``...<stamp>.absent`` marker records that);
4. build: the existing file is copied to a temporary file in the same
   directory, the staged rows are stored in it with MIOpen's
   ``INSERT OR REPLACE`` (every other row stays byte for byte), and its WAL
   is checkpointed and closed;
5. replace: after checking that the DB did not change meanwhile, the
   temporary file is fsynced and renamed over the DB (``os.replace``).

A failure or Ctrl-C at any point before 5 removes the temporary, staging and
backup files and leaves the DB as it was.

:func:`restore_latest` (``kpatch revert``) steps back one apply: it moves
the newest backup over the DB (one atomic rename), so each revert restores
the backup before the last one restored, back to the DB as it was before
the first apply.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterator
from urllib.parse import quote

from kpatch.containers.kdb import INSERT_SQL, SCHEMA_SQL, encode_blob
from kpatch.errors import UsageError

BACKUP_TAG = ".kpatch-backup-"
ABSENT_SUFFIX = ".absent"
_SIDE_FILES = ("-wal", "-shm", "-journal")


def _remove(*paths: str) -> None:
    for p in paths:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


def _fsync_file(path: str) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _connect(path: str, *, mode: str | None = None) -> sqlite3.Connection:
    """A connection that never waits for locks; ``mode='rw'`` refuses to create the file."""
    if mode is None:
        conn = sqlite3.connect(path, isolation_level=None, timeout=0)
    else:
        conn = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode={mode}", uri=True,
                               isolation_level=None, timeout=0)
    conn.text_factory = bytes
    return conn


def _temp_path(directory: str, base: str, kind: str) -> str:
    fd, path = tempfile.mkstemp(prefix=f".{base}.kpatch-{kind}-", suffix=".tmp", dir=directory)
    os.close(fd)
    _remove(path)  # SQLite creates it; mkstemp only picked a free name
    return path


# --- staging ---------------------------------------------------------------------


class StagedRows:
    """Rows waiting to go into a user DB, stored encoded (bzip2 blob, MD5,
    size) in a temporary SQLite file in ``directory``.  A later row with the
    same key replaces an earlier one, as MIOpen's INSERT OR REPLACE would."""

    def __init__(self, directory: str, base: str = "ukdb"):
        self.path = _temp_path(directory, base, "staging")
        self._conn = _connect(self.path)
        self._conn.execute("PRAGMA journal_mode=OFF;")
        self._conn.execute("PRAGMA synchronous=OFF;")
        self._conn.executescript(SCHEMA_SQL)
        self._conn.execute("BEGIN;")
        self._count = 0

    def add(self, kernel_name: str, kernel_args: str, code: bytes) -> None:
        blob, md5, size = encode_blob(code)
        self._conn.execute(INSERT_SQL, (kernel_name, kernel_args, blob, md5, size))

    def __len__(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM kern_db;").fetchone()[0])

    def rows(self) -> Iterator[tuple[str, str, bytes, str, int]]:
        cur = self._conn.execute(
            "SELECT kernel_name, kernel_args, kernel_blob, kernel_hash, uncompressed_size FROM kern_db ORDER BY id;")
        for name, args, blob, md5, size in cur:
            yield name.decode(), args.decode(), blob, md5.decode(), size

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        _remove(self.path, *(self.path + s for s in _SIDE_FILES))

    def __enter__(self) -> "StagedRows":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- quiescing, backups ------------------------------------------------------------


def quiesce(db_path: str) -> tuple[int, int]:
    """Make sure no other process has ``db_path`` open, fold its WAL into the
    main file and close it, so the file alone holds the whole DB.  Returns
    the file's (size, mtime_ns) afterwards.  UsageError when another process
    holds the DB (MIOpen running): every open SQLite connection keeps a
    shared lock, so an exclusive lock is only granted when there is none."""
    try:
        conn = _connect(db_path, mode="rw")
    except sqlite3.Error as e:  # pragma: no cover - depends on permissions
        raise UsageError(f"cannot open for writing: {e}", db_path) from None
    try:
        conn.execute("PRAGMA locking_mode=EXCLUSIVE;")
        conn.execute("BEGIN EXCLUSIVE;")
        conn.execute("COMMIT;")
        busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE);").fetchone()[0]
    except sqlite3.Error as e:
        raise UsageError(f"is in use by another process (is MIOpen running?): {e}; nothing was changed",
                         db_path) from None
    finally:
        conn.close()
    wal = db_path + "-wal"
    if busy or (os.path.exists(wal) and os.path.getsize(wal) > 0):
        raise UsageError("is in use by another process (is MIOpen running?); nothing was changed", db_path)
    st = os.stat(db_path)
    return st.st_size, st.st_mtime_ns


def _stamp(now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    return now.strftime("%Y%m%dT%H%M%S%fZ")


@dataclass(frozen=True)
class Backup:
    """One backup of a user DB; ``absent`` marks "there was no DB"."""

    path: str
    db_path: str
    stamp: str
    absent: bool

    @property
    def when(self) -> str:
        """The stamp as ``YYYY-MM-DD HH:MM:SS UTC``."""
        s = self.stamp
        return f"{s[0:4]}-{s[4:6]}-{s[6:8]} {s[9:11]}:{s[11:13]}:{s[13:15]} UTC" if len(s) >= 15 else s


def list_backups(db_path: str) -> list[Backup]:
    """Backups of ``db_path``, oldest first."""
    directory = os.path.dirname(os.path.abspath(db_path))
    prefix = os.path.basename(db_path) + BACKUP_TAG
    out = []
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    for n in names:
        if not n.startswith(prefix) or n.endswith(".tmp"):
            continue
        stamp = n[len(prefix):]
        absent = stamp.endswith(ABSENT_SUFFIX)
        if absent:
            stamp = stamp[: -len(ABSENT_SUFFIX)]
        out.append(Backup(os.path.join(directory, n), os.path.abspath(db_path), stamp, absent))
    return sorted(out, key=lambda b: b.stamp)


def dbs_with_backups(directory: str) -> list[str]:
    """User DBs in ``directory`` that have kpatch backups (whether or not the DB exists now)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted({os.path.join(directory, n.split(BACKUP_TAG, 1)[0]) for n in names if BACKUP_TAG in n
                   and not n.endswith(".tmp")})


def _copy_atomic(src: str, dst: str) -> None:
    """Copy ``src`` to ``dst`` through a temporary file and a rename."""
    directory = os.path.dirname(os.path.abspath(dst))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(dst)}.", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        shutil.copymode(src, tmp)
        _fsync_file(tmp)
        os.replace(tmp, dst)
    except BaseException:
        _remove(tmp)
        raise


def take_backup(db_path: str, *, now: datetime | None = None) -> Backup:
    """Copy the (quiesced) DB to a new backup file, or write the "absent"
    marker when there is no DB."""
    stamp = _stamp(now)
    base = db_path + BACKUP_TAG + stamp
    if os.path.exists(db_path):
        _copy_atomic(db_path, base)
        return Backup(base, os.path.abspath(db_path), stamp, False)
    path = base + ABSENT_SUFFIX
    with open(path, "wb"):
        pass
    return Backup(path, os.path.abspath(db_path), stamp, True)


# --- building and replacing ---------------------------------------------------------


def _build(db_path: str, tmp: str, rows: Iterator[tuple[str, str, bytes, str, int]]) -> int:
    """Write the new DB to ``tmp``: a copy of ``db_path`` (or a new DB) with
    ``rows`` stored; return how many rows were stored."""
    existed = os.path.exists(db_path)
    if existed:
        shutil.copyfile(db_path, tmp)
        shutil.copymode(db_path, tmp)
    conn = _connect(tmp)
    n = 0
    try:
        conn.execute("PRAGMA journal_mode=WAL;")  # as MIOpen keeps user DBs
        if not existed:
            conn.executescript(SCHEMA_SQL)
        conn.execute("BEGIN;")
        for row in rows:
            conn.execute(INSERT_SQL, row)
            n += 1
        conn.execute("COMMIT;")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE);")
    finally:
        conn.close()
    for s in _SIDE_FILES:  # the last close removes them; a leftover empty one is harmless but untidy
        p = tmp + s
        if os.path.exists(p):
            if s == "-wal" and os.path.getsize(p) > 0:
                raise UsageError("SQLite left a non-empty WAL behind while building the new DB", tmp)
            _remove(p)
    _fsync_file(tmp)
    return n


@dataclass(frozen=True)
class CommitResult:
    """What :func:`commit_rows` did."""

    db_path: str
    written: int
    backup: Backup | None
    created: bool


def commit_rows(db_path: str, staged: StagedRows, *, backup: bool = True) -> CommitResult:
    """Store the staged rows in the user DB ``db_path`` (created if missing),
    atomically, with a backup first (see the module doc)."""
    db_path = os.path.abspath(db_path)
    directory = os.path.dirname(db_path)
    existed = os.path.exists(db_path)
    state = quiesce(db_path) if existed else None
    tmp = _temp_path(directory, os.path.basename(db_path), "new")
    taken: Backup | None = None
    try:
        if backup:
            taken = take_backup(db_path)
        written = _build(db_path, tmp, staged.rows())
        if existed:
            st = os.stat(db_path)
            wal = db_path + "-wal"
            if (st.st_size, st.st_mtime_ns) != state or (os.path.exists(wal) and os.path.getsize(wal) > 0):
                raise UsageError("changed while kpatch was writing (is MIOpen running?); nothing was changed, "
                                 "run kpatch again", db_path)
            _remove(db_path + "-shm")
        elif os.path.exists(db_path):
            raise UsageError("was created by another process while kpatch was writing; nothing was changed",
                             db_path)
        os.replace(tmp, db_path)
    except BaseException:
        _remove(tmp, *(tmp + s for s in _SIDE_FILES))
        if taken is not None:
            _remove(taken.path)
        raise
    _fsync_dir(directory)
    return CommitResult(db_path, written, taken, not existed)


def restore_latest(db_path: str) -> Backup:
    """Step back one apply: put the newest backup of ``db_path`` back and
    consume it, so that the next call restores the backup before it.

    A backup file is renamed over the DB (one ``os.replace``: restored and
    consumed in the same atomic step, the DB is never half-written); for an
    "absent" marker the DB is removed, then the marker.  UsageError when
    there is no backup left or the DB is in use."""
    backups = list_backups(db_path)
    if not backups:
        raise UsageError("has no kpatch backup left to restore", db_path)
    latest = backups[-1]
    db_path = os.path.abspath(db_path)
    directory = os.path.dirname(db_path)
    if os.path.exists(db_path):
        quiesce(db_path)
    if latest.absent:
        _remove(db_path, *(db_path + s for s in _SIDE_FILES))
        _fsync_dir(directory)
        _remove(latest.path)
    else:
        os.replace(latest.path, db_path)
        _remove(db_path + "-shm")  # the old file's WAL index (its WAL is empty after quiesce)
    _fsync_dir(directory)
    return latest
