"""Writing MIOpen's user kernel DB (``.ukdb``) beside a running MIOpen:
apply, backup, revert.

MIOpen writes its user DB itself whenever it compiles a kernel at run time
(SQLite in WAL mode; it waits up to 60 s for a lock and then retries).  A
process may hold the DB open for as long as it runs, so replacing the file
(a rename) would lose what such a process commits afterwards, and could
corrupt the DB.  kpatch therefore never replaces, truncates or copies over
a user DB: every change is ONE write transaction in the live DB, through
SQLite, so SQLite's locking serialises kpatch and MIOpen exactly as it
serialises two MIOpen processes.  Rows kpatch does not change are never
touched.

:func:`commit_rows` (``kpatch apply``):

1. stage: the changed rows, already encoded as MIOpen stores them, each
   with the ``kernel_hash`` of the row the user DB held under its key when
   kpatch decided to replace it (or none), wait in a staging DB in the same
   directory (:class:`StagedRows`);
2. the live DB is opened (never through a symbolic link: :func:`refuse_links`;
   a DB that does not exist yet is built whole in a temporary file and
   linked into place, so a failed apply leaves none behind)
   and a write transaction begins (``BEGIN IMMEDIATE``, waiting up to
   :data:`BUSY_TIMEOUT` seconds while MIOpen writes);
3. a staged row whose key now holds something else than what kpatch saw
   (another process wrote it meanwhile) is not written: that row is kept
   and reported (:attr:`CommitResult.conflicts`);
4. backup: the rows about to be replaced (byte for byte) and what kpatch
   writes in their place go to a new file ``<db>.kpatch-backup-<UTC time>``
   (:func:`write_backup`), synced to disk, before anything in the DB changes;
5. the rows are stored with MIOpen's ``INSERT OR REPLACE`` and the
   transaction commits.  A failure or Ctrl-C before the commit rolls back
   (the DB is as before) and removes the backup.

:func:`restore_latest` (``kpatch revert``) steps back one apply: it checks
the newest backup (:func:`read_backup`: it opens, ``PRAGMA
integrity_check`` is ok, its schema is MIOpen's plus kpatch's record, every
row decodes to its hash) and refuses a damaged one.  Then, in one write
transaction, for each key that apply wrote: if the DB still holds what apply
wrote, the row from before is put back (or the row removed, when apply had
added it); if it already holds the row from before, nothing is done; if
another process has written the key since, its row is kept and reported.
Rows MIOpen added after the apply are never touched.  Then the backup is
consumed, so the next revert steps back through the one before.

A backup is an SQLite file with MIOpen's ``kern_db`` table (the rows apply
replaced, exactly as they were) plus ``kpatch_backup`` (one row: format,
the DB's path, when) and ``kpatch_written`` (per key: the hash apply wrote,
and whether the key had a row before).
"""

from __future__ import annotations

import os
import sqlite3
import stat
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterator

from kpatch.containers.kdb import (
    INSERT_SQL, SCHEMA_SQL, KdbEntry, KernelDB, encode_blob, key_param, key_text)
from kpatch.errors import FormatError, KpatchError, UsageError
from kpatch.atomicfile import new_file_mode, remove_quietly

BACKUP_TAG = ".kpatch-backup-"
#: Suffix of the "there was no DB" markers older kpatch versions wrote (listed, never restored).
ABSENT_SUFFIX = ".absent"
_SIDE_FILES = ("-wal", "-shm", "-journal")
#: Seconds a write waits for another process (MIOpen) to finish its write (MIOpen itself waits 60 s).
BUSY_TIMEOUT = 60.0
#: Format of the backup files this module writes.
BACKUP_FORMAT = 2

_BACKUP_SCHEMA = (
    "CREATE TABLE kpatch_backup (format INTEGER NOT NULL, db_path TEXT NOT NULL, taken TEXT NOT NULL,"
    " db_existed INTEGER NOT NULL);"
    "CREATE TABLE kpatch_written (kernel_name TEXT NOT NULL, kernel_args TEXT NOT NULL,"
    " written_hash TEXT NOT NULL, had_row INTEGER NOT NULL);"
)
_BACKUP_COLUMNS = {
    "kpatch_backup": ("format", "db_path", "taken", "db_existed"),
    "kpatch_written": ("kernel_name", "kernel_args", "written_hash", "had_row"),
}

#: One staged row: (kernel_name, kernel_args, kernel_blob, kernel_hash,
#: uncompressed_size, hash the user DB held under the key when kpatch decided, or None).
StagedRow = tuple[str, str, bytes, str, int, "str | None"]




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


def _temp_path(directory: str, base: str, kind: str) -> str:
    fd, path = tempfile.mkstemp(prefix=f".{base}.kpatch-{kind}-", suffix=".tmp", dir=directory)
    os.close(fd)
    remove_quietly(path)  # SQLite creates it; mkstemp only picked a free name
    return path


def refuse_links(db_path: str) -> None:
    """UsageError when the user DB, or one of SQLite's side files beside it
    (``-wal``, ``-shm``, ``-journal``), is a symbolic link, or the DB is not
    a regular file: kpatch never writes through a link it did not create
    (it would change whatever file the link names)."""
    for p in (db_path, *(db_path + s for s in _SIDE_FILES)):
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            raise UsageError(f"is a symbolic link (to {os.readlink(p)}); kpatch never writes through a link "
                             "it did not create: name the real file instead", p)
        if p == db_path and not stat.S_ISREG(st.st_mode):
            raise UsageError("is not a regular file", p)


def open_live(db_path: str) -> KernelDB:
    """The user DB opened for writing beside other processes (created with
    MIOpen's schema when missing), after :func:`refuse_links`."""
    refuse_links(db_path)
    try:
        return KernelDB.open(db_path, writable=True, create=True, busy_timeout=BUSY_TIMEOUT)
    except KpatchError as e:
        raise e.with_item(db_path)


@contextmanager
def _live(db_path: str, unchanged: str) -> Iterator[KernelDB]:
    """The user DB opened by :func:`open_live`, closed afterwards; SQLite
    giving up on a lock another process held past :data:`BUSY_TIMEOUT`
    becomes a UsageError saying so and ``unchanged`` (what was left as it was)."""
    db = open_live(db_path)
    try:
        yield db
    except KpatchError as e:
        if "database is locked" in e.reason or "database is busy" in e.reason:
            raise UsageError(f"another process (MIOpen) kept the DB locked for more than {BUSY_TIMEOUT:g} s; "
                             f"{unchanged}; run kpatch again when it is done", db_path) from None
        raise
    finally:
        db.close()


# --- staging ---------------------------------------------------------------------


class StagedRows:
    """Rows waiting to go into a user DB, stored encoded (bzip2 blob, MD5,
    size) in a temporary SQLite file in ``directory``, each with the hash of
    the row the user DB held under its key when kpatch decided (None: no
    row).  A later row with the same key replaces an earlier one, as MIOpen's
    INSERT OR REPLACE would (keeping the first expectation: it is what the
    user DB held)."""

    def __init__(self, directory: str, base: str = "ukdb"):
        self.path = _temp_path(directory, base, "staging")
        self._conn = None
        try:
            self._conn = sqlite3.connect(self.path, isolation_level=None)
            self._conn.text_factory = bytes
            self._conn.execute("PRAGMA journal_mode=OFF;")
            self._conn.execute("PRAGMA synchronous=OFF;")
            self._conn.execute(
                "CREATE TABLE staged (id INTEGER PRIMARY KEY, kernel_name TEXT NOT NULL, kernel_args TEXT NOT NULL,"
                " kernel_blob BLOB NOT NULL, kernel_hash TEXT NOT NULL, uncompressed_size INT NOT NULL,"
                " expected_hash TEXT, UNIQUE(kernel_name, kernel_args));")
            self._conn.execute("BEGIN;")
        except BaseException:  # e.g. a full disk: leave nothing behind
            self.close()
            raise

    def add(self, kernel_name: str, kernel_args: str, code: bytes, expected_hash: str | None = None) -> None:
        blob, md5, size = encode_blob(code)
        key = (key_param(kernel_name), key_param(kernel_args))
        row = self._conn.execute(
            "SELECT expected_hash FROM staged WHERE kernel_name = CAST(? AS TEXT) AND kernel_args = CAST(? AS TEXT);",
            key).fetchone()
        if row is not None:
            expected_hash = row[0].decode() if row[0] is not None else None
        self._conn.execute(
            "INSERT OR REPLACE INTO staged (kernel_name, kernel_args, kernel_blob, kernel_hash, uncompressed_size,"
            " expected_hash) VALUES (CAST(? AS TEXT), CAST(? AS TEXT), ?, ?, ?, ?);",
            (*key, blob, md5, size, expected_hash))

    def __len__(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM staged;").fetchone()[0])

    def rows(self) -> Iterator[StagedRow]:
        cur = self._conn.execute(
            "SELECT kernel_name, kernel_args, kernel_blob, kernel_hash, uncompressed_size, expected_hash "
            "FROM staged ORDER BY id;")
        for name, args, blob, md5, size, expected in cur:
            yield key_text(name), key_text(args), blob, md5.decode(), size, (
                expected.decode() if expected is not None else None)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        remove_quietly(self.path, *(self.path + s for s in _SIDE_FILES))

    def __enter__(self) -> "StagedRows":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- backups -----------------------------------------------------------------------


def _stamp(now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    return now.strftime("%Y%m%dT%H%M%S%fZ")


@dataclass(frozen=True)
class Backup:
    """One backup file of a user DB (``absent``: an old-format "there was no DB" marker)."""

    path: str
    db_path: str
    stamp: str
    absent: bool = False

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


@dataclass(frozen=True)
class Written:
    """One key an apply wrote: the hash it wrote, and the row it replaced (None: the key had no row)."""

    kernel_name: str
    kernel_args: str
    written_hash: str
    before: KdbEntry | None


@dataclass
class BackupContents:
    """A checked backup (:func:`read_backup`)."""

    backup: Backup
    db_existed: bool
    written: list[Written]


def write_backup(db_path: str, written: list[Written], *, db_existed: bool,
                 now: datetime | None = None) -> Backup:
    """Write a new backup of ``db_path`` recording ``written`` (see the
    module doc): built in a temporary file, synced, then linked under a name
    no other backup has (never replacing a file)."""
    directory = os.path.dirname(db_path)
    tmp = _temp_path(directory, os.path.basename(db_path), "backup")
    try:
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=DELETE;")
            conn.executescript(SCHEMA_SQL + _BACKUP_SCHEMA)
            conn.execute("BEGIN;")
            stamp = _stamp(now)
            conn.execute("INSERT INTO kpatch_backup VALUES (?, ?, ?, ?);",
                         (BACKUP_FORMAT, key_param(db_path).decode("utf-8", "replace"), stamp, int(db_existed)))
            for w in written:
                key = (key_param(w.kernel_name), key_param(w.kernel_args))
                conn.execute("INSERT INTO kpatch_written VALUES (CAST(? AS TEXT), CAST(? AS TEXT), ?, ?);",
                             (*key, w.written_hash, int(w.before is not None)))
                if w.before is not None:
                    b = w.before
                    conn.execute(INSERT_SQL, (*key, b.kernel_blob, b.kernel_hash, b.uncompressed_size))
            conn.execute("COMMIT;")
        finally:
            conn.close()
        remove_quietly(*(tmp + s for s in _SIDE_FILES))
        _fsync_file(tmp)
        while True:
            path = db_path + BACKUP_TAG + stamp
            try:
                os.link(tmp, path)  # fails if the name exists: a backup is never replaced
                break
            except FileExistsError:  # two applies in one microsecond: the name says when it was linked
                stamp = _stamp()
    finally:
        remove_quietly(tmp, *(tmp + s for s in _SIDE_FILES))
    _fsync_dir(directory)
    return Backup(path, db_path, stamp)


def read_backup(backup: Backup) -> BackupContents:
    """Check ``backup`` and read it; FormatError naming the backup and what
    is wrong when it cannot be trusted: not an SQLite file, ``PRAGMA
    integrity_check`` not ok, ``kern_db`` not MIOpen's, kpatch's record
    missing or of another format, a row that does not decode to its hash,
    or a replaced key whose row is missing."""
    if backup.absent:
        raise FormatError("is a marker written by an older kpatch, which this version cannot revert "
                          "safely; remove it (rm) to step back to older backups", backup.path)
    try:
        db = KernelDB.open(backup.path)
    except KpatchError as e:
        raise FormatError(f"is not a usable backup: {e.reason}", backup.path) from None
    try:
        result = db.integrity()
        if result != "ok":
            raise FormatError(f"is damaged (SQLite integrity_check: {result})", backup.path)
        for table, columns in _BACKUP_COLUMNS.items():
            found = tuple(r[1].decode("utf-8", "replace") if isinstance(r[1], bytes) else r[1]
                          for r in db._rows(f"PRAGMA table_info({table});"))
            if found != columns:
                raise FormatError(f"is not a kpatch backup of this version (table {table} "
                                  f"{'missing' if not found else 'has other columns'})", backup.path)
        meta = db._rows("SELECT format, db_existed FROM kpatch_backup;")
        if len(meta) != 1 or meta[0][0] != BACKUP_FORMAT:
            raise FormatError(f"is not a kpatch backup of format {BACKUP_FORMAT}", backup.path)
        before: dict[tuple[bytes, bytes], KdbEntry] = {}
        for entry in db.entries():
            if entry.error:
                raise FormatError(f"row {entry.id} is damaged: {entry.error}", backup.path)
            try:
                entry.code()
            except KpatchError as e:
                raise FormatError(f"row {entry.id} ({entry.kernel_name}) is damaged: {e.reason}",
                                  backup.path) from None
            before[(key_param(entry.kernel_name), key_param(entry.kernel_args))] = entry
        written = []
        for name, args, digest, had_row in db._rows(
                "SELECT kernel_name, kernel_args, written_hash, had_row FROM kpatch_written ORDER BY rowid;"):
            if not all(isinstance(v, bytes) for v in (name, args, digest)) or had_row not in (0, 1):
                raise FormatError("kpatch_written holds a malformed row", backup.path)
            old = before.get((name, args))
            if had_row and old is None:
                raise FormatError(f"the row replaced under {key_text(name)!r} is missing", backup.path)
            written.append(Written(key_text(name), key_text(args), digest.decode("ascii", "replace"),
                                   old if had_row else None))
        return BackupContents(backup, bool(meta[0][1]), written)
    finally:
        db.close()


# --- apply -------------------------------------------------------------------------


@dataclass
class CommitResult:
    """What :func:`commit_rows` did."""

    db_path: str
    written: int
    backup: Backup | None
    created: bool
    #: (kernel_name, kernel_args, reason) of staged rows not written, because
    #: another process wrote the key while kpatch was patching.
    conflicts: list[tuple[str, str, str]] = field(default_factory=list)


def _plan_row(db: KernelDB, row: StagedRow, result: CommitResult) -> KdbEntry | None | bool:
    """The row ``db`` holds under the staged row's key (None: none), or False
    when the staged row is not to be written (recorded in ``result``)."""
    name, args, _blob, md5, _size, expected = row
    now = db.get(name, args)
    held = now.kernel_hash if now is not None else None
    if held != expected:
        what = "added" if expected is None else ("removed" if held is None else "replaced")
        result.conflicts.append((name, args, f"another process {what} this row while kpatch was "
                                 "patching; its row is kept (run kpatch apply again)"))
        return False
    if now is not None and now.error:
        result.conflicts.append((name, args, f"its row in the user DB cannot be read ({now.error}); "
                                 "not replaced, so that nothing is lost"))
        return False
    if held == md5:
        return False
    return now


def _create_with_rows(db_path: str, staged: StagedRows, backup: bool) -> CommitResult | None:
    """A user DB that did not exist is made whole in a temporary file (MIOpen's
    schema, WAL mode, the staged rows) and linked into place, which fails if
    another process (MIOpen) created the DB meanwhile: then None, nothing
    changed, and the caller writes into that DB instead.  So a failed apply
    never leaves a DB behind."""
    directory = os.path.dirname(db_path)
    tmp = _temp_path(directory, os.path.basename(db_path), "new")
    taken: Backup | None = None
    result = CommitResult(db_path, 0, None, True)
    try:
        db = KernelDB.open(tmp, writable=True, create=True)
        try:
            with db.write_transaction():
                plan = []
                for row in staged.rows():
                    before = _plan_row(db, row, result)
                    if before is not False:
                        plan.append(row)
                        db.put_row(*row[:5])
        finally:
            db.close()
        remove_quietly(*(tmp + s for s in _SIDE_FILES))
        os.chmod(tmp, new_file_mode())
        _fsync_file(tmp)
        if backup and plan:
            taken = write_backup(db_path, [Written(r[0], r[1], r[3], None) for r in plan], db_existed=False)
        try:
            os.link(tmp, db_path)  # never replaces: fails if the DB exists now
        except FileExistsError:
            if taken is not None:
                remove_quietly(taken.path)
            return None
        result.written, result.backup = len(plan), taken
        return result
    except KpatchError as e:  # name the DB, not the temporary file it was being built in
        if taken is not None:
            remove_quietly(taken.path)
        raise type(e)(e.reason, db_path) from None
    except BaseException:
        if taken is not None:
            remove_quietly(taken.path)
        raise
    finally:
        remove_quietly(tmp, *(tmp + s for s in _SIDE_FILES))
        _fsync_dir(directory)


def commit_rows(db_path: str, staged: StagedRows, *, backup: bool = True) -> CommitResult:
    """Store the staged rows in the user DB ``db_path`` in one write
    transaction beside any other writer, with a backup first (see the
    module doc); a DB that does not exist is created whole
    (:func:`_create_with_rows`)."""
    db_path = os.path.abspath(db_path)
    refuse_links(db_path)
    if not os.path.lexists(db_path):
        done = _create_with_rows(db_path, staged, backup)
        if done is not None:
            return done
    taken: Backup | None = None
    committed = False
    result = CommitResult(db_path, 0, None, False)
    with _live(db_path, "nothing was changed") as db:
        try:
            with db.write_transaction():
                plan: list[tuple[StagedRow, KdbEntry | None]] = []
                for row in staged.rows():
                    before = _plan_row(db, row, result)
                    if before is not False:
                        plan.append((row, before))
                if backup and plan:
                    taken = write_backup(db_path, [Written(r[0], r[1], r[3], before) for r, before in plan],
                                         db_existed=True)
                for (name, args, blob, md5, size, _), _before in plan:
                    db.put_row(name, args, blob, md5, size)
            committed = True
            result.written, result.backup = len(plan), taken
        finally:
            if taken is not None and not committed:
                remove_quietly(taken.path)
    _fsync_dir(os.path.dirname(db_path))
    return result


# --- revert ------------------------------------------------------------------------


@dataclass
class RevertResult:
    """What :func:`restore_latest` did."""

    backup: Backup
    restored: list[str] = field(default_factory=list)  # keys whose row from before was put back
    removed: list[str] = field(default_factory=list)  # keys apply had added, removed again
    already: list[str] = field(default_factory=list)  # keys that already held the row from before
    kept: list[str] = field(default_factory=list)  # keys another process wrote since: kept
    db_existed: bool = True


def _label(name: str, args: str) -> str:
    return f"{name} [{args.strip()}]"


def restore_latest(db_path: str) -> RevertResult:
    """Step back one apply (see the module doc): FormatError when the newest
    backup is damaged (nothing is changed), UsageError when there is no
    backup left, the DB is missing, or another process keeps it locked."""
    db_path = os.path.abspath(db_path)
    backups = list_backups(db_path)
    if not backups:
        raise UsageError("has no kpatch backup left to restore", db_path)
    contents = read_backup(backups[-1])
    if not os.path.exists(db_path):
        raise UsageError(f"does not exist (removed since the apply of {contents.backup.when}); there is "
                         f"nothing to step back; remove {contents.backup.path} if you no longer need it", db_path)
    out = RevertResult(contents.backup, db_existed=contents.db_existed)
    with _live(db_path, "nothing was reverted") as db, db.write_transaction():
        for w in contents.written:
            label = _label(w.kernel_name, w.kernel_args)
            now = db.get(w.kernel_name, w.kernel_args)
            held = now.kernel_hash if now is not None else None
            before = w.before.kernel_hash if w.before is not None else None
            if held == before:
                out.already.append(label)
            elif held != w.written_hash:
                out.kept.append(label)
            elif w.before is None:
                db.delete(w.kernel_name, w.kernel_args)
                out.removed.append(label)
            else:
                b = w.before
                db.put_row(w.kernel_name, w.kernel_args, b.kernel_blob, b.kernel_hash, b.uncompressed_size)
                out.restored.append(label)
    remove_quietly(contents.backup.path)  # consumed: the next revert steps back through the one before
    _fsync_dir(os.path.dirname(db_path))
    return out


def count_rows(db_path: str) -> int | None:
    """How many rows ``db_path`` holds (for messages); None when it cannot be read."""
    try:
        with KernelDB.open(db_path) as db:
            return db.count()
    except KpatchError:
        return None
